"""Consumer groups as the console shows them: the list (classic, KIP-848 consumer and share
groups), one group's members, assignment and lag per partition, lag over time (samples kept in
memory while the console runs), and resetting an empty group's committed offsets.

The functions taking an ``Admin`` block; ``ConsoleKafka.run`` calls them in a worker thread.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from oncestream.client import Admin, KafkaError, KafkaException, TopicPartition
from oncestream.client.admin.admin_groups import (
    ConsumerGroupDescription,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    MemberDescription,
    ShareGroupDescription,
)
from oncestream.client.common.list_offsets import EARLIEST, LATEST
from oncestream.console.kafka import ADMIN_TIMEOUT_S

RESET_TARGETS = ("earliest", "latest", "time", "offset")
# Lag samples kept per group (one per page view, at most one a second): ~10 minutes at the page's
# 5 s refresh.
LAG_SAMPLES = 120
MIN_SAMPLE_INTERVAL_S = 1.0


@dataclass(frozen=True)
class GroupRow:
    group_id: str
    type: str        # classic, consumer, share, ...
    state: str
    protocol_type: str


@dataclass(frozen=True)
class MemberRow:
    member_id: str
    client_id: str
    host: str
    instance_id: str | None
    assignment: list[tuple[str, int]]


@dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: int
    committed: int | None     # None: no committed offset (share groups: the share-partition start offset)
    end: int
    lag: int | None
    member: str | None        # the client id of the member it is assigned to


@dataclass(frozen=True)
class GroupDetail:
    group_id: str
    type: str
    state: str
    coordinator: str
    assignor: str
    members: list[MemberRow]
    partitions: list[PartitionLag]
    error: str | None = None

    @property
    def total_lag(self) -> int:
        return sum(p.lag for p in self.partitions if p.lag is not None)


def list_groups(admin: Admin) -> tuple[list[GroupRow], list[str]]:
    """Every group of every broker, and the brokers' errors in words."""
    result = admin.list_consumer_groups(timeout=ADMIN_TIMEOUT_S)
    rows = [GroupRow(g.group_id, g.type.value, g.state.value, g.protocol_type) for g in result.valid]
    return rows, [f"{e.name()}: {e.str()}" for e in result.errors]


def _group_type(admin: Admin, group_id: str) -> ConsumerGroupType:
    found = admin.group_type(group_id, timeout=ADMIN_TIMEOUT_S)
    if found is None:
        raise LookupError(f"no group {group_id!r}")
    return found


def _members(members: list[MemberDescription]) -> list[MemberRow]:
    return [MemberRow(m.member_id, m.client_id, m.host, m.group_instance_id,
                      sorted((tp.topic, tp.partition) for tp in m.assignment.topic_partitions)) for m in members]


