"""Materializer against a real broker (issue 13): SIGKILL at every point of a store commit,
aborted and open transactions on the changelog, partitions added, topic recreated.

Crash points (injected into the store by tests/support/materializer_with_crash.py): ``before-batch`` (records applied,
in the commit's WriteBatch, no offsets in it yet), ``inside-batch`` (half of the partitions'
offsets in the batch), ``after-batch`` (the batch is durable, the materializer has not
acknowledged it). After the kill
the store must hold exactly the changelog prefix named by its stored offsets; the restarted
materializer must resume there, so what it re-reads is bounded by the uncommitted window
(statestore.uncommitted.max.bytes), not by the log's length.

Like the rest of the chaos suite these run against our broker (``broker_factory``), whatever
ONCESTREAM_TEST_BROKER says: the transaction tests need our broker's read_committed behaviour.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions

from oncestream.state import StateStore
from oncestream.state.materializer import Materializer
from oncestream.state.source import KafkaChangelogSource
from tests.support.clients import CLIENT_TIMEOUT_S, create_topic, unique_topic
from tests.support.faults import child_environment
from tests.support.narrow import present
from tests.support.txn import list_offset, transactional_producer, wait_until

pytestmark = pytest.mark.chaos

PARTITIONS = 2
RECORDS = 400
# Every record's key is 8 bytes and new in its window, so each adds >= 8 + 16 bytes of pending
# writes (value or tombstone): a window holds at most ceil(600 / 24) = 25 records.
UNCOMMITTED_MAX_BYTES = 600
WINDOW_RECORDS = 25
SIGKILL_EXIT = -9


def _produce_changelog(bootstrap: str, topic: str) -> dict[int, list[tuple[int, bytes, bytes | None]]]:
    """400 records over 2 partitions, keys per partition, every 7th a tombstone of a key written
    100 records earlier (committed long before). Returns partition -> [(offset, key, value)]."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    log: dict[int, list[tuple[int, bytes, bytes | None]]] = {p: [] for p in range(PARTITIONS)}
    errors = []

    def delivered(err, msg):
        if err is not None:
            errors.append(err)
        else:
            log[msg.partition()].append((msg.offset(), msg.key(), msg.value()))

    for i in range(RECORDS):
        partition = i % PARTITIONS
        if i % 7 == 6 and i >= 200:
            key, value = b"p%d-k%04d" % (partition, (i - 200) // PARTITIONS), None
        else:
            key, value = b"p%d-k%04d" % (partition, i // PARTITIONS), b"v%05d" % i
        producer.produce(topic, value, key=key, partition=partition, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    assert not errors
    for records in log.values():
        records.sort()
    return log


def _model(log, offsets: dict[int, int]) -> dict[bytes, bytes]:
    """The store a changelog prefix must give: partition p up to (excluding) offsets[p]."""
    state: dict[bytes, bytes] = {}
    for partition, records in log.items():
        for offset, key, value in records:
            if offset >= offsets.get(partition, 0):
                break
            if value is None:
                state.pop(key, None)
            else:
                state[key] = value
    return state


def _records_between(log, start: dict[int, int], end: dict[int, int]) -> int:
    return sum(1 for p, records in log.items() for offset, _, _ in records
               if start.get(p, 0) <= offset < end.get(p, 0))


def _parse_offsets(doc: dict[str, int]) -> dict[int, int]:
    return {int(k.rsplit(":", 1)[1]): v for k, v in doc.items()}


def _events(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _run_materializer(bootstrap: str, topic: str, state_dir: Path, events: Path, *,
                      crash_point: str | None = None, crash_at_commit: int = 3) -> int:
    env = child_environment()
    entry = ["oncestream.state.materializer"] if crash_point is None else [
        "tests.support.materializer_with_crash", "--crash-point", crash_point,
        "--crash-at-commit", str(crash_at_commit), "--"]
    cmd = [sys.executable, "-m", *entry, "--bootstrap-server", bootstrap,
           "--topic", topic, "--state-dir", str(state_dir), "--events-file", str(events),
           "--uncommitted-max-bytes", str(UNCOMMITTED_MAX_BYTES), "--commit-interval-ms", "100000000",
           "--poll-max-records", "50", "--stop-when-caught-up"]
    with open(events.with_suffix(".stderr"), "ab") as stderr:
        process = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True)
        try:
            return process.wait(timeout=120)
        finally:
            if process.poll() is None:
                process.kill()


def _read_store(state_dir: Path, topic: str) -> tuple[dict[bytes, bytes], dict[int, int]]:
    with StateStore(state_dir) as store:
        offsets = {p: o for (t, p), o in store.committed_offsets().items() if t == topic}
        return dict(store.range()), offsets


@pytest.mark.parametrize("crash_point", ["before-batch", "inside-batch", "after-batch"])
def test_sigkill_at_each_commit_point_recovers_the_committed_prefix(broker_factory, tmp_path, crash_point):
    broker = broker_factory()
    topic = unique_topic("state-chaos")
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    log = _produce_changelog(broker.bootstrap, topic)
    end = {p: records[-1][0] + 1 for p, records in log.items()}
    state_dir, events = tmp_path / "store", tmp_path / "events.jsonl"

    rc = _run_materializer(broker.bootstrap, topic, state_dir, events, crash_point=crash_point)
    assert rc == SIGKILL_EXIT, events.with_suffix(".stderr").read_text()[-3000:]
    before_kill = _events(events)
    begins = [e for e in before_kill if e["event"] == "commit-begin"]
    acked = [e for e in before_kill if e["event"] == "committed"]
    assert len(begins) == 3
    assert len(acked) == 2
    crashing = _parse_offsets(begins[-1]["offsets"])
    previous = _parse_offsets(acked[-1]["offsets"])

    data, stored = _read_store(state_dir, topic)
    assert stored == (crashing if crash_point == "after-batch" else previous)
    assert data == _model(log, stored)  # exactly the committed prefix, nothing of the lost window
    lost_window = _records_between(log, stored, crashing)
    assert (lost_window == 0) if crash_point == "after-batch" else (1 <= lost_window <= WINDOW_RECORDS)

    restart_events = tmp_path / "restart.jsonl"
    assert _run_materializer(broker.bootstrap, topic, state_dir, restart_events) == 0
    after = _events(restart_events)
    started = next(e for e in after if e["event"] == "started")
    assert _parse_offsets(started["offsets"]) == stored  # resumed from the store, no rebuild
    assert not any(e["event"] == "rebuild" for e in after)
    closed = next(e for e in after if e["event"] == "closed")
    # The restart read exactly the records after its stored offsets: the killed process's lost
    # window (<= WINDOW_RECORDS) plus what it never reached, never the whole log again.
    assert closed["applied"] == _records_between(log, stored, end)
    assert closed["applied"] < RECORDS
    data, stored = _read_store(state_dir, topic)
    assert stored == end
    assert data == _model(log, end)


def _step_until(materializer: Materializer, predicate, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        materializer.step(0.1)


def _lso(bootstrap: str, topic: str, partitions: int) -> dict[tuple[str, int], int]:
    return {(topic, p): list_offset(bootstrap, topic, p, read_committed=True) for p in range(partitions)}


def test_aborted_and_open_transactions_never_reach_the_store(broker_factory, tmp_path):
    """A confluent-kafka transactional producer writes the changelog: committed, aborted (which
    also overwrites committed keys and deletes one), committed, then one left open. The store
    holds the committed records only; the open one appears once it commits."""
    broker = broker_factory()
    topic = unique_topic("state-txn")
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    producer = transactional_producer(broker.bootstrap, unique_topic("state-txn-id"))
    producer.init_transactions(CLIENT_TIMEOUT_S)

    def txn(records: list[tuple[int, bytes, bytes | None]], *, commit: bool | None) -> None:
        producer.begin_transaction()
        for partition, key, value in records:
            producer.produce(topic, value, key=key, partition=partition)
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
        if commit is True:
            producer.commit_transaction(CLIENT_TIMEOUT_S)
        elif commit is False:
            producer.abort_transaction(CLIENT_TIMEOUT_S)

    txn([(0, b"a", b"1"), (1, b"b", b"1"), (0, b"c", b"1")], commit=True)
    txn([(0, b"a", b"ABORTED"), (1, b"x", b"ABORTED"), (0, b"c", None)], commit=False)
    txn([(1, b"b", b"2"), (1, b"d", b"2")], commit=True)
    txn([(0, b"open", b"OPEN"), (1, b"b", b"OPEN")], commit=None)  # still open

    source = KafkaChangelogSource(broker.bootstrap)
    m = Materializer(tmp_path / "store", topic, source, commit_interval_ms=0, metadata_interval_ms=60_000)
    m.start()
    try:
        target = _lso(broker.bootstrap, topic, PARTITIONS)
        _step_until(m, lambda: all(m.committed_offsets().get(tp, -1) >= o for tp, o in target.items()),
                    "materializer at the LSO")
        for isolation in ("read_committed", "read_uncommitted"):
            reader = present(m.store, "materializer store").reader(isolation)
            assert dict(reader.range()) == {b"a": b"1", b"b": b"2", b"c": b"1", b"d": b"2"}
            reader.close()
        producer.commit_transaction(CLIENT_TIMEOUT_S)
        target = _lso(broker.bootstrap, topic, PARTITIONS)
        _step_until(m, lambda: all(m.committed_offsets().get(tp, -1) >= o for tp, o in target.items()),
                    "materializer past the committed transaction")
        reader = present(m.store, "materializer store").reader()
        assert dict(reader.range()) == {b"a": b"1", b"b": b"OPEN", b"c": b"1", b"d": b"2", b"open": b"OPEN"}
        reader.close()
    finally:
        m.close()


def test_partitions_added_to_the_changelog_are_materialized(broker_factory, tmp_path):
    broker = broker_factory()
    topic = unique_topic("state-grow")
    create_topic(broker.bootstrap, topic, partitions=1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1})
    producer.produce(topic, b"v0", key=b"k0", partition=0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    m = Materializer(tmp_path / "store", topic, KafkaChangelogSource(broker.bootstrap),
                     commit_interval_ms=0, metadata_interval_ms=200)
    m.start()
    try:
        _step_until(m, lambda: present(m.store, "materializer store").get(b"k0") == b"v0", "partition 0")
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_partitions([NewPartitions(topic, 3)])[topic].result(CLIENT_TIMEOUT_S)
        wait_until(lambda: _partition_count(broker.bootstrap, topic) == 3, 30, "3 partitions")
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1})  # fresh metadata
        for p in (1, 2):
            producer.produce(topic, b"v%d" % p, key=b"k%d" % p, partition=p)
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
        def holds_the_new_partitions() -> bool:
            store = present(m.store, "materializer store")  # reopened when the partitions change
            return store.get(b"k2") == b"v2" and store.get(b"k1") == b"v1"

        _step_until(m, holds_the_new_partitions, "new partitions")
    finally:
        m.close()
    with StateStore(tmp_path / "store") as store:
        assert store.committed_offsets() == {(topic, 0): 1, (topic, 1): 1, (topic, 2): 1}


def _partition_count(bootstrap: str, topic: str) -> int:
    # All topics: a metadata request naming the topic could auto-create it again.
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    return len(md.topics[topic].partitions) if topic in md.topics else 0


def test_recreated_changelog_topic_rebuilds_the_store(broker_factory, tmp_path):
    """Topic deleted and recreated shorter: the stored offsets are past its high watermark, so
    the materializer wipes the store (with a warning) instead of keeping stale keys."""
    broker = broker_factory()
    topic = unique_topic("state-recreate")
    create_topic(broker.bootstrap, topic, partitions=1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1})
    for i in range(10):
        producer.produce(topic, b"old", key=b"old%d" % i, partition=0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    state_dir, events = tmp_path / "store", tmp_path / "events.jsonl"
    assert _run_materializer(broker.bootstrap, topic, state_dir, events) == 0
    assert _read_store(state_dir, topic)[1] == {0: 10}

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_topics([topic])[topic].result(CLIENT_TIMEOUT_S)
    wait_until(lambda: _partition_count(broker.bootstrap, topic) == 0, 30, "topic deleted")
    create_topic(broker.bootstrap, topic, partitions=1)
    producer.produce(topic, b"new", key=b"new", partition=0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0

    again = tmp_path / "again.jsonl"
    assert _run_materializer(broker.bootstrap, topic, state_dir, again) == 0
    assert any(e["event"] == "rebuild" for e in _events(again))
    assert _read_store(state_dir, topic) == ({b"new": b"new"}, {0: 1})
