"""SIGKILL the broker again and again while it copies segments to SeaweedFS and deletes expired
ones (issue 21): after a last restart, tiering cleans up after itself and nothing is lost.

A librdkafka idempotent producer writes numbered records the whole time (it rides out the
restarts); the broker is killed at random moments, so kills land inside uploads, between a
journal's STARTED and FINISHED records, inside deletions and log start moves. Afterwards:

- no orphan: every object in the bucket belongs to a segment that the journal says is
  COPY_SEGMENT_FINISHED (and each such segment has its objects);
- a librdkafka consumer from offset 0 reads every offset of the tiered topic exactly once, in
  order, with the value produced there (the tiered part through the broker's remote reads), and
  so do the bucket's segment objects followed by the local log.

The default run kills a few times; ``-m slow`` runs the long variant.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicPartition

from oncestream.protocol.records import decode_batches
from oncestream.remote.copy_task import PartitionRef
from oncestream.remote.metadata_journal import MetadataJournal, list_journals, replay_lines
from oncestream.remote.object_store import ObjectStore
from oncestream.remote.segment_metadata import RemotePartitionMetadata
from tests.support.clients import CLIENT_TIMEOUT_S, CONSUME_WAIT_S, confluent_consumer, create_topic, unique_topic
from tests.support.seaweedfs import SeaweedServer
from tests.support.tiered import TieredBroker, local_log_bytes, wait_until

pytestmark = pytest.mark.chaos

SEGMENT_BYTES = 8192
LOCAL_RETENTION_BYTES = 16384
# ~500 records (~40 KB) a second per topic: a few segments a second, which the broker copies as
# they close (an unthrottled producer would pile up thousands of segments to catch up on)
BURST_RECORDS = 25
BURST_PAUSE_S = 0.05


class NumberedProducer:
    """Produces ``00000001``, ``00000002``... to each topic from a thread until stopped."""

    def __init__(self, bootstrap: str, topics: list[str]) -> None:
        self.topics = topics
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 2,
            "batch.num.messages": 8, "message.timeout.ms": 180_000, "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 500, "retry.backoff.ms": 50, "retry.backoff.max.ms": 500,
        })
        self.sent = 0
        self.errors: list[object] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="numbered-producer", daemon=True)

    def _on_delivery(self, err: object, _msg: object) -> None:
        if err is not None:
            self.errors.append(err)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sent += 1
            for topic in self.topics:
                value = f"{self.sent:08d}".encode().ljust(64, b".")
                while True:
                    try:
                        self.producer.produce(topic, value, partition=0, on_delivery=self._on_delivery)
                        break
                    except BufferError:
                        self.producer.poll(0.05)
            self.producer.poll(0)
            if self.sent % BURST_RECORDS == 0:
                time.sleep(BURST_PAUSE_S)

    def start(self) -> None:
        self._thread.start()

    def stop_and_flush(self) -> int:
        self._stop.set()
        self._thread.join(CLIENT_TIMEOUT_S)
        assert self.producer.flush(180) == 0, "records left unacknowledged"
        assert not self.errors, self.errors[:3]
        return self.sent


def _journals(data_dir: Path) -> list[tuple[PartitionRef, MetadataJournal]]:
    return [(PartitionRef(info.topic, info.topic_id, info.partition), MetadataJournal.open(info.path))
            for info in list_journals(data_dir)]


def _check_no_orphans(store: ObjectStore, data_dir: Path) -> None:
    """Every object belongs to a COPY_SEGMENT_FINISHED segment, which has all its objects."""
    expected: set[str] = set()
    for ref, journal in _journals(data_dir):
        metadata = journal.metadata
        assert not metadata.unfinished(), f"{ref}: segments left half done: {metadata.unfinished()}"
        for segment in metadata.readable_segments():
            expected |= {ref.key(segment, suffix) for suffix, _size in segment.object_sizes}
        journal.close()
    keys = set(store.list(""))
    orphans = keys - expected
    assert not orphans, f"objects of no COPY_SEGMENT_FINISHED segment: {sorted(orphans)[:10]}"
    missing = expected - keys
    assert not missing, f"copied segments without their objects: {sorted(missing)[:10]}"


def _remote_values(store: ObjectStore, data_dir: Path, topic: str) -> tuple[list[tuple[int, bytes]], int]:
    """(offset, value) of every record in the topic's remote segments; and the first offset after them."""
    ref, journal = next((r, j) for r, j in _journals(data_dir) if r.topic == topic)
    found: list[tuple[int, bytes]] = []
    next_offset = 0
    for segment in journal.metadata.readable_segments():
        blob = store.get(ref.key(segment, "log"))
        for batch in decode_batches(blob):
            found.extend((record.offset, record.value or b"") for record in batch.records)
        next_offset = segment.last_offset + 1
    journal.close()
    return found, next_offset


