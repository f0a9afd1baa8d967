"""Golden tests of formats through whole queries (DELIMITED in and out, KAFKA values, JSON keys),
of a table source's changelog (tombstones kept, rows failing WHERE deleted) and of a query that
cannot run (ERROR status, the runtime and its other queries unaffected)."""

from __future__ import annotations

import struct

import pytest

from oncestream.sql.engine.runtime import ERROR, NOT_RUNNING, RUNNING, sink_topic_config
from oncestream.sql.language.catalog import Format
from tests.spark.sql.golden import analyze, create_topics, ddl, produce, read_output, sink_of, start, unique

pytestmark = [pytest.mark.spark]

T0 = 1_700_000_000_000


def test_delimited_source_to_delimited_with_json_key_and_to_kafka_value(runtime, eos_broker):
    """A DELIMITED stream (pipe-delimited, JSON key) re-keyed into DELIMITED with a JSON key, and
    projected into a KAFKA-format single BIGINT value with a KAFKA BIGINT key."""
    bootstrap = eos_broker.bootstrap
    topic, csv_out, kafka_out = unique("csv_in"), unique("csv_out"), unique("kafka_out")
    create_topics(bootstrap, topic, csv_out, kafka_out)
    s = ddl(f"CREATE STREAM S (K STRING KEY, NAME STRING, N BIGINT, D DOUBLE) WITH (KAFKA_TOPIC='{topic}', "
            "KEY_FORMAT='JSON', VALUE_FORMAT='DELIMITED', VALUE_DELIMITER='|');")
    produce(bootstrap, topic, [(b'"k1"', b'a, b|5|1.5', T0), (b'"k2"', b'"q""x"||-2.0', T0 + 1), (None, b'c|7|', T0 + 2)])
    _s, csv_query = analyze("CREATE STREAM C AS SELECT NAME, N, K AS OLDKEY FROM S PARTITION BY NAME EMIT CHANGES;", {"S": s})
    start(runtime, "CSAS_C_1", csv_query, sink_of(csv_query, "C", csv_out, key_format=Format.JSON,
                                                   value_format=Format.DELIMITED))
    _s, kafka_query = analyze("CREATE STREAM KV AS SELECT N, N * 10 AS TEN FROM S PARTITION BY N EMIT CHANGES;",
                              {"S": s})
    start(runtime, "CSAS_KV_2", kafka_query, sink_of(kafka_query, "KV", kafka_out, key_format=Format.KAFKA,
                                                      value_format=Format.KAFKA))
    assert read_output(bootstrap, csv_out, 3, runtime=runtime, query_id="CSAS_C_1") == [
        (b'"a, b"', b"5,k1"), (b'"q\\"x"', b",k2"), (b'"c"', b"7,")]
    assert read_output(bootstrap, kafka_out, 3, runtime=runtime, query_id="CSAS_KV_2") == [
        (struct.pack(">q", 5), struct.pack(">q", 50)), (None, None), (struct.pack(">q", 7), struct.pack(">q", 70))]
    runtime.stop_persistent("CSAS_C_1")
    runtime.stop_persistent("CSAS_KV_2")


def test_delimited_sink_quotes_as_commons_csv_1_4_and_writes_a_null_single_key_as_null(runtime, eos_broker):
    """ksqlDB's DELIMITED writer (commons-csv 1.4, QuoteMode.MINIMAL): a first field ``-10`` or
    ``-k`` is quoted, a later ``!`` and white space at either end are quoted; DECIMAL is plain at
    its scale; TRIM is Java's String.trim (tabs too); a null one-column key is a null key
    (QTT date.json, bytes-and-strings.json, string.json, delimited.json)."""
    bootstrap = eos_broker.bootstrap
    topic, out = unique("quote_in"), unique("quote_out")
    create_topics(bootstrap, topic, out)
    s = ddl(f"CREATE STREAM Q (K STRING KEY, I INT, S STRING, M DECIMAL(33, 16)) WITH (KAFKA_TOPIC='{topic}', "
            "FORMAT='DELIMITED');")
    produce(bootstrap, topic, [(b"k1", b'-10," \t x \t",-12345.12', T0), (None, b"5,!,0", T0 + 1),
                               (b'"-k"', b"7,a,.5", T0 + 2)])
    _s, analyzed = analyze("CREATE STREAM QO AS SELECT K, I, S, M, TRIM(S) AS TS FROM Q EMIT CHANGES;", {"Q": s})
    start(runtime, "CSAS_QO_1", analyzed, sink_of(analyzed, "QO", out, key_format=Format.DELIMITED,
                                                   value_format=Format.DELIMITED))
    assert read_output(bootstrap, out, 3, runtime=runtime, query_id="CSAS_QO_1") == [
        (b"k1", b'"-10"," \t x \t",-12345.1200000000000000,x'),
        (None, b'5,"!",0.0000000000000000,"!"'),
        (b'"-k"', b"7,a,0.5000000000000000,a")]
    runtime.stop_persistent("CSAS_QO_1")


