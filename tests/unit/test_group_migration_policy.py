"""``group.consumer.migration.policy`` (Kafka's ConsumerGroupMigrationPolicy): its values, its
parsing from broker properties, and what the coordinator does when a consumer-protocol member
meets a classic group (and the other way round) under each policy."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode

from oncestream.broker.group_service import group_config_from
from oncestream.coordinator.group import (
    GroupCoordinator,
    GroupCoordinatorConfig,
    HeartbeatRequest,
    JoinProtocol,
    JoinRequest,
    JoinResult,
    LeaveRequest,
    LeavingMember,
    OffsetCommitRequest,
    PartitionOffsetCommit,
    SyncRequest,
    SyncResult,
    TopicPartition,
)
from oncestream.coordinator.group.consumer.records import TopicMetadata
from oncestream.coordinator.group.migration import (
    ConsumerGroupMigrationPolicy,
    OnlineUpgradeRefusedError,
    online_upgrade_refusal,
)
from oncestream.errors import InvalidConfigError
from oncestream.protocol.consumer_protocol import (
    Assignment,
    Subscription,
    decode_assignment,
    encode_assignment,
    encode_subscription,
)
from tests.unit.consumer_group_sim import SimClient

P = ConsumerGroupMigrationPolicy
TOPIC_ID = uuid.UUID(int=1)


@pytest.mark.parametrize(("policy", "upgrade", "downgrade"), [
    (P.BIDIRECTIONAL, True, True), (P.UPGRADE, True, False), (P.DOWNGRADE, False, True), (P.DISABLED, False, False),
])
def test_each_policy_allows_kafkas_conversions(policy, upgrade, downgrade):
    assert (policy.upgrade_enabled, policy.downgrade_enabled) == (upgrade, downgrade)
    assert P.parse(policy.value.upper()) is policy


def test_the_broker_property_defaults_to_bidirectional_and_rejects_other_values():
    assert group_config_from({}).consumer_migration_policy is P.BIDIRECTIONAL
    assert GroupCoordinatorConfig().consumer_migration_policy is P.BIDIRECTIONAL
    assert group_config_from({"group.consumer.migration.policy": "Disabled"}).consumer_migration_policy is P.DISABLED
    with pytest.raises(InvalidConfigError, match=r"Invalid value sideways for configuration "
                                                 r"group\.consumer\.migration\.policy: String must be one of "
                                                 r"\(case insensitive\): bidirectional, upgrade, downgrade, disabled"):
        group_config_from({"group.consumer.migration.policy": "sideways"})


def test_upgrade_refusals_follow_kafkas_checks_in_order():
    assert online_upgrade_refusal(P.DISABLED, "connect", 9, 1) == "the online upgrade is disabled"
    assert online_upgrade_refusal(P.DOWNGRADE, "consumer", 1, 5) == "the online upgrade is disabled"
    assert online_upgrade_refusal(P.UPGRADE, "connect", 9, 1) == "the group does not use the consumer embedded protocol"
    assert online_upgrade_refusal(P.BIDIRECTIONAL, "consumer", 3, 2) == \
        "the group size exceeds the consumer group maximum size"
    assert online_upgrade_refusal(P.BIDIRECTIONAL, "consumer", 2, 2) is None


class ClassicClient:
    """One classic consumer (eager, range) of group "g" driving JoinGroup/SyncGroup/Heartbeat
    like a client: it revokes everything before it rejoins and takes the SyncGroup assignment."""

    def __init__(self, coordinator: GroupCoordinator, protocol_type: str = "consumer",
                 log: list | None = None) -> None:
        self.coordinator = coordinator
        self.protocol_type = protocol_type
        self.member_id = ""
        self.generation = -1
        self.owned: set[tuple[str, int]] = set()
        self.log = log

    def _keep(self, writes: list) -> None:
        if self.log is not None:
            for write in writes:
                self.log.extend(write.records)

    def join_and_sync(self, now_ms: int) -> ErrorCode:
        """Rejoin (revoking everything first) and sync; the leader of a classic group assigns
        every partition of "orders" to the members round robin."""
        self.owned = set()
        metadata = encode_subscription(Subscription(topics=["orders"], version=1))
        joined: list[JoinResult] = []
        request = JoinRequest("g", self.member_id, self.protocol_type, (JoinProtocol("range", metadata),),
                              10_000, 10_000, 3)
        self._keep(self.coordinator.join_group(request, now_ms, joined.append))
        self._keep(self.coordinator.tick(now_ms + 1))
        if not joined or joined[0].error != ErrorCode.none:
            return joined[0].error if joined else ErrorCode.unknown_server_error
        result = joined[0]
        self.member_id, self.generation = result.member_id, result.generation_id
        assignments = {}
        if result.leader_id == self.member_id:
            ids = [m.member_id for m in result.members]
            parts: dict[str, list[tuple[str, list[int]]]] = {i: [] for i in ids}
            for p in range(4):
                parts[ids[p % len(ids)]].append(("orders", [p]))
            assignments = {i: encode_assignment(Assignment(partitions=ps)) for i, ps in parts.items()}
        synced: list[SyncResult] = []
        self._keep(self.coordinator.sync_group(
            SyncRequest("g", self.generation, self.member_id, protocol_type=self.protocol_type, protocol_name="range",
                        assignments=assignments), now_ms + 2, synced.append))
        if synced[0].error == ErrorCode.none:
            self.owned = {(t, p) for t, ps in decode_assignment(synced[0].assignment).partitions for p in ps}
        return synced[0].error

    def heartbeat(self, now_ms: int) -> ErrorCode:
        return self.coordinator.heartbeat(HeartbeatRequest("g", self.member_id, self.generation), now_ms).error


def make(policy: ConsumerGroupMigrationPolicy, **config: object) -> GroupCoordinator:
    topics = {"orders": TopicMetadata(TOPIC_ID, "orders", 4)}
    return GroupCoordinator(
        GroupCoordinatorConfig(offsets_topic_partitions=3, group_initial_rebalance_delay_ms=0,
                               consumer_migration_policy=policy, **config),  # type: ignore[arg-type]
        topics=lambda: dict(topics))


def classic_member(coordinator: GroupCoordinator, now_ms: int, protocol_type: str = "consumer") -> JoinResult:
    """One classic member joins group "g" and the rebalance completes."""
    answers: list[JoinResult] = []
    join = JoinRequest("g", "", protocol_type, (JoinProtocol("range", b""),), 10_000, 10_000, 3)
    coordinator.join_group(join, now_ms, answers.append)
    coordinator.tick(now_ms + 1)
    assert [a.error for a in answers] == [ErrorCode.none]
    return answers[0]


@pytest.mark.parametrize(("policy", "protocol_type", "reason"), [
    (P.DISABLED, "consumer", "the online upgrade is disabled"),
    (P.DOWNGRADE, "consumer", "the online upgrade is disabled"),
    (P.BIDIRECTIONAL, "connect", "the group does not use the consumer embedded protocol"),
    (P.UPGRADE, "connect", "the group does not use the consumer embedded protocol"),
])
def test_a_refused_upgrade_answers_group_id_not_found_and_changes_nothing(policy, protocol_type, reason):
    """Kafka answers GROUP_ID_NOT_FOUND "Group g is not a consumer group" where its
    validateOnlineUpgrade refuses, and the classic group is left exactly as it was."""
    coordinator = make(policy)
    classic = ClassicClient(coordinator, protocol_type=protocol_type)
    classic.join_and_sync(1)
    before = (coordinator.group_type("g"), coordinator.group_state("g"), coordinator.group_snapshot("g"))
    member = SimClient(coordinator, "g", ("orders",))
    result = member.heartbeat(5)
    assert (result.error, result.error_message) == (ErrorCode.group_id_not_found, "Group g is not a consumer group")
    assert (coordinator.group_type("g"), coordinator.group_state("g"), coordinator.group_snapshot("g")) == before
    with pytest.raises(OnlineUpgradeRefusedError) as refused:
        coordinator._take_over_classic("g")
    assert refused.value.reason == reason


def test_an_upgrade_of_a_group_with_malformed_metadata_is_refused():
    coordinator = make(P.BIDIRECTIONAL)
    classic_member(coordinator, 1)  # metadata b"": not a ConsumerProtocol subscription
    before = coordinator.group_snapshot("g")
    result = SimClient(coordinator, "g", ("orders",)).heartbeat(5)
    assert (result.error, result.error_message) == (
        ErrorCode.group_id_not_found,
        "Cannot upgrade the classic group g to consumer group because the embedded consumer protocol is malformed.")
    assert (coordinator.group_type("g"), coordinator.group_snapshot("g")) == ("classic", before)


@pytest.mark.parametrize("policy", list(P))
def test_empty_groups_convert_both_ways_whatever_the_policy(policy):
    coordinator = make(policy)
    tp = TopicPartition("orders", 0)
    coordinator.commit_offsets(OffsetCommitRequest("g", {tp: PartitionOffsetCommit(5)}), 1)
    member = SimClient(coordinator, "g", ("orders",))
    assert member.heartbeat(2).error == ErrorCode.none
    assert coordinator.group_type("g") == "consumer"
    member.leave(3)
    classic_member(coordinator, 4)
    assert coordinator.group_type("g") == "classic"
    assert coordinator.committed_offsets("g")[tp].offset == 5


def owned_by(sim: SimClient) -> set[tuple[str, int]]:
    return {("orders", p) for ps in sim.owned.values() for p in ps}


def settle(classic: ClassicClient, modern: SimClient | None, now_ms: int, rounds: int = 12) -> int:
    """Heartbeat both until nothing is asked of them; the classic member rejoins when told."""
    for _ in range(rounds):
        now_ms += 10
        if modern is not None:
            modern.heartbeat(now_ms)
        if classic.heartbeat(now_ms) == ErrorCode.rebalance_in_progress:
            assert classic.join_and_sync(now_ms) == ErrorCode.none
        if modern is not None:
            assert not owned_by(modern) & classic.owned, "a partition owned twice"
    return now_ms


def test_online_upgrade_then_downgrade_keeps_every_partition_owned_once():
    """A consumer-protocol member joins a classic group with a member: the group becomes a
    consumer group (the classic member keeps its partitions until it is asked to rejoin), the
    partitions are split with none owned twice, a restart rebuilds the converted group from its
    records; when the consumer member leaves the group is classic again and rebalances, and the
    classic member gets everything."""
    coordinator = make(P.BIDIRECTIONAL)
    log: list = []
    classic = ClassicClient(coordinator, log=log)
    assert classic.join_and_sync(1) == ErrorCode.none
    assert len(classic.owned) == 4
    modern = SimClient(coordinator, "g", ("orders",), log=log)
    assert modern.heartbeat(10).error == ErrorCode.none
    assert coordinator.group_type("g") == "consumer"
    assert owned_by(modern) == set(), "the classic member still owns everything"
    now = settle(classic, modern, 20)
    assert len(classic.owned) == 2
    assert len(owned_by(modern)) == 2
    assert classic.owned | owned_by(modern) == {("orders", p) for p in range(4)}
    description = coordinator.consumer_group_describe(["g"], now)[0]
    assert description.state == "Stable"

    restarted = make(P.BIDIRECTIONAL)
    restarted.load(log, now + 1)
    assert restarted.group_type("g") == "consumer"
    again = restarted.consumer_group_describe(["g"], now + 1)[0]
    assert (again.group_epoch, sorted(m.member_id for m in again.members)) == (
        description.group_epoch, sorted(m.member_id for m in description.members))
    # The classic member carries on with the restarted coordinator: same generation, same partitions.
    assert restarted.heartbeat(HeartbeatRequest("g", classic.member_id, classic.generation), now + 1).error \
        == ErrorCode.none
    resynced: list[SyncResult] = []
    restarted.sync_group(SyncRequest("g", classic.generation, classic.member_id), now + 1, resynced.append)
    assert {(t, p) for t, ps in decode_assignment(resynced[0].assignment).partitions for p in ps} == classic.owned

    modern.leave(now + 1)
    assert coordinator.group_type("g") == "classic"
    assert coordinator.heartbeat(HeartbeatRequest("g", classic.member_id, classic.generation), now + 2).error \
        == ErrorCode.rebalance_in_progress
    assert classic.join_and_sync(now + 3) == ErrorCode.none
    assert len(classic.owned) == 4
    assert coordinator.group_state("g") is not None
    assert coordinator.group_state("g").name == "STABLE"  # type: ignore[union-attr]


def test_without_downgrade_the_classic_member_stays_in_the_consumer_group():
    coordinator = make(P.UPGRADE)
    classic = ClassicClient(coordinator)
    classic.join_and_sync(1)
    modern = SimClient(coordinator, "g", ("orders",))
    modern.heartbeat(10)
    now = settle(classic, modern, 20)
    modern.leave(now + 1)
    assert coordinator.group_type("g") == "consumer"
    settle(classic, None, now + 2)
    assert len(classic.owned) == 4


def test_a_classic_member_joins_a_consumer_group_with_members_whatever_the_policy():
    """Kafka 4 takes a classic member of the consumer embedded protocol into a consumer group
    (no conversion, so the policy does not matter)."""
    coordinator = make(P.DISABLED)
    modern = SimClient(coordinator, "g", ("orders",))
    modern.heartbeat(1)
    classic = ClassicClient(coordinator)
    assert classic.join_and_sync(5) == ErrorCode.none
    now = settle(classic, modern, 10)
    assert coordinator.group_type("g") == "consumer"
    assert (len(classic.owned), len(owned_by(modern))) == (2, 2)
    modern.leave(now + 1)
    assert coordinator.group_type("g") == "consumer"  # no downgrade under "disabled"


def test_classic_member_errors_and_commits_in_a_consumer_group():
    """Kafka's answers to a classic member of a consumer group: a wrong generation is
    ILLEGAL_GENERATION (SyncGroup, Heartbeat, OffsetCommit), an unknown member UNKNOWN_MEMBER_ID,
    another protocol name INCONSISTENT_GROUP_PROTOCOL; its OffsetCommit below v9 is accepted
    at its generation."""
    coordinator = make(P.BIDIRECTIONAL)
    modern = SimClient(coordinator, "g", ("orders",))
    modern.heartbeat(1)
    classic = ClassicClient(coordinator)
    classic.join_and_sync(5)
    now = settle(classic, modern, 10)
    gen, mid = classic.generation, classic.member_id
    assert coordinator.heartbeat(HeartbeatRequest("g", mid, gen + 1), now).error == ErrorCode.illegal_generation
    assert coordinator.heartbeat(HeartbeatRequest("g", "nobody", gen), now).error == ErrorCode.unknown_member_id
    assert coordinator.heartbeat(HeartbeatRequest("g", modern.member_id, modern.epoch), now).error \
        == ErrorCode.unknown_member_id, "a consumer-protocol member does not heartbeat with Heartbeat"
    synced: list[SyncResult] = []
    coordinator.sync_group(SyncRequest("g", gen, mid, protocol_type="consumer", protocol_name="roundrobin"), now,
                           synced.append)
    assert synced[0].error == ErrorCode.inconsistent_group_protocol
    joined: list[JoinResult] = []
    other = JoinRequest("g", "", "consumer", (JoinProtocol("roundrobin", encode_subscription(Subscription(
        topics=["orders"]))),), 10_000, 10_000, 3)
    coordinator.join_group(other, now, joined.append)
    assert joined[0].error == ErrorCode.inconsistent_group_protocol, "no protocol shared with the classic members"
    tp = TopicPartition("orders", 0)
    stale, _ = coordinator.commit_offsets(OffsetCommitRequest("g", {tp: PartitionOffsetCommit(3)}, mid, gen - 1),
                                          now, api_version=8)
    assert stale.partitions[tp] == ErrorCode.illegal_generation
    ok, _ = coordinator.commit_offsets(OffsetCommitRequest("g", {tp: PartitionOffsetCommit(3)}, mid, gen), now,
                                       api_version=8)
    assert ok.partitions[tp] == ErrorCode.none


def test_a_classic_member_that_never_syncs_is_fenced_and_one_that_leaves_is_gone():
    coordinator = make(P.DISABLED)
    modern = SimClient(coordinator, "g", ("orders",))
    modern.heartbeat(1)
    joined: list[JoinResult] = []
    metadata = encode_subscription(Subscription(topics=["orders"], version=1))
    coordinator.join_group(JoinRequest("g", "", "consumer", (JoinProtocol("range", metadata),), 60_000, 10_000, 3),
                           2, joined.append)
    assert joined[0].error == ErrorCode.none
    assert joined[0].generation_id > 0
    assert len(coordinator.consumer_group_describe(["g"], 3)[0].members) == 2
    modern.heartbeat(5_000)
    coordinator.tick(10_003)  # the rebalance timeout passed without a SyncGroup
    assert [m.member_id for m in coordinator.consumer_group_describe(["g"], 10_004)[0].members] == [modern.member_id]

    classic = ClassicClient(coordinator)
    classic.join_and_sync(10_010)
    result, _ = coordinator.leave_group(LeaveRequest("g", (LeavingMember(classic.member_id),)), 10_020)
    assert [m.error for m in result.members] == [ErrorCode.none]
    assert [m.member_id for m in coordinator.consumer_group_describe(["g"], 10_021)[0].members] == [modern.member_id]


def test_a_classic_member_that_stops_heartbeating_is_fenced_after_its_session():
    coordinator = make(P.DISABLED)
    modern = SimClient(coordinator, "g", ("orders",))
    modern.heartbeat(1)
    classic = ClassicClient(coordinator)
    classic.join_and_sync(2)
    for t in range(5_000, 30_001, 5_000):
        modern.heartbeat(t)
        coordinator.tick(t)
    # 10 s of classic session timeout passed long ago: only the consumer member is left.
    assert [m.member_id for m in coordinator.consumer_group_describe(["g"], 30_002)[0].members] == [modern.member_id]


def test_an_upgrade_keeps_a_partition_two_classic_members_claim_with_the_first():
    coordinator = GroupCoordinator(
        GroupCoordinatorConfig(offsets_topic_partitions=3, group_initial_rebalance_delay_ms=100),
        topics=lambda: {"orders": TopicMetadata(TOPIC_ID, "orders", 4)})
    metadata = encode_subscription(Subscription(topics=["orders"], version=1))
    joined: list[JoinResult] = []
    for _ in range(2):
        coordinator.join_group(JoinRequest("g", "", "consumer", (JoinProtocol("range", metadata),), 10_000, 10_000,
                                           3), 1, joined.append)
    for t in (200, 400, 1_000):
        coordinator.tick(t)
    assert [j.error for j in joined] == [ErrorCode.none, ErrorCode.none]
    ids = [j.member_id for j in joined]
    both = encode_assignment(Assignment(partitions=[("orders", [0, 1])]))
    leader = next(j for j in joined if j.leader_id == j.member_id)
    coordinator.sync_group(SyncRequest("g", leader.generation_id, leader.member_id,
                                       assignments={i: both for i in ids}), 1_001, lambda _: None)
    assert SimClient(coordinator, "g", ("orders",)).heartbeat(1_002).error == ErrorCode.none
    owners = {m.member_id: m.assignment for m in coordinator.consumer_group_describe(["g"], 1_003)[0].members
              if m.member_id in ids}
    assert sorted(sorted(ps) for a in owners.values() for ps in a.values()) == [[0, 1]]


def test_an_invalid_heartbeat_converts_nothing():
    coordinator = make(P.BIDIRECTIONAL)
    classic = ClassicClient(coordinator)
    classic.join_and_sync(1)
    before = coordinator.group_snapshot("g")
    refused = SimClient(coordinator, "g", ("orders",), assignor="nope").heartbeat(5)
    assert refused.error == ErrorCode.unsupported_assignor
    assert (coordinator.group_type("g"), coordinator.group_snapshot("g")) == ("classic", before)


def test_a_restarted_static_classic_member_takes_over_its_partitions_without_a_rebalance():
    coordinator = make(P.DISABLED)
    modern = SimClient(coordinator, "g", ("orders",))
    modern.heartbeat(1)
    metadata = encode_subscription(Subscription(topics=["orders"], version=1))

    def join(now_ms: int) -> JoinResult:
        joined: list[JoinResult] = []
        coordinator.join_group(JoinRequest("g", "", "consumer", (JoinProtocol("range", metadata),), 10_000, 10_000,
                                           5, group_instance_id="s-1"), now_ms, joined.append)
        return joined[0]

    first = join(2)
    for t in range(3, 40):
        modern.heartbeat(t)
    synced: list[SyncResult] = []
    coordinator.sync_group(SyncRequest("g", first.generation_id, first.member_id, group_instance_id="s-1"), 41,
                           synced.append)
    owned = decode_assignment(synced[0].assignment).partitions
    epoch = coordinator.consumer_group_describe(["g"], 42)[0].group_epoch
    again = join(43)
    assert again.error == ErrorCode.none
    assert again.member_id != first.member_id
    described = coordinator.consumer_group_describe(["g"], 44)[0]
    assert described.group_epoch == epoch, "a static restart is no rebalance"
    assert sorted(m.member_id for m in described.members) == sorted([modern.member_id, again.member_id])
    coordinator.sync_group(SyncRequest("g", again.generation_id, again.member_id, group_instance_id="s-1"), 45,
                           synced.append)
    assert decode_assignment(synced[1].assignment).partitions == owned
    assert coordinator.heartbeat(HeartbeatRequest("g", first.member_id, first.generation_id, "s-1"), 46).error \
        == ErrorCode.fenced_instance_id


def test_a_classic_static_member_replacing_the_last_consumer_member_downgrades_the_group():
    """Kafka's validateOnlineDowngradeWithReplacedMemberId: a static member restarted with the
    classic protocol replaces its consumer-protocol incarnation, the last one of the group; the
    group becomes classic, and the member keeps the partitions it took over (no rebalance)."""
    coordinator = make(P.BIDIRECTIONAL)
    modern = SimClient(coordinator, "g", ("orders",), instance_id="s-1")
    classic = ClassicClient(coordinator)
    classic.join_and_sync(1)  # a classic group with one member
    modern.heartbeat(10)  # the upgrade
    now = settle(classic, modern, 20)
    kept = owned_by(modern)
    assert kept
    assert coordinator.group_type("g") == "consumer"
    modern.leave(now + 1, static=True)  # a static member away: it keeps its partitions
    metadata = encode_subscription(Subscription(topics=["orders"], version=1))
    joined: list[JoinResult] = []
    coordinator.join_group(JoinRequest("g", "", "consumer", (JoinProtocol("range", metadata),), 10_000, 10_000, 5,
                                       group_instance_id="s-1"), now + 2, joined.append)
    assert joined[0].error == ErrorCode.none
    assert coordinator.group_type("g") == "classic"
    assert coordinator.group_state("g").name == "STABLE"  # type: ignore[union-attr]
    synced: list[SyncResult] = []
    coordinator.sync_group(SyncRequest("g", joined[0].generation_id, joined[0].member_id, group_instance_id="s-1"),
                           now + 3, synced.append)
    assert synced[0].error == ErrorCode.none
    assert {(t, p) for t, ps in decode_assignment(synced[0].assignment).partitions for p in ps} == kept
