"""One classic group: state, membership, protocol selection, timers and offsets (Kafka's
GroupMetadata). Pure bookkeeping: it never answers a request or writes a record itself; the
coordinator decides what happens and when, and this object keeps the invariants.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from oncestream.coordinator.group.consumer_protocol import (
    CONSUMER_PROTOCOL_TYPE,
    union_of_subscriptions,
)
from oncestream.coordinator.group.member import JoinCallback, MemberMetadata
from oncestream.coordinator.group.messages import (
    JoinedMember,
    JoinProtocol,
    OffsetAndMetadata,
    TopicPartition,
)
from oncestream.coordinator.group.records import GroupSnapshot, MemberSnapshot
from oncestream.coordinator.group.state import (
    GroupState,
    can_transition,
    check_transition,
)
from oncestream.errors import CoordinatorInvariantError, FencedInstanceIdError, UnknownMemberIdError


@dataclass(frozen=True)
class JoinTimer:
    """The pending completion of the join phase (Kafka's DelayedJoin / InitialDelayedJoin).

    An initial timer (first rebalance of an Empty group, group.initial.rebalance.delay.ms) never
    completes early; when it fires while new members keep arriving it re-arms for another delay
    until ``remaining_ms`` of the rebalance timeout is used up.
    """

    deadline_ms: int
    initial: bool
    delay_ms: int = 0
    remaining_ms: int = 0


@dataclass(frozen=True)
class SyncTimer:
    """Members that got their JoinGroup answer must SyncGroup within the rebalance timeout."""

    deadline_ms: int
    generation_id: int


@dataclass(frozen=True)
class CommittedOffset:
    """An offset plus its position among the records this coordinator wrote or loaded.

    ``log_order`` stands for the record's offset in __consumer_offsets: a committed transaction
    only overrides a plain commit that was written before its own pending record.
    """

    value: OffsetAndMetadata
    log_order: int


class GroupMetadata:
    """State of one classic group."""

    def __init__(self, group_id: str, now_ms: int) -> None:
        self.group_id = group_id
        self.state = GroupState.EMPTY
        self.state_timestamp_ms = now_ms
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        # Insertion ordered: join order decides the first leader and protocol vote tie-breaks.
        self.members: dict[str, MemberMetadata] = {}
        # KIP-394: member ids handed out with MEMBER_ID_REQUIRED -> deadline to rejoin by.
        self.pending_members: dict[str, int] = {}
        # Members that got their JoinGroup answer for this generation but have not synced yet.
        self.pending_sync_members: set[str] = set()
        # group.instance.id -> member id owning it.
        self.static_members: dict[str, str] = {}
        self._supported_protocols: Counter[str] = Counter()
        # Set when a member joins during the initial delay so the delay is extended once more.
        self.new_member_added = False
        self.join_timer: JoinTimer | None = None
        self.sync_timer: SyncTimer | None = None
        self.subscribed_topics: frozenset[str] | None = None
        self.offsets: dict[TopicPartition, CommittedOffset] = {}
        self.pending_txn_offsets: dict[int, dict[TopicPartition, CommittedOffset]] = {}

    # --- state --------------------------------------------------------------------------------

    def is_(self, state: GroupState) -> bool:
        """True when the group is in ``state``."""
        return self.state is state

    def can_rebalance(self) -> bool:
        """Whether PreparingRebalance may be entered from the current state."""
        return can_transition(self.state, GroupState.PREPARING_REBALANCE)

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        """Move to ``target``; raises IllegalGroupStateTransitionError if the table forbids it."""
        check_transition(self.group_id, self.state, target)
        self.state = target
        self.state_timestamp_ms = now_ms

    # --- membership ---------------------------------------------------------------------------

    def has(self, member_id: str) -> bool:
        """Whether ``member_id`` is a (non-pending) member."""
        return member_id in self.members

    def get(self, member_id: str) -> MemberMetadata:
        """The member ``member_id`` (must exist)."""
        return self.members[member_id]

    def is_pending(self, member_id: str) -> bool:
        """Whether ``member_id`` was handed out with MEMBER_ID_REQUIRED and has not rejoined."""
        return member_id in self.pending_members

    def add_pending_member(self, member_id: str, deadline_ms: int) -> None:
        """Remember a KIP-394 member id that must rejoin by ``deadline_ms``."""
        if member_id in self.members:
            raise CoordinatorInvariantError(
                f"group {self.group_id}: member {member_id} is already a member, it cannot also be pending")
        self.pending_members[member_id] = deadline_ms

    def add(self, member: MemberMetadata, callback: JoinCallback | None) -> None:
        """Add a member (it becomes leader if there is none); it may be awaiting its JoinGroup."""
        if member.member_id in self.members:
            raise CoordinatorInvariantError(f"duplicate member {member.member_id}")
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.protocol_type != member.protocol_type:
            raise CoordinatorInvariantError("protocol type checked before add")
        self.members[member.member_id] = member
        self._supported_protocols.update(member.protocol_names())
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise CoordinatorInvariantError(
                    f"group {self.group_id}: static instance {member.group_instance_id} already belongs to member "
                    f"{self.static_members[member.group_instance_id]}")
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.pending_members.pop(member.member_id, None)
        member.join_callback = callback

    def remove(self, member_id: str) -> MemberMetadata | None:
        """Remove a member or pending member; the leader moves to the oldest remaining member.

        Outstanding callbacks of the removed member are the caller's to answer first.
        """
        self.pending_members.pop(member_id, None)
        self.pending_sync_members.discard(member_id)
        if not self.pending_sync_members:
            self.sync_timer = None
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self._supported_protocols.subtract(member.protocol_names())
        self._supported_protocols += Counter()  # drop zero counts
        if member.group_instance_id is not None:
            self.static_members.pop(member.group_instance_id, None)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def update_member(
        self,
        member: MemberMetadata,
        protocols: tuple[JoinProtocol, ...],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        callback: JoinCallback | None,
    ) -> JoinCallback | None:
        """Refresh a rejoining member; returns a superseded JoinGroup callback, if any."""
        if member.member_id not in self.members:
            raise CoordinatorInvariantError(
                f"group {self.group_id}: member {member.member_id} cannot be updated, it is not a member")
        self._supported_protocols.subtract(member.protocol_names())
        member.protocols = tuple(protocols)
        self._supported_protocols.update(member.protocol_names())
        self._supported_protocols += Counter()
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        superseded = member.join_callback
        member.join_callback = callback
        return superseded

    def replace_static_member(
        self, instance_id: str, old_member_id: str, new_member_id: str
    ) -> None:
        """KIP-345: hand ``instance_id`` (and the member's assignment) to a new member id.

        The old id's outstanding callbacks must already have been answered (fenced).
        """
        member = self.members.pop(old_member_id)
        if not (member.join_callback is None and member.sync_callback is None):
            raise CoordinatorInvariantError(
                f"group {self.group_id}: static member {old_member_id} still has an unanswered JoinGroup or SyncGroup "
                "when its instance id is handed over")
        if self.static_members.get(instance_id) != old_member_id:
            raise CoordinatorInvariantError(f"group {self.group_id}: static instance {instance_id} belongs to member "
                f"{self.static_members.get(instance_id)}, not to {old_member_id}")
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        if old_member_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_member_id)
            self.pending_sync_members.add(new_member_id)
        self.static_members[instance_id] = new_member_id

    def current_static_member_id(self, instance_id: str | None) -> str | None:
        """The member id currently owning ``instance_id``."""
        return None if instance_id is None else self.static_members.get(instance_id)

    def is_static_member_fenced(self, instance_id: str | None, member_id: str) -> bool:
        """A request naming ``instance_id`` with a member id that no longer owns it."""
        owner = self.current_static_member_id(instance_id)
        return owner is not None and owner != member_id

    def num_awaiting_join(self) -> int:
        """Members whose JoinGroup response is outstanding."""
        return sum(1 for m in self.members.values() if m.is_awaiting_join)

    def has_all_members_joined(self) -> bool:
        """Every known member has rejoined and no KIP-394 member id is still outstanding."""
        return len(self.members) == self.num_awaiting_join() and not self.pending_members

    def not_yet_rejoined_members(self) -> list[MemberMetadata]:
        """Members that have not sent JoinGroup in the current rebalance."""
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else pick any rejoined member; False if none rejoined."""
        if self.leader_id is None:
            return False
        if self.members[self.leader_id].is_awaiting_join:
            return True
        for member_id, member in self.members.items():
            if member.is_awaiting_join:
                self.leader_id = member_id
                return True
        return False

    def rebalance_timeout_ms(self) -> int:
        """The largest rebalance timeout among members (the join phase waits that long)."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # --- protocols ----------------------------------------------------------------------------

    def supports_protocols(self, protocol_type: str, protocol_names: tuple[str, ...]) -> bool:
        """Whether a member with these protocols may join (else INCONSISTENT_GROUP_PROTOCOL)."""
        if self.is_(GroupState.EMPTY):
            return bool(protocol_type) and bool(protocol_names)
        return self.protocol_type == protocol_type and any(
            self._supported_protocols[name] == len(self.members) for name in protocol_names
        )

    def candidate_protocols(self) -> list[str]:
        """Protocols every member supports."""
        return [name for name, n in self._supported_protocols.items() if n == len(self.members)]

    def select_protocol(self) -> str:
        """Each member votes for its most preferred common protocol; most votes wins.

        Ties (Kafka leaves them to hash order) go to the protocol voted first in join order, so
        the outcome is deterministic.
        """
        if not self.members:
            raise CoordinatorInvariantError("cannot select a protocol for a group without members")
        candidates = self.candidate_protocols()
        if not candidates:
            raise CoordinatorInvariantError("join checks guarantee a protocol common to all members")
        votes = [m.vote(candidates) for m in self.members.values()]
        tally = Counter(votes)
        best = max(tally.values())
        return next(v for v in votes if tally[v] == best)

    def init_next_generation(self, now_ms: int) -> None:
        """Bump the generation and pick the protocol: CompletingRebalance, or Empty if no member."""
        self.generation_id += 1
        self.pending_sync_members.clear()
        self.sync_timer = None
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.EMPTY, now_ms)

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        """Topics a "consumer" group subscribes to, from the members' subscriptions (else None)."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return frozenset()
        if self.protocol_name is None:
            return None
        name = self.protocol_name
        return union_of_subscriptions(m.metadata_for(name) for m in self.members.values())

    def is_subscribed_to_topic(self, topic: str) -> bool:
        """Whether the group reads ``topic``; unknown subscriptions count as subscribed (safe)."""
        return True if self.subscribed_topics is None else topic in self.subscribed_topics

    def current_member_metadata(self) -> tuple[JoinedMember, ...]:
        """What the leader receives in its JoinGroup response."""
        if self.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            raise CoordinatorInvariantError(
                f"group {self.group_id}: member metadata is only handed out in CompletingRebalance or Stable, "
                f"not {self.state.name}")
        if self.protocol_name is None:
            raise CoordinatorInvariantError(f"group {self.group_id}: no protocol was chosen for generation {self.generation_id}")
        name = self.protocol_name
        return tuple(
            JoinedMember(m.member_id, m.group_instance_id, m.metadata_for(name))
            for m in self.members.values()
        )

    # --- persistence --------------------------------------------------------------------------

    def snapshot(self) -> GroupSnapshot:
        """The durable part of the group, as the group metadata record stores it.

        Only written in Empty, CompletingRebalance and Stable, where every member supports the
        selected protocol; while rebalancing a newcomer may not, and its subscription reads empty.
        """
        settled = self.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE)
        if settled and self.protocol_name is None:
            raise CoordinatorInvariantError("a settled group with members has a protocol")
        name = self.protocol_name
        members = tuple(
            MemberSnapshot(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                session_timeout_ms=m.session_timeout_ms,
                subscription=(
                    m.metadata_for(name) if name in m.protocol_names() else b""
                ),
                assignment=m.assignment,
            )
            for m in self.members.values()
        )
        return GroupSnapshot(
            protocol_type=self.protocol_type,
            generation_id=self.generation_id,
            protocol_name=self.protocol_name,
            leader_id=self.leader_id,
            state_timestamp_ms=self.state_timestamp_ms,
            members=members,
        )

    @classmethod
    def from_snapshot(cls, group_id: str, snapshot: GroupSnapshot, wall_ms: int, mono_ms: int) -> GroupMetadata:
        """Rebuild a loaded group: Stable if it has members, else Empty (as Kafka loads it).
        Members get a fresh session from ``mono_ms`` (a persisted time says nothing about when
        this process last heard from them)."""
        group = cls(group_id, wall_ms)
        group.generation_id = snapshot.generation_id
        group.protocol_type = snapshot.protocol_type
        group.protocol_name = snapshot.protocol_name if snapshot.members else None
        group.state_timestamp_ms = snapshot.state_timestamp_ms
        for m in snapshot.members:
            if snapshot.protocol_name is None or snapshot.protocol_type is None:
                raise CoordinatorInvariantError(f"group {group_id!r} has members but no protocol")
            member = MemberMetadata(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                session_timeout_ms=m.session_timeout_ms,
                protocol_type=snapshot.protocol_type,
                protocols=(JoinProtocol(snapshot.protocol_name, m.subscription),),
                assignment=m.assignment,
                heartbeat_deadline_ms=mono_ms + m.session_timeout_ms,
            )
            group.add(member, None)
        if snapshot.members:
            # Loading is not a transition: the log says the group had completed a rebalance.
            group.state = GroupState.STABLE
            group.leader_id = snapshot.leader_id if snapshot.leader_id in group.members else (
                next(iter(group.members))
            )
        group.subscribed_topics = group.compute_subscribed_topics()
        return group

    # --- offsets ------------------------------------------------------------------------------

    def has_offsets(self) -> bool:
        """Committed or pending transactional offsets exist (the group must be kept)."""
        return bool(self.offsets) or any(self.pending_txn_offsets.values())

    def has_pending_txn_offset(self, tp: TopicPartition) -> bool:
        """An open transaction has a pending offset for ``tp`` (RequireStable: unstable)."""
        return any(tp in pending for pending in self.pending_txn_offsets.values())

    def remove_offsets(
        self, partitions: list[TopicPartition]
    ) -> tuple[list[TopicPartition], list[tuple[int, TopicPartition]]]:
        """Drop committed and pending offsets of ``partitions``.

        Returns (committed partitions removed, (producer id, partition) pending entries removed).
        """
        removed: list[TopicPartition] = []
        removed_pending: list[tuple[int, TopicPartition]] = []
        for tp in partitions:
            for producer_id, pending in self.pending_txn_offsets.items():
                if pending.pop(tp, None) is not None:
                    removed_pending.append((producer_id, tp))
            if self.offsets.pop(tp, None) is not None:
                removed.append(tp)
        self.pending_txn_offsets = {pid: p for pid, p in self.pending_txn_offsets.items() if p}
        return removed, removed_pending

    def remove_all_offsets(self) -> tuple[list[TopicPartition], list[tuple[int, TopicPartition]]]:
        """Drop every committed and pending offset (DeleteGroups)."""
        partitions = set(self.offsets)
        for pending in self.pending_txn_offsets.values():
            partitions |= set(pending)
        return self.remove_offsets(sorted(partitions))

    def remove_expired_offsets(
        self, now_ms: int, retention_ms: int, keep_topics: frozenset[str] = frozenset()
    ) -> list[TopicPartition]:
        """KIP-211 offset expiry; returns the partitions whose committed offset was dropped.

        Empty group with a protocol type: retention counts from when it became Empty. Stable
        consumer group that knows its subscription: offsets of topics it no longer reads expire
        from their commit time. No protocol type (only "simple" commits): from commit time.
        An explicit v1-v4 expire timestamp always wins. ``keep_topics``: topics a KIP-848
        consumer group (whose offsets this holder keeps) still subscribes to never expire.
        """
        if self.protocol_type is not None and self.is_(GroupState.EMPTY):
            state_ts = self.state_timestamp_ms
            expired = self._expired(now_ms, retention_ms, lambda c: state_ts, frozenset())
        elif (
            self.protocol_type == CONSUMER_PROTOCOL_TYPE
            and self.subscribed_topics is not None
            and self.is_(GroupState.STABLE)
        ):
            expired = self._expired(
                now_ms, retention_ms, lambda c: c.value.commit_timestamp_ms, self.subscribed_topics
            )
        elif self.protocol_type is None:
            expired = self._expired(
                now_ms, retention_ms, lambda c: c.value.commit_timestamp_ms, keep_topics
            )
        else:
            expired = []
        for tp in expired:
            del self.offsets[tp]
        return expired

    def _expired(
        self,
        now_ms: int,
        retention_ms: int,
        base_ts: Callable[[CommittedOffset], int],
        subscribed: frozenset[str],
    ) -> list[TopicPartition]:
        out = []
        for tp, committed in self.offsets.items():
            if tp.topic in subscribed:
                continue
            expire_ts = committed.value.expire_timestamp_ms
            if expire_ts is None:
                if now_ms - base_ts(committed) >= retention_ms:
                    out.append(tp)
            elif now_ms >= expire_ts:
                out.append(tp)
        return sorted(out)


def validate_current_member(group: GroupMetadata, member_id: str, instance_id: str | None) -> None:
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
