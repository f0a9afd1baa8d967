"""The last blocking disk work off the event loop: a clean's commit point, file removals, and
producer-id blocks (issue 10 point 5, continued).

As in ``test_broker_disk_off_loop``: a broker runs in this process on its own event-loop thread
with an injected fsync that can hold a chosen file (or a held ``rmtree``), clients speak the raw
wire protocol over real sockets, and ordering is shown with events and socket state, never with
wall-time measurements.
"""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import NewTopic

from oncestream.broker.cleaner import LogCleaner
from oncestream.broker.producer_id_service import ProducerIdService
from oncestream.log import compaction
from oncestream.log.compaction import MANIFEST_FILE
from tests.support.narrow import present
from tests.support.wire import (
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
from tests.unit.test_broker_disk_off_loop import (
    WAIT_S,
    ControlledDisk,
    InProcessBroker,
    _answer_waiting,
    _create_topics_v4,
    _delete_records_v0,
    _heartbeat_v0,
    _metadata_v4,
    _metadata_v4_topic_errors,
    _parse_create_topics_v4,
    _parse_delete_records_v0,
)

API_PRODUCE, API_FETCH, API_METADATA, API_HEARTBEAT, API_CREATE_TOPICS, API_DELETE_RECORDS, API_INIT_PRODUCER_ID = (
    0, 1, 3, 12, 19, 21, 22)
TOPIC_ALREADY_EXISTS = 36
PRODUCE_VERSION, FETCH_VERSION = 7, 4


@pytest.fixture
def disk() -> ControlledDisk:
    return ControlledDisk()


@pytest.fixture
def broker(tmp_path: Path, disk: ControlledDisk) -> Iterator[InProcessBroker]:
    running = InProcessBroker(tmp_path / "data", disk, {"log.cleaner.enable": "false"})
    running.state.logs.create_topic("plain", 1, {})
    running.state.logs.get("plain", 0).append(record_batch([b"already there"], timestamp_ms=1), 1)
    try:
        yield running
    finally:
        disk.release.set()
        running.stop()


def _fetch_plain(conn: WireConnection, correlation_id: int, topic: str = "plain"):
    return parse_fetch_response(
        conn.request(API_FETCH, FETCH_VERSION, correlation_id,
                     fetch_request_body(FETCH_VERSION, topic, 0, 0, max_wait_ms=0, min_bytes=1)),
        FETCH_VERSION,
    )


def _produce_plain(conn: WireConnection, correlation_id: int, value: bytes) -> list[tuple[int, int]]:
    body = produce_request_body("plain", 0, record_batch([value], timestamp_ms=1), acks=-1)
    _, results = parse_produce_response(conn.request(API_PRODUCE, PRODUCE_VERSION, correlation_id, body),
                                        PRODUCE_VERSION)
    return [(r.error_code, r.base_offset) for r in results]


def _other_clients_are_answered(running: InProcessBroker) -> None:
    """A Heartbeat, a Metadata, a Produce and a Fetch of other clients, each answered now."""
    with running.connect() as member, running.connect() as client:
        heartbeat = member.request(API_HEARTBEAT, 0, 31, _heartbeat_v0("some-group"))
        assert struct.unpack_from(">i", heartbeat)[0] == 31
        assert _metadata_v4_topic_errors(client.request(API_METADATA, 4, 32, _metadata_v4("plain"))) == {"plain": 0}
        [(error_code, _)] = _produce_plain(client, 33, b"meanwhile")
        assert error_code == 0
        fetched = _fetch_plain(client, 34)
        assert b"already there" in fetched.partitions[0].records
        assert b"meanwhile" in fetched.partitions[0].records


# --- (a) the cleaner's commit point ----------------------------------------------------------


def _fill_table(running: InProcessBroker):
    logs = running.state.logs
    logs.create_topic("table", 1, {"cleanup.policy": "compact", "segment.bytes": "14",
                                   "min.cleanable.dirty.ratio": "0.01"})
    table = logs.get("table", 0)
    for i in range(8):
        table.append(record_batch([b"v%d" % i], key=b"k%d" % (i % 2), timestamp_ms=1), 1)
    return table


def test_the_cleaners_manifest_is_written_off_the_loop_and_nothing_is_swapped_before_it_is_durable(
    broker: InProcessBroker, disk: ControlledDisk,
) -> None:
    """The manifest write (the clean's commit point: temp file fsync, rename, directory fsync)
    runs on a disk thread. Held in its first fsync, the loop answers a Heartbeat, a Metadata, a
    Produce and a Fetch of other clients; the clean is not done, no manifest is in place and
    the compacted table still serves every original record (nothing swapped is observable)."""
    table = _fill_table(broker)
    segments_before = sorted(p.name for p in table.directory.glob("*.log"))
    cleaner = LogCleaner.for_state(broker.state)
    disk.held_suffix = MANIFEST_FILE + ".tmp"
    disk.hold = True
    try:
        cleaning = asyncio.run_coroutine_threadsafe(cleaner.clean_log(table), broker._loop)
        assert disk.held.wait(WAIT_S), "the manifest was not fsynced through the disk threads"
        _other_clients_are_answered(broker)
        with broker.connect() as consumer:
            served = _fetch_plain(consumer, 40, topic="table").partitions[0].records
        assert not disk.release.is_set()
        assert not cleaning.done()
        assert not (table.directory / MANIFEST_FILE).exists(), "committed before the temp file is durable"
        assert all(b"v%d" % i in served for i in range(8)), "a cleaned segment served before the commit"
        assert table.cleaned_offset == 0
        assert sorted(p.name for p in table.directory.glob("*.log")) == segments_before
        disk.release.set()
        assert cleaning.result(WAIT_S) is True
    finally:
        disk.release.set()
        cleaner.close()
    assert table.cleaned_offset > 0
    assert not (table.directory / MANIFEST_FILE).exists()
    with broker.connect() as consumer:
        served = _fetch_plain(consumer, 41, topic="table").partitions[0].records
    assert b"v0" not in served
    assert b"v7" in served
    names = [(what, Path(path).name) for what, path, _ in disk.events]
    assert ("fdatasync returned", MANIFEST_FILE + ".tmp") in names


def test_after_the_commit_the_swap_serves_the_cleaned_segments_while_the_tail_runs_off_the_loop(
    broker: InProcessBroker, disk: ControlledDisk,
) -> None:
    """Once the manifest is durable the renames and the new segment list are applied on the
    loop; the tail (merged-away files, directory fsync, checkpoint, manifest removal) runs on a
    disk thread. Held in its checkpoint write, other clients are answered, the table already
    serves the cleaned segments, the manifest is still on disk (a crash redoes the swap), and
    the merged-away segments' files are gone."""
    table = _fill_table(broker)

    async def flush_table() -> None:  # so that no background flush round writes its checkpoint
        table.flush()

    asyncio.run_coroutine_threadsafe(flush_table(), broker._loop).result(WAIT_S)
    cleaner = LogCleaner.for_state(broker.state)
    disk.held_suffix = str(table.directory / "partition.checkpoint.tmp")
    disk.hold = True
    try:
        cleaning = asyncio.run_coroutine_threadsafe(cleaner.clean_log(table), broker._loop)
        assert disk.held.wait(WAIT_S), "the tail's checkpoint was not written through the disk threads"
        _other_clients_are_answered(broker)
        with broker.connect() as consumer:
            served = _fetch_plain(consumer, 40, topic="table").partitions[0].records
        assert not disk.release.is_set()
        assert not cleaning.done()
        assert (table.directory / MANIFEST_FILE).exists(), "the manifest goes only after the checkpoint"
        assert b"v0" not in served, "the swap is applied once its manifest is durable"
        assert b"v7" in served, "the swap is applied once its manifest is durable"
        assert len(list(table.directory.glob("*.log"))) == table.segment_count
        disk.release.set()
        assert cleaning.result(WAIT_S) is True
    finally:
        disk.release.set()
        cleaner.close()
    assert not (table.directory / MANIFEST_FILE).exists()


def test_segments_named_by_a_manifest_being_committed_are_not_deleted_until_the_swap(tmp_path: Path) -> None:
    """Between the install's first step and the swap the manifest is written elsewhere; a
    DeleteRecords meanwhile moves the log start at once but leaves the planned segments, so the
    durable manifest still describes the log. They go at the next retention pass after the swap."""
    from tests.unit.test_log_compaction import open_log, prepared_log, records_of

    partition_log, _ = prepared_log(tmp_path)
    plan = present(partition_log.compaction_plan(2_000_000), "compaction plan")
    result = compaction.build_cleaned(plan)
    planned = {snapshot.path.name for snapshot in plan.segments}
    commit = partition_log.begin_install_cleaned(result, 2_000_000)
    assert commit is not None
    assert commit.manifest is not None
    cut = plan.segments[2].base_offset
    assert partition_log.delete_records(cut) == cut
    assert planned <= {p.name for p in partition_log.directory.glob("*.log")}, "deleted under the commit"
    commit.run()
    tail = partition_log.apply_install_cleaned(commit, 2_000_000)
    assert tail is not None
    tail.run()
    partition_log.finish_install_cleaned(tail)
    partition_log.apply_retention(2_000_000)
    assert all(offset >= cut for offset, _, _ in records_of(partition_log))
    partition_log.close()
    reopened = open_log(tmp_path, now_ms=2_000_001)
    assert reopened.log_start_offset == cut
    reopened.close()


def test_a_commit_failing_before_its_rename_changes_nothing_and_after_it_recovery_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The commit job on another thread: an fsync failing before the manifest's rename removes
    the ``.cleaned`` files and the log carries on uncleaned; one failing after it (the directory
    fsync) may have committed the swap, so the log goes offline and the next open finishes it."""
    from oncestream.errors import StorageError
    from tests.unit.test_log_compaction import open_log, prepared_log, records_of

    def failing_fsync(name_suffix: str):
        def fsync(fd: int) -> None:
            if os.readlink(f"/proc/self/fd/{fd}").endswith(name_suffix):
                raise OSError(errno.EIO, "injected")
            os.fsync(fd)
        return fsync

    before_log, _ = prepared_log(tmp_path / "before")
    expected_uncleaned = records_of(before_log)
    before_plan = present(before_log.compaction_plan(2_000_000), "compaction plan")
    commit = before_log.begin_install_cleaned(compaction.build_cleaned(before_plan), 2_000_000)
    assert commit is not None
    with pytest.raises(StorageError):
        commit.run(failing_fsync(MANIFEST_FILE + ".tmp"))
    before_log.fail_commit_cleaned(commit, StorageError("injected"))
    assert not list(before_log.directory.glob("*.cleaned"))
    assert not list(before_log.directory.glob("cleaner.swap*"))
    assert records_of(before_log) == expected_uncleaned
    assert before_log.compaction_candidate(2_000_000) is not None

    after_log, written = prepared_log(tmp_path / "after")
    after_plan = present(after_log.compaction_plan(2_000_000), "compaction plan")
    commit = after_log.begin_install_cleaned(compaction.build_cleaned(after_plan), 2_000_000)
    assert commit is not None
    with pytest.raises(StorageError):
        commit.run(failing_fsync(after_log.directory.name))  # the directory fsync, after the rename
    after_log.fail_commit_cleaned(commit, StorageError("injected"))
    with pytest.raises(StorageError, match="offline"):
        records_of(after_log)
    after_log.abandon()
    reopened = open_log(tmp_path / "after", now_ms=2_000_001)
    assert reopened.cleaned_offset > 0
    assert not (reopened.directory / MANIFEST_FILE).exists()
    kept = records_of(reopened)
    assert len(kept) < len(written)
    assert all(written.get(o, (k, v)) == (k, v) for o, k, v in kept)
    reopened.close()


def test_deferred_segment_removal_leaves_the_files_to_their_owner(tmp_path: Path) -> None:
    """Retention with ``defer_removal`` drops the segments from the log at once (no read
    reaches them) and hands their files over; ``close`` removes any that were left."""
    from oncestream.log.config import LogConfig
    from oncestream.log.partition_log import PartitionLog

    config = LogConfig.from_topic_configs({"segment.bytes": "14", "retention.ms": "1000"})
    partition_log = PartitionLog.open(tmp_path / "t-0", config, 10_000)
    for i in range(4):
        partition_log.append(record_batch([b"x%d" % i], timestamp_ms=1), 10_000)
    files_before = sorted(p.name for p in partition_log.directory.glob("*.log"))
    assert partition_log.apply_retention(10_000, defer_removal=True) == 3
    assert partition_log.log_start_offset == 3
    assert sorted(p.name for p in partition_log.directory.glob("*.log")) == files_before
    removal = partition_log.take_file_removal()
    assert removal is not None
    assert removal.files[0].name == files_before[0]
    assert partition_log.take_file_removal() is None
    removal.run()
    assert sorted(p.name for p in partition_log.directory.glob("*.log")) == files_before[3:]
    partition_log.append(record_batch([b"y"], timestamp_ms=1), 20_000)
    partition_log.append(record_batch([b"z"], timestamp_ms=1), 20_000)
    assert partition_log.apply_retention(20_000, defer_removal=True) == 2  # x3 and y; z stays active
    partition_log.close()
    assert len(list((tmp_path / "t-0").glob("*.log"))) == 1


# --- (b) removing deleted files ----------------------------------------------------------------


class HeldRemoval:
    """Holds ``shutil.rmtree`` and ``Path.unlink`` of anything under ``under`` until released."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, under: Path) -> None:
        self.held, self.release = threading.Event(), threading.Event()
        self.removed: list[str] = []
        real_rmtree, real_unlink = shutil.rmtree, Path.unlink

        def wait(path: object) -> None:
            if str(path).startswith(str(under)):
                self.held.set()
                if not self.release.wait(WAIT_S):
                    raise OSError(errno.ETIMEDOUT, "test never released the disk")
                self.removed.append(Path(str(path)).name)

        def rmtree(path, *args, **kwargs):
            wait(path)
            return real_rmtree(path, *args, **kwargs)

        def unlink(path: Path, missing_ok: bool = False) -> None:
            wait(path)
            real_unlink(path, missing_ok=missing_ok)

        monkeypatch.setattr(shutil, "rmtree", rmtree)
        monkeypatch.setattr(Path, "unlink", unlink)


def test_a_deleted_topics_directories_are_removed_off_the_loop(
    broker: InProcessBroker, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """DeleteTopics removes the partition directories on a disk thread (a topic of many
    segments takes long to unlink). Held in that ``rmtree``, the loop answers other clients; the
    topic is gone from the metadata already, its name stays taken (a CreateTopics of it is
    refused, so no new topic shares the directory being removed), and the DeleteTopics is
    answered once the files are gone."""
    from confluent_kafka.admin import AdminClient

    logs = broker.state.logs
    logs.create_topic("doomed", 2, {"segment.bytes": "14"})
    for i in range(5):
        logs.get("doomed", 0).append(record_batch([b"d%d" % i], timestamp_ms=1), 1)
    directory = logs.get("doomed", 0).directory
    gate = HeldRemoval(monkeypatch, directory.parent / "doomed-")
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{broker.port}"})
    try:
        [deleting] = admin.delete_topics(["doomed"], request_timeout=WAIT_S).values()
        assert gate.held.wait(WAIT_S), "the directories were not removed through the disk threads"
        _other_clients_are_answered(broker)
        with broker.connect() as other:
            _, again = _parse_create_topics_v4(other.request(API_CREATE_TOPICS, 4, 50, _create_topics_v4("doomed", 1)))
        assert not gate.release.is_set()
        assert not deleting.done()
        assert "doomed" not in logs.topics()
        assert directory.is_dir()
        gate.release.set()
        deleting.result(timeout=WAIT_S)
    finally:
        gate.release.set()
    assert again == [("doomed", TOPIC_ALREADY_EXISTS)]
    assert not directory.exists()
    assert not (directory.parent / "doomed-1").exists()
    logs_now = broker.state.logs
    assert "doomed" not in logs_now.topics()
    [created] = admin.create_topics([NewTopic("doomed", 1)], request_timeout=WAIT_S).values()
    created.result(timeout=WAIT_S)  # the name is free again once the files are gone


def test_delete_records_unlinks_the_deleted_segments_off_the_loop(
    broker: InProcessBroker, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The segments below a DeleteRecords' new log start leave the log on the loop (no read
    reaches them) and their files are unlinked on a disk thread: held there, other clients are
    answered, the DeleteRecords waits, and the files go once released."""
    logs = broker.state.logs
    logs.create_topic("rolling", 1, {"segment.bytes": "14"})
    rolling = logs.get("rolling", 0)
    for i in range(5):
        rolling.append(record_batch([b"r%d" % i], timestamp_ms=1), 1)
    segments_before = sorted(p.name for p in rolling.directory.glob("*.log"))
    gate = HeldRemoval(monkeypatch, rolling.directory / "0000")
    try:
        with broker.connect() as admin:
            admin.send(frame(request_header(API_DELETE_RECORDS, 0, 1, flexible=False) + _delete_records_v0("rolling", 0, 3)))
            assert gate.held.wait(WAIT_S), "the segment files were not unlinked through the disk threads"
            _other_clients_are_answered(broker)
            assert rolling.log_start_offset == 3, "the segments left the log before their files"
            assert not gate.release.is_set()
            assert not _answer_waiting(admin)
            gate.release.set()
            answer = _parse_delete_records_v0(admin.recv_frame())
    finally:
        gate.release.set()
    assert answer == (1, 3, 0)
    assert sorted(p.name for p in rolling.directory.glob("*.log")) == segments_before[3:]
    assert gate.removed[0] == segments_before[0], "the .log goes first, before its indexes"


def test_retention_unlinks_expired_segments_off_the_loop(
    broker: InProcessBroker, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The housekeeping tick drops expired segments from the log on the loop and hands their
    files to a disk thread: held there, the tick has returned and other clients are answered."""
    logs = broker.state.logs
    logs.create_topic("aging", 1, {"segment.bytes": "14", "retention.ms": "1000"})
    aging = logs.get("aging", 0)
    for i in range(4):
        aging.append(record_batch([b"a%d" % i], timestamp_ms=1), 1)
    segments_before = sorted(p.name for p in aging.directory.glob("*.log"))
    gate = HeldRemoval(monkeypatch, aging.directory / "0000")
    ticked = threading.Event()

    def tick() -> None:
        broker.state.tick()
        ticked.set()

    try:
        broker._loop.call_soon_threadsafe(tick)
        assert gate.held.wait(WAIT_S), "the expired segments were not unlinked through the disk threads"
        assert ticked.wait(WAIT_S), "the tick waited for the unlinks"
        _other_clients_are_answered(broker)
        assert aging.log_start_offset == 3
        assert not gate.release.is_set()
        gate.release.set()
        for _ in range(WAIT_S * 100):  # polling for the disk thread; no assertion on time
            if len(list(aging.directory.glob("*.log"))) == 1:
                break
            threading.Event().wait(0.01)
    finally:
        gate.release.set()
    assert sorted(p.name for p in aging.directory.glob("*.log")) == segments_before[3:]


# --- (c) producer id blocks ------------------------------------------------------------------


def _init_producer_id_v0() -> bytes:
    return nullable_string(None) + int32(60_000)  # idempotent: no transactional id


def _send_init_producer_id(conn: WireConnection, correlation_id: int) -> None:
    conn.send(frame(request_header(API_INIT_PRODUCER_ID, 0, correlation_id, flexible=False) + _init_producer_id_v0()))


def _parse_init_producer_id_v0(body: bytes) -> tuple[int, int, int]:
    """(correlation id, error code, producer id)."""
    correlation_id, _throttle, error_code, producer_id, _epoch = struct.unpack_from(">iihqh", body)
    return correlation_id, error_code, producer_id


def _init_producer_id(conn: WireConnection, correlation_id: int) -> int:
    _send_init_producer_id(conn, correlation_id)
    answer = _parse_init_producer_id_v0(conn.recv_frame())
    assert answer[:2] == (correlation_id, 0), answer
    return answer[2]


def test_producer_id_blocks_are_reserved_off_the_loop_and_ids_stay_unique_across_a_restart(
    tmp_path: Path, disk: ControlledDisk,
) -> None:
    """KIP-98 ids never repeat, and their block file is fsynced on a disk thread: blocks of 4
    ids, the next one asked for early. While that write is held, an InitProducerId whose id is
    in the durable block is answered, the one needing the next block waits (no id above the
    durable end is handed out), and a Heartbeat, Metadata, Produce and Fetch of other clients
    are answered. After a restart every new id is above all earlier ones."""
    running = InProcessBroker(tmp_path / "data", disk)
    service = running.state.producer_ids
    assert isinstance(service, ProducerIdService)  # the data directory's blocks (not cluster mode's)
    service.manager.block_size = 4  # before any id was taken
    running.state.logs.create_topic("plain", 1, {})
    running.state.logs.get("plain", 0).append(record_batch([b"already there"], timestamp_ms=1), 1)
    handed_out: list[int] = []
    try:
        with running.connect() as producer:
            handed_out.append(_init_producer_id(producer, 1))  # reserves [0, 4) (not held)
            disk.held_suffix = "producer_id_block.tmp"
            disk.hold = True
            handed_out += [_init_producer_id(producer, 2), _init_producer_id(producer, 3)]  # 1 left: asks for [4, 8)
            assert disk.held.wait(WAIT_S), "the next block was not reserved through the disk threads"
            handed_out.append(_init_producer_id(producer, 4))  # the last id of the durable block
            with running.connect() as second:
                _send_init_producer_id(second, 5)  # needs the block being written
                _other_clients_are_answered(running)
                assert not disk.release.is_set(), "an id above the durable block"
                assert not _answer_waiting(second), "an id above the durable block"
                disk.release.set()
                correlation_id, error_code, producer_id = _parse_init_producer_id_v0(second.recv_frame())
            assert (correlation_id, error_code) == (5, 0)
            handed_out.append(producer_id)
    finally:
        disk.release.set()
        running.stop()
    assert handed_out == [0, 1, 2, 3, 4]
    names = [(what, Path(path).name) for what, path, _ in disk.events]
    assert ("fdatasync returned", "producer_id_block.tmp") in names
    restarted = InProcessBroker(tmp_path / "data", ControlledDisk())
    try:
        with restarted.connect() as producer:
            after_restart = [_init_producer_id(producer, 10 + i) for i in range(3)]
    finally:
        restarted.stop()
    assert min(after_restart) >= 8, after_restart
    assert len(set(after_restart)) == 3, after_restart
