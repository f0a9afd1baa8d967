"""SIGKILL of a SQL-server node while it runs a table-table join (issue 24 point 2): the node is
killed (its Spark JVM and workers with it) while a batch of left-table updates is being joined,
more input arrives while it is down, and the restarted node resumes the query from its checkpoint.
The output, read_committed by librdkafka, equals a replay (the same query started afterwards over
the whole input) and the outputs the join's rules give for the input (``table_join_steps``, checked
on ksqlDB's cases in tests/unit/sql/test_table_join_steps.py): every change once, none lost, none
twice.

The input comes in phases with increasing timestamps (right rows, left rows, right updates and
tombstones), each phase's records on one topic, so each key's output is the same whatever the
micro-batch boundaries, in the killed run and in the replay.
"""

from __future__ import annotations

import json
import struct
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from oncestream.sql.engine.compile.table_join_steps import LEFT, RIGHT, table_table_step
from tests.spark.spark_support import read_committed
from tests.spark.sql.golden import per_bigint_key
from tests.support.sql_servers import LAZY_SPARK, SqlServerProcess, wait_until

pytestmark = [pytest.mark.chaos, pytest.mark.spark]

BROKER_CONFIG = {"group.initial.rebalance.delay.ms": "0", "transaction.two.phase.commit.enable": "true"}
EARLIEST = {"ksql.streams.auto.offset.reset": "earliest"}
T0 = 1_700_000_000_000
KEYS = 40
# this machine may be loaded: generous, and polled gently (each poll reads the topic)
WAIT: dict[str, Any] = {"timeout_s": 900, "interval_s": 2.0}

Record = tuple[int, int, dict[str, Any] | None, int]   # side, key, value, timestamp


def _produce(bootstrap: str, topic: str, records: Sequence[Record]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for _side, key, value, ts in records:
        producer.produce(topic, None if value is None else json.dumps(value).encode(), struct.pack(">q", key),
                         timestamp=ts)
    assert producer.flush(60) == 0


def _expected(records: Sequence[Record]) -> dict[int, list[Any]]:
    """The FULL OUTER join's writes per key for ``records`` in order (value {"V", "W"})."""
    state: dict[int, tuple[str | None, str | None]] = {}
    out: dict[int, list[Any]] = {}
    for side, key, value, _ts in records:
        left, right = state.get(key, (None, None))
        written, left, right = table_table_step("FULL", [side], [None if value is None else json.dumps(value)], [0],
                                                left, right)
        state[key] = (left, right)
        for w in written:
            row = {"V": None, "W": None} | (json.loads(w.left) if w.left else {}) | (json.loads(w.right) if w.right else {})
            out.setdefault(key, []).append(None if w.delete else row)
    return out


def _count(bootstrap: str, topic: str) -> int:
    return len(read_committed(bootstrap, topic, end_at_eof=True))


def check_exactly_once_and_replay(node: SqlServerProcess, bootstrap: str, join: str,
                                  expected: dict[int, list[Any]]) -> None:
    """Topic ``j`` holds ``expected`` (every change exactly once), and the same ``join`` started
    afterwards over the whole input (topic ``replay``) writes the same."""
    assert per_bigint_key(read_committed(bootstrap, "j", end_at_eof=True)) == expected
    node.ok(f"CREATE TABLE REPLAY WITH (KAFKA_TOPIC='replay', PARTITIONS=1) AS {join}", EARLIEST)
    count = sum(len(v) for v in expected.values())
    wait_until(lambda: _count(bootstrap, "replay") >= count, "the replay", nodes=[node], **WAIT)
    assert per_bigint_key(read_committed(bootstrap, "replay", end_at_eof=True)) == \
        per_bigint_key(read_committed(bootstrap, "j", end_at_eof=True))


def test_sigkill_during_a_table_table_join_leaves_output_equal_to_a_replay(broker_factory, tmp_path: Path) -> None:
    broker = broker_factory(BROKER_CONFIG)
    node = SqlServerProcess(bootstrap=broker.bootstrap, service_id=f"ttkill_{uuid.uuid4().hex[:6]}_",
                            state_dir=tmp_path / "node", config=LAZY_SPARK)
    ts = iter(range(T0, T0 + 10_000_000))
    rights: list[Record] = [(RIGHT, k, {"W": f"w{k}"}, next(ts)) for k in range(KEYS)]
    lefts_before: list[Record] = [(LEFT, k, {"V": f"v{k}.0"}, next(ts)) for k in range(KEYS)]
    lefts_while_killed: list[Record] = [(LEFT, k % KEYS, {"V": f"v{k % KEYS}.{1 + k // KEYS}"}, next(ts))
                                        for k in range(3 * KEYS)]
    lefts_while_down: list[Record] = [(LEFT, k, None, next(ts)) for k in range(0, KEYS, 4)] + \
        [(LEFT, k, {"V": f"v{k}.9"}, next(ts)) for k in range(1, KEYS, 4)]
    rights_after: list[Record] = [(RIGHT, k, None, next(ts)) for k in range(0, KEYS, 3)] + \
        [(RIGHT, k, {"W": f"w{k}.1"}, next(ts)) for k in range(1, KEYS, 3)]
    node.start()
    try:
        node.ok("CREATE TABLE L (ID BIGINT PRIMARY KEY, V STRING) WITH (KAFKA_TOPIC='l', PARTITIONS=1, VALUE_FORMAT='JSON');"
                "CREATE TABLE R (ID BIGINT PRIMARY KEY, W STRING) WITH (KAFKA_TOPIC='r', PARTITIONS=1, VALUE_FORMAT='JSON');")
        join = "SELECT ROWKEY AS ID, V, W FROM L FULL OUTER JOIN R ON L.ID = R.ID EMIT CHANGES;"
        node.ok(f"CREATE TABLE J WITH (KAFKA_TOPIC='j', PARTITIONS=1) AS {join}", EARLIEST)
        bootstrap = broker.bootstrap

        def wait_for(records: Sequence[Record], what: str) -> None:
            count = sum(len(v) for v in _expected(records).values())
            wait_until(lambda: _count(bootstrap, "j") >= count, what, nodes=[node], **WAIT)

        _produce(bootstrap, "r", rights)
        _produce(bootstrap, "l", lefts_before)
        wait_for(rights + lefts_before, "the first joined rows")
        # kill the node while it joins a batch of left updates
        before = _count(bootstrap, "j")
        _produce(bootstrap, "l", lefts_while_killed)
        wait_until(lambda: _count(bootstrap, "j") > before, "the updates being joined", nodes=[node], **WAIT)
        node.kill()
        _produce(bootstrap, "l", lefts_while_down)
        node.start()
        done: list[Record] = rights + lefts_before + lefts_while_killed + lefts_while_down
        wait_for(done, "the joined rows after the restart")
        _produce(bootstrap, "r", rights_after)
        everything = done + rights_after
        wait_for(everything, "the right updates joined")
        check_exactly_once_and_replay(node, bootstrap, join, _expected(everything))
    finally:
        node.kill()
