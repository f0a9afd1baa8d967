"""Share group APIs (KIP-932): ShareGroupHeartbeat (76), ShareGroupDescribe (77), ShareFetch (78)
and ShareAcknowledge (79), v1 each (what librdkafka 2.16 and Kafka 4.x clients send).

The rules live in coordinator/share (membership, sessions, share-partitions) and
broker/share_service.py (persistence); these handlers translate the wire forms and read the log.
Authorization as Kafka's KafkaApis: READ on the group for all four (DESCRIBE for the describe),
READ on each topic fetched or acknowledged, DESCRIBE on each subscribed topic.

With ``group.share.enable=false`` or ``share.version=0`` the APIs are not advertised and a
request gets UNSUPPORTED_VERSION, as Kafka 4.2 answers when share groups are disabled.
"""

from __future__ import annotations

import asyncio
import datetime
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from oncestream.async_wait import wait_done
from oncestream.broker.authorize import Op, Res, authorize, authorized_operations
from oncestream.broker.cluster_coordinators import GROUP_KEY_TYPE
from oncestream.broker.connection_context import client_host
from oncestream.broker.remote_fetch import aborted_of, read_remote_once
from oncestream.broker.share_group_configs import ISOLATION_LEVEL
from oncestream.broker.share_service import SharePartitionKey, ShareService
from oncestream.broker.state import BrokerState
from oncestream.cluster.diskless.offsets_query import list_offset
from oncestream.coordinator.share.partition import AckBatch, AcquiredRange, LogSpan, SharePartition
from oncestream.errors import (
    NotLeaderOrFollowerError,
    OffsetMovedToTieredStorageError,
    OffsetOutOfRangeError,
    OnceStreamError,
)
from oncestream.protocol import api_keys as k
from oncestream.protocol.aborted_filter import AbortedFilter
from oncestream.protocol.codec import RequestHeader, build
from oncestream.protocol.record_batch import iter_batches
from oncestream.protocol.schemas import response_module

if TYPE_CHECKING:
    from oncestream.broker.cluster_node import ClusterNode
    from oncestream.protocol import request_types as wire

_ZERO = datetime.timedelta(0)
SHARE_GROUP_TYPE = "share"
_NO_OPERATIONS = -(2**31)


def _ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


# --- ShareGroupHeartbeat / ShareGroupDescribe ----------------------------------------------------

def not_share_group(state: BrokerState, group_id: str) -> bool:
    """Whether ``group_id`` is a classic or KIP-848 consumer group: Kafka answers
    GROUP_ID_NOT_FOUND to share APIs on it ("Group ... is not a share group"). Read through the
    group coordinator's public API only. A consumer group with no committed offsets has no
    classic state, hence the type check as well."""
    if state.shares.groups.group(group_id) is not None:
        return False
    coordinator = state.groups.coordinator
    return coordinator.group_state(group_id) is not None or coordinator.group_type(group_id) == "consumer"


def coordinator_error(state: BrokerState, group_id: str) -> tuple[ErrorCode, str | None]:
    """Cluster mode: NONE when this broker coordinates ``group_id`` (it alone holds the share
    group's members), else NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE; NONE on the single broker."""
    coordinators = state.cluster.coordinators if state.cluster is not None else None
    if coordinators is None:
        return ErrorCode.none, None
    coordinator = coordinators.coordinator_node(GROUP_KEY_TYPE, group_id)
    if coordinator is None:
        return ErrorCode.coordinator_not_available, None
    if coordinator != state.config.node_id:
        return ErrorCode.not_coordinator, f"node {coordinator} coordinates {group_id}"
    return ErrorCode.none, None


