"""Fetch behaviour seen by real consumers: long poll delivery and many partitions per fetch."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Producer, TopicPartition

from tests.support.clients import (
    CLIENT_TIMEOUT_S,
    confluent_consume,
    confluent_consumer,
    create_topic,
    kafka_python_consume,
    unique_topic,
)

pytestmark = pytest.mark.interop


def test_long_poll_consumer_receives_record_produced_later(broker):
    """A consumer parked in a long-poll Fetch on an empty partition (fetch.wait.max.ms well above
    the produce delay) receives a record produced while it waits."""
    topic = unique_topic("longpoll")
    create_topic(broker.bootstrap, topic, partitions=1)
    consumer = confluent_consumer(
        broker.bootstrap, {"fetch.wait.max.ms": 5000, "fetch.min.bytes": 1}
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    assert consumer.poll(1.0) is None, "partition should start empty"

    produced = threading.Event()

    def produce_later() -> None:
        time.sleep(0.5)  # let the consumer's Fetch reach the broker and park there
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
        producer.produce(topic, b"late", key=b"k", partition=0)
        producer.flush(CLIENT_TIMEOUT_S)
        produced.set()

    thread = threading.Thread(target=produce_later, daemon=True)
    thread.start()
    try:
        msg = None
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while msg is None and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
        assert msg is not None, "record produced during the long poll was never delivered"
        assert msg.error() is None, msg.error()
        assert (msg.offset(), msg.key(), msg.value()) == (0, b"k", b"late")
    finally:
        thread.join(CLIENT_TIMEOUT_S)
        consumer.close()
    assert produced.is_set()


def test_long_poll_many_partitions_one_gets_data(broker):
    """A long-poll Fetch over several empty partitions answers when any one of them gets data."""
    topic = unique_topic("longpoll-multi")
    create_topic(broker.bootstrap, topic, partitions=6)
    consumer = confluent_consumer(broker.bootstrap, {"fetch.wait.max.ms": 5000})
    # Explicit offset 0, not OFFSET_BEGINNING: librdkafka resolves logical offsets partition by
    # partition and keeps one Fetch in flight per broker, so with logical offsets the parked
    # Fetch may not include every partition yet.
    consumer.assign([TopicPartition(topic, p, 0) for p in range(6)])
    assert consumer.poll(1.0) is None

    def produce_later() -> None:
        time.sleep(0.5)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
        producer.produce(topic, b"only", key=b"k", partition=4)
        producer.flush(CLIENT_TIMEOUT_S)

    thread = threading.Thread(target=produce_later, daemon=True)
    thread.start()
    try:
        msg = None
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while msg is None and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
        assert msg is not None
        assert msg.error() is None
        assert (msg.partition(), msg.offset(), msg.value()) == (4, 0, b"only")
    finally:
        thread.join(CLIENT_TIMEOUT_S)
        consumer.close()


@pytest.mark.parametrize("reader", ["confluent", "kafka-python"])
def test_many_partitions_in_one_fetch(broker, reader):
    """64 partitions, each with its own records, read by one consumer assigned all of them
    (clients put every partition led by a broker into one Fetch request)."""
    partitions = 64
    per_partition = 5
    topic = unique_topic(f"manyparts-{reader}")
    create_topic(broker.bootstrap, topic, partitions=partitions)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "acks": "all", "enable.idempotence": True,
         "linger.ms": 20}
    )
    errors: list[object] = []
    for partition in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, f"p{partition}-{i}".encode(), partition=partition,
                             on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    assert not errors, errors[:3]

    consume = confluent_consume if reader == "confluent" else kafka_python_consume
    consumed = consume(broker.bootstrap, topic, partitions)
    got = sorted((r.partition, r.offset, r.value) for r in consumed)
    expected = sorted(
        (p, i, f"p{p}-{i}".encode()) for p in range(partitions) for i in range(per_partition)
    )
    assert got == expected
