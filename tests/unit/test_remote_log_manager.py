"""The RemoteLogManager's rounds, driven one at a time over a ``BrokerState`` with a ``file://``
store (issue 21): segments copied in order with all their objects; a copy failing midway or left
STARTED by a crash cleaned (objects deleted, DELETE_SEGMENT_FINISHED) and copied again under a new
id; a deleted topic's objects deleted, journal last, and journals of topics gone while the broker
was down purged at start; remote retention and DeleteRecords with the log start durable before any
object goes; KIP-950's delete-on-disable; refused credentials in the status; a log start behind
the oldest remote segment raised at start-up.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from oncestream.broker.config import BrokerConfig
from oncestream.broker.seams import BrokerSeams
from oncestream.broker.state import BrokerState
from oncestream.errors import RemoteAccessDeniedError, RemoteStorageError
from oncestream.log.local_tiering import TierableSegment
from oncestream.log.recovery import read_checkpoint, write_checkpoint
from oncestream.remote import copy_task, layout
from oncestream.remote.copy_task import PartitionRef
from oncestream.remote.local_store import LocalObjectStore
from oncestream.remote.manager import RemoteLogManager
from oncestream.remote.metadata_journal import MetadataJournal, journal_path
from oncestream.remote.segment_metadata import (
    RemotePartitionMetadata,
    RemoteSegment,
    SegmentDescription,
    SegmentEvent,
    SegmentState,
)
from tests.support.remote_faults import FaultyObjectStore
from tests.support.wire import record_batch

SEGMENT_BYTES = 600
TIERED = {"remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES), "local.retention.bytes": "1200"}
PROPS = {"remote.log.storage.system.enable": "true", "rsm.config.storage.uri": "file:///unused",
         "remote.log.manager.task.retry.backoff.ms": "1", "remote.log.manager.task.retry.backoff.max.ms": "1"}


def _state(data_dir: Path, store: object, fsync: Callable[[int], None] | None = None) -> BrokerState:
    config = BrokerConfig.from_properties("127.0.0.1", 0, PROPS)
    return BrokerState(data_dir, config, fdatasync=fsync, seams=BrokerSeams(object_store=store))  # type: ignore[arg-type]


def _manager(state: BrokerState) -> RemoteLogManager:
    assert state.remote is not None
    return state.remote


def _fill(state: BrokerState, topic: str, batches: int, timestamp_ms: int | None = None) -> None:
    """Append ``batches`` one-record batches (now, unless ``timestamp_ms``) and flush them."""
    timestamp_ms = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    partition_log = state.logs.get(topic, 0)
    for n in range(batches):
        partition_log.append(record_batch([f"{n:06d}".encode().ljust(90, b"v")], timestamp_ms=timestamp_ms), timestamp_ms)
    partition_log.flush()  # the copier takes only durable segments


async def _rounds(state: BrokerState, count: int = 3) -> None:
    for _ in range(count):
        await _manager(state).run_round()
        await _manager(state).wait_idle()


def _state_of(metadata: RemotePartitionMetadata, segment_id: uuid.UUID) -> SegmentState | None:
    segment = metadata.get(segment_id)
    return None if segment is None else segment.state


def _run(data_dir: Path, store: FaultyObjectStore, scenario: Callable[[BrokerState], Awaitable[None]]) -> None:
    """``scenario`` on a broker state over ``data_dir`` and ``store``, on a fresh event loop."""
    async def main() -> None:
        state = _state(data_dir, store)
        try:
            await scenario(state)
        finally:
            state.close()

    asyncio.run(main())


def _store(tmp_path: Path) -> FaultyObjectStore:
    return FaultyObjectStore(LocalObjectStore(str(tmp_path / "bucket")))


def test_segments_are_copied_in_order_with_their_files_and_local_retention_follows(tmp_path: Path) -> None:
    store = _store(tmp_path)

    async def scenario(state: BrokerState) -> None:
        state.logs.create_topic("t", 1, TIERED)
        _fill(state, "t", 40)
        await _rounds(state)
        size, earliest, highest = _manager(state).remote_info("t", 0)
        partition_log = state.logs.get("t", 0)
        assert earliest == 0
        assert highest >= 30
        assert size > 0
        assert partition_log.local_log_start_offset > 0
        assert partition_log.log_start_offset == 0
        metadata = _manager(state).metadata("t", 0)
        assert metadata is not None
        ref = PartitionRef("t", state.logs.topics()["t"].topic_id, 0)
        copied = metadata.readable_segments()
        assert [s.base_offset for s in copied] == [0] + [s.last_offset + 1 for s in copied[:-1]]
        for segment in copied:
            assert store.inner.get(ref.key(segment, "leader-epoch-checkpoint")) == b"0\n1\n0 0\n"
            assert store.inner.size(ref.key(segment, "log")) == segment.size_bytes
            assert segment.object_size("index") == store.inner.size(ref.key(segment, "index"))
            assert segment.object_size("timeindex") == store.inner.size(ref.key(segment, "timeindex"))
            assert segment.has_snapshot
            assert segment.object_size("snapshot") == store.inner.size(ref.key(segment, "snapshot"))

    _run(tmp_path / "data", store, scenario)


def test_a_copy_left_started_by_a_crash_is_deleted_and_copied_again_under_a_new_id(tmp_path: Path) -> None:
    store = _store(tmp_path)

    async def scenario() -> None:
        state = _state(tmp_path / "data", store)
        try:
            state.logs.create_topic("t", 1, {**TIERED, "local.retention.bytes": "-1"})
            _fill(state, "t", 20)
            info = state.logs.topics()["t"]
            partition_log = state.logs.get("t", 0)
            segment = partition_log.closed_segments_to_tier(0)[0]
            # a crash after COPY_SEGMENT_STARTED and the first upload: the journal says STARTED
            journal = MetadataJournal.open(journal_path(state.data_dir, "t", info.topic_id, 0))
            ref = PartitionRef("t", info.topic_id, 0)
            crashed = journal.record(SegmentEvent.copy_started(uuid.uuid4(), SegmentDescription(
                segment.base_offset, segment.last_offset, segment.max_timestamp_ms, segment.size_bytes,
                has_txn_index=False, has_snapshot=False), 1))
            journal.close()
            store.inner.put(ref.key(crashed, "log"), b"partial")
        finally:
            state.close()
        state = _state(tmp_path / "data", store)  # the restart
        try:
            await _rounds(state)
            metadata = _manager(state).metadata("t", 0)
            assert metadata is not None
            assert _state_of(metadata, crashed.segment_id) is SegmentState.DELETE_SEGMENT_FINISHED
            assert ref.key(crashed, "log") not in store.inner.list("")
            first = metadata.readable_segments()[0]
            assert first.base_offset == 0
            assert first.segment_id != crashed.segment_id
        finally:
            state.close()

    asyncio.run(scenario())


def test_a_deleted_topic_loses_its_objects_then_its_journal_and_gone_topics_are_purged_at_start(
        tmp_path: Path) -> None:
    store = _store(tmp_path)

    async def scenario() -> None:
        state = _state(tmp_path / "data", store)
        try:
            state.logs.create_topic("gone", 1, TIERED)
            state.logs.create_topic("stays", 1, TIERED)
            _fill(state, "gone", 20)
            _fill(state, "stays", 20)
            await _rounds(state)
            gone_id = state.logs.topics()["gone"].topic_id
            assert store.inner.list(layout.topic_prefix("gone", gone_id))
            info = state.logs.topics()["gone"]
            state.logs.delete_topic("gone")
            purge = _manager(state).topic_deleted(info)
            assert purge is not None
            await purge
            assert store.inner.list(layout.topic_prefix("gone", gone_id)) == []
            assert not journal_path(state.data_dir, "gone", gone_id, 0).parent.exists()
            assert _manager(state).remote_info("stays", 0)[2] >= 0
            stays_id = state.logs.topics()["stays"].topic_id
            stays_keys = store.inner.list(layout.topic_prefix("stays", stays_id))
            assert stays_keys
        finally:
            state.close()
        # "stays" vanishes while the broker is down (its topic metadata removed): the next start
        # purges its remote data as it finds a journal without a topic
        os.remove(tmp_path / "data" / "logs" / "__topics" / f"{stays_id}.json")
        state = _state(tmp_path / "data", store)
        try:
            await _rounds(state, 1)
            assert store.inner.list(layout.topic_prefix("stays", stays_id)) == []
            assert not journal_path(state.data_dir, "stays", stays_id, 0).parent.exists()
        finally:
            state.close()

    asyncio.run(scenario())


def test_remote_retention_makes_the_log_start_durable_before_deleting_any_object(tmp_path: Path) -> None:
    # At every object deletion, what does the partition's checkpoint on disk say the log start is?
    seen: list[tuple[int, int]] = []  # (base offset of the segment being deleted, durable log start)

    class RecordingStore(FaultyObjectStore):
        def delete(self, key: str) -> None:
            checkpoint = read_checkpoint(tmp_path / "data" / "logs" / "t-0")
            seen.append((layout.parse_segment_key(key).base_offset, checkpoint.log_start_offset))
            super().delete(key)

    store = RecordingStore(LocalObjectStore(str(tmp_path / "bucket")))

    async def scenario(state: BrokerState) -> None:
        state.logs.create_topic("t", 1, {**TIERED, "retention.ms": "-1"})
        _fill(state, "t", 40)
        await _rounds(state)
        assert _manager(state).remote_info("t", 0)[1] == 0
        assert not seen
        state.logs.alter_topic_configs("t", {"retention.bytes": str(6 * SEGMENT_BYTES)}, merge=True)
        await _rounds(state)
        partition_log = state.logs.get("t", 0)
        size, earliest, _ = _manager(state).remote_info("t", 0)
        assert earliest > 0
        assert partition_log.log_start_offset == earliest
        # remote + local-only stays within retention.bytes
        assert size <= 6 * SEGMENT_BYTES

    _run(tmp_path / "data", store, scenario)
    assert seen
    # every object of a segment went only once the durable log start was past that segment
    assert all(durable_start > base for base, durable_start in seen), seen


def test_turning_remote_storage_off_with_delete_on_disable_deletes_the_remote_data(tmp_path: Path) -> None:
    store = _store(tmp_path)

    async def scenario(state: BrokerState) -> None:
        state.logs.create_topic("t", 1, TIERED)
        _fill(state, "t", 40)
        await _rounds(state)
        assert store.inner.list("")
        state.logs.alter_topic_configs("t", {"remote.storage.enable": "false", "remote.log.copy.disable": "true",
                                              "remote.log.delete.on.disable": "true"}, merge=True)
        await _rounds(state)
        partition_log = state.logs.get("t", 0)
        assert store.inner.list("") == []
        assert _manager(state).remote_info("t", 0) == (0, -1, -1)
        assert partition_log.log_start_offset == partition_log.local_log_start_offset > 0

    _run(tmp_path / "data", store, scenario)


def test_clean_unfinished_skips_segments_in_flight_and_deletes_every_suffix(tmp_path: Path) -> None:
    store = _store(tmp_path)
    journal = MetadataJournal.open(tmp_path / "t-x" / "0.journal")
    ref = PartitionRef("t", uuid.uuid4(), 0)

    def started(base: int) -> RemoteSegment:
        return journal.record(SegmentEvent.copy_started(
            uuid.uuid4(), SegmentDescription(base, base + 9, 5, 100, has_txn_index=False, has_snapshot=False), 1))

    busy, idle = started(0), started(10)
    for key in ref.keys(idle):  # an upload that got as far as every object
        store.inner.put(key, b"x")
    assert copy_task.clean_unfinished(store, journal, ref, lambda: 2, in_flight=[busy.segment_id]) == 1
    assert _state_of(journal.metadata, idle.segment_id) is SegmentState.DELETE_SEGMENT_FINISHED
    assert _state_of(journal.metadata, busy.segment_id) is SegmentState.COPY_SEGMENT_STARTED
    assert store.inner.list("") == []
    journal.close()


def test_refused_credentials_show_in_status_and_the_local_log_stays(tmp_path: Path) -> None:
    class DenyingStore(FaultyObjectStore):
        def _check_put(self, key: str) -> None:
            raise RemoteAccessDeniedError(f"403 Forbidden putting {key}")

    store = DenyingStore(LocalObjectStore(str(tmp_path / "bucket")))

    async def scenario(state: BrokerState) -> None:
        state.logs.create_topic("t", 1, TIERED)
        _fill(state, "t", 30)
        assert _manager(state).status == "ok"
        await _rounds(state)
        status = _manager(state).status
        assert "refused the credentials" in status
        assert "403 Forbidden" in status
        assert state.logs.get("t", 0).local_log_start_offset == 0
        assert _manager(state).remote_info("t", 0) == (0, -1, -1)

    _run(tmp_path / "data", store, scenario)


def test_delete_records_below_remote_segments_deletes_them(tmp_path: Path) -> None:
    store = _store(tmp_path)

    async def scenario(state: BrokerState) -> None:
        state.logs.create_topic("t", 1, {**TIERED, "retention.ms": "-1"})
        _fill(state, "t", 40)
        await _rounds(state)
        copied = _manager(state).metadata("t", 0)
        assert copied is not None
        before = copied.readable_segments()
        cut = before[2].base_offset + 1  # inside the third remote segment
        state.logs.get("t", 0).delete_records(cut)
        await _rounds(state)
        after = copied.readable_segments()
        # the two segments wholly below the new log start went, the one holding it stays
        assert [s.base_offset for s in after] == [s.base_offset for s in before[2:]]
        ref = PartitionRef("t", state.logs.topics()["t"].topic_id, 0)
        keys = set(store.inner.list(""))
        assert not any(ref.key(s, "log") in keys for s in before[:2])
        assert state.logs.get("t", 0).log_start_offset == cut

    _run(tmp_path / "data", store, scenario)


def test_a_log_start_behind_the_oldest_remote_segment_is_raised_at_start_up(tmp_path: Path) -> None:
    store = _store(tmp_path)
    earliest: list[int] = []

    async def tier_and_expire(state: BrokerState) -> None:
        state.logs.create_topic("t", 1, {**TIERED, "retention.ms": "-1"})
        _fill(state, "t", 40)
        await _rounds(state)
        state.logs.get("t", 0).delete_records(10)
        await _rounds(state)
        earliest.append(_manager(state).remote_info("t", 0)[1])

    _run(tmp_path / "data", store, tier_and_expire)
    assert earliest[0] > 0
    # the checkpoint goes back to log start 0 (as written by a version that moved the log start
    # only after deleting): offsets 0.. would be offered though their remote data is gone
    directory = tmp_path / "data" / "logs" / "t-0"
    checkpoint = read_checkpoint(directory)
    write_checkpoint(directory, dataclasses.replace(checkpoint, log_start_offset=0))

    async def reopened(state: BrokerState) -> None:
        assert state.logs.get("t", 0).log_start_offset == earliest[0]
        assert read_checkpoint(directory).log_start_offset == earliest[0]  # durable too

    _run(tmp_path / "data", store, reopened)


def test_a_copy_failing_midway_deletes_what_it_uploaded_and_journals_the_deletion(tmp_path: Path) -> None:
    class FailsSecondPut(FaultyObjectStore):
        def _check_put(self, key: str) -> None:
            self.puts += 1
            if self.puts == 2:
                raise RemoteStorageError(f"injected failure putting {key}")

    store = FailsSecondPut(LocalObjectStore(str(tmp_path / "bucket")))
    for suffix in ("log", "index", "timeindex"):
        (tmp_path / f"0.{suffix}").write_bytes(b"x" * 10)
    segment = TierableSegment(0, 9, 10, 5, tmp_path / "0.log", tmp_path / "0.index", tmp_path / "0.timeindex",
                              None, None)
    journal = MetadataJournal.open(tmp_path / "t-x" / "0.journal")
    ref = PartitionRef("t", uuid.uuid4(), 0)
    with pytest.raises(RemoteStorageError):
        copy_task.copy_segment(store, journal, ref, segment, lambda: 1)
    (attempt,) = journal.metadata.segments()
    assert attempt.state is SegmentState.DELETE_SEGMENT_FINISHED
    assert store.inner.list("") == []  # the .log that made it was deleted again
    assert store.puts == 2
    journal.close()


def test_segments_not_yet_durable_get_a_flush_from_the_manager_and_are_copied_after_it(tmp_path: Path) -> None:
    """After a crash the recovered segments are not flushed, and nothing but the broker's
    housekeeping (log.retention.check.interval.ms, 5 minutes by default) would flush them: the
    manager asks the broker's flusher itself, so tiering resumes at its next rounds."""
    store = _store(tmp_path)

    async def scenario(state: BrokerState) -> None:
        state.logs.create_topic("t", 1, TIERED)
        partition_log = state.logs.get("t", 0)
        now_ms = int(time.time() * 1000)
        for n in range(40):  # rolled several times, never flushed
            partition_log.append(record_batch([f"{n:06d}".encode().ljust(90, b"v")], timestamp_ms=now_ms), now_ms)
        assert partition_log.wants_flush()
        assert _manager(state).remote_info("t", 0)[2] == -1
        deadline = time.monotonic() + 10
        while _manager(state).remote_info("t", 0)[2] < 30 and time.monotonic() < deadline:
            await _rounds(state, 1)
            await asyncio.sleep(0.05)  # the flush runs on the disk threads
        assert _manager(state).remote_info("t", 0)[2] >= 30

    _run(tmp_path / "data", store, scenario)
