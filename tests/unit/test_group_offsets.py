"""OffsetCommit / OffsetFetch / OffsetDelete, Describe/List/DeleteGroups, pending txn offsets."""

from __future__ import annotations

import itertools
from typing import Any

from kio.schema.errors import ErrorCode

from oncestream.coordinator.group import (
    GroupCoordinator,
    GroupCoordinatorConfig,
    GroupState,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    PartitionOffsetCommit,
    TopicPartition,
)
from oncestream.coordinator.group.consumer_protocol import encode_subscription
from tests.support.group_harness import GroupHarness

E = ErrorCode
S = GroupState
T0 = TopicPartition("orders", 0)
T1 = TopicPartition("orders", 1)
P0 = TopicPartition("payments", 0)


def make(**overrides: int) -> tuple[GroupCoordinator, GroupHarness]:
    settings: dict[str, Any] = {"group_initial_rebalance_delay_ms": 0, **overrides}
    counter = itertools.count(1)
    coordinator = GroupCoordinator(
        GroupCoordinatorConfig(**settings), member_id_suffix=lambda: str(next(counter))
    )
    return coordinator, GroupHarness(coordinator)


def stable_consumer_group(
    h: GroupHarness, topics: list[str], *, group: str = "g", now_ms: int = 0
) -> str:
    """One consumer member subscribed to ``topics``, Stable at generation 1."""
    member = h.join(group, now_ms=now_ms, protocols=[("range", encode_subscription(topics))])
    member_id = member.result.member_id
    h.sync(group, member_id, 1, now_ms=now_ms, assignments={member_id: b"a"})
    return member_id


def fetch(
    coordinator: GroupCoordinator,
    group: str,
    partitions: tuple[TopicPartition, ...] | None = None,
    *,
    require_stable: bool = False,
    now_ms: int | None = None,
) -> dict[TopicPartition, tuple[int, ErrorCode]]:
    at = now_ms if now_ms is not None else (coordinator.now_ms or 0)
    result = coordinator.fetch_offsets(OffsetFetchRequest(group, partitions, require_stable), at)
    assert result.error == E.none
    return {tp: (p.offset, p.error) for tp, p in result.partitions.items()}


# --- commit / fetch -------------------------------------------------------------------------------


def test_simple_commit_and_fetch_all_and_listed() -> None:
    coordinator, h = make()
    result = h.commit("simple", {T0: 10, T1: PartitionOffsetCommit(20, 3, "meta")}, now_ms=5)
    assert result.partitions == {T0: E.none, T1: E.none}
    assert coordinator.group_state("simple") is S.EMPTY
    assert fetch(coordinator, "simple") == {T0: (10, E.none), T1: (20, E.none)}
    # Listed partitions, one never committed.
    assert fetch(coordinator, "simple", (T1, P0)) == {T1: (20, E.none), P0: (-1, E.none)}
    full = coordinator.fetch_offsets(OffsetFetchRequest("simple", (T1,)), 5).partitions[T1]
    assert (full.leader_epoch, full.metadata) == (3, "meta")
    # Every successful commit is one record in the log, written before the reply.
    assert len(h.log) == 2


def test_fetch_of_unknown_group() -> None:
    coordinator, _ = make()
    assert fetch(coordinator, "none") == {}
    assert fetch(coordinator, "none", (T0,)) == {T0: (-1, E.none)}


def test_member_commit_checks_member_and_generation() -> None:
    coordinator, h = make()
    member = stable_consumer_group(h, ["orders"])
    ok = h.commit("g", {T0: 1}, now_ms=1, member_id=member, generation_id=1)
    assert ok.partitions == {T0: E.none}
    stale = h.commit("g", {T0: 2}, now_ms=1, member_id=member, generation_id=0)
    assert stale.partitions == {T0: E.illegal_generation}
    ghost = h.commit("g", {T0: 3}, now_ms=1, member_id="ghost", generation_id=1)
    assert ghost.partitions == {T0: E.unknown_member_id}
    # A group with members does not take "simple" commits.
    anonymous = h.commit("g", {T0: 4}, now_ms=1)
    assert anonymous.partitions == {T0: E.unknown_member_id}
    # A generation for a group that does not exist.
    unknown = h.commit("other", {T0: 5}, now_ms=1, member_id="m", generation_id=3)
    assert unknown.partitions == {T0: E.illegal_generation}
    assert fetch(coordinator, "g", (T0,)) == {T0: (1, E.none)}


