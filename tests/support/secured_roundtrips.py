"""A transactional round trip per client (librdkafka, kafka-python, ours) over a secured listener.

The TLS and SASL_SSL interop tests run the same sequence with different connection properties:
records written (plain ones, then an aborted and a committed transaction) and read back
``read_committed``; each function returns what was read, for the test to compare with what it
expects (the aborted record must never appear).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from confluent_kafka import Consumer as CkConsumer
from confluent_kafka import Producer as CkProducer

from oncestream.client import Consumer, Producer, TopicPartition
from tests.support.narrow import message_value

TIMEOUT_S = 60.0
COMMITTED = 5  # records of the committed transaction


def librdkafka_read_committed(conf: dict[str, Any], topic: str, count: int) -> list[bytes]:
    """Up to ``count`` values of ``topic`` read from the start by a read_committed librdkafka consumer."""
    consumer = CkConsumer({**conf, "group.id": f"g-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest",
                           "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(values) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            value = msg.value()
            assert value is not None  # every record written here has a value
            values.append(value)
    finally:
        consumer.close()
    return values


def librdkafka_roundtrip(conf: dict[str, Any], topic: str, plain: int) -> list[bytes]:
    """``plain`` records ``plain-i``, an aborted transaction, a committed one (``txn-i``); what
    librdkafka then reads read_committed."""
    producer = CkProducer({**conf, "linger.ms": 5})
    for i in range(plain):
        producer.produce(topic, f"plain-{i}".encode())
    assert producer.flush(TIMEOUT_S) == 0
    _abort_then_commit(CkProducer({**conf, "transactional.id": f"ck-txn-{uuid.uuid4().hex[:8]}"}), topic, "txn")
    return librdkafka_read_committed(conf, topic, plain + COMMITTED)


def kafka_python_roundtrip(bootstrap: str, args: dict[str, Any], topic: str) -> list[bytes]:
    """An aborted and a committed transaction (``kp-i``) by kafka-python's producer (``args``: its
    security keyword arguments); what its consumer then reads read_committed."""
    from kafka import KafkaConsumer, KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"kp-{uuid.uuid4().hex[:8]}", **args)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"aborted")
        producer.abort_transaction()
        producer.begin_transaction()
        for i in range(COMMITTED):
            producer.send(topic, f"kp-{i}".encode())
        producer.commit_transaction()
    finally:
        producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             isolation_level="read_committed", enable_auto_commit=False,
                             consumer_timeout_ms=int(TIMEOUT_S * 1000), **args)
    values: list[bytes] = []
    try:
        for message in consumer:
            values.append(message.value)
            if len(values) == COMMITTED:
                break
    finally:
        consumer.close()
    return values


def oncestream_roundtrip(conf: dict[str, Any], topic: str) -> list[bytes]:
    """An aborted and a committed transaction (``os-i``) by our producer; what our consumer then
    reads read_committed from partition 0."""
    _abort_then_commit(Producer({**conf, "transactional.id": f"os-{uuid.uuid4().hex[:8]}"}), topic, "os")
    consumer = Consumer({**conf, "group.id": f"g-{uuid.uuid4().hex[:8]}", "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(values) < COMMITTED and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                values.append(message_value(msg))
    finally:
        consumer.close()
    return values


def _abort_then_commit(producer: Any, topic: str, prefix: str) -> None:
    """An aborted transaction (``aborted``), then a committed one (``<prefix>-i``), by a
    transactional producer with confluent-kafka's API (librdkafka's or ours, which mirrors it)."""
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(topic, b"aborted")
    producer.abort_transaction(TIMEOUT_S)
    producer.begin_transaction()
    for i in range(COMMITTED):
        producer.produce(topic, f"{prefix}-{i}".encode())
    producer.commit_transaction(TIMEOUT_S)
