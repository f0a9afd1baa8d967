"""A classic and a consumer-protocol member on one group id (Kafka 4's
``group.consumer.migration.policy``), with librdkafka against a real broker process."""

from __future__ import annotations

import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode

from tests.support.clients import create_topic, unique_topic
from tests.support.consumer_protocol import (
    CONSUMER_PROTOCOL_BROKER_CONFIG,
    ProtocolMember,
    close_all,
    describe,
    wait_until,
)

PARTITIONS = 2


def produce(bootstrap: str, topic: str, count: int, start: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + count):
        producer.produce(topic, f"v{i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0


def classic_group_state(bootstrap: str, group: str) -> tuple[str, int]:
    """(state, number of members) of a classic group, as Kafka's admin client describes it."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.describe_consumer_groups([group]).values()
    description = future.result(30)
    return description.state.name, len(description.members)


def test_disabled_policy_refuses_a_consumer_member_on_a_classic_group_with_members(broker_factory):
    """``group.consumer.migration.policy=disabled``: a consumer-protocol member joining a classic
    group with members hears Kafka's GROUP_ID_NOT_FOUND ("Group <id> is not a consumer group")
    and gets nothing; the classic member keeps every partition and the group stays classic while
    records flow, each consumed once."""
    broker = broker_factory({**CONSUMER_PROTOCOL_BROKER_CONFIG, "group.consumer.migration.policy": "disabled",
                             "group.initial.rebalance.delay.ms": "0"})
    topic = unique_topic("migration-off")
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    group = f"mig-{uuid.uuid4().hex[:10]}"
    produce(broker.bootstrap, topic, 20)
    classic = ProtocolMember(broker.bootstrap, group, [topic], "classic", **{
        "group.protocol": "classic", "partition.assignment.strategy": "range"}).start()
    members = [classic]
    try:
        wait_until(lambda: len(classic.consumed) == 20, lambda: f"the classic member read {len(classic.consumed)}")
        modern = ProtocolMember(broker.bootstrap, group, [topic], "consumer").start()
        members.append(modern)
        # librdkafka makes GROUP_ID_NOT_FOUND on ConsumerGroupHeartbeat a fatal error of the consumer.
        wait_until(lambda: any("group id does not exist" in e for e in modern.errors),
                   lambda: f"the consumer-protocol member was not refused: {modern.errors}")
        produce(broker.bootstrap, topic, 20, start=20)
        wait_until(lambda: len(classic.consumed) == 40, lambda: f"the classic member read {len(classic.consumed)}")
        assert modern.owned() == set()
        assert modern.consumed == []
        assert classic.owned() == {(topic, p) for p in range(PARTITIONS)}
        assert len(set(classic.consumed)) == 40
        assert classic_group_state(broker.bootstrap, group) == ("STABLE", 1)
        assert describe(broker.bootstrap, group).error_code == ErrorCode.group_id_not_found
    finally:
        close_all(members)
