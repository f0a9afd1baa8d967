"""The KIP-848 consumer group coordinator, sans-io: heartbeats, reconciliation, fencing errors,
static members, regular-expression subscriptions, timers, offsets and replay of its records."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from oncestream.coordinator.group import (
    GroupCoordinator,
    GroupCoordinatorConfig,
    JoinProtocol,
    JoinRequest,
    JoinResult,
    LeaveRequest,
    LeavingMember,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    PartitionOffsetCommit,
    TopicPartition,
)
from oncestream.coordinator.group.consumer.assignors import assignors_from
from oncestream.coordinator.group.consumer.messages import ConsumerHeartbeatRequest
from oncestream.coordinator.group.consumer.records import TopicMetadata
from oncestream.errors import InvalidConfigError
from tests.unit.consumer_group_sim import SimClient

SESSION_MS = 45_000
T1, T2, T3 = uuid.UUID(int=1), uuid.UUID(int=2), uuid.UUID(int=3)


class Cluster:
    """The topics the coordinator sees (the injected TopicsView)."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicMetadata] = {}

    def add(self, name: str, topic_id: uuid.UUID, partitions: int) -> None:
        self.topics[name] = TopicMetadata(topic_id, name, partitions)

    def view(self) -> dict[str, TopicMetadata]:
        return dict(self.topics)


def make(cluster: Cluster | None = None, **config: object) -> tuple[GroupCoordinator, Cluster, list]:
    cluster = cluster or Cluster()
    if not cluster.topics:
        cluster.add("orders", T1, 6)
    writes: list = []
    coordinator = GroupCoordinator(GroupCoordinatorConfig(offsets_topic_partitions=5, **config),  # type: ignore[arg-type]
                                   topics=cluster.view)
    return coordinator, cluster, writes


def settle(clients: list[SimClient], now_ms: int, rounds: int = 20) -> int:
    """Heartbeat every client until nothing changes (bounded)."""
    for _ in range(rounds):
        before = [(c.epoch, dict(c.owned)) for c in clients]
        for c in clients:
            now_ms += 1
            c.heartbeat(now_ms)
        if before == [(c.epoch, dict(c.owned)) for c in clients]:
            return now_ms
    return now_ms


def assert_disjoint(clients: list[SimClient]) -> None:
    seen: dict[tuple[uuid.UUID, int], str] = {}
    for c in clients:
        for tp in c.partitions():
            assert tp not in seen, f"{tp} owned by {seen[tp]} and {c.member_id}"
            seen[tp] = c.member_id


def test_two_members_split_and_revoke_before_assign():
    coordinator, _, _ = make()
    a = SimClient(coordinator, "g", ("orders",))
    a.heartbeat(1)
    assert a.owned == {T1: frozenset(range(6))}
    b = SimClient(coordinator, "g", ("orders",))
    b.heartbeat(2)
    # b's target is half of the partitions, but a still holds them all: b gets nothing yet.
    assert b.owned == {}
    assert coordinator.consumer_group_describe(["g"], 3)[0].state == "Reconciling"
    a.heartbeat(4)  # a is told to give up three partitions
    assert len(a.partitions()) == 3
    b.heartbeat(5)  # a has not confirmed yet: still nothing for b
    assert b.owned == {}
    a.heartbeat(6)  # a confirms the revocation
    b.heartbeat(7)
    assert len(b.partitions()) == 3
    assert_disjoint([a, b])
    described = coordinator.consumer_group_describe(["g"], 8)[0]
    assert described.state == "Stable"
    assert described.group_epoch == described.assignment_epoch == 2
    assert a.epoch == b.epoch == 2


def test_leave_hands_partitions_back():
    coordinator, _, _ = make()
    a, b = SimClient(coordinator, "g", ("orders",)), SimClient(coordinator, "g", ("orders",))
    now = settle([a, b], 1)
    assert a.leave(now).error == ErrorCode.none
    settle([b], now + 1)
    assert b.owned == {T1: frozenset(range(6))}


