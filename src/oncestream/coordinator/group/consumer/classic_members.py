"""Classic members inside a consumer group (Kafka 4's online migration, KIP-848).

A member that speaks JoinGroup/SyncGroup/Heartbeat/LeaveGroup may belong to a consumer group: a
classic group converted online when a consumer-protocol member joined it, or a classic consumer
joining a consumer group with members. It is a consumer-group member like any other (its
subscription read from its ConsumerProtocol metadata, its ``ClassicMemberMetadata`` persisted in
its MemberMetadata record); the server-side assignor computes its target and it is reconciled
like the others, with the partitions it says it owns in its subscription (an eager client owns
none when it rejoins). The classic protocol carries the rest, as Kafka's
classicGroup{Join,Sync,Heartbeat,Leave}ToConsumerGroup do:

* JoinGroup answers at once with generation = the member epoch, protocol type "consumer", the
  member's first protocol name, and no leader work (no member list);
* SyncGroup hands out the partitions the member may own now, as a ConsumerProtocol Assignment of
  the version of its metadata;
* Heartbeat answers REBALANCE_IN_PROGRESS when the member should rejoin: the group epoch moved
  past it, it has partitions to revoke, or partitions it waits for were released;
* timers: the session (its own session timeout), a SyncGroup due within the rebalance timeout
  after the JoinGroup answer, a JoinGroup due within the rebalance timeout after a
  REBALANCE_IN_PROGRESS; a member that misses one is fenced.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Protocol

from kio.schema.errors import ErrorCode

from oncestream.coordinator.group.consumer.group import ConsumerGroup, ConsumerGroupMember
from oncestream.coordinator.group.consumer.reconciliation import MemberState
from oncestream.coordinator.group.consumer.records import (
    ClassicMemberMetadata,
    ConsumerGroupRecord,
    CurrentAssignmentRecord,
    MemberAssignmentState,
    MemberMetadataRecord,
    MemberSubscription,
    TargetAssignmentMemberRecord,
    TopicMetadata,
)
from oncestream.coordinator.group.consumer_protocol import CONSUMER_PROTOCOL_TYPE
from oncestream.coordinator.group.messages import (
    NO_MEMBER_ID,
    HeartbeatRequest,
    JoinRequest,
    JoinResult,
    LeftMember,
    SyncRequest,
    SyncResult,
)
from oncestream.coordinator.group.runtime import GroupRuntime
from oncestream.errors import (
    FencedInstanceIdError,
    GroupMaxSizeReachedError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    OnceStreamError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from oncestream.protocol.consumer_protocol import (
    Assignment as ProtocolAssignment,
)
from oncestream.protocol.consumer_protocol import (
    ConsumerProtocolError,
    decode_subscription,
    encode_assignment,
)


class _Manager(Protocol):
    """What classic members need of the ConsumerGroupManager (which owns this class)."""

    @property
    def runtime(self) -> GroupRuntime: ...

    def subscribe_and_reconcile(self, group: ConsumerGroup, member_id: str, sub: MemberSubscription,
                                old: MemberSubscription | None, owned: Mapping[uuid.UUID, frozenset[int]] | None,
                                mono_ms: int) -> None: ...

    def remove_member(self, group: ConsumerGroup, member: ConsumerGroupMember, *, bump: bool = True) -> None: ...

    def write(self, record: ConsumerGroupRecord) -> None: ...

# JoinGroup v4+ asks a dynamic member without an id to come back with one (KIP-394).
_MEMBER_ID_REQUIRED_FROM_VERSION = 4


def owned_topic_ids(owned: list[tuple[str, list[int]]], topics: Mapping[str, TopicMetadata]
                    ) -> dict[uuid.UUID, frozenset[int]]:
    """ConsumerProtocol owned partitions (topic names) as topic ids; unknown topics are dropped."""
    out: dict[uuid.UUID, set[int]] = {}
    for name, partitions in owned:
        meta = topics.get(name)
        if meta is not None and partitions:
            out.setdefault(meta.topic_id, set()).update(partitions)
    return {t: frozenset(ps) for t, ps in out.items()}


def protocol_assignment(assigned: Mapping[uuid.UUID, frozenset[int]], topics: Mapping[str, TopicMetadata],
                        metadata: bytes) -> bytes:
    """A member's partitions as ConsumerProtocol Assignment bytes of its metadata's version
    (Kafka's prepareAssignment), topics by name."""
    names = {t.topic_id: t.name for t in topics.values()}
    try:
        version = min(max(decode_subscription(metadata).version, 0), 3)
    except ConsumerProtocolError:
        version = 0
    partitions = sorted((names[t], sorted(ps)) for t, ps in assigned.items() if ps and t in names)
    return encode_assignment(ProtocolAssignment(partitions=partitions, version=version))


class ClassicMembers:
    """The classic protocol's requests on the consumer groups of one ConsumerGroupManager."""

    def __init__(self, manager: _Manager) -> None:
        self._m = manager

    # --- JoinGroup -------------------------------------------------------------------------------

    def join(self, group: ConsumerGroup, request: JoinRequest, mono_ms: int) -> JoinResult:
        """Kafka's classicGroupJoinToConsumerGroup (raises typed errors for error answers)."""
        m, rt = self._m, self._m.runtime
        member_id = request.member_id
        unknown = member_id == NO_MEMBER_ID
        if unknown:
            member_id = str(uuid.uuid4())
        if len(group.members) >= rt.config.consumer_max_size and member_id not in group.members:
            raise GroupMaxSizeReachedError(f"consumer group {group.group_id!r} is full")
        if not self._supports(group, request):
            raise InconsistentGroupProtocolError(f"Member {member_id}'s protocols are not supported.")
        if unknown and request.group_instance_id is None and request.api_version >= _MEMBER_ID_REQUIRED_FROM_VERSION:
            return JoinResult(ErrorCode.member_id_required, member_id)
        try:
            subscription = decode_subscription(request.protocols[0].metadata)
        except ConsumerProtocolError as exc:
            raise InconsistentGroupProtocolError(f"Member {member_id}'s protocols are not supported.") from exc
        existing = group.members.get(member_id)
        static = group.static_member(request.group_instance_id)
        if not unknown and existing is None and static is None:
            raise UnknownMemberIdError(f"member {member_id} is not in group {group.group_id!r}")
        if existing is not None and existing.subscription.classic is None:
            raise UnknownMemberIdError(f"member {member_id} uses the consumer protocol, not JoinGroup")
        if static is not None and static.member_id != member_id:
            if not unknown:
                raise FencedInstanceIdError(
                    f"static member {member_id} with instance id {request.group_instance_id} was fenced by "
                    f"{static.member_id}")
            existing = self._replace_static(group, static, member_id)
        old = existing.subscription if existing is not None else None
        sub = MemberSubscription(
            instance_id=request.group_instance_id,
            rack_id=subscription.rack_id,
            client_id=request.client_id,
            client_host=request.client_host,
            subscribed_topic_names=tuple(sorted(set(subscription.topics))),
            subscribed_topic_regex=None,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            server_assignor=None,
            classic=ClassicMemberMetadata(request.session_timeout_ms,
                                          tuple((p.name, p.metadata) for p in request.protocols)),
        )
        m.subscribe_and_reconcile(group, member_id, sub, old,
                                  owned_topic_ids(subscription.owned_partitions, group.subscription_metadata), mono_ms)
        member = group.members[member_id]
        group.join_deadlines.pop(member_id, None)
        group.session_deadlines[member_id] = mono_ms + request.session_timeout_ms
        group.sync_deadlines[member_id] = mono_ms + max(0, request.rebalance_timeout_ms)
        rt.touch_group(group.group_id)
        return JoinResult(
            ErrorCode.none, member_id, generation_id=member.member_epoch, protocol_type=CONSUMER_PROTOCOL_TYPE,
            protocol_name=request.protocols[0].name, leader_id="")

    # --- SyncGroup / Heartbeat ----------------------------------------------------------------------

    def sync(self, group: ConsumerGroup, request: SyncRequest, mono_ms: int) -> SyncResult:
        """Kafka's classicGroupSyncToConsumerGroup."""
        member = self._classic_member(group, request.member_id, request.group_instance_id)
        if request.generation_id != member.member_epoch:
            raise IllegalGenerationError(
                f"member {member.member_id} sent generation {request.generation_id}, its epoch is {member.member_epoch}")
        classic = _classic(member)
        protocol_name = classic.supported_protocols[0][0]
        if request.protocol_type is not None and request.protocol_type != CONSUMER_PROTOCOL_TYPE:
            raise InconsistentGroupProtocolError(
                f"The protocol type {request.protocol_type} from member {member.member_id} request is not equal to "
                f"the group protocol type {CONSUMER_PROTOCOL_TYPE}.")
        if request.protocol_name is not None and request.protocol_name != protocol_name:
            raise InconsistentGroupProtocolError(
                f"The protocol name {request.protocol_name} from member {member.member_id} request is not equal to "
                f"the protocol name {protocol_name} returned in the join response.")
        if group.group_epoch > member.member_epoch and member.assignment.state != MemberState.UNREVOKED_PARTITIONS:
            self._expect_rejoin(group, member, mono_ms)
            raise RebalanceInProgressError(
                f"A new rebalance is triggered in group {group.group_id} and member {member.member_id} should "
                "rejoin to catch up.")
        group.sync_deadlines.pop(member.member_id, None)
        group.session_deadlines[member.member_id] = mono_ms + classic.session_timeout_ms
        self._m.runtime.touch_group(group.group_id)
        assignment = protocol_assignment(member.assignment.assigned, group.subscription_metadata,
                                         classic.supported_protocols[0][1])
        return SyncResult(ErrorCode.none, assignment, CONSUMER_PROTOCOL_TYPE, protocol_name)

    def heartbeat(self, group: ConsumerGroup, request: HeartbeatRequest, mono_ms: int) -> ErrorCode:
        """Kafka's classicGroupHeartbeatToConsumerGroup."""
        member = self._classic_member(group, request.member_id, request.group_instance_id)
        if request.generation_id != member.member_epoch:
            raise IllegalGenerationError(
                f"member {member.member_id} sent generation {request.generation_id}, its epoch is {member.member_epoch}")
        group.session_deadlines[member.member_id] = mono_ms + _classic(member).session_timeout_ms
        self._m.runtime.touch_group(group.group_id)
        state = member.assignment.state
        if (member.member_epoch < group.group_epoch or state == MemberState.UNREVOKED_PARTITIONS
                or (state == MemberState.UNRELEASED_PARTITIONS and not self._waits_for_others(group, member))):
            self._expect_rejoin(group, member, mono_ms)
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    # --- LeaveGroup ------------------------------------------------------------------------------

    def leave(self, group: ConsumerGroup, member_id: str, instance_id: str | None) -> LeftMember:
        """One member of a LeaveGroup naming a classic member (by member id, or by instance id)."""
        try:
            member = self._classic_member(group, member_id, instance_id)
        except OnceStreamError as exc:
            return LeftMember(member_id, instance_id, exc.code)
        self._m.remove_member(group, member)
        return LeftMember(member_id, instance_id, ErrorCode.none)

    # --- helpers ---------------------------------------------------------------------------------

    @staticmethod
    def _supports(group: ConsumerGroup, request: JoinRequest) -> bool:
        """Kafka's supportsClassicProtocols: the consumer embedded protocol, with a protocol
        name every classic member of the group supports."""
        if request.protocol_type != CONSUMER_PROTOCOL_TYPE or not request.protocols:
            return False
        shared: set[str] | None = None
        for member in group.members.values():
            if member.subscription.classic is not None:
                names = {name for name, _ in member.subscription.classic.supported_protocols}
                shared = names if shared is None else shared & names
        return shared is None or any(p.name in shared for p in request.protocols)

    def _classic_member(self, group: ConsumerGroup, member_id: str, instance_id: str | None) -> ConsumerGroupMember:
        """Kafka's validateConsumerGroupMember + throwIfMemberDoesNotUseClassicProtocol."""
        if instance_id is not None:
            static = group.static_member(instance_id)
            if static is None:
                raise UnknownMemberIdError(f"instance id {instance_id} is unknown in group {group.group_id!r}")
            if static.member_id != member_id:
                raise FencedInstanceIdError(f"static member {member_id} was fenced by {static.member_id}")
        member = group.members.get(member_id)
        if member is None:
            raise UnknownMemberIdError(f"member {member_id} is not in group {group.group_id!r}")
        if member.subscription.classic is None:
            raise UnknownMemberIdError(f"Member {member_id} does not use the classic protocol.")
        return member

    def _replace_static(self, group: ConsumerGroup, old: ConsumerGroupMember, member_id: str) -> ConsumerGroupMember:
        """A restarted static member takes over its old incarnation: its subscription, target
        and partitions, with no new group epoch (Kafka's replaceMember, KIP-345)."""
        m, gid = self._m, group.group_id
        target = group.target.get(old.member_id, {})
        a = old.assignment
        epoch = a.member_epoch if a.member_epoch >= 0 else a.previous_member_epoch
        m.remove_member(group, old, bump=False)
        m.write(MemberMetadataRecord(gid, member_id, old.subscription))
        m.write(TargetAssignmentMemberRecord(gid, member_id, target))
        m.write(CurrentAssignmentRecord(gid, member_id, MemberAssignmentState(
            epoch, epoch, int(MemberState.STABLE), a.assigned, {})))
        return group.members[member_id]

    def _expect_rejoin(self, group: ConsumerGroup, member: ConsumerGroupMember, mono_ms: int) -> None:
        """Kafka's scheduleConsumerGroupJoinTimeoutIfAbsent."""
        group.join_deadlines.setdefault(member.member_id,
                                        mono_ms + max(0, member.subscription.rebalance_timeout_ms))

    @staticmethod
    def _waits_for_others(group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
        """Kafka's waitingOnUnreleasedPartition: some partition of its target is still held."""
        target = group.target.get(member.member_id, {})
        for topic_id, partitions in target.items():
            mine = member.assignment.assigned.get(topic_id, frozenset())
            for p in partitions - mine:
                if (topic_id, p) in group.partition_epochs:
                    return True
        return False


def _classic(member: ConsumerGroupMember) -> ClassicMemberMetadata:
    classic = member.subscription.classic
    if classic is None:  # callers checked; a broken invariant otherwise
        raise UnknownMemberIdError(f"Member {member.member_id} does not use the classic protocol.")
    return classic
