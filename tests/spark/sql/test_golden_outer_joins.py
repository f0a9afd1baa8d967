"""Golden tests: stream-stream LEFT/RIGHT/FULL OUTER joins written as ksqlDB writes them
(``compile.stream_join_steps``). Without GRACE PERIOD an unmatched row is written at once with
nulls, also when input stops after it (Spark's own join would wait for a watermark that never
comes); with GRACE PERIOD it is written once stream time passes its window's end + grace, and never
when a match arrived. Outputs read read_committed by confluent-kafka, with record timestamps
(Kafka Streams' KStreamKStreamJoin: the larger of the two rows', an unmatched row's own)."""

from __future__ import annotations

import json
import struct

import pytest

from tests.spark.sql.golden import analyze, create_topics, ddl, produce, read_timed_output, sink_of, start, unique

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

T0 = 1_700_000_000_000
WAIT_S = 600.0       # a bound on waiting for output (a micro-batch with a Python operator takes minutes under load)


def _int(v: int) -> bytes:
    return struct.pack(">i", v)


def _rows(records):
    return [(struct.unpack(">i", k)[0], json.loads(v), ts) for k, v, ts in records]


def _streams(bootstrap: str, prefix: str):
    left_t, right_t = unique(f"{prefix}_l"), unique(f"{prefix}_r")
    create_topics(bootstrap, left_t, right_t)
    left = ddl(f"CREATE STREAM L (ID INT KEY, LV STRING) WITH (KAFKA_TOPIC='{left_t}', VALUE_FORMAT='JSON');")
    right = ddl(f"CREATE STREAM R (ID INT KEY, RV STRING) WITH (KAFKA_TOPIC='{right_t}', VALUE_FORMAT='JSON');")
    return left_t, right_t, {"L": left, "R": right}


def _started(runtime, bootstrap: str, prefix: str, statement: str, query_id: str, left_rows, right_rows):
    """Streams L and R (``_streams``) with their first rows (key, value, timestamp) and
    ``statement`` (``CREATE STREAM <name> AS ...``) started as ``query_id`` on a new output topic.
    Returns the left and right topics and a reader of the output's first ``count`` rows."""
    left_t, right_t, sources = _streams(bootstrap, prefix)
    out_t = unique(f"{prefix}_out")
    create_topics(bootstrap, out_t)
    produce(bootstrap, left_t, left_rows)
    produce(bootstrap, right_t, right_rows)
    _s, q = analyze(statement, sources)
    start(runtime, query_id, q, sink_of(q, statement.split()[2], out_t))

    def read(count: int):
        return _rows(read_timed_output(bootstrap, out_t, count, timeout_s=WAIT_S, runtime=runtime, query_id=query_id))

    return left_t, right_t, read


def test_left_join_without_grace_writes_the_unmatched_row_at_once_even_when_input_stops(runtime, eos_broker):
    """LEFT JOIN WITHIN 5 SECONDS: l1 is written with nulls, then joined with r1 (ksqlDB's
    "spurious" result, as its joins.json expects); l2, the last left row, never matched and no later
    input comes: it is written all the same."""
    bootstrap = eos_broker.bootstrap
    left_t, right_t, sources = _streams(bootstrap, "ojl")
    out_t = unique("ojl_out")
    create_topics(bootstrap, out_t)
    produce(bootstrap, left_t, [(_int(1), b'{"LV":"l1"}', T0), (_int(2), b'{"LV":"l2"}', T0 + 1000)])
    produce(bootstrap, right_t, [(_int(1), b'{"RV":"r1"}', T0 + 2000)])
    _s, q = analyze("CREATE STREAM LJ AS SELECT L.ID, LV, RV FROM L LEFT JOIN R WITHIN 5 SECONDS ON L.ID = R.ID "
                    "EMIT CHANGES;", sources)
    start(runtime, "CSAS_OJL_1", q, sink_of(q, "LJ", out_t))
    got = _rows(read_timed_output(bootstrap, out_t, 3, timeout_s=WAIT_S, runtime=runtime, query_id="CSAS_OJL_1"))
    assert sorted(got, key=repr) == sorted([
        (1, {"LV": "l1", "RV": None}, T0), (1, {"LV": "l1", "RV": "r1"}, T0 + 2000),
        (2, {"LV": "l2", "RV": None}, T0 + 1000)], key=repr)
    # a key's writes keep their order
    assert [r for r in got if r[0] == 1] == [(1, {"LV": "l1", "RV": None}, T0), (1, {"LV": "l1", "RV": "r1"}, T0 + 2000)]
    runtime.stop_persistent("CSAS_OJL_1")


