"""``Admin.fence_producers`` (KIP-664's fenceProducers) and ``Admin.describe_topics``' topic id,
the Admin additions ``oncestream topics describe`` and ``oncestream transactions abort`` are built
on: fencing a transactional id ends the open transaction of its (librdkafka) producer through the
coordinator, which aborts it, and that producer can no longer commit."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import KafkaException as ConfluentKafkaException
from confluent_kafka import Producer as ConfluentProducer

from oncestream.client import Admin
from tests.support.clients import CLIENT_TIMEOUT_S, create_topic, unique_topic
from tests.support.txn import READ_COMMITTED, list_offset, read_to_end, start_txn_broker, values_of

pytestmark = pytest.mark.interop

ENDED_STATES = ("CompleteAbort", "Empty")


@pytest.fixture(scope="module")
def fence_broker(tmp_path_factory):
    broker = start_txn_broker(tmp_path_factory.mktemp("admin-fence") / "data")
    try:
        yield broker
    finally:
        broker.stop()


def test_fence_producers_aborts_the_open_transaction_and_fences_its_producer(fence_broker) -> None:
    bootstrap = fence_broker.bootstrap
    topic = unique_topic("fence")
    create_topic(bootstrap, topic, partitions=1)
    txn_id = unique_topic("fenced")
    stuck = ConfluentProducer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                               "transaction.timeout.ms": 600000})
    stuck.init_transactions(CLIENT_TIMEOUT_S)
    stuck.begin_transaction()
    stuck.produce(topic, b"never-committed")
    assert stuck.flush(CLIENT_TIMEOUT_S) == 0
    assert list_offset(bootstrap, topic, 0, read_committed=True) == 0  # held back by the open txn

    with Admin({"bootstrap.servers": bootstrap}) as admin:
        assert admin.describe_transactions([txn_id])[txn_id].state == "Ongoing"
        assert admin.fence_producers([txn_id]) == {txn_id: None}
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while (state := admin.describe_transactions([txn_id])[txn_id].state) not in ENDED_STATES:
            assert time.monotonic() < deadline, f"transaction still {state} after fencing"
            time.sleep(0.05)

    # The abort marker moved the LSO past the aborted record; a read_committed reader sees nothing.
    assert list_offset(bootstrap, topic, 0, read_committed=True) == 2
    assert values_of(read_to_end(bootstrap, topic, 1, isolation=READ_COMMITTED)) == {0: []}
    with pytest.raises(ConfluentKafkaException):
        stuck.commit_transaction(CLIENT_TIMEOUT_S)


def test_fence_producers_of_an_unused_id_succeeds(fence_broker) -> None:
    """Kafka's fenceProducers on an id with no producer yet initializes it: nothing to fence."""
    with Admin({"bootstrap.servers": fence_broker.bootstrap}) as admin:
        txn_id = f"never-used-{uuid.uuid4().hex[:8]}"
        assert admin.fence_producers([txn_id]) == {txn_id: None}


def test_describe_topics_reports_the_topic_id(fence_broker) -> None:
    topic = unique_topic("topic-id")
    create_topic(fence_broker.bootstrap, topic, partitions=2)
    with Admin({"bootstrap.servers": fence_broker.bootstrap}) as admin:
        described = admin.describe_topics([topic])[topic]
        again = admin.describe_topics([topic])[topic]
    assert isinstance(described.topic_id, uuid.UUID)
    assert described.topic_id.int != 0
    assert again.topic_id == described.topic_id
    assert [p.id for p in described.partitions] == [0, 1]
