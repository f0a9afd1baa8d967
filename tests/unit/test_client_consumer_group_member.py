"""The KIP-848 member's I/O glue (client/consumer/consumer_group_member.py) against a scripted
coordinator: every request is built by the glue at a real version, written to bytes with kio's
writer and read back (so a field the version lacks, or a bad value, fails here), then answered
from the test's script. The membership rules themselves are in test_client_consumer_membership.py;
these check what reaches the wire and when the consumer's poll is woken."""

from __future__ import annotations

import asyncio
import datetime
import io
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from oncestream.client.common.config import resolve
from oncestream.client.consumer.consumer_group_member import ConsumerGroupMember
from oncestream.client.consumer.consumer_membership import LEAVE_STATIC_EPOCH, MemberState
from oncestream.protocol.api_keys import CONSUMER_GROUP_HEARTBEAT, OFFSET_COMMIT, OFFSET_FETCH
from oncestream.protocol.codec import reader_for, writer_for
from oncestream.protocol.schemas import request_module, response_module

TOPIC_ID = uuid.UUID(int=7)
WAIT_S = 10.0


class ScriptedCoordinator:
    """Stands in for Cluster: one coordinator, requests round-tripped through the wire format,
    answers from ``answer(api_key, request)``."""

    def __init__(self, answer: Callable[[int, Any], Any], heartbeat_version: int = 1) -> None:
        self.answer = answer
        self.heartbeat_version = heartbeat_version
        self.requests: list[tuple[int, int, Any]] = []
        self.forgotten = 0
        self.topics: dict[str, Any] = {}

    async def coordinator(self, key: str, key_type: int) -> int:
        return 1

    def forget_coordinator(self, key: str, key_type: int) -> None:
        self.forgotten += 1

    async def send(self, node_id: int | None, api_key: int, make: Callable[[Any, int], Any], *,
                   max_version: int | None = None, min_version: int = 0, timeout_s: float | None = None,
                   decoder: Any = None) -> Any:
        version = self.heartbeat_version if api_key == CONSUMER_GROUP_HEARTBEAT else (max_version or 0)
        request = make(request_module(api_key, version), version)
        buf = io.BytesIO()
        writer_for(type(request))(buf, request)
        decoded, _size = reader_for(type(request))(buf.getvalue(), 0)
        self.requests.append((api_key, version, decoded))
        return self.answer(api_key, decoded)

    def heartbeats(self) -> list[Any]:
        return [r for key, _v, r in self.requests if key == CONSUMER_GROUP_HEARTBEAT]


def heartbeat_answer(*, epoch: int, partitions: list[int] | None = None, error: ErrorCode = ErrorCode.none,
                     interval_ms: int = 20) -> Any:
    m = response_module(CONSUMER_GROUP_HEARTBEAT, 1)
    assignment = None
    if partitions is not None:
        assignment = m.Assignment(topic_partitions=(m.TopicPartitions(topic_id=TOPIC_ID, partitions=tuple(partitions)),))
    return m.ConsumerGroupHeartbeatResponse(
        throttle_time=datetime.timedelta(0), error_code=error, error_message=None, member_id=None,
        member_epoch=epoch, heartbeat_interval=datetime.timedelta(milliseconds=interval_ms), assignment=assignment)


def make_member(coordinator: ScriptedCoordinator, **conf: Any) -> tuple[ConsumerGroupMember, list[int]]:
    config = resolve({"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "group.protocol": "consumer",
                      "group.remote.assignor": "uniform", **conf}, "consumer")
    woken: list[int] = []
    member = ConsumerGroupMember(config, coordinator, lambda: woken.append(1))  # type: ignore[arg-type]
    return member, woken


