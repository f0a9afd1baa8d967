"""SIGKILL of a SQL-server node while it runs an n-way join of three tables (issue 24 point 2):
``T1 JOIN T2 FULL OUTER JOIN T3`` on the primary key, one n-way operator whose state holds each
table's row per key (``table_joins``). The node is killed (its Spark JVM and workers with it) while
a batch of T1 updates is being joined, more input arrives while it is down, and the restarted node
resumes the query from its checkpoint (Spark's state store of the operator is restored with it).
The output, read_committed by librdkafka, equals a replay (the same query started afterwards over
the whole input) and the writes the chained join rules give for the input
(``table_join_steps.nway_table_step``, checked on ksqlDB's multi-joins cases in
tests/unit/sql/test_nway_table_join_steps.py): every change once, none lost, none twice.

The input comes in phases with increasing timestamps, each phase's records on one topic, so each
key's output is the same whatever the micro-batch boundaries, in the killed run and in the replay.

Marked slow (make test-slow): two and n tables are the same operator with the same state,
checkpoint and sink, so the default run's proof of the guarantee is
tests/chaos/sql/test_table_join_sigkill.py (a table-table join, the same kill), and the n-way
write rules are checked case by case in tests/unit/sql/test_nway_table_join_steps.py and through
Spark in tests/spark/sql/test_golden_nway_joins.py. It took 89 s of the Spark run in CI.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from oncestream.sql.engine.compile.table_join_steps import nway_table_step
from tests.chaos.sql.test_table_join_sigkill import (
    BROKER_CONFIG,
    EARLIEST,
    T0,
    WAIT,
    Record,
    _count,
    _produce,
    check_exactly_once_and_replay,
)
from tests.support.sql_servers import LAZY_SPARK, SqlServerProcess, wait_until

pytestmark = [pytest.mark.chaos, pytest.mark.spark]

KEYS = 30
KINDS = ["INNER", "FULL"]


def _expected(records: Sequence[Record]) -> dict[int, list[Any]]:
    """The join's writes per key for ``records`` (side 0, 1, 2: T1, T2, T3) in order."""
    state: dict[int, list[Any]] = {}
    out: dict[int, list[Any]] = {}
    for side, key, value, _ts in records:
        written, state[key] = nway_table_step(KINDS, [side], [None if value is None else json.dumps(value)], [0],
                                              state.get(key, [None, None, None]))
        for w in written:
            row: dict[str, Any] = {"V": None, "W": None, "X": None}
            for part in w.rows:
                row |= json.loads(part) if part else {}
            out.setdefault(key, []).append(None if w.delete else row)
    return out


@pytest.mark.slow  # the same operator's kill is in the default run: see the module docstring
def test_sigkill_during_an_nway_table_join_leaves_output_equal_to_a_replay(broker_factory, tmp_path: Path) -> None:
    broker = broker_factory(BROKER_CONFIG)
    node = SqlServerProcess(bootstrap=broker.bootstrap, service_id=f"nwkill_{uuid.uuid4().hex[:6]}_",
                            state_dir=tmp_path / "node", config=LAZY_SPARK)
    ts = iter(range(T0, T0 + 10_000_000))
    t3_rows: list[Record] = [(2, k, {"X": f"x{k}"}, next(ts)) for k in range(0, KEYS, 2)]
    t2_rows: list[Record] = [(1, k, {"W": f"w{k}"}, next(ts)) for k in range(KEYS)]
    t1_before: list[Record] = [(0, k, {"V": f"v{k}.0"}, next(ts)) for k in range(KEYS)]
    t1_while_killed: list[Record] = [(0, k % KEYS, {"V": f"v{k % KEYS}.{1 + k // KEYS}"}, next(ts))
                                     for k in range(3 * KEYS)]
    t1_while_down: list[Record] = [(0, k, None, next(ts)) for k in range(0, KEYS, 4)] + \
        [(0, k, {"V": f"v{k}.9"}, next(ts)) for k in range(1, KEYS, 4)]
    t3_after: list[Record] = [(2, k, None, next(ts)) for k in range(0, KEYS, 3)] + \
        [(2, k, {"X": f"x{k}.1"}, next(ts)) for k in range(1, KEYS, 3)]
    topics = {0: "t1", 1: "t2", 2: "t3"}
    node.start()
    try:
        node.ok("CREATE TABLE T1 (ID BIGINT PRIMARY KEY, V STRING) WITH (KAFKA_TOPIC='t1', PARTITIONS=1, VALUE_FORMAT='JSON');"
                "CREATE TABLE T2 (ID BIGINT PRIMARY KEY, W STRING) WITH (KAFKA_TOPIC='t2', PARTITIONS=1, VALUE_FORMAT='JSON');"
                "CREATE TABLE T3 (ID BIGINT PRIMARY KEY, X STRING) WITH (KAFKA_TOPIC='t3', PARTITIONS=1, VALUE_FORMAT='JSON');")
        join = ("SELECT ROWKEY AS ID, V, W, X FROM T1 JOIN T2 ON T1.ID = T2.ID FULL OUTER JOIN T3 ON T1.ID = T3.ID "
                "EMIT CHANGES;")
        node.ok(f"CREATE TABLE J WITH (KAFKA_TOPIC='j', PARTITIONS=1) AS {join}", EARLIEST)
        bootstrap = broker.bootstrap

        def send(records: Sequence[Record]) -> None:
            _produce(bootstrap, topics[records[0][0]], records)

        def wait_for(records: Sequence[Record], what: str) -> None:
            count = sum(len(v) for v in _expected(records).values())
            wait_until(lambda: _count(bootstrap, "j") >= count, what, nodes=[node], **WAIT)

        for phase in (t3_rows, t2_rows, t1_before):
            send(phase)
        wait_for(t3_rows + t2_rows + t1_before, "the first joined rows")
        # kill the node while it joins a batch of T1 updates
        before = _count(bootstrap, "j")
        send(t1_while_killed)
        wait_until(lambda: _count(bootstrap, "j") > before, "the updates being joined", nodes=[node], **WAIT)
        node.kill()
        send(t1_while_down)
        node.start()
        done: list[Record] = t3_rows + t2_rows + t1_before + t1_while_killed + t1_while_down
        wait_for(done, "the joined rows after the restart")
        send(t3_after)
        everything = done + t3_after
        wait_for(everything, "the T3 updates joined")
        check_exactly_once_and_replay(node, bootstrap, join, _expected(everything))
    finally:
        node.kill()
