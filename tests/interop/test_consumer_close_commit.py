"""A failed final commit on ``Consumer.close()`` is reported, never swallowed.

What librdkafka does (checked here against confluent-kafka itself, on the same broker): close()
returns normally, and the outcome of its final auto-commit, a failure included, goes to the
``on_commit`` callback with the error on every partition; close() gives up after about
``session.timeout.ms``. Our client does the same."""

from __future__ import annotations

import time

import confluent_kafka
import confluent_kafka.admin
import pytest

import oncestream.client
from tests.support.brokers import NO_INITIAL_REBALANCE_DELAY
from tests.support.clients import create_topic, unique_topic
from tests.support.narrow import present

pytestmark = pytest.mark.interop

# close() waits about this long; the broker's group.min.session.timeout.ms is lowered to allow it
# (Kafka's default minimum, 6 s, would only make every close() here take longer).
SESSION_TIMEOUT_MS = 2000
HEARTBEAT_INTERVAL_MS = 500  # well inside the session, so the member stays in the group until the kill
BROKER_CONFIG = {"group.min.session.timeout.ms": "1000", **NO_INITIAL_REBALANCE_DELAY}
POLL_CAP_S = 30.0
VALUES = [b"v%d" % i for i in range(5)]


def _consumer(kind: str, conf: dict[str, object]):
    return (confluent_kafka.Consumer if kind == "confluent-kafka" else oncestream.client.Consumer)(conf)


# librdkafka's close() with a manual assignment and its coordinator gone keeps looking for the
# coordinator without end (librdkafka issue 3740), so that pair is checked for our client only.
@pytest.mark.parametrize(("kind", "membership"), [
    ("oncestream", "subscribe"), ("confluent-kafka", "subscribe"), ("oncestream", "assign"),
])
def test_final_commit_failing_because_the_broker_is_gone_reaches_on_commit(broker_factory, kind, membership):
    broker = broker_factory(BROKER_CONFIG)
    topic = unique_topic("close-commit")
    create_topic(broker.bootstrap, topic)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    for value in VALUES:
        producer.produce(topic, value, partition=0)
    assert producer.flush(POLL_CAP_S) == 0
    reports: list[tuple[object, list]] = []
    consumer = _consumer(kind, {
        "bootstrap.servers": broker.bootstrap,
        "group.id": unique_topic("close-commit-group"),
        "auto.offset.reset": "earliest",
        "enable.auto.commit": True,
        "auto.commit.interval.ms": 600_000,  # only the final commit happens
        "session.timeout.ms": SESSION_TIMEOUT_MS,
        "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
        "on_commit": lambda err, partitions: reports.append((err, list(partitions))),
    })
    if membership == "subscribe":
        consumer.subscribe([topic])
    else:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)
                         if kind == "confluent-kafka" else oncestream.client.TopicPartition(topic, 0, -2)])
    received: list[bytes | None] = []
    deadline = time.monotonic() + POLL_CAP_S
    while len(received) < len(VALUES):
        assert time.monotonic() < deadline, f"consumed only {received}"
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            received.append(message.value())
    assert received == VALUES
    broker.kill()

    consumer.close()  # does not raise: the failure is reported through on_commit

    assert len(reports) == 1, reports
    error, partitions = reports[0]
    assert error is not None
    assert [(tp.topic, tp.partition, tp.offset) for tp in partitions] == [(topic, 0, len(VALUES))]
    assert all(tp.error is not None for tp in partitions)


def test_final_commit_refused_by_the_broker_reaches_on_commit_with_the_partitions_error(broker_factory):
    """The coordinator answers, but refuses the commit (the topic was deleted meanwhile:
    UNKNOWN_TOPIC_OR_PARTITION): the per-partition error reaches on_commit, close() closes."""
    broker = broker_factory()
    topic = unique_topic("close-commit-deleted")
    create_topic(broker.bootstrap, topic)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    for value in VALUES:
        producer.produce(topic, value, partition=0)
    assert producer.flush(POLL_CAP_S) == 0
    reports: list[tuple[oncestream.client.KafkaError | None, list[oncestream.client.TopicPartition]]] = []
    consumer = oncestream.client.Consumer({
        "bootstrap.servers": broker.bootstrap,
        "group.id": unique_topic("close-commit-group"),
        "enable.auto.commit": True,
        "auto.commit.interval.ms": 600_000,
        "on_commit": lambda err, partitions: reports.append((err, list(partitions))),
    })
    consumer.assign([oncestream.client.TopicPartition(topic, 0, 0)])
    received: list[bytes | None] = []
    deadline = time.monotonic() + POLL_CAP_S
    while len(received) < len(VALUES):
        assert time.monotonic() < deadline, f"consumed only {received}"
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            received.append(message.value())
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_topics([topic], operation_timeout=30)[topic].result(POLL_CAP_S)

    consumer.close()

    assert len(reports) == 1, reports
    error, partitions = reports[0]
    assert error is not None
    assert error.code() == confluent_kafka.KafkaError.UNKNOWN_TOPIC_OR_PART
    assert [(tp.topic, tp.partition, tp.offset, present(tp.error, "partition commit error").code()) for tp in partitions] == [
        (topic, 0, len(VALUES), confluent_kafka.KafkaError.UNKNOWN_TOPIC_OR_PART)
    ]