def handle_share_group_heartbeat(state: BrokerState, header: RequestHeader, request: wire.ShareGroupHeartbeatRequest) -> object:
    m = response_module(k.SHARE_GROUP_HEARTBEAT, header.api_version)
    svc = state.shares

    def error(code: ErrorCode, message: str | None = None) -> object:
        return build(m.ShareGroupHeartbeatResponse, throttle_time=_ZERO, error_code=code, error_message=message,
                     member_id=None, member_epoch=-1, heartbeat_interval=_ZERO, assignment=None)

    if not svc.settings.enabled:
        return error(ErrorCode.unsupported_version, "share groups are disabled on this broker")
    if not authorize(state, Op.READ, Res.GROUP, request.group_id):
        return error(ErrorCode.group_authorization_failed)
    subscribed = request.subscribed_topic_names
    if subscribed is not None:
        denied = [t for t in subscribed if not authorize(state, Op.DESCRIBE, Res.TOPIC, t)]
        if denied:
            return error(ErrorCode.topic_authorization_failed, f"not authorized to describe {sorted(denied)}")
    if not_share_group(state, request.group_id):
        return error(ErrorCode.group_id_not_found, f"Group {request.group_id} is not a share group.")
    coordinated, why = coordinator_error(state, request.group_id)  # cluster mode: the coordinator holds the members
    if coordinated != ErrorCode.none:
        return error(coordinated, why)
    result = svc.groups.heartbeat(request.group_id, request.member_id, request.member_epoch, request.rack_id,
                                  subscribed, state.mono_ms(), client_id=header.client_id or "",
                                  client_host=client_host())
    if result.left is not None:
        svc.member_left(request.group_id, result.left)
    svc.wake()
    assignment = None
    if result.assignment is not None:
        assignment = build(m.Assignment, topic_partitions=tuple(
            build(m.TopicPartitions, topic_id=topic_id, partitions=tuple(sorted(parts)))
            for topic_id, parts in sorted(result.assignment.items(), key=lambda kv: str(kv[0]))))
    return build(m.ShareGroupHeartbeatResponse, throttle_time=_ZERO, error_code=result.error,
                 error_message=result.error_message, member_id=result.member_id, member_epoch=result.member_epoch,
                 heartbeat_interval=_ms(result.heartbeat_interval_ms), assignment=assignment)


def handle_share_group_describe(state: BrokerState, header: RequestHeader, request: wire.ShareGroupDescribeRequest) -> object:
    m = response_module(k.SHARE_GROUP_DESCRIBE, header.api_version)
    svc = state.shares
    groups = []
    for group_id in request.group_ids:
        def failed(code: ErrorCode, message: str | None = None, gid: str = group_id) -> object:
            return build(m.DescribedGroup, error_code=code, error_message=message, group_id=gid, group_state="Dead",
                         group_epoch=-1, assignment_epoch=-1, assignor_name="", members=(),
                         authorized_operations=_NO_OPERATIONS)

        group = svc.groups.group(group_id)
        if not svc.settings.enabled:
            groups.append(failed(ErrorCode.unsupported_version, "share groups are disabled on this broker"))
        elif not authorize(state, Op.DESCRIBE, Res.GROUP, group_id):
            groups.append(failed(ErrorCode.group_authorization_failed))
        elif group is None:
            why = "is not a share group" if not_share_group(state, group_id) else "not found"
            groups.append(failed(ErrorCode.group_id_not_found, f"Group {group_id} {why}."))
        else:
            members = []
            for member in group.members.values():
                parts = []
                for topic_id, partitions in member.assignment.items():
                    name = svc.topic_name(topic_id)
                    if name is not None:
                        parts.append(build(m.TopicPartitions, topic_id=topic_id, topic_name=name,
                                           partitions=tuple(sorted(partitions))))
                members.append(build(m.Member, member_id=member.member_id, rack_id=member.rack_id,
                                     member_epoch=member.member_epoch, client_id=member.client_id,
                                     client_host=member.client_host,
                                     subscribed_topic_names=member.subscribed_topics,
                                     assignment=build(m.Assignment, topic_partitions=tuple(parts))))
            groups.append(build(
                m.DescribedGroup, error_code=ErrorCode.none, error_message=None, group_id=group_id,
                group_state=group.state, group_epoch=group.group_epoch, assignment_epoch=group.assignment_epoch,
                assignor_name="simple", members=tuple(members),
                authorized_operations=authorized_operations(state, Res.GROUP, group_id,
                                                            requested=request.include_authorized_operations)))
    return build(m.ShareGroupDescribeResponse, throttle_time=_ZERO, groups=tuple(groups))


def listed_share_groups(state: BrokerState, states_filter: Iterable[str], types_filter: Iterable[str]
                        ) -> list[tuple[str, str]]:
    """(group id, state) of the share groups ListGroups shows for these filters (Kafka's group
    type "share", protocol type "share"; states compared without case, as Kafka does)."""
    types = {t.lower() for t in types_filter}
    states = {s.lower() for s in states_filter}
    if types and SHARE_GROUP_TYPE not in types:
        return []
    listed = []
    for group_id in state.shares.groups.group_ids():
        group = state.shares.groups.group(group_id)
        if group is not None and (not states or group.state.lower() in states):
            listed.append((group_id, group.state))
    return listed


