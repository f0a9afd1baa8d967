"""Golden tests, stateful statement families: every aggregate (GROUP BY, HAVING tombstones), each
window type (windowed keys as Kafka Streams writes them), stream-stream and stream-table joins.

Input is produced before a query starts (from earliest), so its first micro-batch holds all of it
and the output is one update per key (later updates in the same batch are coalesced: see
docs/sql-on-spark.md); a second round of input checks that state carries across batches.
"""

from __future__ import annotations

import json
import struct

import pytest

from oncestream.sql.language.catalog import Format
from tests.spark.sql.golden import (
    analyze,
    create_topics,
    ddl,
    produce,
    read_output,
    read_timed_output,
    sink_of,
    start,
    unique,
)

pytestmark = [pytest.mark.spark]

T0 = 1_700_000_000_000  # a realistic epoch-ms base (Kafka Streams has no windows before the epoch)


def _long(v: int) -> bytes:
    return struct.pack(">q", v)


def _int(v: int) -> bytes:
    return struct.pack(">i", v)


def _json_values(records):
    return [(k, None if v is None else json.loads(v)) for k, v in records]


def test_every_aggregate_with_updates_across_batches_and_having(runtime, eos_broker):
    """COUNT(*), COUNT(col), SUM, MIN, MAX, AVG, COUNT_DISTINCT, COLLECT_LIST, LATEST_BY_OFFSET per
    key; a later batch updates one key from its state; HAVING COUNT(*) > 1 writes nothing for a key
    whose results have failed it so far, then its first passing result."""
    bootstrap = eos_broker.bootstrap
    topic, out_topic, having_topic = unique("agg_in"), unique("agg_out"), unique("having_out")
    create_topics(bootstrap, topic, out_topic, having_topic)
    s = ddl(f"CREATE STREAM S (ID INT KEY, K STRING, X BIGINT, D DOUBLE) WITH (KAFKA_TOPIC='{topic}', VALUE_FORMAT='JSON');")
    produce(bootstrap, topic, [
        (_int(1), b'{"K":"a","X":5,"D":1.0}', T0),
        (_int(2), b'{"K":"a","X":null,"D":2.0}', T0 + 1),
        (_int(3), b'{"K":"a","X":5,"D":3.0}', T0 + 2),
        (_int(4), b'{"K":"b","X":-1,"D":0.5}', T0 + 3),
    ])
    _s, analyzed = analyze(
        "CREATE TABLE AGG AS SELECT K, COUNT(*) AS C, COUNT(X) AS CX, SUM(X) AS SX, MIN(X) AS MN, MAX(X) AS MX, "
        "AVG(D) AS AV, COUNT_DISTINCT(X) AS CD, COLLECT_LIST(X) AS CL, LATEST_BY_OFFSET(X) AS L "
        "FROM S GROUP BY K EMIT CHANGES;", {"S": s})
    start(runtime, "CTAS_AGG_1", analyzed, sink_of(analyzed, "AGG", out_topic))
    _s, having = analyze("CREATE TABLE H AS SELECT K, COUNT(*) AS C FROM S GROUP BY K HAVING COUNT(*) > 1 EMIT CHANGES;",
                         {"S": s})
    start(runtime, "CTAS_H_2", having, sink_of(having, "H", having_topic))
    got = sorted(_json_values(read_output(bootstrap, out_topic, 2, runtime=runtime, query_id="CTAS_AGG_1")), key=repr)
    assert got == [   # COLLECT_LIST keeps the NULL (ksqlDB's collect-list.json "collect_list string")
        (b"a", {"C": 3, "CX": 2, "SX": 10, "MN": 5, "MX": 5, "AV": 2.0, "CD": 1, "CL": [5, None, 5], "L": 5}),
        (b"b", {"C": 1, "CX": 1, "SX": -1, "MN": -1, "MX": -1, "AV": 0.5, "CD": 1, "CL": [-1], "L": -1}),
    ]
    # b's only result fails HAVING: ksqlDB writes no tombstone for a row that was never written
    assert read_output(bootstrap, having_topic, 1, runtime=runtime, query_id="CTAS_H_2") == [(b"a", b'{"C":3}')]

    produce(bootstrap, topic, [(_int(5), b'{"K":"b","X":7,"D":1.5}', T0 + 10)])
    got = _json_values(read_output(bootstrap, out_topic, 3, runtime=runtime, query_id="CTAS_AGG_1"))
    assert got[2:] == [(b"b", {"C": 2, "CX": 2, "SX": 6, "MN": -1, "MX": 7, "AV": 1.0, "CD": 2, "CL": [-1, 7], "L": 7})]
    assert read_output(bootstrap, having_topic, 2, runtime=runtime, query_id="CTAS_H_2")[1:] == [(b"b", b'{"C":2}')]
    runtime.stop_persistent("CTAS_AGG_1")
    runtime.stop_persistent("CTAS_H_2")


