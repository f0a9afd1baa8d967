"""Consumer group APIs (classic protocol): FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit, OffsetFetch, DescribeGroups, ListGroups, DeleteGroups, OffsetDelete.

Each handler translates kio requests into the coordinator's plain dataclasses and back; the
rules live in coordinator/group. Every call goes through ``GroupService.complete`` so records are
appended to __consumer_offsets before any answer leaves the broker.
"""

from __future__ import annotations

import asyncio
import datetime
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from oncestream.broker.authorize import Op, Res, authorize, authorized_operations
from oncestream.broker.connection_context import client_host, current_session
from oncestream.broker.handlers import share, share_admin
from oncestream.broker.state import BrokerState
from oncestream.coordinator.group.consumer_protocol import CONSUMER_PROTOCOL_TYPE
from oncestream.coordinator.group.messages import (
    FetchedOffset,
    HeartbeatRequest,
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
from oncestream.protocol import api_keys as k
from oncestream.protocol.codec import RequestHeader, build
from oncestream.protocol.consumer_protocol import ConsumerProtocolError, decode_subscription
from oncestream.protocol.schemas import response_module
from oncestream.topic_partition import TopicPartition

if TYPE_CHECKING:
    # The wire requests, apart from the coordinator's own request types of the same names.
    from oncestream.protocol import request_types as wire

_ZERO = datetime.timedelta(0)
KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1


def _ms(delta: datetime.timedelta) -> int:
    return int(delta.total_seconds() * 1000)


def handle_find_coordinator(state: BrokerState, header: RequestHeader, request: wire.FindCoordinatorRequest) -> object:
    m = response_module(k.FIND_COORDINATOR, header.api_version)
    # The endpoint of the listener this request came in on, as Kafka answers.
    host, port = state.config.advertised_for(current_session().listener_name)
    node_id = state.config.node_id
    cluster = state.cluster
    key_type = getattr(request, "key_type", KEY_TYPE_GROUP)
    keys = (request.key,) if hasattr(request, "key") else request.coordinator_keys
    error = ErrorCode.none
    if key_type not in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION):
        error = ErrorCode.invalid_request

    def key_error(key: str) -> ErrorCode:
        # Kafka: DESCRIBE on the group, or on the transactional id.
        if error != ErrorCode.none:
            return error
        if key_type == KEY_TYPE_GROUP and not authorize(state, Op.DESCRIBE, Res.GROUP, key):
            return ErrorCode.group_authorization_failed
        if key_type == KEY_TYPE_TRANSACTION and not authorize(state, Op.DESCRIBE, Res.TRANSACTIONAL_ID, key):
            return ErrorCode.transactional_id_authorization_failed
        return ErrorCode.none

    def where(key: str) -> tuple[int, str, int] | None:
        """(node id, host, port) of the key's coordinator: this broker, or in cluster mode the
        owner of its coordinator partition's lease (None: not known yet, retriable)."""
        if cluster is None:
            return node_id, host, port
        owner = cluster.coordinators.coordinator_node(key_type, key) if cluster.coordinators is not None else None
        for broker in cluster.cached_live_brokers():
            if broker.node_id == owner:
                return (owner, *broker.endpoint_for(current_session().listener_name))
        return None

    if hasattr(m, "Coordinator"):
        coordinators = []
        for key in keys:
            key_err = key_error(key)
            found = where(key) if key_err == ErrorCode.none else None
            if key_err == ErrorCode.none and found is None:
                key_err = ErrorCode.coordinator_not_available
            node, node_host, node_port = found if found is not None else (-1, "", -1)
            coordinators.append(build(m.Coordinator, key=key, node_id=node, host=node_host, port=node_port,
                                      error_code=key_err, error_message=None))
        return build(m.FindCoordinatorResponse, throttle_time=_ZERO, coordinators=tuple(coordinators))
    error = key_error(keys[0])  # versions before 4 (KIP-699) carry exactly one key
    found = where(keys[0]) if error == ErrorCode.none else None
    if error == ErrorCode.none and found is None:
        error = ErrorCode.coordinator_not_available
    node, node_host, node_port = found if found is not None else (-1, "", -1)
    return build(
        m.FindCoordinatorResponse,
        throttle_time=_ZERO,
        error_code=error,
        error_message=None,
        node_id=node,
        host=node_host,
        port=node_port,
    )


