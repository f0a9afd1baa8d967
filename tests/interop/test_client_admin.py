"""oncestream.client.Admin against our broker: groups (ListGroups, DescribeGroups with decoded
member assignments, committed offsets) and KIP-664 transaction administration
(ListTransactions, DescribeTransactions, DescribeProducers; aborting with WriteTxnMarkers is
refused to clients), checked with librdkafka where visibility matters."""

from __future__ import annotations

import time

import pytest

from oncestream.client import (
    OFFSET_INVALID,
    AbortTransactionSpec,
    Admin,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaException,
    Producer,
    TopicPartition,
)
from tests.support.clients import CLIENT_TIMEOUT_S, create_topic, unique_topic
from tests.support.txn import READ_COMMITTED, TXN_BROKER_CONFIG, list_offset, read_to_end, values_of

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def admin_broker(module_broker_factory):
    return module_broker_factory(TXN_BROKER_CONFIG, name="client-admin")


def test_groups_listed_described_with_assignments_and_offsets(admin_broker):
    bootstrap = admin_broker.bootstrap
    topic = unique_topic("adm-group")
    create_topic(bootstrap, topic, partitions=3)
    group = unique_topic("adm-g")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    admin = Admin({"bootstrap.servers": bootstrap})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while not consumer.assignment():
            assert time.monotonic() < deadline
            consumer.poll(0.2)
        consumer.commit(offsets=[TopicPartition(topic, 1, 7)], asynchronous=False)
        assert group in [g.group_id for g in admin.list_groups()]
        described = admin.describe_groups([group])[group]
        assert described.state == "Stable"
        assert described.protocol_type == "consumer"
        assert described.protocol == "range"
        (member,) = described.members
        assert member.member_id == consumer.memberid()
        assert sorted((tp.topic, tp.partition) for tp in member.assignment.topic_partitions) == [(topic, p) for p in range(3)]
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(3)])
        offsets = admin.list_consumer_group_offsets([request])[group].topic_partitions or []
        # No committed offset: OFFSET_INVALID, as librdkafka reports it.
        assert {tp.partition: tp.offset for tp in offsets} == {0: OFFSET_INVALID, 1: 7, 2: OFFSET_INVALID}
    finally:
        consumer.close()
        admin.close()


def test_transactions_listed_described_and_a_hanging_one_aborted(admin_broker):
    """KIP-664: a transaction left open (its producer stops without ending it) holds the LSO;
    describe_producers finds it on the partition and abort_transaction writes the ABORT marker."""
    bootstrap = admin_broker.bootstrap
    topic = unique_topic("adm-hang")
    create_topic(bootstrap, topic, partitions=2)
    txn_id = unique_topic("adm-hanging")
    stuck = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                      "transaction.timeout.ms": 600000})
    stuck.init_transactions(CLIENT_TIMEOUT_S)
    stuck.begin_transaction()
    stuck.produce(topic, b"never-committed", partition=0)
    assert stuck.flush(CLIENT_TIMEOUT_S) == 0
    stuck.close()  # abandoned: neither committed nor aborted
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce(topic, b"after", partition=0)
    plain.produce(topic, b"other", partition=1)
    assert plain.flush(CLIENT_TIMEOUT_S) == 0
    plain.close()

    admin = Admin({"bootstrap.servers": bootstrap})
    try:
        listing = {t.transactional_id: t for t in admin.list_transactions()}
        assert listing[txn_id].state == "Ongoing"
        assert txn_id in {t.transactional_id for t in admin.list_transactions(states=["Ongoing"])}
        described = admin.describe_transactions([txn_id])[txn_id]
        assert described.state == "Ongoing"
        assert described.error is None
        assert [(tp.topic, tp.partition) for tp in described.partitions] == [(topic, 0)]
        assert described.producer_id == listing[txn_id].producer_id
        assert list_offset(bootstrap, topic, 0, read_committed=True) == 0

        producers = admin.describe_producers([TopicPartition(topic, 0)])[(topic, 0)]
        assert len(producers) == 2  # the transactional one and the idempotent plain one
        (active,) = [p for p in producers if p.current_txn_start_offset >= 0]
        assert active.producer_id == described.producer_id
        assert active.current_txn_start_offset == 0
        # KIP-664's abort writes the marker with WriteTxnMarkers, a brokers-only API (ClusterAction):
        # refused to clients, nothing changes, the transaction still holds the LSO.
        with pytest.raises(KafkaException) as refused:
            admin.abort_transaction(AbortTransactionSpec(topic, 0, active.producer_id))
        assert refused.value.args[0].name() == "CLUSTER_AUTHORIZATION_FAILED"
        assert list_offset(bootstrap, topic, 0, read_committed=True) == 0
        # Its coordinator ends it: a new producer with the same transactional id fences the old one.
        fencer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
        fencer.init_transactions(CLIENT_TIMEOUT_S)
        fencer.close()
        assert values_of(read_to_end(bootstrap, topic, 2, isolation=READ_COMMITTED)) == {0: [b"after"], 1: [b"other"]}
        unknown = admin.describe_transactions(["no-such-transactional-id"])["no-such-transactional-id"]
        assert unknown.error is not None
        assert unknown.error.name() == "TRANSACTIONAL_ID_NOT_FOUND"
    finally:
        admin.close()
