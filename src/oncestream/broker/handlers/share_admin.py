"""Share-group offset admin APIs (KIP-932, Kafka's kafka-share-groups tool):
DescribeShareGroupOffsets (90, v0-v1), AlterShareGroupOffsets (91, v0), DeleteShareGroupOffsets
(92, v0).

A share group's "offset" on a partition is its share-partition start offset (SPSO). Altering or
deleting it needs the group to have no members (NON_EMPTY_GROUP), as in Kafka; an alter starts
the share-partition afresh at the given offset, a delete forgets it (the next fetch starts by
``share.auto.offset.reset``). Both are persisted in ``__share_group_state`` before the answer.
ACLs as Kafka: DESCRIBE (describe), READ (alter) or DELETE (delete) on the group; DESCRIBE
(describe) or READ on each topic.

Cluster mode (docs/cluster-coordinators.md, "Share groups"): alter and delete are served by the
group's coordinator, as in Kafka (it holds the membership that says the group is empty; another
broker answers NOT_COORDINATOR and the client asks FindCoordinator again). It writes the new state
in PostgreSQL through the owners' fencing rules (broker/cluster_shares.py ``overwrite``), whichever
brokers own the share-partitions, before it answers; every broker then describes the same.
"""

from __future__ import annotations

import datetime
import uuid
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from oncestream.broker.authorize import Op, Res, authorize
from oncestream.broker.handlers.share import coordinator_error, not_share_group
from oncestream.broker.share_service import SharePartitionKey
from oncestream.broker.state import BrokerState
from oncestream.coordinator.share.partition import TERMINAL, SharePartition
from oncestream.coordinator.share.records import ShareStateValue
from oncestream.errors import OnceStreamError
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
    if must_be_empty:  # a change: the coordinator's (cluster mode), which knows the members
        error, message = coordinator_error(state, group_id)
        if error != ErrorCode.none:
            return error, message
    if must_be_empty and group is not None and group.members:
        return ErrorCode.non_empty_group, f"Share group {group_id} has members: its offsets cannot change."
    return ErrorCode.none, None


async def _overwrite(state: BrokerState, group_id: str, writes: dict[SharePartitionKey, ShareStateValue | None]
                     ) -> dict[SharePartitionKey, ErrorCode]:
    """Make ``writes`` durable (a new start offset, or None: forgotten); the error per key. The
    single broker through its state topic, a cluster's coordinator in PostgreSQL, through the
    owners' fencing rules (one transaction for them all)."""
    svc = state.shares
    if state.cluster_shares is None:
        return {key: ErrorCode.none if (svc.delete_partition(key) if value is None
                                        else svc.reset_partition(key, value.start_offset))
                else ErrorCode.coordinator_not_available for key, value in writes.items()}
    try:
        await state.cluster_shares.overwrite(group_id, writes)
    except OnceStreamError as exc:  # NOT_COORDINATOR (the lease moved), or PostgreSQL failed
        return dict.fromkeys(writes, exc.code)
    return dict.fromkeys(writes, ErrorCode.none)


def _fresh(start_offset: int, now_ms: int) -> ShareStateValue:
    """The state of a share-partition started afresh at ``start_offset`` (nothing in flight)."""
    return ShareStateValue(0, start_offset, (), create_timestamp_ms=now_ms, write_timestamp_ms=now_ms)


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
            held = await held_state(state, g.group_id)
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


