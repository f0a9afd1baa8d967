"""A classic and a consumer-protocol member on one group id (Kafka 4's
``group.consumer.migration.policy``), with librdkafka against a real broker process."""

from __future__ import annotations

import threading
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode

from tests.support.clients import create_topic, unique_topic
from tests.support.cluster_kind import (
    CLUSTER_RESTART_OUTLASTS_SESSIONS,
    not_on_cluster,
)
from tests.support.consumer_protocol import (
    CONSUMER_PROTOCOL_BROKER_CONFIG,
    ProtocolMember,
    close_all,
    describe,
    wait_until,
)

PARTITIONS = 2
MIGRATION_BROKER_CONFIG = {**CONSUMER_PROTOCOL_BROKER_CONFIG, "group.initial.rebalance.delay.ms": "0"}


@pytest.fixture(scope="module")
def migration_broker(module_our_broker_factory):
    """Our broker with the default migration policy for the module (tests use unique groups), or
    three cluster brokers under the cluster kind (tests/conftest.py)."""
    return module_our_broker_factory(MIGRATION_BROKER_CONFIG, name="migration")


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


def test_disabled_policy_refuses_a_consumer_member_on_a_classic_group_with_members(module_our_broker_factory):
    """``group.consumer.migration.policy=disabled``: a consumer-protocol member joining a classic
    group with members hears Kafka's GROUP_ID_NOT_FOUND ("Group <id> is not a consumer group")
    and gets nothing; the classic member keeps every partition and the group stays classic while
    records flow, each consumed once."""
    broker = module_our_broker_factory({**MIGRATION_BROKER_CONFIG, "group.consumer.migration.policy": "disabled"},
                                       name="migration-off")
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


def classic_member(bootstrap: str, group: str, topic: str, strategy: str) -> ProtocolMember:
    return ProtocolMember(bootstrap, group, [topic], f"classic-{strategy}", **{
        "group.protocol": "classic", "partition.assignment.strategy": strategy,
        "session.timeout.ms": "6000", "heartbeat.interval.ms": "300"}).start()


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_classic_and_consumer_members_share_a_group_and_it_turns_classic_again(migration_broker, strategy):
    """Kafka 4's online migration (default policy, bidirectional): a consumer-protocol member
    joins a classic group with a member, which becomes a consumer group; both members get
    partitions while records flow. The consumer member leaves: the group is a classic group
    again and the classic member gets everything. Every record is consumed once overall."""
    broker = migration_broker
    topic = unique_topic("migration")
    partitions = 4
    create_topic(broker.bootstrap, topic, partitions=partitions)
    group = f"mig-{uuid.uuid4().hex[:10]}"
    every = {(topic, p) for p in range(partitions)}
    stop = threading.Event()
    produced = [0]

    def keep_producing() -> None:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        while not stop.is_set() and produced[0] < 2_000:
            for i in range(produced[0], produced[0] + 8):
                producer.produce(topic, f"v{i}".encode(), partition=i % partitions)
            assert producer.flush(30) == 0
            produced[0] += 8
            stop.wait(0.05)

    feeder = threading.Thread(target=keep_producing, daemon=True)
    classic = classic_member(broker.bootstrap, group, topic, strategy)
    members = [classic]
    try:
        feeder.start()
        wait_until(lambda: classic.owned() == every, lambda: f"the classic member owns {classic.owned()}")
        modern = ProtocolMember(broker.bootstrap, group, [topic], "consumer").start()
        members.append(modern)
        def split() -> bool:
            mine, theirs = modern.owned(), classic.owned()
            return bool(mine) and bool(theirs) and mine | theirs == every and not mine & theirs

        wait_until(split,
                   lambda: f"no split: classic {classic.owned()} {classic.errors} consumer {modern.owned()} {modern.errors}")
        described = describe(broker.bootstrap, group)  # a consumer group now; MemberType 0 = classic
        assert described.error_code == ErrorCode.none
        assert sorted(m.member_type for m in described.members) == [0, 1]
        wait_until(lambda: len(modern.consumed) > 0, "the consumer member read nothing")
        modern.close()
        wait_until(lambda: classic.owned() == every,
                   lambda: f"the classic member owns {classic.owned()}: {classic.errors}")
        wait_until(lambda: classic_group_state(broker.bootstrap, group) == ("STABLE", 1),
                   lambda: f"the group is {classic_group_state(broker.bootstrap, group)}")
        assert describe(broker.bootstrap, group).error_code == ErrorCode.group_id_not_found  # classic again
        stop.set()
        feeder.join(60)
        total = produced[0]

        def all_read() -> bool:
            return len({(t, p, o) for m in members for t, p, o in m.consumed}) == total

        wait_until(all_read, lambda: f"read {sum(len(m.consumed) for m in members)} of {total}")
        consumed = [r for m in members for r in m.consumed]
        assert len(consumed) == len(set(consumed)) == total, "a record was consumed twice"
        assert classic.errors == [], classic.errors
        assert modern.errors == [], modern.errors
    finally:
        stop.set()
        close_all(members)


@not_on_cluster(CLUSTER_RESTART_OUTLASTS_SESSIONS)
def test_a_mixed_group_survives_a_broker_sigkill(migration_broker):
    """A consumer group with a classic and a consumer-protocol member is in __consumer_offsets
    as Kafka writes it (MemberMetadata with ClassicMemberMetadata): after a SIGKILL and restart of
    the broker the group, both members and their partitions are back, and records produced
    afterwards are read by the group once each."""
    broker = migration_broker
    topic = unique_topic("migration-crash")
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    group = f"mig-{uuid.uuid4().hex[:10]}"
    every = {(topic, p) for p in range(PARTITIONS)}
    produce(broker.bootstrap, topic, 10)
    classic = classic_member(broker.bootstrap, group, topic, "range")
    members = [classic]
    try:
        wait_until(lambda: classic.owned() == every, lambda: f"the classic member owns {classic.owned()}")
        modern = ProtocolMember(broker.bootstrap, group, [topic], "consumer").start()
        members.append(modern)
        wait_until(lambda: len(modern.owned()) == 1 and len(classic.owned()) == 1,
                   lambda: f"no split: classic {classic.owned()} consumer {modern.owned()}")
        wait_until(lambda: describe(broker.bootstrap, group).group_state == "Stable", "the group never settled")
        before = describe(broker.bootstrap, group)
        broker.kill()
        broker.start()
        after = describe(broker.bootstrap, group)
        assert (after.group_epoch, sorted((m.member_id, m.member_type) for m in after.members)) == \
            (before.group_epoch, sorted((m.member_id, m.member_type) for m in before.members))
        produce(broker.bootstrap, topic, 10, start=10)
        wait_until(lambda: len({r for m in members for r in m.consumed}) == 20,
                   lambda: f"read {sum(len(m.consumed) for m in members)} of 20: {classic.errors} {modern.errors}")
        consumed = [r for m in members for r in m.consumed]
        assert len(consumed) == len(set(consumed)) == 20, "a record was consumed twice"
    finally:
        close_all(members)