# --- acknowledgements ----------------------------------------------------------------------------

def _ack_batches(wire_batches: Iterable[Any]) -> list[AckBatch]:
    return [AckBatch(b.first_offset, b.last_offset, tuple(int(t) for t in b.acknowledge_types)) for b in wire_batches]


class _Partitions:
    """The partitions one request names, merged by (topic id, partition) (librdkafka may list a
    topic more than once), with their names resolved and authorized once per topic."""

    def __init__(self, state: BrokerState) -> None:
        self._state = state
        self._names: dict[uuid.UUID | None, str | None] = {}
        self._denied: dict[str, bool] = {}

    def resolve(self, topic_id: uuid.UUID | None) -> tuple[str | None, ErrorCode]:
        if topic_id not in self._names:
            self._names[topic_id] = self._state.shares.topic_name(topic_id)
        name = self._names[topic_id]
        if name is None:
            return None, ErrorCode.unknown_topic_id
        if name not in self._denied:
            self._denied[name] = not authorize(self._state, Op.READ, Res.TOPIC, name)
        if self._denied[name]:
            return name, ErrorCode.topic_authorization_failed
        return name, ErrorCode.none


async def _owned(state: BrokerState, group_id: str, topic_id: uuid.UUID, name: str, partition: int) -> ErrorCode:
    """Cluster mode: whether this broker owns the share-partition (loading it if needed);
    NONE on the single broker."""
    shares = state.cluster_shares
    return ErrorCode.none if shares is None else await shares.own((group_id, topic_id, partition), name)


async def _apply_acks(state: BrokerState, group_id: str, member_id: str,
                acks: dict[tuple[uuid.UUID | None, int], list[AckBatch]],
                names: _Partitions) -> dict[tuple[uuid.UUID | None, int], ErrorCode]:
    """Apply every partition's acknowledgements and persist them; the error per partition
    (NONE only when the change is in the state topic)."""
    svc = state.shares
    now = state.mono_ms()
    results: dict[tuple[uuid.UUID | None, int], ErrorCode] = {}
    touched: dict[SharePartitionKey, tuple[uuid.UUID | None, int]] = {}
    for (topic_id, partition), batches in acks.items():
        name, error = names.resolve(topic_id)
        if error == ErrorCode.none and name is not None and topic_id is not None:
            if not state.partition_exists(name, partition):
                error = ErrorCode.unknown_topic_or_partition
            elif (owned := await _owned(state, group_id, topic_id, name, partition)) != ErrorCode.none:
                error = owned
            else:
                try:
                    sp = svc.share_partition(group_id, name, topic_id, partition)
                except NotLeaderOrFollowerError as exc:  # cluster mode: unloaded meanwhile (lease lost)
                    error = exc.code
                else:
                    error = sp.acknowledge(member_id, batches, now)
                    touched[(group_id, topic_id, partition)] = (topic_id, partition)
        results[(topic_id, partition)] = error
    failed = await svc.persist_async(touched)
    for key in failed:
        results[touched[key]] = ErrorCode.coordinator_not_available
    for _group, topic_id, partition in touched:
        name = svc.topic_name(topic_id)
        if name is not None:  # released records may be fetched by a waiting member now
            state.notifier.notify(name, partition)
    return results


# --- ShareFetch ----------------------------------------------------------------------------------

def _leader(m: Any, state: BrokerState) -> object:
    return build(m.LeaderIdAndEpoch, leader_id=state.config.node_id, leader_epoch=0)


def _acquire_one(state: BrokerState, svc: ShareService, group_id: str, member_id: str, name: str,
                 topic_id: uuid.UUID, partition: int, max_records: int, max_bytes: int
                 ) -> tuple[bytes, list[AcquiredRange]]:
    """Read the log where the share-partition wants it and acquire what it finds; the batches
    holding acquired records (whole, as stored) and the acquired ranges."""
    sp = svc.share_partition(group_id, name, topic_id, partition)
    now = state.mono_ms()
    if not sp.can_acquire(now):
        return b"", []
    plog = state.logs.get(name, partition)
    read_committed = svc.group_config(group_id, ISOLATION_LEVEL) == "read_committed"
    upper = plog.last_stable_offset if read_committed else plog.high_watermark
    offset = sp.next_fetch_offset(now)
    if offset >= upper:
        return b"", []
    try:
        read = plog.read(offset, max_bytes, upper_offset=upper, min_one=True, with_aborted=read_committed)
    except OffsetOutOfRangeError:
        sp.move_start(plog.log_start_offset)  # deleted below the share-partition: skip ahead
        return b"", []
    return _acquire_read(sp, member_id, b"".join(read.chunks), read_committed, read.aborted_transactions or (),
                         max_records, now)