def test_errors_are_kafkas_and_change_nothing():
    coordinator, _, _ = make()
    a = SimClient(coordinator, "g", ("orders",))
    settle([a], 1)
    before = coordinator.consumer_group_describe(["g"], 100)[0]

    def hb(**fields: object) -> ErrorCode:
        request = ConsumerHeartbeatRequest(**{"group_id": "g", "member_id": a.member_id,  # type: ignore[arg-type]
                                              "member_epoch": a.epoch, "owned": dict(a.owned), **fields})
        result, writes = coordinator.consumer_group_heartbeat(request, 200)
        if result.error != ErrorCode.none:
            assert writes == [], "an error must write nothing"
        return result.error

    assert hb(member_epoch=a.epoch + 5) == ErrorCode.fenced_member_epoch
    assert hb(member_id="nobody") == ErrorCode.unknown_member_id
    assert hb(member_epoch=-7) == ErrorCode.invalid_request
    assert hb(member_epoch=0, rebalance_timeout_ms=-1, subscribed_topic_names=("orders",), owned={}) \
        == ErrorCode.invalid_request
    assert hb(member_epoch=0, rebalance_timeout_ms=1, subscribed_topic_names=("orders",), owned={T1: frozenset({0})}) \
        == ErrorCode.invalid_request
    assert hb(member_epoch=0, rebalance_timeout_ms=1, subscribed_topic_names=("orders",), owned={},
              server_assignor="sticky") == ErrorCode.unsupported_assignor
    assert hb(member_epoch=0, rebalance_timeout_ms=1, subscribed_topic_regex="(", owned={}) \
        == ErrorCode.invalid_regular_expression
    assert hb(group_id="other") == ErrorCode.group_id_not_found
    assert hb(member_id="") == ErrorCode.invalid_request
    after = coordinator.consumer_group_describe(["g"], 300)[0]
    assert after == before


def test_previous_epoch_with_owned_subset_is_tolerated():
    """A heartbeat whose bumped answer was lost comes back one epoch behind: accepted if it owns
    only partitions still assigned (Kafka), fenced otherwise."""
    coordinator, _, _ = make()
    a = SimClient(coordinator, "g", ("orders",))
    a.heartbeat(1)
    b = SimClient(coordinator, "g", ("orders",))
    now = settle([a, b], 2)
    old_epoch = a.epoch
    c = SimClient(coordinator, "g", ("orders",))
    now = settle([a, b, c], now)
    assert a.epoch == old_epoch + 1
    ok = ConsumerHeartbeatRequest("g", a.member_id, old_epoch, owned=dict(a.owned))
    assert coordinator.consumer_group_heartbeat(ok, now + 1)[0].error == ErrorCode.none
    extra = {T1: frozenset(range(6))}
    bad = ConsumerHeartbeatRequest("g", a.member_id, old_epoch, owned=extra)
    assert coordinator.consumer_group_heartbeat(bad, now + 2)[0].error == ErrorCode.fenced_member_epoch


def test_session_timeout_fences_and_reassigns():
    coordinator, _, _ = make()
    a, b = SimClient(coordinator, "g", ("orders",)), SimClient(coordinator, "g", ("orders",))
    now = settle([a, b], 1)
    # b keeps heartbeating, a goes silent.
    for step in range(1, 12):
        now = 10 + step * 5_000
        b.heartbeat(now)
        coordinator.tick(now)
    assert coordinator.consumer_group_describe(["g"], now)[0].members[0].member_id == b.member_id
    settle([b], now)
    assert b.owned == {T1: frozenset(range(6))}
    assert a.heartbeat(now + 1).error == ErrorCode.unknown_member_id


def test_rebalance_timeout_fences_a_member_that_never_revokes():
    coordinator, _, _ = make()
    a = SimClient(coordinator, "g", ("orders",))
    a.heartbeat(1)
    b = SimClient(coordinator, "g", ("orders",))
    b.heartbeat(2)
    stubborn = ConsumerHeartbeatRequest("g", a.member_id, a.epoch, owned={T1: frozenset(range(6))})
    coordinator.consumer_group_heartbeat(stubborn, 3)  # told to revoke, never does
    coordinator.consumer_group_heartbeat(stubborn, 4)
    now = 4 + 300_000
    b.heartbeat(now)
    coordinator.tick(now)
    settle([b], now + 1)
    assert b.owned == {T1: frozenset(range(6))}


