"""Share-group offset admin APIs (KIP-932, Kafka's kafka-share-groups tool):
DescribeShareGroupOffsets (90, v0-v1), AlterShareGroupOffsets (91, v0), DeleteShareGroupOffsets
(92, v0).

A share group's "offset" on a partition is its share-partition start offset (SPSO). Altering or
deleting it needs the group to have no members (NON_EMPTY_GROUP), as in Kafka; an alter starts
the share-partition afresh at the given offset, a delete forgets it (the next fetch starts by
``share.auto.offset.reset``). Both are persisted in ``__share_group_state`` before the answer.
ACLs as Kafka: DESCRIBE (describe), READ (alter) or DELETE (delete) on the group; DESCRIBE
(describe) or READ on each topic.
"""

from __future__ import annotations

import datetime
import uuid
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from oncestream.broker.authorize import Op, Res, authorize
from oncestream.broker.handlers.share import not_share_group
from oncestream.broker.state import BrokerState
from oncestream.coordinator.share.partition import TERMINAL, SharePartition
from oncestream.protocol import api_keys as k
from oncestream.protocol.codec import RequestHeader, build
from oncestream.protocol.schemas import response_module

if TYPE_CHECKING:
    from oncestream.protocol import request_types as wire

_ZERO = datetime.timedelta(0)


def _group_error(state: BrokerState, group_id: str, *, must_be_empty: bool) -> tuple[ErrorCode, str | None]:
    if not state.shares.settings.enabled:
        return ErrorCode.unsupported_version, "share groups are disabled on this broker"
    group = state.shares.groups.group(group_id)
    if not_share_group(state, group_id):
        return ErrorCode.group_id_not_found, f"Group {group_id} is not a share group."
    if must_be_empty and group is not None and group.members:
        return ErrorCode.non_empty_group, f"Share group {group_id} has members: its offsets cannot change."
    return ErrorCode.none, None


async def _lag(state: BrokerState, topic: str, topic_id: uuid.UUID, partition: int, sp: SharePartition) -> int:
    """Records not yet delivered to completion: those from the start offset to the high
    watermark less the ones in flight that are already acknowledged or archived."""
    done = sum(1 for o in range(sp.start_offset, sp.end_offset)
               if (r := sp.record(o)) is not None and r.state in TERMINAL)
    if state.cluster_shares is not None:
        high_watermark = await state.cluster_shares.high_watermark(topic_id, partition)
    else:
        high_watermark = state.logs.get(topic, partition).high_watermark
    return max(high_watermark - sp.start_offset - done, 0)


async def handle_describe_offsets(state: BrokerState, header: RequestHeader,
                            request: wire.DescribeShareGroupOffsetsRequest) -> object:
    m = response_module(k.DESCRIBE_SHARE_GROUP_OFFSETS, header.api_version)
    svc = state.shares
    groups = []
    for g in request.groups:
        error, message = _group_error(state, g.group_id, must_be_empty=False)
        if error == ErrorCode.none and not authorize(state, Op.DESCRIBE, Res.GROUP, g.group_id):
            error, message = ErrorCode.group_authorization_failed, None
        topics_out = []
        if error == ErrorCode.none:
            # Cluster mode: the owners' snapshots in PostgreSQL (broker/cluster_shares.py).
            held = (svc.state_of(g.group_id) if state.cluster_shares is None
                    else await state.cluster_shares.group_state(g.group_id))
            if g.topics is None:  # every topic the group has state for
                wanted: dict[str, list[int]] = {}
                for _group, topic_id, partition in sorted(held, key=lambda key: (str(key[1]), key[2])):
                    name = svc.topic_name(topic_id)
                    if name is not None:
                        wanted.setdefault(name, []).append(partition)
            else:
                wanted = {t.topic_name: [int(p) for p in t.partitions] for t in g.topics}
            for name, partitions in wanted.items():
                info = svc.topic_info(name)
                topic_denied = not authorize(state, Op.DESCRIBE, Res.TOPIC, name)
                parts = []
                for partition in partitions:
                    p_error = ErrorCode.none
                    start = lag = -1
                    if topic_denied:
                        p_error = ErrorCode.topic_authorization_failed
                    elif info is None or not 0 <= partition < info[1]:
                        p_error = ErrorCode.unknown_topic_or_partition
                    else:
                        sp = held.get((g.group_id, info[0], partition))
                        if sp is not None:
                            start = sp.start_offset
                            if header.api_version >= 1:  # v0 has no lag field
                                lag = await _lag(state, name, info[0], partition, sp)
                    parts.append(build(m.DescribeShareGroupOffsetsResponsePartition, partition_index=partition,
                                       start_offset=start, leader_epoch=0 if start >= 0 else -1, lag=lag,
                                       error_code=p_error, error_message=None))
                topics_out.append(build(m.DescribeShareGroupOffsetsResponseTopic, topic_name=name,
                                        topic_id=info[0] if info is not None else None,
                                        partitions=tuple(parts)))
        groups.append(build(m.DescribeShareGroupOffsetsResponseGroup, group_id=g.group_id, topics=tuple(topics_out),
                            error_code=error, error_message=message))
    return build(m.DescribeShareGroupOffsetsResponse, throttle_time=_ZERO, groups=tuple(groups))