def describe_group(admin: Admin, group_id: str) -> GroupDetail:
    """One group with lag per partition (LookupError for an unknown group)."""
    group_type = _group_type(admin, group_id)
    description: ConsumerGroupDescription | ShareGroupDescription
    if group_type is ConsumerGroupType.SHARE:
        description = admin.describe_share_groups([group_id], timeout=ADMIN_TIMEOUT_S)[group_id]
        assignor = ""
    else:
        description = admin.describe_consumer_groups([group_id], timeout=ADMIN_TIMEOUT_S)[group_id]
        assignor = description.partition_assignor
    members = _members(description.members)
    owner = {tp: m.client_id for m in members for tp in m.assignment}
    committed: dict[tuple[str, int], int | None] = {}
    if group_type is ConsumerGroupType.SHARE:
        offsets = admin.list_share_group_offsets([ConsumerGroupTopicPartitions(group_id)], timeout=ADMIN_TIMEOUT_S)
        for p in offsets[group_id].partitions:
            committed[(p.topic, p.partition)] = p.start_offset if p.start_offset >= 0 else None
    else:
        fetched = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group_id)], timeout=ADMIN_TIMEOUT_S)
        for tp in fetched[group_id].topic_partitions or []:
            committed[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else None
    for assigned in owner:
        committed.setdefault(assigned, None)
    ends = admin.list_offsets(dict.fromkeys(committed, LATEST), timeout=ADMIN_TIMEOUT_S) if committed else {}
    partitions = [PartitionLag(t, p, off, ends.get((t, p), -1),
                               None if off is None else max(0, ends.get((t, p), off) - off), owner.get((t, p)))
                  for (t, p), off in sorted(committed.items())]
    coordinator = description.coordinator
    return GroupDetail(group_id, group_type.value, description.state.value,
                       f"{coordinator.id} ({coordinator.host}:{coordinator.port})" if coordinator else "",
                       assignor, members, partitions,
                       f"{description.error.name()}: {description.error.str()}" if description.error else None)


@dataclass(frozen=True)
class ResetPlan:
    """What a reset asks for: ``target`` one of RESET_TARGETS, ``topic`` None for every topic the
    group has offsets for."""

    group_id: str
    target: str
    topic: str | None = None
    time_ms: int = 0
    offset: int = 0


def reset_offsets(admin: Admin, plan: ResetPlan) -> dict[tuple[str, int], int]:
    """Commit the plan's offsets for the group (the coordinator accepts an admin's commit only
    while the group has no members), or a share group's start offsets (AlterShareGroupOffsets);
    the new offset per partition, or KafkaException with the broker's error (e.g.
    UNKNOWN_MEMBER_ID or NON_EMPTY_GROUP for a group with members)."""
    share = _group_type(admin, plan.group_id) == ConsumerGroupType.SHARE
    partitions = _offset_partitions(admin, plan.group_id, share)
    if plan.topic is not None:
        partitions = {tp for tp in partitions if tp[0] == plan.topic}
        described = admin.describe_topics([plan.topic], timeout=ADMIN_TIMEOUT_S).get(plan.topic)
        if described is None or described.error is not None:
            raise LookupError(f"no topic {plan.topic!r}")
        partitions |= {(plan.topic, p.id) for p in described.partitions}
    if not partitions:
        raise LookupError(f"group {plan.group_id!r} has no committed offsets: name a topic to reset")
    starts = admin.list_offsets(dict.fromkeys(partitions, EARLIEST), timeout=ADMIN_TIMEOUT_S)
    ends = admin.list_offsets(dict.fromkeys(partitions, LATEST), timeout=ADMIN_TIMEOUT_S)
    if plan.target == "earliest":
        wanted = starts
    elif plan.target == "latest":
        wanted = ends
    elif plan.target == "time":
        found = admin.list_offsets(dict.fromkeys(partitions, plan.time_ms), timeout=ADMIN_TIMEOUT_S)
        wanted = {tp: ends[tp] if off < 0 else off for tp, off in found.items()}
    elif plan.target == "offset":
        # As kafka-consumer-groups --to-offset: clamped to what the partition holds.
        wanted = {tp: min(max(plan.offset, starts[tp]), ends[tp]) for tp in partitions}
    else:
        raise ValueError(f"reset target must be one of {RESET_TARGETS}, not {plan.target!r}")
    request = ConsumerGroupTopicPartitions(plan.group_id, [TopicPartition(t, p, wanted[(t, p)])
                                                           for t, p in sorted(partitions)])
    if share:  # a share group's start offsets (KIP-932 AlterShareGroupOffsets: empty groups only)
        result = admin.alter_share_group_offsets(request, timeout=ADMIN_TIMEOUT_S)
    else:
        result = admin.alter_consumer_group_offsets([request], timeout=ADMIN_TIMEOUT_S)[plan.group_id]
    if result.error is not None:
        raise KafkaException(result.error)
    for tp in result.topic_partitions or []:
        if tp.error is not None:
            raise KafkaException(KafkaError(tp.error.code(), f"{tp.topic}[{tp.partition}]: {tp.error.str()}"))
    return {(t, p): wanted[(t, p)] for t, p in sorted(partitions)}


def _offset_partitions(admin: Admin, group_id: str, share: bool) -> set[tuple[str, int]]:
    """The partitions the group has offsets (a share group: share-partition state) for."""
    request = [ConsumerGroupTopicPartitions(group_id)]
    if share:
        found = admin.list_share_group_offsets(request, timeout=ADMIN_TIMEOUT_S)[group_id]
        if found.error is not None:
            raise KafkaException(found.error)
        return {(p.topic, p.partition) for p in found.partitions}
    fetched = admin.list_consumer_group_offsets(request, timeout=ADMIN_TIMEOUT_S)[group_id]
    return {(tp.topic, tp.partition) for tp in fetched.topic_partitions or []}


@dataclass
class LagHistory:
    """Total lag samples per group, (time s, lag), oldest first; thread-safe."""

    clock_s: Callable[[], float]
    capacity: int = LAG_SAMPLES
    _samples: dict[str, collections.deque[tuple[float, int]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, group_id: str, lag: int) -> None:
        now = self.clock_s()
        with self._lock:
            samples = self._samples.setdefault(group_id, collections.deque(maxlen=self.capacity))
            if samples and now - samples[-1][0] < MIN_SAMPLE_INTERVAL_S:
                samples[-1] = (samples[-1][0], lag)   # a refresh within a second updates the last sample
            else:
                samples.append((now, lag))

    def samples(self, group_id: str) -> list[tuple[float, int]]:
        with self._lock:
            return list(self._samples.get(group_id, ()))


def sparkline_points(samples: list[tuple[float, int]], width: int = 240, height: int = 40) -> str:
    """The ``points`` of an SVG polyline of the samples (time on x, lag on y, 0 at the bottom)."""
    if not samples:
        return ""
    t0, t1 = samples[0][0], samples[-1][0]
    top = max(lag for _, lag in samples) or 1
    span = (t1 - t0) or 1.0
    return " ".join(f"{(t - t0) / span * width:.1f},{height - lag / top * (height - 2) - 1:.1f}" for t, lag in samples)