def test_static_member_leaves_temporarily_and_rejoins_with_its_partitions():
    coordinator, _, _ = make()
    a = SimClient(coordinator, "g", ("orders",), instance_id="a")
    b = SimClient(coordinator, "g", ("orders",), instance_id="b")
    now = settle([a, b], 1)
    kept = dict(a.owned)
    epoch = coordinator.consumer_group_describe(["g"], now)[0].group_epoch
    assert a.leave(now + 1, static=True).error == ErrorCode.none
    now = settle([b], now + 2)
    assert len(b.partitions()) == 3, "a static member's partitions stay with it while it is away"
    # Another live member may not take the instance id while it is held...
    intruder = SimClient(coordinator, "g", ("orders",), instance_id="b")
    assert intruder.heartbeat(now).error == ErrorCode.unreleased_instance_id
    # ...a restarted "a" (new member id) takes over the old assignment, without a new group epoch.
    a2 = SimClient(coordinator, "g", ("orders",), instance_id="a")
    now = settle([a2, b], now + 1)
    assert a2.owned == kept
    assert coordinator.consumer_group_describe(["g"], now)[0].group_epoch == epoch
    # The replaced member id is fenced by the new one.
    stale = ConsumerHeartbeatRequest("g", a.member_id, 1, instance_id="a", owned={})
    assert coordinator.consumer_group_heartbeat(stale, now + 1)[0].error == ErrorCode.fenced_instance_id


def test_static_member_away_longer_than_the_session_loses_its_partitions():
    coordinator, _, _ = make()
    a = SimClient(coordinator, "g", ("orders",), instance_id="a")
    b = SimClient(coordinator, "g", ("orders",), instance_id="b")
    now = settle([a, b], 1)
    a.leave(now, static=True)
    for _ in range(1, 12):
        now += 5_000
        b.heartbeat(now)
        coordinator.tick(now)
    settle([b], now)
    assert b.owned == {T1: frozenset(range(6))}


def test_regex_subscription_picks_up_a_topic_created_later():
    cluster = Cluster()
    cluster.add("t-a", T1, 2)
    cluster.add("other", T3, 2)
    coordinator, _, _ = make(cluster)
    a = SimClient(coordinator, "g", regex="^t-.*")
    now = settle([a], 1)
    assert a.owned == {T1: frozenset({0, 1})}
    cluster.add("t-b", T2, 3)
    now = settle([a], now)
    assert a.owned == {T1: frozenset({0, 1}), T2: frozenset({0, 1, 2})}
    # Partitions added to a subscribed topic are picked up too.
    cluster.add("t-b", T2, 4)
    settle([a], now)
    assert a.owned[T2] == frozenset(range(4))


def test_range_assignor_per_member_choice():
    coordinator, _, _ = make()
    a = SimClient(coordinator, "g", ("orders",), assignor="range", member_id="a")
    b = SimClient(coordinator, "g", ("orders",), assignor="range", member_id="b")
    now = settle([a, b], 1)
    assert a.owned == {T1: frozenset({0, 1, 2})}
    assert b.owned == {T1: frozenset({3, 4, 5})}
    assert coordinator.consumer_group_describe(["g"], now)[0].assignor_name == "range"


def test_replay_rebuilds_groups_epochs_and_assignments():
    coordinator, cluster, _ = make()
    a, b = SimClient(coordinator, "g", ("orders",)), SimClient(coordinator, "g", ("orders",), instance_id="s")
    log: list[tuple[bytes, bytes | None]] = []

    def heartbeat_all(now: int) -> int:
        for c in (a, b):
            now += 1
            request = ConsumerHeartbeatRequest(
                "g", c.member_id, c.epoch, instance_id=c.instance_id,
                rebalance_timeout_ms=300_000 if c.epoch == 0 else -1,
                subscribed_topic_names=c.topics if c.epoch == 0 else None, owned=dict(c.owned))
            result, writes = coordinator.consumer_group_heartbeat(request, now)
            for w in writes:
                log.extend(w.records)
            c.epoch = result.member_epoch
            if result.assignment is not None:
                c.owned = dict(result.assignment)
        return now

    now = 1
    for _ in range(6):
        now = heartbeat_all(now)
    result, writes = coordinator.commit_offsets(
        OffsetCommitRequest("g", {TopicPartition("orders", 0): PartitionOffsetCommit(42)}, a.member_id, a.epoch), now)
    assert result.partitions[TopicPartition("orders", 0)] == ErrorCode.none
    for w in writes:
        log.extend(w.records)
    restarted = GroupCoordinator(GroupCoordinatorConfig(offsets_topic_partitions=5), topics=cluster.view)
    restarted.load(log, now + 1)
    assert restarted.consumer_group_describe(["g"], now + 2) == coordinator.consumer_group_describe(["g"], now + 2)
    assert restarted.committed_offsets("g")[TopicPartition("orders", 0)].offset == 42
    # The members carry on at their epochs after the restart.
    again = ConsumerHeartbeatRequest("g", a.member_id, a.epoch, owned=dict(a.owned))
    assert restarted.consumer_group_heartbeat(again, now + 3)[0].error == ErrorCode.none