def test_tumbling_and_hopping_windows_write_windowed_keys(runtime, eos_broker):
    """TUMBLING (SIZE 10 s) and HOPPING (SIZE 10 s, ADVANCE BY 5 s): one row per (key, window),
    key = KAFKA STRING bytes + 8-byte big-endian window start; WINDOWSTART/WINDOWEND selectable."""
    bootstrap = eos_broker.bootstrap
    topic, tumbling_topic, hopping_topic = unique("win_in"), unique("tumbling"), unique("hopping")
    create_topics(bootstrap, topic, tumbling_topic, hopping_topic)
    s = ddl(f"CREATE STREAM S (ID INT KEY, K STRING) WITH (KAFKA_TOPIC='{topic}', VALUE_FORMAT='JSON');")
    produce(bootstrap, topic, [(_int(1), b'{"K":"a"}', T0 + 1000), (_int(2), b'{"K":"a"}', T0 + 6000),
                               (_int(3), b'{"K":"a"}', T0 + 12000)])
    _s, tumbling = analyze("CREATE TABLE TW AS SELECT K, COUNT(*) AS C, WINDOWSTART AS WS, WINDOWEND AS WE FROM S "
                           "WINDOW TUMBLING (SIZE 10 SECONDS) GROUP BY K EMIT CHANGES;", {"S": s})
    start(runtime, "CTAS_TW_1", tumbling, sink_of(tumbling, "TW", tumbling_topic))
    _s, hopping = analyze("CREATE TABLE HW AS SELECT K, COUNT(*) AS C FROM S "
                          "WINDOW HOPPING (SIZE 10 SECONDS, ADVANCE BY 5 SECONDS) GROUP BY K EMIT CHANGES;", {"S": s})
    start(runtime, "CTAS_HW_2", hopping, sink_of(hopping, "HW", hopping_topic))
    got = sorted(read_output(bootstrap, tumbling_topic, 2, runtime=runtime, query_id="CTAS_TW_1"))
    assert got == [
        (b"a" + _long(T0), f'{{"C":2,"WS":{T0},"WE":{T0 + 10000}}}'.encode()),
        (b"a" + _long(T0 + 10000), f'{{"C":1,"WS":{T0 + 10000},"WE":{T0 + 20000}}}'.encode()),
    ]
    got = sorted(read_output(bootstrap, hopping_topic, 4, runtime=runtime, query_id="CTAS_HW_2"))
    # T0 is a multiple of 5 s: windows starting T0-5s, T0, T0+5s, T0+10s.
    assert got == [(b"a" + _long(T0 - 5000), b'{"C":1}'), (b"a" + _long(T0), b'{"C":2}'),
                   (b"a" + _long(T0 + 5000), b'{"C":2}'), (b"a" + _long(T0 + 10000), b'{"C":1}')]
    runtime.stop_persistent("CTAS_TW_1")
    runtime.stop_persistent("CTAS_HW_2")


def _last_per_key(records):
    """The last record of each key: ksqlDB writes every update, our first micro-batch coalesces
    the updates of one key (module docstring), so both are compared at their last value."""
    return {k: v for k, v in records}


