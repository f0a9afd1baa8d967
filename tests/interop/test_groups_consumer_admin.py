"""Admin views of consumer groups (KIP-848) through librdkafka's AdminClient: ListGroups v5's type
filter, DescribeConsumerGroups (ConsumerGroupDescribe for a consumer group), offsets listing and
deletion, DeleteGroups of an empty consumer group."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, ConsumerGroupType, KafkaException, TopicPartition

from tests.support.brokers import BrokerProcess
from tests.support.clients import CLIENT_TIMEOUT_S, admin_client, create_topic, unique_topic
from tests.support.consumer_protocol import CONSUMER_PROTOCOL_BROKER_CONFIG, ProtocolMember, wait_until

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory):
    process = BrokerProcess(tmp_path_factory.mktemp("cg-admin") / "data", config=CONSUMER_PROTOCOL_BROKER_CONFIG)
    process.start()
    try:
        yield process
    finally:
        process.stop()


def listed(admin, types):
    result = admin.list_consumer_groups(types=types).result(timeout=CLIENT_TIMEOUT_S)
    return {g.group_id: g for g in result.valid}


def test_list_and_describe_a_consumer_group(broker):
    topic = unique_topic("cg-admin")
    create_topic(broker.bootstrap, topic, partitions=3)
    group = f"cg-{uuid.uuid4().hex[:8]}"
    member = ProtocolMember(broker.bootstrap, group, [topic], "a").start()
    admin = admin_client(broker.bootstrap)
    try:
        wait_until(lambda: len(member.owned()) == 3, "the member never got its partitions")
        consumer_groups = listed(admin, {ConsumerGroupType.CONSUMER})
        assert group in consumer_groups
        assert consumer_groups[group].type == ConsumerGroupType.CONSUMER
        assert group not in listed(admin, {ConsumerGroupType.CLASSIC})
        wait_until(lambda: str(admin.describe_consumer_groups([group])[group].result(timeout=CLIENT_TIMEOUT_S)
                               .state).endswith("STABLE"), "the group never became Stable")
        description = admin.describe_consumer_groups([group])[group].result(timeout=CLIENT_TIMEOUT_S)
        assert description.type == ConsumerGroupType.CONSUMER
        (described,) = description.members
        assert {(tp.topic, tp.partition) for tp in described.assignment.topic_partitions} == member.owned()
    finally:
        member.close()


def test_offsets_and_delete_of_an_empty_consumer_group(broker):
    topic = unique_topic("cg-admin-del")
    create_topic(broker.bootstrap, topic, partitions=1)
    group = f"cg-{uuid.uuid4().hex[:8]}"
    member = ProtocolMember(broker.bootstrap, group, [topic], "a").start()
    admin = admin_client(broker.bootstrap)
    try:
        wait_until(lambda: len(member.owned()) == 1, "the member never got its partition")
        with pytest.raises(KafkaException):  # NON_EMPTY_GROUP
            admin.delete_consumer_groups([group])[group].result(timeout=CLIENT_TIMEOUT_S)
    finally:
        member.close()
    request = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 7)])]
    admin.alter_consumer_group_offsets(request)[group].result(timeout=CLIENT_TIMEOUT_S)
    [future] = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
    assert [(tp.topic, tp.offset) for tp in future.result(timeout=CLIENT_TIMEOUT_S).topic_partitions] == [(topic, 7)]
    admin.delete_consumer_groups([group])[group].result(timeout=CLIENT_TIMEOUT_S)
    assert group not in listed(admin, {ConsumerGroupType.CONSUMER})
    [future] = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
    assert future.result(timeout=CLIENT_TIMEOUT_S).topic_partitions == []
