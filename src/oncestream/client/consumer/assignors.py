"""Partition assignors run by the group leader: ``range`` and ``roundrobin``, with the same
results as Kafka's RangeAssignor / RoundRobinAssignor (and librdkafka's), so a group may mix our
members with Java or librdkafka members whichever of them is elected leader.

Members are ordered as Kafka orders them: by group.instance.id when static (KIP-345), then by
member id.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class MemberSubscription:
    """What the leader knows about one member."""

    member_id: str
    topics: tuple[str, ...]
    group_instance_id: str | None = None


def _order_key(member: MemberSubscription) -> tuple[int, str, str]:
    # Kafka's MemberInfo order: static members (by instance id) before dynamic ones (by member id).
    if member.group_instance_id is not None:
        return (0, member.group_instance_id, member.member_id)
    return (1, "", member.member_id)


Assignment = dict[str, dict[str, list[int]]]  # member id -> topic -> partitions


def range_assign(members: list[MemberSubscription], partitions_per_topic: Mapping[str, int]) -> Assignment:
    """Per topic: contiguous ranges, the first (n % consumers) members get one extra."""
    result: Assignment = {m.member_id: {} for m in members}
    topics = sorted({t for m in members for t in m.topics})
    for topic in topics:
        count = partitions_per_topic.get(topic)
        if not count:
            continue
        consumers = sorted((m for m in members if topic in m.topics), key=_order_key)
        per, extra = divmod(count, len(consumers))
        for i, member in enumerate(consumers):
            start = per * i + min(i, extra)
            length = per + (1 if i < extra else 0)
            if length:
                result[member.member_id][topic] = list(range(start, start + length))
    return result


def roundrobin_assign(members: list[MemberSubscription], partitions_per_topic: Mapping[str, int]) -> Assignment:
    """All partitions sorted by (topic, partition), dealt in turn to members subscribed to them."""
    result: Assignment = {m.member_id: {} for m in members}
    ordered = sorted(members, key=_order_key)
    if not ordered:
        return result
    topics = sorted({t for m in members for t in m.topics})
    index = 0
    for topic in topics:
        for partition in range(partitions_per_topic.get(topic) or 0):
            # Next member (cyclically) subscribed to this topic.
            for _ in range(len(ordered)):
                member = ordered[index % len(ordered)]
                index += 1
                if topic in member.topics:
                    result[member.member_id].setdefault(topic, []).append(partition)
                    break
    return result


ASSIGNORS = {"range": range_assign, "roundrobin": roundrobin_assign}


def parse_strategies(value: str) -> list[str]:
    """``partition.assignment.strategy`` as assignor names in preference order."""
    names = []
    for item in value.split(","):
        name = item.strip().lower()
        if not name:
            continue
        # Java class names are accepted for convenience.
        if name.endswith("rangeassignor"):
            name = "range"
        elif name.endswith("roundrobinassignor"):
            name = "roundrobin"
        if name not in ASSIGNORS:
            raise ValueError(f"unsupported partition.assignment.strategy {item.strip()!r}; "
                             f"supported: {sorted(ASSIGNORS)}")
        names.append(name)
    if not names:
        raise ValueError("partition.assignment.strategy is empty")
    return names