def subscribed_topics(join: JoinRequest) -> set[str]:
    """The topics a JoinGroup of the consumer embedded protocol names in its protocols'
    subscriptions (subscribed and owned); none for other protocol types or malformed metadata
    (the coordinator answers those)."""
    if join.protocol_type != CONSUMER_PROTOCOL_TYPE:
        return set()
    names: set[str] = set()
    for protocol in join.protocols:
        try:
            subscription = decode_subscription(protocol.metadata)
        except ConsumerProtocolError:
            continue
        names.update(subscription.topics)
        names.update(topic for topic, _ in subscription.owned_partitions)
    return names


async def handle_join_group(state: BrokerState, header: RequestHeader, request: wire.JoinGroupRequest) -> object:
    m = response_module(k.JOIN_GROUP, header.api_version)
    error = ErrorCode.none
    if not authorize(state, Op.READ, Res.GROUP, request.group_id):
        error = ErrorCode.group_authorization_failed
    elif state.shares.groups.group(request.group_id) is not None:
        error = ErrorCode.inconsistent_group_protocol  # a share group's id (Kafka answers the same)
    if error != ErrorCode.none:
        return build(m.JoinGroupResponse, throttle_time=_ZERO, error_code=error,
                     generation_id=-1, protocol_type=None, protocol_name=None if header.api_version >= 7 else "", leader="",
                     skip_assignment=False, member_id="", members=())
    svc = state.groups
    session_ms = _ms(request.session_timeout)
    rebalance = getattr(request, "rebalance_timeout", None)
    join = JoinRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        protocol_type=request.protocol_type,
        protocols=tuple(JoinProtocol(p.name, p.metadata) for p in request.protocols),
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=_ms(rebalance) if rebalance is not None else session_ms,
        api_version=header.api_version,
        group_instance_id=getattr(request, "group_instance_id", None),
        client_id=header.client_id or "",
        client_host=client_host(),
        reason=getattr(request, "reason", None),
    )
    # A classic member may join (or turn into) a consumer group, whose coordinator resolves the
    # topics of its subscription and owned partitions through the topic view: on a cluster that
    # view must already hold a topic created through another broker since its last refresh, or
    # the member's partitions are dropped from what it is known to own (docs/cluster-coordinators.md).
    await state.learn_topics(subscribed_topics(join))
    fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    await svc.complete_async(svc.coordinator.join_group(
        join, state.now_ms(), svc.responder(fut, request.group_id), mono_ms=state.mono_ms()
    ))
    result = await fut
    members = tuple(
        build(m.JoinGroupResponseMember, member_id=jm.member_id, group_instance_id=jm.group_instance_id, metadata=jm.metadata)
        for jm in result.members
    )
    return build(
        m.JoinGroupResponse,
        throttle_time=_ZERO,
        error_code=result.error,
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name if header.api_version >= 7 else (result.protocol_name or ""),
        leader=result.leader_id,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=members,
    )


async def handle_sync_group(state: BrokerState, header: RequestHeader, request: wire.SyncGroupRequest) -> object:
    m = response_module(k.SYNC_GROUP, header.api_version)
    if not authorize(state, Op.READ, Res.GROUP, request.group_id):
        return build(m.SyncGroupResponse, throttle_time=_ZERO, error_code=ErrorCode.group_authorization_failed,
                     protocol_type=None, protocol_name=None, assignment=b"")
    svc = state.groups
    sync = SyncRequest(
        group_id=request.group_id,
        generation_id=request.generation_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        protocol_type=getattr(request, "protocol_type", None),
        protocol_name=getattr(request, "protocol_name", None),
        assignments={a.member_id: a.assignment for a in request.assignments},
    )
    fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    await svc.complete_async(svc.coordinator.sync_group(
        sync, state.now_ms(), svc.responder(fut, request.group_id), mono_ms=state.mono_ms()
    ))
    result = await fut
    return build(
        m.SyncGroupResponse,
        throttle_time=_ZERO,
        error_code=result.error,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )


