"""fsync before ack, and a slow disk stalling nobody else (issue 10, points 2 and 5).

A broker runs in this process on its own event-loop thread, with an injected ``fdatasync`` that
records every call and can hold or fail it; clients speak the raw wire protocol over real
sockets. Ordering is shown with events and socket state, never with wall-time measurements.
"""

from __future__ import annotations

import asyncio
import errno
import os
import select
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from oncestream.broker.config import BrokerConfig
from oncestream.broker.state import BrokerState
from oncestream.log.manager import TOPICS_DIR
from tests.support.loop_thread_broker import LoopThreadBroker
from tests.support.narrow import present
from tests.support.wire import (
    ResponseReader,
    WireConnection,
    fetch_request_body,
    frame,
    int32,
    nullable_string,
    parse_fetch_response,
    parse_produce_response,
    produce_request_body,
    record_batch,
    request_header,
)

API_PRODUCE, API_FETCH, API_METADATA, API_HEARTBEAT, API_CREATE_TOPICS = 0, 1, 3, 12, 19
PRODUCE_VERSION, FETCH_VERSION = 7, 4
KAFKA_STORAGE_ERROR, TOPIC_ALREADY_EXISTS, LEADER_NOT_AVAILABLE, POLICY_VIOLATION = 56, 36, 5, 44
WAIT_S = 30  # only a bound on a hang: no assertion depends on how long anything takes