def test_delete_group_writes_tombstones():
    coordinator, _, _ = make()
    a = SimClient(coordinator, "g", ("orders",))
    now = settle([a], 1)
    assert coordinator.delete_groups(["g"], now)[0].errors["g"] == ErrorCode.non_empty_group
    a.leave(now + 1)
    result, writes = coordinator.delete_groups(["g"], now + 2)
    assert result.errors["g"] == ErrorCode.none
    records = [r for w in writes for r in w.records]
    assert records
    assert all(value is None for _, value in records)
    assert coordinator.consumer_group_describe(["g"], now + 3)[0].error == ErrorCode.group_id_not_found
    assert coordinator.list_groups().groups == ()


def test_offsets_check_the_member_epoch():
    coordinator, _, _ = make()
    a = SimClient(coordinator, "g", ("orders",))
    now = settle([a], 1)
    tp = TopicPartition("orders", 1)
    offsets = {tp: PartitionOffsetCommit(7)}

    def commit(member_id: str, epoch: int, api_version: int = 9) -> ErrorCode:
        result, _ = coordinator.commit_offsets(OffsetCommitRequest("g", offsets, member_id, epoch), now,
                                               api_version=api_version)
        return result.partitions[tp]

    assert commit(a.member_id, a.epoch - 1) == ErrorCode.stale_member_epoch
    assert commit("nobody", a.epoch) == ErrorCode.unknown_member_id
    assert commit("", -1) == ErrorCode.unknown_member_id  # the group has members
    assert commit(a.member_id, a.epoch, api_version=8) == ErrorCode.unsupported_version
    assert coordinator.committed_offsets("g") == {}
    assert commit(a.member_id, a.epoch) == ErrorCode.none
    fetch = OffsetFetchRequest("g", (tp,))
    assert coordinator.fetch_offsets(fetch, now, member_id=a.member_id, member_epoch=a.epoch - 1).error \
        == ErrorCode.stale_member_epoch
    assert coordinator.fetch_offsets(fetch, now).partitions[tp].offset == 7  # an admin's fetch
    staged, _ = coordinator.add_pending_txn_offsets("g", 9, offsets, now, member_id=a.member_id,
                                                    generation_id=a.epoch - 1)
    assert staged.partitions[tp] == ErrorCode.illegal_generation
    staged, _ = coordinator.add_pending_txn_offsets("g", 9, offsets, now, member_id=a.member_id,
                                                    generation_id=a.epoch)
    assert staged.partitions[tp] == ErrorCode.none


def test_classic_requests_on_a_consumer_group():
    coordinator, _, _ = make()
    a = SimClient(coordinator, "g", ("orders",))
    now = settle([a], 1)
    answers: list[JoinResult] = []
    # Kafka 4 takes classic members of the consumer embedded protocol in (test_group_migration_policy.py);
    # any other protocol type does not fit a consumer group.
    join = JoinRequest("g", "", "connect", (JoinProtocol("range", b""),), 10_000, 10_000, 9)
    coordinator.join_group(join, now, answers.append)
    assert answers[0].error == ErrorCode.inconsistent_group_protocol
    listed = coordinator.list_groups(types_filter=("consumer",)).groups
    assert [(g.group_id, g.state) for g in listed] == [("g", "Stable")]
    assert coordinator.list_groups(types_filter=("classic",)).groups == ()
    assert coordinator.describe_groups(["g"], now)[0].state == "Dead"


def test_empty_consumer_group_becomes_a_classic_group_keeping_offsets():
    coordinator, _, _ = make(group_initial_rebalance_delay_ms=0)
    a = SimClient(coordinator, "g", ("orders",))
    now = settle([a], 1)
    tp = TopicPartition("orders", 0)
    coordinator.commit_offsets(OffsetCommitRequest("g", {tp: PartitionOffsetCommit(5)}, a.member_id, a.epoch), now)
    a.leave(now + 1)
    answers: list[JoinResult] = []
    join = JoinRequest("g", "", "consumer", (JoinProtocol("range", b""),), 10_000, 10_000, 3)
    writes = coordinator.join_group(join, now + 2, answers.append)
    assert answers[0].error == ErrorCode.none
    assert coordinator.group_type("g") == "classic"
    assert coordinator.committed_offsets("g")[tp].offset == 5
    assert any(value is None for w in writes for _, value in w.records), "the consumer group's records are tombstoned"