def handle_heartbeat(state: BrokerState, header: RequestHeader, request: wire.HeartbeatRequest) -> object:
    m = response_module(k.HEARTBEAT, header.api_version)
    if not authorize(state, Op.READ, Res.GROUP, request.group_id):
        return build(m.HeartbeatResponse, throttle_time=_ZERO, error_code=ErrorCode.group_authorization_failed)
    svc = state.groups
    result = svc.coordinator.heartbeat(
        HeartbeatRequest(
            group_id=request.group_id,
            member_id=request.member_id,
            generation_id=request.generation_id,
            group_instance_id=getattr(request, "group_instance_id", None),
        ),
        state.now_ms(),
        mono_ms=state.mono_ms(),
    )
    svc.complete([], wake_timers=False)  # a heartbeat only moves deadlines later
    return build(m.HeartbeatResponse, throttle_time=_ZERO, error_code=result.error)


async def handle_leave_group(state: BrokerState, header: RequestHeader, request: wire.LeaveGroupRequest) -> object:
    m = response_module(k.LEAVE_GROUP, header.api_version)
    if not authorize(state, Op.READ, Res.GROUP, request.group_id):
        return build(m.LeaveGroupResponse, throttle_time=_ZERO, error_code=ErrorCode.group_authorization_failed, members=())
    svc = state.groups
    if hasattr(request, "members"):
        members = tuple(
            LeavingMember(mi.member_id, getattr(mi, "group_instance_id", None), getattr(mi, "reason", None))
            for mi in request.members
        )
    else:
        members = (LeavingMember(request.member_id),)
    result, writes = svc.coordinator.leave_group(
        LeaveRequest(request.group_id, members), state.now_ms(), mono_ms=state.mono_ms()
    )
    result = await svc.finish_async(request.group_id, result, writes)
    error = result.error
    if header.api_version < 3 and error == ErrorCode.none and result.members:
        error = result.members[0].error  # v0-v2 report the single member's outcome at the top
    members = ()
    if hasattr(m, "MemberResponse"):  # v3+ report each member
        members = tuple(
            build(m.MemberResponse, member_id=lm.member_id, group_instance_id=lm.group_instance_id, error_code=lm.error)
            for lm in result.members
        )
    return build(m.LeaveGroupResponse, throttle_time=_ZERO, error_code=error, members=members)


async def handle_offset_commit(state: BrokerState, header: RequestHeader, request: wire.OffsetCommitRequest) -> object:
    m = response_module(k.OFFSET_COMMIT, header.api_version)
    svc = state.groups
    offsets: dict[TopicPartition, PartitionOffsetCommit] = {}
    unknown: set[TopicPartition] = set()
    # Kafka: READ on the group (else every partition fails and the coordinator is not asked),
    # READ on each topic.
    version = header.api_version
    # v10 names topics by id only: resolve them (an unknown id: UNKNOWN_TOPIC_ID).
    if version >= _TOPIC_IDS_VERSION:
        await state.learn_topic_ids(getattr(t, "topic_id", None) for t in request.topics)
    by_id = _topic_names_by_id(state) if version >= _TOPIC_IDS_VERSION else {}
    named = [(t, _request_topic_name(t, by_id)) for t in request.topics]
    if not authorize(state, Op.READ, Res.GROUP, request.group_id):
        return build(m.OffsetCommitResponse, throttle_time=_ZERO, topics=tuple(
            build(m.OffsetCommitResponseTopic, **_topic_ref(version, name, t), partitions=tuple(
                build(m.OffsetCommitResponsePartition, partition_index=p.partition_index,
                      error_code=ErrorCode.group_authorization_failed) for p in t.partitions))
            for t, name in named))
    denied = {name: ErrorCode.topic_authorization_failed for _, name in named
              if name is not None and not authorize(state, Op.READ, Res.TOPIC, name)}
    await state.learn_topics(name for _, name in named if name is not None)
    for t, name in named:
        if name is None:
            continue
        for p in t.partitions:
            tp = TopicPartition(name, p.partition_index)
            if name in denied:
                continue
            if not state.partition_exists(name, p.partition_index):
                unknown.add(tp)
                continue
            offsets[tp] = PartitionOffsetCommit(
                offset=p.committed_offset,
                leader_epoch=getattr(p, "committed_leader_epoch", -1),
                metadata=p.committed_metadata or "",
            )
    retention = getattr(request, "retention_time", None)
    result, writes = svc.coordinator.commit_offsets(
        OffsetCommitRequest(
            group_id=request.group_id,
            offsets=offsets,
            member_id=request.member_id,
            generation_id=request.generation_id_or_member_epoch,
            group_instance_id=getattr(request, "group_instance_id", None),
            retention_time_ms=_ms(retention) if retention is not None else -1,
        ),
        state.now_ms(),
        mono_ms=state.mono_ms(),
        api_version=header.api_version,
    )
    with svc.holding(request.group_id, request.member_id):
        result = await svc.finish_async(request.group_id, result, writes, wake_timers=False)  # no earlier deadline
    topics_out = []
    for t, name in named:
        parts = []
        for p in t.partitions:
            if name is None:
                error = ErrorCode.unknown_topic_id
            else:
                tp = TopicPartition(name, p.partition_index)
                error = ErrorCode.unknown_topic_or_partition if tp in unknown else result.partitions.get(tp, ErrorCode.none)
                error = denied.get(name, error)
            parts.append(build(m.OffsetCommitResponsePartition, partition_index=p.partition_index, error_code=error))
        topics_out.append(build(m.OffsetCommitResponseTopic, **_topic_ref(version, name, t), partitions=tuple(parts)))
    return build(m.OffsetCommitResponse, throttle_time=_ZERO, topics=tuple(topics_out))