class ControlledDisk:
    """An ``fdatasync`` that logs (path, file size) per call and can hold or fail data files."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, int]] = []
        self.hold = False
        self.fail = False
        self.held = threading.Event()  # a held call is waiting
        self.held_suffix = ".log"  # which files hold and fail apply to (by path suffix)
        self.release = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        size = os.fstat(fd).st_size
        self._record("fdatasync called", path, size)
        if path.endswith(self.held_suffix):
            if self.hold:
                self.held.set()
                if not self.release.wait(WAIT_S):
                    raise OSError(errno.ETIMEDOUT, "test never released the disk")
            if self.fail:
                self._record("fdatasync failed", path, size)
                raise OSError(errno.EIO, "injected I/O error")
        os.fsync(fd)  # also right for the directory, which goes through the same hook
        self._record("fdatasync returned", path, size)

    def _record(self, what: str, path: str, size: int) -> None:
        with self._lock:
            self.events.append((what, path, size))

    def record(self, what: str) -> None:
        self._record(what, "", 0)

    def data_events(self) -> list[tuple[str, str, int]]:
        with self._lock:
            return [e for e in self.events if e[1].endswith(".log") or not e[1]]


class InProcessBroker(LoopThreadBroker):
    """BrokerState + BrokerServer on a private event-loop thread, its disk ``disk``."""

    def __init__(self, data_dir: Path, disk: ControlledDisk, props: dict[str, str] | None = None) -> None:
        config = BrokerConfig.from_properties("127.0.0.1", 0, props or {})
        super().__init__(BrokerState(data_dir, config, fdatasync=disk))


@pytest.fixture
def disk() -> ControlledDisk:
    return ControlledDisk()


@pytest.fixture
def broker(tmp_path: Path, disk: ControlledDisk) -> Iterator[InProcessBroker]:
    running = InProcessBroker(tmp_path / "data", disk)
    logs = running.state.logs
    logs.create_topic("durable", 1, {"flush.messages": "1"})
    logs.create_topic("plain", 1, {})
    logs.create_topic("rolling", 1, {"segment.bytes": "14"})  # every batch rolls a segment
    logs.get("plain", 0).append(record_batch([b"already there"], timestamp_ms=1), 1)
    try:
        yield running
    finally:
        disk.release.set()
        running.stop()


def _send_produce(conn: WireConnection, topic: str, batch: bytes, correlation_id: int) -> None:
    body = produce_request_body(topic, 0, batch, acks=-1)
    conn.send(frame(request_header(API_PRODUCE, PRODUCE_VERSION, correlation_id, flexible=False) + body))


def _answer_waiting(conn: WireConnection) -> bool:
    """Whether a response already sits in the socket (loopback delivers a write at once)."""
    poller = select.poll()
    poller.register(conn.sock, select.POLLIN)
    return bool(poller.poll(0))  # no waiting


def _heartbeat_v0(group: str) -> bytes:
    return nullable_string(group) + int32(-1) + nullable_string("nobody")


def test_acks_all_on_flush_messages_1_is_sent_only_after_the_fdatasync_covering_the_batch_returned(
    broker: InProcessBroker, disk: ControlledDisk,
) -> None:
    """flush.messages=1 + acks=-1: the Produce answer leaves only after an fdatasync of the
    segment file, made when the file already held the whole batch, has returned."""
    disk.hold = True
    batch = record_batch([b"must be durable"], timestamp_ms=1)
    with broker.connect() as producer:
        _send_produce(producer, "durable", batch, correlation_id=7)
        assert disk.held.wait(WAIT_S), "the acknowledgement did not wait for any fsync"
        # The round is held inside fdatasync: nothing may have been answered yet.
        assert not _answer_waiting(producer), "acknowledged before the fsync returned"
        disk.record("disk released")
        disk.release.set()
        correlation_id, results = parse_produce_response(producer.recv_frame(), PRODUCE_VERSION)
        disk.record("ack received")
    assert correlation_id == 7
    assert [(r.error_code, r.base_offset) for r in results] == [(0, 0)]
    events = disk.data_events()
    covering = [
        i for i, (what, path, size) in enumerate(events)
        if what == "fdatasync returned" and "durable-0" in path and size >= len(batch)
    ]
    assert covering, events
    assert covering[0] < events.index(("ack received", "", 0)), events


def test_a_held_fsync_does_not_stall_fetches_or_heartbeats_of_other_clients(
    broker: InProcessBroker, disk: ControlledDisk,
) -> None:
    """Issue 10 point 5: the fsync runs on a disk thread; while it is blocked, the event loop
    keeps answering other connections (a Fetch and a Heartbeat), and the produce waits."""
    disk.hold = True
    with broker.connect() as producer, broker.connect() as consumer, broker.connect() as member:
        _send_produce(producer, "durable", record_batch([b"slow disk"], timestamp_ms=1), correlation_id=1)
        assert disk.held.wait(WAIT_S)
        fetched = parse_fetch_response(
            consumer.request(API_FETCH, FETCH_VERSION, 2,
                             fetch_request_body(FETCH_VERSION, "plain", 0, 0, max_wait_ms=0, min_bytes=1)),
            FETCH_VERSION,
        )
        heartbeat = member.request(API_HEARTBEAT, 0, 3, _heartbeat_v0("some-group"))
        # Both answered while the fsync is still held, and the produce is still unanswered.
        assert not disk.release.is_set()
        assert not _answer_waiting(producer)
        disk.release.set()
        _, results = parse_produce_response(producer.recv_frame(), PRODUCE_VERSION)
    assert fetched.correlation_id == 2
    assert [(p.error_code, p.high_watermark) for p in fetched.partitions] == [(0, 1)]
    assert b"already there" in fetched.partitions[0].records
    assert struct.unpack_from(">i", heartbeat)[0] == 3
    assert [r.error_code for r in results] == [0]


def test_a_failed_fsync_answers_kafka_storage_error_not_none(
    broker: InProcessBroker, disk: ControlledDisk,
) -> None:
    """Issue 10 point 2: an fsync failure under flush.messages=1 is never acknowledged as NONE;
    the partition's log goes offline, so a later produce is refused as well."""
    disk.fail = True
    with broker.connect() as producer:
        for correlation_id in (1, 2):
            _send_produce(producer, "durable", record_batch([b"lost?"], timestamp_ms=1), correlation_id)
            _, results = parse_produce_response(producer.recv_frame(), PRODUCE_VERSION)
            assert [(r.error_code, r.base_offset) for r in results] == [(KAFKA_STORAGE_ERROR, -1)]
        # Topics without flush.messages=1 are not affected.
        _send_produce(producer, "plain", record_batch([b"fine"], timestamp_ms=1), 3)
        _, results = parse_produce_response(producer.recv_frame(), PRODUCE_VERSION)
    assert [(r.error_code, r.base_offset) for r in results] == [(0, 1)]


