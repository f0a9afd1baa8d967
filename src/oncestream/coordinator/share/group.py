"""Share-group membership (KIP-932): ShareGroupHeartbeat, member expiry and Kafka's simple
assignor. Sans-io; the topics a group subscribes to are looked up through a callable.

Share groups have no revocation step: a member's assignment changes at once and several members
may share a partition (the share-partition hands each record to one of them). So a member's epoch
becomes the group epoch as soon as it heartbeats after a change.

Membership is not persisted: after a broker restart every member's next heartbeat gets
UNKNOWN_MEMBER_ID and it joins again with epoch 0 (what a Kafka client does after a coordinator
change). What must survive, the share-partition state, is persisted separately (records.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

JOIN_EPOCH = 0
LEAVE_EPOCH = -1

# (topic id, number of partitions) of a topic name, or None when it does not exist.
TopicLookup = Callable[[str], "tuple[uuid.UUID, int] | None"]
Assignment = dict[uuid.UUID, frozenset[int]]


@dataclass(frozen=True)
class ShareGroupConfig:
    session_timeout_ms: int = 45000  # group.share.session.timeout.ms
    heartbeat_interval_ms: int = 5000  # group.share.heartbeat.interval.ms
    max_size: int = 200  # group.share.max.size


@dataclass
class ShareMember:
    member_id: str
    member_epoch: int = 0
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topics: tuple[str, ...] = ()
    assignment: Assignment = field(default_factory=dict)
    deadline_ms: int = 0


@dataclass
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    # Subscribed topic name -> (id, partitions) when the assignment was computed: a change (new
    # partitions, a topic created or deleted) bumps the group epoch as Kafka's metadata hash does.
    topic_metadata: dict[str, tuple[uuid.UUID, int] | None] = field(default_factory=dict)

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"


@dataclass(frozen=True)
class HeartbeatResult:
    error: ErrorCode
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None  # None: unchanged since the member's last heartbeat
    error_message: str | None = None
    left: str | None = None  # a member that left (the caller releases its records)


def java_string_hash(text: str) -> int:
    """Java's String.hashCode (UTF-16 code units), which Kafka's simple assignor hashes by."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def simple_assign(members: dict[str, ShareMember], topics: dict[str, tuple[uuid.UUID, int] | None]) -> dict[str, Assignment]:
    """Kafka 4.x's SimpleAssignor (KIP-932): each member is hashed onto one of its subscribed
    partitions; partitions nobody got and nobody held are dealt round-robin; partitions members
    already hold stay with them while they still subscribe. A partition may go to several
    members; every subscribed partition goes to at least one."""
    per_member: dict[str, list[tuple[uuid.UUID, int]]] = {}
    subscribers: dict[uuid.UUID, list[str]] = {}
    for member_id, member in members.items():
        targets: list[tuple[uuid.UUID, int]] = []
        for name in member.subscribed_topics:
            meta = topics.get(name)
            if meta is None:
                continue
            topic_id, count = meta
            targets.extend((topic_id, p) for p in range(count))
            subscribers.setdefault(topic_id, [])
            if member_id not in subscribers[topic_id]:
                subscribers[topic_id].append(member_id)
        per_member[member_id] = targets
    current: dict[tuple[uuid.UUID, int], list[str]] = {}
    for member_id, member in members.items():
        for held_topic, held in member.assignment.items():
            for p in held:
                current.setdefault((held_topic, p), []).append(member_id)
    new: dict[tuple[uuid.UUID, int], list[str]] = {}
    for member_id, targets in per_member.items():
        if targets:
            index = abs(java_string_hash(member_id) % len(targets))
            new.setdefault(targets[index], []).append(member_id)
    unassigned: dict[uuid.UUID, list[tuple[uuid.UUID, int]]] = {}
    seen: set[tuple[uuid.UUID, int]] = set()
    for targets in per_member.values():
        for tp in targets:
            if tp not in seen and tp not in new and tp not in current:
                unassigned.setdefault(tp[0], []).append(tp)
            seen.add(tp)
    for topic_id, pending in unassigned.items():
        candidates = subscribers[topic_id]
        for i, tp in enumerate(pending):
            new.setdefault(tp, []).append(candidates[i % len(candidates)])
    final: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
    for tp, holders in current.items():
        for member_id in holders:
            if member_id in members and tp in per_member[member_id]:
                final[member_id].setdefault(tp[0], set()).add(tp[1])
    for tp, holders in new.items():
        for member_id in holders:
            final[member_id].setdefault(tp[0], set()).add(tp[1])
    return {m: {t: frozenset(ps) for t, ps in a.items()} for m, a in final.items()}


