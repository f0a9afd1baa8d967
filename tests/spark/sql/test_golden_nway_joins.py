"""Golden tests of n-way joins (more than one JOIN in a query) through Spark and a real broker,
outputs read read_committed with confluent-kafka: ksqlDB's query-validation cases of
multi-joins.json ("table-table-table - inner-full", "stream-table-table - inner-inner" and
"- left-left", "stream-stream-stream - inner-inner - different windows", "stream-stream-table -
inner-inner", "stream-table-stream - inner-inner") with their inputs and outputs (BIGINT keys for
ksqlDB's INT ones), the tables' case then a later micro-batch of tombstones, whose outputs follow
Kafka Streams' chained KTable-KTable joins (tests/unit/sql/test_nway_table_join_steps.py checks
the same rules without Spark).

The inputs are produced before the queries start (from earliest), so the first micro-batch holds
them all: a table join and a stream-table join process a key's records in ksqlDB's order, so
their outputs are compared in topic order per key; a stream-stream join writes the joined rows of
one micro-batch in Spark's order, so those are compared as multisets."""

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
    sink_of,
    start,
    unique,
)

pytestmark = [pytest.mark.spark]

T0 = 1_700_000_000_000  # ksqlDB's timestamps are offsets from 0; librdkafka reads timestamp 0 as "now"

Input = tuple[str, int, dict[str, Any] | None, int]       # source name, key, value, timestamp


def _long(v: int) -> bytes:
    return struct.pack(">q", v)


def _run(runtime: Any, bootstrap: str, name: str, sources: dict[str, str], statement: str,
         inputs: list[Input]) -> tuple[str, str, dict[str, str]]:
    """Topics for ``sources`` (name -> STREAM or TABLE, columns ID BIGINT key, V0 BIGINT), the
    inputs produced (each topic in the inputs' order), ``statement`` (``{OUT}``: the sink) started
    from earliest. Returns (query id, output topic, source name -> topic)."""
    topics = {s: unique(f"nw_{name}_{s.lower()}") for s in sources}
    out_t = unique(f"nw_{name}_out")
    create_topics(bootstrap, *topics.values(), out_t)
    infos = {}
    for source, kind in sources.items():
        key = "PRIMARY KEY" if kind == "TABLE" else "KEY"
        infos[source] = ddl(f"CREATE {kind} {source} (ID BIGINT {key}, V0 BIGINT) "
                            f"WITH (kafka_topic='{topics[source]}', value_format='JSON');")
    for source, topic in topics.items():
        produce(bootstrap, topic, [(_long(k), None if v is None else json.dumps(v).encode(), T0 + ts)
                                   for s, k, v, ts in inputs if s == source])
    sink = f"OUT_{name.upper()}"
    _s, analyzed = analyze(statement.replace("{OUT}", sink), infos)
    query_id = f"Q_{name.upper()}"
    start(runtime, query_id, analyzed, sink_of(analyzed, sink, out_t))
    return query_id, out_t, topics


def _values(*rows: tuple[int | None, ...], names: tuple[str, ...]) -> list[dict[str, Any] | None]:
    return [dict(zip(names, r, strict=True)) for r in rows]


def test_table_table_table_inner_full_matches_ksqldb(runtime, eos_broker):
    bootstrap = eos_broker.bootstrap
    inputs: list[Input] = [("T1", 0, {"V0": 1}, 0), ("T3", 0, {"V0": 3}, 2), ("T2", 0, {"V0": 2}, 3),
                           ("T1", 0, {"V0": 4}, 1000)]
    query_id, out_t, topics = _run(
        runtime, bootstrap, "ttt", {"T1": "TABLE", "T2": "TABLE", "T3": "TABLE"},
        "CREATE TABLE {OUT} AS SELECT ROWKEY AS ID, T1.V0, T2.V0, T3.V0 FROM T1 JOIN T2 ON T1.ID = T2.ID "
        "FULL JOIN T3 ON T1.ID = T3.ID;", inputs)
    names = ("T1_V0", "T2_V0", "T3_V0")
    expected = _values((None, None, 3), (1, 2, 3), (4, 2, 3), names=names)
    got = read_output(bootstrap, out_t, 3, runtime=runtime, query_id=query_id)
    assert per_bigint_key(got) == {0: expected}
    # a later batch: T3's row deleted (the FULL join keeps T1 JOIN T2's row), then T1's (the
    # inner join's row goes, and with T3 gone too the key is deleted)
    produce(bootstrap, topics["T3"], [(_long(0), None, T0 + 2000)])
    expected += _values((4, 2, None), names=names)
    assert per_bigint_key(read_output(bootstrap, out_t, 4, runtime=runtime, query_id=query_id)) == {0: expected}
    produce(bootstrap, topics["T1"], [(_long(0), None, T0 + 3000)])
    expected.append(None)
    assert per_bigint_key(read_output(bootstrap, out_t, 5, runtime=runtime, query_id=query_id)) == {0: expected}
    runtime.stop_persistent(query_id)


STREAM_TABLE_TABLE: dict[str, tuple[str, list[Input], list[tuple[int | None, ...]]]] = {
    "inner": ("JOIN", [("T3", 0, {"V0": 3}, 10), ("T2", 0, {"V0": 2}, 11), ("S1", 0, {"V0": 1}, 12),
                       ("S1", 1, {"V0": 1}, 14)], [(1, 2, 3)]),
    "left": ("LEFT JOIN", [("S1", 0, {"V0": 1}, 9), ("T2", 0, {"V0": 2}, 10), ("S1", 0, {"V0": 1}, 11),
                           ("T3", 0, {"V0": 3}, 12), ("S1", 0, {"V0": 1}, 13)],
             [(1, None, None), (1, 2, None), (1, 2, 3)]),
}