def handle_alter_offsets(state: BrokerState, header: RequestHeader,
                         request: wire.AlterShareGroupOffsetsRequest) -> object:
    m = response_module(k.ALTER_SHARE_GROUP_OFFSETS, header.api_version)
    svc = state.shares

    def respond(error: ErrorCode, message: str | None = None, topics: Any = ()) -> object:
        return build(m.AlterShareGroupOffsetsResponse, throttle_time=_ZERO, error_code=error, error_message=message,
                     responses=tuple(topics))

    if not authorize(state, Op.READ, Res.GROUP, request.group_id):
        return respond(ErrorCode.group_authorization_failed)
    error, message = _group_error(state, request.group_id, must_be_empty=True)
    if error != ErrorCode.none:
        return respond(error, message)
    topics_out = []
    for t in request.topics:
        info = state.logs.topics().get(t.topic_name)
        denied = not authorize(state, Op.READ, Res.TOPIC, t.topic_name)
        parts = []
        for p in t.partitions:
            p_error = ErrorCode.none
            if denied:
                p_error = ErrorCode.topic_authorization_failed
            elif info is None or not 0 <= p.partition_index < info.num_partitions:
                p_error = ErrorCode.unknown_topic_or_partition
            elif p.start_offset < 0:
                p_error = ErrorCode.invalid_request
            elif not svc.reset_partition((request.group_id, info.topic_id, p.partition_index), p.start_offset):
                p_error = ErrorCode.coordinator_not_available
            parts.append(build(m.AlterShareGroupOffsetsResponsePartition, partition_index=p.partition_index,
                               error_code=p_error, error_message=None))
        topics_out.append(build(m.AlterShareGroupOffsetsResponseTopic, topic_name=t.topic_name,
                                topic_id=info.topic_id if info is not None else None, partitions=tuple(parts)))
    return respond(ErrorCode.none, topics=topics_out)


def handle_delete_offsets(state: BrokerState, header: RequestHeader,
                          request: wire.DeleteShareGroupOffsetsRequest) -> object:
    m = response_module(k.DELETE_SHARE_GROUP_OFFSETS, header.api_version)
    svc = state.shares

    def respond(error: ErrorCode, message: str | None = None, topics: Any = ()) -> object:
        return build(m.DeleteShareGroupOffsetsResponse, throttle_time=_ZERO, error_code=error, error_message=message,
                     responses=tuple(topics))

    if not authorize(state, Op.DELETE, Res.GROUP, request.group_id):
        return respond(ErrorCode.group_authorization_failed)
    error, message = _group_error(state, request.group_id, must_be_empty=True)
    if error != ErrorCode.none:
        return respond(error, message)
    held = svc.state_of(request.group_id)
    topics_out = []
    for t in request.topics:
        info = state.logs.topics().get(t.topic_name)
        t_error = ErrorCode.none
        if not authorize(state, Op.READ, Res.TOPIC, t.topic_name):
            t_error = ErrorCode.topic_authorization_failed
        elif info is None:
            t_error = ErrorCode.unknown_topic_or_partition
        else:
            for key in [key for key in held if key[1] == info.topic_id]:
                if not svc.delete_partition(key):
                    t_error = ErrorCode.coordinator_not_available
        topics_out.append(build(m.DeleteShareGroupOffsetsResponseTopic, topic_name=t.topic_name,
                                topic_id=info.topic_id if info is not None else None,
                                error_code=t_error, error_message=None))
    return respond(ErrorCode.none, topics=topics_out)