def test_a_roll_is_made_durable_off_the_loop_while_produces_and_fetches_go_on(
    broker: InProcessBroker, disk: ControlledDisk,
) -> None:
    """A segment roll's fsyncs (sealed data, txn index, producer snapshot) run as a background
    flush round on a disk thread: held there, they delay no answer, not even the producer's."""
    disk.hold = True
    with broker.connect() as producer, broker.connect() as consumer:
        for correlation_id in (1, 2, 3):  # the second and third roll
            _send_produce(producer, "rolling", record_batch([b"r%d" % correlation_id], timestamp_ms=1),
                          correlation_id)
            _, results = parse_produce_response(producer.recv_frame(), PRODUCE_VERSION)
            assert [(r.error_code, r.base_offset) for r in results] == [(0, correlation_id - 1)]
        assert disk.held.wait(WAIT_S), "no flush round started for the rolled segment"
        fetched = parse_fetch_response(
            consumer.request(API_FETCH, FETCH_VERSION, 4,
                             fetch_request_body(FETCH_VERSION, "rolling", 0, 0, max_wait_ms=0, min_bytes=1)),
            FETCH_VERSION,
        )
        assert not disk.release.is_set()  # all of the above while the round is held
        disk.release.set()
    assert [(p.error_code, p.high_watermark) for p in fetched.partitions] == [(0, 3)]
    sealed = str(Path(broker.state.logs.get("rolling", 0).directory) / "00000000000000000000.log")
    assert any(what == "fdatasync returned" and path == sealed for what, path, _ in _wait_for_round(disk))


def _wait_for_round(disk: ControlledDisk) -> list[tuple[str, str, int]]:
    """The disk's events once the released round's first data fdatasync has returned."""
    for _ in range(WAIT_S * 100):
        events = disk.data_events()
        if any(what == "fdatasync returned" for what, _, _ in events):
            return events
        threading.Event().wait(0.01)  # polling for the disk thread; no assertion on time
    return disk.data_events()


def _create_topics_v4(name: str, partitions: int) -> bytes:
    return (int32(1) + nullable_string(name) + int32(partitions) + struct.pack(">h", 1)
            + int32(0) + int32(0) + int32(30_000) + b"\x00")


def _parse_create_topics_v4(frame_body: bytes) -> tuple[int, list[tuple[str, int]]]:
    reader = ResponseReader(frame_body)
    correlation_id = reader.take(">i")
    reader.take(">i")  # throttle_time_ms
    results: list[tuple[str, int]] = []
    for _ in range(reader.take(">i")):
        name = present(reader.string(), "topic name")
        error_code = reader.take(">h")
        reader.string()  # error_message
        results.append((name, error_code))
    return correlation_id, results


class HeldTopicCreation:
    """Holds every fsync of a topic metadata file (the last step of a creation) until released."""

    def __init__(self, monkeypatch) -> None:
        self.held, self.release = threading.Event(), threading.Event()
        real_fsync = os.fsync

        def fsync(fd: int) -> None:
            if os.readlink(f"/proc/self/fd/{fd}").endswith(".json.tmp"):
                self.held.set()
                if not self.release.wait(WAIT_S):
                    raise OSError(errno.ETIMEDOUT, "test never released the disk")
            real_fsync(fd)

        monkeypatch.setattr(os, "fsync", fsync)


def _metadata_v4(topic: str) -> bytes:
    return int32(1) + nullable_string(topic) + b"\x01"  # allow_auto_topic_creation


def _metadata_v4_topic_errors(frame_body: bytes) -> dict[str, int]:
    reader = ResponseReader(frame_body)
    reader.take(">i")  # correlation id
    reader.take(">i")  # throttle_time_ms
    for _ in range(reader.take(">i")):  # brokers
        reader.take(">i")
        reader.string()
        reader.take(">i")
        reader.string()
    reader.string()  # cluster_id
    reader.take(">i")  # controller_id
    errors = {}
    for _ in range(reader.take(">i")):
        error_code = reader.take(">h")
        errors[reader.string() or ""] = error_code
        break  # one topic asked; its partitions are not needed
    return errors