# OffsetCommit and OffsetFetch v10 name topics by id instead of by name.
_TOPIC_IDS_VERSION = 10


@dataclass(frozen=True)
class _FetchTopic:
    """An OffsetFetch v10 topic with its name resolved from its id."""

    name: str
    partition_indexes: tuple[int, ...]


def _topic_names_by_id(state: BrokerState) -> dict[uuid.UUID, str]:
    return state.topic_names_by_id()


def _request_topic_name(topic: Any, by_id: dict[uuid.UUID, str]) -> str | None:
    """The topic's name: given (before v10) or looked up by its id (None if unknown)."""
    name = getattr(topic, "name", None)
    return name if name is not None else by_id.get(topic.topic_id)


def _topic_ref(version: int, name: str | None, topic: Any) -> dict[str, Any]:
    """How a response names a topic: by id from v10 on, by name before."""
    return {"topic_id": topic.topic_id} if version >= _TOPIC_IDS_VERSION else {"name": name}


def _fetch_one_group(state: BrokerState, group_id: str, topics: Any, require_stable: bool,
                     member_id: str | None = None, member_epoch: int = -1) -> Any:
    if not authorize(state, Op.DESCRIBE, Res.GROUP, group_id):
        denied = FetchedOffset(error=ErrorCode.group_authorization_failed)
        listed: dict[str, list[Any]] = {}
        for t in topics or ():
            listed.setdefault(t.name, []).extend((p, denied) for p in t.partition_indexes)
        return ErrorCode.group_authorization_failed, listed
    partitions = None
    if topics is not None:
        partitions = tuple(TopicPartition(t.name, p) for t in topics for p in t.partition_indexes)
    result = state.groups.coordinator.fetch_offsets(
        OffsetFetchRequest(group_id=group_id, partitions=partitions, require_stable=require_stable), state.now_ms(),
        mono_ms=state.mono_ms(), member_id=member_id, member_epoch=member_epoch,
    )
    state.groups.complete([], wake_timers=False)
    by_topic: dict[str, list[Any]] = {}
    topic_denied = FetchedOffset(error=ErrorCode.topic_authorization_failed)
    allowed: dict[str, bool] = {}
    for tp, fetched in sorted(result.partitions.items()):
        if tp.topic not in allowed:
            allowed[tp.topic] = authorize(state, Op.DESCRIBE, Res.TOPIC, tp.topic)
        if not allowed[tp.topic]:
            if partitions is None:
                continue  # all-topics fetch: unauthorized topics are left out, as in Kafka
            fetched = topic_denied
        by_topic.setdefault(tp.topic, []).append((tp.partition, fetched))
    return result.error, by_topic


async def handle_offset_fetch(state: BrokerState, header: RequestHeader, request: wire.OffsetFetchRequest) -> object:
    if header.api_version >= _TOPIC_IDS_VERSION:  # v10 names topics by id (see handle_offset_commit)
        await state.learn_topic_ids(getattr(t, "topic_id", None)
                                    for g in getattr(request, "groups", ()) for t in (g.topics or ()))
    return _offset_fetch(state, header, request)


