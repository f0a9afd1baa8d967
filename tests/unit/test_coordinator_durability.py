"""Acknowledge only what is durable (issue 10, point 2): when the records an answer depends on
cannot be appended to ``__consumer_offsets`` / ``__transaction_state``, the answer is
COORDINATOR_NOT_AVAILABLE (as Kafka maps a failed coordinator append), never NONE, and the
coordinator state is what the log holds.

The broker's own services (``GroupService``, ``TxnService``) run over a real ``LogManager``; the
failure is injected through their ``appender`` seam (internal_topic.InternalAppender), which
raises StorageError as a failing disk would.
"""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from oncestream.broker.group_service import GroupService
from oncestream.broker.internal_topic import LogAppender
from oncestream.broker.txn_service import TxnService
from oncestream.coordinator.group.messages import (
    JoinProtocol,
    JoinRequest,
    LeaveRequest,
    LeavingMember,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    PartitionOffsetCommit,
    SyncRequest,
)
from oncestream.coordinator.txn.state import TxnState
from oncestream.errors import StorageError
from oncestream.log.config import LogConfig
from oncestream.log.manager import LogManager
from oncestream.log.partition_log import PartitionLog
from oncestream.topic_partition import TopicPartition

T0 = 1_700_000_000_000
GROUP = "g"
TP = TopicPartition("orders", 0)
PROPS = {"offsets.topic.num.partitions": "2", "transaction.state.log.num.partitions": "2",
         "group.initial.rebalance.delay.ms": "0"}


class Fault(LogAppender):
    """The injected appender: appends fail with StorageError while ``on`` is set."""

    def __init__(self) -> None:
        self.on = False

    def append(self, topic: str, partition: int, log: PartitionLog, batch: bytes, now_ms: int) -> None:
        if self.on:
            raise StorageError(f"injected append failure on {topic}-{partition}")
        super().append(topic, partition, log, batch, now_ms)


class Services:
    def __init__(self, data_dir: Path) -> None:
        self.now = T0
        self.logs = LogManager.open(data_dir, LogConfig(), self.now)
        self.logs.create_topic("orders", 1, {}, now_ms=self.now)
        self.offsets_fault = Fault()
        self.txn_fault = Fault()
        self.groups = GroupService(self.logs, PROPS, lambda: self.now, appender=self.offsets_fault)
        pids = itertools.count(1000)
        self.txns = TxnService(self.logs, self.groups, PROPS, lambda: self.now, lambda: next(pids),
                               appender=self.txn_fault)

    def commit(self, offset: int, **member) -> ErrorCode:
        coord = self.groups.coordinator
        result, writes = coord.commit_offsets(
            OffsetCommitRequest(GROUP, {TP: PartitionOffsetCommit(offset)}, **member), self.now
        )
        return self.groups.finish(GROUP, result, writes).partitions[TP]

    def committed(self) -> int:
        fetched = self.groups.coordinator.fetch_offsets(OffsetFetchRequest(GROUP, (TP,)), self.now)
        return fetched.partitions[TP].offset


def test_offset_commit_whose_record_is_not_appended_answers_coordinator_not_available(tmp_path):
    s = Services(tmp_path)
    assert s.commit(5) == ErrorCode.none
    s.offsets_fault.on = True
    assert s.commit(9) == ErrorCode.coordinator_not_available
    # The partition was reloaded from the log: the unpersisted offset is not served.
    assert s.committed() == 5
    s.offsets_fault.on = False
    assert s.commit(9) == ErrorCode.none
    assert s.committed() == 9


def _join_and_sync(s: Services, *, fail_sync: bool):
    """One member joins (v3: no member id round trip) and syncs as leader; returns the
    SyncGroup answer, with the group record's append failing if ``fail_sync``."""

    async def run():
        svc, coord = s.groups, s.groups.coordinator
        loop = asyncio.get_running_loop()
        join_fut = loop.create_future()
        request = JoinRequest(GROUP, "", "consumer", (JoinProtocol("range", b"r"),), 10_000, 30_000, 3,
                              client_id="c", client_host="/127.0.0.1")
        svc.complete(coord.join_group(request, s.now, svc.responder(join_fut, GROUP)))
        svc.complete(coord.tick(s.now))  # the (zero) initial rebalance delay ends the join phase
        joined = await join_fut
        assert joined.error == ErrorCode.none, joined
        s.offsets_fault.on = fail_sync
        sync_fut = loop.create_future()
        sync = SyncRequest(GROUP, joined.generation_id, joined.member_id,
                           assignments={joined.member_id: b"assignment"})
        svc.complete(coord.sync_group(sync, s.now, svc.responder(sync_fut, GROUP)))
        s.offsets_fault.on = False
        return joined, await sync_fut

    return asyncio.run(run())


def test_sync_group_whose_group_record_is_not_appended_answers_coordinator_not_available(tmp_path):
    s = Services(tmp_path)
    _, synced = _join_and_sync(s, fail_sync=True)
    assert synced.error == ErrorCode.coordinator_not_available
    assert synced.assignment == b""
    # Nothing of the generation reached the log: the reloaded coordinator does not know it.
    assert s.groups.coordinator.group_generation(GROUP) is None


def test_sync_group_answers_its_assignment_once_the_record_is_appended(tmp_path):
    s = Services(tmp_path)
    _, synced = _join_and_sync(s, fail_sync=False)
    assert (synced.error, synced.assignment) == (ErrorCode.none, b"assignment")


