"""The classic group coordinator, sans-io: a thin composition along Kafka's lines.

* :class:`~oncestream.coordinator.group.membership.GroupMetadataManager`: members, generations,
  rebalances and their timers;
* :class:`~oncestream.coordinator.group.offsets.OffsetMetadataManager`: committed and pending
  transactional offsets, expiry;
* :class:`~oncestream.coordinator.group.runtime.GroupRuntime`: what both share (groups, clocks,
  records and answers of the current call, the deadline heap).

This class frames every request (clocks, the group's due timers before and after, Kafka errors
into answers), rebuilds both managers from ``__consumer_offsets`` with one :meth:`replay` dispatch,
and fires timers from a deadline heap: a tick costs the groups whose deadline passed, not the
number of groups.

How to drive it
---------------
* Two clocks (see runtime.py): ``now_ms`` is wall-clock time, only written into records;
  ``mono_ms`` is monotonic and drives every timer. Every call takes ``now_ms`` and the keyword
  ``mono_ms``; a caller with one clock for both (tests, simulations) may leave ``mono_ms`` out.
  ``mono_ms`` must never go backwards; ``now_ms`` may step either way without effect on timers.
  Timers fire inside :meth:`tick`, and also for the group a request touches, before and after the
  request is handled, so a request never sees a member that should already have expired.
  :meth:`next_deadline_ms` (monotonic) says when to tick.
* JoinGroup and SyncGroup answer through a ``respond`` callback, possibly during the call,
  possibly during a later call or tick. Callbacks are always invoked at the end of a call, after
  the coordinator's state is consistent, so a callback may call back into the coordinator.
* Every durable change comes back as a list of :class:`OffsetsTopicWrite` (records for one
  __consumer_offsets partition each). **Contract**: the broker appends the writes a call returned
  before it sends any response produced by that call (its return value or a ``respond`` callback
  invoked during it), and before it hands the coordinator another request. If an append fails,
  the broker calls :meth:`unload_partition` and later :meth:`load` from what the log really holds:
  the in-memory state is then exactly the durable state again, and the answers of that call must
  not be sent as successes.
* Errors: typed OnceStreamError exceptions inside; results carry the ErrorCode. A broken invariant
  (CoordinatorInvariantError) or illegal state transition is a bug and propagates.
"""

from __future__ import annotations

import dataclasses
import struct
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from kio.schema.errors import ErrorCode

from oncestream.coordinator.group.config import GroupCoordinatorConfig
from oncestream.coordinator.group.consumer.group import CONSUMER_GROUP_TYPE, ConsumerGroup
from oncestream.coordinator.group.consumer.manager import ConsumerGroupManager
from oncestream.coordinator.group.consumer.messages import (
    ConsumerGroupDescription,
    ConsumerHeartbeatRequest,
    ConsumerHeartbeatResult,
    TopicsView,
)
from oncestream.coordinator.group.consumer.records import (
    CONSUMER_GROUP_KEY_VERSIONS,
    decode_record,
    record_group_id,
)
from oncestream.coordinator.group.conversion import GroupConverter, online_downgrade_allowed
from oncestream.coordinator.group.deadlines import DeadlineHeap
from oncestream.coordinator.group.group import GroupMetadata
from oncestream.coordinator.group.membership import GroupMetadataManager
from oncestream.coordinator.group.messages import (
    NO_MEMBER_ID,
    DeleteGroupsResult,
    GroupDescription,
    HeartbeatRequest,
    HeartbeatResult,
    JoinRequest,
    JoinResult,
    LeaveRequest,
    LeaveResult,
    ListGroupsResult,
    OffsetAndMetadata,
    OffsetCommitRequest,
    OffsetCommitResult,
    OffsetDeleteRequest,
    OffsetDeleteResult,
    OffsetFetchRequest,
    OffsetFetchResult,
    OffsetsTopicWrite,
    PartitionOffsetCommit,
    SyncRequest,
    SyncResult,
)
from oncestream.coordinator.group.migration import OnlineUpgradeRefusedError, online_upgrade_refusal
from oncestream.coordinator.group.offsets import OffsetMetadataManager
from oncestream.coordinator.group.records import (
    GroupMetadataKey,
    GroupSnapshot,
    OffsetCommitKey,
    PendingTxnOffsetKey,
    decode_group_value,
    decode_key,
    decode_offset_value,
    group_metadata_record,
)
from oncestream.coordinator.group.runtime import GroupRuntime
from oncestream.coordinator.group.state import (
    GroupState,
    IllegalGroupStateTransitionError,
)
from oncestream.errors import (
    CoordinatorInvariantError,
    CoordinatorLoadInProgressError,
    CorruptRecordError,
    GroupIdNotFoundError,
    OnceStreamError,
)
from oncestream.topic_partition import TopicPartition