@pytest.mark.parametrize("kind", sorted(STREAM_TABLE_TABLE))
def test_stream_table_table_matches_ksqldb(runtime, eos_broker, kind):
    bootstrap = eos_broker.bootstrap
    join, inputs, outputs = STREAM_TABLE_TABLE[kind]
    query_id, out_t, _topics = _run(
        runtime, bootstrap, f"stt_{kind}", {"S1": "STREAM", "T2": "TABLE", "T3": "TABLE"},
        f"CREATE STREAM {{OUT}} AS SELECT S1.ID, S1.V0, T2.V0, T3.V0 FROM S1 {join} T2 ON S1.ID = T2.ID "
        f"{join} T3 ON S1.ID = T3.ID;", inputs)
    got = read_output(bootstrap, out_t, len(outputs), runtime=runtime, query_id=query_id)
    assert per_bigint_key(got) == {0: _values(*outputs, names=("S1_V0", "T2_V0", "T3_V0"))}
    runtime.stop_persistent(query_id)


def _sorted(values: list[Any]) -> list[Any]:
    return sorted(values, key=lambda v: json.dumps(v, sort_keys=True))


def test_stream_stream_stream_with_different_windows_matches_ksqldb(runtime, eos_broker):
    bootstrap = eos_broker.bootstrap
    inputs: list[Input] = [("S1", 0, {"V0": 1}, 0), ("S2", 0, {"V0": 2}, 1), ("S3", 0, {"V0": 3}, 2),
                           ("S1", 0, {"V0": 4}, 3), ("S1", 0, {"V0": 5}, 4000), ("S3", 0, {"V0": 6}, 6000),
                           ("S1", 0, {"V0": 7}, 6001), ("S3", 0, {"V0": 8}, 7000)]
    query_id, out_t, _topics = _run(
        runtime, bootstrap, "sss", {"S1": "STREAM", "S2": "STREAM", "S3": "STREAM"},
        "CREATE STREAM {OUT} AS SELECT S2.ID, S1.V0, S2.V0, S3.V0 FROM S1 JOIN S2 WITHIN 5 SECONDS ON S1.ID = S2.ID "
        "JOIN S3 WITHIN 10 SECONDS ON S1.ID = S3.ID;", inputs)
    expected = _values((1, 2, 3), (4, 2, 3), (5, 2, 3), (1, 2, 6), (4, 2, 6), (5, 2, 6), (1, 2, 8), (4, 2, 8),
                       (5, 2, 8), names=("S1_V0", "S2_V0", "S3_V0"))
    got = per_bigint_key(read_output(bootstrap, out_t, len(expected), runtime=runtime, query_id=query_id))
    assert list(got) == [0]
    assert _sorted(got[0]) == _sorted(expected)
    runtime.stop_persistent(query_id)


def test_stream_stream_table_matches_ksqldb(runtime, eos_broker):
    bootstrap = eos_broker.bootstrap
    inputs: list[Input] = [("T3", 0, {"V0": 3}, 10), ("S2", 0, {"V0": 2}, 11), ("S1", 0, {"V0": 1}, 12),
                           ("S2", 0, {"V0": 4}, 13), ("S1", 0, {"V0": 5}, 100000), ("S2", 0, {"V0": 6}, 100001)]
    query_id, out_t, _topics = _run(
        runtime, bootstrap, "sst", {"S1": "STREAM", "S2": "STREAM", "T3": "TABLE"},
        "CREATE STREAM {OUT} AS SELECT S2.ID, S1.V0, S2.V0, T3.V0 FROM S1 JOIN S2 WITHIN 10 SECONDS ON S1.ID = S2.ID "
        "JOIN T3 ON S1.ID = T3.ID;", inputs)
    expected = _values((1, 2, 3), (1, 4, 3), (5, 6, 3), names=("S1_V0", "S2_V0", "T3_V0"))
    got = per_bigint_key(read_output(bootstrap, out_t, len(expected), runtime=runtime, query_id=query_id))
    assert list(got) == [0]
    assert _sorted(got[0]) == _sorted(expected)
    runtime.stop_persistent(query_id)


def test_stream_table_stream_matches_ksqldb(runtime, eos_broker):
    bootstrap = eos_broker.bootstrap
    inputs: list[Input] = [("S3", 0, {"V0": 3}, 10), ("T2", 0, {"V0": 2}, 11), ("S1", 0, {"V0": 1}, 12),
                           ("T2", 0, {"V0": 4}, 13), ("S1", 0, {"V0": 5}, 100000), ("S3", 0, {"V0": 6}, 100001)]
    query_id, out_t, _topics = _run(
        runtime, bootstrap, "sts", {"S1": "STREAM", "T2": "TABLE", "S3": "STREAM"},
        "CREATE STREAM {OUT} AS SELECT S3.ID, S1.V0, T2.V0, S3.V0 FROM S1 JOIN T2 ON S1.ID = T2.ID "
        "JOIN S3 WITHIN 10 SECONDS ON S1.ID = S3.ID;", inputs)
    expected = _values((1, 2, 3), (5, 4, 6), names=("S1_V0", "T2_V0", "S3_V0"))
    got = per_bigint_key(read_output(bootstrap, out_t, len(expected), runtime=runtime, query_id=query_id))
    assert list(got) == [0]
    assert _sorted(got[0]) == _sorted(expected)
    runtime.stop_persistent(query_id)
