"""Consumer groups of the KIP-848 protocol, sans-io (Kafka's GroupMetadataManager, consumer part).

ConsumerGroupHeartbeat in three steps, as Kafka does:

1. the member is created or updated; a changed subscription (or changed metadata of the
   subscribed topics, regular expressions re-evaluated against the current topics) bumps the
   *group epoch*;
2. when the group epoch is ahead of the *assignment epoch*, the server-side assignor computes a
   new target assignment (only the members whose target changed get a record);
3. the member is reconciled towards its target (reconciliation.py), one acknowledged step at a
   time, so a partition only moves once its previous owner revoked it.

Every change is a record (records.py) that is applied through the same function a replay uses
(group.py). Records go out through the shared GroupRuntime (the OffsetsTopicWrite contract).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import re2
from kio.schema.errors import ErrorCode

from oncestream.coordinator.group.consumer.assignors import Assignor, MemberSpec, assignors_from
from oncestream.coordinator.group.consumer.classic_members import ClassicMembers
from oncestream.coordinator.group.consumer.group import (
    CONSUMER_GROUP_TYPE,
    DEAD,
    EMPTY,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroup,
    ConsumerGroupMember,
)
from oncestream.coordinator.group.consumer.messages import (
    ConsumerGroupDescription,
    ConsumerHeartbeatRequest,
    ConsumerHeartbeatResult,
    DescribedConsumerMember,
    TopicsView,
)
from oncestream.coordinator.group.consumer.reconciliation import MemberState, reconcile
from oncestream.coordinator.group.consumer.records import (
    ConsumerGroupRecord,
    CurrentAssignmentRecord,
    GroupEpochRecord,
    MemberAssignmentState,
    MemberMetadataRecord,
    MemberSubscription,
    SubscriptionMetadataRecord,
    TargetAssignmentEpochRecord,
    TargetAssignmentMemberRecord,
    TopicMetadata,
    encode_record,
)
from oncestream.coordinator.group.messages import LeaveRequest, LeaveResult, LeftMember, ListedGroup
from oncestream.coordinator.group.runtime import GroupRuntime
from oncestream.errors import (
    FencedInstanceIdError,
    FencedMemberEpochError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    IllegalGenerationError,
    InvalidRequestError,
    OnceStreamError,
    StaleMemberEpochError,
    UnknownMemberIdError,
    UnreleasedInstanceIdError,
    UnsupportedAssignorError,
)

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


class InvalidRegularExpressionError(OnceStreamError):
    """SubscribedTopicRegex does not compile as RE2 (INVALID_REGULAR_EXPRESSION)."""

    code = ErrorCode.invalid_regular_expression


class ConsumerGroupManager:
    """Every consumer group of this coordinator (see the module docstring)."""

    def __init__(self, runtime: GroupRuntime, topics: TopicsView) -> None:
        self._rt = runtime
        self._topics = topics
        self._assignors: dict[str, Assignor] = assignors_from(runtime.config.consumer_assignors)
        self._default_assignor = next(iter(self._assignors))
        self.groups: dict[str, ConsumerGroup] = {}
        self._regex_cache: dict[str, Any] = {}
        # JoinGroup/SyncGroup/Heartbeat/LeaveGroup of classic members inside consumer groups.
        self.classic = ClassicMembers(self)
        # Called before a member is fenced (with the group epoch bump); True when it converted
        # the group to a classic one instead (the online downgrade, set by the coordinator).
        self.downgrade_on_fence: Callable[[ConsumerGroup, str], bool] | None = None

    @property
    def runtime(self) -> GroupRuntime:
        """The runtime shared with the classic coordinator (records, clocks, config)."""
        return self._rt

    # ==============================================================================================
    # Records
    # ==============================================================================================

    def write(self, record: ConsumerGroupRecord) -> None:
        self.apply(record)
        self._rt.emit(record.group_id, encode_record(record))

    def apply(self, record: ConsumerGroupRecord) -> None:
        """Apply one record (a write of ours or a replayed one) to its group."""
        group = self.groups.get(record.group_id)
        if isinstance(record, GroupEpochRecord) and record.epoch is None:
            self.groups.pop(record.group_id, None)
            self._rt.touch_group(record.group_id)
            return
        if group is None:
            if _is_tombstone(record):
                return
            group = self.groups[record.group_id] = ConsumerGroup(record.group_id)
        group.apply(record)

    def unload(self, group_ids: Iterable[str]) -> None:
        """Forget groups whose partition is unloaded (a later load brings them back)."""
        for group_id in group_ids:
            self.groups.pop(group_id, None)

    def after_load(self, group_id: str, mono_ms: int) -> None:
        """A loaded group's members get a fresh session (as in Kafka)."""
        group = self.groups.get(group_id)
        if group is None:
            return
        timeout_ms = self._rt.config.consumer_session_timeout_ms
        for member_id, member in group.members.items():
            classic = member.subscription.classic
            group.session_deadlines[member_id] = mono_ms + (
                timeout_ms if classic is None else classic.session_timeout_ms)
        self._rt.touch_group(group_id)

    # ==============================================================================================
    # ConsumerGroupHeartbeat
    # ==============================================================================================

    def heartbeat(self, request: ConsumerHeartbeatRequest, mono_ms: int) -> ConsumerHeartbeatResult:
        """One ConsumerGroupHeartbeat (raises a typed error for Kafka's error answers)."""
        self.validate(request)
        self._rt.validate_group_id(request.group_id, allow_empty=False)
        self._rt.touch_group(request.group_id)
        if request.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            return self._leave(request)
        joining = request.member_epoch == 0
        group = self.groups.get(request.group_id)
        if group is None:
            if not joining:
                raise GroupIdNotFoundError(f"consumer group {request.group_id!r} not found")
            group = self.groups[request.group_id] = ConsumerGroup(request.group_id)
        member_id = request.member_id or str(uuid.uuid4())
        if len(group.members) >= self._rt.config.consumer_max_size and member_id not in group.members:
            raise GroupMaxSizeReachedError(f"consumer group {group.group_id!r} is full")
        member = self._member_for(group, request, member_id)

        # 1. The member and its subscription; a changed subscription bumps the group epoch.
        old = member.subscription
        sub = MemberSubscription(
            instance_id=request.instance_id if request.instance_id is not None else old.instance_id,
            rack_id=request.rack_id if request.rack_id is not None else old.rack_id,
            client_id=request.client_id,
            client_host=request.client_host,
            subscribed_topic_names=(tuple(sorted(set(request.subscribed_topic_names)))
                                    if request.subscribed_topic_names is not None else old.subscribed_topic_names),
            subscribed_topic_regex=(request.subscribed_topic_regex or None
                                    if request.subscribed_topic_regex is not None else old.subscribed_topic_regex),
            rebalance_timeout_ms=(request.rebalance_timeout_ms if request.rebalance_timeout_ms != -1
                                  else old.rebalance_timeout_ms),
            server_assignor=request.server_assignor if request.server_assignor is not None else old.server_assignor,
        )
        is_new = member_id not in group.members
        before = member.assignment
        self.subscribe_and_reconcile(group, member_id, sub, None if is_new else old, request.owned, mono_ms)
        member = group.members[member_id]
        group.session_deadlines[member_id] = mono_ms + self._rt.config.consumer_session_timeout_ms

        full = joining or (request.rebalance_timeout_ms != -1 and request.subscribed_topic_names is not None
                           and request.owned is not None)
        changed = member.assignment.assigned != before.assigned or is_new
        return ConsumerHeartbeatResult(
            ErrorCode.none,
            member_id=member_id,
            member_epoch=member.member_epoch,
            heartbeat_interval_ms=self._rt.config.consumer_heartbeat_interval_ms,
            assignment=member.assignment.assigned if (full or changed) else None,
        )

    def subscribe_and_reconcile(self, group: ConsumerGroup, member_id: str, sub: MemberSubscription,
                                old: MemberSubscription | None, owned: Mapping[uuid.UUID, frozenset[int]] | None,
                                mono_ms: int) -> None:
        """Kafka's three steps for a member's request (``old`` None: a new member): 1. persist
        its subscription, bumping the group epoch when it or the subscribed topics' metadata
        changed; 2. a new target assignment when the group epoch moved past it; 3. reconcile the
        member towards its target, given the partitions it says it ``owned``."""
        bump = False
        if old is None or sub != old:
            self.write(MemberMetadataRecord(group.group_id, member_id, sub))
            bump = old is None or (sub.subscribed_topic_names, sub.subscribed_topic_regex) != (
                old.subscribed_topic_names, old.subscribed_topic_regex)
        metadata = self.subscription_metadata(group)
        if metadata != group.subscription_metadata:
            self.write(SubscriptionMetadataRecord(group.group_id, tuple(metadata[n] for n in sorted(metadata))))
            bump = True
        if bump:
            self.write(GroupEpochRecord(group.group_id, group.group_epoch + 1))
        if group.group_epoch > group.assignment_epoch:
            self.update_target(group)
        self.reconcile_member(group, group.members[member_id], owned, mono_ms)

    def validate(self, request: ConsumerHeartbeatRequest) -> None:
        """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid."""
        if request.group_id == "":
            raise InvalidRequestError("GroupId can't be empty.")
        if request.instance_id == "":
            raise InvalidRequestError("InstanceId can't be empty.")
        if request.rack_id == "":
            raise InvalidRequestError("RackId can't be empty.")
        epoch = request.member_epoch
        if epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH:
            if request.member_id == "":
                raise InvalidRequestError("MemberId can't be empty.")
        elif epoch == 0:
            if request.rebalance_timeout_ms == -1:
                raise InvalidRequestError("RebalanceTimeoutMs must be provided in first request.")
            if request.owned is None or any(request.owned.values()):
                raise InvalidRequestError("TopicPartitions must be empty when (re-)joining.")
            if not request.subscribed_topic_names and not request.subscribed_topic_regex:
                raise InvalidRequestError("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
        elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if request.member_id == "":
                raise InvalidRequestError("MemberId can't be empty.")
            if request.instance_id is None:
                raise InvalidRequestError("InstanceId can't be null.")
        else:
            raise InvalidRequestError("MemberEpoch is invalid.")
        if request.server_assignor is not None and request.server_assignor not in self._assignors:
            raise UnsupportedAssignorError(
                f"ServerAssignor {request.server_assignor} is not supported. "
                f"Supported assignors: {', '.join(self._assignors)}.")
        if request.subscribed_topic_regex:
            self._regex(request.subscribed_topic_regex)

    def _regex(self, pattern: str) -> Any:
        compiled = self._regex_cache.get(pattern)
        if compiled is None:
            try:
                compiled = re2.compile(pattern)
            except re2.error as exc:
                raise InvalidRegularExpressionError(f"SubscribedTopicRegex {pattern!r} is invalid: {exc}") from exc
            if len(self._regex_cache) > 1000:
                self._regex_cache.clear()
            self._regex_cache[pattern] = compiled
        return compiled

    def _member_for(self, group: ConsumerGroup, request: ConsumerHeartbeatRequest, member_id: str) -> ConsumerGroupMember:
        """Kafka's getOrMaybeSubscribe{Dynamic,Static}ConsumerGroupMember (fencing included)."""
        joining = request.member_epoch == 0
        blank = ConsumerGroupMember(member_id, MemberSubscription(None, None, "", "", (), None, -1, None))
        if request.instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                if not joining:
                    raise UnknownMemberIdError(f"member {member_id} is not in group {group.group_id!r}")
                return blank
            if joining:
                # The member rejoins without its partitions (it owns none when sending epoch 0):
                # it starts over as a new member.
                self.remove_member(group, member)
                return blank
            self._check_epoch(member, request)
            return member
        existing = group.static_member(request.instance_id)
        if joining:
            if existing is None:
                return blank
            if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise UnreleasedInstanceIdError(
                    f"static member {member_id} with instance id {request.instance_id} cannot join: the instance "
                    f"id is owned by member {existing.member_id}")
            # The new instance takes over the old one's subscription, target and partitions.
            target = group.target.get(existing.member_id, {})
            self.remove_member(group, existing, bump=False)
            self.write(MemberMetadataRecord(group.group_id, member_id, existing.subscription))
            self.write(TargetAssignmentMemberRecord(group.group_id, member_id, target))
            a = existing.assignment
            self.write(CurrentAssignmentRecord(group.group_id, member_id, MemberAssignmentState(
                0, 0, MemberState.STABLE, a.assigned, {})))
            return group.members[member_id]
        if existing is None:
            raise UnknownMemberIdError(f"instance id {request.instance_id} is unknown")
        if existing.member_id != member_id:
            raise FencedInstanceIdError(
                f"static member {member_id} with instance id {request.instance_id} was fenced by member "
                f"{existing.member_id}")
        self._check_epoch(existing, request)
        return existing

    @staticmethod
    def _check_epoch(member: ConsumerGroupMember, request: ConsumerHeartbeatRequest) -> None:
        """Kafka's throwIfConsumerGroupMemberEpochIsInvalid: a heartbeat one epoch behind is
        accepted if it owns only partitions still assigned (the bumped answer was lost)."""
        received, current = request.member_epoch, member.member_epoch
        if received > current:
            raise FencedMemberEpochError(
                f"member epoch {received} is greater than the coordinator's {current}: rejoin")
        if received < current:
            owned = request.owned
            assigned = member.assignment.assigned
            subset = owned is not None and all(ps <= assigned.get(t, frozenset()) for t, ps in owned.items() if ps)
            if received != member.assignment.previous_member_epoch or not subset:
                raise FencedMemberEpochError(
                    f"member epoch {received} is smaller than the coordinator's {current}: rejoin")

    def subscription_metadata(self, group: ConsumerGroup) -> dict[str, TopicMetadata]:
        """The subscribed topics that exist, regular expressions resolved against the topics now."""
        topics = self._topics()
        names: set[str] = set()
        regexes: set[str] = set()
        for member in group.members.values():
            names.update(member.subscription.subscribed_topic_names)
            if member.subscription.subscribed_topic_regex:
                regexes.add(member.subscription.subscribed_topic_regex)
        for pattern in regexes:
            compiled = self._regex(pattern)
            names.update(n for n in topics if n not in INTERNAL_TOPICS and compiled.fullmatch(n))
        return {n: topics[n] for n in names if n in topics}

    def _member_topic_ids(self, group: ConsumerGroup, member: ConsumerGroupMember) -> frozenset[uuid.UUID]:
        meta = group.subscription_metadata
        ids = {meta[n].topic_id for n in member.subscription.subscribed_topic_names if n in meta}
        pattern = member.subscription.subscribed_topic_regex
        if pattern:
            compiled = self._regex(pattern)
            ids.update(t.topic_id for n, t in meta.items() if compiled.fullmatch(n))
        return frozenset(ids)

    def update_target(self, group: ConsumerGroup) -> None:
        """Run the preferred assignor; write the targets that changed, then the new epoch."""
        votes = Counter(m.subscription.server_assignor for m in group.members.values()
                        if m.subscription.server_assignor is not None)
        name = max(sorted(votes), key=lambda n: votes[n]) if votes else self._default_assignor
        specs = {m_id: MemberSpec(self._member_topic_ids(group, m), group.target.get(m_id, {}))
                 for m_id, m in group.members.items()}
        partitions = {t.topic_id: t.num_partitions for t in group.subscription_metadata.values()}
        result = self._assignors[name].assign(specs, partitions)
        for member_id, assignment in sorted(result.items()):
            if group.target.get(member_id, {}) != assignment:
                self.write(TargetAssignmentMemberRecord(group.group_id, member_id, assignment))
        self.write(TargetAssignmentEpochRecord(group.group_id, group.group_epoch))

    def reconcile_member(self, group: ConsumerGroup, member: ConsumerGroupMember,
                   owned: Mapping[uuid.UUID, frozenset[int]] | None, mono_ms: int) -> None:
        if member.is_reconciled_to(group.assignment_epoch):
            return
        new = reconcile(member.assignment, group.assignment_epoch, group.target.get(member.member_id, {}),
                        group.partition_epoch, owned)
        if new == member.assignment:
            return
        self.write(CurrentAssignmentRecord(group.group_id, member.member_id, MemberAssignmentState(
            new.member_epoch, new.previous_member_epoch, int(new.state), new.assigned, new.pending_revocation)))
        if new.state == MemberState.UNREVOKED_PARTITIONS:
            timeout_ms = max(0, member.subscription.rebalance_timeout_ms)
            group.rebalance_deadlines[member.member_id] = (mono_ms + timeout_ms, new.member_epoch)
        else:
            group.rebalance_deadlines.pop(member.member_id, None)

    # ==============================================================================================
    # Leaving and fencing
    # ==============================================================================================

    def _leave(self, request: ConsumerHeartbeatRequest) -> ConsumerHeartbeatResult:
        group = self.groups.get(request.group_id)
        if group is None:
            raise GroupIdNotFoundError(f"consumer group {request.group_id!r} not found")
        if request.instance_id is None:
            member = group.members.get(request.member_id)
            if member is None:
                raise UnknownMemberIdError(f"member {request.member_id} is not in group {group.group_id!r}")
        else:
            found = group.static_member(request.instance_id)
            if found is None:
                raise UnknownMemberIdError(f"instance id {request.instance_id} is unknown")
            if found.member_id != request.member_id:
                raise FencedInstanceIdError(f"static member {request.member_id} was fenced by {found.member_id}")
            member = found
            if request.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                # Temporarily gone: it keeps its partitions until the session times out.
                a = member.assignment
                self.write(CurrentAssignmentRecord(group.group_id, member.member_id, MemberAssignmentState(
                    LEAVE_GROUP_STATIC_MEMBER_EPOCH, a.member_epoch, int(a.state), a.assigned, {})))
                group.rebalance_deadlines.pop(member.member_id, None)
                return ConsumerHeartbeatResult(ErrorCode.none, member_id=member.member_id,
                                               member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH)
        self.remove_member(group, member)
        return ConsumerHeartbeatResult(ErrorCode.none, member_id=request.member_id, member_epoch=request.member_epoch)

    def leave_by_admin(self, request: LeaveRequest) -> LeaveResult:
        """LeaveGroup on a consumer group (Kafka's classicGroupLeaveToConsumerGroup): a classic
        member leaves by its member id (and instance id if static); an administrator removes
        static members by instance id (member id ""). A member of the consumer protocol named
        by its member id hears UNKNOWN_MEMBER_ID (it leaves with its heartbeat), a member id
        other than the instance's FENCED_INSTANCE_ID."""
        group = self.groups[request.group_id]
        answers: list[LeftMember] = []
        leaving: list[ConsumerGroupMember] = []
        for who in request.members:
            if who.member_id != "" and (
                    (who.group_instance_id is None and who.member_id in group.members)
                    or (who.group_instance_id is not None and group.static_member(who.group_instance_id) is not None
                        and group.members.get(who.member_id) is group.static_member(who.group_instance_id))):
                member = group.members[who.member_id]
                if member.subscription.classic is not None:
                    answers.append(LeftMember(who.member_id, who.group_instance_id, ErrorCode.none))
                    if member not in leaving:
                        leaving.append(member)
                    continue
            member_or_none = group.static_member(who.group_instance_id)
            if who.group_instance_id is None or member_or_none is None:
                error = ErrorCode.unknown_member_id
            elif who.member_id not in ("", member_or_none.member_id):
                error = ErrorCode.fenced_instance_id
            elif who.member_id == member_or_none.member_id:
                error = ErrorCode.unknown_member_id  # it uses the consumer protocol, not LeaveGroup
            else:
                error = ErrorCode.none
                if member_or_none not in leaving:
                    leaving.append(member_or_none)
            answers.append(LeftMember(who.member_id, who.group_instance_id, error))
        for member in leaving:
            self.remove_member(group, member, bump=member is leaving[-1])
        self._rt.touch_group(group.group_id)
        return LeaveResult(ErrorCode.none, tuple(answers))

    def remove_member(self, group: ConsumerGroup, member: ConsumerGroupMember, *, bump: bool = True) -> None:
        """Kafka's consumerGroupFenceMember (``bump``) or the removal half of replaceMember."""
        gid, mid = group.group_id, member.member_id
        if bump and self.downgrade_on_fence is not None and self.downgrade_on_fence(group, mid):
            return
        self.write(CurrentAssignmentRecord(gid, mid, None))
        self.write(TargetAssignmentMemberRecord(gid, mid, None))
        self.write(MemberMetadataRecord(gid, mid, None))
        if not bump:
            return
        metadata = self.subscription_metadata(group)
        if metadata != group.subscription_metadata:
            self.write(SubscriptionMetadataRecord(gid, tuple(metadata[n] for n in sorted(metadata))))
        self.write(GroupEpochRecord(gid, group.group_epoch + 1))
        self._rt.touch_group(gid)

    # ==============================================================================================
    # Timers
    # ==============================================================================================

    def next_deadline_ms(self, group_id: str) -> int | None:
        group = self.groups.get(group_id)
        return None if group is None else group.next_deadline_ms()

    def fire_timers(self, group_id: str, mono_ms: int) -> None:
        """Fence members whose session expired or who did not revoke within the rebalance timeout."""
        group = self.groups.get(group_id)
        if group is None:
            return
        self._rt.touch_group(group_id)
        for member_id, deadline in sorted(group.session_deadlines.items(), key=lambda kv: kv[1]):
            if deadline <= mono_ms and member_id in group.members and member_id not in group.held:
                self.remove_member(group, group.members[member_id])
        for deadlines in (group.join_deadlines, group.sync_deadlines):
            for member_id, deadline in sorted(deadlines.items(), key=lambda kv: kv[1]):
                if deadline <= mono_ms:
                    deadlines.pop(member_id, None)
                    if member_id in group.members:
                        self.remove_member(group, group.members[member_id])
        for member_id, (deadline, epoch) in list(group.rebalance_deadlines.items()):
            member = group.members.get(member_id)
            if deadline <= mono_ms:
                group.rebalance_deadlines.pop(member_id, None)
                if member is not None and member.member_epoch == epoch:
                    self.remove_member(group, member)

    def hold_member(self, group_id: str, member_id: str) -> None:
        """The broker holds a request of ``member_id`` (its records are being persisted): until
        :meth:`release_member` its session does not run out. The broker reads a connection's
        next request only once it answered this one, so the member's heartbeats wait behind it
        unread; a slow append must not make a live member look silent."""
        group = self.groups.get(group_id)
        if group is not None and member_id in group.members:
            group.held[member_id] = group.held.get(member_id, 0) + 1

    def release_member(self, group_id: str, member_id: str, mono_ms: int) -> None:
        """The request :meth:`hold_member` announced is answered: once none is held, the member
        has a full session from now (a request it made counts as a sign of life, as a commit
        does for Kafka's classic members), so the heartbeats that waited behind it can arrive."""
        group = self.groups.get(group_id)
        if group is None or member_id not in group.held:
            return
        count = group.held.pop(member_id) - 1
        if count > 0:
            group.held[member_id] = count
            return
        member = group.members.get(member_id)
        if member is None:
            return
        classic = member.subscription.classic
        timeout_ms = self._rt.config.consumer_session_timeout_ms if classic is None else classic.session_timeout_ms
        group.session_deadlines[member_id] = max(group.session_deadlines.get(member_id, 0), mono_ms + timeout_ms)
        self._rt.touch_group(group_id)

    # ==============================================================================================
    # Offsets, describe, list, delete
    # ==============================================================================================

    def validate_offset_commit(self, group_id: str, member_id: str, member_epoch: int, *,
                               transactional: bool, api_version: int) -> None:
        """Kafka's ConsumerGroup.validateOffsetCommit (STALE_MEMBER_EPOCH for a stale epoch;
        TxnOffsetCommit, which has no such error, and a classic member, whose generation is its
        member epoch, hear ILLEGAL_GENERATION)."""
        group = self.groups[group_id]
        if member_epoch < 0 and not group.members:
            return
        member = group.members.get(member_id)
        if member is None:
            raise UnknownMemberIdError(f"member {member_id!r} is not in consumer group {group_id!r}")
        classic = member.subscription.classic is not None
        if not transactional and not classic and api_version < 9:
            raise OnceStreamError("OffsetCommit version 9 or above must be used by members using the "
                                  "consumer group protocol", code=ErrorCode.unsupported_version)
        if member_epoch != member.member_epoch:
            message = f"member epoch {member_epoch} is not the current {member.member_epoch}"
            if transactional or classic:
                raise IllegalGenerationError(message)
            raise StaleMemberEpochError(message)

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> None:
        """Kafka's ConsumerGroup.validateOffsetFetch: an admin fetch (no member, epoch -1) passes."""
        group = self.groups[group_id]
        if member_id is None and member_epoch < 0:
            return
        member = group.members.get(member_id or "")
        if member is None:
            raise UnknownMemberIdError(f"member {member_id!r} is not in consumer group {group_id!r}")
        if member_epoch != member.member_epoch:
            raise StaleMemberEpochError(f"member epoch {member_epoch} is not the current {member.member_epoch}")

    def is_subscribed_to(self, group_id: str, topic: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and topic in group.subscription_metadata

    def subscribed_topics(self, group_id: str) -> frozenset[str]:
        """The topics the group's members subscribe to now (none for an unknown group)."""
        group = self.groups.get(group_id)
        return frozenset() if group is None or not group.members else frozenset(group.subscription_metadata)

    def describe(self, group_id: str) -> ConsumerGroupDescription:
        """ConsumerGroupDescribe of one group."""
        group = self.groups.get(group_id)
        if group is None:
            return ConsumerGroupDescription(group_id, ErrorCode.group_id_not_found,
                                            f"Group {group_id} not found.", state=DEAD)
        votes = Counter(m.subscription.server_assignor for m in group.members.values()
                        if m.subscription.server_assignor is not None)
        assignor = max(sorted(votes), key=lambda n: votes[n]) if votes else self._default_assignor
        members = tuple(
            DescribedConsumerMember(
                member_id=m.member_id, instance_id=m.instance_id, rack_id=m.subscription.rack_id,
                member_epoch=m.member_epoch, client_id=m.subscription.client_id,
                client_host=m.subscription.client_host,
                subscribed_topic_names=m.subscription.subscribed_topic_names,
                subscribed_topic_regex=m.subscription.subscribed_topic_regex,
                assignment=m.assignment.assigned, target_assignment=group.target.get(m.member_id, {}),
                classic=m.subscription.classic is not None)
            for m in group.members.values())
        return ConsumerGroupDescription(group_id, ErrorCode.none, None, group.state, group.group_epoch,
                                        group.assignment_epoch, assignor, members)

    def listed(self, states: set[str]) -> list[ListedGroup]:
        return [ListedGroup(g.group_id, CONSUMER_GROUP_TYPE, g.state) for _, g in sorted(self.groups.items())
                if not states or g.state.lower() in states]

    def delete(self, group_id: str) -> ErrorCode:
        """DeleteGroups of a consumer group: only an Empty one; every record is tombstoned."""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.group_id_not_found
        if group.state != EMPTY:
            return ErrorCode.non_empty_group
        self.write_tombstones(group)
        return ErrorCode.none

    def create_converted(self, group_id: str, epoch: int,
                         members: list[tuple[str, MemberSubscription, dict[uuid.UUID, frozenset[int]]]],
                         mono_ms: int) -> None:
        """A consumer group made from a classic group (Kafka's ConsumerGroup.fromClassicGroup and
        createConsumerGroupRecords): every member Stable at ``epoch`` with its last classic
        assignment, which is also its target; sessions are the members' classic ones."""
        group = self.groups[group_id] = ConsumerGroup(group_id)
        # A partition two classic members claim (a leader's mistake) stays with the first.
        claimed: set[tuple[uuid.UUID, int]] = set()
        members = [(member_id, sub, _unclaimed(assigned, claimed)) for member_id, sub, assigned in members]
        for member_id, sub, _ in members:
            self.write(MemberMetadataRecord(group_id, member_id, sub))
        metadata = self.subscription_metadata(group)
        self.write(SubscriptionMetadataRecord(group_id, tuple(metadata[n] for n in sorted(metadata))))
        self.write(GroupEpochRecord(group_id, epoch))
        for member_id, _, assigned in members:
            self.write(TargetAssignmentMemberRecord(group_id, member_id, assigned))
        self.write(TargetAssignmentEpochRecord(group_id, epoch))
        for member_id, sub, assigned in members:
            self.write(CurrentAssignmentRecord(group_id, member_id, MemberAssignmentState(
                epoch, epoch, int(MemberState.STABLE), assigned, {})))
            if sub.classic is not None:
                group.session_deadlines[member_id] = mono_ms + sub.classic.session_timeout_ms
        self._rt.touch_group(group_id)

    def write_tombstones(self, group: ConsumerGroup) -> None:
        gid = group.group_id
        for member in list(group.members.values()):
            self.remove_member(group, member, bump=False)
        self.write(TargetAssignmentEpochRecord(gid, None))
        self.write(SubscriptionMetadataRecord(gid, None))
        self.write(GroupEpochRecord(gid, None))

    def type_of(self, group_id: str) -> str | None:
        return CONSUMER_GROUP_TYPE if group_id in self.groups else None


def _unclaimed(assigned: Mapping[uuid.UUID, frozenset[int]], claimed: set[tuple[uuid.UUID, int]]
               ) -> dict[uuid.UUID, frozenset[int]]:
    """``assigned`` without the partitions in ``claimed``, which then holds them all."""
    out: dict[uuid.UUID, frozenset[int]] = {}
    for topic_id, partitions in assigned.items():
        free = frozenset(p for p in partitions if (topic_id, p) not in claimed)
        claimed.update((topic_id, p) for p in free)
        if free:
            out[topic_id] = free
    return out


def _is_tombstone(record: ConsumerGroupRecord) -> bool:
    if isinstance(record, GroupEpochRecord | TargetAssignmentEpochRecord):
        return record.epoch is None
    if isinstance(record, SubscriptionMetadataRecord):
        return record.topics is None
    if isinstance(record, MemberMetadataRecord):
        return record.subscription is None
    return record.assignment is None
