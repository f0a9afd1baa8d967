"""A node SIGKILLed while its table aggregation processes updates leaves the output exactly once
and equal to a replay (issue 24).

A real ``oncestream sql-server`` node runs ``CREATE TABLE ... AS SELECT REGION, COUNT(*),
SUM(AMOUNT), COLLECT_LIST(SEQ) FROM USERS GROUP BY REGION`` over a users TABLE whose rows move
between regions and get deleted. Every input record carries a unique SEQ, so every record the
query writes for a region differs from the region's previous one (a retraction removes a SEQ, an
addition brings a new one): a micro-batch written twice would show as a repeated record. The node
is SIGKILLed in the middle of a round of updates (produced one by one, so they span micro-batches), started
again on the same state directory (its query resumes from its checkpoint), and more updates
follow. The output, read read_committed with confluent-kafka, must end at the values computed
from the input, repeat no record, and equal the output of the same query started afterwards from
the earliest offset (a replay).
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.spark.spark_support import read_committed
from tests.support.sql_servers import SqlServerProcess, wait_until

pytestmark = [pytest.mark.spark]

EARLIEST = {"ksql.streams.auto.offset.reset": "earliest"}
REGIONS = ("north", "south", "east", "west")
USERS = 12


def _rounds(seed: int) -> list[list[tuple[str, dict[str, Any] | None]]]:
    """Three rounds of (user key, row or None for a tombstone); SEQ unique over all of them."""
    rng = random.Random(seed)
    seq = 0
    rounds = []
    for size in (30, 60, 30):
        records: list[tuple[str, dict[str, Any] | None]] = []
        for _ in range(size):
            seq += 1
            user = f"u{rng.randrange(USERS)}"
            if rng.random() < 0.15:
                records.append((user, None))
            else:
                records.append((user, {"REGION": rng.choice(REGIONS), "AMOUNT": rng.randrange(1, 100), "SEQ": seq}))
        rounds.append(records)
    return rounds


def _expected(records: list[tuple[str, dict[str, Any] | None]]) -> dict[bytes, dict[str, Any]]:
    """Each region's value after all ``records``: its users' last rows; a region that had rows
    and lost them all is written at COUNT 0 (ksqlDB's table aggregation)."""
    last: dict[str, dict[str, Any] | None] = {}
    seen: set[str] = set()
    for user, row in records:
        last[user] = row
        if row is not None:
            seen.add(row["REGION"])
    out: dict[bytes, dict[str, Any]] = {}
    for region in seen:
        rows = [r for r in last.values() if r is not None and r["REGION"] == region]
        out[region.encode()] = {"N": len(rows), "TOTAL": sum(r["AMOUNT"] for r in rows),
                                "SEQS": sorted(r["SEQ"] for r in rows)}
    return out


def _produce(bootstrap: str, topic: str, records: list[tuple[str, dict[str, Any] | None]],
             pause_s: float = 0.0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for user, row in records:
        producer.produce(topic, None if row is None else json.dumps(row).encode(), user.encode())
        if pause_s:
            producer.flush(30)
            time.sleep(pause_s)
    assert producer.flush(60) == 0


def _latest(records: list[tuple[bytes | None, bytes | None]]) -> dict[bytes | None, Any]:
    latest: dict[bytes | None, Any] = {}
    for key, value in records:
        row = None if value is None else json.loads(value)
        latest[key] = None if row is None else {**row, "SEQS": sorted(row["SEQS"])}
    return latest


def test_sigkill_during_table_aggregation_updates_leaves_output_exactly_once(eos_broker, tmp_path: Path) -> None:
    bootstrap = eos_broker.bootstrap
    suffix = uuid.uuid4().hex[:6]
    users_topic, out_topic, replay_topic = f"users_{suffix}", f"by_region_{suffix}", f"replay_{suffix}"
    rounds = _rounds(seed=24)
    node = SqlServerProcess(bootstrap=bootstrap, service_id=f"tagg_{suffix}_", state_dir=tmp_path / "node",
                            config={"spark.sql.shuffle.partitions": "2"})
    query = ("SELECT REGION, COUNT(*) AS N, SUM(AMOUNT) AS TOTAL, COLLECT_LIST(SEQ) AS SEQS FROM USERS "
             "GROUP BY REGION EMIT CHANGES;")
    try:
        node.start()
        node.ok(f"CREATE TABLE USERS (ID STRING PRIMARY KEY, REGION STRING, AMOUNT INT, SEQ INT) "
                f"WITH (KAFKA_TOPIC='{users_topic}', PARTITIONS=1, VALUE_FORMAT='JSON');")
        node.ok(f"CREATE TABLE BY_REGION WITH (KAFKA_TOPIC='{out_topic}', PARTITIONS=1) AS {query}", EARLIEST)

        _produce(bootstrap, users_topic, rounds[0])
        first = _expected(rounds[0])
        wait_until(lambda: _latest(read_committed(bootstrap, out_topic)) == first, "the first round's values",
                   timeout_s=300, interval_s=1.0, nodes=[node])

        # The second round arrives record by record; the node is killed once part of it is written.
        writer = threading.Thread(target=_produce, args=(bootstrap, users_topic, rounds[1], 0.05))
        writer.start()
        before = len(read_committed(bootstrap, out_topic))
        wait_until(lambda: len(read_committed(bootstrap, out_topic)) > before + 2, "part of the second round written",
                   timeout_s=300, interval_s=0.2, nodes=[node])
        node.kill()
        writer.join(120)
        assert not writer.is_alive()

        node.start()
        _produce(bootstrap, users_topic, rounds[2])
        final = _expected(rounds[0] + rounds[1] + rounds[2])
        wait_until(lambda: _latest(read_committed(bootstrap, out_topic)) == final, "the final values after the kill",
                   timeout_s=400, interval_s=1.0, nodes=[node])

        # Exactly once: no record repeats its region's previous one (a batch written twice would).
        output = read_committed(bootstrap, out_topic)
        previous: dict[bytes | None, bytes | None] = {}
        for key, value in output:
            assert previous.get(key) != value, f"{key!r} written twice in a row: {value!r}"
            previous[key] = value

        # A replay: the same query over the whole input, started now.
        node.ok(f"CREATE TABLE REPLAY WITH (KAFKA_TOPIC='{replay_topic}', PARTITIONS=1) AS {query}", EARLIEST)
        wait_until(lambda: _latest(read_committed(bootstrap, replay_topic)) == final, "the replay's values",
                   timeout_s=400, interval_s=1.0, nodes=[node])
        assert _latest(read_committed(bootstrap, out_topic)) == _latest(read_committed(bootstrap, replay_topic))
    finally:
        node.stop()
