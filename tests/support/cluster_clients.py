"""librdkafka clients of the cluster tests: idempotent acks=all producers, ``assign()`` consumers.

A consumer here starts each partition at offset 0 and reads until it holds ``count`` records, so
it needs nothing of the cluster but Metadata and Fetch (no group, no ListOffsets).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from confluent_kafka import Consumer, KafkaException, TopicPartition

from tests.support.clients import CLIENT_TIMEOUT_S, CONSUME_WAIT_S, confluent_produce, unique_topic
from tests.support.narrow import consumed_record
from tests.support.records import ConsumedRecord, SentRecord

READ_WAIT_S = 120.0  # a bound on a hang only


def produce_all(bootstrap: str, topic: str, records: Sequence[SentRecord]) -> list[tuple[int, int]]:
    """Produce with an idempotent acks=all producer; (partition, offset) per record, all acknowledged."""
    return confluent_produce(bootstrap, topic, records)


def consume_all(bootstrap: str, topic: str, partitions: int, count: int,
                extra_conf: dict[str, object] | None = None) -> list[ConsumedRecord]:
    """Read every partition from offset 0 until ``count`` records arrived; then read on briefly
    (a record past ``count`` would be a duplicate the caller's check reports)."""
    conf: dict[str, object] = {"bootstrap.servers": bootstrap, "group.id": unique_topic("cluster-reader"),
                               "enable.auto.commit": False, "fetch.wait.max.ms": 100, **(extra_conf or {})}
    consumer = Consumer(conf)
    consumed: list[ConsumedRecord] = []
    try:
        consumer.list_topics(topic, timeout=CLIENT_TIMEOUT_S)
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + READ_WAIT_S
        while len(consumed) < count:
            assert time.monotonic() < deadline, f"read {len(consumed)} of {count} records of {topic}"
            _take(consumer, consumed, CONSUME_WAIT_S)
        extra_until = time.monotonic() + 0.5
        while time.monotonic() < extra_until:
            _take(consumer, consumed, CONSUME_WAIT_S)
    finally:
        consumer.close()
    return consumed


def _take(consumer: Consumer, into: list[ConsumedRecord], wait_s: float) -> None:
    for msg in consumer.consume(num_messages=1000, timeout=wait_s):
        if msg.error() is not None:
            raise KafkaException(msg.error())
        into.append(consumed_record(msg))
