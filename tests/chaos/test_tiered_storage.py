"""Tiered storage against a real S3 server (SeaweedFS) and our broker as a process (issue 21).

One SeaweedFS for the module; each test runs its own broker with its own key prefix. Shown here:

- local disk held flat while far more than ``local.retention.bytes`` is produced: the closed
  segments are in the bucket and gone from the disk;
- remote retention by time and by size: the bucket's listing shrinks and ListOffsets earliest
  moves up;
- SeaweedFS stopped for a while: produce keeps working (nothing waits for the store), and once it
  is back tiering catches up.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

from oncestream.remote import layout
from oncestream.remote.object_store import ObjectStore
from tests.support.clients import (
    CLIENT_TIMEOUT_S,
    admin_client,
    confluent_consumer,
    create_topic,
    unique_topic,
)
from tests.support.seaweedfs import SeaweedServer
from tests.support.tiered import TieredBroker, local_log_bytes, remote_log_bytes, segment_objects, wait_until

pytestmark = pytest.mark.chaos

SEGMENT_BYTES = 4096
LOCAL_RETENTION_BYTES = 8192


@pytest.fixture(scope="module")
def s3(seaweedfs_factory: Callable[..., SeaweedServer]) -> SeaweedServer:
    return seaweedfs_factory()


@pytest.fixture
def broker(tmp_path: Path, s3: SeaweedServer) -> Iterator[TieredBroker]:
    running = TieredBroker(tmp_path / "data", s3)
    running.start()
    try:
        yield running
    finally:
        running.kill()


def _records(count: int, start: int = 0, size: int = 100) -> list[bytes]:
    return [f"{start + i:08d}".encode().ljust(size, b"x") for i in range(count)]


def _tiered_topic(broker: TieredBroker, **config: str) -> str:
    topic = unique_topic("tiered")
    create_topic(broker.bootstrap, topic, 1, {
        "remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES),
        "local.retention.bytes": str(LOCAL_RETENTION_BYTES), **config,
    })
    return topic


def _watermarks(broker: TieredBroker, topic: str) -> tuple[int, int]:
    consumer = confluent_consumer(broker.bootstrap)
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=CLIENT_TIMEOUT_S, cached=False)
        return int(low), int(high)
    finally:
        consumer.close()


def _alter(broker: TieredBroker, topic: str, **config: str) -> None:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET) for name, value in config.items()])
    admin = admin_client(broker.bootstrap)  # held: a collected client cancels its futures
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=CLIENT_TIMEOUT_S)


def _produce(broker: TieredBroker, topic: str, values: list[bytes], timestamp_ms: int = 0) -> None:
    """An idempotent acks=all librdkafka producer; every record acknowledged (small batches:
    many segments). ``timestamp_ms`` (CreateTime) if given."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 1, "batch.num.messages": 10})
    errors: list[object] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    for value in values:
        while True:
            try:
                producer.produce(topic, value, partition=0, timestamp=timestamp_ms, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0, "records left unacknowledged"
    assert not errors, errors[:3]


def test_local_disk_stays_flat_while_the_bucket_holds_the_closed_segments(broker: TieredBroker) -> None:
    topic = _tiered_topic(broker)
    store = broker.store()
    for round_index in range(4):  # 4 x 150 KB: seventy times local.retention.bytes
        _produce(broker, topic, _records(1500, start=round_index * 1500))
        # once tiering caught up, the disk holds at most local.retention.bytes of copied segments
        # plus the segments not copied yet (the active one and the one just rolled)
        wait_until(lambda: local_log_bytes(broker.data_dir, topic) <= LOCAL_RETENTION_BYTES + 3 * SEGMENT_BYTES,
                   f"local log of {topic} back under local.retention.bytes after round {round_index}")
    remote_logs = segment_objects(store)
    produced_bytes = 6000 * 100
    remote_bytes = remote_log_bytes(store)
    assert remote_bytes >= produced_bytes - LOCAL_RETENTION_BYTES - 3 * SEGMENT_BYTES, (remote_bytes, produced_bytes)
    # every remote segment came with its indexes and the leader epoch checkpoint
    keys = set(store.list(""))
    for key in remote_logs:
        stem = key.removesuffix(".log")
        assert {f"{stem}.index", f"{stem}.timeindex", f"{stem}.leader-epoch-checkpoint"} <= keys, stem
    low, high = _watermarks(broker, topic)
    assert (low, high) == (0, 6000)  # the log start stays at 0: the data is in the bucket


def test_remote_retention_by_time_then_by_size_shrinks_the_bucket_and_moves_the_log_start(
        broker: TieredBroker) -> None:
    topic = _tiered_topic(broker, **{"retention.ms": "-1"})
    store = broker.store()
    day_ms = 86_400_000
    _produce(broker, topic, [b"o" * 100] * 1000, timestamp_ms=int(time.time() * 1000) - 2 * day_ms)
    _produce(broker, topic, _records(2000))
    wait_until(lambda: local_log_bytes(broker.data_dir, topic) <= LOCAL_RETENTION_BYTES + 3 * SEGMENT_BYTES,
               "the closed segments copied")
    copied_before = _remote_bases(store)
    assert copied_before[0] == 0
    assert len(copied_before) >= 3000 * 100 // SEGMENT_BYTES - 4
    assert _watermarks(broker, topic)[0] == 0

    _alter(broker, topic, **{"retention.ms": str(day_ms)})  # the old records expire
    # the segments holding only old records go; the one where the young ones start stays
    per_segment = SEGMENT_BYTES // 100
    wait_until(lambda: _watermarks(broker, topic)[0] > 1000 - per_segment, "log start up to the young records")
    low_after_time = _watermarks(broker, topic)[0]
    assert low_after_time <= 1000  # nothing young went with them
    # the log start moved first; then the expired segments' objects go, all of them
    wait_until(lambda: _remote_bases(store)[0] == low_after_time, "the expired segments deleted from the bucket")
    assert len(_remote_bases(store)) < len(copied_before)

    _alter(broker, topic, **{"retention.bytes": str(10 * SEGMENT_BYTES)})
    wait_until(lambda: remote_log_bytes(store) <= 10 * SEGMENT_BYTES, "remote size under retention.bytes")
    low_after_size = _watermarks(broker, topic)[0]
    assert low_after_size > low_after_time
    wait_until(lambda: _remote_bases(store)[0] == low_after_size, "the segments over retention.bytes deleted")
    assert _watermarks(broker, topic)[1] == 3000


def _remote_bases(store: ObjectStore) -> list[int]:
    """The base offsets of the remote segments in the bucket, sorted."""
    return sorted(layout.parse_segment_key(key).base_offset for key in segment_objects(store))


def test_produce_goes_on_while_the_store_is_down_and_tiering_catches_up_after(
        broker: TieredBroker, s3: SeaweedServer) -> None:
    topic = _tiered_topic(broker)
    store = broker.store()
    _produce(broker, topic, _records(500))
    wait_until(lambda: len(segment_objects(store)) >= 8, "first segments copied")
    s3.stop()
    try:
        # produce while the store is gone: every record acknowledged, the local log keeps them
        _produce(broker, topic, _records(3000, start=500))
        assert _watermarks(broker, topic) == (0, 3500)
        assert local_log_bytes(broker.data_dir, topic) > 3000 * 100 // 2  # nothing copied, nothing deleted
    finally:
        s3.start()
    wait_until(lambda: local_log_bytes(broker.data_dir, topic) <= LOCAL_RETENTION_BYTES + 3 * SEGMENT_BYTES,
               "tiering caught up after the store came back")
    assert remote_log_bytes(store) >= 3500 * 100 - LOCAL_RETENTION_BYTES - 3 * SEGMENT_BYTES
    assert _watermarks(broker, topic) == (0, 3500)
