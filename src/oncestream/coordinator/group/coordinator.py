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

import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from kio.schema.errors import ErrorCode

from oncestream.coordinator.group.config import GroupCoordinatorConfig
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
from oncestream.coordinator.group.offsets import OffsetMetadataManager
from oncestream.coordinator.group.records import (
    GroupMetadataKey,
    GroupSnapshot,
    OffsetCommitKey,
    PendingTxnOffsetKey,
    decode_group_value,
    decode_key,
    decode_offset_value,
)
from oncestream.coordinator.group.runtime import GroupRuntime
from oncestream.coordinator.group.state import (
    GroupState,
    IllegalGroupStateTransitionError,
)
from oncestream.errors import (
    CoordinatorInvariantError,
    CoordinatorLoadInProgressError,
    OnceStreamError,
)
from oncestream.topic_partition import TopicPartition

_S = GroupState
_R = TypeVar("_R")


class GroupCoordinator:
    """Owns every classic group of this broker and their committed offsets."""

    def __init__(
        self,
        config: GroupCoordinatorConfig | None = None,
        *,
        member_id_suffix: Callable[[], str] | None = None,
    ) -> None:
        """``member_id_suffix`` makes new member ids (``<client or instance id>-<suffix>``);
        default a random UUID. Tests inject a counter to get deterministic ids."""
        self.config = config or GroupCoordinatorConfig()
        self._rt = GroupRuntime(self.config, member_id_suffix or (lambda: str(uuid.uuid4())))
        self._membership = GroupMetadataManager(self._rt)
        self._offsets = OffsetMetadataManager(self._rt)
        self._membership.offsets = self._offsets
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
            lambda mono: self._membership.join(request, mono, respond),
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
                     lambda mono: self._membership.sync(request, mono, respond), failed,
                     fire_timers_after=True)
        return self._finish()

    def heartbeat(self, request: HeartbeatRequest, now_ms: int, *, mono_ms: int | None = None) -> HeartbeatResult:
        """Handle Heartbeat: resets the member's session timer; REBALANCE_IN_PROGRESS tells the
        member to rejoin. Returns no records (heartbeats are not persisted)."""
        # While a state is loading nothing is known about it: answer blindly like Kafka so
        # members stay put.
        error = self._handle(
            request.group_id, now_ms, mono_ms, lambda mono: self._membership.heartbeat(request, mono),
            lambda exc: ErrorCode.none if isinstance(exc, CoordinatorLoadInProgressError) else exc.code,
        )
        self._finish(read_only=True)
        return HeartbeatResult(error)

    def leave_group(
        self, request: LeaveRequest, now_ms: int, *, mono_ms: int | None = None
    ) -> tuple[LeaveResult, list[OffsetsTopicWrite]]:
        """Handle LeaveGroup (batch form of v3+ included): per-member errors."""
        result = self._handle(request.group_id, now_ms, mono_ms,
                              lambda mono: self._membership.leave(request, mono),
                              lambda exc: LeaveResult(exc.code), fire_timers_after=True)
        return result, self._finish()

    def describe_groups(
        self, group_ids: Iterable[str], now_ms: int, *, mono_ms: int | None = None
    ) -> list[GroupDescription]:
        """Handle DescribeGroups; an unknown group is reported Dead with no error (Kafka)."""
        mono = self._rt.advance(now_ms, mono_ms)
        out = []
        for group_id in group_ids:
            self._membership.fire_timers(group_id, mono)
            out.append(self._membership.describe(group_id))
        self._finish(read_only=True)
        return out

    def list_groups(self, states_filter: Iterable[str] = (), types_filter: Iterable[str] = ()) -> ListGroupsResult:
        """Handle ListGroups (state filter of v4+, type filter of v5+, both case-insensitive)."""
        return self._membership.list_groups(states_filter, types_filter)

    def delete_groups(
        self, group_ids: Iterable[str], now_ms: int, *, mono_ms: int | None = None
    ) -> tuple[DeleteGroupsResult, list[OffsetsTopicWrite]]:
        """Handle DeleteGroups: only Empty groups can go (NON_EMPTY_GROUP otherwise); their
        offsets and metadata are tombstoned."""
        mono = self._rt.advance(now_ms, mono_ms)
        errors: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            self._membership.fire_timers(group_id, mono)
            errors[group_id] = self._membership.delete(group_id)
        return DeleteGroupsResult(errors), self._finish()

    # ==============================================================================================
    # Offset requests
    # ==============================================================================================

    def commit_offsets(
        self, request: OffsetCommitRequest, now_ms: int, *, mono_ms: int | None = None
    ) -> tuple[OffsetCommitResult, list[OffsetsTopicWrite]]:
        """Handle OffsetCommit. The broker appends the returned records, then replies."""
        errors = self._handle(request.group_id, now_ms, mono_ms,
                              lambda mono: self._offsets.commit(request, self._rt.wall_ms),
                              lambda exc: {tp: exc.code for tp in request.offsets})
        return OffsetCommitResult(errors), self._finish()

    def fetch_offsets(
        self, request: OffsetFetchRequest, now_ms: int, *, mono_ms: int | None = None
    ) -> OffsetFetchResult:
        """Handle OffsetFetch; with ``require_stable`` a partition that has a pending
        transactional commit answers UNSTABLE_OFFSET_COMMIT (the client retries)."""
        mono = self._rt.advance(now_ms, mono_ms)
        self._membership.fire_timers(request.group_id, mono)
        try:
            self._rt.validate_group_id(request.group_id, allow_empty=True)
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
        result = self._handle(request.group_id, now_ms, mono_ms, lambda mono: self._offsets.delete(request),
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
        errors = self._handle(
            group_id, now_ms, mono_ms,
            lambda mono: self._offsets.stage_pending(
                group_id, producer_id, offsets, self._rt.wall_ms, member_id, generation_id, group_instance_id),
            lambda exc: {tp: exc.code for tp in offsets},
        )
        return OffsetCommitResult(errors), self._finish()

    def complete_pending_txn_offsets(
        self, group_id: str, producer_id: int, commit: bool, now_ms: int, *, mono_ms: int | None = None
    ) -> list[OffsetsTopicWrite]:
        """The transaction of ``producer_id`` ended: on commit its staged offsets become the
        committed ones (unless a plain commit written after them is newer); on abort they are
        dropped. Returns the records that make this durable (empty if nothing was staged)."""
        mono = self._rt.advance(now_ms, mono_ms)
        self._membership.fire_timers(group_id, mono)
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
            self._membership.fire_timers(group_id, mono)
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
        rt.loading_partitions -= targets
        self._finish(read_only=True)

    def _record_partition(self, key_bytes: bytes) -> int:
        return self._rt.partition_for(decode_key(key_bytes).group_id)

    def replay(self, key_bytes: bytes, value_bytes: bytes | None) -> None:
        """Apply one __consumer_offsets record (in log order) to the manager that owns it."""
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
        rt.drop_deferred_writes({partition})
        rt.loading_partitions.add(partition)
        self._finish(read_only=True)

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
        self._membership.fire_timers(group_id, mono)
        try:
            result = body(mono)
        except (IllegalGroupStateTransitionError, CoordinatorInvariantError):
            raise
        except OnceStreamError as exc:
            result = on_error(exc)
        if fire_timers_after:
            self._membership.fire_timers(group_id, mono)
        return result

    def _finish(self, *, read_only: bool = False) -> list[OffsetsTopicWrite]:
        """Refresh the heap entries of the groups this call touched, then take the call's
        records and run its callbacks (see GroupRuntime.finish)."""
        rt = self._rt
        for group_id in rt.touched:
            group = rt.groups.get(group_id)
            deadline_ms = None
            if group is not None and not group.is_(_S.DEAD):
                deadline_ms = GroupMetadataManager.next_deadline_ms(group)
            rt.deadlines.schedule(group_id, deadline_ms)
        rt.touched.clear()
        return rt.finish(read_only=read_only)