def _offset_fetch(state: BrokerState, header: RequestHeader, request: wire.OffsetFetchRequest) -> object:
    m = response_module(k.OFFSET_FETCH, header.api_version)
    require_stable = getattr(request, "require_stable", False)
    by_id = _topic_names_by_id(state) if header.api_version >= _TOPIC_IDS_VERSION else {}
    ids = {name: topic_id for topic_id, name in by_id.items()}

    def topic_ref(name: str) -> dict[str, Any]:
        return {"topic_id": ids[name]} if by_id else {"name": name}

    def topics_of(by_topic: dict[str, list[Any]], partition_cls: Any, topic_cls: Any) -> tuple[Any, ...]:
        return tuple(
            build(
                topic_cls,
                **topic_ref(name),
                partitions=tuple(
                    build(
                        partition_cls,
                        partition_index=p,
                        committed_offset=f.offset,
                        committed_leader_epoch=f.leader_epoch,
                        metadata=f.metadata,
                        error_code=f.error,
                    )
                    for p, f in parts
                ),
            )
            for name, parts in by_topic.items()
            if not by_id or name in ids  # v10: a deleted topic has no id to be named by
        )

    if hasattr(request, "groups"):
        groups = []
        for g in request.groups:
            topics: Any = g.topics
            unknown_ids: list[Any] = []
            if by_id and topics is not None:
                named = [(t, _request_topic_name(t, by_id)) for t in topics]
                topics = [_FetchTopic(name, t.partition_indexes) for t, name in named if name is not None]
                unknown_ids = [t for t, name in named if name is None]
            # v9+ (KIP-848): the member's id and epoch are checked against a consumer group.
            error, by_topic = _fetch_one_group(state, g.group_id, topics, require_stable,
                                               getattr(g, "member_id", None), getattr(g, "member_epoch", -1))
            unknown_topics = tuple(
                build(m.OffsetFetchResponseTopics, topic_id=t.topic_id, partitions=tuple(
                    build(m.OffsetFetchResponsePartitions, partition_index=p, committed_offset=-1,
                          committed_leader_epoch=-1, metadata="", error_code=ErrorCode.unknown_topic_id)
                    for p in t.partition_indexes))
                for t in unknown_ids)
            groups.append(
                build(
                    m.OffsetFetchResponseGroup,
                    group_id=g.group_id,
                    topics=topics_of(by_topic, m.OffsetFetchResponsePartitions, m.OffsetFetchResponseTopics)
                    + unknown_topics,
                    error_code=error,
                )
            )
        return build(m.OffsetFetchResponse, throttle_time=_ZERO, groups=tuple(groups))
    error, by_topic = _fetch_one_group(state, request.group_id, request.topics, require_stable)
    return build(
        m.OffsetFetchResponse,
        throttle_time=_ZERO,
        topics=topics_of(by_topic, m.OffsetFetchResponsePartition, m.OffsetFetchResponseTopic),
        error_code=error,
    )


def handle_describe_groups(state: BrokerState, header: RequestHeader, request: wire.DescribeGroupsRequest) -> object:
    m = response_module(k.DESCRIBE_GROUPS, header.api_version)
    permitted = [g for g in request.groups if authorize(state, Op.DESCRIBE, Res.GROUP, g)]
    descriptions = state.groups.coordinator.describe_groups(permitted, state.now_ms(), mono_ms=state.mono_ms())
    state.groups.complete([], wake_timers=False)
    want_ops = getattr(request, "include_authorized_operations", False)
    groups = tuple(
        build(
            m.DescribedGroup,
            error_code=d.error,
            group_id=d.group_id,
            group_state=d.state,
            protocol_type=d.protocol_type,
            protocol_data=d.protocol_name,
            members=tuple(
                build(
                    m.DescribedGroupMember,
                    member_id=mem.member_id,
                    group_instance_id=mem.group_instance_id,
                    client_id=mem.client_id,
                    client_host=mem.client_host,
                    member_metadata=mem.metadata,
                    member_assignment=mem.assignment,
                )
                for mem in d.members
            ),
            authorized_operations=authorized_operations(state, Res.GROUP, d.group_id, requested=want_ops),
        )
        for d in descriptions
    )
    refused = tuple(
        build(m.DescribedGroup, error_code=ErrorCode.group_authorization_failed, group_id=g, group_state="",
              protocol_type="", protocol_data="", members=(), authorized_operations=-2147483648)
        for g in request.groups if g not in permitted
    )
    return build(m.DescribeGroupsResponse, throttle_time=_ZERO, groups=groups + refused)