def test_hopping_windows_near_time_zero_never_start_before_it(runtime, eos_broker):
    """ksqlDB's query-validation case "min hopping" (hopping-windows.json): records at 0, 10 s and
    30 s in HOPPING (SIZE 30 s, ADVANCE BY 10 s) windows; Kafka Streams opens no window starting
    before 0 (Spark would open [-20 s, 10 s) and [-10 s, 20 s) too)."""
    bootstrap = eos_broker.bootstrap
    topic, out_topic = unique("hop0_in"), unique("hop0_out")
    create_topics(bootstrap, topic, out_topic)
    s = ddl(f"CREATE STREAM TEST (ID BIGINT KEY, NAME varchar, VALUE bigint) WITH (kafka_topic='{topic}', "
            "value_format='DELIMITED');")
    # librdkafka reads timestamp 0 as "now": ksqlDB's record at 0 is produced at 1 ms, which falls
    # in the same windows.
    produce(bootstrap, topic, [(_long(0), b"zero,0", 1), (_long(0), b"100,5", 10000),
                               (_long(100), b"100,100", 30000)])
    _s, analyzed = analyze("CREATE TABLE S2 as SELECT ID, min(value) FROM test "
                           "WINDOW HOPPING (SIZE 30 SECONDS, ADVANCE BY 10 SECONDS) group by id;", {"TEST": s})
    start(runtime, "CTAS_S2_HOP0", analyzed, sink_of(analyzed, "S2", out_topic, value_format=Format.DELIMITED))
    # ksqlDB's outputs: (key, window start, value).
    ksqldb = [(0, 0, b"0"), (0, 0, b"0"), (0, 10000, b"5"),
              (100, 10000, b"100"), (100, 20000, b"100"), (100, 30000, b"100")]
    expected = _last_per_key((_long(k) + _long(ws), v) for k, ws, v in ksqldb)
    got = _last_per_key(read_output(bootstrap, out_topic, len(expected), runtime=runtime, query_id="CTAS_S2_HOP0"))
    assert got == expected
    runtime.stop_persistent("CTAS_S2_HOP0")


def test_stream_rows_whose_group_by_expression_is_null_are_dropped(runtime, eos_broker):
    """ksqlDB's query-validation cases (group-by.json) "should exclude any stream row whose single
    GROUP BY expression resolves to NULL" and "multiple expressions" (rows with any NULL key
    expression dropped: a NULL value column, a null value, a null key)."""
    bootstrap = eos_broker.bootstrap
    single_in, single_out, multi_in, multi_out = (unique("gbnull_s_in"), unique("gbnull_s_out"),
                                                  unique("gbnull_m_in"), unique("gbnull_m_out"))
    create_topics(bootstrap, single_in, single_out, multi_in, multi_out)
    single = ddl(f"CREATE STREAM TEST (K STRING KEY, str STRING, pos INT) WITH (kafka_topic='{single_in}', "
                 "value_format='DELIMITED');")
    produce(bootstrap, single_in, [(None, b"xx,1", T0), (None, b"x,", T0 + 1), (None, b"xx,1", T0 + 2)])
    multi = ddl(f"CREATE STREAM TEST (f1 INT KEY, f2 INT) WITH (kafka_topic='{multi_in}', format='JSON');")
    produce(bootstrap, multi_in, [(b"1", b'{"f2":"2"}', T0), (b"2", b'{"f2":"4"}', T0 + 1),
                                  (b"1", b'{"f2":null}', T0 + 2), (b"1", None, T0 + 3),
                                  (None, b'{"f2":"1"}', T0 + 4), (b"1", b'{"f2":"2"}', T0 + 5),
                                  (b"2", b'{"f2":"4"}', T0 + 6), (b"2", b'{"f2":"1"}', T0 + 7)])
    _s, single_q = analyze("CREATE TABLE OUTPUT AS SELECT SUBSTRING(str, pos), COUNT() FROM TEST "
                           "GROUP BY SUBSTRING(str, pos);", {"TEST": single})
    start(runtime, "CTAS_GBNULL_S", single_q, sink_of(single_q, "OUTPUT", single_out, value_format=Format.DELIMITED))
    _s, multi_q = analyze("CREATE TABLE OUTPUT AS SELECT f2, f1, f2+f1, COUNT(*) FROM TEST GROUP BY f1, f2;",
                          {"TEST": multi})
    start(runtime, "CTAS_GBNULL_M", multi_q, sink_of(multi_q, "OUTPUT", multi_out, key_format=Format.JSON))
    got = _last_per_key(read_output(bootstrap, single_out, 1, runtime=runtime, query_id="CTAS_GBNULL_S"))
    assert got == _last_per_key([(b"xx", b"1"), (b"xx", b"2")])
    ksqldb = [({"F1": 1, "F2": 2}, {"KSQL_COL_0": 3, "KSQL_COL_1": 1}),
              ({"F1": 2, "F2": 4}, {"KSQL_COL_0": 6, "KSQL_COL_1": 1}),
              ({"F1": 1, "F2": 2}, {"KSQL_COL_0": 3, "KSQL_COL_1": 2}),
              ({"F1": 2, "F2": 4}, {"KSQL_COL_0": 6, "KSQL_COL_1": 2}),
              ({"F1": 2, "F2": 1}, {"KSQL_COL_0": 3, "KSQL_COL_1": 1})]
    expected = _last_per_key((json.dumps(k, sort_keys=True), v) for k, v in ksqldb)
    records = read_output(bootstrap, multi_out, len(expected), runtime=runtime, query_id="CTAS_GBNULL_M")
    got = _last_per_key((None if k is None else json.dumps(json.loads(k), sort_keys=True),
                         None if v is None else json.loads(v)) for k, v in records)
    assert got == expected
    runtime.stop_persistent("CTAS_GBNULL_S")
    runtime.stop_persistent("CTAS_GBNULL_M")


