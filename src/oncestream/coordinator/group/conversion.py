"""Online conversions between a classic group and a KIP-848 consumer group with members (Kafka's
convertToConsumerGroup / convertToClassicGroup), as ``group.consumer.migration.policy``
(migration.py) allows them: the upgrade when a consumer-protocol member joins a classic group, the
downgrade when the last consumer-protocol member leaves and only classic members remain."""

from __future__ import annotations

import uuid
from collections import Counter

from kio.schema.errors import ErrorCode

from oncestream.coordinator.group.consumer.classic_members import owned_topic_ids, protocol_assignment
from oncestream.coordinator.group.consumer.group import ConsumerGroup
from oncestream.coordinator.group.consumer.manager import ConsumerGroupManager
from oncestream.coordinator.group.consumer.messages import TopicsView
from oncestream.coordinator.group.consumer.records import ClassicMemberMetadata, MemberSubscription
from oncestream.coordinator.group.consumer_protocol import CONSUMER_PROTOCOL_TYPE
from oncestream.coordinator.group.group import GroupMetadata
from oncestream.coordinator.group.member import MemberMetadata
from oncestream.coordinator.group.membership import GroupMetadataManager
from oncestream.coordinator.group.messages import JoinResult, SyncResult
from oncestream.coordinator.group.migration import ConsumerGroupMigrationPolicy
from oncestream.coordinator.group.records import GroupSnapshot, MemberSnapshot, group_metadata_record
from oncestream.coordinator.group.runtime import GroupRuntime
from oncestream.errors import GroupIdNotFoundError
from oncestream.protocol.consumer_protocol import ConsumerProtocolError, decode_assignment, decode_subscription


def online_downgrade_allowed(policy: ConsumerGroupMigrationPolicy, group: ConsumerGroup, leaving_member_id: str | None,
                             classic_max_size: int) -> bool:
    """Kafka's validateOnlineDowngrade: once ``leaving_member_id`` (None: already gone) is out,
    the group still has members, all of them classic, and the policy and group.max.size allow."""
    remaining = [m for m_id, m in group.members.items() if m_id != leaving_member_id]
    return (bool(remaining) and group.all_classic_but(leaving_member_id) and policy.downgrade_enabled
            and len(remaining) <= classic_max_size)


class GroupConverter:
    """Online conversions between a classic group and a consumer group with members (Kafka's
    convertToConsumerGroup / convertToClassicGroup). Both write their records through the managers'
    own paths, so a restart replays to the converted group."""

    def __init__(self, runtime: GroupRuntime, membership: GroupMetadataManager, consumer: ConsumerGroupManager,
                 topics: TopicsView) -> None:
        self._rt = runtime
        self._membership = membership
        self._consumer = consumer
        self._topics = topics

    def upgrade(self, classic: GroupMetadata) -> None:
        """The classic group becomes a consumer group: each member keeps its last assignment at
        epoch = the classic generation (Stable), its subscription read from its metadata. Waiting
        JoinGroup/SyncGroup requests hear REBALANCE_IN_PROGRESS (they rejoin the new group)."""
        group_id = classic.group_id
        topics = self._topics()
        by_name = {name: t for name, t in topics.items()}
        converted: list[tuple[MemberMetadata, MemberSubscription, dict[uuid.UUID, frozenset[int]]]] = []
        for member in classic.members.values():
            protocol = classic.protocol_name if classic.protocol_name in member.protocol_names() else None
            metadata = member.metadata_for(protocol) if protocol is not None else member.protocols[0].metadata
            try:
                subscription = decode_subscription(metadata)
                assignment = decode_assignment(member.assignment)
            except ConsumerProtocolError as exc:
                raise GroupIdNotFoundError(
                    f"Cannot upgrade the classic group {group_id} to consumer group because the embedded consumer "
                    "protocol is malformed.") from exc
            assigned = owned_topic_ids([(t, list(ps)) for t, ps in _by_topic(assignment.partitions).items()], by_name)
            sub = MemberSubscription(
                member.group_instance_id, subscription.rack_id, member.client_id, member.client_host,
                tuple(sorted(set(subscription.topics))), None, member.rebalance_timeout_ms, None,
                ClassicMemberMetadata(member.session_timeout_ms, tuple((p.name, p.metadata) for p in member.protocols)))
            converted.append((member, sub, assigned))
        for member in classic.members.values():
            self._rt.invoke_join(member, JoinResult(ErrorCode.rebalance_in_progress, member.member_id))
            self._rt.invoke_sync(member, SyncResult(ErrorCode.rebalance_in_progress))
        # The classic group's metadata goes; its offsets stay with an Empty holder (as for an empty group).
        self._rt.emit(group_id, group_metadata_record(group_id, None))
        shell = GroupMetadata(group_id, self._rt.wall_ms)
        shell.offsets, shell.pending_txn_offsets = classic.offsets, classic.pending_txn_offsets
        self._rt.groups[group_id] = shell
        self._consumer.create_converted(group_id, classic.generation_id,
                                        [(m.member_id, sub, assigned) for m, sub, assigned in converted],
                                        self._rt.mono_ms)

    def downgrade(self, group: ConsumerGroup, leaving_member_id: str | None, *, rebalance: bool = True) -> bool:
        """The consumer group, ``leaving_member_id`` gone and only classic members left, becomes a
        classic group at generation = the group epoch, each member holding its target
        assignment, and (``rebalance``: a member left) a classic rebalance starts (Kafka's
        convertToClassicGroup; a static member replacing the last consumer-protocol one causes no
        rebalance: it holds the assignment it took over). False (and
        nothing done) if the members share no protocol."""
        group_id = group.group_id
        topics = group.subscription_metadata
        members = [(m, m.subscription.classic) for m in group.members.values()
                   if m.subscription.classic is not None and m.member_id != leaving_member_id]
        if not members:
            return False
        candidates = set.intersection(*({name for name, _ in c.supported_protocols} for _, c in members))
        if not candidates:
            return False
        votes = Counter(next(name for name, _ in c.supported_protocols if name in candidates) for _, c in members)
        protocol = max(sorted(votes), key=lambda n: votes[n])
        snapshot_members = []
        for member, classic in members:
            metadata = dict(classic.supported_protocols)[protocol]
            snapshot_members.append(MemberSnapshot(
                member.member_id, member.instance_id, member.subscription.client_id, member.subscription.client_host,
                max(0, member.subscription.rebalance_timeout_ms), classic.session_timeout_ms, metadata,
                protocol_assignment(group.target.get(member.member_id, {}), topics, metadata)))
        snapshot = GroupSnapshot(CONSUMER_PROTOCOL_TYPE, group.group_epoch, protocol, snapshot_members[0].member_id,
                                 self._rt.wall_ms, tuple(snapshot_members))
        self._consumer.write_tombstones(group)
        classic_group = GroupMetadata.from_snapshot(group_id, snapshot, self._rt.wall_ms, self._rt.mono_ms)
        holder = self._rt.groups.get(group_id)
        if holder is not None:
            classic_group.offsets, classic_group.pending_txn_offsets = holder.offsets, holder.pending_txn_offsets
        self._rt.groups[group_id] = classic_group
        self._rt.emit(group_id, group_metadata_record(group_id, snapshot))
        if rebalance:
            self._membership.rebalance_converted(classic_group, self._rt.mono_ms)
        self._rt.touch_group(group_id)
        return True


def _by_topic(partitions: list[tuple[str, list[int]]]) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for topic, ps in partitions:
        out.setdefault(topic, set()).update(ps)
    return out
