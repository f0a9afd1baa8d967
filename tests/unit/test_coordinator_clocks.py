"""Clocks (issue 10, point 3): sessions, rebalance timeouts, transaction timeouts and id expiry run
on the monotonic clock; the wall clock only stamps what is written into records. A wall-clock step
of an hour either way (injected: the coordinators are sans-io and take both clocks) breaks
nothing: no session expires, no transaction times out early or never, no group call fails.

Also the group coordinator's deadline heap: a tick visits only the groups whose deadline passed.
"""

from __future__ import annotations

import itertools

import pytest
from kio.schema.errors import ErrorCode

from oncestream.coordinator.group import GroupCoordinator, GroupCoordinatorConfig
from oncestream.coordinator.group.messages import (
    HeartbeatRequest,
    JoinProtocol,
    JoinRequest,
    OffsetCommitRequest,
    PartitionOffsetCommit,
    SyncRequest,
)
from oncestream.coordinator.txn import Outcome, TransactionCoordinator, TxnCoordinatorConfig
from oncestream.coordinator.txn.state import TxnState
from oncestream.topic_partition import TopicPartition
from tests.support.group_harness import Captured
from tests.support.narrow import present

HOUR_MS = 3_600_000
WALL0 = 1_700_000_000_000
SESSION_MS = 10_000
TP = TopicPartition("orders", 0)


class Clocks:
    """A wall clock that can be stepped and a monotonic clock that only moves forward."""

    def __init__(self) -> None:
        self.wall_ms = WALL0
        self.mono_ms = 5_000

    def elapse(self, ms: int) -> None:
        self.wall_ms += ms
        self.mono_ms += ms

    def step_wall(self, ms: int) -> None:
        self.wall_ms += ms


# --- groups ---------------------------------------------------------------------------------------


def _coordinator() -> GroupCoordinator:
    return GroupCoordinator(GroupCoordinatorConfig(group_initial_rebalance_delay_ms=0),
                            member_id_suffix=map(str, itertools.count()).__next__)


def _form(coord: GroupCoordinator, clocks: Clocks, group_id: str, session_ms: int = SESSION_MS):
    """One member joins and syncs; returns (member id, generation)."""
    joined: Captured = Captured()
    request = JoinRequest(group_id, "", "consumer", (JoinProtocol("range", b"r"),), session_ms, 30_000, 3,
                          client_id="c", client_host="/127.0.0.1")
    coord.join_group(request, clocks.wall_ms, joined, mono_ms=clocks.mono_ms)
    coord.tick(clocks.wall_ms, mono_ms=clocks.mono_ms)  # the (zero) initial delay ends the join
    result = joined.result
    synced: Captured = Captured()
    coord.sync_group(SyncRequest(group_id, result.generation_id, result.member_id,
                                 assignments={result.member_id: b"a"}),
                     clocks.wall_ms, synced, mono_ms=clocks.mono_ms)
    assert synced.result.error == ErrorCode.none
    return result.member_id, result.generation_id


def _heartbeat(coord, clocks, group_id, member_id, generation) -> ErrorCode:
    return coord.heartbeat(HeartbeatRequest(group_id, member_id, generation), clocks.wall_ms,
                           mono_ms=clocks.mono_ms).error


def _commit(coord, clocks, group_id, member_id, generation, offset) -> ErrorCode:
    result, _ = coord.commit_offsets(
        OffsetCommitRequest(group_id, {TP: PartitionOffsetCommit(offset)}, member_id, generation),
        clocks.wall_ms, mono_ms=clocks.mono_ms)
    return result.partitions[TP]


def test_wall_clock_stepping_back_an_hour_breaks_no_group_call():
    coord, clocks = _coordinator(), Clocks()
    member, generation = _form(coord, clocks, "g")
    clocks.step_wall(-HOUR_MS)
    clocks.elapse(1_000)
    assert _heartbeat(coord, clocks, "g", member, generation) == ErrorCode.none
    assert _commit(coord, clocks, "g", member, generation, 5) == ErrorCode.none
    coord.tick(clocks.wall_ms, mono_ms=clocks.mono_ms)
    assert present(coord.group_state("g"), "group state").value == "Stable"
    # What is written into the record is the wall time, stepped back as it is.
    assert coord.committed_offsets("g")[TP].commit_timestamp_ms == clocks.wall_ms


