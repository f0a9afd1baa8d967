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
    JoinProtocol,
    JoinRequest,
    JoinResult,
    OffsetCommitRequest,
    PartitionOffsetCommit,
    TopicPartition,
)
from oncestream.coordinator.group.consumer.records import TopicMetadata
from oncestream.coordinator.group.migration import (
    ConsumerGroupMigrationPolicy,
    OnlineUpgradeRefusedError,
    online_upgrade_refusal,
)
from oncestream.errors import InvalidConfigError
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


@pytest.mark.parametrize("policy", list(P))
@pytest.mark.parametrize("protocol_type", ["consumer", "connect"])
def test_a_consumer_member_cannot_join_a_classic_group_with_members(policy, protocol_type):
    """Kafka answers GROUP_ID_NOT_FOUND "Group g is not a consumer group" where its
    validateOnlineUpgrade refuses; oncestream refuses every upgrade of a group with members
    (online upgrade is not built yet), so the classic group is left exactly as it was."""
    coordinator = make(policy)
    joined = classic_member(coordinator, 1, protocol_type)
    before = (coordinator.group_type("g"), coordinator.group_state("g"), coordinator.group_snapshot("g"))
    member = SimClient(coordinator, "g", ("orders",))
    result = member.heartbeat(5)
    assert (result.error, result.error_message) == (ErrorCode.group_id_not_found, "Group g is not a consumer group")
    assert (coordinator.group_type("g"), coordinator.group_state("g"), coordinator.group_snapshot("g")) == before
    assert coordinator.group_snapshot("g") is not None
    assert [m.member_id for m in coordinator.group_snapshot("g").members] == [joined.member_id]  # type: ignore[union-attr]


def test_the_refusal_keeps_kafkas_reason():
    coordinator = make(P.DISABLED)
    classic_member(coordinator, 1)
    with pytest.raises(OnlineUpgradeRefusedError) as refused:
        coordinator._take_over_classic("g")
    assert refused.value.reason == "the online upgrade is disabled"
    assert str(refused.value) == "Group g is not a consumer group"


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