def test_empty_classic_group_becomes_a_consumer_group_keeping_offsets():
    coordinator, _, _ = make()
    tp = TopicPartition("orders", 0)
    coordinator.commit_offsets(OffsetCommitRequest("g", {tp: PartitionOffsetCommit(5)}), 1)
    a = SimClient(coordinator, "g", ("orders",))
    settle([a], 2)
    assert coordinator.group_type("g") == "consumer"
    assert coordinator.committed_offsets("g")[tp].offset == 5


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["join", "heartbeat", "leave", "static-leave", "crash", "pass-time",
                                           "restart"]),
                          st.integers(0, 5)), max_size=60),
       st.sampled_from(["uniform", "range"]))
def test_no_partition_is_ever_owned_twice_and_a_stable_group_owns_all(ops, assignor):
    """Under any sequence of joins, heartbeats, leaves, crashes, static restarts and passing time no partition is
    owned by two live members at once; once the away members' sessions ended and heartbeats
    settled, the group is Stable with every subscribed partition owned; and a replay of the
    records written rebuilds the same group."""
    cluster = Cluster()
    cluster.add("orders", T1, 7)
    cluster.add("audit", T2, 3)
    coordinator, _, _ = make(cluster)
    clients: list[SimClient] = []
    log: list[tuple[bytes, bytes | None]] = []
    now = 0

    def pass_time(ms: int) -> int:
        """Live members heartbeat every 5 s while time passes; timers fire."""
        t = now
        for _ in range(ms // 5_000):
            t += 5_000
            for c in clients:
                c.heartbeat(t)
            for write in coordinator.tick(t):
                log.extend(write.records)
            assert_disjoint(clients)
        return t

    for op, index in ops:
        now += 1
        if op == "join" or not clients:
            static = index % 2 == 0
            topics = ("orders", "audit") if index % 3 else ("orders",)
            clients.append(SimClient(coordinator, "g", topics, assignor=assignor,
                                     instance_id=f"i{len(clients)}-{now}" if static else None, log=log))
            clients[-1].heartbeat(now)
        elif op == "pass-time":
            now = pass_time(10_000 * (index + 1))
        else:
            client = clients[index % len(clients)]
            if op == "heartbeat":
                client.heartbeat(now)
            elif op == "crash":
                clients.remove(client)  # gone without a word: its session must end
            elif op == "restart" and client.instance_id is not None:
                # A static member restarts: leaves with -2, a new process takes over its instance id.
                client.leave(now, static=True)
                clients.remove(client)
                clients.append(SimClient(coordinator, "g", client.topics, assignor=assignor,
                                         instance_id=client.instance_id, log=log))
                clients[-1].heartbeat(now)
            else:
                client.leave(now, static=op == "static-leave" and client.instance_id is not None)
                clients.remove(client)
        assert_disjoint(clients)
    now = pass_time(SESSION_MS + 10_000)  # the away members' sessions end
    now = settle(clients, now, rounds=30)
    assert_disjoint(clients)
    described = coordinator.consumer_group_describe(["g"], now)[0]
    replayed = GroupCoordinator(GroupCoordinatorConfig(offsets_topic_partitions=5), topics=cluster.view)
    replayed.load(log, now)
    assert replayed.consumer_group_describe(["g"], now)[0] == described
    if not clients:
        assert described.state in ("Empty", "Dead")
        return
    assert described.state == "Stable"
    assert {m.member_id for m in described.members} == {c.member_id for c in clients}
    owned = set().union(*(c.partitions() for c in clients))
    expected = {(T1, p) for p in range(7)}
    if any("audit" in c.topics for c in clients):
        expected |= {(T2, p) for p in range(3)}
    assert owned == expected


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_assignors_balance(assignor):
    coordinator, _, _ = make()
    clients = [SimClient(coordinator, "g", ("orders",), assignor=assignor) for _ in range(4)]
    settle(clients, 1)
    assert sorted(len(c.partitions()) for c in clients) == [1, 1, 2, 2]


def test_offsets_of_subscribed_topics_do_not_expire():
    cluster = Cluster()
    cluster.add("orders", T1, 2)
    cluster.add("old", T2, 1)
    coordinator, _, _ = make(cluster, offsets_retention_ms=1_000, offsets_retention_check_interval_ms=100)
    a = SimClient(coordinator, "g", ("orders",))
    now = settle([a], 1)
    offsets = {TopicPartition("orders", 0): PartitionOffsetCommit(3), TopicPartition("old", 0): PartitionOffsetCommit(4)}
    coordinator.commit_offsets(OffsetCommitRequest("g", offsets, a.member_id, a.epoch), now)
    coordinator.tick(now)
    for _ in range(1, 30):
        now += 100
        a.heartbeat(now)
        coordinator.tick(now)
    assert set(coordinator.committed_offsets("g")) == {TopicPartition("orders", 0)}


def test_an_administrator_removes_static_members_with_leave_group():
    coordinator, _, _ = make()
    a = SimClient(coordinator, "g", ("orders",), instance_id="a")
    b = SimClient(coordinator, "g", ("orders",), instance_id="b")
    now = settle([a, b], 1)
    epoch = coordinator.consumer_group_describe(["g"], now)[0].group_epoch
    request = LeaveRequest("g", (LeavingMember("", "a"), LeavingMember("", "nobody"), LeavingMember(b.member_id),
                                 LeavingMember("wrong", "b")))
    result, writes = coordinator.leave_group(request, now + 1)
    assert [m.error for m in result.members] == [
        ErrorCode.none, ErrorCode.unknown_member_id, ErrorCode.unknown_member_id, ErrorCode.fenced_instance_id]
    assert writes
    described = coordinator.consumer_group_describe(["g"], now + 2)[0]
    assert [m.member_id for m in described.members] == [b.member_id]
    assert described.group_epoch == epoch + 1
    settle([b], now + 3)
    assert b.owned == {T1: frozenset(range(6))}


def test_offset_delete_keeps_the_offsets_of_subscribed_topics():
    cluster = Cluster()
    cluster.add("orders", T1, 2)
    cluster.add("old", T2, 1)
    coordinator, _, _ = make(cluster)
    a = SimClient(coordinator, "g", ("orders",))
    now = settle([a], 1)
    orders, old = TopicPartition("orders", 0), TopicPartition("old", 0)
    offsets = {orders: PartitionOffsetCommit(3), old: PartitionOffsetCommit(4)}
    coordinator.commit_offsets(OffsetCommitRequest("g", offsets, a.member_id, a.epoch), now)
    result, writes = coordinator.delete_offsets(OffsetDeleteRequest("g", (orders, old)), now)
    assert result.error == ErrorCode.none
    assert result.partitions == {orders: ErrorCode.group_subscribed_to_topic, old: ErrorCode.none}
    assert writes
    assert set(coordinator.committed_offsets("g")) == {orders}
    a.leave(now + 1)  # an empty group keeps nothing back
    result, _ = coordinator.delete_offsets(OffsetDeleteRequest("g", (orders,)), now + 2)
    assert result.partitions == {orders: ErrorCode.none}
    assert coordinator.committed_offsets("g") == {}


def test_assignor_and_timeout_settings_are_checked():
    names = "org.apache.kafka.coordinator.group.assignor.RangeAssignor,uniform"
    assert list(assignors_from(names)) == ["range", "uniform"]
    with pytest.raises(InvalidConfigError):
        assignors_from("sticky")
    with pytest.raises(InvalidConfigError):
        assignors_from(" , ")
    with pytest.raises(InvalidConfigError):
        GroupCoordinatorConfig(consumer_session_timeout_ms=10_000)  # below its 45 s minimum
    with pytest.raises(InvalidConfigError):
        GroupCoordinatorConfig(consumer_heartbeat_interval_ms=5_000, consumer_session_timeout_ms=5_000,
                               consumer_min_session_timeout_ms=1_000)
    # The first configured assignor is the default.
    coordinator, _, _ = make(consumer_assignors="range,uniform")
    a, b = SimClient(coordinator, "g", ("orders",), member_id="a"), SimClient(coordinator, "g", ("orders",), member_id="b")
    now = settle([a, b], 1)
    assert coordinator.consumer_group_describe(["g"], now)[0].assignor_name == "range"
    assert a.owned == {T1: frozenset({0, 1, 2})}