async def _acquire_remote(state: BrokerState, svc: ShareService, group_id: str, member_id: str, name: str,
                          topic_id: uuid.UUID, partition: int, max_records: int, max_bytes: int, offset: int
                          ) -> tuple[bytes, list[AcquiredRange]]:
    """``_acquire_one`` for a share-partition whose next offset is below the local log start:
    the same reader as Fetch serves it from the object store (empty past remote.fetch.max.wait.ms)."""
    plog = state.logs.get(name, partition)
    read_committed = svc.group_config(group_id, ISOLATION_LEVEL) == "read_committed"
    upper = plog.last_stable_offset if read_committed else plog.high_watermark
    read = await read_remote_once(state, name, partition, offset, max_bytes, upper_offset=upper,
                                  read_committed=read_committed)
    if read is None:
        return b"", []
    aborted = aborted_of(state, name, partition, offset, read) if read_committed else []
    sp = svc.share_partition(group_id, name, topic_id, partition)
    now = state.mono_ms()
    if not sp.can_acquire(now) or sp.next_fetch_offset(now) != offset:
        return b"", []  # the share-partition moved on while the read ran: the next fetch reads again
    return _acquire_read(sp, member_id, b"".join(read.chunks), read_committed, aborted, max_records, now)


async def _acquire_diskless(state: BrokerState, node: ClusterNode, svc: ShareService, group_id: str, member_id: str,
                            name: str, topic_id: uuid.UUID, partition: int, max_records: int, max_bytes: int
                            ) -> tuple[bytes, list[AcquiredRange]]:
    """``_acquire_one`` in cluster mode: the batches come from the diskless reader (PostgreSQL
    coordinates, object store bytes), as for Fetch."""
    sp = svc.share_partition(group_id, name, topic_id, partition)
    now = state.mono_ms()
    if not sp.can_acquire(now):
        return b"", []
    read_committed = svc.group_config(group_id, ISOLATION_LEVEL) == "read_committed"
    offset = sp.next_fetch_offset(now)
    try:
        read = await node.reader.read(topic_id, partition, offset, max_bytes, 1 if read_committed else 0)
    except OffsetOutOfRangeError:
        start = (await list_offset(node.reader, topic_id, partition, -2)).offset
        if offset < start:  # deleted below the share-partition: skip ahead
            sp.move_start(start)
        return b"", []
    sp = svc.share_partition(group_id, name, topic_id, partition)  # it may have been reloaded meanwhile
    now = state.mono_ms()
    if not sp.can_acquire(now) or sp.next_fetch_offset(now) != offset:
        return b"", []  # the share-partition moved on while the read ran: the next fetch reads again
    return _acquire_read(sp, member_id, b"".join(read.chunks), read_committed, read.aborted_transactions or (),
                         max_records, now)


def _acquire_read(sp: SharePartition, member_id: str, data: bytes, read_committed: bool, aborted: Iterable[tuple[int, int]],
                  max_records: int, now: int) -> tuple[bytes, list[AcquiredRange]]:
    """Acquire the records of the batches in ``data`` for ``member_id``; the batches holding
    acquired records and the acquired ranges."""
    hidden = AbortedFilter(read_committed, list(aborted))
    batches = [(header, view) for header, view in iter_batches(data, verify_crc=False)]
    spans = [LogSpan(h.base_offset, h.last_offset, not hidden.hides_header(h, view)) for h, view in batches]
    ranges = sp.acquire(member_id, spans, max_records, now)
    if not ranges:
        return b"", []
    out = bytearray()
    for h, view in batches:
        if any(r.first_offset <= h.last_offset and h.base_offset <= r.last_offset for r in ranges):
            out += view
    return bytes(out), ranges


