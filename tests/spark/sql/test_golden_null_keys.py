"""Golden tests of records whose Kafka key is null, through Spark and a real broker: a TABLE
source skips them (Kafka Streams' table source drops a record without a key; a compacted sink
would refuse it), and a stream query that keeps its source's key writes such a record with a
null key again, in any key format (decoded, its key columns are all NULL, which an encoder would
write as a value). Input produced with confluent-kafka, output read read_committed with
confluent-kafka; the expected records are those of ksqlDB's query-validation cases
(table.json "should not blow up on null key", multi-col-keys.json "select * from stream" and
"select * from table") for the same inputs."""

from __future__ import annotations

import pytest

from oncestream.sql.language.catalog import Format
from tests.spark.sql.golden import analyze, create_topics, ddl, produce, read_output, sink_of, start, unique

# Spark starting a streaming query per test, on a loaded machine.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

T0 = 1_700_000_000_000
COMPACTED = {"cleanup.policy": "compact"}   # a table's sink topic, as ksqlDB creates it


def test_a_table_source_skips_a_record_with_a_null_key(runtime, eos_broker):
    """table.json "should not blow up on null key": CREATE TABLE OUTPUT AS SELECT * over a table
    whose second record has a null key writes the first and third only."""
    bootstrap = eos_broker.bootstrap
    in_t, out_t = unique("nk_tin"), unique("nk_tout")
    create_topics(bootstrap, in_t)
    create_topics(bootstrap, out_t, config=COMPACTED)
    table = ddl(f"CREATE TABLE INPUT (K STRING PRIMARY KEY, ID BIGINT) WITH (KAFKA_TOPIC='{in_t}', "
                "VALUE_FORMAT='DELIMITED');")
    produce(bootstrap, in_t, [(b"1", b"1", T0), (None, b"2", T0 + 1), (b"1", b"3", T0 + 2)])
    _s, analyzed = analyze("CREATE TABLE OUTPUT AS SELECT * FROM INPUT EMIT CHANGES;", {"INPUT": table})
    start(runtime, "CTAS_NK_1", analyzed, sink_of(analyzed, "OUTPUT", out_t, value_format=Format.DELIMITED))
    assert read_output(bootstrap, out_t, 2, runtime=runtime, query_id="CTAS_NK_1") == [(b"1", b"1"), (b"1", b"3")]
    runtime.stop_persistent("CTAS_NK_1")


def test_select_star_keeps_a_null_multi_column_key_null(runtime, eos_broker):
    """multi-col-keys.json "select * from stream": JSON keys {K, K2}; a record with a null key is
    written with a null key, one whose key has a NULL column with that key encoded."""
    bootstrap = eos_broker.bootstrap
    in_t, out_t = unique("nk_sin"), unique("nk_sout")
    create_topics(bootstrap, in_t, out_t)
    stream = ddl(f"CREATE STREAM INPUT (K INT KEY, K2 INT KEY, V INT) WITH (KAFKA_TOPIC='{in_t}', FORMAT='JSON');")
    produce(bootstrap, in_t, [(b'{"K":1,"K2":2}', b'{"V":0}', T0), (b'{"K":null,"K2":2}', b'{"V":0}', T0 + 1),
                              (None, b'{"V":0}', T0 + 2)])
    _s, analyzed = analyze("CREATE STREAM OUTPUT AS SELECT * FROM INPUT EMIT CHANGES;", {"INPUT": stream})
    start(runtime, "CSAS_NK_1", analyzed, sink_of(analyzed, "OUTPUT", out_t, key_format=Format.JSON))
    assert read_output(bootstrap, out_t, 3, runtime=runtime, query_id="CSAS_NK_1") == [
        (b'{"K":1,"K2":2}', b'{"V":0}'), (b'{"K":null,"K2":2}', b'{"V":0}'), (None, b'{"V":0}')]
    runtime.stop_persistent("CSAS_NK_1")


def test_select_star_from_a_table_drops_the_row_with_a_null_multi_column_key(runtime, eos_broker):
    """multi-col-keys.json "select * from table": a key with one NULL column is a key (its row
    and its tombstone are written); a null key is no row."""
    bootstrap = eos_broker.bootstrap
    in_t, out_t = unique("nk_mtin"), unique("nk_mtout")
    create_topics(bootstrap, in_t)
    create_topics(bootstrap, out_t, config=COMPACTED)
    table = ddl(f"CREATE TABLE INPUT (K INT PRIMARY KEY, K2 INT PRIMARY KEY, V INT) WITH (KAFKA_TOPIC='{in_t}', "
                "FORMAT='JSON');")
    produce(bootstrap, in_t, [(b'{"K":1,"K2":2}', b'{"V":0}', T0), (b'{"K":null,"K2":2}', b'{"V":0}', T0 + 1),
                              (b'{"K":null,"K2":2}', None, T0 + 2), (None, b'{"V":0}', T0 + 3)])
    _s, analyzed = analyze("CREATE TABLE OUTPUT AS SELECT * FROM INPUT EMIT CHANGES;", {"INPUT": table})
    start(runtime, "CTAS_NK_2", analyzed, sink_of(analyzed, "OUTPUT", out_t, key_format=Format.JSON))
    assert read_output(bootstrap, out_t, 3, runtime=runtime, query_id="CTAS_NK_2") == [
        (b'{"K":1,"K2":2}', b'{"V":0}'), (b'{"K":null,"K2":2}', b'{"V":0}'), (b'{"K":null,"K2":2}', None)]
    runtime.stop_persistent("CTAS_NK_2")