class ShareGroupCoordinator:
    """Every share group's membership."""

    def __init__(self, config: ShareGroupConfig, topic_lookup: TopicLookup,
                 group_config: Callable[[str], ShareGroupConfig] | None = None) -> None:
        """``config`` is the broker's; ``group_config(group_id)`` a group's own session timeout
        and heartbeat interval over it (KIP-932 group configs; the broker's when omitted)."""
        self.config = config
        self._lookup = topic_lookup
        self._group_config = group_config or (lambda group_id: config)
        self._groups: dict[str, ShareGroup] = {}

    def group(self, group_id: str) -> ShareGroup | None:
        return self._groups.get(group_id)

    def group_ids(self) -> list[str]:
        return list(self._groups)

    def ensure(self, group_id: str) -> ShareGroup:
        """The group, created empty if unknown (a share group whose state was replayed at start-up
        exists before any member comes back)."""
        group = self._groups.get(group_id)
        if group is None:
            group = self._groups[group_id] = ShareGroup(group_id)
        return group

    def delete(self, group_id: str) -> ErrorCode:
        """DeleteGroups of a share group: only an empty one (NON_EMPTY_GROUP otherwise)."""
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.group_id_not_found
        if group.members:
            return ErrorCode.non_empty_group
        del self._groups[group_id]
        return ErrorCode.none

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                  subscribed: Iterable[str] | None, now_ms: int, *, client_id: str = "",
                  client_host: str = "") -> HeartbeatResult:
        """One ShareGroupHeartbeat (v1: the client chooses its member id)."""
        config = self._group_config(group_id)
        interval = config.heartbeat_interval_ms
        if not group_id:
            return HeartbeatResult(ErrorCode.invalid_group_id, error_message="GroupId can't be empty.")
        if not member_id:
            return HeartbeatResult(ErrorCode.invalid_request, error_message="MemberId can't be empty.")
        group = self._groups.get(group_id)
        if member_epoch == LEAVE_EPOCH:
            if group is None or member_id not in group.members:
                return HeartbeatResult(ErrorCode.unknown_member_id, member_id=member_id)
            self._remove(group, member_id)
            return HeartbeatResult(ErrorCode.none, member_id=member_id, member_epoch=LEAVE_EPOCH,
                                   heartbeat_interval_ms=0, left=member_id)
        if member_epoch == JOIN_EPOCH:
            if subscribed is None and (group is None or member_id not in group.members):
                return HeartbeatResult(ErrorCode.invalid_request,
                                       error_message="SubscribedTopicNames must be set in first request.")
            if group is None:
                group = self._groups[group_id] = ShareGroup(group_id)
            member = group.members.get(member_id)
            if member is None:
                if len(group.members) >= self.config.max_size:
                    return HeartbeatResult(ErrorCode.group_max_size_reached, member_id=member_id)
                member = group.members[member_id] = ShareMember(member_id)
                group.group_epoch += 1
        elif member_epoch > 0:
            member = group.members.get(member_id) if group is not None else None
            if group is None or member is None:
                return HeartbeatResult(ErrorCode.unknown_member_id, member_id=member_id,
                                       error_message=f"member {member_id} is not in share group {group_id}")
            if member_epoch != member.member_epoch:
                return HeartbeatResult(ErrorCode.fenced_member_epoch, member_id=member_id,
                                       error_message=f"epoch {member_epoch}, the member is at {member.member_epoch}")
        else:
            return HeartbeatResult(ErrorCode.invalid_request, error_message=f"MemberEpoch {member_epoch} is invalid.")
        member.client_id, member.client_host = client_id, client_host
        if rack_id is not None:
            member.rack_id = rack_id
        if subscribed is not None:
            topics = tuple(sorted(set(subscribed)))
            if topics != member.subscribed_topics:
                member.subscribed_topics = topics
                group.group_epoch += 1
        member.deadline_ms = now_ms + config.session_timeout_ms
        self._refresh_metadata(group)
        if group.assignment_epoch != group.group_epoch:
            self._assign(group)
        changed = member_epoch == JOIN_EPOCH or member.member_epoch != group.assignment_epoch
        member.member_epoch = group.assignment_epoch
        return HeartbeatResult(ErrorCode.none, member_id=member_id, member_epoch=member.member_epoch,
                               heartbeat_interval_ms=interval, assignment=member.assignment if changed else None)

    def _refresh_metadata(self, group: ShareGroup) -> None:
        names = {name for m in group.members.values() for name in m.subscribed_topics}
        metadata = {name: self._lookup(name) for name in sorted(names)}
        if metadata != group.topic_metadata:
            group.topic_metadata = metadata
            group.group_epoch += 1

    def _assign(self, group: ShareGroup) -> None:
        assignment = simple_assign(group.members, group.topic_metadata)
        for member_id, member in group.members.items():
            member.assignment = assignment.get(member_id, {})
        group.assignment_epoch = group.group_epoch

    def _remove(self, group: ShareGroup, member_id: str) -> None:
        del group.members[member_id]
        group.group_epoch += 1
        self._refresh_metadata(group)
        self._assign(group)

    def expire(self, now_ms: int) -> list[tuple[str, str]]:
        """Remove members whose session timed out; returns (group id, member id) of each."""
        gone = []
        for group in self._groups.values():
            for member_id, member in list(group.members.items()):
                if member.deadline_ms <= now_ms:
                    self._remove(group, member_id)
                    gone.append((group.group_id, member_id))
        return gone

    def next_deadline_ms(self) -> int | None:
        deadlines = [m.deadline_ms for g in self._groups.values() for m in g.members.values()]
        return min(deadlines) if deadlines else None
