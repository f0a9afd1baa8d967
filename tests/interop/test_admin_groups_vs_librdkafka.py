"""oncestream's ``Admin`` group methods against librdkafka's AdminClient on the same broker and
the same groups: the same listings (with state and type filters), descriptions, committed
offsets, and what each side's writes (alter offsets, delete offsets, delete groups) leave for
the other to read."""

from __future__ import annotations

import pytest
from confluent_kafka import ConsumerGroupState as RdState
from confluent_kafka import ConsumerGroupTopicPartitions as RdRequest
from confluent_kafka import ConsumerGroupType as RdType
from confluent_kafka import KafkaException as RdKafkaException
from confluent_kafka import TopicPartition as RdTopicPartition

from oncestream.client import Admin, ConsumerGroupState, ConsumerGroupTopicPartitions, ConsumerGroupType, TopicPartition
from tests.support.clients import create_topic, unique_topic
from tests.support.groups import (
    WAIT_TIMEOUT_S,
    GroupMember,
    group_admin,
    group_broker,  # noqa: F401 - fixture
    produce_spread,
    unique_group,
    wait_for_split,
    wait_until,
)

pytestmark = pytest.mark.interop

PARTITIONS = 3


def _rd_listed(rd, ours: set[str], **filters) -> dict[str, tuple[str, bool]]:
    result = rd.list_consumer_groups(request_timeout=30, **filters).result(timeout=WAIT_TIMEOUT_S)
    assert not result.errors, result.errors
    return {g.group_id: (g.state.name, g.is_simple_consumer_group) for g in result.valid if g.group_id in ours}


def _our_listed(admin: Admin, ours: set[str], **filters) -> dict[str, tuple[str, bool]]:
    result = admin.list_consumer_groups(**filters)
    assert not result.errors, result.errors
    return {g.group_id: (g.state.name, g.is_simple_consumer_group) for g in result.valid if g.group_id in ours}


def _rd_offsets(rd, group_id: str, topic: str) -> dict[int, int]:
    request = RdRequest(group_id, [RdTopicPartition(topic, p) for p in range(PARTITIONS)])
    result = rd.list_consumer_group_offsets([request], request_timeout=30)[group_id].result(timeout=WAIT_TIMEOUT_S)
    return {tp.partition: tp.offset for tp in result.topic_partitions}


def _our_offsets(admin: Admin, group_id: str, topic: str) -> dict[int, int]:
    request = ConsumerGroupTopicPartitions(group_id, [TopicPartition(topic, p) for p in range(PARTITIONS)])
    result = admin.list_consumer_group_offsets([request])[group_id]
    assert result.error is None
    assert all(tp.error is None for tp in result.topic_partitions or ())
    return {tp.partition: tp.offset for tp in result.topic_partitions or ()}


def _assignment(member) -> list[tuple[str, int]]:
    return sorted((tp.topic, tp.partition) for tp in member.assignment.topic_partitions)