def handle_list_groups(state: BrokerState, header: RequestHeader, request: wire.ListGroupsRequest) -> object:
    m = response_module(k.LIST_GROUPS, header.api_version)
    result = state.groups.coordinator.list_groups(
        states_filter=tuple(getattr(request, "states_filter", ())),
        types_filter=tuple(getattr(request, "types_filter", ())),
    )
    # Kafka: DESCRIBE on the cluster lists every group, else only the groups one may DESCRIBE.
    everything = authorize(state, Op.DESCRIBE, Res.CLUSTER)
    groups = tuple(
        build(m.ListedGroup, group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state,
              group_type=state.groups.coordinator.group_type(g.group_id))
        for g in result.groups
        if everything or authorize(state, Op.DESCRIBE, Res.GROUP, g.group_id)
    )
    # KIP-932 share groups (broker/handlers/share.py), listed as Kafka lists them.
    groups += tuple(
        build(m.ListedGroup, group_id=group_id, protocol_type=share.SHARE_GROUP_TYPE, group_state=group_state,
              group_type=share.SHARE_GROUP_TYPE)
        for group_id, group_state in share.listed_share_groups(state, getattr(request, "states_filter", ()),
                                                               getattr(request, "types_filter", ()))
        if everything or authorize(state, Op.DESCRIBE, Res.GROUP, group_id)
    )
    return build(m.ListGroupsResponse, throttle_time=_ZERO, error_code=result.error, groups=groups)


async def handle_delete_groups(state: BrokerState, header: RequestHeader, request: wire.DeleteGroupsRequest) -> object:
    m = response_module(k.DELETE_GROUPS, header.api_version)
    permitted = [g for g in request.groups_names if authorize(state, Op.DELETE, Res.GROUP, g)]
    # KIP-932 share groups are deleted with their share-partition state (broker/handlers/share_admin.py).
    share_ids = [g for g in permitted if await share_admin.is_share_group(state, g)]
    classic_ids = [g for g in permitted if g not in share_ids]
    result, writes = state.groups.coordinator.delete_groups(classic_ids, state.now_ms(), mono_ms=state.mono_ms())
    errors = dict((await state.groups.finish_delete_groups_async(result, writes)).errors)
    for g in share_ids:
        errors[g] = await share_admin.delete_share_group(state, g)
    errors.update((g, ErrorCode.group_authorization_failed) for g in request.groups_names if g not in permitted)
    return build(
        m.DeleteGroupsResponse,
        throttle_time=_ZERO,
        results=tuple(
            build(m.DeletableGroupResult, group_id=g, error_code=errors.get(g, ErrorCode.none))
            for g in request.groups_names
        ),
    )


async def handle_offset_delete(state: BrokerState, header: RequestHeader, request: wire.OffsetDeleteRequest) -> object:
    m = response_module(k.OFFSET_DELETE, header.api_version)
    if not authorize(state, Op.DELETE, Res.GROUP, request.group_id):
        return build(m.OffsetDeleteResponse, error_code=ErrorCode.group_authorization_failed, throttle_time=_ZERO,
                     topics=())
    readable = {t.name for t in request.topics if authorize(state, Op.READ, Res.TOPIC, t.name)}
    await state.learn_topics(readable)
    partitions = tuple(
        TopicPartition(t.name, p.partition_index) for t in request.topics for p in t.partitions if t.name in readable
    )
    result, writes = state.groups.coordinator.delete_offsets(
        OffsetDeleteRequest(request.group_id, partitions), state.now_ms(), mono_ms=state.mono_ms()
    )
    result = await state.groups.finish_async(request.group_id, result, writes)
    topics_out = tuple(
        build(
            m.OffsetDeleteResponseTopic,
            name=t.name,
            partitions=tuple(
                build(
                    m.OffsetDeleteResponsePartition,
                    partition_index=p.partition_index,
                    error_code=ErrorCode.topic_authorization_failed if t.name not in readable
                    else ErrorCode.unknown_topic_or_partition
                    if not state.partition_exists(t.name, p.partition_index)
                    else result.partitions.get(TopicPartition(t.name, p.partition_index), ErrorCode.none),
                )
                for p in t.partitions
            ),
        )
        for t in request.topics
    )
    return build(m.OffsetDeleteResponse, error_code=result.error, throttle_time=_ZERO, topics=topics_out)