def test_topic_creation_runs_off_the_loop(broker: InProcessBroker, monkeypatch) -> None:
    """CreateTopics makes its files on a disk thread: held in the fsync of the topic's metadata,
    it lets a Fetch and a Heartbeat of other clients through; the topic appears once done, a
    second creation of the same name meanwhile is refused and a Metadata request that would
    auto-create it gets LEADER_NOT_AVAILABLE (retriable), as from Kafka for a topic being created."""
    gate = HeldTopicCreation(monkeypatch)
    held, release = gate.held, gate.release
    with broker.connect() as admin, broker.connect() as other, broker.connect() as consumer:
        admin.send(frame(request_header(API_CREATE_TOPICS, 4, 1, flexible=False) + _create_topics_v4("created", 8)))
        assert held.wait(WAIT_S)
        fetched = parse_fetch_response(
            consumer.request(API_FETCH, FETCH_VERSION, 2,
                             fetch_request_body(FETCH_VERSION, "plain", 0, 0, max_wait_ms=0, min_bytes=1)),
            FETCH_VERSION,
        )
        heartbeat = consumer.request(API_HEARTBEAT, 0, 3, _heartbeat_v0("some-group"))
        _, twice = _parse_create_topics_v4(other.request(API_CREATE_TOPICS, 4, 4, _create_topics_v4("created", 1)))
        metadata = _metadata_v4_topic_errors(other.request(API_METADATA, 4, 5, _metadata_v4("created")))
        assert not release.is_set()
        assert not _answer_waiting(admin)
        assert "created" not in broker.state.logs.topics()
        release.set()
        correlation_id, created = _parse_create_topics_v4(admin.recv_frame())
    assert [(p.error_code, p.high_watermark) for p in fetched.partitions] == [(0, 1)]
    assert struct.unpack_from(">i", heartbeat)[0] == 3
    assert twice == [("created", TOPIC_ALREADY_EXISTS)]
    assert metadata == {"created": LEADER_NOT_AVAILABLE}
    assert (correlation_id, created) == (1, [("created", 0)])
    assert broker.state.logs.topics()["created"].num_partitions == 8


def test_partitions_still_being_created_count_against_the_broker_budget(tmp_path: Path, monkeypatch) -> None:
    """oncestream.max.partitions holds while creations overlap: a CreateTopics arriving while
    another one is still making its files sees those partitions as taken."""
    running = InProcessBroker(tmp_path / "data", ControlledDisk())
    held_now = sum(info.num_partitions for info in running.state.logs.topics().values())
    running.stop()
    running = InProcessBroker(tmp_path / "data", ControlledDisk(), {"oncestream.max.partitions": str(held_now + 12)})
    gate = HeldTopicCreation(monkeypatch)  # after the start: it creates the internal topics
    try:
        with running.connect() as first, running.connect() as second:
            first.send(frame(request_header(API_CREATE_TOPICS, 4, 1, flexible=False) + _create_topics_v4("a", 8)))
            assert gate.held.wait(WAIT_S)
            _, refused = _parse_create_topics_v4(second.request(API_CREATE_TOPICS, 4, 2, _create_topics_v4("b", 8)))
            gate.release.set()
            _, created = _parse_create_topics_v4(first.recv_frame())
    finally:
        gate.release.set()
        running.stop()
    assert (created, refused) == ([("a", 0)], [("b", POLICY_VIOLATION)])


def test_metadata_auto_creation_runs_off_the_loop(broker: InProcessBroker, monkeypatch) -> None:
    """A Metadata request that auto-creates a topic waits for the files on a disk thread, not
    on the loop: a Fetch of another client is answered meanwhile, and a second Metadata for the
    same name gets LEADER_NOT_AVAILABLE (retriable) until the topic is there."""
    gate = HeldTopicCreation(monkeypatch)
    with broker.connect() as first, broker.connect() as other:
        first.send(frame(request_header(API_METADATA, 4, 1, flexible=False) + _metadata_v4("auto")))
        assert gate.held.wait(WAIT_S)
        fetched = parse_fetch_response(
            other.request(API_FETCH, FETCH_VERSION, 2,
                          fetch_request_body(FETCH_VERSION, "plain", 0, 0, max_wait_ms=0, min_bytes=1)),
            FETCH_VERSION,
        )
        meanwhile = _metadata_v4_topic_errors(other.request(API_METADATA, 4, 3, _metadata_v4("auto")))
        assert not gate.release.is_set()
        assert not _answer_waiting(first)
        gate.release.set()
        created = _metadata_v4_topic_errors(first.recv_frame())
    assert [p.error_code for p in fetched.partitions] == [0]
    assert meanwhile == {"auto": LEADER_NOT_AVAILABLE}
    assert created == {"auto": 0}
    assert "auto" in broker.state.logs.topics()


API_DELETE_RECORDS = 21