async def handle_share_fetch(state: BrokerState, header: RequestHeader, request: wire.ShareFetchRequest) -> object:
    m = response_module(k.SHARE_FETCH, header.api_version)
    svc = state.shares
    # The group's own lock duration where it has one (KIP-932's AcquisitionLockTimeoutMs).
    lock_ms = svc.partition_config(request.group_id or "").record_lock_duration_ms

    def respond(code: ErrorCode, topics: Any = (), message: str | None = None) -> object:
        return build(m.ShareFetchResponse, throttle_time=_ZERO, error_code=code, error_message=message,
                     acquisition_lock_timeout=_ms(lock_ms), responses=tuple(topics), node_endpoints=())

    if not svc.settings.enabled:
        return respond(ErrorCode.unsupported_version, message="share groups are disabled on this broker")
    group_id, member_id, epoch = request.group_id or "", request.member_id or "", request.share_session_epoch
    if not group_id or not member_id:
        return respond(ErrorCode.invalid_request, message="GroupId and MemberId must be set")
    if not authorize(state, Op.READ, Res.GROUP, group_id):
        return respond(ErrorCode.group_authorization_failed)
    acks: dict[tuple[uuid.UUID | None, int], list[AckBatch]] = {}
    wanted: dict[tuple[uuid.UUID | None, int], None] = {}
    for t in request.topics:
        for p in t.partitions:
            wanted[(t.topic_id, p.partition_index)] = None
            if p.acknowledgement_batches:
                acks.setdefault((t.topic_id, p.partition_index), []).extend(_ack_batches(p.acknowledgement_batches))
    if epoch == 0 and acks:
        return respond(ErrorCode.invalid_request, message="acknowledgements on a request opening a share session")
    if not_share_group(state, group_id):
        return respond(ErrorCode.group_id_not_found, message=f"Group {group_id} is not a share group.")
    lookup = svc.sessions.lookup(group_id, member_id, epoch, may_open=True, now_ms=state.mono_ms())
    if lookup.error != ErrorCode.none or lookup.session is None:
        return respond(lookup.error)
    if lookup.replaced is not None:
        svc.release_member(group_id, member_id)
    session = lookup.session
    for ft in request.forgotten_topics_data:
        for forgotten in ft.partitions:
            session.partitions.pop((ft.topic_id, int(forgotten)), None)
    for key in wanted:
        session.partitions[key] = None
    names = _Partitions(state)
    ack_errors = await _apply_acks(state, group_id, member_id, acks, names)
    if lookup.final:
        svc.sessions.close(group_id, member_id)
        svc.release_member(group_id, member_id)
        return respond(ErrorCode.none, _fetch_topics(m, state, {}, ack_errors, {}))

    errors: dict[tuple[uuid.UUID | None, int], ErrorCode] = {}
    targets: list[tuple[uuid.UUID, str, int]] = []
    partition: int
    for topic_id, partition in session.partitions:
        name, error = names.resolve(topic_id)
        if error == ErrorCode.none and (name is None or not state.partition_exists(name, partition)):
            error = ErrorCode.unknown_topic_or_partition
        if error != ErrorCode.none or name is None or topic_id is None:
            errors[(topic_id, partition)] = error
        else:
            targets.append((topic_id, name, partition))
    if targets:  # start at another partition each time: max_records must not starve the last ones
        turn = session.next_epoch % len(targets)
        targets = targets[turn:] + targets[:turn]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(0, int(request.max_wait.total_seconds() * 1000)) / 1000
    max_records: int = request.max_records if request.max_records > 0 else 500
    budget = min(request.max_bytes, state.config.fetch_max_bytes) if request.max_bytes > 0 else state.config.fetch_max_bytes
    fetched: dict[tuple[uuid.UUID | None, int], tuple[bytes, list[AcquiredRange]]] = {}
    while True:
        total: int = 0
        for topic_id, name, partition in targets:
            if max_records <= 0 or total >= budget:
                break
            try:
                owned = await _owned(state, group_id, topic_id, name, partition)
                if owned != ErrorCode.none:
                    errors[(topic_id, partition)] = owned
                    continue
                if state.cluster is not None:
                    data, ranges = await _acquire_diskless(state, state.cluster, svc, group_id, member_id, name, topic_id,
                                                           partition, max_records, max(budget - total, 0))
                    if ranges:
                        fetched[(topic_id, partition)] = (data, ranges)
                        total += len(data)
                        max_records -= sum(r.last_offset - r.first_offset + 1 for r in ranges)
                    continue
                try:
                    data, ranges = _acquire_one(state, svc, group_id, member_id, name, topic_id, partition,
                                                max_records, max(budget - total, 0))
                except OffsetMovedToTieredStorageError as moved:
                    data, ranges = await _acquire_remote(state, svc, group_id, member_id, name, topic_id, partition,
                                                         max_records, max(budget - total, 0), moved.offset)
            except OnceStreamError as exc:
                errors[(topic_id, partition)] = exc.code
                continue
            if ranges:
                fetched[(topic_id, partition)] = (data, ranges)
                total += len(data)
                max_records -= sum(r.last_offset - r.first_offset + 1 for r in ranges)
        remaining_s = deadline - loop.time()
        if fetched or errors or remaining_s <= 0 or not targets:
            break
        watched = [(name, partition) for _tid, name, partition in targets]
        waiter = state.notifier.waiter(watched)
        try:
            # Appends and records given back (released, lock expired) both wake the waiter.
            await wait_done(waiter, remaining_s)
        finally:
            state.notifier.discard(waiter, watched)
    if fetched:
        failed = await svc.persist_async([(group_id, tid, index) for tid, index in fetched if tid is not None])
        for _g, tid, index in failed:
            # Not durable: not handed out (the records come back when their locks expire).
            fetched.pop((tid, index), None)
            errors[(tid, index)] = ErrorCode.coordinator_not_available
        svc.wake()
    return respond(ErrorCode.none, _fetch_topics(m, state, fetched, ack_errors, errors))


