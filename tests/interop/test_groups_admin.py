"""Group administration through the admin clients: ListGroups, DescribeGroups, DeleteGroups,
OffsetFetch and OffsetCommit from an admin (no member), and OffsetDelete.

confluent-kafka's AdminClient covers everything except OffsetDelete, which confluent-kafka-python
does not expose (librdkafka has it, the Python binding has no ``delete_consumer_group_offsets``);
kafka-python's KafkaAdminClient covers all of it, OffsetDelete included.

Broker rules checked (Kafka's, classic groups): only an Empty group can be deleted
(NON_EMPTY_GROUP otherwise, GROUP_ID_NOT_FOUND for an unknown one); an admin commit (generation
-1, no member id) is accepted only while the group is Empty (UNKNOWN_MEMBER_ID otherwise);
OffsetDelete refuses partitions of a topic the group is subscribed to
(GROUP_SUBSCRIBED_TO_TOPIC) and removes the others.
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_INVALID,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import ConsumerGroupListing

from tests.support.clients import create_topic, unique_topic
from tests.support.cluster_kind import ONE_BROKER_ASSUMED, not_on_cluster
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


def _listed(admin, states: set[ConsumerGroupState] | None = None) -> dict[str, ConsumerGroupListing]:
    kwargs: dict[str, Any] = {"request_timeout": 30}
    if states is not None:
        kwargs["states"] = states
    result = admin.list_consumer_groups(**kwargs).result(timeout=WAIT_TIMEOUT_S)
    assert not result.errors, result.errors
    return {listing.group_id: listing for listing in result.valid}


def _describe(admin, group_id: str):
    return admin.describe_consumer_groups([group_id], request_timeout=30)[group_id].result(
        timeout=WAIT_TIMEOUT_S)


def _delete_error(admin, group_id: str) -> int | None:
    """Error code of DeleteGroups for ``group_id`` (None when it succeeded)."""
    future = admin.delete_consumer_groups([group_id], request_timeout=30)[group_id]
    try:
        future.result(timeout=WAIT_TIMEOUT_S)
    except KafkaException as exc:
        return exc.args[0].code()
    return None


def _fetch_offsets(admin, group_id: str, topic: str) -> dict[int, int]:
    request = ConsumerGroupTopicPartitions(
        group_id, [TopicPartition(topic, p) for p in range(PARTITIONS)])
    result = admin.list_consumer_group_offsets([request], request_timeout=30)[group_id].result(
        timeout=WAIT_TIMEOUT_S)
    assert all(tp.error is None for tp in result.topic_partitions), result.topic_partitions
    return {tp.partition: tp.offset for tp in result.topic_partitions}


def _alter_offsets(admin, group_id: str, topic: str, offsets: dict[int, int]) -> list:
    """OffsetCommit from the admin; returns the per-partition results (errors inside)."""
    request = ConsumerGroupTopicPartitions(
        group_id, [TopicPartition(topic, p, o) for p, o in offsets.items()])
    future = admin.alter_consumer_group_offsets([request], request_timeout=30)[group_id]
    try:
        return list(future.result(timeout=WAIT_TIMEOUT_S).topic_partitions)
    except KafkaException as exc:
        return [exc.args[0]]


def _error_codes(results: list) -> set[int | None]:
    codes: set[int | None] = set()
    for item in results:
        if isinstance(item, KafkaError):
            codes.add(item.code())
        else:
            codes.add(None if item.error is None else item.error.code())
    return codes


@not_on_cluster(ONE_BROKER_ASSUMED)
def test_confluent_list_describe_delete_groups(group_broker):
    """ListGroups (with a state filter), DescribeGroups fields, DeleteGroups on a non-empty,
    an empty and an unknown group."""
    bootstrap = group_broker.bootstrap
    topic = unique_topic("admin-groups")
    create_topic(bootstrap, topic, partitions=PARTITIONS)
    group_id = unique_group("admin")
    admin = group_admin(bootstrap)
    member = GroupMember("confluent", bootstrap, group_id, topic, name="m").start()
    try:
        wait_for_split([member], PARTITIONS)
        wait_until(lambda: _describe(admin, group_id).state == ConsumerGroupState.STABLE,
                   "the group to be Stable")

        listing = _listed(admin)[group_id]
        assert listing.state == ConsumerGroupState.STABLE
        assert listing.is_simple_consumer_group is False  # protocol type "consumer"
        assert group_id in _listed(admin, {ConsumerGroupState.STABLE})
        assert group_id not in _listed(admin, {ConsumerGroupState.EMPTY})

        description = _describe(admin, group_id)
        assert description.state == ConsumerGroupState.STABLE
        assert description.partition_assignor == "range"
        assert description.is_simple_consumer_group is False
        assert (description.coordinator.host, description.coordinator.port) == (
            group_broker.host, group_broker.port)
        [described] = description.members
        assert described.member_id == member.member_id
        assert described.client_id == "rdkafka"  # librdkafka's default client.id
        assert described.host.lstrip("/") == "127.0.0.1"
        assert {tp.partition for tp in described.assignment.topic_partitions} == set(
            range(PARTITIONS))

        assert _delete_error(admin, group_id) == KafkaError.NON_EMPTY_GROUP
    finally:
        member.close()  # LeaveGroup: the group becomes Empty

    wait_until(lambda: group_id in _listed(admin, {ConsumerGroupState.EMPTY}),
               "the group to be listed Empty after its only member left")
    assert _describe(admin, group_id).members == []
    assert _delete_error(admin, group_id) is None
    assert group_id not in _listed(admin)
    assert _describe(admin, group_id).state == ConsumerGroupState.DEAD
    assert _delete_error(admin, group_id) == KafkaError.GROUP_ID_NOT_FOUND


def test_confluent_admin_offsets(group_broker):
    """Admin OffsetCommit on an Empty group, OffsetFetch, a member starting from those offsets,
    admin commit refused while the group has a member, and offsets gone after DeleteGroups."""
    bootstrap = group_broker.bootstrap
    topic = unique_topic("admin-offsets")
    create_topic(bootstrap, topic, partitions=PARTITIONS)
    produce_spread(bootstrap, topic, PARTITIONS, 30)  # 10 per partition
    group_id = unique_group("admin-offsets")
    admin = group_admin(bootstrap)

    assert _fetch_offsets(admin, group_id, topic) == {p: OFFSET_INVALID for p in range(PARTITIONS)}
    start = {0: 3, 1: 5, 2: 7}
    assert _error_codes(_alter_offsets(admin, group_id, topic, start)) == {None}
    assert _fetch_offsets(admin, group_id, topic) == start
    assert _describe(admin, group_id).state == ConsumerGroupState.EMPTY

    member = GroupMember("confluent", bootstrap, group_id, topic, name="m").start()
    try:
        wait_until(lambda: {d.partition for d in member.delivered()} == set(range(PARTITIONS)),
                   lambda: f"records from every partition: {member}")
        first: dict[int, int] = {}
        for d in member.delivered():
            first.setdefault(d.partition, d.offset)
        assert first == start, "a new member must start at the committed offsets"
        # The group has a member now: an admin commit carries no member id and is refused.
        refused = _error_codes(_alter_offsets(admin, group_id, topic, {0: 0}))
        assert refused == {KafkaError.UNKNOWN_MEMBER_ID}, refused
        assert _fetch_offsets(admin, group_id, topic) == start
    finally:
        member.close()

    assert _delete_error(admin, group_id) is None
    assert _fetch_offsets(admin, group_id, topic) == {p: OFFSET_INVALID for p in range(PARTITIONS)}


def test_kafka_python_admin_groups_and_offsets(group_broker):
    """kafka-python's KafkaAdminClient: list/describe groups, admin offset commit and fetch,
    OffsetDelete (refused for a subscribed topic, applied once the group is Empty), and
    DeleteGroups."""
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KpTopicPartition
    from kafka.structs import OffsetAndMetadata

    bootstrap = group_broker.bootstrap
    topic = unique_topic("kp-admin")
    create_topic(bootstrap, topic, partitions=PARTITIONS)
    group_id = unique_group("kp-admin")
    tps = [KpTopicPartition(topic, p) for p in range(PARTITIONS)]
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        offsets = {tp: OffsetAndMetadata(10 + tp.partition, f"meta-{tp.partition}", -1)
                   for tp in tps}
        admin.alter_group_offsets(group_id, offsets)
        fetched = admin.list_group_offsets({group_id: tps})[group_id]
        assert {tp: (o.offset, o.metadata) for tp, o in fetched.items()} == {
            tp: (o.offset, o.metadata) for tp, o in offsets.items()}
        # Fetch-all (topics = null) returns the same offsets.
        assert set(admin.list_group_offsets(group_id)[group_id]) == set(tps)

        member = GroupMember("kafka-python", bootstrap, group_id, topic, name="m").start()
        try:
            wait_for_split([member], PARTITIONS)
            listed = {g["group_id"]: g for g in admin.list_groups()}
            assert listed[group_id]["protocol_type"] == "consumer"
            assert group_id in {g["group_id"] for g in admin.list_groups(states_filter=["Stable"])}
            described = admin.describe_groups([group_id])[group_id]
            assert described["group_state"] == "Stable"
            assert described["protocol_data"] == "range"
            assert [m["member_id"] for m in described["members"]] == [member.member_id]

            # The group is subscribed to the topic: its offsets there cannot be deleted.
            result = admin.delete_group_offsets(group_id, [tps[0]])
            assert _kp_error_names(result) == {"GroupSubscribedToTopicError"}, result
            assert admin.delete_groups([group_id])[group_id] == "NonEmptyGroupError"
        finally:
            member.close()

        wait_until(lambda: admin.describe_groups([group_id])[group_id]["group_state"] == "Empty",
                   "the group to be Empty")
        result = admin.delete_group_offsets(group_id, [tps[0]])
        assert _kp_error_names(result) == {"NoError"}, result
        remaining = admin.list_group_offsets({group_id: tps})[group_id]
        assert remaining[tps[0]].offset == -1, "the deleted offset must be gone"
        assert [remaining[tp].offset for tp in tps[1:]] == [11, 12]

        assert admin.delete_groups([group_id])[group_id] == "OK"
        assert admin.delete_groups([group_id])[group_id] == "GroupIdNotFoundError"
        assert group_id not in {g["group_id"] for g in admin.list_groups()}
    finally:
        admin.close()


def _kp_error_names(result: dict) -> set[str]:
    """Names of the per-partition error classes of a delete_group_offsets result."""
    return {error.__name__ for error in result.values()}