def test_session_windows_are_written_when_the_watermark_closes_them(runtime, eos_broker):
    """SESSION (5 s, GRACE PERIOD 0) EMIT FINAL: Spark writes a session once the watermark passes it
    (append mode; see docs/sql-on-spark.md; EMIT CHANGES: test_golden_sessions.py);
    key = key bytes + 8-byte end + 8-byte start, as Kafka Streams'
    session key; WINDOWEND is the session's last event time, as ksqlDB."""
    bootstrap = eos_broker.bootstrap
    topic, out_topic = unique("sess_in"), unique("sess_out")
    create_topics(bootstrap, topic, out_topic)
    s = ddl(f"CREATE STREAM S (ID INT KEY, K STRING) WITH (KAFKA_TOPIC='{topic}', VALUE_FORMAT='JSON');")
    produce(bootstrap, topic, [(_int(1), b'{"K":"a"}', T0 + 1000), (_int(2), b'{"K":"a"}', T0 + 3000),
                               (_int(3), b'{"K":"b"}', T0 + 4000),
                               # far later: moves the watermark past the sessions above
                               (_int(4), b'{"K":"c"}', T0 + 60000)])
    _s, analyzed = analyze("CREATE TABLE SW AS SELECT K, COUNT(*) AS C, WINDOWEND AS WE FROM S "
                           "WINDOW SESSION (5 SECONDS, GRACE PERIOD 0 SECONDS) GROUP BY K EMIT FINAL;", {"S": s})
    start(runtime, "CTAS_SW_1", analyzed, sink_of(analyzed, "SW", out_topic))
    got = sorted(read_output(bootstrap, out_topic, 2, runtime=runtime, query_id="CTAS_SW_1"))
    assert got == [
        (b"a" + _long(T0 + 3000) + _long(T0 + 1000), f'{{"C":2,"WE":{T0 + 3000}}}'.encode()),
        (b"b" + _long(T0 + 4000) + _long(T0 + 4000), f'{{"C":1,"WE":{T0 + 4000}}}'.encode()),
    ]
    runtime.stop_persistent("CTAS_SW_1")


def test_stream_stream_join_within(runtime, eos_broker):
    """INNER JOIN WITHIN 5 SECONDS: a right row 2 s after the left one joins, one 20 s after does
    not; LEFT JOIN emits the unmatched left row with nulls once the watermark closes its window."""
    bootstrap = eos_broker.bootstrap
    left_t, right_t, inner_t, left_out = unique("l"), unique("r"), unique("inner"), unique("leftj")
    create_topics(bootstrap, left_t, right_t, inner_t, left_out)
    left = ddl(f"CREATE STREAM L (ID INT KEY, LV STRING) WITH (KAFKA_TOPIC='{left_t}', VALUE_FORMAT='JSON');")
    right = ddl(f"CREATE STREAM R (ID INT KEY, RV STRING) WITH (KAFKA_TOPIC='{right_t}', VALUE_FORMAT='JSON');")
    # Spark's watermark is the minimum over both sides: each side gets a far-later "tick".
    produce(bootstrap, left_t, [(_int(1), b'{"LV":"l1"}', T0 + 1000), (_int(2), b'{"LV":"l2"}', T0 + 1000),
                                (_int(8), b'{"LV":"tick"}', T0 + 90000)])
    produce(bootstrap, right_t, [(_int(1), b'{"RV":"r1"}', T0 + 3000), (_int(2), b'{"RV":"late"}', T0 + 21000),
                                 (_int(9), b'{"RV":"tick"}', T0 + 90000)])
    sources = {"L": left, "R": right}
    _s, inner = analyze("CREATE STREAM J AS SELECT L.ID, LV, RV FROM L JOIN R WITHIN 5 SECONDS ON L.ID = R.ID "
                        "EMIT CHANGES;", sources)
    start(runtime, "CSAS_J_1", inner, sink_of(inner, "J", inner_t))
    _s, outer = analyze("CREATE STREAM LJ AS SELECT L.ID, LV, RV FROM L LEFT JOIN R WITHIN 5 SECONDS GRACE PERIOD "
                        "0 SECONDS ON L.ID = R.ID EMIT CHANGES;", sources)
    start(runtime, "CSAS_LJ_2", outer, sink_of(outer, "LJ", left_out))
    assert read_output(bootstrap, inner_t, 1, runtime=runtime, query_id="CSAS_J_1") == \
        [(_int(1), b'{"LV":"l1","RV":"r1"}')]
    assert sorted(read_output(bootstrap, left_out, 2, runtime=runtime, query_id="CSAS_LJ_2")) == \
        [(_int(1), b'{"LV":"l1","RV":"r1"}'), (_int(2), b'{"LV":"l2","RV":null}')]
    runtime.stop_persistent("CSAS_J_1")
    runtime.stop_persistent("CSAS_LJ_2")


