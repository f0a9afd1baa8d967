"""The idempotent producer (KIP-98 idempotence, on by default) across a broker crash.

The broker is SIGKILLed while produce requests are in flight and restarted on the same port.
Our producer keeps every record's sequence number across reconnects and retries, so a batch the
broker had already written before dying comes back as a duplicate (answered with its original
offset) instead of being appended twice. Read back with librdkafka, every record is there
exactly once, in per-key produce order, and every delivery report carries the offset the
record really has.
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict

import confluent_kafka as ck
import pytest

from oncestream.client import Admin, Producer, TopicPartition
from tests.support.clients import CLIENT_TIMEOUT_S, confluent_consume, create_topic, unique_topic
from tests.support.narrow import present

pytestmark = pytest.mark.interop

PARTITIONS = 3
RECORDS = 30_000
KEYS = 40


def _value(key: int, seq: int) -> bytes:
    return b"k%02d:%06d:" % (key, seq) + b"x" * 200


def test_no_duplicates_or_loss_when_the_broker_is_killed_mid_stream(broker_factory):
    broker = broker_factory()
    topic = unique_topic("idem-crash")
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    producer = Producer({
        "bootstrap.servers": broker.bootstrap,
        "linger.ms": 5,
        "batch.size": 32768,
        "reconnect.backoff.max.ms": 500,
        "request.timeout.ms": 10000,
    })
    delivered: dict[bytes, tuple[int, int]] = {}
    errors: list[object] = []
    lock = threading.Lock()

    def on_delivery(err, msg):
        with lock:
            if err is not None:
                errors.append(err)
            else:
                delivered[msg.value()] = (msg.partition(), msg.offset())

    sent: list[tuple[bytes, bytes]] = []
    seq: Counter[int] = Counter()
    kill_at = {RECORDS // 3, 2 * RECORDS // 3}
    try:
        for i in range(RECORDS):
            key = i % KEYS
            value = _value(key, seq[key])
            seq[key] += 1
            producer.produce(topic, value, key=b"key-%d" % key, on_delivery=on_delivery)
            sent.append((b"key-%d" % key, value))
            if i in kill_at:
                producer.poll(0)
                # Requests are in flight right now: crash the broker under them.
                broker.restart(crash=True)
        assert producer.flush(CLIENT_TIMEOUT_S * 2) == 0
    finally:
        producer.close()
    assert not errors, errors[:5]
    assert len(delivered) == RECORDS

    consumed = confluent_consume(broker.bootstrap, topic, PARTITIONS)
    counts = Counter(r.value for r in consumed)
    duplicates = [v for v, n in counts.items() if n > 1]
    assert not duplicates, f"{len(duplicates)} records stored twice, e.g. {duplicates[:3]}"
    assert set(counts) == {v for _, v in sent}, "records lost"
    for record in consumed:
        assert delivered[record.value] == (record.partition, record.offset), "wrong offset reported"
    per_key: dict[bytes, list[bytes]] = defaultdict(list)
    for record in sorted(consumed, key=lambda r: (r.partition, r.offset)):
        per_key[present(record.key, "record key")].append(record.value)
    expected: dict[bytes, list[bytes]] = defaultdict(list)
    for sent_key, sent_value in sent:
        expected[sent_key].append(sent_value)
    assert per_key == expected, "per-key order broken"


def test_idempotent_producer_uses_a_producer_id(broker_factory):
    """The batches carry a producer id (InitProducerId happened): the broker's producer state
    for the partition lists exactly one producer."""
    broker = broker_factory()
    topic = unique_topic("idem-pid")
    create_topic(broker.bootstrap, topic, partitions=1)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    try:
        for i in range(100):
            producer.produce(topic, b"v%d" % i)
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
    finally:
        producer.close()
    admin = Admin({"bootstrap.servers": broker.bootstrap})
    try:
        producers = admin.describe_producers([TopicPartition(topic, 0)])[(topic, 0)]
    finally:
        admin.close()
    assert len(producers) == 1
    assert producers[0].producer_id >= 0
    assert producers[0].last_sequence == 99
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique_topic("g")})
    try:
        low, high = consumer.get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=30)
    finally:
        consumer.close()
    assert (low, high) == (0, 100)