def test_leave_group_whose_record_is_not_appended_answers_coordinator_not_available(tmp_path):
    s = Services(tmp_path)
    joined, _ = _join_and_sync(s, fail_sync=False)
    s.offsets_fault.on = True
    result, writes = s.groups.coordinator.leave_group(
        LeaveRequest(GROUP, (LeavingMember(joined.member_id),)), s.now)
    result = s.groups.finish(GROUP, result, writes)
    assert [m.error for m in result.members] == [ErrorCode.coordinator_not_available]


def test_txn_offset_commit_whose_record_is_not_appended_answers_coordinator_not_available(tmp_path):
    s = Services(tmp_path)
    init = s.txns.call(lambda now: s.txns.coordinator.init_producer_id("t", 60_000, now))
    s.offsets_fault.on = True
    result = s.txns.stage_offsets(GROUP, init.producer_id, {TP: PartitionOffsetCommit(7)})
    assert result.partitions[TP] == ErrorCode.coordinator_not_available
    assert s.groups.coordinator.pending_txn_offsets(GROUP) == {}


def test_txn_state_record_not_appended_answers_coordinator_not_available(tmp_path):
    s = Services(tmp_path)
    s.txn_fault.on = True
    init = s.txns.call(lambda now: s.txns.coordinator.init_producer_id("t", 60_000, now))
    assert init is None or init.error == ErrorCode.coordinator_not_available
    s.txn_fault.on = False
    init = s.txns.call(lambda now: s.txns.coordinator.init_producer_id("t", 60_000, now))
    assert init.error == ErrorCode.none
    s.txn_fault.on = True
    end = s.txns.call(lambda now: s.txns.coordinator.end_txn("t", init.producer_id, init.producer_epoch, True, now))
    assert end is None or end.error != ErrorCode.none


def test_commit_whose_offsets_completion_is_not_appended_stays_prepared_until_retried(tmp_path):
    """The transaction's Complete record must not be written before its offsets' outcome is in
    __consumer_offsets: a failed append there keeps the marker job for the retry timer."""
    s = Services(tmp_path)
    coord = s.txns.coordinator
    init = s.txns.call(lambda now: coord.init_producer_id("t", 60_000, now))
    pid, epoch = init.producer_id, init.producer_epoch
    added = s.txns.call(lambda now: coord.add_offsets("t", pid, epoch, GROUP, now))
    assert added.error == ErrorCode.none
    assert s.txns.stage_offsets(GROUP, pid, {TP: PartitionOffsetCommit(11)}).partitions[TP] == ErrorCode.none

    s.offsets_fault.on = True
    ended = s.txns.call(lambda now: coord.end_txn("t", pid, epoch, True, now))
    assert ended.error == ErrorCode.none  # PrepareCommit is durable: the commit is decided
    (described,) = coord.describe_transactions(["t"])
    assert described.state == TxnState.PREPARE_COMMIT.value
    assert s.committed() == -1

    s.offsets_fault.on = False
    asyncio.run(_one_txn_timer_round(s.txns))
    (described,) = coord.describe_transactions(["t"])
    assert described.state == TxnState.COMPLETE_COMMIT.value
    assert s.committed() == 11


async def _one_txn_timer_round(txns: TxnService) -> None:
    txns._tick_interval_ms = 0
    task = asyncio.create_task(txns.run_timers())
    for _ in range(5):
        await asyncio.sleep(0)
    task.cancel()


def test_partition_that_cannot_be_read_back_stays_loading_until_the_timer_reloads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed append unloads the partition; if reading it back fails too, its groups answer
    COORDINATOR_LOAD_IN_PROGRESS (retriable) rather than anything from memory, and the timer task
    loads it once the log reads again."""
    s = Services(tmp_path)
    assert s.commit(5) == ErrorCode.none
    read_all = s.groups.topic.read_all

    def unreadable(partitions=None):
        raise OSError("injected read failure")

    monkeypatch.setattr(s.groups.topic, "read_all", unreadable)
    s.offsets_fault.on = True
    assert s.commit(9) == ErrorCode.coordinator_not_available
    s.offsets_fault.on = False
    assert s.commit(9) == ErrorCode.coordinator_load_in_progress
    monkeypatch.setattr(s.groups.topic, "read_all", read_all)
    s.groups._reload_partitions()  # what the timer task does on its next round
    assert s.committed() == 5
    assert s.commit(9) == ErrorCode.none


def test_delete_groups_and_offset_delete_whose_tombstones_are_not_appended_report_no_deletion(tmp_path):
    s = Services(tmp_path)
    assert s.commit(5) == ErrorCode.none
    coord = s.groups.coordinator
    s.offsets_fault.on = True
    result, writes = coord.delete_offsets(OffsetDeleteRequest(GROUP, (TP,)), s.now)
    result = s.groups.finish(GROUP, result, writes)
    assert result.partitions[TP] == ErrorCode.coordinator_not_available
    deleted, writes = coord.delete_groups([GROUP], s.now)
    assert s.groups.finish_delete_groups(deleted, writes).errors == {GROUP: ErrorCode.coordinator_not_available}
    s.offsets_fault.on = False
    assert s.committed() == 5  # nothing was deleted
    deleted, writes = coord.delete_groups([GROUP], s.now)
    assert s.groups.finish_delete_groups(deleted, writes).errors == {GROUP: ErrorCode.none}
    assert s.committed() == -1
