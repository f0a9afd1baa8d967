"""The classic group coordinator (Kafka's GroupCoordinator + GroupMetadataManager), sans-io.

How to drive it
---------------
* Time is passed in (``now_ms``) and must never go backwards. Timers (session, rebalance, initial
  delay, KIP-394 pending members, pending sync, offset expiry) fire inside :meth:`tick`, and also
  for the group a request touches, before and after the request is handled, so a request never
  sees a member that should already have expired. :meth:`next_deadline_ms` says when to tick.
* JoinGroup and SyncGroup answer through a ``respond`` callback, possibly during the call,
  possibly during a later call or tick. Callbacks are always invoked at the end of a call, after
  the coordinator's state is consistent, so a callback may call back into the coordinator.
* Every durable change comes back as a list of :class:`OffsetsTopicWrite` (records for one
  __consumer_offsets partition each). **Contract**: the broker appends the writes a call returned
  before it sends any response produced by that call (its return value or a ``respond`` callback
  invoked during it), and before it hands the coordinator another request. If an append fails,
  the broker calls :meth:`unload_partition` and later :meth:`load` from what the log really holds:
  the in-memory state is then exactly the durable state again.
* Errors: typed KafkaError exceptions inside; results carry the ErrorCode.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from oncestream.coordinator.group.config import GroupCoordinatorConfig
from oncestream.coordinator.group.consumer_protocol import CONSUMER_PROTOCOL_TYPE
from oncestream.coordinator.group.group import (
    CommittedOffset,
    GroupMetadata,
    JoinTimer,
    SyncTimer,
)
from oncestream.coordinator.group.member import (
    JoinCallback,
    MemberMetadata,
    SyncCallback,
)
from oncestream.coordinator.group.messages import (
    NO_MEMBER_ID,
    DeleteGroupsResult,
    DescribedMember,
    FetchedOffset,
    GroupDescription,
    HeartbeatRequest,
    HeartbeatResult,
    JoinRequest,
    JoinResult,
    LeaveRequest,
    LeaveResult,
    LeftMember,
    ListedGroup,
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
    TopicPartition,
)
from oncestream.coordinator.group.partitioning import partition_for
from oncestream.coordinator.group.records import (
    GroupMetadataKey,
    GroupSnapshot,
    OffsetCommitKey,
    PendingTxnOffsetKey,
    Record,
    decode_group_value,
    decode_key,
    decode_offset_value,
    group_metadata_record,
    offset_commit_record,
    pending_txn_offset_record,
)
from oncestream.coordinator.group.state import (
    GroupState,
    IllegalGroupStateTransitionError,
)
from oncestream.errors import (
    CoordinatorInvariantError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidGroupIdError,
    InvalidSessionTimeoutError,
    KafkaError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)

# JoinGroup v4+ (KIP-394): a dynamic member must first obtain its member id.
_MIN_VERSION_REQUIRING_KNOWN_MEMBER_ID = 4
# JoinGroup v9+ (KIP-814): a static leader replaced while Stable is told to skip the assignment.
_MIN_VERSION_SUPPORTING_SKIP_ASSIGNMENT = 9
_CLASSIC_GROUP_TYPE = "classic"

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
        self._groups: dict[str, GroupMetadata] = {}
        self._loading_partitions: set[int] = set()
        self._member_id_suffix = member_id_suffix or (lambda: str(uuid.uuid4()))
        # Responses to deliver at the end of the current call (see module docstring).
        self._outbox: list[tuple[Callable[[Any], None], Any]] = []
        # Records produced by the current call, with the group each belongs to.
        self._pending_writes: list[tuple[str, Record]] = []
        # Stand-in for record offsets in __consumer_offsets: grows with every record written.
        self._log_order = 0
        self._last_now_ms: int | None = None
        self._next_cleanup_ms: int | None = None

    # ==============================================================================================
    # Introspection
    # ==============================================================================================

    @property
    def now_ms(self) -> int | None:
        """The latest time the coordinator was given (None before the first call)."""
        return self._last_now_ms

    @property
    def num_partitions(self) -> int:
        """offsets.topic.num.partitions."""
        return self.config.offsets_topic_partitions

    def partition_for(self, group_id: str) -> int:
        """The __consumer_offsets partition of ``group_id`` (Kafka's mapping)."""
        return partition_for(group_id, self.num_partitions)

    def group_state(self, group_id: str) -> GroupState | None:
        """The group's state, or None if the coordinator does not know the group."""
        group = self._groups.get(group_id)
        return None if group is None else group.state

    def group_snapshot(self, group_id: str) -> GroupSnapshot | None:
        """The durable view of a group (what its metadata record would hold now)."""
        group = self._groups.get(group_id)
        return None if group is None else group.snapshot()

    def group_generation(self, group_id: str) -> int | None:
        """The group's generation id, or None if unknown."""
        group = self._groups.get(group_id)
        return None if group is None else group.generation_id

    def committed_offsets(self, group_id: str) -> dict[TopicPartition, OffsetAndMetadata]:
        """Every committed offset of the group (for tests and tools)."""
        group = self._groups.get(group_id)
        if group is None:
            return {}
        return {tp: c.value for tp, c in sorted(group.offsets.items())}

    def pending_txn_offsets(
        self, group_id: str
    ) -> dict[int, dict[TopicPartition, OffsetAndMetadata]]:
        """Offsets of open transactions per producer id (for tests and tools)."""
        group = self._groups.get(group_id)
        if group is None:
            return {}
        return {
            pid: {tp: c.value for tp, c in sorted(pending.items())}
            for pid, pending in sorted(group.pending_txn_offsets.items())
        }

    def group_ids(self) -> list[str]:
        """Ids of every group the coordinator holds."""
        return sorted(self._groups)

    def next_deadline_ms(self) -> int | None:
        """The earliest time at which :meth:`tick` has work to do (None: no timer armed)."""
        deadlines = [
            d for g in self._groups.values() if (d := self._group_next_deadline(g)) is not None
        ]
        if self._next_cleanup_ms is not None:
            deadlines.append(self._next_cleanup_ms)
        if self._pending_writes and self._last_now_ms is not None:
            # Records kept back by a read-only call: tick now to hand them out.
            deadlines.append(self._last_now_ms)
        return min(deadlines, default=None)

    # ==============================================================================================
    # JoinGroup
    # ==============================================================================================

    def join_group(
        self, request: JoinRequest, now_ms: int, respond: Callable[[JoinResult], None]
    ) -> list[OffsetsTopicWrite]:
        """Handle JoinGroup; ``respond`` is called once with the result, now or later."""
        self._handle(
            request.group_id, now_ms, lambda: self._join_group(request, now_ms, respond),
            lambda exc: self._deliver(respond, JoinResult(error=exc.code, member_id=request.member_id)),
            fire_timers_after=True,
        )
        return self._finish()

    def _join_group(self, request: JoinRequest, now_ms: int, respond: JoinCallback) -> None:
        self._validate_group_id(request.group_id, allow_empty=False)
        cfg = self.config
        if not (
            cfg.group_min_session_timeout_ms
            <= request.session_timeout_ms
            <= cfg.group_max_session_timeout_ms
        ):
            raise InvalidSessionTimeoutError(
                f"session timeout {request.session_timeout_ms} ms outside "
                f"[{cfg.group_min_session_timeout_ms}, {cfg.group_max_session_timeout_ms}]"
            )
        is_unknown_member = request.member_id == NO_MEMBER_ID
        group = self._groups.get(request.group_id)
        if group is None:
            if not is_unknown_member:
                raise UnknownMemberIdError(f"group {request.group_id!r} does not exist")
            group = GroupMetadata(request.group_id, now_ms)
            self._groups[request.group_id] = group

        if not self._accept_joining_member(group, request):
            # Kafka drops a known member that no longer fits (e.g. group.max.size was lowered).
            if group.has(request.member_id):
                self._remove_member(group, group.get(request.member_id))
            self._deliver(
                respond, JoinResult(ErrorCode.group_max_size_reached, member_id=NO_MEMBER_ID)
            )
        elif is_unknown_member:
            self._new_member_join(group, request, now_ms, respond)
        else:
            self._current_member_join(group, request, now_ms, respond)

        if group.is_(_S.PREPARING_REBALANCE):
            self._try_complete_join(group, now_ms)

    def _accept_joining_member(self, group: GroupMetadata, request: JoinRequest) -> bool:
        max_size = self.config.group_max_size
        if group.state in (_S.EMPTY, _S.DEAD):
            return True
        # A restarted static member takes over an existing slot: it does not grow the group.
        existing_id = request.member_id or group.current_static_member_id(
            request.group_instance_id
        )
        known = existing_id is not None and group.has(existing_id)
        if group.is_(_S.PREPARING_REBALANCE):
            # Counting members already awaiting lets the last rejoining members be refused when
            # the group is over the limit.
            if known and group.get(existing_id).is_awaiting_join:  # type: ignore[arg-type]
                return True
            return group.num_awaiting_join() < max_size
        return known or len(group.members) < max_size

    def _new_member_join(
        self, group: GroupMetadata, request: JoinRequest, now_ms: int, respond: JoinCallback
    ) -> None:
        if group.is_(_S.DEAD):
            raise CoordinatorNotAvailableError(f"group {group.group_id!r} is dead")
        names = tuple(p.name for p in request.protocols)
        if not group.supports_protocols(request.protocol_type, names):
            raise InconsistentGroupProtocolError(
                f"protocols {names} of type {request.protocol_type!r} do not fit group "
                f"{group.group_id!r} (type {group.protocol_type!r})"
            )
        new_member_id = self._new_member_id(group, request)

        if request.group_instance_id is not None:
            old_member_id = group.current_static_member_id(request.group_instance_id)
            if old_member_id is not None:
                self._update_static_member_and_rebalance(
                    group, old_member_id, new_member_id, request, now_ms, respond
                )
            else:
                self._add_member_and_rebalance(group, request, new_member_id, now_ms, respond)
        elif request.api_version >= _MIN_VERSION_REQUIRING_KNOWN_MEMBER_ID:
            # KIP-394: hand out the id and make the client come back with it, so a client that
            # times out mid-join does not leave a pile of anonymous members behind.
            group.add_pending_member(new_member_id, now_ms + request.session_timeout_ms)
            self._deliver(respond, JoinResult(ErrorCode.member_id_required, new_member_id))
        else:
            self._add_member_and_rebalance(group, request, new_member_id, now_ms, respond)

    def _new_member_id(self, group: GroupMetadata, request: JoinRequest) -> str:
        """``<instance id or client id>-<suffix>`` (Kafka's shape), unique within the group."""
        prefix = request.group_instance_id if request.group_instance_id else request.client_id
        for _ in range(100):
            member_id = f"{prefix}-{self._member_id_suffix()}"
            if not group.has(member_id) and not group.is_pending(member_id):
                return member_id
        raise CoordinatorInvariantError("member_id_suffix keeps producing ids already in use")

    def _current_member_join(
        self, group: GroupMetadata, request: JoinRequest, now_ms: int, respond: JoinCallback
    ) -> None:
        member_id = request.member_id
        instance_id = request.group_instance_id
        if group.is_(_S.DEAD):
            raise CoordinatorNotAvailableError(f"group {group.group_id!r} is dead")
        names = tuple(p.name for p in request.protocols)
        if not group.supports_protocols(request.protocol_type, names):
            raise InconsistentGroupProtocolError(
                f"protocols {names} of type {request.protocol_type!r} do not fit group "
                f"{group.group_id!r}"
            )
        if group.is_pending(member_id) and instance_id is None:
            # The second half of KIP-394: the member rejoins with the id it was given.
            self._add_member_and_rebalance(group, request, member_id, now_ms, respond)
            return
        self._validate_current_member(group, member_id, instance_id)
        member = group.get(member_id)
        if group.is_(_S.PREPARING_REBALANCE):
            self._update_member_and_rebalance(group, member, request, now_ms, respond)
        elif group.is_(_S.COMPLETING_REBALANCE):
            if member.matches(request.protocols):
                # The member probably lost our JoinGroup answer: repeat it.
                self._deliver(respond, self._join_success(group, member_id))
            else:
                self._update_member_and_rebalance(group, member, request, now_ms, respond)
        elif group.is_(_S.STABLE):
            if group.leader_id == member_id or not member.matches(request.protocols):
                # A leader's JoinGroup forces a rebalance: it is how a consumer reacts to topic
                # metadata changes that do not change its subscription bytes.
                self._update_member_and_rebalance(group, member, request, now_ms, respond)
            else:
                self._deliver(respond, self._join_success(group, member_id, include_members=False))
        else:
            # Empty or Dead with a known member id: let the member reset and rejoin.
            raise UnknownMemberIdError(f"group {group.group_id!r} is {group.state.value}")

    def _join_success(
        self, group: GroupMetadata, member_id: str, *, include_members: bool = True
    ) -> JoinResult:
        is_leader = group.leader_id == member_id
        return JoinResult(
            error=ErrorCode.none,
            member_id=member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader_id=group.leader_id or "",
            members=group.current_member_metadata() if (is_leader and include_members) else (),
        )

    def _add_member_and_rebalance(
        self,
        group: GroupMetadata,
        request: JoinRequest,
        member_id: str,
        now_ms: int,
        respond: JoinCallback,
    ) -> None:
        member = MemberMetadata(
            member_id=member_id,
            group_instance_id=request.group_instance_id,
            client_id=request.client_id,
            client_host=request.client_host,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            session_timeout_ms=request.session_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=tuple(request.protocols),
            is_new=True,
        )
        if group.is_(_S.PREPARING_REBALANCE) and group.generation_id == 0:
            # Lets the initial rebalance delay extend once more for this newcomer.
            group.new_member_added = True
        group.add(member, respond)
        # A new member cannot heartbeat before its JoinGroup answer; bound how long it may sit in
        # a rebalance (a client that gave up would otherwise stay forever).
        member.heartbeat_deadline_ms = now_ms + self.config.new_member_join_timeout_ms
        self._maybe_prepare_rebalance(group, now_ms)

    def _update_member_and_rebalance(
        self,
        group: GroupMetadata,
        member: MemberMetadata,
        request: JoinRequest,
        now_ms: int,
        respond: JoinCallback,
    ) -> None:
        superseded = group.update_member(
            member,
            request.protocols,
            request.rebalance_timeout_ms,
            request.session_timeout_ms,
            respond,
        )
        if superseded is not None:
            # Kafka silently drops a JoinGroup replaced by a newer one from the same member; we
            # answer it so no caller waits forever (the client retries on this error).
            self._deliver(
                superseded, JoinResult(ErrorCode.rebalance_in_progress, member.member_id)
            )
        self._maybe_prepare_rebalance(group, now_ms)

    def _update_static_member_and_rebalance(
        self,
        group: GroupMetadata,
        old_member_id: str,
        new_member_id: str,
        request: JoinRequest,
        now_ms: int,
        respond: JoinCallback,
    ) -> None:
        """KIP-345: a restarted static member takes over its instance id (and assignment)."""
        previous_leader_id = group.leader_id
        member = group.get(old_member_id)
        # Fence whatever the previous incarnation is still waiting for.
        self._invoke_join(member, JoinResult(ErrorCode.fenced_instance_id, old_member_id))
        self._invoke_sync(member, SyncResult(ErrorCode.fenced_instance_id))
        if request.group_instance_id is None:
            raise CoordinatorInvariantError('invariant violated: request.group_instance_id is not None')
        group.replace_static_member(request.group_instance_id, old_member_id, new_member_id)
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        superseded = group.update_member(
            member,
            request.protocols,
            request.rebalance_timeout_ms,
            request.session_timeout_ms,
            respond,
        )
        if superseded is not None:
            raise CoordinatorInvariantError('invariant violated: superseded is None')

        if group.is_(_S.STABLE):
            if group.protocol_name == group.select_protocol():
                # No rebalance: persist the new member id, hand back the current generation.
                self._write_group(group)
                is_leader = group.leader_id == new_member_id
                if request.api_version >= _MIN_VERSION_SUPPORTING_SKIP_ASSIGNMENT:
                    result = JoinResult(
                        error=ErrorCode.none,
                        member_id=new_member_id,
                        generation_id=group.generation_id,
                        protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name,
                        leader_id=group.leader_id or "",
                        members=group.current_member_metadata() if is_leader else (),
                        skip_assignment=is_leader,
                    )
                else:
                    # Before KIP-814 the old leader id is returned so a restarted leader does not
                    # believe it leads and compute an assignment a Stable group would ignore.
                    result = JoinResult(
                        error=ErrorCode.none,
                        member_id=new_member_id,
                        generation_id=group.generation_id,
                        protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name,
                        leader_id=previous_leader_id or "",
                    )
                self._invoke_join(member, result)
            else:
                self._maybe_prepare_rebalance(group, now_ms)
        elif group.is_(_S.COMPLETING_REBALANCE):
            # The leader may already be assigning to the old member id; start over.
            self._prepare_rebalance(group, now_ms)
        elif group.is_(_S.PREPARING_REBALANCE):
            pass  # the member simply waits for the join phase to finish
        else:
            raise CoordinatorInvariantError(
                f"group {group.group_id!r} has static members but is {group.state.value}"
            )

    # ==============================================================================================
    # Rebalance machinery
    # ==============================================================================================

    def _maybe_prepare_rebalance(self, group: GroupMetadata, now_ms: int) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, now_ms)

    def _prepare_rebalance(self, group: GroupMetadata, now_ms: int) -> None:
        if group.is_(_S.COMPLETING_REBALANCE):
            # Members waiting for an assignment of the abandoned generation must rejoin.
            self._reset_and_propagate_assignment_error(group, ErrorCode.rebalance_in_progress)
        group.pending_sync_members.clear()
        group.sync_timer = None
        if group.is_(_S.EMPTY):
            delay_ms = self.config.group_initial_rebalance_delay_ms
            timer = JoinTimer(
                deadline_ms=now_ms + delay_ms,
                initial=True,
                delay_ms=delay_ms,
                remaining_ms=max(group.rebalance_timeout_ms() - delay_ms, 0),
            )
        else:
            timer = JoinTimer(deadline_ms=now_ms + group.rebalance_timeout_ms(), initial=False)
        group.transition_to(_S.PREPARING_REBALANCE, now_ms)
        group.join_timer = timer
        self._try_complete_join(group, now_ms)

    def _try_complete_join(self, group: GroupMetadata, now_ms: int) -> None:
        """Complete the join phase early once every member rejoined (never in the initial delay)."""
        timer = group.join_timer
        if (
            group.is_(_S.PREPARING_REBALANCE)
            and timer is not None
            and not timer.initial
            and group.has_all_members_joined()
        ):
            group.join_timer = None
            self._complete_join(group, now_ms)

    def _on_join_timer(self, group: GroupMetadata, now_ms: int) -> None:
        timer = group.join_timer
        if timer is None:
            raise CoordinatorInvariantError('invariant violated: timer is not None')
        group.join_timer = None
        if timer.initial and group.new_member_added and timer.remaining_ms != 0:
            # Members are still arriving: wait one more delay, within the rebalance timeout.
            group.new_member_added = False
            delay_ms = min(self.config.group_initial_rebalance_delay_ms, timer.remaining_ms)
            group.join_timer = JoinTimer(
                deadline_ms=timer.deadline_ms + delay_ms,
                initial=True,
                delay_ms=delay_ms,
                remaining_ms=max(timer.remaining_ms - timer.delay_ms, 0),
            )
        else:
            self._complete_join(group, now_ms)

    def _complete_join(self, group: GroupMetadata, now_ms: int) -> None:
        """End of the join phase (Kafka's onCompleteJoin)."""
        if not group.is_(_S.PREPARING_REBALANCE):
            raise CoordinatorInvariantError(str(group.state))
        # Dynamic members that did not rejoin in time are gone; static ones are kept until their
        # session expires (KIP-345: a restart must not cost a rebalance).
        for member in group.not_yet_rejoined_members():
            if not member.is_static:
                self._remove_member(group, member)

        if not group.maybe_elect_new_joined_leader() and group.members:
            # Only silent static members remain: wait another rebalance timeout for them to
            # rejoin or for their sessions to expire.
            group.join_timer = JoinTimer(
                deadline_ms=now_ms + group.rebalance_timeout_ms(), initial=False
            )
            return

        group.new_member_added = False
        group.init_next_generation(now_ms)
        if group.is_(_S.EMPTY):
            self._write_group(group)
            return
        for member in group.members.values():
            self._invoke_join(member, self._join_success(group, member.member_id))
            member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        group.sync_timer = SyncTimer(
            deadline_ms=now_ms + group.rebalance_timeout_ms(),
            generation_id=group.generation_id,
        )

    def _on_sync_timer(self, group: GroupMetadata, now_ms: int) -> None:
        """Members that joined but never synced within the rebalance timeout are removed."""
        timer = group.sync_timer
        if timer is None:
            raise CoordinatorInvariantError('invariant violated: timer is not None')
        group.sync_timer = None
        if timer.generation_id != group.generation_id:
            return
        if group.state not in (_S.COMPLETING_REBALANCE, _S.STABLE):
            return
        if not group.pending_sync_members:
            return
        for member_id in sorted(group.pending_sync_members):
            self._remove_member(group, group.get(member_id))
        self._prepare_rebalance(group, now_ms)

    def _on_member_session_expired(
        self, group: GroupMetadata, member: MemberMetadata, now_ms: int
    ) -> None:
        member.heartbeat_deadline_ms = None
        if not member.keeps_session_on_expiry():
            self._remove_member_and_update_group(group, member, now_ms)

    def _on_pending_member_expired(self, group: GroupMetadata, member_id: str, now_ms: int) -> None:
        group.remove(member_id)
        if group.is_(_S.PREPARING_REBALANCE):
            self._try_complete_join(group, now_ms)

    def _remove_member_and_update_group(
        self, group: GroupMetadata, member: MemberMetadata, now_ms: int
    ) -> None:
        self._remove_member(group, member)
        if group.state in (_S.STABLE, _S.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, now_ms)
        elif group.is_(_S.PREPARING_REBALANCE):
            self._try_complete_join(group, now_ms)

    def _remove_member(self, group: GroupMetadata, member: MemberMetadata) -> None:
        """Remove a member, answering what it is still waiting for with UNKNOWN_MEMBER_ID."""
        self._invoke_join(member, JoinResult(ErrorCode.unknown_member_id, NO_MEMBER_ID))
        # Kafka leaves a removed member's SyncGroup unanswered; we answer it so nothing leaks.
        self._invoke_sync(member, SyncResult(ErrorCode.unknown_member_id))
        member.heartbeat_deadline_ms = None
        group.remove(member.member_id)

    def _reset_and_propagate_assignment_error(self, group: GroupMetadata, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
            self._invoke_sync(member, SyncResult(error))

    # ==============================================================================================
    # SyncGroup
    # ==============================================================================================

    def sync_group(
        self, request: SyncRequest, now_ms: int, respond: Callable[[SyncResult], None]
    ) -> list[OffsetsTopicWrite]:
        """Handle SyncGroup; ``respond`` is called once with the result, now or later."""

        def failed(exc: KafkaError) -> None:
            if isinstance(exc, CoordinatorLoadInProgressError):
                # The rebalance in flight was lost with the old state; REBALANCE_IN_PROGRESS
                # makes the client rejoin without rediscovering the coordinator (older clients
                # do not know COORDINATOR_LOAD_IN_PROGRESS here).
                self._deliver(respond, SyncResult(ErrorCode.rebalance_in_progress))
            else:
                self._deliver(respond, SyncResult(exc.code))

        self._handle(request.group_id, now_ms, lambda: self._sync_group(request, now_ms, respond), failed,
                     fire_timers_after=True)
        return self._finish()

    def _sync_group(self, request: SyncRequest, now_ms: int, respond: SyncCallback) -> None:
        self._validate_group_id(request.group_id, allow_empty=False)
        group = self._groups.get(request.group_id)
        if group is None:
            raise UnknownMemberIdError(f"group {request.group_id!r} does not exist")
        self._check_member_and_generation(
            group, request.member_id, request.group_instance_id, request.generation_id
        )
        if request.protocol_type is not None and request.protocol_type != group.protocol_type:
            raise InconsistentGroupProtocolError(
                f"protocol type {request.protocol_type!r} != {group.protocol_type!r}"
            )
        if request.protocol_name is not None and request.protocol_name != group.protocol_name:
            raise InconsistentGroupProtocolError(
                f"protocol {request.protocol_name!r} != {group.protocol_name!r}"
            )

        member = group.get(request.member_id)
        if group.is_(_S.EMPTY):
            raise UnknownMemberIdError(f"group {group.group_id!r} is Empty")
        if group.is_(_S.PREPARING_REBALANCE):
            raise RebalanceInProgressError(f"group {group.group_id!r} is rebalancing")
        if group.is_(_S.COMPLETING_REBALANCE):
            if member.sync_callback is not None:
                # Same reasoning as for JoinGroup: answer the older request instead of dropping it.
                self._invoke_sync(member, SyncResult(ErrorCode.rebalance_in_progress))
            member.sync_callback = respond
            self._remove_pending_sync_member(group, member.member_id)
            if group.leader_id == member.member_id:
                self._apply_leader_assignment(group, request.assignments, now_ms)
            return
        if group.is_(_S.STABLE):
            self._remove_pending_sync_member(group, member.member_id)
            self._deliver(
                respond,
                SyncResult(
                    ErrorCode.none, member.assignment, group.protocol_type, group.protocol_name
                ),
            )
            member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
            return
        raise CoordinatorInvariantError(f"unexpected state {group.state.value} in SyncGroup")

    def _apply_leader_assignment(
        self, group: GroupMetadata, assignments: Mapping[str, bytes], now_ms: int
    ) -> None:
        # Members the leader left out get an empty assignment; ids that are not members are
        # ignored (the leader may have computed them for a member that has since left).
        for member_id, member in group.members.items():
            member.assignment = bytes(assignments.get(member_id, b""))
        # Stable first so the stored state timestamp is the one a reload should restore; the
        # record still reaches the log before any member hears of the assignment.
        group.transition_to(_S.STABLE, now_ms)
        self._write_group(group)
        for member in group.members.values():
            result = SyncResult(
                ErrorCode.none, member.assignment, group.protocol_type, group.protocol_name
            )
            if self._invoke_sync(member, result):
                # A session may have lapsed while the member waited for the leader; restart it.
                member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms

    def _remove_pending_sync_member(self, group: GroupMetadata, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members:
            group.sync_timer = None

    def _check_member_and_generation(
        self,
        group: GroupMetadata,
        member_id: str,
        instance_id: str | None,
        generation_id: int,
    ) -> None:
        """The checks SyncGroup and Heartbeat share, in Kafka's order."""
        if group.is_(_S.DEAD):
            raise CoordinatorNotAvailableError(f"group {group.group_id!r} is dead")
        self._validate_current_member(group, member_id, instance_id)
        if generation_id != group.generation_id:
            raise IllegalGenerationError(
                f"generation {generation_id} != {group.generation_id} of {group.group_id!r}"
            )

    @staticmethod
    def _validate_current_member(group: GroupMetadata, member_id: str, instance_id: str | None) -> None:
        """Kafka's validateCurrentMember: an instance id must be owned, and by this member id;
        the member id must be in the group."""
        if group.is_static_member_fenced(instance_id, member_id):
            raise FencedInstanceIdError(
                f"instance {instance_id!r} is owned by another member than {member_id!r}"
            )
        if instance_id is not None and group.current_static_member_id(instance_id) is None:
            # An instance id nobody owns is not trusted, even when the member id is a live
            # (dynamic) member.
            raise UnknownMemberIdError(f"instance {instance_id!r} is not in {group.group_id!r}")
        if not group.has(member_id):
            raise UnknownMemberIdError(f"{member_id!r} is not a member of {group.group_id!r}")

    # ==============================================================================================
    # Heartbeat / LeaveGroup
    # ==============================================================================================

    def heartbeat(self, request: HeartbeatRequest, now_ms: int) -> HeartbeatResult:
        """Handle Heartbeat: resets the member's session timer; REBALANCE_IN_PROGRESS tells the
        member to rejoin. Returns no records (heartbeats are not persisted)."""
        # While a state is loading nothing is known about it: answer blindly like Kafka so
        # members stay put.
        error = self._handle(
            request.group_id, now_ms, lambda: self._heartbeat(request, now_ms),
            lambda exc: ErrorCode.none if isinstance(exc, CoordinatorLoadInProgressError) else exc.code,
        )
        self._finish(read_only=True)
        return HeartbeatResult(error)

    def _heartbeat(self, request: HeartbeatRequest, now_ms: int) -> ErrorCode:
        self._validate_group_id(request.group_id, allow_empty=False)
        group = self._groups.get(request.group_id)
        if group is None:
            raise UnknownMemberIdError(f"group {request.group_id!r} does not exist")
        self._check_member_and_generation(
            group, request.member_id, request.group_instance_id, request.generation_id
        )
        member = group.get(request.member_id)
        if group.is_(_S.EMPTY):
            raise UnknownMemberIdError(f"group {group.group_id!r} is Empty")
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        if group.is_(_S.PREPARING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        if group.state not in (_S.STABLE, _S.COMPLETING_REBALANCE):
            raise CoordinatorInvariantError(str(group.state))
        return ErrorCode.none

    def leave_group(
        self, request: LeaveRequest, now_ms: int
    ) -> tuple[LeaveResult, list[OffsetsTopicWrite]]:
        """Handle LeaveGroup (batch form of v3+ included): per-member errors."""
        result = self._handle(request.group_id, now_ms, lambda: self._leave_group(request, now_ms),
                              lambda exc: LeaveResult(exc.code), fire_timers_after=True)
        return result, self._finish()

    def _leave_group(self, request: LeaveRequest, now_ms: int) -> LeaveResult:
        self._validate_group_id(request.group_id, allow_empty=False)
        group = self._groups.get(request.group_id)
        if group is None:
            return LeaveResult(
                ErrorCode.none,
                tuple(
                    LeftMember(m.member_id, m.group_instance_id, ErrorCode.unknown_member_id)
                    for m in request.members
                ),
            )
        if group.is_(_S.DEAD):
            return LeaveResult(ErrorCode.coordinator_not_available)
        outcomes = []
        for leaving in request.members:
            error = self._leave_one(group, leaving.member_id, leaving.group_instance_id, now_ms)
            outcomes.append(LeftMember(leaving.member_id, leaving.group_instance_id, error))
        return LeaveResult(ErrorCode.none, tuple(outcomes))

    def _leave_one(
        self, group: GroupMetadata, member_id: str, instance_id: str | None, now_ms: int
    ) -> ErrorCode:
        if member_id == NO_MEMBER_ID:
            # KIP-345 admin removal of a static member by its instance id alone.
            current = group.current_static_member_id(instance_id)
            if current is None:
                return ErrorCode.unknown_member_id
            self._remove_member_and_update_group(group, group.get(current), now_ms)
            return ErrorCode.none
        if group.is_pending(member_id):
            self._on_pending_member_expired(group, member_id, now_ms)
            return ErrorCode.none
        if group.is_static_member_fenced(instance_id, member_id):
            return ErrorCode.fenced_instance_id
        if group.has(member_id):
            self._remove_member_and_update_group(group, group.get(member_id), now_ms)
            return ErrorCode.none
        return ErrorCode.unknown_member_id

    # ==============================================================================================
    # Offsets
    # ==============================================================================================

    def commit_offsets(
        self, request: OffsetCommitRequest, now_ms: int
    ) -> tuple[OffsetCommitResult, list[OffsetsTopicWrite]]:
        """Handle OffsetCommit. The broker appends the returned records, then replies."""
        errors = self._handle(request.group_id, now_ms, lambda: self._commit_offsets(request, now_ms),
                              lambda exc: {tp: exc.code for tp in request.offsets})
        return OffsetCommitResult(errors), self._finish()

    def _commit_offsets(
        self, request: OffsetCommitRequest, now_ms: int
    ) -> dict[TopicPartition, ErrorCode]:
        self._validate_group_id(request.group_id, allow_empty=True)
        group = self._groups.get(request.group_id)
        if group is None:
            if request.generation_id >= 0:
                # A commit from a generation of a group we do not know.
                raise IllegalGenerationError(f"group {request.group_id!r} does not exist")
            # Not using group management ("simple" consumer): offsets only.
            group = GroupMetadata(request.group_id, now_ms)
            self._groups[request.group_id] = group
        self._validate_offset_commit(
            group,
            request.generation_id,
            request.member_id,
            request.group_instance_id,
            transactional=False,
        )
        if group.state in (_S.STABLE, _S.PREPARING_REBALANCE):
            # Committing during PreparingRebalance is allowed: the heartbeat tells the member to
            # rejoin; the commit counts as a sign of life.
            member = group.get(request.member_id)
            member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        elif group.is_(_S.COMPLETING_REBALANCE):
            # Valid member and generation but no assignment yet: it must finish the rebalance.
            raise RebalanceInProgressError(f"group {group.group_id!r} awaits its assignment")
        else:
            if not group.is_(_S.EMPTY):
                raise CoordinatorInvariantError(str(group.state))

        errors: dict[TopicPartition, ErrorCode] = {}
        for tp, partition in request.offsets.items():
            value = self._offset_value(partition, request.retention_time_ms, now_ms)
            if value is None:
                errors[tp] = ErrorCode.offset_metadata_too_large
                continue
            group.offsets[tp] = CommittedOffset(value, self._next_log_order())
            self._emit(group.group_id, offset_commit_record(group.group_id, tp, value))
            errors[tp] = ErrorCode.none
        return errors

    def _offset_value(
        self, partition: PartitionOffsetCommit, retention_time_ms: int, now_ms: int
    ) -> OffsetAndMetadata | None:
        """The value to store, or None if the metadata is too large."""
        if len(partition.metadata.encode("utf-8")) > self.config.offset_metadata_max_bytes:
            return None
        commit_ts = partition.commit_timestamp_ms
        if commit_ts is None:
            commit_ts = now_ms
        if retention_time_ms != -1:
            # OffsetCommit v2-v4 (the only versions with a retention) carry no leader epoch.
            return OffsetAndMetadata(
                partition.offset, -1, partition.metadata, commit_ts, now_ms + retention_time_ms
            )
        return OffsetAndMetadata(
            partition.offset, partition.leader_epoch, partition.metadata, commit_ts, None
        )

    def _validate_offset_commit(
        self,
        group: GroupMetadata,
        generation_id: int,
        member_id: str,
        instance_id: str | None,
        *,
        transactional: bool,
    ) -> None:
        if group.is_(_S.DEAD):
            raise CoordinatorNotAvailableError(f"group {group.group_id!r} is dead")
        if generation_id >= 0 or member_id != NO_MEMBER_ID or instance_id is not None:
            self._validate_current_member(group, member_id, instance_id)
            if generation_id != group.generation_id:
                raise IllegalGenerationError(
                    f"generation {generation_id} != {group.generation_id} of {group.group_id!r}"
                )
        elif not transactional and not group.is_(_S.EMPTY):
            # Only members may commit to a group that has members.
            raise UnknownMemberIdError(f"group {group.group_id!r} has members; commit as one")

    def fetch_offsets(self, request: OffsetFetchRequest, now_ms: int) -> OffsetFetchResult:
        """Handle OffsetFetch; with ``require_stable`` a partition that has a pending
        transactional commit answers UNSTABLE_OFFSET_COMMIT (the client retries)."""
        self._advance_clock(now_ms)
        self._fire_group_timers(request.group_id, now_ms)
        try:
            self._validate_group_id(request.group_id, allow_empty=True)
        except KafkaError as exc:
            self._finish(read_only=True)
            return OffsetFetchResult(exc.code)
        self._finish(read_only=True)
        group = self._groups.get(request.group_id)
        if group is None or group.is_(_S.DEAD):
            return OffsetFetchResult(
                ErrorCode.none, {tp: FetchedOffset() for tp in request.partitions or ()}
            )
        partitions = (
            request.partitions if request.partitions is not None else tuple(sorted(group.offsets))
        )
        out: dict[TopicPartition, FetchedOffset] = {}
        for tp in partitions:
            if request.require_stable and group.has_pending_txn_offset(tp):
                out[tp] = FetchedOffset(error=ErrorCode.unstable_offset_commit)
                continue
            committed = group.offsets.get(tp)
            if committed is None:
                out[tp] = FetchedOffset()
            else:
                value = committed.value
                out[tp] = FetchedOffset(value.offset, value.leader_epoch, value.metadata)
        return OffsetFetchResult(ErrorCode.none, out)

    def delete_offsets(
        self, request: OffsetDeleteRequest, now_ms: int
    ) -> tuple[OffsetDeleteResult, list[OffsetsTopicWrite]]:
        """Handle OffsetDelete. A consumer group still subscribed to a topic keeps its offsets
        (GROUP_SUBSCRIBED_TO_TOPIC), decided from the members' consumer subscriptions."""
        result = self._handle(request.group_id, now_ms, lambda: self._delete_offsets(request),
                              lambda exc: OffsetDeleteResult(exc.code))
        return result, self._finish()

    def _delete_offsets(self, request: OffsetDeleteRequest) -> OffsetDeleteResult:
        self._validate_group_id(request.group_id, allow_empty=False)
        group = self._groups.get(request.group_id)
        if group is None or group.is_(_S.DEAD):
            return OffsetDeleteResult(ErrorCode.group_id_not_found)
        errors: dict[TopicPartition, ErrorCode] = {}
        if group.is_(_S.EMPTY):
            eligible = list(request.partitions)
        elif group.protocol_type == CONSUMER_PROTOCOL_TYPE:
            eligible = []
            for tp in request.partitions:
                if group.is_subscribed_to_topic(tp.topic):
                    errors[tp] = ErrorCode.group_subscribed_to_topic
                else:
                    eligible.append(tp)
        else:
            return OffsetDeleteResult(ErrorCode.non_empty_group)
        if eligible:
            self._remove_offsets_and_maybe_group(group, eligible)
            for tp in eligible:
                errors[tp] = ErrorCode.none
        return OffsetDeleteResult(ErrorCode.none, errors)

    def _remove_offsets_and_maybe_group(
        self, group: GroupMetadata, partitions: list[TopicPartition] | None
    ) -> None:
        """Tombstone offsets (all if ``partitions`` is None); an Empty group left without
        offsets dies (Kafka's cleanupGroupMetadata)."""
        if partitions is None:
            removed, removed_pending = group.remove_all_offsets()
        else:
            removed, removed_pending = group.remove_offsets(partitions)
        gid = group.group_id
        for tp in removed:
            self._emit(gid, offset_commit_record(gid, tp, None))
        for producer_id, tp in removed_pending:
            self._emit(gid, pending_txn_offset_record(gid, producer_id, tp, None))
        if group.state in (_S.EMPTY, _S.DEAD) and not group.has_offsets():
            self._kill_group(group)

    def _kill_group(self, group: GroupMetadata) -> None:
        """Mark the group Dead, forget it and tombstone its metadata."""
        if group.members:
            raise CoordinatorInvariantError("only a group without members can die")
        group.join_timer = None
        group.sync_timer = None
        group.transition_to(_S.DEAD, self._last_now_ms or 0)
        del self._groups[group.group_id]
        # Metadata records exist only once a generation was formed (Kafka skips the tombstone
        # for offset-only groups too).
        if group.generation_id > 0:
            self._emit(group.group_id, group_metadata_record(group.group_id, None))

    # ==============================================================================================
    # Transactions (KIP-98 offsets; RequireStable of KIP-447)
    # ==============================================================================================

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
    ) -> tuple[OffsetCommitResult, list[OffsetsTopicWrite]]:
        """TxnOffsetCommit: stage offsets of an open transaction of ``producer_id``.

        They are invisible to OffsetFetch (which answers UNSTABLE_OFFSET_COMMIT for them when
        RequireStable is set) until :meth:`complete_pending_txn_offsets`. The returned records make
        the staged offsets durable; a reload brings them back as still pending. Member/generation
        are checked like Kafka does for TxnOffsetCommit v3+ (KIP-447), skipped when not given.
        """
        errors = self._handle(
            group_id, now_ms,
            lambda: self._add_pending_txn_offsets(
                group_id, producer_id, offsets, now_ms, member_id, generation_id, group_instance_id),
            lambda exc: {tp: exc.code for tp in offsets},
        )
        return OffsetCommitResult(errors), self._finish()

    def _add_pending_txn_offsets(
        self,
        group_id: str,
        producer_id: int,
        offsets: Mapping[TopicPartition, PartitionOffsetCommit],
        now_ms: int,
        member_id: str,
        generation_id: int,
        instance_id: str | None,
    ) -> dict[TopicPartition, ErrorCode]:
        self._validate_group_id(group_id, allow_empty=True)
        if producer_id < 0:
            raise CoordinatorInvariantError("transactional producers have an id")
        group = self._groups.get(group_id)
        if group is None:
            group = GroupMetadata(group_id, now_ms)
            self._groups[group_id] = group
        self._validate_offset_commit(
            group, generation_id, member_id, instance_id, transactional=True
        )
        errors: dict[TopicPartition, ErrorCode] = {}
        pending = group.pending_txn_offsets.setdefault(producer_id, {})
        for tp, partition in offsets.items():
            value = self._offset_value(partition, -1, now_ms)
            if value is None:
                errors[tp] = ErrorCode.offset_metadata_too_large
                continue
            pending[tp] = CommittedOffset(value, self._next_log_order())
            self._emit(group_id, pending_txn_offset_record(group_id, producer_id, tp, value))
            errors[tp] = ErrorCode.none
        if not pending:
            del group.pending_txn_offsets[producer_id]
        return errors

    def complete_pending_txn_offsets(
        self, group_id: str, producer_id: int, commit: bool, now_ms: int
    ) -> list[OffsetsTopicWrite]:
        """The transaction of ``producer_id`` ended: on commit its staged offsets become the
        committed ones (unless a plain commit written after them is newer); on abort they are
        dropped. Returns the records that make this durable (empty if nothing was staged)."""
        self._advance_clock(now_ms)
        self._fire_group_timers(group_id, now_ms)
        group = self._groups.get(group_id)
        if group is not None:
            pending = group.pending_txn_offsets.pop(producer_id, {})
            for tp, staged in sorted(pending.items()):
                self._emit(group_id, pending_txn_offset_record(group_id, producer_id, tp, None))
                if not commit:
                    continue
                current = group.offsets.get(tp)
                # As in Kafka, offsets compete by where they were *written*: a plain commit
                # appended after this staged offset wins, and the materialized offset keeps its
                # staging position. (After a reload it takes the position of the committed
                # record written here instead; that only matters if two transactions staged the
                # same partition concurrently, which KIP-447 fencing rules out for live owners.)
                if current is None or current.log_order < staged.log_order:
                    group.offsets[tp] = staged
                    self._emit(group_id, offset_commit_record(group_id, tp, staged.value))
        return self._finish()

    # ==============================================================================================
    # DescribeGroups / ListGroups / DeleteGroups
    # ==============================================================================================

    def describe_groups(self, group_ids: Iterable[str], now_ms: int) -> list[GroupDescription]:
        """Handle DescribeGroups; an unknown group is reported Dead with no error (Kafka)."""
        self._advance_clock(now_ms)
        out = []
        for group_id in group_ids:
            self._fire_group_timers(group_id, now_ms)
            try:
                self._validate_group_id(group_id, allow_empty=True)
            except KafkaError as exc:
                out.append(GroupDescription(group_id, exc.code, "", "", ""))
                continue
            group = self._groups.get(group_id)
            if group is None:
                out.append(GroupDescription(group_id, ErrorCode.none, _S.DEAD.value, "", ""))
                continue
            stable = group.is_(_S.STABLE)
            name = group.protocol_name if stable else None
            members = tuple(
                DescribedMember(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    metadata=m.metadata_for(name) if name is not None else b"",
                    assignment=m.assignment if stable else b"",
                )
                for m in group.members.values()
            )
            out.append(
                GroupDescription(
                    group_id=group_id,
                    error=ErrorCode.none,
                    state=group.state.value,
                    protocol_type=group.protocol_type or "",
                    protocol_name=name or "",
                    members=members,
                )
            )
        self._finish(read_only=True)
        return out

    def list_groups(
        self,
        states_filter: Iterable[str] = (),
        types_filter: Iterable[str] = (),
    ) -> ListGroupsResult:
        """Handle ListGroups (state filter of v4+, type filter of v5+, both case-insensitive)."""
        states = {s.lower() for s in states_filter}
        types = {t.lower() for t in types_filter}
        error = ErrorCode.none
        if self._loading_partitions:
            error = ErrorCode.coordinator_load_in_progress
        if types and _CLASSIC_GROUP_TYPE not in types:
            return ListGroupsResult(error)
        # Unknown state names simply match nothing, as in Kafka.
        listed = tuple(
            ListedGroup(g.group_id, g.protocol_type or "", g.state.value)
            for _, g in sorted(self._groups.items())
            if not states or g.state.value.lower() in states
        )
        return ListGroupsResult(error, listed)

    def delete_groups(
        self, group_ids: Iterable[str], now_ms: int
    ) -> tuple[DeleteGroupsResult, list[OffsetsTopicWrite]]:
        """Handle DeleteGroups: only Empty groups can go (NON_EMPTY_GROUP otherwise); their
        offsets and metadata are tombstoned."""
        self._advance_clock(now_ms)
        errors: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            self._fire_group_timers(group_id, now_ms)
            try:
                self._validate_group_id(group_id, allow_empty=True)
            except KafkaError as exc:
                errors[group_id] = exc.code
                continue
            group = self._groups.get(group_id)
            if group is None or group.is_(_S.DEAD):
                errors[group_id] = ErrorCode.group_id_not_found
            elif group.is_(_S.EMPTY):
                group.transition_to(_S.DEAD, now_ms)
                self._remove_offsets_and_maybe_group(group, None)
                errors[group_id] = ErrorCode.none
            else:
                errors[group_id] = ErrorCode.non_empty_group
        return DeleteGroupsResult(errors), self._finish()

    # ==============================================================================================
    # Timers
    # ==============================================================================================

    def tick(self, now_ms: int) -> list[OffsetsTopicWrite]:
        """Fire every timer due at ``now_ms``; returns the records to persist."""
        self._advance_clock(now_ms)
        for group_id in list(self._groups):
            self._fire_group_timers(group_id, now_ms)
        if self._next_cleanup_ms is None:
            self._next_cleanup_ms = now_ms + self.config.offsets_retention_check_interval_ms
        elif now_ms >= self._next_cleanup_ms:
            self._cleanup_group_metadata(now_ms)
            self._next_cleanup_ms = now_ms + self.config.offsets_retention_check_interval_ms
        return self._finish()

    def _cleanup_group_metadata(self, now_ms: int) -> None:
        """Offset expiry and removal of Empty groups without offsets (Kafka's cleanup task)."""
        for group in list(self._groups.values()):
            expired = group.remove_expired_offsets(now_ms, self.config.offsets_retention_ms)
            for tp in expired:
                self._emit(group.group_id, offset_commit_record(group.group_id, tp, None))
            if group.is_(_S.EMPTY) and not group.has_offsets():
                self._kill_group(group)

    @staticmethod
    def _group_next_deadline(group: GroupMetadata) -> int | None:
        deadlines = list(group.pending_members.values())
        deadlines.extend(
            m.heartbeat_deadline_ms
            for m in group.members.values()
            if m.heartbeat_deadline_ms is not None
        )
        if group.join_timer is not None:
            deadlines.append(group.join_timer.deadline_ms)
        if group.sync_timer is not None:
            deadlines.append(group.sync_timer.deadline_ms)
        return min(deadlines, default=None)

    def _fire_group_timers(self, group_id: str, now_ms: int) -> None:
        """Fire the group's due timers, earliest first, until none is due.

        At equal deadlines member expiries go first, so a join phase completing at the same
        instant already sees them gone.
        """
        # Each firing clears or moves its timer forward, so the loop ends; the bound is a guard.
        for _ in range(100_000):
            group = self._groups.get(group_id)
            if group is None or group.is_(_S.DEAD):
                return
            due: list[tuple[int, int, str, Any]] = []
            due.extend(
                (d, 0, "pending", mid) for mid, d in group.pending_members.items() if d <= now_ms
            )
            due.extend(
                (m.heartbeat_deadline_ms, 1, "session", m)
                for m in group.members.values()
                if m.heartbeat_deadline_ms is not None and m.heartbeat_deadline_ms <= now_ms
            )
            if group.sync_timer is not None and group.sync_timer.deadline_ms <= now_ms:
                due.append((group.sync_timer.deadline_ms, 2, "sync", None))
            if group.join_timer is not None and group.join_timer.deadline_ms <= now_ms:
                due.append((group.join_timer.deadline_ms, 3, "join", None))
            if not due:
                return
            _, _, kind, what = min(due, key=lambda item: (item[0], item[1]))
            if kind == "pending":
                self._on_pending_member_expired(group, what, now_ms)
            elif kind == "session":
                self._on_member_session_expired(group, what, now_ms)
            elif kind == "sync":
                self._on_sync_timer(group, now_ms)
            else:
                self._on_join_timer(group, now_ms)
        raise CoordinatorInvariantError(f"timers of group {group_id!r} keep firing at {now_ms}")

    # ==============================================================================================
    # Loading / unloading (__consumer_offsets replay)
    # ==============================================================================================

    def load(
        self,
        records: Iterable[tuple[bytes, bytes | None]],
        now_ms: int,
        partitions: Iterable[int] | None = None,
    ) -> None:
        """Rebuild groups and offsets from __consumer_offsets records in log order.

        The latest value per key wins and a tombstone deletes. ``partitions`` limits the load to
        those __consumer_offsets partitions (default: all); their current in-memory state is
        dropped first and records of other partitions are ignored. Members of loaded groups get
        a fresh session (``now_ms`` + session timeout), as in Kafka.
        """
        self._advance_clock(now_ms)
        targets = set(range(self.num_partitions)) if partitions is None else set(partitions)
        for group_id in [g for g in self._groups if self.partition_for(g) in targets]:
            self._unload_group(self._groups[group_id])
        self._drop_deferred_writes(targets)

        snapshots: dict[str, GroupSnapshot | None] = {}
        offsets: dict[tuple[str, TopicPartition], tuple[OffsetAndMetadata | None, int]] = {}
        pending: dict[
            tuple[str, int, TopicPartition], tuple[OffsetAndMetadata | None, int]
        ] = {}
        for key_bytes, value_bytes in records:
            key = decode_key(key_bytes)
            if self.partition_for(key.group_id) not in targets:
                continue
            order = self._next_log_order()
            if isinstance(key, GroupMetadataKey):
                snapshots[key.group_id] = (
                    None if value_bytes is None else decode_group_value(value_bytes)
                )
            elif isinstance(key, OffsetCommitKey):
                value = None if value_bytes is None else decode_offset_value(value_bytes)
                offsets[(key.group_id, key.topic_partition)] = (value, order)
            else:
                if not isinstance(key, PendingTxnOffsetKey):
                    raise CoordinatorInvariantError('invariant violated: isinstance(key, PendingTxnOffsetKey)')
                value = None if value_bytes is None else decode_offset_value(value_bytes)
                pending[(key.group_id, key.producer_id, key.topic_partition)] = (value, order)

        def group_for(group_id: str) -> GroupMetadata:
            group = self._groups.get(group_id)
            if group is None:
                # Offsets without (live) metadata: an offset-only group, as Kafka loads it.
                group = GroupMetadata(group_id, now_ms)
                self._groups[group_id] = group
            return group

        for group_id, snapshot in snapshots.items():
            if snapshot is not None:
                self._groups[group_id] = GroupMetadata.from_snapshot(group_id, snapshot, now_ms)
        for (group_id, tp), (value, order) in offsets.items():
            if value is not None:
                group_for(group_id).offsets[tp] = CommittedOffset(value, order)
        for (group_id, producer_id, tp), (value, order) in pending.items():
            if value is not None:
                staged = group_for(group_id).pending_txn_offsets.setdefault(producer_id, {})
                staged[tp] = CommittedOffset(value, order)
        self._loading_partitions -= targets
        self._finish(read_only=True)

    def unload_partition(self, partition: int) -> None:
        """Forget the groups of ``partition`` (e.g. after a failed append) and treat it as
        loading: their requests get COORDINATOR_LOAD_IN_PROGRESS until :meth:`load` is called for
        it. Waiting JoinGroup/SyncGroup requests are answered NOT_COORDINATOR."""
        if not (0 <= partition < self.num_partitions):
            raise CoordinatorInvariantError('invariant violated: 0 <= partition < self.num_partitions')
        for group_id in [g for g in self._groups if self.partition_for(g) == partition]:
            self._unload_group(self._groups[group_id])
        self._drop_deferred_writes({partition})
        self._loading_partitions.add(partition)
        self._finish(read_only=True)

    def _unload_group(self, group: GroupMetadata) -> None:
        for member in group.members.values():
            self._invoke_join(member, JoinResult(ErrorCode.not_coordinator, member.member_id))
            self._invoke_sync(member, SyncResult(ErrorCode.not_coordinator))
        group.transition_to(_S.DEAD, self._last_now_ms or 0)
        del self._groups[group.group_id]

    # ==============================================================================================
    # Plumbing
    # ==============================================================================================

    def _validate_group_id(self, group_id: str, *, allow_empty: bool) -> None:
        """Kafka's validateGroupStatus: group id shape, then whether its partition is loaded.

        OffsetCommit/OffsetFetch/DescribeGroups/DeleteGroups accept "" for compatibility.
        """
        if group_id is None or (not allow_empty and group_id == ""):
            raise InvalidGroupIdError(f"invalid group id {group_id!r}")
        if self.partition_for(group_id) in self._loading_partitions:
            raise CoordinatorLoadInProgressError(f"partition of {group_id!r} is loading")

    def _advance_clock(self, now_ms: int) -> None:
        if not (self._last_now_ms is None or now_ms >= self._last_now_ms):
            raise CoordinatorInvariantError(f"time went backwards: {now_ms} < {self._last_now_ms}")
        self._last_now_ms = now_ms

    def _next_log_order(self) -> int:
        self._log_order += 1
        return self._log_order

    def _emit(self, group_id: str, record: Record) -> None:
        self._pending_writes.append((group_id, record))

    def _write_group(self, group: GroupMetadata) -> None:
        self._emit(group.group_id, group_metadata_record(group.group_id, group.snapshot()))

    def _handle(
        self,
        group_id: str,
        now_ms: int,
        body: Callable[[], _R],
        on_error: Callable[[KafkaError], _R],
        *,
        fire_timers_after: bool = False,
    ) -> _R:
        """The frame of every request on one group: time moves on, the group's due timers fire,
        then ``body`` runs; a Kafka error becomes ``on_error``'s answer. An illegal state
        transition or a broken invariant is a bug, never an answer, so it propagates. Join, sync and leave fire the
        group's timers again afterwards: their own change can make one due at once."""
        self._advance_clock(now_ms)
        self._fire_group_timers(group_id, now_ms)
        try:
            result = body()
        except (IllegalGroupStateTransitionError, CoordinatorInvariantError):
            raise
        except KafkaError as exc:
            result = on_error(exc)
        if fire_timers_after:
            self._fire_group_timers(group_id, now_ms)
        return result

    def _deliver(self, callback: Callable[[Any], None], result: Any) -> None:
        self._outbox.append((callback, result))

    def _invoke_join(self, member: MemberMetadata, result: JoinResult) -> bool:
        callback = member.join_callback
        if callback is None:
            return False
        member.join_callback = None
        self._deliver(callback, result)
        return True

    def _invoke_sync(self, member: MemberMetadata, result: SyncResult) -> bool:
        callback = member.sync_callback
        if callback is None:
            return False
        member.sync_callback = None
        self._deliver(callback, result)
        return True

    def _drop_deferred_writes(self, partitions: set[int]) -> None:
        # Records of unloaded partitions describe state that is gone; the log is the truth now.
        self._pending_writes = [
            (g, r) for g, r in self._pending_writes if self.partition_for(g) not in partitions
        ]

    def _finish(self, *, read_only: bool = False) -> list[OffsetsTopicWrite]:
        """Take this call's records (grouped per partition, order kept), then run callbacks.

        Read-only calls (Heartbeat, OffsetFetch, DescribeGroups) can fire a group's timers, and a
        join phase ending Empty writes a metadata record. Those calls keep such records for the
        next writing call or tick: they acknowledge nothing (Kafka, too, only warns if that
        write fails), so nothing is promised before they are durable.
        """
        writes: list[OffsetsTopicWrite] = []
        if read_only:
            self._run_callbacks()
            return writes
        by_partition: dict[int, list[Record]] = {}
        for group_id, record in self._pending_writes:
            by_partition.setdefault(self.partition_for(group_id), []).append(record)
        self._pending_writes = []
        for partition, records in by_partition.items():
            writes.append(OffsetsTopicWrite(partition, tuple(records)))
        self._run_callbacks()
        return writes

    def _run_callbacks(self) -> None:
        while self._outbox:
            callback, result = self._outbox.pop(0)
            callback(result)
