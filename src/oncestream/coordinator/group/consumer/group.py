"""One consumer group (KIP-848) and its members: pure state, changed only by applying records.

The manager never mutates a group directly: it writes records (records.py) and this module applies
them, the same function a replay of __consumer_offsets uses. So what a restarted broker rebuilds is
exactly what was served. Timers (session and rebalance deadlines, monotonic ms) are the only state
not in records; a load gives every member a fresh session, as Kafka does.

Group states (derived, as Kafka's ConsumerGroup.maybeUpdateGroupState):

=============  ==================================================================
Empty          no members
Assigning      the group epoch is ahead of the target assignment's epoch
Reconciling    some member is not STABLE at the target assignment's epoch
Stable         every member is STABLE at the target assignment's epoch
=============  ==================================================================
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace

from oncestream.coordinator.group.consumer.reconciliation import NO_OWNER_EPOCH, MemberState, Reconciled
from oncestream.coordinator.group.consumer.records import (
    Assignment,
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
)
from oncestream.errors import CoordinatorInvariantError

EMPTY, ASSIGNING, RECONCILING, STABLE, DEAD = "Empty", "Assigning", "Reconciling", "Stable", "Dead"
CONSUMER_GROUP_TYPE = "consumer"
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2

_NEW_MEMBER_ASSIGNMENT = Reconciled(0, 0, MemberState.STABLE, {}, {})


@dataclass(frozen=True)
class ConsumerGroupMember:
    """One member: what the client told us (subscription) and where its reconciliation is."""

    member_id: str
    subscription: MemberSubscription
    assignment: Reconciled = _NEW_MEMBER_ASSIGNMENT

    @property
    def member_epoch(self) -> int:
        return self.assignment.member_epoch

    @property
    def instance_id(self) -> str | None:
        return self.subscription.instance_id

    def is_reconciled_to(self, epoch: int) -> bool:
        return self.assignment.state == MemberState.STABLE and self.assignment.member_epoch == epoch


@dataclass
class ConsumerGroup:
    """State of one consumer group (see the module docstring)."""

    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    subscription_metadata: dict[str, TopicMetadata] = field(default_factory=dict)
    members: dict[str, ConsumerGroupMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    # (topic id, partition) -> epoch of the member holding it (assigned or pending revocation).
    partition_epochs: dict[tuple[uuid.UUID, int], int] = field(default_factory=dict)
    # Timers (monotonic ms), not persisted.
    session_deadlines: dict[str, int] = field(default_factory=dict)
    rebalance_deadlines: dict[str, tuple[int, int]] = field(default_factory=dict)  # member -> (deadline, epoch)
    # Classic members (classic_members.py): a JoinGroup due after REBALANCE_IN_PROGRESS, a
    # SyncGroup due after the JoinGroup answer.
    join_deadlines: dict[str, int] = field(default_factory=dict)
    sync_deadlines: dict[str, int] = field(default_factory=dict)
    # Members with a request the broker holds (its records being persisted), by count: their
    # session does not run out meanwhile (manager.hold_member), not persisted.
    held: dict[str, int] = field(default_factory=dict)

    @property
    def state(self) -> str:
        if not self.members:
            return EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ASSIGNING
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return RECONCILING
        return STABLE

    def static_member(self, instance_id: str | None) -> ConsumerGroupMember | None:
        if instance_id is None:
            return None
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)

    def all_classic_but(self, member_id: str | None = None) -> bool:
        """Every member other than ``member_id`` speaks the classic protocol (Kafka's
        allMembersUseClassicProtocolExcept)."""
        return all(m.subscription.classic is not None for m_id, m in self.members.items() if m_id != member_id)

    def partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        return self.partition_epochs.get((topic_id, partition), NO_OWNER_EPOCH)

    def next_deadline_ms(self) -> int | None:
        deadlines = [d for member_id, d in self.session_deadlines.items() if member_id not in self.held]
        deadlines.extend(d for d, _ in self.rebalance_deadlines.values())
        deadlines.extend(self.join_deadlines.values())
        deadlines.extend(self.sync_deadlines.values())
        return min(deadlines, default=None)

    # --- applying records -------------------------------------------------------------------------

    def apply(self, record: ConsumerGroupRecord) -> None:
        """Apply one record of this group (tombstone handling included). The group epoch
        tombstone is handled by the owner of the group map (it deletes the group)."""
        if isinstance(record, GroupEpochRecord):
            if record.epoch is not None:
                self.group_epoch = record.epoch
        elif isinstance(record, SubscriptionMetadataRecord):
            self.subscription_metadata = {t.name: t for t in record.topics or ()}
        elif isinstance(record, MemberMetadataRecord):
            if record.subscription is None:
                self._remove_member(record.member_id)
            else:
                old = self.members.get(record.member_id)
                self.members[record.member_id] = (
                    ConsumerGroupMember(record.member_id, record.subscription) if old is None
                    else replace(old, subscription=record.subscription))
        elif isinstance(record, TargetAssignmentEpochRecord):
            self.assignment_epoch = record.epoch if record.epoch is not None else 0
        elif isinstance(record, TargetAssignmentMemberRecord):
            if record.assignment is None:
                self.target.pop(record.member_id, None)
            else:
                self.target[record.member_id] = record.assignment
        elif isinstance(record, CurrentAssignmentRecord):
            self._apply_current_assignment(record.member_id, record.assignment)
        else:  # pragma: no cover - the union is closed
            raise TypeError(f"not a consumer group record: {record!r}")

    def _apply_current_assignment(self, member_id: str, value: MemberAssignmentState | None) -> None:
        old = self.members.get(member_id)
        if old is not None:
            self._release(old)
        if value is None:
            if old is not None:
                self.members[member_id] = replace(old, assignment=Reconciled(
                    LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_MEMBER_EPOCH, MemberState.STABLE, {}, {}))
            return
        reconciled = Reconciled(value.member_epoch, value.previous_member_epoch, MemberState.of(value.state),
                                value.assigned, value.pending_revocation)
        if old is None:
            # Replay after compaction may bring the assignment before the subscription.
            old = ConsumerGroupMember(member_id, MemberSubscription(None, None, "", "", (), None, -1, None))
        member = replace(old, assignment=reconciled)
        self.members[member_id] = member
        for owned in (reconciled.assigned, reconciled.pending_revocation):
            for topic_id, partitions in owned.items():
                for p in partitions:
                    holder = self.partition_epochs.get((topic_id, p))
                    if holder is not None:
                        raise CoordinatorInvariantError(
                            f"group {self.group_id!r}: partition {topic_id}-{p} given to {member_id} "
                            f"while held at epoch {holder}")
                    self.partition_epochs[(topic_id, p)] = reconciled.member_epoch

    def _release(self, member: ConsumerGroupMember) -> None:
        for owned in (member.assignment.assigned, member.assignment.pending_revocation):
            for topic_id, partitions in owned.items():
                for p in partitions:
                    self.partition_epochs.pop((topic_id, p), None)

    def _remove_member(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self._release(member)
        self.session_deadlines.pop(member_id, None)
        self.rebalance_deadlines.pop(member_id, None)
        self.join_deadlines.pop(member_id, None)
        self.sync_deadlines.pop(member_id, None)