def test_commit_with_fenced_instance_id() -> None:
    _, h = make()
    member = h.join("g", now_ms=0, instance_id="inst").result.member_id
    h.sync("g", member, 1, now_ms=0, assignments={})
    fenced = h.commit(
        "g", {T0: 1}, now_ms=1, member_id="old", generation_id=1, instance_id="inst"
    )
    assert fenced.partitions == {T0: E.fenced_instance_id}


def test_commit_during_rebalance() -> None:
    _, h = make()
    a = stable_consumer_group(h, ["orders"])
    h.join("g", now_ms=1, client_id="b")  # Stable -> PreparingRebalance
    # Allowed while preparing (the heartbeat tells the member to rejoin).
    assert h.commit("g", {T0: 7}, now_ms=2, member_id=a, generation_id=1).partitions == {
        T0: E.none
    }
    h.join("g", a, now_ms=3)  # everyone rejoined: CompletingRebalance, generation 2
    during = h.commit("g", {T0: 8}, now_ms=4, member_id=a, generation_id=2)
    assert during.partitions == {T0: E.rebalance_in_progress}


def test_offset_metadata_too_large() -> None:
    coordinator, h = make(offset_metadata_max_bytes=4)
    result = h.commit(
        "g",
        {T0: PartitionOffsetCommit(1, metadata="12345"), T1: PartitionOffsetCommit(2)},
        now_ms=0,
    )
    assert result.partitions == {T0: E.offset_metadata_too_large, T1: E.none}
    assert fetch(coordinator, "g") == {T1: (2, E.none)}


def test_commit_during_load_is_rejected() -> None:
    coordinator, h = make()
    coordinator.unload_partition(coordinator.partition_for("g"))
    assert h.commit("g", {T0: 1}, now_ms=0).partitions == {T0: E.coordinator_load_in_progress}
    assert coordinator.fetch_offsets(OffsetFetchRequest("g"), 0).error == (
        E.coordinator_load_in_progress
    )
    coordinator.load([], now_ms=0, partitions=[coordinator.partition_for("g")])
    assert h.commit("g", {T0: 1}, now_ms=0).partitions == {T0: E.none}


# --- OffsetDelete ---------------------------------------------------------------------------------


def test_offset_delete_on_empty_group_removes_offsets_and_then_the_group() -> None:
    coordinator, h = make()
    h.commit("g", {T0: 1, P0: 2}, now_ms=0)
    result, writes = coordinator.delete_offsets(OffsetDeleteRequest("g", (T0,)), 1)
    assert result.error == E.none
    assert result.partitions == {T0: E.none}
    assert [value for w in writes for _, value in w.records] == [None]  # one tombstone
    assert fetch(coordinator, "g") == {P0: (2, E.none)}
    # Removing the last offset of an Empty group removes the group (Kafka's cleanup).
    result, _ = coordinator.delete_offsets(OffsetDeleteRequest("g", (P0,)), 2)
    assert result.partitions == {P0: E.none}
    assert coordinator.group_state("g") is None


def test_offset_delete_refuses_topics_the_consumer_group_subscribes_to() -> None:
    coordinator, h = make()
    member = stable_consumer_group(h, ["orders"])
    h.commit("g", {T0: 1, P0: 2}, now_ms=1, member_id=member, generation_id=1)
    result, _ = coordinator.delete_offsets(OffsetDeleteRequest("g", (T0, P0)), 2)
    assert result.error == E.none
    assert result.partitions == {T0: E.group_subscribed_to_topic, P0: E.none}
    assert fetch(coordinator, "g") == {T0: (1, E.none)}


def test_offset_delete_unknown_group_and_non_consumer_group() -> None:
    coordinator, h = make()
    result, _ = coordinator.delete_offsets(OffsetDeleteRequest("none", (T0,)), 0)
    assert result.error == E.group_id_not_found
    member = h.join("connect", now_ms=0, protocol_type="connect").result.member_id
    h.sync("connect", member, 1, now_ms=0, assignments={})
    result, _ = coordinator.delete_offsets(OffsetDeleteRequest("connect", (T0,)), 1)
    assert result.error == E.non_empty_group