_S = GroupState
_R = TypeVar("_R")
_KEY_VERSION = struct.Struct(">h")


def _key_version(key_bytes: bytes) -> int:
    if len(key_bytes) < 2:
        raise CorruptRecordError("__consumer_offsets key: shorter than its version")
    return int(_KEY_VERSION.unpack_from(key_bytes)[0])


class GroupCoordinator:
    """Owns every classic group of this broker and their committed offsets."""

    def __init__(
        self,
        config: GroupCoordinatorConfig | None = None,
        *,
        member_id_suffix: Callable[[], str] | None = None,
        topics: TopicsView | None = None,
    ) -> None:
        """``member_id_suffix`` makes new member ids (``<client or instance id>-<suffix>``);
        default a random UUID. Tests inject a counter to get deterministic ids. ``topics`` is
        the cluster's topics as consumer groups (KIP-848) see them (default: none)."""
        self.config = config or GroupCoordinatorConfig()
        self._rt = GroupRuntime(self.config, member_id_suffix or (lambda: str(uuid.uuid4())))
        self._membership = GroupMetadataManager(self._rt)
        self._offsets = OffsetMetadataManager(self._rt)
        self._membership.offsets = self._offsets
        self._consumer = ConsumerGroupManager(self._rt, topics or dict)
        self._converter = GroupConverter(self._rt, self._membership, self._consumer, topics or dict)
        self._consumer.downgrade_on_fence = self._maybe_downgrade
        self._offsets.subscribed_topics = self._consumer.subscribed_topics
        # Offset expiry (Kafka's cleanup task), on the monotonic clock.
        self._next_cleanup_ms: int | None = None

    # ==============================================================================================
    # Introspection
    # ==============================================================================================

    @property
    def now_ms(self) -> int | None:
        """The latest wall-clock time the coordinator was given (None before the first call)."""
        return self._rt.wall_ms if self._rt.clock_started else None

    @property
    def mono_ms(self) -> int:
        """The latest monotonic time the coordinator was given."""
        return self._rt.mono_ms

    @property
    def num_partitions(self) -> int:
        """offsets.topic.num.partitions."""
        return self._rt.num_partitions

    @property
    def deadlines(self) -> DeadlineHeap[str]:
        """The deadline heap (one entry per group with a timer armed), for tests and metrics."""
        return self._rt.deadlines

    def partition_for(self, group_id: str) -> int:
        """The __consumer_offsets partition of ``group_id`` (Kafka's mapping)."""
        return self._rt.partition_for(group_id)

    def group_state(self, group_id: str) -> GroupState | None:
        """The group's state, or None if the coordinator does not know the group."""
        group = self._rt.groups.get(group_id)
        return None if group is None else group.state

    def group_snapshot(self, group_id: str) -> GroupSnapshot | None:
        """The durable view of a group (what its metadata record would hold now)."""
        group = self._rt.groups.get(group_id)
        return None if group is None else group.snapshot()

    def group_generation(self, group_id: str) -> int | None:
        """The group's generation id, or None if unknown."""
        group = self._rt.groups.get(group_id)
        return None if group is None else group.generation_id

    def committed_offsets(self, group_id: str) -> dict[TopicPartition, OffsetAndMetadata]:
        """Every committed offset of the group (for tests and tools)."""
        group = self._rt.groups.get(group_id)
        if group is None:
            return {}
        return {tp: c.value for tp, c in sorted(group.offsets.items())}

    def pending_txn_offsets(self, group_id: str) -> dict[int, dict[TopicPartition, OffsetAndMetadata]]:
        """Offsets of open transactions per producer id (for tests and tools)."""
        group = self._rt.groups.get(group_id)
        if group is None:
            return {}
        return {
            pid: {tp: c.value for tp, c in sorted(pending.items())}
            for pid, pending in sorted(group.pending_txn_offsets.items())
        }

    def group_ids(self) -> list[str]:
        """Ids of every group the coordinator holds."""
        return sorted(self._rt.groups)

    def next_deadline_ms(self) -> int | None:
        """The earliest monotonic time at which :meth:`tick` has work to do (None: no timer)."""
        deadlines = [d for d in (self._rt.deadlines.next_ms(), self._next_cleanup_ms) if d is not None]
        if self._rt.pending_writes:
            # Records kept back by a read-only call: tick now to hand them out.
            deadlines.append(self._rt.mono_ms)
        return min(deadlines, default=None)

    # ==============================================================================================
    # Membership requests
    # ==============================================================================================

    def join_group(
        self, request: JoinRequest, now_ms: int, respond: Callable[[JoinResult], None], *,
        mono_ms: int | None = None,
    ) -> list[OffsetsTopicWrite]:
        """Handle JoinGroup; ``respond`` is called once with the result, now or later."""
        self._handle(
            request.group_id, now_ms, mono_ms,
            lambda mono: self._classic_join(request, mono, respond),
            lambda exc: self._rt.deliver(respond, JoinResult(error=exc.code, member_id=request.member_id)),
            fire_timers_after=True,
        )
        return self._finish()

    def sync_group(
        self, request: SyncRequest, now_ms: int, respond: Callable[[SyncResult], None], *,
        mono_ms: int | None = None,
    ) -> list[OffsetsTopicWrite]:
        """Handle SyncGroup; ``respond`` is called once with the result, now or later."""

        def failed(exc: OnceStreamError) -> None:
            if isinstance(exc, CoordinatorLoadInProgressError):
                # The rebalance in flight was lost with the old state; REBALANCE_IN_PROGRESS
                # makes the client rejoin without rediscovering the coordinator (older clients
                # do not know COORDINATOR_LOAD_IN_PROGRESS here).
                self._rt.deliver(respond, SyncResult(ErrorCode.rebalance_in_progress))
            else:
                self._rt.deliver(respond, SyncResult(exc.code))

        self._handle(request.group_id, now_ms, mono_ms,
                     lambda mono: self._classic_sync(request, mono, respond),
                     failed,
                     fire_timers_after=True)
        return self._finish()

    def heartbeat(self, request: HeartbeatRequest, now_ms: int, *, mono_ms: int | None = None) -> HeartbeatResult:
        """Handle Heartbeat: resets the member's session timer; REBALANCE_IN_PROGRESS tells the
        member to rejoin. Returns no records (heartbeats are not persisted)."""
        # While a state is loading nothing is known about it: answer blindly like Kafka so
        # members stay put.
        error = self._handle(
            request.group_id, now_ms, mono_ms,
            lambda mono: self._classic_heartbeat(request, mono),
            lambda exc: ErrorCode.none if isinstance(exc, CoordinatorLoadInProgressError) else exc.code,
        )
        self._finish(read_only=True)
        return HeartbeatResult(error)

    def leave_group(
        self, request: LeaveRequest, now_ms: int, *, mono_ms: int | None = None
    ) -> tuple[LeaveResult, list[OffsetsTopicWrite]]:
        """Handle LeaveGroup (batch form of v3+ included): per-member errors. On a consumer
        group an administrator removes static members by instance id (Kafka)."""

        def body(mono: int) -> LeaveResult:
            if request.group_id in self._consumer.groups:
                return self._consumer.leave_by_admin(request)
            return self._membership.leave(request, mono)

        result = self._handle(request.group_id, now_ms, mono_ms, body,
                              lambda exc: LeaveResult(exc.code), fire_timers_after=True)
        return result, self._finish()

    def describe_groups(
        self, group_ids: Iterable[str], now_ms: int, *, mono_ms: int | None = None
    ) -> list[GroupDescription]:
        """Handle DescribeGroups; an unknown group is reported Dead with no error (Kafka)."""
        mono = self._rt.advance(now_ms, mono_ms)
        out = []
        for group_id in group_ids:
            self._fire_timers(group_id, mono)
            if group_id in self._consumer.groups:
                # Kafka (DescribeGroups up to v5): a group that is not classic reads as Dead.
                out.append(GroupDescription(group_id, ErrorCode.none, "Dead", "", ""))
            else:
                out.append(self._membership.describe(group_id))
        self._finish(read_only=True)
        return out

    def list_groups(self, states_filter: Iterable[str] = (), types_filter: Iterable[str] = ()) -> ListGroupsResult:
        """Handle ListGroups (state filter of v4+, type filter of v5+, both case-insensitive)."""
        states = {st.lower() for st in states_filter}
        types = {t.lower() for t in types_filter}
        classic = self._membership.list_groups(states_filter, types_filter)
        listed = [g for g in classic.groups if g.group_id not in self._consumer.groups]
        if not types or CONSUMER_GROUP_TYPE in types:
            listed.extend(self._consumer.listed(states))
        return ListGroupsResult(classic.error, tuple(sorted(listed, key=lambda g: g.group_id)))

    def group_type(self, group_id: str) -> str:
        """"consumer" for a KIP-848 group, else "classic" (ListGroups v5's GroupType)."""
        return self._consumer.type_of(group_id) or "classic"

    def delete_groups(
        self, group_ids: Iterable[str], now_ms: int, *, mono_ms: int | None = None
    ) -> tuple[DeleteGroupsResult, list[OffsetsTopicWrite]]:
        """Handle DeleteGroups: only Empty groups can go (NON_EMPTY_GROUP otherwise); their
        offsets and metadata are tombstoned."""
        mono = self._rt.advance(now_ms, mono_ms)
        errors: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            self._fire_timers(group_id, mono)
            errors[group_id] = self._delete_group(group_id)
        return DeleteGroupsResult(errors), self._finish()

    # ==============================================================================================
    # Consumer groups (KIP-848)
    # ==============================================================================================

    def consumer_group_heartbeat(
        self, request: ConsumerHeartbeatRequest, now_ms: int, *, mono_ms: int | None = None
    ) -> tuple[ConsumerHeartbeatResult, list[OffsetsTopicWrite]]:
        """Handle ConsumerGroupHeartbeat: join, heartbeat, reconcile or leave; the broker
        appends the returned records before it answers (they carry epochs and assignments)."""

        def body(mono: int) -> ConsumerHeartbeatResult:
            if request.member_epoch == 0:
                # A request Kafka refuses converts nothing: validate before a classic group goes.
                self._consumer.validate(request)
                self._take_over_classic(request.group_id)
            elif request.group_id not in self._consumer.groups and request.group_id in self._rt.groups:
                raise GroupIdNotFoundError(f"Group {request.group_id} is not a consumer group")
            return self._consumer.heartbeat(request, mono)

        result = self._handle(request.group_id, now_ms, mono_ms, body,
                              lambda exc: ConsumerHeartbeatResult(exc.code, str(exc)), fire_timers_after=True)
        return result, self._finish()

    def consumer_group_describe(
        self, group_ids: Iterable[str], now_ms: int, *, mono_ms: int | None = None
    ) -> list[ConsumerGroupDescription]:
        """Handle ConsumerGroupDescribe; a group that is not a consumer group is GROUP_ID_NOT_FOUND."""
        mono = self._rt.advance(now_ms, mono_ms)
        out = []
        for group_id in group_ids:
            self._fire_timers(group_id, mono)
            try:
                self._rt.validate_group_id(group_id, allow_empty=False)
            except OnceStreamError as exc:
                out.append(ConsumerGroupDescription(group_id, exc.code, str(exc)))
                continue
            out.append(self._consumer.describe(group_id))
        self._finish(read_only=True)
        return out

    # ==============================================================================================
    # Offset requests
    # ==============================================================================================

    def commit_offsets(
        self, request: OffsetCommitRequest, now_ms: int, *, mono_ms: int | None = None, api_version: int = 9
    ) -> tuple[OffsetCommitResult, list[OffsetsTopicWrite]]:
        """Handle OffsetCommit. The broker appends the returned records, then replies. On a
        consumer group (KIP-848) ``generation_id`` is the member epoch (STALE_MEMBER_EPOCH if it
        is not the member's current one) and ``api_version`` must be 9 or above for members."""
        def body(mono: int) -> dict[TopicPartition, ErrorCode]:
            if request.group_id not in self._consumer.groups:
                return self._offsets.commit(request, self._rt.wall_ms)
            self._consumer.validate_offset_commit(request.group_id, request.member_id, request.generation_id,
                                                  transactional=False, api_version=api_version)
            # The member (or an admin of an empty group) passed the consumer group's checks: the
            # offsets go to the group's offset store as a plain commit.
            plain = dataclasses.replace(request, member_id=NO_MEMBER_ID, generation_id=-1, group_instance_id=None)
            return self._offsets.commit(plain, self._rt.wall_ms)

        errors = self._handle(request.group_id, now_ms, mono_ms, body,
                              lambda exc: {tp: exc.code for tp in request.offsets})
        return OffsetCommitResult(errors), self._finish()

    def hold_member(self, group_id: str, member_id: str) -> None:
        """The broker holds a request of consumer-group member ``member_id`` while its records
        are persisted: its session does not run out until :meth:`release_member` (the member's
        heartbeats wait unread behind that request on its connection)."""
        self._consumer.hold_member(group_id, member_id)

    def release_member(self, group_id: str, member_id: str, *, mono_ms: int) -> None:
        """The held request is answered: the member gets a full session from ``mono_ms``."""
        self._consumer.release_member(group_id, member_id, mono_ms)
        self._finish(read_only=True)  # re-arm the group's timers

    def fetch_offsets(
        self, request: OffsetFetchRequest, now_ms: int, *, mono_ms: int | None = None,
        member_id: str | None = None, member_epoch: int = -1,
    ) -> OffsetFetchResult:
        """Handle OffsetFetch; with ``require_stable`` a partition that has a pending
        transactional commit answers UNSTABLE_OFFSET_COMMIT (the client retries)."""
        mono = self._rt.advance(now_ms, mono_ms)
        self._fire_timers(request.group_id, mono)
        try:
            self._rt.validate_group_id(request.group_id, allow_empty=True)
            if request.group_id in self._consumer.groups:
                self._consumer.validate_offset_fetch(request.group_id, member_id, member_epoch)
        except OnceStreamError as exc:
            self._finish(read_only=True)
            return OffsetFetchResult(exc.code)
        self._finish(read_only=True)
        return self._offsets.fetch(request)

    def delete_offsets(
        self, request: OffsetDeleteRequest, now_ms: int, *, mono_ms: int | None = None
    ) -> tuple[OffsetDeleteResult, list[OffsetsTopicWrite]]:
        """Handle OffsetDelete. A consumer group still subscribed to a topic keeps its offsets
        (GROUP_SUBSCRIBED_TO_TOPIC), decided from the members' consumer subscriptions."""
        result = self._handle(request.group_id, now_ms, mono_ms, lambda mono: self._delete_offsets(request),
                              lambda exc: OffsetDeleteResult(exc.code))
        return result, self._finish()

    def add_pending_txn_offsets(
        self,
        group_id: str,
        producer_id: int,
        offsets: Mapping[TopicPartition, PartitionOffsetCommit],
        now_ms: int,
        *,
        member_id: str = NO_MEMBER_ID,
        generation_id: int = -1,
        group_instance_id: str | None = None,
        mono_ms: int | None = None,
    ) -> tuple[OffsetCommitResult, list[OffsetsTopicWrite]]:
        """TxnOffsetCommit: stage offsets of an open transaction of ``producer_id``.

        They are invisible to OffsetFetch (which answers UNSTABLE_OFFSET_COMMIT for them when
        RequireStable is set) until :meth:`complete_pending_txn_offsets`. The returned records make
        the staged offsets durable; a reload brings them back as still pending. Member/generation
        are checked like Kafka does for TxnOffsetCommit v3+ (KIP-447), skipped when not given.
        """
        def body(mono: int) -> dict[TopicPartition, ErrorCode]:
            if group_id in self._consumer.groups:
                # KIP-447 on the consumer protocol: the generation is the member epoch.
                if generation_id >= 0 or member_id != NO_MEMBER_ID:
                    self._consumer.validate_offset_commit(group_id, member_id, generation_id,
                                                          transactional=True, api_version=-1)
                return self._offsets.stage_pending(group_id, producer_id, offsets, self._rt.wall_ms,
                                                   NO_MEMBER_ID, -1, None)
            return self._offsets.stage_pending(
                group_id, producer_id, offsets, self._rt.wall_ms, member_id, generation_id, group_instance_id)

        errors = self._handle(group_id, now_ms, mono_ms, body, lambda exc: {tp: exc.code for tp in offsets})
        return OffsetCommitResult(errors), self._finish()

    def complete_pending_txn_offsets(
        self, group_id: str, producer_id: int, commit: bool, now_ms: int, *, mono_ms: int | None = None
    ) -> list[OffsetsTopicWrite]:
        """The transaction of ``producer_id`` ended: on commit its staged offsets become the
        committed ones (unless a plain commit written after them is newer); on abort they are
        dropped. Returns the records that make this durable (empty if nothing was staged)."""
        mono = self._rt.advance(now_ms, mono_ms)
        self._fire_timers(group_id, mono)
        self._offsets.complete_pending(group_id, producer_id, commit)
        return self._finish()

    # ==============================================================================================
    # Timers
    # ==============================================================================================

    def tick(self, now_ms: int, *, mono_ms: int | None = None) -> list[OffsetsTopicWrite]:
        """Fire every timer due at ``mono_ms``; returns the records to persist. Only groups whose
        deadline passed are visited (the deadline heap), plus the periodic offset cleanup."""
        mono = self._rt.advance(now_ms, mono_ms)
        for group_id in self._rt.deadlines.pop_due(mono):
            self._fire_timers(group_id, mono)
        interval_ms = self.config.offsets_retention_check_interval_ms
        if self._next_cleanup_ms is None:
            self._next_cleanup_ms = mono + interval_ms
        elif mono >= self._next_cleanup_ms:
            self._offsets.cleanup(self._rt.wall_ms)
            self._next_cleanup_ms = mono + interval_ms
        return self._finish()

    # ==============================================================================================
    # Loading / unloading (__consumer_offsets replay)
    # ==============================================================================================

    def load(
        self,
        records: Iterable[tuple[bytes, bytes | None]],
        now_ms: int,
        partitions: Iterable[int] | None = None,
        *,
        mono_ms: int | None = None,
    ) -> None:
        """Rebuild groups and offsets from __consumer_offsets records in log order.

        The latest value per key wins and a tombstone deletes. ``partitions`` limits the load to
        those __consumer_offsets partitions (default: all); their current in-memory state is
        dropped first and records of other partitions are ignored. Members of loaded groups get
        a fresh session (``mono_ms`` + session timeout), as in Kafka.
        """
        self._rt.advance(now_ms, mono_ms)
        rt = self._rt
        targets = set(range(self.num_partitions)) if partitions is None else set(partitions)
        for group_id in [g for g in rt.groups if rt.partition_for(g) in targets]:
            self._membership.unload_group(rt.groups[group_id])
        self._consumer.unload([g for g in self._consumer.groups if rt.partition_for(g) in targets])
        rt.drop_deferred_writes(targets)
        for key_bytes, value_bytes in records:
            if self._record_partition(key_bytes) in targets:
                self.replay(key_bytes, value_bytes)
        for group_id in [g for g in rt.groups if rt.partition_for(g) in targets]:
            group = rt.groups[group_id]
            if group.generation_id == 0 and not group.has_offsets():
                # Neither metadata nor offsets survived replay: nothing to keep.
                del rt.groups[group_id]
            rt.touch_group(group_id)
        for group_id in [g for g in self._consumer.groups if rt.partition_for(g) in targets]:
            self._consumer.after_load(group_id, rt.mono_ms)
        rt.loading_partitions -= targets
        rt.foreign_partitions -= targets
        self._finish(read_only=True)

    def _record_partition(self, key_bytes: bytes) -> int:
        if _key_version(key_bytes) in CONSUMER_GROUP_KEY_VERSIONS:
            return self._rt.partition_for(record_group_id(key_bytes))
        return self._rt.partition_for(decode_key(key_bytes).group_id)

    def replay(self, key_bytes: bytes, value_bytes: bytes | None) -> None:
        """Apply one __consumer_offsets record (in log order) to the manager that owns it."""
        version = _key_version(key_bytes)
        if version in CONSUMER_GROUP_KEY_VERSIONS:
            self._consumer.apply(decode_record(version, key_bytes, value_bytes))
            return
        key = decode_key(key_bytes)
        if isinstance(key, GroupMetadataKey):
            self._replay_group(key.group_id, None if value_bytes is None else decode_group_value(value_bytes))
        elif isinstance(key, OffsetCommitKey):
            value = None if value_bytes is None else decode_offset_value(value_bytes)
            self._offsets.replay_offset(key.group_id, key.topic_partition, value)
        elif isinstance(key, PendingTxnOffsetKey):
            value = None if value_bytes is None else decode_offset_value(value_bytes)
            self._offsets.replay_pending(key.group_id, key.producer_id, key.topic_partition, value)
        else:
            raise CoordinatorInvariantError(f"no manager replays {type(key).__name__}")

    def _replay_group(self, group_id: str, snapshot: GroupSnapshot | None) -> None:
        """A GroupMetadata record replaces the group's membership and keeps its offsets; its
        tombstone leaves an offset-only group (dropped at the end of the load if it has none)."""
        rt = self._rt
        old = rt.groups.get(group_id)
        if snapshot is None:
            group = GroupMetadata(group_id, rt.wall_ms)
        else:
            group = GroupMetadata.from_snapshot(group_id, snapshot, rt.wall_ms, rt.mono_ms)
        if old is not None:
            group.offsets = old.offsets
            group.pending_txn_offsets = old.pending_txn_offsets
        rt.groups[group_id] = group

    def unload_partition(self, partition: int) -> None:
        """Forget the groups of ``partition`` (e.g. after a failed append) and treat it as
        loading: their requests get COORDINATOR_LOAD_IN_PROGRESS until :meth:`load` is called for
        it. Waiting JoinGroup/SyncGroup requests are answered NOT_COORDINATOR."""
        rt = self._rt
        if not 0 <= partition < self.num_partitions:
            raise CoordinatorInvariantError(f"no __consumer_offsets partition {partition}")
        for group_id in [g for g in rt.groups if rt.partition_for(g) == partition]:
            self._membership.unload_group(rt.groups[group_id])
        self._consumer.unload([g for g in self._consumer.groups if rt.partition_for(g) == partition])
        rt.drop_deferred_writes({partition})
        rt.loading_partitions.add(partition)
        self._finish(read_only=True)

    def disown_partition(self, partition: int) -> None:
        """Cluster mode: another broker owns ``partition`` (or may: its lease was lost). Its groups
        are forgotten as by :meth:`unload_partition` and answer NOT_COORDINATOR until
        :meth:`begin_loading` (COORDINATOR_LOAD_IN_PROGRESS) and :meth:`load` take it back."""
        self.unload_partition(partition)
        self._rt.foreign_partitions.add(partition)

    def begin_loading(self, partition: int) -> None:
        """Cluster mode: this broker acquired ``partition``'s lease and reads its records; its
        groups answer COORDINATOR_LOAD_IN_PROGRESS until :meth:`load` (as Kafka while loading)."""
        self._rt.foreign_partitions.discard(partition)
        self._rt.loading_partitions.add(partition)

    def owns_partition(self, partition: int) -> bool:
        """Whether ``partition``'s groups are this coordinator's (loaded or loading)."""
        return partition not in self._rt.foreign_partitions

    # ==============================================================================================
    # Plumbing
    # ==============================================================================================

    def _handle(
        self,
        group_id: str,
        now_ms: int,
        mono_ms: int | None,
        body: Callable[[int], _R],
        on_error: Callable[[OnceStreamError], _R],
        *,
        fire_timers_after: bool = False,
    ) -> _R:
        """The frame of every request on one group: time moves on, the group's due timers fire,
        then ``body(mono_ms)`` runs; a Kafka error becomes ``on_error``'s answer. An illegal
        state transition or a broken invariant is a bug, never an answer, so it propagates.
        Join, sync and leave fire the group's timers again afterwards: their own change can make
        one due at once."""
        mono = self._rt.advance(now_ms, mono_ms)
        self._fire_timers(group_id, mono)
        try:
            result = body(mono)
        except (IllegalGroupStateTransitionError, CoordinatorInvariantError):
            raise
        except OnceStreamError as exc:
            result = on_error(exc)
        if fire_timers_after:
            self._fire_timers(group_id, mono)
        return result

    def _fire_timers(self, group_id: str, mono_ms: int) -> None:
        self._membership.fire_timers(group_id, mono_ms)
        self._consumer.fire_timers(group_id, mono_ms)

    # ==============================================================================================
    # Classic requests on consumer groups, online migration (migration.py)
    # ==============================================================================================

    def _classic_join(self, request: JoinRequest, mono_ms: int, respond: Callable[[JoinResult], None]) -> None:
        """JoinGroup: a consumer group with members takes the member in as a classic member
        (Kafka's classicGroupJoinToConsumerGroup); an empty one turns into a classic group first."""
        group = self._consumer.groups.get(request.group_id)
        if group is not None and group.members:
            replaced = group.static_member(request.group_instance_id) if request.member_id == NO_MEMBER_ID else None
            result = self._consumer.classic.join(group, request, mono_ms)
            if (result.error == ErrorCode.none and replaced is not None and replaced.subscription.classic is None
                    and online_downgrade_allowed(self.config.consumer_migration_policy, group, None,
                                                 self.config.group_max_size)):
                # Kafka's validateOnlineDowngradeWithReplacedMemberId: the last consumer-protocol
                # member was a static one its classic successor replaced.
                self._converter.downgrade(group, None, rebalance=False)
            self._rt.deliver(respond, result)
            return
        if group is not None:
            self._consumer.write_tombstones(group)
        self._membership.join(request, mono_ms, respond)

    def _classic_sync(self, request: SyncRequest, mono_ms: int, respond: Callable[[SyncResult], None]) -> None:
        group = self._consumer.groups.get(request.group_id)
        if group is None:
            self._membership.sync(request, mono_ms, respond)
        else:
            self._rt.deliver(respond, self._consumer.classic.sync(group, request, mono_ms))

    def _classic_heartbeat(self, request: HeartbeatRequest, mono_ms: int) -> ErrorCode:
        group = self._consumer.groups.get(request.group_id)
        if group is None:
            return self._membership.heartbeat(request, mono_ms)
        return self._consumer.classic.heartbeat(group, request, mono_ms)

    def _maybe_downgrade(self, group: ConsumerGroup, leaving_member_id: str) -> bool:
        """Kafka's online downgrade, as a member is fenced or leaves: when every other member is
        classic (and some remain) and the policy and group.max.size allow, the group becomes a
        classic group at its current epoch and a classic rebalance starts."""
        if not online_downgrade_allowed(self.config.consumer_migration_policy, group, leaving_member_id,
                                        self.config.group_max_size):
            return False
        return self._converter.downgrade(group, leaving_member_id)

    def _take_over_classic(self, group_id: str) -> None:
        """ConsumerGroupHeartbeat joining a group id a classic group holds (Kafka's
        getOrMaybeCreateConsumerGroup): an empty classic group becomes a consumer group whatever
        ``group.consumer.migration.policy`` says (its metadata is tombstoned, its offsets stay); a
        classic group with members is upgraded online where Kafka's validateOnlineUpgrade allows
        it, else refused with GROUP_ID_NOT_FOUND "Group <id> is not a consumer group"."""
        group = self._rt.groups.get(group_id)
        if group is None or group_id in self._consumer.groups:
            return
        if not group.is_(_S.EMPTY):
            refusal = online_upgrade_refusal(self.config.consumer_migration_policy, group.protocol_type,
                                             len(group.members), self.config.consumer_max_size)
            if refusal is not None:
                raise OnlineUpgradeRefusedError(group_id, refusal)
            self._converter.upgrade(group)
            return
        if group.generation_id > 0:
            self._rt.emit(group_id, group_metadata_record(group_id, None))
            shell = GroupMetadata(group_id, self._rt.wall_ms)
            shell.offsets, shell.pending_txn_offsets = group.offsets, group.pending_txn_offsets
            self._rt.groups[group_id] = shell

    def _delete_group(self, group_id: str) -> ErrorCode:
        if group_id not in self._consumer.groups:
            return self._membership.delete(group_id)
        error = self._consumer.delete(group_id)
        if error == ErrorCode.none and group_id in self._rt.groups:
            # Its offsets live in the classic store (an Empty holder without metadata).
            self._membership.delete(group_id)
        return error

    def _delete_offsets(self, request: OffsetDeleteRequest) -> OffsetDeleteResult:
        """OffsetDelete; a non-empty consumer group keeps the offsets of topics it subscribes to."""
        consumer = self._consumer.groups.get(request.group_id)
        if consumer is None:
            return self._offsets.delete(request)
        self._rt.validate_group_id(request.group_id, allow_empty=False)
        errors: dict[TopicPartition, ErrorCode] = {}
        eligible = []
        for tp in request.partitions:
            if consumer.members and self._consumer.is_subscribed_to(request.group_id, tp.topic):
                errors[tp] = ErrorCode.group_subscribed_to_topic
            else:
                eligible.append(tp)
                errors[tp] = ErrorCode.none
        holder = self._rt.groups.get(request.group_id)
        if holder is not None and eligible:
            self._offsets.remove_offsets_and_maybe_group(holder, eligible)
        return OffsetDeleteResult(ErrorCode.none, errors)

    def _finish(self, *, read_only: bool = False) -> list[OffsetsTopicWrite]:
        """Refresh the heap entries of the groups this call touched, then take the call's
        records and run its callbacks (see GroupRuntime.finish)."""
        rt = self._rt
        for group_id in rt.touched:
            group = rt.groups.get(group_id)
            deadline_ms = None
            if group is not None and not group.is_(_S.DEAD):
                deadline_ms = GroupMetadataManager.next_deadline_ms(group)
            consumer_ms = self._consumer.next_deadline_ms(group_id)
            if consumer_ms is not None:
                deadline_ms = consumer_ms if deadline_ms is None else min(deadline_ms, consumer_ms)
            rt.deadlines.schedule(group_id, deadline_ms)
        rt.touched.clear()
        return rt.finish(read_only=read_only)
