"""range and roundrobin assignors: the same results as Kafka's RangeAssignor and
RoundRobinAssignor (the examples from their javadoc), static members ordered first (KIP-345)."""

from __future__ import annotations

import pytest

from oncestream.client.consumer.assignors import MemberSubscription, parse_strategies, range_assign, roundrobin_assign


def _members(*specs: tuple[str, tuple[str, ...]]) -> list[MemberSubscription]:
    return [MemberSubscription(mid, topics) for mid, topics in specs]


def test_range_javadoc_example() -> None:
    """Two consumers C0, C1 on topics t0, t1 with 3 partitions each:
    C0: [t0p0, t0p1, t1p0, t1p1], C1: [t0p2, t1p2]."""
    members = _members(("C0", ("t0", "t1")), ("C1", ("t0", "t1")))
    result = range_assign(members, {"t0": 3, "t1": 3})
    assert result == {"C0": {"t0": [0, 1], "t1": [0, 1]}, "C1": {"t0": [2], "t1": [2]}}


def test_roundrobin_javadoc_example() -> None:
    """C0: [t0p0, t0p2, t1p1], C1: [t0p1, t1p0, t1p2]."""
    members = _members(("C0", ("t0", "t1")), ("C1", ("t0", "t1")))
    result = roundrobin_assign(members, {"t0": 3, "t1": 3})
    assert result == {"C0": {"t0": [0, 2], "t1": [1]}, "C1": {"t0": [1], "t1": [0, 2]}}


def test_roundrobin_with_different_subscriptions_javadoc_example() -> None:
    """C0 [t0], C1 [t0, t1], C2 [t0, t1, t2]; t0 1 partition, t1 2, t2 3:
    C0 [t0p0], C1 [t1p0], C2 [t1p1, t2p0, t2p1, t2p2]."""
    members = _members(("C0", ("t0",)), ("C1", ("t0", "t1")), ("C2", ("t0", "t1", "t2")))
    result = roundrobin_assign(members, {"t0": 1, "t1": 2, "t2": 3})
    assert result == {"C0": {"t0": [0]}, "C1": {"t1": [0]}, "C2": {"t1": [1], "t2": [0, 1, 2]}}


def test_every_partition_assigned_exactly_once() -> None:
    members = _members(*[(f"m{i}", ("a", "b")) for i in range(4)])
    for assign in (range_assign, roundrobin_assign):
        result = assign(members, {"a": 7, "b": 5})
        owned = [(t, p) for by_topic in result.values() for t, ps in by_topic.items() for p in ps]
        assert sorted(owned) == sorted([("a", p) for p in range(7)] + [("b", p) for p in range(5)])


def test_static_members_sort_by_instance_id_before_dynamic_ones() -> None:
    """Kafka orders members by group.instance.id when present, so a static member keeps its
    partitions across restarts that change its member id."""
    members = [MemberSubscription("zzz", ("t",), "instance-a"), MemberSubscription("aaa", ("t",), None)]
    assert range_assign(members, {"t": 2}) == {"zzz": {"t": [0]}, "aaa": {"t": [1]}}


def test_topics_unknown_to_metadata_are_skipped() -> None:
    assert range_assign(_members(("c", ("missing",))), {}) == {"c": {}}


def test_strategy_names() -> None:
    assert parse_strategies("range,roundrobin") == ["range", "roundrobin"]
    assert parse_strategies("org.apache.kafka.clients.consumer.RoundRobinAssignor") == ["roundrobin"]
    with pytest.raises(ValueError, match=r"unsupported partition\.assignment\.strategy 'cooperative-sticky'"):
        parse_strategies("cooperative-sticky")