def _fetch_topics(m: Any, state: BrokerState, fetched: dict[tuple[uuid.UUID | None, int], tuple[bytes, list[AcquiredRange]]],
                  ack_errors: dict[tuple[uuid.UUID | None, int], ErrorCode],
                  errors: dict[tuple[uuid.UUID | None, int], ErrorCode]) -> list[object]:
    by_topic: dict[uuid.UUID | None, list[object]] = {}
    for key in dict.fromkeys([*fetched, *ack_errors, *errors]):
        topic_id, partition = key
        data, ranges = fetched.get(key, (b"", []))
        by_topic.setdefault(topic_id, []).append(build(
            m.PartitionData, partition_index=partition, error_code=errors.get(key, ErrorCode.none), error_message=None,
            acknowledge_error_code=ack_errors.get(key, ErrorCode.none), acknowledge_error_message=None,
            current_leader=_leader(m, state), records=data,
            acquired_records=tuple(build(m.AcquiredRecords, first_offset=r.first_offset, last_offset=r.last_offset,
                                         delivery_count=r.delivery_count) for r in ranges)))
    return [build(m.ShareFetchableTopicResponse, topic_id=tid, partitions=tuple(parts)) for tid, parts in by_topic.items()]


# --- ShareAcknowledge ----------------------------------------------------------------------------

async def handle_share_acknowledge(state: BrokerState, header: RequestHeader, request: wire.ShareAcknowledgeRequest) -> object:
    m = response_module(k.SHARE_ACKNOWLEDGE, header.api_version)
    svc = state.shares

    def respond(code: ErrorCode, topics: Any = (), message: str | None = None) -> object:
        return build(m.ShareAcknowledgeResponse, throttle_time=_ZERO, error_code=code, error_message=message,
                     responses=tuple(topics), node_endpoints=())

    if not svc.settings.enabled:
        return respond(ErrorCode.unsupported_version, message="share groups are disabled on this broker")
    group_id, member_id = request.group_id or "", request.member_id or ""
    if not group_id or not member_id:
        return respond(ErrorCode.invalid_request, message="GroupId and MemberId must be set")
    if not authorize(state, Op.READ, Res.GROUP, group_id):
        return respond(ErrorCode.group_authorization_failed)
    lookup = svc.sessions.lookup(group_id, member_id, request.share_session_epoch, may_open=False,
                                 now_ms=state.mono_ms())
    if lookup.error != ErrorCode.none:
        return respond(lookup.error)
    acks: dict[tuple[uuid.UUID | None, int], list[AckBatch]] = {}
    for t in request.topics:
        for p in t.partitions:
            acks.setdefault((t.topic_id, p.partition_index), []).extend(_ack_batches(p.acknowledgement_batches))
    results = await _apply_acks(state, group_id, member_id, acks, _Partitions(state))
    if lookup.final:
        svc.sessions.close(group_id, member_id)
        svc.release_member(group_id, member_id)
    by_topic: dict[uuid.UUID | None, list[object]] = {}
    for (topic_id, partition), error in results.items():
        by_topic.setdefault(topic_id, []).append(build(
            m.PartitionData, partition_index=partition, error_code=error, error_message=None,
            current_leader=_leader(m, state)))
    return respond(ErrorCode.none, [build(m.ShareAcknowledgeTopicResponse, topic_id=tid, partitions=tuple(parts))
                                    for tid, parts in by_topic.items()])
