"""The RemoteLogManager inside a broker (issue 21), with a ``file://`` object store wrapped in a
``FaultyObjectStore`` passed through ``BrokerSeams.object_store``.

The broker runs in this process on its own loop thread; librdkafka produces over a real socket.
Uploads fail while the store is "down", then a few more times: the local segments stay, every
produce is acknowledged meanwhile, the failure shows in ``status``, and once the store works the
copies catch up, the failed attempts leave no object behind and local retention frees the disk.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from confluent_kafka import Producer

from oncestream.broker.config import BrokerConfig
from oncestream.broker.seams import BrokerSeams
from oncestream.broker.state import BrokerState
from oncestream.remote.copy_task import PartitionRef
from oncestream.remote.local_store import LocalObjectStore
from oncestream.remote.manager import RemoteLogManager
from tests.support.loop_thread_broker import LoopThreadBroker
from tests.support.remote_faults import FaultyObjectStore

T = TypeVar("T")

WAIT_S = 60.0  # a bound on a hang only
SEGMENT_BYTES = 2048
LOCAL_RETENTION_BYTES = 4096


def _wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


class TieredInProcessBroker(LoopThreadBroker):
    """A broker on a loop thread with tiered storage on ``store`` (rounds every 20 ms)."""

    def __init__(self, data_dir: Path, store: FaultyObjectStore) -> None:
        props = {
            "remote.log.storage.system.enable": "true", "rsm.config.storage.uri": "file:///unused",
            "remote.log.manager.task.interval.ms": "20", "remote.log.manager.task.retry.backoff.ms": "10",
            "remote.log.manager.task.retry.backoff.max.ms": "80",
        }
        config = BrokerConfig.from_properties("127.0.0.1", 0, props)
        super().__init__(BrokerState(data_dir, config, seams=BrokerSeams(object_store=store)))

    @property
    def remote(self) -> RemoteLogManager:
        assert self.state.remote is not None
        return self.state.remote


@pytest.fixture
def store(tmp_path: Path) -> FaultyObjectStore:
    return FaultyObjectStore(LocalObjectStore(str(tmp_path / "bucket")))


@pytest.fixture
def broker(tmp_path: Path, store: FaultyObjectStore) -> Iterator[TieredInProcessBroker]:
    running = TieredInProcessBroker(tmp_path / "data", store)
    try:
        yield running
    finally:
        running.stop()


def _produce(bootstrap: str, topic: str, count: int, start: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 1, "batch.num.messages": 5})
    errors: list[object] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    for n in range(start, start + count):
        producer.produce(topic, f"{n:08d}".encode().ljust(100, b"x"), partition=0, on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(WAIT_S) == 0, "records left unacknowledged"
    assert not errors, errors[:3]


def test_failing_uploads_keep_the_local_segments_never_block_produce_and_catch_up(
        broker: TieredInProcessBroker, store: FaultyObjectStore) -> None:
    topic = "tiered"
    broker.on_loop(lambda: broker.state.logs.create_topic(topic, 1, {
        "remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES),
        "local.retention.bytes": str(LOCAL_RETENTION_BYTES)}))
    store.down = True
    _produce(broker.bootstrap, topic, 600)  # ~60 KB: ~30 segments, every produce acknowledged
    partition_log = broker.state.logs.get(topic, 0)
    _wait_until(lambda: store.failures >= 5, "the manager trying the store again and again")
    # nothing copied, so nothing local deleted; the failure is visible in words
    assert broker.remote.remote_info(topic, 0) == (0, -1, -1)
    assert broker.on_loop(lambda: partition_log.local_log_start_offset) == 0
    assert "injected failure" in broker.remote.status
    assert store.inner.list("") == []  # the store took nothing
    segments_while_down = broker.on_loop(lambda: partition_log.segment_count)

    store.put_failures_left = 3  # the store comes back, flaky at first
    store.down = False
    _produce(broker.bootstrap, topic, 100, start=600)

    def caught_up() -> bool:
        highest = broker.remote.remote_info(topic, 0)[2]
        return highest >= 0 and broker.on_loop(
            lambda: not partition_log.closed_segments_to_tier(highest + 1)) is True

    _wait_until(caught_up, "the copies catching up")
    _wait_until(lambda: broker.remote.status == "ok", "status back to ok")
    size, earliest, highest = broker.remote.remote_info(topic, 0)
    assert earliest == 0
    assert highest > 300
    assert size > 30_000
    # local retention freed the disk once the copies finished; the log start stayed at 0
    assert broker.on_loop(lambda: partition_log.local_log_start_offset) > 0
    assert broker.on_loop(lambda: partition_log.segment_count) < segments_while_down
    assert broker.on_loop(lambda: partition_log.log_start_offset) == 0
    # every object belongs to a COPY_SEGMENT_FINISHED segment: the failed attempts left none
    metadata = broker.remote.metadata(topic, 0)
    assert metadata is not None
    copied = metadata.readable_segments()
    ref = PartitionRef(topic, broker.state.logs.topics()[topic].topic_id, 0)
    stems = {ref.key(s, "log").removesuffix(".log") for s in copied}
    keys = store.inner.list("")
    assert keys
    assert all(key.rsplit(".", 1)[0] in stems for key in keys), keys
    assert not metadata.unfinished()
    # the copied segments are contiguous from offset 0
    assert [s.base_offset for s in copied] == [0] + [s.last_offset + 1 for s in copied[:-1]]
