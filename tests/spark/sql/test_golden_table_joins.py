"""Golden tests of table-table joins on the primary key through Spark and a real broker, outputs
read read_committed with confluent-kafka: ksqlDB's query-validation cases (joins.json: "table
table inner/left/right/outer join", "table table join with where clause") with their inputs and
outputs (the outer join's left input also has ksqlDB's left row 90, which the
outer join writes with nulls), then a later micro-batch of tombstones on both sides, whose outputs follow Kafka Streams'
rules (tests/unit/sql/test_table_join_steps.py checks the same rules on more of ksqlDB's cases).

The inputs are produced before the queries start (from earliest): the first micro-batch holds them
all. Every change is written (no coalescing); the order holds per key, which is what a compacted
changelog's reader sees (the output topic has one partition, so the records are compared per key
in topic order)."""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest

from tests.spark.sql.golden import (
    analyze,
    create_topics,
    ddl,
    per_bigint_key,
    produce,
    read_output,
    read_timed_output,
    sink_of,
    start,
    unique,
)

pytestmark = [pytest.mark.spark]

T0 = 1_700_000_000_000  # ksqlDB's timestamps are offsets from 0; librdkafka reads timestamp 0 as "now"

LEFT_ROWS = [(0, {"NAME": "zero", "VALUE": 0}, 0), (10, {"NAME": "100", "VALUE": 5}, 11000),
             (0, {"NAME": "foo", "VALUE": 100}, 13000), (0, {"NAME": "bar", "VALUE": 99}, 16000),
             (90, {"NAME": "ninety", "VALUE": 90}, 17000)]
RIGHT_ROWS = [(0, {"F1": "blah", "F2": 50}, 10000), (0, {"F1": "a", "F2": 10}, 15000)]


def _long(v: int) -> bytes:
    return struct.pack(">q", v)


def _v(name: str | None, value: int | None, f1: str | None, f2: int | None) -> dict[str, Any]:
    return {"NAME": name, "VALUE": value, "F1": f1, "F2": f2}


def _expected(outputs: list[tuple[int, Any]]) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = {}
    for key, value in outputs:
        out.setdefault(key, []).append(value)
    return out