async def until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(int(WAIT_S / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not within {WAIT_S} s: {what}")


def test_join_reconcile_acknowledge_on_the_wire() -> None:
    """The join heartbeat carries the subscription, regex and assignor with epoch 0; the
    assignment (by topic id) wakes the poll; the acknowledgement names the owned partitions."""

    def answer(api_key: int, request: Any) -> Any:
        if request.member_epoch == 0:
            return heartbeat_answer(epoch=5, partitions=[0, 2])
        return heartbeat_answer(epoch=5)

    coordinator = ScriptedCoordinator(answer)

    async def scenario() -> None:
        member, woken = make_member(coordinator)
        member.subscribe(["orders"], "^orders-.*")
        member.start()
        await until(lambda: member.state is MemberState.RECONCILING, "the first assignment")
        assert woken, "the consumer's poll must hear of the assignment"
        join = coordinator.heartbeats()[0]
        assert join.member_epoch == 0
        uuid.UUID(join.member_id)
        assert join.subscribed_topic_names == ("orders",)
        assert join.subscribed_topic_regex == "^orders-.*"
        assert join.server_assignor == "uniform"
        assert join.topic_partitions == ()
        assert join.rebalance_timeout == datetime.timedelta(milliseconds=300_000)
        assert member.generation_id == 5  # what commits and consumer_group_metadata() carry
        step = member.reconciliation(lambda tid: "orders" if tid == TOPIC_ID else None)
        assert step is not None
        assert step.assign == (("orders", 0), ("orders", 2))
        member.reconciled(step)
        await until(lambda: member.state is MemberState.STABLE, "the acknowledgement")
        ack = coordinator.heartbeats()[-1]
        assert ack.member_epoch == 5
        assert [(t.topic_id, t.partitions) for t in ack.topic_partitions] == [(TOPIC_ID, (0, 2))]
        sent = len(coordinator.heartbeats())
        await until(lambda: len(coordinator.heartbeats()) >= sent + 2, "heartbeats at the 20 ms interval")
        later = coordinator.heartbeats()[-1]
        assert later.topic_partitions is None  # unchanged: not sent again
        member.stop_heartbeats()

    asyncio.run(scenario())


def test_fenced_member_wakes_the_poll_and_rejoins_with_epoch_zero_and_the_same_id() -> None:
    answers = iter([heartbeat_answer(epoch=3, partitions=[1]),
                    heartbeat_answer(epoch=3, error=ErrorCode.fenced_member_epoch)])

    def answer(api_key: int, request: Any) -> Any:
        return next(answers, None) or heartbeat_answer(epoch=4, partitions=[])

    coordinator = ScriptedCoordinator(answer)

    async def scenario() -> None:
        member, woken = make_member(coordinator)
        member.subscribe(["orders"], None)
        member.start()
        await until(lambda: member.state is MemberState.RECONCILING, "the assignment")
        step = member.reconciliation(lambda tid: "orders")
        assert step is not None
        member.reconciled(step)
        woken.clear()
        await until(lambda: member.state is MemberState.FENCED, "fencing")
        assert woken, "the consumer's poll must hear of the fencing (on_lost)"
        assert member.needs_poll()
        assert member.generation_id == -1  # a fenced member's commits would only be refused
        member.lost_handled()
        await until(lambda: member.state is MemberState.RECONCILING, "the rejoin")
        first, rejoin = coordinator.heartbeats()[0], coordinator.heartbeats()[-1]
        assert rejoin.member_epoch == 0
        assert rejoin.member_id == first.member_id
        member.stop_heartbeats()

    asyncio.run(scenario())


def test_static_member_leaves_with_epoch_minus_two() -> None:
    coordinator = ScriptedCoordinator(lambda k, r: heartbeat_answer(epoch=max(r.member_epoch, 2), partitions=[0]))

    async def scenario() -> None:
        member, _woken = make_member(coordinator, **{"group.instance.id": "worker-1"})
        member.subscribe(["orders"], None)
        member.start()
        await until(lambda: member.state is MemberState.RECONCILING, "the assignment")
        assert coordinator.heartbeats()[0].instance_id == "worker-1"
        assert member.prepare_leaving()
        await member.leave()
        leave = coordinator.heartbeats()[-1]
        assert leave.member_epoch == LEAVE_STATIC_EPOCH
        assert leave.instance_id == "worker-1"
        assert member.state is MemberState.UNSUBSCRIBED

    asyncio.run(scenario())


def test_offset_commit_v9_carries_the_member_epoch_and_retries_a_stale_one() -> None:
    """KIP-848: OffsetCommit v9 is fenced by member epoch; STALE_MEMBER_EPOCH is sent again
    once the member knows its newer epoch (Kafka's consumer does the same)."""
    epochs = {"member": 6}

    def answer(api_key: int, request: Any) -> Any:
        if api_key == CONSUMER_GROUP_HEARTBEAT:
            return heartbeat_answer(epoch=epochs["member"], partitions=[0], interval_ms=10)
        m = response_module(OFFSET_COMMIT, 9)
        stale = request.generation_id_or_member_epoch != epochs["member"]
        code = ErrorCode.stale_member_epoch if stale else ErrorCode.none
        return m.OffsetCommitResponse(throttle_time=datetime.timedelta(0), topics=tuple(
            m.OffsetCommitResponseTopic(name=t.name, partitions=tuple(
                m.OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=code)
                for p in t.partitions)) for t in request.topics))

    coordinator = ScriptedCoordinator(answer)

    async def scenario() -> None:
        member, _woken = make_member(coordinator)
        member.subscribe(["orders"], None)
        member.start()
        await until(lambda: member.generation_id == 6, "epoch 6")
        epochs["member"] = 7  # the coordinator moved the member on; the next heartbeat says so
        errors = await member.commit([("orders", 0, 42, None, -1)], in_group=True)
        assert errors == {("orders", 0): 0}
        commits = [(v, r) for key, v, r in coordinator.requests if key == OFFSET_COMMIT]
        assert commits[0][0] == 9
        assert commits[0][1].member_id == member.member_id
        assert commits[-1][1].generation_id_or_member_epoch == 7
        member.stop_heartbeats()

    asyncio.run(scenario())


@pytest.mark.parametrize("code", [ErrorCode.unsupported_assignor, ErrorCode.fenced_instance_id])
def test_fatal_heartbeat_errors_reach_the_consumer(code: ErrorCode) -> None:
    coordinator = ScriptedCoordinator(lambda k, r: heartbeat_answer(epoch=0, error=code))

    async def scenario() -> None:
        member, woken = make_member(coordinator)
        member.subscribe(["orders"], None)
        member.start()
        await until(lambda: member.fatal_error is not None, "the fatal error")
        assert member.fatal_error is not None
        assert member.fatal_error.code() == code
        assert member.fatal_error.fatal()
        assert woken
        member.stop_heartbeats()

    asyncio.run(scenario())


def test_a_crashed_heartbeat_task_is_a_fatal_error_for_the_consumer() -> None:
    """A member that silently stopped heartbeating would be expired by the group while its
    application goes on polling; a crash of the task is reported instead."""
    coordinator = ScriptedCoordinator(lambda k, r: object())  # an answer of no known shape

    async def scenario() -> None:
        member, woken = make_member(coordinator)
        member.subscribe(["orders"], None)
        member.start()
        await until(lambda: member.fatal_error is not None, "the crash to be reported")
        assert member.fatal_error is not None
        assert member.fatal_error.fatal()
        assert "heartbeat task crashed" in member.fatal_error.str()
        assert woken

    asyncio.run(scenario())


def test_offset_fetch_v9_names_the_member_and_retries_a_stale_epoch() -> None:
    """Committed offsets are read as a member (OffsetFetch v9: member id and epoch, as Kafka's
    consumer sends them); STALE_MEMBER_EPOCH is asked again once the newer epoch is known."""
    epochs = {"member": 3}

    def answer(api_key: int, request: Any) -> Any:
        if api_key == CONSUMER_GROUP_HEARTBEAT:
            return heartbeat_answer(epoch=epochs["member"], partitions=[0], interval_ms=10)
        m = response_module(OFFSET_FETCH, 9)
        (group,) = request.groups
        if group.member_epoch != epochs["member"]:
            return m.OffsetFetchResponse(throttle_time=datetime.timedelta(0), groups=(m.OffsetFetchResponseGroup(
                group_id=group.group_id, topics=(), error_code=ErrorCode.stale_member_epoch),))
        topics = tuple(m.OffsetFetchResponseTopics(name=t.name, partitions=tuple(
            m.OffsetFetchResponsePartitions(partition_index=p, committed_offset=100 + p, committed_leader_epoch=-1,
                                            metadata="", error_code=ErrorCode.none)
            for p in t.partition_indexes)) for t in group.topics)
        return m.OffsetFetchResponse(throttle_time=datetime.timedelta(0), groups=(m.OffsetFetchResponseGroup(
            group_id=group.group_id, topics=topics, error_code=ErrorCode.none),))

    coordinator = ScriptedCoordinator(answer)

    async def scenario() -> None:
        member, _woken = make_member(coordinator)
        member.subscribe(["orders"], None)
        member.start()
        await until(lambda: member.generation_id == 3, "epoch 3")
        epochs["member"] = 4
        committed = await member.fetch_committed([("orders", 0), ("orders", 1)], require_stable=True)
        assert committed == {("orders", 0): (100, "", 0), ("orders", 1): (101, "", 0)}
        fetches = [r for key, _v, r in coordinator.requests if key == OFFSET_FETCH]
        assert fetches[0].groups[0].member_id == member.member_id
        assert fetches[0].groups[0].member_epoch == 3
        assert fetches[-1].groups[0].member_epoch == 4
        assert fetches[-1].require_stable
        member.stop_heartbeats()

    asyncio.run(scenario())