def test_wall_clock_stepping_forward_an_hour_expires_no_session():
    coord, clocks = _coordinator(), Clocks()
    member, generation = _form(coord, clocks, "g")
    clocks.step_wall(HOUR_MS)
    clocks.elapse(1_000)
    coord.tick(clocks.wall_ms, mono_ms=clocks.mono_ms)
    assert present(coord.group_state("g"), "group state").value == "Stable"
    assert _heartbeat(coord, clocks, "g", member, generation) == ErrorCode.none


def test_sessions_expire_on_monotonic_time_even_when_the_wall_clock_goes_back():
    coord, clocks = _coordinator(), Clocks()
    _form(coord, clocks, "g")
    clocks.step_wall(-HOUR_MS)
    clocks.elapse(SESSION_MS + 1)
    coord.tick(clocks.wall_ms, mono_ms=clocks.mono_ms)
    assert present(coord.group_state("g"), "group state").value == "Empty"


def test_a_tick_visits_only_the_groups_whose_deadline_passed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kafka's timer wheel, here a deadline heap: with many idle groups a tick does work for the
    expired deadline only, not for every group (the old tick scanned every group and member)."""
    coord, clocks = _coordinator(), Clocks()
    idle = 300
    for i in range(idle):
        _form(coord, clocks, f"idle-{i}", session_ms=60_000)
    _form(coord, clocks, "short", session_ms=SESSION_MS)
    assert len(coord.deadlines) == idle + 1  # one heap entry per group with a timer

    visited: list[str] = []
    fire = coord._membership.fire_timers

    def counting(group_id, mono_ms):
        visited.append(group_id)
        fire(group_id, mono_ms)

    monkeypatch.setattr(coord._membership, "fire_timers", counting)
    clocks.elapse(SESSION_MS + 1)
    coord.tick(clocks.wall_ms, mono_ms=clocks.mono_ms)
    assert visited == ["short"]
    assert present(coord.group_state("short"), "group state").value == "Empty"
    assert coord.next_deadline_ms() is not None


# --- transactions ---------------------------------------------------------------------------------


TXN_TIMEOUT_MS = 60_000


class TxnDriver:
    """Persists every record at once (the broker's order: append, then on_persisted)."""

    def __init__(self, clocks: Clocks) -> None:
        self.clocks = clocks
        self.log: list[tuple[bytes, bytes | None]] = []
        pids = itertools.count(100)
        self.coord = TransactionCoordinator(TxnCoordinatorConfig(), lambda: next(pids), lambda g: 0)
        self.coord.load([], clocks.wall_ms, mono_ms=clocks.mono_ms)

    def run(self, outcome):
        responses = [outcome.response] if outcome.response is not None else []
        writes, jobs = list(outcome.records_to_persist), list(outcome.markers_to_write)
        while writes or jobs:
            if writes:
                write = writes.pop(0)
                self.log.append((write.key, write.value))
                nxt: Outcome[object] | Outcome[None] = self.coord.on_persisted(
                    write.write_id, self.clocks.wall_ms, mono_ms=self.clocks.mono_ms)
            else:
                job = jobs.pop(0)
                nxt = self.coord.markers_written(job.transactional_id, job.producer_id, job.producer_epoch,
                                                 self.clocks.wall_ms)
            if nxt.response is not None:
                responses.append(nxt.response)
            writes += nxt.records_to_persist
            jobs += nxt.markers_to_write
        return responses[0] if responses else None

    def start(self, tid: str = "t") -> None:
        init = self.run(self.coord.init_producer_id(tid, TXN_TIMEOUT_MS, self.clocks.wall_ms))
        added = self.run(self.coord.add_partitions(tid, init.producer_id, init.producer_epoch, (TP,),
                                                   self.clocks.wall_ms))
        assert added.error == ErrorCode.none

    def tick(self) -> None:
        self.run(self.coord.tick(self.clocks.wall_ms, mono_ms=self.clocks.mono_ms))

    def state(self, tid: str = "t") -> str:
        (described,) = self.coord.describe_transactions([tid])
        return described.state


def test_wall_clock_stepping_forward_does_not_time_a_transaction_out():
    clocks = Clocks()
    txns = TxnDriver(clocks)
    txns.start()
    clocks.step_wall(HOUR_MS)
    clocks.elapse(1_000)
    txns.tick()
    assert txns.state() == TxnState.ONGOING.value


def test_wall_clock_stepping_back_does_not_keep_a_transaction_open_forever():
    clocks = Clocks()
    txns = TxnDriver(clocks)
    txns.start()
    clocks.step_wall(-HOUR_MS)
    clocks.elapse(TXN_TIMEOUT_MS + 1)
    txns.tick()
    assert txns.state() == TxnState.COMPLETE_ABORT.value


def test_transactional_id_expiry_ignores_a_wall_step_forward():
    clocks = Clocks()
    txns = TxnDriver(clocks)
    init = txns.run(txns.coord.init_producer_id("idle", TXN_TIMEOUT_MS, clocks.wall_ms))
    assert init.error == ErrorCode.none
    clocks.step_wall(TxnCoordinatorConfig().transactional_id_expiration_ms + HOUR_MS)
    clocks.elapse(1_000)
    txns.tick()
    assert txns.state("idle") == TxnState.EMPTY.value


def test_a_reloaded_transaction_started_in_the_wall_clocks_future_still_times_out():
    """After a restart the monotonic start is derived from the persisted wall timestamp once; a
    wall clock that went back while the broker was down must not stretch the timeout."""
    clocks = Clocks()
    txns = TxnDriver(clocks)
    txns.start()
    log = list(txns.log)
    clocks.step_wall(-HOUR_MS)  # the restarted broker's wall clock is an hour behind
    clocks.mono_ms = 1  # a new process: a new monotonic origin
    restarted = TxnDriver(clocks)
    restarted.run(restarted.coord.load(log, clocks.wall_ms, mono_ms=clocks.mono_ms))
    assert restarted.state() == TxnState.ONGOING.value
    clocks.elapse(TXN_TIMEOUT_MS + 2)
    restarted.tick()
    assert restarted.state() == TxnState.COMPLETE_ABORT.value


def test_a_reloaded_overdue_transaction_is_aborted_at_once():
    clocks = Clocks()
    txns = TxnDriver(clocks)
    txns.start()
    log = list(txns.log)
    clocks.step_wall(2 * TXN_TIMEOUT_MS)  # the broker was down longer than the timeout
    restarted = TxnDriver(clocks)
    restarted.run(restarted.coord.load(log, clocks.wall_ms, mono_ms=clocks.mono_ms))
    clocks.elapse(1)
    restarted.tick()
    assert restarted.state() == TxnState.COMPLETE_ABORT.value


def test_broker_group_service_survives_a_wall_clock_step_back(tmp_path):
    """The broker's service hands the coordinator both clocks: a wall clock an hour behind only
    changes the commit timestamp written, and the next commit is acknowledged."""
    from oncestream.broker.group_service import GroupService
    from oncestream.log.config import LogConfig
    from oncestream.log.manager import LogManager

    clocks = Clocks()
    logs = LogManager.open(tmp_path, LogConfig(), clocks.wall_ms)
    logs.create_topic("orders", 1, {}, now_ms=clocks.wall_ms)
    svc = GroupService(logs, {"offsets.topic.num.partitions": "1"}, lambda: clocks.wall_ms, lambda: clocks.mono_ms)

    def commit(offset: int) -> ErrorCode:
        result, writes = svc.coordinator.commit_offsets(
            OffsetCommitRequest("g", {TP: PartitionOffsetCommit(offset)}), svc.now_ms(), mono_ms=svc.mono_ms())
        return svc.finish("g", result, writes).partitions[TP]

    assert commit(1) == ErrorCode.none
    clocks.step_wall(-HOUR_MS)
    clocks.elapse(10)
    assert commit(2) == ErrorCode.none
    svc.complete(svc.coordinator.tick(svc.now_ms(), mono_ms=svc.mono_ms()))
    assert svc.coordinator.committed_offsets("g")[TP].commit_timestamp_ms == clocks.wall_ms