# kind -> (extra right rows of ksqlDB's case, the join as written, ksqlDB's outputs, then the
# outputs of deleting left key 0 and then right key 0 in a later batch)
CASES: dict[str, tuple[list[tuple[int, dict[str, Any], int]], str, list[tuple[int, Any]], list[tuple[int, Any]]]] = {
    "INNER": ([(15, {"F1": "c", "F2": 20}, 15500)], "JOIN", [
        (0, _v("zero", 0, "blah", 50)), (0, _v("foo", 100, "blah", 50)), (0, _v("foo", 100, "a", 10)),
        (0, _v("bar", 99, "a", 10))], [(0, None)]),
    "LEFT": ([], "LEFT JOIN", [
        (0, _v("zero", 0, None, None)), (0, _v("zero", 0, "blah", 50)), (10, _v("100", 5, None, None)),
        (0, _v("foo", 100, "blah", 50)), (0, _v("foo", 100, "a", 10)), (0, _v("bar", 99, "a", 10)),
        (90, _v("ninety", 90, None, None))], [(0, None)]),
    "RIGHT": ([(7, {"F1": "b", "F2": 20}, 18000)], "RIGHT JOIN", [
        (0, _v("zero", 0, "blah", 50)), (0, _v("foo", 100, "blah", 50)), (0, _v("foo", 100, "a", 10)),
        (0, _v("bar", 99, "a", 10)), (7, _v(None, None, "b", 20))], [(0, _v(None, None, "a", 10)), (0, None)]),
    "FULL": ([(15, {"F1": "c", "F2": 20}, 15500)], "FULL OUTER JOIN", [
        (0, _v("zero", 0, None, None)), (0, _v("zero", 0, "blah", 50)), (10, _v("100", 5, None, None)),
        (0, _v("foo", 100, "blah", 50)), (0, _v("foo", 100, "a", 10)), (15, _v(None, None, "c", 20)),
        (0, _v("bar", 99, "a", 10)), (90, _v("ninety", 90, None, None))], [(0, _v(None, None, "a", 10)), (0, None)]),
}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_table_table_joins_on_the_primary_key_match_ksqldb(runtime, eos_broker, kind):
    bootstrap = eos_broker.bootstrap
    extra_right, join, outputs, deletes = CASES[kind]
    left_t, right_t, out_t = unique(f"tt_{kind}_l"), unique(f"tt_{kind}_r"), unique(f"tt_{kind}_out")
    create_topics(bootstrap, left_t, right_t, out_t)
    left = ddl(f"CREATE TABLE TEST (id BIGINT PRIMARY KEY, name VARCHAR, value BIGINT) "
               f"WITH (kafka_topic='{left_t}', value_format='JSON');")
    right = ddl(f"CREATE TABLE TEST_TABLE (id BIGINT PRIMARY KEY, f1 VARCHAR, f2 BIGINT) "
                f"WITH (kafka_topic='{right_t}', value_format='JSON');")
    # ksqlDB's inputs interleave the two topics by timestamp; each topic keeps its own order.
    produce(bootstrap, left_t, [(_long(k), json.dumps(v).encode(), T0 + ts) for k, v, ts in LEFT_ROWS])
    produce(bootstrap, right_t, [(_long(k), json.dumps(v).encode(), T0 + ts)
                                 for k, v, ts in sorted(RIGHT_ROWS + extra_right, key=lambda r: r[2])])
    key = "ROWKEY AS ID" if kind == "FULL" else "t.id"
    _s, analyzed = analyze(f"CREATE TABLE OUT_{kind} AS SELECT {key}, name, value, f1, f2 FROM test t "
                           f"{join} TEST_TABLE tt ON t.id = tt.id;", {"TEST": left, "TEST_TABLE": right})
    query_id = f"CTAS_OUT_{kind}"
    start(runtime, query_id, analyzed, sink_of(analyzed, f"OUT_{kind}", out_t))
    expected = _expected(outputs)
    got = read_output(bootstrap, out_t, len(outputs), runtime=runtime, query_id=query_id)
    assert per_bigint_key(got) == expected
    # later batches: left key 0 deleted, then right key 0
    produce(bootstrap, left_t, [(_long(0), None, T0 + 20000)])
    after_left = _expected(outputs + deletes[:1])
    got = read_output(bootstrap, out_t, len(outputs) + 1, runtime=runtime, query_id=query_id)
    assert per_bigint_key(got) == after_left
    produce(bootstrap, right_t, [(_long(0), None, T0 + 21000)])
    after = _expected(outputs + deletes)
    got = read_output(bootstrap, out_t, len(outputs) + len(deletes), runtime=runtime, query_id=query_id)
    assert per_bigint_key(got) == after
    runtime.stop_persistent(query_id)


def test_table_table_join_where_writes_tombstones_only_for_rows_it_wrote(runtime, eos_broker):
    """ksqlDB's "table table join with where clause": a joined row failing WHERE deletes its key
    only if the key's last output was a row; a right tombstone deletes the joined row."""
    bootstrap = eos_broker.bootstrap
    left_t, right_t, out_t = unique("ttw_l"), unique("ttw_r"), unique("ttw_out")
    create_topics(bootstrap, left_t, right_t, out_t)
    left = ddl(f"CREATE TABLE TEST (id BIGINT PRIMARY KEY, name VARCHAR, value BIGINT) "
               f"WITH (kafka_topic='{left_t}', value_format='JSON');")
    right = ddl(f"CREATE TABLE TEST_TABLE (id BIGINT PRIMARY KEY, f1 VARCHAR, f2 BIGINT) "
                f"WITH (kafka_topic='{right_t}', value_format='JSON');")
    produce(bootstrap, left_t, [(_long(0), b'{"NAME":"zero","VALUE":0}', T0),
                                (_long(0), b'{"NAME":"foo","VALUE":100}', T0 + 13000),
                                (_long(0), b'{"NAME":"bar","VALUE":99}', T0 + 16000),
                                (_long(90), b'{"NAME":"ninety","VALUE":90}', T0 + 17000)])
    produce(bootstrap, right_t, [(_long(0), b'{"F1":"blah","F2":4}', T0 + 10000),
                                 (_long(0), b'{"F1":"a","F2":10}', T0 + 15000),
                                 (_long(90), b'{"F1":"b","F2":10}', T0 + 18000), (_long(90), None, T0 + 19000)])
    _s, analyzed = analyze("CREATE TABLE OUTPUT as SELECT t.id, name, tt.f1, f2 FROM test t JOIN test_table tt "
                           "ON t.id = tt.id WHERE t.value > 10 AND tt.f2 > 5;", {"TEST": left, "TEST_TABLE": right})
    start(runtime, "CTAS_OUTPUT_W", analyzed, sink_of(analyzed, "OUTPUT", out_t))
    expected = _expected([(0, {"NAME": "foo", "F1": "a", "F2": 10}), (0, {"NAME": "bar", "F1": "a", "F2": 10}),
                          (90, {"NAME": "ninety", "F1": "b", "F2": 10}), (90, None)])
    assert per_bigint_key(read_output(bootstrap, out_t, 4, runtime=runtime, query_id="CTAS_OUTPUT_W")) == expected
    # a later batch: key 0 now fails WHERE (its last output was a row: tombstone), then fails
    # again (no second tombstone), then passes
    produce(bootstrap, left_t, [(_long(0), b'{"NAME":"low","VALUE":1}', T0 + 20000)])
    expected[0].append(None)
    assert per_bigint_key(read_output(bootstrap, out_t, 5, runtime=runtime, query_id="CTAS_OUTPUT_W")) == expected
    produce(bootstrap, left_t, [(_long(0), b'{"NAME":"lower","VALUE":0}', T0 + 21000),
                                (_long(0), b'{"NAME":"high","VALUE":50}', T0 + 22000)])
    expected[0].append({"NAME": "high", "F1": "a", "F2": 10})
    assert per_bigint_key(read_output(bootstrap, out_t, 6, runtime=runtime, query_id="CTAS_OUTPUT_W")) == expected
    runtime.stop_persistent("CTAS_OUTPUT_W")