def test_unparseable_subscription_counts_as_subscribed() -> None:
    coordinator, h = make()
    member = h.join("g", now_ms=0, protocols=[("range", b"\x00")]).result.member_id
    h.sync("g", member, 1, now_ms=0, assignments={})
    h.commit("g", {P0: 2}, now_ms=1, member_id=member, generation_id=1)
    result, _ = coordinator.delete_offsets(OffsetDeleteRequest("g", (P0,)), 2)
    assert result.partitions == {P0: E.group_subscribed_to_topic}


# --- DescribeGroups / ListGroups / DeleteGroups ---------------------------------------------------


def test_describe_groups() -> None:
    coordinator, h = make()
    member = stable_consumer_group(h, ["orders"])
    h.commit("simple", {T0: 1}, now_ms=0)
    stable, simple, unknown = coordinator.describe_groups(["g", "simple", "nope"], 1)
    assert (stable.state, stable.protocol_type, stable.protocol_name) == (
        "Stable",
        "consumer",
        "range",
    )
    assert [(m.member_id, m.client_id, m.assignment) for m in stable.members] == [
        (member, "client", b"a")
    ]
    assert stable.members[0].metadata == encode_subscription(["orders"])
    assert (simple.state, simple.protocol_type, simple.members) == ("Empty", "", ())
    assert (unknown.error, unknown.state) == (E.none, "Dead")
    # Outside Stable no protocol, metadata or assignment is reported.
    h.join("g", now_ms=2, client_id="b")
    (preparing,) = coordinator.describe_groups(["g"], 2)
    assert preparing.state == "PreparingRebalance"
    assert preparing.protocol_name == ""
    assert all(m.metadata == b"" and m.assignment == b"" for m in preparing.members)


def test_list_groups_with_state_and_type_filters() -> None:
    coordinator, h = make()
    stable_consumer_group(h, ["orders"], group="a")
    h.commit("b", {T0: 1}, now_ms=0)
    everything = coordinator.list_groups()
    assert [(g.group_id, g.state, g.protocol_type) for g in everything.groups] == [
        ("a", "Stable", "consumer"),
        ("b", "Empty", ""),
    ]
    assert [g.group_id for g in coordinator.list_groups(["empty"]).groups] == ["b"]
    assert [g.group_id for g in coordinator.list_groups(["Stable", "Dead"]).groups] == ["a"]
    assert coordinator.list_groups(["nonsense"]).groups == ()
    assert len(coordinator.list_groups(types_filter=["Classic"]).groups) == 2
    assert coordinator.list_groups(types_filter=["consumer"]).groups == ()


def test_delete_groups() -> None:
    coordinator, h = make()
    stable_consumer_group(h, ["orders"], group="busy")
    h.commit("idle", {T0: 1, T1: 2}, now_ms=0)
    result, writes = coordinator.delete_groups(["busy", "idle", "ghost"], 1)
    assert result.errors == {
        "busy": E.non_empty_group,
        "idle": E.none,
        "ghost": E.group_id_not_found,
    }
    assert coordinator.group_state("idle") is None
    assert fetch(coordinator, "idle") == {}
    # Offsets of the deleted group are tombstoned; it never had a generation, so no metadata
    # record exists to tombstone.
    assert [value for w in writes for _, value in w.records] == [None, None]


# --- transactional offsets (KIP-98) and RequireStable (KIP-447) -----------------------------------


def test_pending_txn_offsets_are_unstable_until_committed() -> None:
    coordinator, h = make()
    h.commit("g", {T0: 5}, now_ms=0)
    result, writes = coordinator.add_pending_txn_offsets("g", 42, {T0: PartitionOffsetCommit(9)}, 1)
    assert result.partitions == {T0: E.none}
    assert writes  # staged offsets are durable too
    h.log.append(writes)

    # Without RequireStable the last committed offset is returned; with it, UNSTABLE.
    assert fetch(coordinator, "g", (T0,)) == {T0: (5, E.none)}
    assert fetch(coordinator, "g", (T0,), require_stable=True) == {
        T0: (-1, E.unstable_offset_commit)
    }
    # Other partitions are unaffected.
    assert fetch(coordinator, "g", (T1,), require_stable=True) == {T1: (-1, E.none)}

    h.log.append(coordinator.complete_pending_txn_offsets("g", 42, commit=True, now_ms=2))
    assert fetch(coordinator, "g", (T0,), require_stable=True) == {T0: (9, E.none)}
    assert coordinator.pending_txn_offsets("g") == {}