def test_table_source_changelog_keeps_tombstones_and_deletes_rows_failing_where(runtime, eos_broker):
    """CTAS over a table: a row passing WHERE is written, a row failing it becomes a tombstone of
    its key, an upstream tombstone stays a tombstone; the sink topic is a compacted changelog."""
    bootstrap = eos_broker.bootstrap
    topic, out = unique("tbl_in"), unique("tbl_out")
    create_topics(bootstrap, topic, out)
    table = ddl(f"CREATE TABLE T (ID INT PRIMARY KEY, NAME STRING, X INT) WITH (KAFKA_TOPIC='{topic}', VALUE_FORMAT='JSON');")
    key = struct.pack(">i", 1)
    produce(bootstrap, topic, [(key, b'{"NAME":"a","X":5}', T0), (key, b'{"NAME":"a","X":0}', T0 + 1), (key, None, T0 + 2),
                               (struct.pack(">i", 2), b'{"NAME":"b","X":9}', T0 + 3)])
    _s, analyzed = analyze("CREATE TABLE BIG AS SELECT ID, UCASE(NAME) AS NAME FROM T WHERE X > 1 EMIT CHANGES;", {"T": table})
    sink = sink_of(analyzed, "BIG", out)
    assert sink_topic_config(sink) == {"cleanup.policy": "compact"}
    start(runtime, "CTAS_BIG_1", analyzed, sink)
    assert read_output(bootstrap, out, 4, runtime=runtime, query_id="CTAS_BIG_1") == [
        (key, b'{"NAME":"A"}'), (key, None), (key, None), (struct.pack(">i", 2), b'{"NAME":"B"}')]
    runtime.stop_persistent("CTAS_BIG_1")


def test_a_query_that_cannot_run_shows_error_and_the_others_keep_running(runtime, eos_broker):
    """A sink format that cannot hold the query's columns (an ARRAY in DELIMITED) fails when the
    query starts: start_persistent records ERROR with the reason instead of raising; a query
    started next to it runs."""
    bootstrap = eos_broker.bootstrap
    topic, out, ok_out = unique("err_in"), unique("err_out"), unique("ok_out")
    create_topics(bootstrap, topic, out, ok_out)
    table = ddl(f"CREATE TABLE T (ID INT PRIMARY KEY, NAME STRING) WITH (KAFKA_TOPIC='{topic}', VALUE_FORMAT='JSON');")
    _s, analyzed = analyze("CREATE TABLE ARR AS SELECT ID, ARRAY[NAME] AS NAMES FROM T EMIT CHANGES;", {"T": table})
    runtime.start_persistent(_info("CTAS_ARR_1", analyzed), analyzed,
                             sink_of(analyzed, "ARR", out, value_format=Format.DELIMITED), {})
    status = runtime.status("CTAS_ARR_1")
    assert status.state == ERROR
    assert "The 'DELIMITED' format does not support type 'ARRAY'" in (status.error or "")
    _s, ok = analyze("CREATE TABLE COPY AS SELECT ID, NAME FROM T EMIT CHANGES;", {"T": table})
    start(runtime, "CTAS_COPY_2", ok, sink_of(ok, "COPY", ok_out))
    produce(bootstrap, topic, [(struct.pack(">i", 3), b'{"NAME":"z"}', T0)])
    assert read_output(bootstrap, ok_out, 1, runtime=runtime, query_id="CTAS_COPY_2") == \
        [(struct.pack(">i", 3), b'{"NAME":"z"}')]
    assert "CTAS_COPY_2" in runtime.running()
    assert "CTAS_ARR_1" not in runtime.running()
    runtime.stop_persistent("CTAS_COPY_2")
    runtime.stop_persistent("CTAS_ARR_1")
    assert runtime.status("CTAS_ARR_1").state == NOT_RUNNING
    assert runtime.status("CTAS_COPY_2").state != RUNNING


def _info(query_id, analyzed):
    from oncestream.sql.language.catalog import QueryInfo

    return QueryInfo(query_id=query_id, statement="", sink="", sources=tuple(analyzed.sources), query=analyzed.query,
                     output_columns=tuple(analyzed.columns), command_offset=0)


@pytest.mark.slow  # waits for Spark to notice the deleted topic and fail the query
def test_a_query_failing_while_running_shows_error_with_its_cause(runtime, eos_broker):
    """The source topic of a running query is deleted: Spark fails the query (data loss, the
    connector's failOnDataLoss default); status() turns RUNNING into ERROR with the cause, and
    nothing is raised into the caller."""
    import time

    from confluent_kafka.admin import AdminClient

    bootstrap = eos_broker.bootstrap
    topic, out = unique("doomed"), unique("doomed_out")
    create_topics(bootstrap, topic, out)
    s = ddl(f"CREATE STREAM S (ID INT KEY, NAME STRING) WITH (KAFKA_TOPIC='{topic}', VALUE_FORMAT='JSON');")
    produce(bootstrap, topic, [(struct.pack(">i", 1), b'{"NAME":"x"}', T0)])
    _s, analyzed = analyze("CREATE STREAM C AS SELECT ID, NAME FROM S EMIT CHANGES;", {"S": s})
    start(runtime, "CSAS_DOOMED_1", analyzed, sink_of(analyzed, "C", out))
    assert read_output(bootstrap, out, 1, runtime=runtime, query_id="CSAS_DOOMED_1") == \
        [(struct.pack(">i", 1), b'{"NAME":"x"}')]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics([topic]).values():
        future.result(30)
    deadline = time.monotonic() + 180
    while runtime.status("CSAS_DOOMED_1").state == RUNNING and time.monotonic() < deadline:
        time.sleep(0.5)
    status = runtime.status("CSAS_DOOMED_1")
    assert status.state == ERROR, status
    assert "deleted" in (status.error or ""), status.error
    assert "CSAS_DOOMED_1" not in runtime.running()
    runtime.stop_persistent("CSAS_DOOMED_1")
