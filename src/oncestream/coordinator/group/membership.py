"""Membership of classic groups (Kafka's GroupMetadataManager, classic part), sans-io.

JoinGroup (KIP-394 member ids, KIP-345 static members, KIP-814 skip assignment), SyncGroup,
Heartbeat, LeaveGroup, the rebalance machinery and its timers, DescribeGroups, ListGroups and
DeleteGroups. Every timer runs on the monotonic clock (``mono_ms``); the wall clock
(``self._rt.wall_ms``) only stamps state changes that are persisted in the group's record.
Offsets live in :mod:`oncestream.coordinator.group.offsets`; the composition and the request
frame (clocks, due timers, records and answers) in :mod:`oncestream.coordinator.group.coordinator`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from oncestream.coordinator.group.group import GroupMetadata, JoinTimer, SyncTimer, validate_current_member
from oncestream.coordinator.group.member import (
    JoinCallback,
    MemberMetadata,
    SyncCallback,
)
from oncestream.coordinator.group.messages import (
    NO_MEMBER_ID,
    DescribedMember,
    GroupDescription,
    HeartbeatRequest,
    JoinRequest,
    JoinResult,
    LeaveRequest,
    LeaveResult,
    LeftMember,
    ListedGroup,
    ListGroupsResult,
    SyncRequest,
    SyncResult,
)
from oncestream.coordinator.group.offsets import OffsetMetadataManager
from oncestream.coordinator.group.runtime import GroupRuntime
from oncestream.coordinator.group.state import GroupState
from oncestream.errors import (
    CoordinatorInvariantError,
    CoordinatorNotAvailableError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidSessionTimeoutError,
    OnceStreamError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)

# JoinGroup v4+ (KIP-394): a dynamic member must first obtain its member id.
_MIN_VERSION_REQUIRING_KNOWN_MEMBER_ID = 4
# JoinGroup v9+ (KIP-814): a static leader replaced while Stable is told to skip the assignment.
_MIN_VERSION_SUPPORTING_SKIP_ASSIGNMENT = 9
CLASSIC_GROUP_TYPE = "classic"

_S = GroupState


class GroupMetadataManager:
    """Members, generations and rebalances of every classic group (see module docstring)."""

    def __init__(self, runtime: GroupRuntime) -> None:
        self._rt = runtime
        # Set by the coordinator once both managers exist (DeleteGroups drops a group's offsets).
        self.offsets: OffsetMetadataManager

    def join(self, request: JoinRequest, mono_ms: int, respond: JoinCallback) -> None:
        """JoinGroup on a validated frame (timers fired, clocks taken); answers through ``respond``."""
        self._rt.validate_group_id(request.group_id, allow_empty=False)
        cfg = self._rt.config
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
        group = self._rt.groups.get(request.group_id)
        if group is None:
            if not is_unknown_member:
                raise UnknownMemberIdError(f"group {request.group_id!r} does not exist")
            group = GroupMetadata(request.group_id, self._rt.wall_ms)
            self._rt.groups[request.group_id] = group

        if not self._accept_joining_member(group, request):
            # Kafka drops a known member that no longer fits (e.g. group.max.size was lowered).
            if group.has(request.member_id):
                self._remove_member(group, group.get(request.member_id))
            self._rt.deliver(
                respond, JoinResult(ErrorCode.group_max_size_reached, member_id=NO_MEMBER_ID)
            )
        elif is_unknown_member:
            self._new_member_join(group, request, mono_ms, respond)
        else:
            self._current_member_join(group, request, mono_ms, respond)

        if group.is_(_S.PREPARING_REBALANCE):
            self._try_complete_join(group, mono_ms)

    def _accept_joining_member(self, group: GroupMetadata, request: JoinRequest) -> bool:
        max_size = self._rt.config.group_max_size
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
        self, group: GroupMetadata, request: JoinRequest, mono_ms: int, respond: JoinCallback
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
                    group, old_member_id, new_member_id, request, mono_ms, respond
                )
            else:
                self._add_member_and_rebalance(group, request, new_member_id, mono_ms, respond)
        elif request.api_version >= _MIN_VERSION_REQUIRING_KNOWN_MEMBER_ID:
            # KIP-394: hand out the id and make the client come back with it, so a client that
            # times out mid-join does not leave a pile of anonymous members behind.
            group.add_pending_member(new_member_id, mono_ms + request.session_timeout_ms)
            self._rt.deliver(respond, JoinResult(ErrorCode.member_id_required, new_member_id))
        else:
            self._add_member_and_rebalance(group, request, new_member_id, mono_ms, respond)

    def _new_member_id(self, group: GroupMetadata, request: JoinRequest) -> str:
        """``<instance id or client id>-<suffix>`` (Kafka's shape), unique within the group."""
        prefix = request.group_instance_id if request.group_instance_id else request.client_id
        for _ in range(100):
            member_id = f"{prefix}-{self._rt.member_id_suffix()}"
            if not group.has(member_id) and not group.is_pending(member_id):
                return member_id
        raise CoordinatorInvariantError("member_id_suffix keeps producing ids already in use")

    def _current_member_join(
        self, group: GroupMetadata, request: JoinRequest, mono_ms: int, respond: JoinCallback
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
            self._add_member_and_rebalance(group, request, member_id, mono_ms, respond)
            return
        validate_current_member(group, member_id, instance_id)
        member = group.get(member_id)
        if group.is_(_S.PREPARING_REBALANCE):
            self._update_member_and_rebalance(group, member, request, mono_ms, respond)
        elif group.is_(_S.COMPLETING_REBALANCE):
            if member.matches(request.protocols):
                # The member probably lost our JoinGroup answer: repeat it.
                self._rt.deliver(respond, self._join_success(group, member_id))
            else:
                self._update_member_and_rebalance(group, member, request, mono_ms, respond)
        elif group.is_(_S.STABLE):
            if group.leader_id == member_id or not member.matches(request.protocols):
                # A leader's JoinGroup forces a rebalance: it is how a consumer reacts to topic
                # metadata changes that do not change its subscription bytes.
                self._update_member_and_rebalance(group, member, request, mono_ms, respond)
            else:
                self._rt.deliver(respond, self._join_success(group, member_id, include_members=False))
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
        mono_ms: int,
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
        member.heartbeat_deadline_ms = mono_ms + self._rt.config.new_member_join_timeout_ms
        self._maybe_prepare_rebalance(group, mono_ms)

    def _update_member_and_rebalance(
        self,
        group: GroupMetadata,
        member: MemberMetadata,
        request: JoinRequest,
        mono_ms: int,
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
            self._rt.deliver(
                superseded, JoinResult(ErrorCode.rebalance_in_progress, member.member_id)
            )
        self._maybe_prepare_rebalance(group, mono_ms)

    def _update_static_member_and_rebalance(
        self,
        group: GroupMetadata,
        old_member_id: str,
        new_member_id: str,
        request: JoinRequest,
        mono_ms: int,
        respond: JoinCallback,
    ) -> None:
        """KIP-345: a restarted static member takes over its instance id (and assignment)."""
        previous_leader_id = group.leader_id
        member = group.get(old_member_id)
        # Fence whatever the previous incarnation is still waiting for.
        self._rt.invoke_join(member, JoinResult(ErrorCode.fenced_instance_id, old_member_id))
        self._rt.invoke_sync(member, SyncResult(ErrorCode.fenced_instance_id))
        if request.group_instance_id is None:
            raise CoordinatorInvariantError(
                f"group {group.group_id}: only a static member (one with an instance id) can replace member {old_member_id}")
        group.replace_static_member(request.group_instance_id, old_member_id, new_member_id)
        member.heartbeat_deadline_ms = mono_ms + member.session_timeout_ms
        superseded = group.update_member(
            member,
            request.protocols,
            request.rebalance_timeout_ms,
            request.session_timeout_ms,
            respond,
        )
        if superseded is not None:
            raise CoordinatorInvariantError(
                f"group {group.group_id}: static member {new_member_id} replaced {old_member_id} but a JoinGroup "
                "of the old member was still waiting")

        if group.is_(_S.STABLE):
            if group.protocol_name == group.select_protocol():
                # No rebalance: persist the new member id, hand back the current generation.
                self._rt.write_group(group)
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
                self._rt.invoke_join(member, result)
            else:
                self._maybe_prepare_rebalance(group, mono_ms)
        elif group.is_(_S.COMPLETING_REBALANCE):
            # The leader may already be assigning to the old member id; start over.
            self._prepare_rebalance(group, mono_ms)
        elif group.is_(_S.PREPARING_REBALANCE):
            pass  # the member simply waits for the join phase to finish
        else:
            raise CoordinatorInvariantError(
                f"group {group.group_id!r} has static members but is {group.state.value}"
            )

    def _maybe_prepare_rebalance(self, group: GroupMetadata, mono_ms: int) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, mono_ms)

    def rebalance_converted(self, group: GroupMetadata, mono_ms: int) -> None:
        """A group just converted from a consumer group (migration.py) starts a rebalance, so its
        members rejoin as members of a classic group."""
        self._prepare_rebalance(group, mono_ms)

    def _prepare_rebalance(self, group: GroupMetadata, mono_ms: int) -> None:
        if group.is_(_S.COMPLETING_REBALANCE):
            # Members waiting for an assignment of the abandoned generation must rejoin.
            self._reset_and_propagate_assignment_error(group, ErrorCode.rebalance_in_progress)
        group.pending_sync_members.clear()
        group.sync_timer = None
        if group.is_(_S.EMPTY):
            delay_ms = self._rt.config.group_initial_rebalance_delay_ms
            timer = JoinTimer(
                deadline_ms=mono_ms + delay_ms,
                initial=True,
                delay_ms=delay_ms,
                remaining_ms=max(group.rebalance_timeout_ms() - delay_ms, 0),
            )
        else:
            timer = JoinTimer(deadline_ms=mono_ms + group.rebalance_timeout_ms(), initial=False)
        group.transition_to(_S.PREPARING_REBALANCE, self._rt.wall_ms)
        group.join_timer = timer
        self._try_complete_join(group, mono_ms)

    def _try_complete_join(self, group: GroupMetadata, mono_ms: int) -> None:
        """Complete the join phase early once every member rejoined (never in the initial delay)."""
        timer = group.join_timer
        if (
            group.is_(_S.PREPARING_REBALANCE)
            and timer is not None
            and not timer.initial
            and group.has_all_members_joined()
        ):
            group.join_timer = None
            self._complete_join(group, mono_ms)

    def _on_join_timer(self, group: GroupMetadata, mono_ms: int) -> None:
        timer = group.join_timer
        if timer is None:
            raise CoordinatorInvariantError(f"group {group.group_id}: the join timer fired but none was set")
        group.join_timer = None
        if timer.initial and group.new_member_added and timer.remaining_ms != 0:
            # Members are still arriving: wait one more delay, within the rebalance timeout.
            group.new_member_added = False
            delay_ms = min(self._rt.config.group_initial_rebalance_delay_ms, timer.remaining_ms)
            group.join_timer = JoinTimer(
                deadline_ms=timer.deadline_ms + delay_ms,
                initial=True,
                delay_ms=delay_ms,
                remaining_ms=max(timer.remaining_ms - timer.delay_ms, 0),
            )
        else:
            self._complete_join(group, mono_ms)

    def _complete_join(self, group: GroupMetadata, mono_ms: int) -> None:
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
                deadline_ms=mono_ms + group.rebalance_timeout_ms(), initial=False
            )
            return

        group.new_member_added = False
        group.init_next_generation(self._rt.wall_ms)
        if group.is_(_S.EMPTY):
            self._rt.write_group(group)
            return
        for member in group.members.values():
            self._rt.invoke_join(member, self._join_success(group, member.member_id))
            member.heartbeat_deadline_ms = mono_ms + member.session_timeout_ms
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        group.sync_timer = SyncTimer(
            deadline_ms=mono_ms + group.rebalance_timeout_ms(),
            generation_id=group.generation_id,
        )

    def _on_sync_timer(self, group: GroupMetadata, mono_ms: int) -> None:
        """Members that joined but never synced within the rebalance timeout are removed."""
        timer = group.sync_timer
        if timer is None:
            raise CoordinatorInvariantError(f"group {group.group_id}: the sync timer fired but none was set")
        group.sync_timer = None
        if timer.generation_id != group.generation_id:
            return
        if group.state not in (_S.COMPLETING_REBALANCE, _S.STABLE):
            return
        if not group.pending_sync_members:
            return
        for member_id in sorted(group.pending_sync_members):
            self._remove_member(group, group.get(member_id))
        self._prepare_rebalance(group, mono_ms)

    def _on_member_session_expired(
        self, group: GroupMetadata, member: MemberMetadata, mono_ms: int
    ) -> None:
        member.heartbeat_deadline_ms = None
        if not member.keeps_session_on_expiry():
            self._remove_member_and_update_group(group, member, mono_ms)

    def _on_pending_member_expired(self, group: GroupMetadata, member_id: str, mono_ms: int) -> None:
        group.remove(member_id)
        if group.is_(_S.PREPARING_REBALANCE):
            self._try_complete_join(group, mono_ms)

    def _remove_member_and_update_group(
        self, group: GroupMetadata, member: MemberMetadata, mono_ms: int
    ) -> None:
        self._remove_member(group, member)
        if group.state in (_S.STABLE, _S.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, mono_ms)
        elif group.is_(_S.PREPARING_REBALANCE):
            self._try_complete_join(group, mono_ms)

    def _remove_member(self, group: GroupMetadata, member: MemberMetadata) -> None:
        """Remove a member, answering what it is still waiting for with UNKNOWN_MEMBER_ID."""
        self._rt.invoke_join(member, JoinResult(ErrorCode.unknown_member_id, NO_MEMBER_ID))
        # Kafka leaves a removed member's SyncGroup unanswered; we answer it so nothing leaks.
        self._rt.invoke_sync(member, SyncResult(ErrorCode.unknown_member_id))
        member.heartbeat_deadline_ms = None
        group.remove(member.member_id)

    def _reset_and_propagate_assignment_error(self, group: GroupMetadata, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
            self._rt.invoke_sync(member, SyncResult(error))

    def sync(self, request: SyncRequest, mono_ms: int, respond: SyncCallback) -> None:
        """SyncGroup; the leader's assignment is written, then every waiting member is answered."""
        self._rt.validate_group_id(request.group_id, allow_empty=False)
        group = self._rt.groups.get(request.group_id)
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
                self._rt.invoke_sync(member, SyncResult(ErrorCode.rebalance_in_progress))
            member.sync_callback = respond
            self._remove_pending_sync_member(group, member.member_id)
            if group.leader_id == member.member_id:
                self._apply_leader_assignment(group, request.assignments, mono_ms)
            return
        if group.is_(_S.STABLE):
            self._remove_pending_sync_member(group, member.member_id)
            self._rt.deliver(
                respond,
                SyncResult(
                    ErrorCode.none, member.assignment, group.protocol_type, group.protocol_name
                ),
            )
            member.heartbeat_deadline_ms = mono_ms + member.session_timeout_ms
            return
        raise CoordinatorInvariantError(f"unexpected state {group.state.value} in SyncGroup")

    def _apply_leader_assignment(
        self, group: GroupMetadata, assignments: Mapping[str, bytes], mono_ms: int
    ) -> None:
        # Members the leader left out get an empty assignment; ids that are not members are
        # ignored (the leader may have computed them for a member that has since left).
        for member_id, member in group.members.items():
            member.assignment = bytes(assignments.get(member_id, b""))
        # Stable first so the stored state timestamp is the one a reload should restore; the
        # record still reaches the log before any member hears of the assignment.
        group.transition_to(_S.STABLE, self._rt.wall_ms)
        self._rt.write_group(group)
        for member in group.members.values():
            result = SyncResult(
                ErrorCode.none, member.assignment, group.protocol_type, group.protocol_name
            )
            if self._rt.invoke_sync(member, result):
                # A session may have lapsed while the member waited for the leader; restart it.
                member.heartbeat_deadline_ms = mono_ms + member.session_timeout_ms

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
        validate_current_member(group, member_id, instance_id)
        if generation_id != group.generation_id:
            raise IllegalGenerationError(
                f"generation {generation_id} != {group.generation_id} of {group.group_id!r}"
            )

    def heartbeat(self, request: HeartbeatRequest, mono_ms: int) -> ErrorCode:
        """Heartbeat: restart the member's session; REBALANCE_IN_PROGRESS asks it to rejoin."""
        self._rt.validate_group_id(request.group_id, allow_empty=False)
        group = self._rt.groups.get(request.group_id)
        if group is None:
            raise UnknownMemberIdError(f"group {request.group_id!r} does not exist")
        self._check_member_and_generation(
            group, request.member_id, request.group_instance_id, request.generation_id
        )
        member = group.get(request.member_id)
        if group.is_(_S.EMPTY):
            raise UnknownMemberIdError(f"group {group.group_id!r} is Empty")
        member.heartbeat_deadline_ms = mono_ms + member.session_timeout_ms
        if group.is_(_S.PREPARING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        if group.state not in (_S.STABLE, _S.COMPLETING_REBALANCE):
            raise CoordinatorInvariantError(str(group.state))
        return ErrorCode.none

    def leave(self, request: LeaveRequest, mono_ms: int) -> LeaveResult:
        """LeaveGroup (v3+ batch included): remove each member, per-member errors."""
        self._rt.validate_group_id(request.group_id, allow_empty=False)
        group = self._rt.groups.get(request.group_id)
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
            error = self._leave_one(group, leaving.member_id, leaving.group_instance_id, mono_ms)
            outcomes.append(LeftMember(leaving.member_id, leaving.group_instance_id, error))
        return LeaveResult(ErrorCode.none, tuple(outcomes))

    def _leave_one(
        self, group: GroupMetadata, member_id: str, instance_id: str | None, mono_ms: int
    ) -> ErrorCode:
        if member_id == NO_MEMBER_ID:
            # KIP-345 admin removal of a static member by its instance id alone.
            current = group.current_static_member_id(instance_id)
            if current is None:
                return ErrorCode.unknown_member_id
            self._remove_member_and_update_group(group, group.get(current), mono_ms)
            return ErrorCode.none
        if group.is_pending(member_id):
            self._on_pending_member_expired(group, member_id, mono_ms)
            return ErrorCode.none
        if group.is_static_member_fenced(instance_id, member_id):
            return ErrorCode.fenced_instance_id
        if group.has(member_id):
            self._remove_member_and_update_group(group, group.get(member_id), mono_ms)
            return ErrorCode.none
        return ErrorCode.unknown_member_id

    def list_groups(
        self,
        states_filter: Iterable[str] = (),
        types_filter: Iterable[str] = (),
    ) -> ListGroupsResult:
        """Handle ListGroups (state filter of v4+, type filter of v5+, both case-insensitive)."""
        states = {s.lower() for s in states_filter}
        types = {t.lower() for t in types_filter}
        error = ErrorCode.none
        if self._rt.loading_partitions - self._rt.foreign_partitions:
            error = ErrorCode.coordinator_load_in_progress
        if types and CLASSIC_GROUP_TYPE not in types:
            return ListGroupsResult(error)
        # Unknown state names simply match nothing, as in Kafka.
        listed = tuple(
            ListedGroup(g.group_id, g.protocol_type or "", g.state.value)
            for _, g in sorted(self._rt.groups.items())
            if not states or g.state.value.lower() in states
        )
        return ListGroupsResult(error, listed)

    @staticmethod
    def next_deadline_ms(group: GroupMetadata) -> int | None:
        """The group's earliest timer (monotonic ms), or None."""
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

    def fire_timers(self, group_id: str, mono_ms: int) -> None:
        """Fire the group's due timers, earliest first, until none is due.

        At equal deadlines member expiries go first, so a join phase completing at the same
        instant already sees them gone.
        """
        self._rt.touch_group(group_id)
        # Each firing clears or moves its timer forward, so the loop ends; the bound is a guard.
        for _ in range(100_000):
            group = self._rt.groups.get(group_id)
            if group is None or group.is_(_S.DEAD):
                return
            due: list[tuple[int, int, str, Any]] = []
            due.extend(
                (d, 0, "pending", mid) for mid, d in group.pending_members.items() if d <= mono_ms
            )
            due.extend(
                (m.heartbeat_deadline_ms, 1, "session", m)
                for m in group.members.values()
                if m.heartbeat_deadline_ms is not None and m.heartbeat_deadline_ms <= mono_ms
            )
            if group.sync_timer is not None and group.sync_timer.deadline_ms <= mono_ms:
                due.append((group.sync_timer.deadline_ms, 2, "sync", None))
            if group.join_timer is not None and group.join_timer.deadline_ms <= mono_ms:
                due.append((group.join_timer.deadline_ms, 3, "join", None))
            if not due:
                return
            _, _, kind, what = min(due, key=lambda item: (item[0], item[1]))
            if kind == "pending":
                self._on_pending_member_expired(group, what, mono_ms)
            elif kind == "session":
                self._on_member_session_expired(group, what, mono_ms)
            elif kind == "sync":
                self._on_sync_timer(group, mono_ms)
            else:
                self._on_join_timer(group, mono_ms)
        raise CoordinatorInvariantError(f"timers of group {group_id!r} keep firing at {mono_ms}")

    def unload_group(self, group: GroupMetadata) -> None:
        """Forget the group (its partition was unloaded): waiting requests hear NOT_COORDINATOR."""
        for member in group.members.values():
            self._rt.invoke_join(member, JoinResult(ErrorCode.not_coordinator, member.member_id))
            self._rt.invoke_sync(member, SyncResult(ErrorCode.not_coordinator))
        group.transition_to(_S.DEAD, self._rt.wall_ms)
        del self._rt.groups[group.group_id]

    # --- DescribeGroups / ListGroups / DeleteGroups -----------------------------------------------

    def describe(self, group_id: str) -> GroupDescription:
        """One group of DescribeGroups; an unknown group is reported Dead with no error (Kafka)."""
        try:
            self._rt.validate_group_id(group_id, allow_empty=True)
        except OnceStreamError as exc:
            return GroupDescription(group_id, exc.code, "", "", "")
        group = self._rt.groups.get(group_id)
        if group is None:
            return GroupDescription(group_id, ErrorCode.none, _S.DEAD.value, "", "")
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
        return GroupDescription(
            group_id=group_id,
            error=ErrorCode.none,
            state=group.state.value,
            protocol_type=group.protocol_type or "",
            protocol_name=name or "",
            members=members,
        )

    def delete(self, group_id: str) -> ErrorCode:
        """One group of DeleteGroups: only an Empty group goes (NON_EMPTY_GROUP otherwise); its
        offsets and metadata are tombstoned."""
        try:
            self._rt.validate_group_id(group_id, allow_empty=True)
        except OnceStreamError as exc:
            return exc.code
        group = self._rt.groups.get(group_id)
        if group is None or group.is_(_S.DEAD):
            return ErrorCode.group_id_not_found
        if not group.is_(_S.EMPTY):
            return ErrorCode.non_empty_group
        group.transition_to(_S.DEAD, self._rt.wall_ms)
        self.offsets.remove_offsets_and_maybe_group(group, None)
        return ErrorCode.none