def _delete_records_v0(topic: str, partition: int, before_offset: int) -> bytes:
    return (int32(1) + nullable_string(topic) + int32(1) + int32(partition) + struct.pack(">q", before_offset)
            + int32(30_000))


def _parse_delete_records_v0(body: bytes) -> tuple[int, int, int]:
    """(correlation id, low watermark, error code) of a one-partition DeleteRecords v0 answer."""
    correlation_id, _throttle, _topics, name_length = struct.unpack_from(">iiih", body)
    position = 14 + name_length + 4  # past the topic name and the partitions array's length
    _partition, low_watermark, error_code = struct.unpack_from(">iqh", body, position)
    return correlation_id, low_watermark, error_code


def test_delete_records_writes_its_checkpoint_off_the_loop_and_deletes_segments_after_it(
    broker: InProcessBroker, disk: ControlledDisk,
) -> None:
    """Issue 10 point 5: DeleteRecords' checkpoint fsync runs on a disk thread. While it is held
    the loop answers another client's Fetch and ApiVersions, the DeleteRecords waits, and no
    segment below the new log start is deleted yet (the checkpoint is durable first)."""
    rolling = broker.state.logs.get("rolling", 0)
    for i in range(5):
        rolling.append(record_batch([b"r%d" % i], timestamp_ms=i), i)
    directory = rolling.directory
    segments_before = sorted(path.name for path in directory.glob("*.log"))
    assert len(segments_before) >= 5
    disk.held_suffix = "partition.checkpoint.tmp"
    disk.hold = True
    with broker.connect() as admin, broker.connect() as consumer:
        admin.send(frame(request_header(API_DELETE_RECORDS, 0, 1, flexible=False) + _delete_records_v0("rolling", 0, 3)))
        assert disk.held.wait(WAIT_S)
        fetched = parse_fetch_response(
            consumer.request(API_FETCH, FETCH_VERSION, 2,
                             fetch_request_body(FETCH_VERSION, "plain", 0, 0, max_wait_ms=0, min_bytes=1)),
            FETCH_VERSION,
        )
        versions = consumer.request(18, 0, 3, b"")  # ApiVersions v0
        assert not disk.release.is_set()
        assert not _answer_waiting(admin)
        assert sorted(path.name for path in directory.glob("*.log")) == segments_before
        disk.release.set()
        answer = _parse_delete_records_v0(admin.recv_frame())
    assert fetched.correlation_id == 2
    assert b"already there" in fetched.partitions[0].records
    assert struct.unpack_from(">ih", versions) == (3, 0)
    assert answer == (1, 3, 0)
    segments_after = sorted(path.name for path in directory.glob("*.log"))
    assert segments_after == segments_before[3:]
    names = [(what, Path(path).name) for what, path, _ in disk.events]
    assert ("fdatasync returned", "partition.checkpoint.tmp") in names