def _highest_copied_read_only(data_dir: Path, topic: str) -> int:
    """The highest copied offset of ``topic``'s partition 0 from its journal, read without
    opening it (the running broker appends to it; opening would cut what looks like a torn tail)."""
    info = next(i for i in list_journals(data_dir) if i.topic == topic)
    metadata = RemotePartitionMetadata()
    for event in replay_lines(info.path.read_bytes())[0]:
        metadata.apply(event)
    return metadata.highest_copied_last_offset()


def _consumed_values(bootstrap: str, topic: str, start: int) -> list[tuple[int, bytes]]:
    consumer = confluent_consumer(bootstrap)
    try:
        end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=CLIENT_TIMEOUT_S, cached=False)[1]
        consumer.assign([TopicPartition(topic, 0, start)])
        found: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while (found[-1][0] + 1 if found else start) < end:
            assert time.monotonic() < deadline, f"consumer stuck at {found[-1][0] if found else start} of {end}"
            for msg in consumer.consume(num_messages=1000, timeout=CONSUME_WAIT_S):
                assert msg.error() is None, msg.error()
                found.append((int(msg.offset() or 0), bytes(msg.value() or b"")))
        return found
    finally:
        consumer.close()


def _run_kills(tmp_path: Path, s3: SeaweedServer, kills: int, seed: int) -> None:
    rng = random.Random(seed)
    broker = TieredBroker(tmp_path / "data", s3, {"remote.log.manager.thread.pool.size": "4"})
    broker.start()
    try:
        kept = unique_topic("tiered-kept")
        expiring = unique_topic("tiered-expiring")
        base = {"remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES),
                "local.retention.bytes": str(LOCAL_RETENTION_BYTES)}
        create_topic(broker.bootstrap, kept, 1, base)
        create_topic(broker.bootstrap, expiring, 1, {**base, "retention.bytes": str(6 * SEGMENT_BYTES)})
        producer = NumberedProducer(broker.bootstrap, [kept, expiring])
        producer.start()
        for _ in range(kills):
            time.sleep(rng.uniform(0.3, 2.0))
            broker.kill()
            broker.start()
        sent = producer.stop_and_flush()
        store = broker.store()
        # the last run catches up: the local logs are back under local retention
        def caught_up(topic: str) -> Callable[[], bool]:
            return lambda: local_log_bytes(broker.data_dir, topic) <= LOCAL_RETENTION_BYTES + 3 * SEGMENT_BYTES

        for topic in (kept, expiring):
            wait_until(caught_up(topic), f"tiering of {topic} caught up")
        expected = [f"{n:08d}".encode() for n in range(1, sent + 1)]
        local_start = _highest_copied_read_only(broker.data_dir, kept) + 1
        assert local_start > 0, "nothing was tiered"
        # a librdkafka consumer from offset 0: the tiered part through the broker's remote reads
        from_zero = _consumed_values(broker.bootstrap, kept, 0)
        assert [offset for offset, _ in from_zero] == list(range(sent)), "an offset lost or duplicated"
        assert [value[:8] for _, value in from_zero] == expected
        local = _consumed_values(broker.bootstrap, kept, local_start)
        broker.stop()  # clean: the running steps finish, the journals hold no STARTED segment
        _check_no_orphans(store, broker.data_dir)
        # the bucket's own bytes: the copied segments and the local rest are the same records
        remote, after_remote = _remote_values(store, broker.data_dir, kept)
        # copies may have gone on after the local read started: the local part from there on
        assert after_remote >= local_start
        everything = remote + [(offset, value) for offset, value in local if offset >= after_remote]
        assert [offset for offset, _ in everything] == list(range(sent)), "an offset lost or duplicated"
        assert [value[:8] for _, value in everything] == expected
    finally:
        broker.kill()


def test_sigkill_during_uploads_and_deletes_leaves_no_orphan_and_loses_nothing(
        tmp_path: Path, seaweedfs: SeaweedServer) -> None:
    _run_kills(tmp_path, seaweedfs, kills=6, seed=21)


@pytest.mark.slow
def test_sigkill_many_times_during_uploads_and_deletes(tmp_path: Path, seaweedfs: SeaweedServer) -> None:
    _run_kills(tmp_path, seaweedfs, kills=30, seed=2021)