def test_aborted_txn_offsets_are_discarded() -> None:
    coordinator, h = make()
    h.commit("g", {T0: 5}, now_ms=0)
    _, writes = coordinator.add_pending_txn_offsets("g", 7, {T0: PartitionOffsetCommit(9)}, 1)
    h.log.append(writes)
    h.log.append(coordinator.complete_pending_txn_offsets("g", 7, commit=False, now_ms=2))
    assert fetch(coordinator, "g", (T0,), require_stable=True) == {T0: (5, E.none)}


def test_plain_commit_after_txn_offset_wins_over_the_committed_txn() -> None:
    coordinator, h = make()
    _, writes = coordinator.add_pending_txn_offsets("g", 7, {T0: PartitionOffsetCommit(9)}, 1)
    h.log.append(writes)
    h.commit("g", {T0: 12}, now_ms=2)  # written after the staged one
    h.log.append(coordinator.complete_pending_txn_offsets("g", 7, commit=True, now_ms=3))
    assert fetch(coordinator, "g", (T0,)) == {T0: (12, E.none)}


def test_pending_txn_offsets_from_two_producers() -> None:
    """The offset staged last wins, whichever transaction completes first (Kafka)."""
    coordinator, h = make()
    for pid, offset in ((1, 10), (2, 20)):
        _, writes = coordinator.add_pending_txn_offsets(
            "g", pid, {T0: PartitionOffsetCommit(offset)}, pid
        )
        h.log.append(writes)
    h.log.append(coordinator.complete_pending_txn_offsets("g", 1, commit=True, now_ms=3))
    # Producer 2 still has T0 pending: still unstable.
    unstable = fetch(coordinator, "g", (T0,), require_stable=True)
    assert unstable == {T0: (-1, E.unstable_offset_commit)}
    h.log.append(coordinator.complete_pending_txn_offsets("g", 2, commit=True, now_ms=4))
    assert fetch(coordinator, "g", (T0,), require_stable=True) == {T0: (20, E.none)}
    # Completing an unknown producer or group is a no-op.
    assert coordinator.complete_pending_txn_offsets("g", 99, commit=True, now_ms=5) == []
    assert coordinator.complete_pending_txn_offsets("zz", 1, commit=True, now_ms=5) == []


def test_txn_offset_commit_checks_generation_when_given() -> None:
    coordinator, h = make()
    member = stable_consumer_group(h, ["orders"])
    result, _ = coordinator.add_pending_txn_offsets(
        "g", 1, {T0: PartitionOffsetCommit(1)}, 1, member_id=member, generation_id=5
    )
    assert result.partitions == {T0: E.illegal_generation}
    # Without member information (old TxnOffsetCommit versions) it is accepted even though the
    # group has members.
    result, _ = coordinator.add_pending_txn_offsets("g", 1, {T0: PartitionOffsetCommit(1)}, 1)
    assert result.partitions == {T0: E.none}


# --- offset expiry (offsets.retention.minutes) ----------------------------------------------------


def test_offsets_of_simple_group_expire_and_the_group_goes() -> None:
    coordinator, h = make(offsets_retention_ms=1_000, offsets_retention_check_interval_ms=100)
    h.commit("g", {T0: 1}, now_ms=0)
    h.tick(0)  # arms the cleanup task
    h.tick(900)
    assert fetch(coordinator, "g", now_ms=900) == {T0: (1, E.none)}
    h.tick(1_000)
    assert fetch(coordinator, "g", now_ms=1_000) == {}
    assert coordinator.group_state("g") is None


def test_subscribed_topics_of_stable_consumer_group_do_not_expire() -> None:
    coordinator, h = make(offsets_retention_ms=1_000, offsets_retention_check_interval_ms=100)
    member = stable_consumer_group(h, ["orders"])
    h.commit("g", {T0: 1, P0: 2}, now_ms=0, member_id=member, generation_id=1)
    h.tick(0)
    for t in range(500, 3_000, 500):
        assert h.heartbeat("g", member, 1, now_ms=t) == E.none
        h.tick(t)
    assert fetch(coordinator, "g", now_ms=3_000) == {T0: (1, E.none)}