def test_inner_stream_stream_join_of_rows_at_the_epoch(runtime, eos_broker):
    """ksqlDB's query-validation cases "aliased join source" (identifiers.json): an INNER JOIN
    WITHIN of two rows whose ROWTIME is 0 (the epoch) writes their joined row, stamped 0. Spark's
    first watermark is 0 and would drop a row at event time 0 as late (compile/joins.py)."""
    bootstrap = eos_broker.bootstrap
    left_t, right_t, out_t = unique("l0"), unique("r0"), unique("j0")
    create_topics(bootstrap, left_t, right_t, out_t)
    # librdkafka reads a record timestamp of 0 as "now": ROWTIME 0 comes from a TIMESTAMP column
    left = ddl(f"CREATE STREAM I1 (FOO INT KEY, BAR INT, TS BIGINT) WITH (KAFKA_TOPIC='{left_t}', VALUE_FORMAT='JSON', "
               "TIMESTAMP='TS');")
    right = ddl(f"CREATE STREAM I2 (FOO INT KEY, BAR INT, TS BIGINT) WITH (KAFKA_TOPIC='{right_t}', "
                "VALUE_FORMAT='JSON', TIMESTAMP='TS');")
    produce(bootstrap, left_t, [(_int(1), b'{"BAR":2,"TS":0}', T0)])
    produce(bootstrap, right_t, [(_int(1), b'{"BAR":3,"TS":0}', T0)])
    _s, inner = analyze("CREATE STREAM J0 AS SELECT I1.FOO, I1.BAR, I2.BAR FROM I1 JOIN I2 WITHIN 1 MINUTE "
                        "ON I1.FOO = I2.FOO EMIT CHANGES;", {"I1": left, "I2": right})
    start(runtime, "CSAS_J0_1", inner, sink_of(inner, "J0", out_t))
    assert read_timed_output(bootstrap, out_t, 1, runtime=runtime, query_id="CSAS_J0_1") == \
        [(_int(1), b'{"I1_BAR":2,"I2_BAR":3}', 0)]
    runtime.stop_persistent("CSAS_J0_1")