def test_left_join_with_grace_writes_the_unmatched_row_after_stream_time_passes(runtime, eos_broker):
    """LEFT JOIN WITHIN 5 SECONDS GRACE PERIOD 1 SECOND: l1 matched (only the joined row); l2 at
    1 s waits until stream time passes 7 s: the first round writes only the joined row; a right row
    of another key at 10 s moves stream time and l2 is written with nulls, with its own timestamp,
    though no row of its key came."""
    bootstrap = eos_broker.bootstrap
    _l, right_t, read = _started(
        runtime, bootstrap, "ojg", "CREATE STREAM LG AS SELECT L.ID, LV, RV FROM L LEFT JOIN R WITHIN 5 SECONDS GRACE "
        "PERIOD 1 SECOND ON L.ID = R.ID EMIT CHANGES;", "CSAS_OJG_1",
        [(_int(1), b'{"LV":"l1"}', T0), (_int(2), b'{"LV":"l2"}', T0 + 1000)], [(_int(1), b'{"RV":"r1"}', T0 + 2000)])
    assert read(1) == [(1, {"LV": "l1", "RV": "r1"}, T0 + 2000)]
    produce(bootstrap, right_t, [(_int(9), b'{"RV":"tick"}', T0 + 10000)])
    assert read(2) == [(1, {"LV": "l1", "RV": "r1"}, T0 + 2000), (2, {"LV": "l2", "RV": None}, T0 + 1000)]
    runtime.stop_persistent("CSAS_OJG_1")


def test_full_and_right_outer_joins(runtime, eos_broker):
    """FULL OUTER JOIN WITHIN 2 SECONDS (no grace): each side's unmatched rows at once, the match
    after; RIGHT JOIN keeps the right rows (a left row alone writes nothing)."""
    bootstrap = eos_broker.bootstrap
    left_t, right_t, sources = _streams(bootstrap, "ojf")
    full_t, right_out = unique("ojf_full"), unique("ojf_right")
    create_topics(bootstrap, full_t, right_out)
    produce(bootstrap, left_t, [(_int(1), b'{"LV":"l1"}', T0), (_int(3), b'{"LV":"l3"}', T0 + 500)])
    produce(bootstrap, right_t, [(_int(1), b'{"RV":"r1"}', T0 + 1000), (_int(2), b'{"RV":"r2"}', T0 + 1500)])
    _s, full = analyze("CREATE STREAM FJ AS SELECT ROWKEY AS K, LV, RV FROM L FULL OUTER JOIN R WITHIN 2 SECONDS "
                       "ON L.ID = R.ID EMIT CHANGES;", sources)
    start(runtime, "CSAS_OJF_1", full, sink_of(full, "FJ", full_t))
    _s, right = analyze("CREATE STREAM RJ AS SELECT R.ID, LV, RV FROM L RIGHT JOIN R WITHIN 2 SECONDS "
                        "ON L.ID = R.ID EMIT CHANGES;", sources)
    start(runtime, "CSAS_OJR_2", right, sink_of(right, "RJ", right_out))
    got = _rows(read_timed_output(bootstrap, full_t, 4, timeout_s=WAIT_S, runtime=runtime, query_id="CSAS_OJF_1"))
    assert sorted(got, key=repr) == sorted([
        (1, {"LV": "l1", "RV": None}, T0), (1, {"LV": "l1", "RV": "r1"}, T0 + 1000),
        (2, {"LV": None, "RV": "r2"}, T0 + 1500), (3, {"LV": "l3", "RV": None}, T0 + 500)], key=repr)
    got = _rows(read_timed_output(bootstrap, right_out, 2, timeout_s=WAIT_S, runtime=runtime, query_id="CSAS_OJR_2"))
    assert sorted(got, key=repr) == sorted([
        (1, {"LV": "l1", "RV": "r1"}, T0 + 1000), (2, {"LV": None, "RV": "r2"}, T0 + 1500)], key=repr)
    runtime.stop_persistent("CSAS_OJF_1")
    runtime.stop_persistent("CSAS_OJR_2")