def test_listing_description_and_offsets_agree_with_librdkafka(group_broker) -> None:
    bootstrap = group_broker.bootstrap
    topic = unique_topic("admin-vs-rd")
    create_topic(bootstrap, topic, partitions=PARTITIONS)
    produce_spread(bootstrap, topic, PARTITIONS, 30)
    active, idle = unique_group("active"), unique_group("idle")
    ours = {active, idle}
    rd = group_admin(bootstrap)
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        # idle: an Empty group with offsets only (committed by our admin, read by librdkafka).
        committed = ConsumerGroupTopicPartitions(idle, [TopicPartition(topic, p, 4 + p, f"m{p}") for p in range(PARTITIONS)])
        result = admin.alter_consumer_group_offsets([committed])[idle]
        assert [(tp.partition, tp.offset, tp.error) for tp in result.topic_partitions or ()] == [
            (p, 4 + p, None) for p in range(PARTITIONS)]
        assert _rd_offsets(rd, idle, topic) == {p: 4 + p for p in range(PARTITIONS)}

        member = GroupMember("confluent", bootstrap, active, topic, name="m", budget=5, commit_each=True).start()
        try:
            wait_for_split([member], PARTITIONS)
            wait_until(member.holding, lambda: f"the member to use its budget: {member}")

            listed = _our_listed(admin, ours)
            assert listed == _rd_listed(rd, ours)
            # A group with admin-committed offsets only has no protocol type: a "simple" group.
            assert listed == {active: ("STABLE", False), idle: ("EMPTY", True)}
            for state in (ConsumerGroupState.STABLE, ConsumerGroupState.EMPTY):
                assert _our_listed(admin, ours, states=[state]) == _rd_listed(rd, ours, states={RdState[state.name]})
            assert set(_our_listed(admin, ours, states=["Stable"])) == {active}
            assert set(_our_listed(admin, ours, types=[ConsumerGroupType.CLASSIC])) == ours
            assert _our_listed(admin, ours, types=[ConsumerGroupType.CONSUMER]) == {}
            assert _our_listed(admin, ours, types=[ConsumerGroupType.CONSUMER]) == _rd_listed(
                rd, ours, types={RdType.CONSUMER})
            assert _our_listed(admin, ours, types=[ConsumerGroupType.CLASSIC]) == _rd_listed(
                rd, ours, types={RdType.CLASSIC})

            for group_id in ours:
                our = admin.describe_consumer_groups([group_id])[group_id]
                theirs = rd.describe_consumer_groups([group_id], request_timeout=30)[group_id].result(
                    timeout=WAIT_TIMEOUT_S)
                assert our.error is None
                assert our.type is ConsumerGroupType.CLASSIC
                assert (our.state.name, our.is_simple_consumer_group, our.partition_assignor) == (
                    theirs.state.name, theirs.is_simple_consumer_group, theirs.partition_assignor)
                assert our.coordinator is not None
                assert (our.coordinator.id, our.coordinator.host, our.coordinator.port) == (
                    theirs.coordinator.id, theirs.coordinator.host, theirs.coordinator.port)
                assert [(m.member_id, m.client_id, m.host, m.group_instance_id, _assignment(m)) for m in our.members] == [
                    (m.member_id, m.client_id, m.host, m.group_instance_id, _assignment(m)) for m in theirs.members]
            assert [m.member_id for m in admin.describe_consumer_groups([active])[active].members] == [member.member_id]

            assert _our_offsets(admin, active, topic) == _rd_offsets(rd, active, topic)
            assert sum(o for o in _our_offsets(admin, active, topic).values() if o >= 0) == 5
            # Fetch-all (no partitions named) returns what was committed, nothing else.
            every = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(idle)])[idle]
            assert [(tp.topic, tp.partition, tp.offset, tp.metadata) for tp in every.topic_partitions or ()] == [
                (topic, p, 4 + p, f"m{p}") for p in range(PARTITIONS)]

            # Refusals while the group has a member, the same from both clients.
            refused = admin.alter_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(active, [TopicPartition(topic, 0, 0)])])[active]
            assert [tp.error.name() if tp.error else None for tp in refused.topic_partitions or ()] == ["UNKNOWN_MEMBER_ID"]
            assert admin.delete_consumer_groups([active])[active].name() == "NON_EMPTY_GROUP"  # type: ignore[union-attr]
            with pytest.raises(RdKafkaException) as rd_refusal:
                rd.delete_consumer_groups([active], request_timeout=30)[active].result(timeout=WAIT_TIMEOUT_S)
            assert rd_refusal.value.args[0].name() == "NON_EMPTY_GROUP"
            subscribed = admin.delete_consumer_group_offsets(active, [TopicPartition(topic, 0)])
            assert [tp.error.name() if tp.error else None for tp in subscribed.topic_partitions or ()] == [
                "GROUP_SUBSCRIBED_TO_TOPIC"]
        finally:
            member.close()

        wait_until(lambda: _our_listed(admin, {active}) == {active: ("EMPTY", False)}, "the group to be Empty")
        # OffsetDelete on the idle group: librdkafka no longer sees partition 1's offset.
        deleted = admin.delete_consumer_group_offsets(idle, [TopicPartition(topic, 1)])
        assert deleted.error is None
        assert [(tp.partition, tp.error) for tp in deleted.topic_partitions or ()] == [(1, None)]
        assert _rd_offsets(rd, idle, topic) == {0: 4, 1: -1001, 2: 6}
        # librdkafka's writes read back by ours.
        rd.alter_consumer_group_offsets([RdRequest(idle, [RdTopicPartition(topic, 1, 9)])],
                                        request_timeout=30)[idle].result(timeout=WAIT_TIMEOUT_S)
        assert _our_offsets(admin, idle, topic) == {0: 4, 1: 9, 2: 6}

        assert admin.delete_consumer_groups([active, idle]) == {active: None, idle: None}
        assert _rd_listed(rd, ours) == {}
        assert _our_offsets(admin, idle, topic) == dict.fromkeys(range(PARTITIONS), -1001)
        gone = admin.delete_consumer_groups([idle])[idle]
        assert gone is not None
        assert gone.name() == "GROUP_ID_NOT_FOUND"
        dead = admin.describe_consumer_groups([idle])[idle]
        assert dead.state is ConsumerGroupState.DEAD
        assert dead.state.name == rd.describe_consumer_groups([idle], request_timeout=30)[idle].result(
            timeout=WAIT_TIMEOUT_S).state.name
