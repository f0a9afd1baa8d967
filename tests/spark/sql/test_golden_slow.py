"""Longer golden variants (marked slow): an aggregation fed over many micro-batches compared with
a model of ksqlDB's result, and a push query over an aggregation (update mode into foreachBatch)."""

from __future__ import annotations

import asyncio
import json
import random
import struct
from collections import Counter, defaultdict

import pytest

from tests.spark.sql.golden import EARLIEST, analyze, create_topics, ddl, produce, read_output, sink_of, start, unique
from tests.support.narrow import present

pytestmark = [pytest.mark.spark, pytest.mark.slow]

T0 = 1_700_000_000_000


def test_aggregation_over_many_batches_ends_at_the_models_values(runtime, eos_broker):
    """1,500 records in 15 rounds while the query runs: the last value written per key (the
    compacted changelog's value) equals COUNT/SUM/MAX computed from the input; each key's counts
    only grow in the output (updates of a batch are coalesced, never reordered)."""
    bootstrap = eos_broker.bootstrap
    topic, out = unique("many_in"), unique("many_out")
    create_topics(bootstrap, topic, partitions=2)
    create_topics(bootstrap, out)
    s = ddl(f"CREATE STREAM S (ID INT KEY, K STRING, X BIGINT) WITH (KAFKA_TOPIC='{topic}', VALUE_FORMAT='JSON');")
    _s, analyzed = analyze("CREATE TABLE AGG AS SELECT K, COUNT(*) AS C, SUM(X) AS SX, MAX(X) AS MX FROM S "
                           "GROUP BY K EMIT CHANGES;", {"S": s})
    start(runtime, "CTAS_MANY_1", analyzed, sink_of(analyzed, "AGG", out))
    rng = random.Random(12)
    model: dict[str, list[int]] = defaultdict(list)
    n = 0
    for _round in range(15):
        batch = []
        for _ in range(100):
            key, x = f"k{rng.randrange(7)}", rng.randrange(-50, 1000)
            model[key].append(x)
            batch.append((struct.pack(">i", n), json.dumps({"K": key, "X": x}).encode(), T0 + n))
            n += 1
        produce(bootstrap, topic, batch)
    expected = {k: {"C": len(v), "SX": sum(v), "MX": max(v)} for k, v in model.items()}
    deadline_rows = len(expected)
    got: dict[str, dict] = {}
    while True:
        records = read_output(bootstrap, out, deadline_rows, runtime=runtime, query_id="CTAS_MANY_1")
        got = {present(k, "key").decode(): json.loads(present(v, "value")) for k, v in records}
        if got == expected:
            break
        deadline_rows = len(records) + 1
    counts: dict[str, list[int]] = defaultdict(list)
    for k, v in records:
        counts[present(k, "key").decode()].append(json.loads(present(v, "value"))["C"])
    assert all(c == sorted(c) and len(set(c)) == len(c) for c in counts.values()), counts
    assert Counter(present(k, "key").decode() for k, _ in records).keys() == expected.keys()
    runtime.stop_persistent("CTAS_MANY_1")


def test_push_query_over_an_aggregation_streams_updates(runtime, eos_broker):
    """SELECT K, COUNT(*) ... GROUP BY K EMIT CHANGES LIMIT 2 from earliest: update-mode rows."""
    bootstrap = eos_broker.bootstrap
    topic = unique("push_agg")
    create_topics(bootstrap, topic)
    s = ddl(f"CREATE STREAM S (ID INT KEY, K STRING) WITH (KAFKA_TOPIC='{topic}', VALUE_FORMAT='JSON');")
    produce(bootstrap, topic, [(struct.pack(">i", i), json.dumps({"K": "ab"[i % 2]}).encode(), T0 + i) for i in range(5)])
    _s, analyzed = analyze("SELECT K, COUNT(*) AS C FROM S GROUP BY K EMIT CHANGES LIMIT 2;", {"S": s})
    push = runtime.start_push(analyzed, EARLIEST)

    async def collect() -> list:
        return [row async for row in push.rows()]

    rows = asyncio.run(asyncio.wait_for(collect(), 180))
    assert sorted(rows) == [["a", 3], ["b", 2]]
    assert push.limit_reached