def test_right_join_writes_an_unmatched_right_row_under_its_join_key(runtime, eos_broker):
    """RIGHT JOIN projecting the left key (joins.json "stream stream right join": ``SELECT t.id``):
    the key column is the record's join key, so the right row without a left match is written
    under its own key, not a null one (Kafka Streams keys the join's output by the join key)."""
    _l, _r, read = _started(
        runtime, eos_broker.bootstrap, "ojk", "CREATE STREAM RK AS SELECT L.ID, LV, RV FROM L RIGHT JOIN R WITHIN 2 "
        "SECONDS ON L.ID = R.ID EMIT CHANGES;", "CSAS_OJK_1", [(_int(1), b'{"LV":"l1"}', T0)],
        [(_int(1), b'{"RV":"r1"}', T0 + 1000), (_int(7), b'{"RV":"r7"}', T0 + 1500)])
    assert sorted(read(2), key=repr) == sorted([
        (1, {"LV": "l1", "RV": "r1"}, T0 + 1000), (7, {"LV": None, "RV": "r7"}, T0 + 1500)], key=repr)
    runtime.stop_persistent("CSAS_OJK_1")


def test_inner_join_drops_rows_beyond_the_grace_of_both_sides_stream_time(runtime, eos_broker):
    """INNER JOIN WITHIN 1 MINUTE GRACE PERIOD 1 MINUTE (joins.json "stream stream inner join with
    out of order and custom grace period"): once a left row at 330 s moved stream time, a left and
    a right row of one key at 90 s are out of the window stores (retention 180 s) and are not
    joined; rows at 330 s still are. Stream time is both sides' (Kafka Streams' shared time
    tracker): Spark's own join took the smaller of the two sides' watermarks (the right side's,
    60 s) and joined the late rows."""
    bootstrap = eos_broker.bootstrap
    left_t, right_t, read = _started(
        runtime, bootstrap, "ijg", "CREATE STREAM IG AS SELECT L.ID, LV, RV FROM L JOIN R WITHIN 1 MINUTE GRACE PERIOD "
        "1 MINUTE ON L.ID = R.ID EMIT CHANGES;", "CSAS_IJG_1",
        [(_int(0), b'{"LV":"A"}', T0), (_int(1), b'{"LV":"B"}', T0 + 330_000)], [(_int(0), b'{"RV":"a"}', T0 + 60_000)])
    assert read(1) == [(0, {"LV": "A", "RV": "a"}, T0 + 60_000)]
    # read after the batch with B, so stream time is 330 s
    produce(bootstrap, left_t, [(_int(2), b'{"LV":"C"}', T0 + 90_000), (_int(5), b'{"LV":"S"}', T0 + 330_000)])
    produce(bootstrap, right_t, [(_int(2), b'{"RV":"c"}', T0 + 90_000), (_int(5), b'{"RV":"s"}', T0 + 330_000)])
    assert read(2) == [(0, {"LV": "A", "RV": "a"}, T0 + 60_000), (5, {"LV": "S", "RV": "s"}, T0 + 330_000)]
    runtime.stop_persistent("CSAS_IJG_1")