async def handle_alter_offsets(state: BrokerState, header: RequestHeader,
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
    errors: dict[tuple[str, int], ErrorCode] = {}
    writes: dict[SharePartitionKey, ShareStateValue | None] = {}
    for t in request.topics:
        info = svc.topic_info(t.topic_name)
        denied = not authorize(state, Op.READ, Res.TOPIC, t.topic_name)
        for p in t.partitions:
            where = (t.topic_name, p.partition_index)
            if denied:
                errors[where] = ErrorCode.topic_authorization_failed
            elif info is None or not 0 <= p.partition_index < info[1]:
                errors[where] = ErrorCode.unknown_topic_or_partition
            elif p.start_offset < 0:
                errors[where] = ErrorCode.invalid_request
            else:
                writes[(request.group_id, info[0], p.partition_index)] = _fresh(p.start_offset, state.now_ms())
    written = await _overwrite(state, request.group_id, writes)
    names = {info[0]: name for name in {t.topic_name for t in request.topics}
             if (info := svc.topic_info(name)) is not None}
    errors.update(((names[topic_id], partition), code) for (_g, topic_id, partition), code in written.items())
    topics_out = []
    for t in request.topics:
        info = svc.topic_info(t.topic_name)
        parts = [build(m.AlterShareGroupOffsetsResponsePartition, partition_index=p.partition_index,
                       error_code=errors[(t.topic_name, p.partition_index)], error_message=None)
                 for p in t.partitions]
        topics_out.append(build(m.AlterShareGroupOffsetsResponseTopic, topic_name=t.topic_name,
                                topic_id=info[0] if info is not None else None, partitions=tuple(parts)))
    return respond(ErrorCode.none, topics=topics_out)


async def handle_delete_offsets(state: BrokerState, header: RequestHeader,
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
    try:
        held = await held_state(state, request.group_id)
    except OnceStreamError as exc:
        return respond(exc.code, str(exc))
    topic_errors: dict[str, ErrorCode] = {}
    writes: dict[SharePartitionKey, ShareStateValue | None] = {}
    for t in request.topics:
        info = svc.topic_info(t.topic_name)
        if not authorize(state, Op.READ, Res.TOPIC, t.topic_name):
            topic_errors[t.topic_name] = ErrorCode.topic_authorization_failed
        elif info is None:
            topic_errors[t.topic_name] = ErrorCode.unknown_topic_or_partition
        else:
            topic_errors[t.topic_name] = ErrorCode.none
            writes.update((key, None) for key in held if key[1] == info[0])
    for (_g, topic_id, _p), code in (await _overwrite(state, request.group_id, writes)).items():
        name = svc.topic_name(topic_id)
        if code != ErrorCode.none and name is not None:
            topic_errors[name] = code
    topics_out = []
    for t in request.topics:
        info = svc.topic_info(t.topic_name)
        topics_out.append(build(m.DeleteShareGroupOffsetsResponseTopic, topic_name=t.topic_name,
                                topic_id=info[0] if info is not None else None,
                                error_code=topic_errors[t.topic_name], error_message=None))
    return respond(ErrorCode.none, topics=topics_out)


async def held_state(state: BrokerState, group_id: str) -> dict[SharePartitionKey, SharePartition]:
    """Every share-partition ``group_id`` has state for: this broker's (single broker) or the
    owners' last saves in PostgreSQL (cluster mode; a MetadataStoreError if it cannot be read)."""
    if state.cluster_shares is None:
        return state.shares.state_of(group_id)
    return await state.cluster_shares.group_state(group_id)


async def is_share_group(state: BrokerState, group_id: str) -> bool:
    """Whether DeleteGroups treats ``group_id`` as a share group: one this broker knows, or in
    cluster mode one that has share-partition state in PostgreSQL and is no classic or consumer
    group (its members are soft state: a coordinator that took the group over after it emptied
    knows it only by its state)."""
    if state.shares.groups.group(group_id) is not None:
        return True
    if state.cluster_shares is None or not_share_group(state, group_id):
        return False
    try:
        return bool(await state.cluster_shares.group_state(group_id))
    except OnceStreamError:
        return False  # answered as a classic group: GROUP_ID_NOT_FOUND, or its own error


async def delete_share_group(state: BrokerState, group_id: str) -> ErrorCode:
    """DeleteGroups of a share group: an empty group and its share-partition state go (deleted
    durably before NONE is answered; in cluster mode by the group's coordinator, through the
    owners' fencing rules, like DeleteShareGroupState in Kafka)."""
    error, _message = coordinator_error(state, group_id)
    if error != ErrorCode.none:
        return error
    svc = state.shares
    if svc.groups.group(group_id) is not None:
        error = svc.groups.delete(group_id)
        if error != ErrorCode.none:
            return error
    try:
        held = await held_state(state, group_id)
    except OnceStreamError as exc:
        return exc.code
    written = await _overwrite(state, group_id, dict.fromkeys(held))
    return next((code for code in written.values() if code != ErrorCode.none), ErrorCode.none)