def test_alter_configs_writes_the_topic_metadata_off_the_loop_and_applies_it_after(
    broker: InProcessBroker, disk: ControlledDisk,
) -> None:
    """Issue 10 point 5: AlterConfigs' metadata file is written and fsynced on a disk thread.
    While that fsync is held the loop answers another client's Fetch, the AlterConfigs waits,
    and the logs keep their old config until the new one is durable."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    plain = broker.state.logs.get("plain", 0)
    old_retention_ms = plain.config.retention_ms
    disk.held_suffix = ".json.tmp"  # the topic metadata file's temporary sibling
    disk.hold = True
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{broker.port}"})
    entry = ConfigEntry("retention.ms", "123456", incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ConfigResource.Type.TOPIC, "plain", incremental_configs=[entry])
    [future] = admin.incremental_alter_configs([resource], request_timeout=WAIT_S).values()
    assert disk.held.wait(WAIT_S)
    with broker.connect() as consumer:
        fetched = parse_fetch_response(
            consumer.request(API_FETCH, FETCH_VERSION, 2,
                             fetch_request_body(FETCH_VERSION, "plain", 0, 0, max_wait_ms=0, min_bytes=1)),
            FETCH_VERSION,
        )
    assert not disk.release.is_set()
    assert not future.done()
    assert plain.config.retention_ms == old_retention_ms, "applied only once durable"
    disk.release.set()
    future.result(timeout=WAIT_S)
    assert fetched.correlation_id == 2
    assert b"already there" in fetched.partitions[0].records
    assert plain.config.retention_ms == 123456
    assert broker.state.logs.topics()["plain"].configs == {"retention.ms": "123456"}
    assert any(what == "fdatasync returned" and path.endswith(".json.tmp") for what, path, _ in disk.events)


def test_delete_topics_fsyncs_off_the_loop_and_removes_the_files_after(
    broker: InProcessBroker, disk: ControlledDisk,
) -> None:
    """Issue 10 point 5: DeleteTopics' directory fsync (the metadata unlink made durable) runs on
    a disk thread. While it is held the loop answers another client's Fetch, the deletion waits,
    and the topic's files stay until the unlink is durable."""
    from confluent_kafka.admin import AdminClient

    logs = broker.state.logs
    doomed = logs.create_topic("doomed", 1, {}).name
    directory = logs.get(doomed, 0).directory
    topics_dir = logs.data_dir / TOPICS_DIR  # where the topic metadata files are
    assert topics_dir.is_dir()
    disk.held_suffix = str(topics_dir)
    disk.hold = True
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{broker.port}"})
    [future] = admin.delete_topics([doomed], request_timeout=WAIT_S).values()
    assert disk.held.wait(WAIT_S)
    with broker.connect() as consumer:
        fetched = parse_fetch_response(
            consumer.request(API_FETCH, FETCH_VERSION, 2,
                             fetch_request_body(FETCH_VERSION, "plain", 0, 0, max_wait_ms=0, min_bytes=1)),
            FETCH_VERSION,
        )
    assert not disk.release.is_set()
    assert not future.done()
    assert directory.is_dir(), "nothing removed before the unlink is durable"
    assert doomed in logs.topics(), "nothing removed before the unlink is durable"
    disk.release.set()
    future.result(timeout=WAIT_S)
    assert fetched.correlation_id == 2
    assert b"already there" in fetched.partitions[0].records
    assert doomed not in logs.topics()
    assert not directory.exists()


def test_the_cleaner_install_fsyncs_off_the_loop_and_drops_the_manifest_last(
    tmp_path: Path, disk: ControlledDisk,
) -> None:
    """Issue 10 point 5: the clean's directory fsyncs (the manifest's, at its commit point, then
    the tail's after the renames, before the checkpoint and the manifest removal) run on a disk
    thread. Held in the first one, the loop answers another client's Fetch, the clean is not
    done, and the renamed manifest is on disk (a crash would redo the swap)."""
    from oncestream.broker.cleaner import LogCleaner
    from oncestream.log.compaction import MANIFEST_FILE

    running = InProcessBroker(tmp_path / "data", disk, {"log.cleaner.enable": "false"})
    try:
        logs = running.state.logs
        logs.create_topic("plain", 1, {})
        logs.get("plain", 0).append(record_batch([b"already there"], timestamp_ms=1), 1)
        logs.create_topic("table", 1, {"cleanup.policy": "compact", "segment.bytes": "14",
                                       "min.cleanable.dirty.ratio": "0.01"})
        table = logs.get("table", 0)
        for i in range(8):
            table.append(record_batch([b"v%d" % i], key=b"k%d" % (i % 2), timestamp_ms=1), 1)
        cleaner = LogCleaner.for_state(running.state)
        disk.held_suffix = str(table.directory)
        disk.hold = True
        cleaning = asyncio.run_coroutine_threadsafe(cleaner.clean_log(table), running._loop)
        assert disk.held.wait(WAIT_S)
        with running.connect() as consumer:
            fetched = parse_fetch_response(
                consumer.request(API_FETCH, FETCH_VERSION, 2,
                                 fetch_request_body(FETCH_VERSION, "plain", 0, 0, max_wait_ms=0, min_bytes=1)),
                FETCH_VERSION,
            )
        assert not disk.release.is_set()
        assert not cleaning.done()
        assert (table.directory / MANIFEST_FILE).exists(), "the manifest goes only after the checkpoint"
        disk.release.set()
        assert cleaning.result(WAIT_S) is True
        cleaner.close()
        assert fetched.correlation_id == 2
        assert b"already there" in fetched.partitions[0].records
        assert not (table.directory / MANIFEST_FILE).exists()
        assert table.cleaned_offset > 0
    finally:
        disk.release.set()
        running.stop()
