"""Consumer group protocol APIs (KIP-848): ConsumerGroupHeartbeat (68), ConsumerGroupDescribe (69).

The rules live in coordinator/group/consumer; these handlers translate kio requests into the
coordinator's dataclasses and back, check ACLs as Kafka does, and go through GroupService so a
heartbeat's records (epochs, assignments) are in __consumer_offsets before its answer leaves.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from oncestream.broker.authorize import Op, Res, authorize, authorized_operations
from oncestream.broker.connection_context import client_host
from oncestream.broker.handlers.api_versions import finalized_levels
from oncestream.broker.state import BrokerState
from oncestream.coordinator.group.consumer.messages import ConsumerHeartbeatRequest
from oncestream.coordinator.group.consumer.records import Assignment
from oncestream.protocol import api_keys as k
from oncestream.protocol.codec import RequestHeader, build
from oncestream.protocol.schemas import response_module

if TYPE_CHECKING:
    from oncestream.protocol import request_types as wire

_ZERO = datetime.timedelta(0)
# ConsumerGroupDescribe v1's MemberType: 0 a classic member, 1 a member of the consumer protocol.
_MEMBER_TYPE_CLASSIC, _MEMBER_TYPE_CONSUMER = 0, 1


def consumer_protocol_enabled(state: BrokerState) -> bool:
    """Whether the finalized ``group.version`` enables KIP-848 (level 1, the default)."""
    return finalized_levels(state)["group.version"] >= 1


async def handle_consumer_group_heartbeat(
    state: BrokerState, header: RequestHeader, request: wire.ConsumerGroupHeartbeatRequest
) -> object:
    m = response_module(k.CONSUMER_GROUP_HEARTBEAT, header.api_version)

    def refuse(error: ErrorCode, message: str) -> object:
        return build(m.ConsumerGroupHeartbeatResponse, throttle_time=_ZERO, error_code=error, error_message=message,
                     member_id=None, member_epoch=0, heartbeat_interval=_ZERO, assignment=None)

    if not consumer_protocol_enabled(state):
        return refuse(ErrorCode.unsupported_version, "the consumer group protocol is off (group.version=0)")
    # Kafka: READ on the group; DESCRIBE on every subscribed topic named (no topic is revealed
    # to a client that may not see it).
    if not authorize(state, Op.READ, Res.GROUP, request.group_id):
        return refuse(ErrorCode.group_authorization_failed, "not authorized to read the group")
    if state.shares.groups.group(request.group_id) is not None:
        # A share group's id (KIP-932): Kafka answers that it is not a consumer group.
        return refuse(ErrorCode.group_id_not_found, f"Group {request.group_id} is not a consumer group")
    names = request.subscribed_topic_names
    if names and not all(authorize(state, Op.DESCRIBE, Res.TOPIC, n) for n in names):
        return refuse(ErrorCode.topic_authorization_failed, "not authorized to describe every subscribed topic")
    owned = None
    if request.topic_partitions is not None:
        owned = {tp.topic_id: frozenset(int(p) for p in tp.partitions)
                 for tp in request.topic_partitions if tp.topic_id is not None}
    rebalance = request.rebalance_timeout
    heartbeat = ConsumerHeartbeatRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        member_epoch=request.member_epoch,
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=int(rebalance.total_seconds() * 1000),
        subscribed_topic_names=None if names is None else tuple(names),
        subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None),
        server_assignor=request.server_assignor,
        owned=owned,
        client_id=header.client_id or "",
        client_host=client_host(),
    )
    # The coordinator resolves subscribed names and owned ids through the topic view: on a
    # cluster, learn the topics created through another broker since its last refresh first (a
    # subscribed topic the view lacks is assigned to nobody until the refresh, which then bumps
    # the group epoch once more). handle_join_group does the same for classic members.
    await state.learn_topics(names or ())
    await state.learn_topic_ids(owned or ())
    svc = state.groups
    result, writes = svc.coordinator.consumer_group_heartbeat(heartbeat, state.now_ms(), mono_ms=state.mono_ms())
    with svc.holding(request.group_id, request.member_id):
        result = await svc.finish_async(request.group_id, result, writes)
    assignment = None
    if result.error == ErrorCode.none and result.assignment is not None:
        assignment = build(m.Assignment, topic_partitions=tuple(
            build(m.TopicPartitions, topic_id=topic_id, partitions=tuple(sorted(ps)))
            for topic_id, ps in sorted(result.assignment.items())))
    return build(
        m.ConsumerGroupHeartbeatResponse,
        throttle_time=_ZERO,
        error_code=result.error,
        error_message=result.error_message if result.error != ErrorCode.none else None,
        member_id=result.member_id,
        member_epoch=result.member_epoch,
        heartbeat_interval=datetime.timedelta(milliseconds=result.heartbeat_interval_ms),
        assignment=assignment,
    )


def handle_consumer_group_describe(
    state: BrokerState, header: RequestHeader, request: wire.ConsumerGroupDescribeRequest
) -> object:
    m = response_module(k.CONSUMER_GROUP_DESCRIBE, header.api_version)
    if not consumer_protocol_enabled(state):
        return build(m.ConsumerGroupDescribeResponse, throttle_time=_ZERO, groups=tuple(
            build(m.DescribedGroup, error_code=ErrorCode.unsupported_version, error_message=None, group_id=g,
                  group_state="", group_epoch=-1, assignment_epoch=-1, assignor_name="", members=())
            for g in request.group_ids))
    permitted = [g for g in request.group_ids if authorize(state, Op.DESCRIBE, Res.GROUP, g)]
    described = {d.group_id: d for d in state.groups.coordinator.consumer_group_describe(
        permitted, state.now_ms(), mono_ms=state.mono_ms())}
    state.groups.complete([], wake_timers=False)
    names = state.topic_names_by_id()
    want_ops = request.include_authorized_operations

    def assignment(a: Assignment) -> Any:
        return build(m.Assignment, topic_partitions=tuple(
            build(m.TopicPartitions, topic_id=t, topic_name=names.get(t, ""), partitions=tuple(sorted(ps)))
            for t, ps in sorted(a.items(), key=lambda kv: str(kv[0]))))

    def topics_of(d: Any) -> set[str]:
        out: set[str] = set()
        for mem in d.members:
            out.update(mem.subscribed_topic_names)
            for a in (mem.assignment, mem.target_assignment):
                out.update(names.get(t, "") for t in a)
        out.discard("")
        return out

    groups = []
    for group_id in request.group_ids:
        if group_id not in described:
            groups.append(build(m.DescribedGroup, error_code=ErrorCode.group_authorization_failed,
                                error_message=None, group_id=group_id, group_state="", group_epoch=-1,
                                assignment_epoch=-1, assignor_name="", members=()))
            continue
        d = described[group_id]
        # Kafka: describing members reveals their topics, so DESCRIBE on each is needed too.
        if d.error == ErrorCode.none and not all(authorize(state, Op.DESCRIBE, Res.TOPIC, t) for t in topics_of(d)):
            groups.append(build(m.DescribedGroup, error_code=ErrorCode.topic_authorization_failed,
                                error_message="not authorized to describe every topic of the group",
                                group_id=group_id, group_state="", group_epoch=-1, assignment_epoch=-1,
                                assignor_name="", members=()))
            continue
        members = tuple(
            build(m.Member, member_id=mem.member_id, instance_id=mem.instance_id, rack_id=mem.rack_id,
                  member_epoch=mem.member_epoch, client_id=mem.client_id, client_host=mem.client_host,
                  subscribed_topic_names=mem.subscribed_topic_names,
                  subscribed_topic_regex=mem.subscribed_topic_regex,
                  assignment=assignment(mem.assignment), target_assignment=assignment(mem.target_assignment),
                  **({"member_type": _MEMBER_TYPE_CLASSIC if mem.classic else _MEMBER_TYPE_CONSUMER}
                     if header.api_version >= 1 else {}))
            for mem in d.members)
        groups.append(build(
            m.DescribedGroup, error_code=d.error, error_message=d.error_message, group_id=group_id,
            group_state=d.state, group_epoch=d.group_epoch, assignment_epoch=d.assignment_epoch,
            assignor_name=d.assignor_name, members=members,
            authorized_operations=authorized_operations(state, Res.GROUP, group_id, requested=want_ops)))
    return build(m.ConsumerGroupDescribeResponse, throttle_time=_ZERO, groups=tuple(groups))