def test_stream_table_join_uses_the_table_row_current_at_each_stream_row(runtime, eos_broker):
    """Stream LEFT JOIN table on the table's key: each stream row joins the table's latest row
    at its ROWTIME (updates and a tombstone in between); INNER drops rows without a table row."""
    bootstrap = eos_broker.bootstrap
    s_t, t_t, left_out, inner_out = unique("st_s"), unique("st_t"), unique("st_left"), unique("st_inner")
    create_topics(bootstrap, s_t, t_t, left_out, inner_out)
    stream = ddl(f"CREATE STREAM CLICKS (ID INT KEY, USERID INT, PAGE STRING) WITH (KAFKA_TOPIC='{s_t}', VALUE_FORMAT='JSON');")
    table = ddl(f"CREATE TABLE USERS (UID INT PRIMARY KEY, NAME STRING) WITH (KAFKA_TOPIC='{t_t}', VALUE_FORMAT='JSON');")
    produce(bootstrap, t_t, [(_int(1), b'{"NAME":"ann"}', T0 + 100), (_int(2), b'{"NAME":"bob"}', T0 + 100),
                             (_int(1), b'{"NAME":"anna"}', T0 + 2500), (_int(2), None, T0 + 2500)])
    produce(bootstrap, s_t, [(_int(10), b'{"USERID":1,"PAGE":"p1"}', T0 + 1000),
                             (_int(11), b'{"USERID":2,"PAGE":"p2"}', T0 + 2000),
                             (_int(12), b'{"USERID":1,"PAGE":"p3"}', T0 + 3000),
                             (_int(13), b'{"USERID":2,"PAGE":"p4"}', T0 + 3000),
                             (_int(14), b'{"USERID":3,"PAGE":"p5"}', T0 + 3000)])
    sources = {"CLICKS": stream, "USERS": table}
    _s, left = analyze("CREATE STREAM ENRICHED AS SELECT C.USERID, C.PAGE, U.NAME FROM CLICKS C "
                       "LEFT JOIN USERS U ON C.USERID = U.UID EMIT CHANGES;", sources)
    start(runtime, "CSAS_ENRICHED_1", left, sink_of(left, "ENRICHED", left_out))
    _s, inner = analyze("CREATE STREAM KNOWN AS SELECT C.USERID, C.PAGE, U.NAME FROM CLICKS C "
                        "JOIN USERS U ON C.USERID = U.UID EMIT CHANGES;", sources)
    start(runtime, "CSAS_KNOWN_2", inner, sink_of(inner, "KNOWN", inner_out))
    assert sorted(read_output(bootstrap, left_out, 5, runtime=runtime, query_id="CSAS_ENRICHED_1")) == sorted([
        (_int(1), b'{"PAGE":"p1","NAME":"ann"}'), (_int(2), b'{"PAGE":"p2","NAME":"bob"}'),
        (_int(1), b'{"PAGE":"p3","NAME":"anna"}'), (_int(2), b'{"PAGE":"p4","NAME":null}'),
        (_int(3), b'{"PAGE":"p5","NAME":null}')])
    assert sorted(read_output(bootstrap, inner_out, 3, runtime=runtime, query_id="CSAS_KNOWN_2")) == sorted([
        (_int(1), b'{"PAGE":"p1","NAME":"ann"}'), (_int(2), b'{"PAGE":"p2","NAME":"bob"}'),
        (_int(1), b'{"PAGE":"p3","NAME":"anna"}')])
    runtime.stop_persistent("CSAS_ENRICHED_1")
    runtime.stop_persistent("CSAS_KNOWN_2")


def test_a_restarted_aggregation_resumes_from_its_checkpoint_exactly_once(runtime, eos_broker):
    """Stop a CTAS at a batch boundary and start it again under the same query id (as a node
    taking the query over does): its state and offsets come from the checkpoint, so the next
    update continues the counts and nothing already written is written again."""
    bootstrap = eos_broker.bootstrap
    topic, out = unique("restart_in"), unique("restart_out")
    create_topics(bootstrap, topic, out)
    s = ddl(f"CREATE STREAM S (ID INT KEY, K STRING) WITH (KAFKA_TOPIC='{topic}', VALUE_FORMAT='JSON');")
    produce(bootstrap, topic, [(_int(1), b'{"K":"a"}', T0), (_int(2), b'{"K":"a"}', T0 + 1), (_int(3), b'{"K":"b"}', T0 + 2)])
    _s, analyzed = analyze("CREATE TABLE CNT AS SELECT K, COUNT(*) AS C FROM S GROUP BY K EMIT CHANGES;", {"S": s})
    sink = sink_of(analyzed, "CNT", out)
    start(runtime, "CTAS_CNT_9", analyzed, sink)
    assert sorted(read_output(bootstrap, out, 2, runtime=runtime, query_id="CTAS_CNT_9")) == \
        [(b"a", b'{"C":2}'), (b"b", b'{"C":1}')]
    runtime.stop_persistent("CTAS_CNT_9")
    produce(bootstrap, topic, [(_int(4), b'{"K":"a"}', T0 + 3)])
    # auto.offset.reset no longer matters: the checkpoint holds the offsets.
    start(runtime, "CTAS_CNT_9", analyzed, sink, properties={})
    got = read_output(bootstrap, out, 3, runtime=runtime, query_id="CTAS_CNT_9")
    assert got[2:] == [(b"a", b'{"C":3}')]
    assert len(read_output(bootstrap, out, 3)) == 3
    runtime.stop_persistent("CTAS_CNT_9")