def test_table_table_join_writes_are_stamped_with_their_changes_rowtime(runtime, eos_broker):
    """Kafka Streams stamps a KTable-KTable join's result with the larger of its change's ROWTIME
    and the other side's row's, a tombstone too (ksqlDB's "table to table unwrapped single field
    value schema on inputs": the tombstone of a left delete at 20 is at 20, not at the deleted
    row's 0 or the right row's 10). A LEFT join's right tombstone writes the left row with nulls
    at the tombstone's ROWTIME."""
    bootstrap = eos_broker.bootstrap
    left_t, right_t, inner_t, left_out_t = unique("ttts_l"), unique("ttts_r"), unique("ttts_in"), unique("ttts_lo")
    create_topics(bootstrap, left_t, right_t, inner_t, left_out_t)
    left = ddl(f"CREATE TABLE T1 (ID BIGINT PRIMARY KEY, NAME STRING) WITH (kafka_topic='{left_t}', value_format='JSON');")
    right = ddl(f"CREATE TABLE T2 (ID BIGINT PRIMARY KEY, F1 STRING) WITH (kafka_topic='{right_t}', value_format='JSON');")
    produce(bootstrap, left_t, [(_long(0), b'{"NAME":"a"}', T0), (_long(1), b'{"NAME":"c"}', T0 + 5),
                                (_long(0), None, T0 + 20)])
    produce(bootstrap, right_t, [(_long(0), b'{"F1":"b"}', T0 + 10), (_long(1), b'{"F1":"d"}', T0 + 12),
                                 (_long(1), None, T0 + 30)])
    tables = {"T1": left, "T2": right}
    for name, join, topic, count in (("IN", "JOIN", inner_t, 4), ("LO", "LEFT JOIN", left_out_t, 6)):
        _s, analyzed = analyze(f"CREATE TABLE {name} AS SELECT T1.ID, NAME, F1 FROM T1 {join} T2 ON T1.ID = T2.ID;",
                               tables)
        start(runtime, f"CTAS_TS_{name}", analyzed, sink_of(analyzed, name, topic))
        got = read_timed_output(bootstrap, topic, count, runtime=runtime, query_id=f"CTAS_TS_{name}")
        runtime.stop_persistent(f"CTAS_TS_{name}")
        by_key: dict[int, list[tuple[Any, int]]] = {}
        for key, value, ts in got:
            assert key is not None
            by_key.setdefault(struct.unpack(">q", key)[0], []).append((None if value is None else json.loads(value), ts - T0))
        if join == "JOIN":
            assert by_key == {0: [({"NAME": "a", "F1": "b"}, 10), (None, 20)],
                              1: [({"NAME": "c", "F1": "d"}, 12), (None, 30)]}
        else:
            assert by_key == {0: [({"NAME": "a", "F1": None}, 0), ({"NAME": "a", "F1": "b"}, 10), (None, 20)],
                              1: [({"NAME": "c", "F1": None}, 5), ({"NAME": "c", "F1": "d"}, 12),
                                  ({"NAME": "c", "F1": None}, 30)]}
