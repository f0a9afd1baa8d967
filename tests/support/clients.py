"""One produce and one consume function per real Kafka client, with a common shape.

Every producer function takes ``SentRecord``s, waits for every acknowledgement and fails on any
delivery error. Every consumer function reads the given partitions from the beginning up to the
end offsets it saw when it started (so a duplicate the broker stored is read and caught, and the
read terminates without timing heuristics), bounded by a generous deadline.

Clients: confluent-kafka (librdkafka), kafka-python, aiokafka and the kcat command line.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from collections.abc import Callable, Sequence

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.narrow import consumed_record
from tests.support.records import ConsumedRecord, SentRecord

CLIENT_TIMEOUT_S = 60.0
# Errors that say "ask again" while a group's coordinator moves (a cluster broker's lease taken
# over): Kafka's Java clients rediscover the coordinator and retry them themselves; librdkafka's
# committed() and commit() raise them.
COORDINATOR_MOVING = frozenset({KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                                KafkaError.COORDINATOR_NOT_AVAILABLE})
KCAT = "kcat"
# Note: Debian's kcat bundles librdkafka 2.0.2, which misreads Tansu 0.6's ApiVersions v3 response
# ("Protocol read buffer underflow"), so the kcat tests only pass against our broker.


def unique_topic(prefix: str) -> str:
    """A topic name no other test uses (tests share module-scoped brokers)."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


# -- admin -------------------------------------------------------------------------------------
def admin_client(bootstrap: str) -> AdminClient:
    """A confluent-kafka AdminClient for ``bootstrap``."""
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(
    bootstrap: str, topic: str, partitions: int = 1, config: dict[str, str] | None = None
) -> None:
    """Create ``topic`` through CreateTopics and wait for the broker's answer."""
    admin = admin_client(bootstrap)
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1, config=config or {})],
        operation_timeout=30,
        request_timeout=30,
    )
    futures[topic].result(timeout=CLIENT_TIMEOUT_S)


# -- confluent-kafka ---------------------------------------------------------------------------
def confluent_produce(
    bootstrap: str,
    topic: str,
    records: Sequence[SentRecord],
    *,
    extra_conf: dict[str, object] | None = None,
) -> list[tuple[int, int]]:
    """Produce with an idempotent acks=all librdkafka producer; return (partition, offset) per record."""
    conf: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
    }
    conf.update(extra_conf or {})
    producer = Producer(conf)
    positions: list[tuple[int, int] | None] = [None] * len(records)
    errors: list[str] = []

    def on_delivery_for(index: int) -> Callable[[object, object], None]:
        def on_delivery(err: object, msg: object) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                positions[index] = (msg.partition(), msg.offset())  # type: ignore[attr-defined]

        return on_delivery

    for index, record in enumerate(records):
        while True:
            try:
                producer.produce(topic, record.value, key=record.key, on_delivery=on_delivery_for(index))
                break
            except BufferError:  # local queue full: serve delivery reports, then retry
                producer.poll(0.1)
        producer.poll(0)
    remaining = producer.flush(CLIENT_TIMEOUT_S)
    assert remaining == 0, f"{remaining} records still unacknowledged after flush"
    assert not errors, f"delivery errors: {errors[:5]}"
    assert all(p is not None for p in positions)
    return [p for p in positions if p is not None]


def confluent_consumer(bootstrap: str, extra_conf: dict[str, object] | None = None) -> Consumer:
    """A librdkafka consumer used with ``assign`` (its group id is unique and never committed)."""
    conf: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": unique_topic("interop-group"),
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    conf.update(extra_conf or {})
    return Consumer(conf)


def confluent_end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """High watermark of each partition, asked from the broker (ListOffsets latest)."""
    consumer = confluent_consumer(bootstrap)
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False)[1]
            for p in range(partitions)
        }
    finally:
        consumer.close()


# How long one librdkafka consume() call waits: it returns early only with num_messages records,
# so a long wait here is paid at the end of every read.
CONSUME_WAIT_S = 0.05


def assign_from_beginning(consumer: Consumer, topic: str, partitions: int) -> None:
    """``assign`` every partition of ``topic`` at OFFSET_BEGINNING, the topic's metadata fetched
    first: assigned before librdkafka knows the partition leaders, each partition's offset query
    waits for a 500 ms retry timer instead of starting at once."""
    consumer.list_topics(topic, timeout=CLIENT_TIMEOUT_S)
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])


def confluent_consume(bootstrap: str, topic: str, partitions: int) -> list[ConsumedRecord]:
    """Read every partition from the beginning (``assign`` + OFFSET_BEGINNING) to its end offset."""
    end_offsets = confluent_end_offsets(bootstrap, topic, partitions)
    consumer = confluent_consumer(bootstrap)
    consumed: list[ConsumedRecord] = []
    try:
        assign_from_beginning(consumer, topic, partitions)
        next_offsets = {p: 0 for p in range(partitions)}
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while any(next_offsets[p] < end_offsets[p] for p in range(partitions)):
            assert time.monotonic() < deadline, _stuck(next_offsets, end_offsets)
            # consume() waits its whole timeout unless num_messages arrive: keep it short
            for msg in consumer.consume(num_messages=1000, timeout=CONSUME_WAIT_S):
                if msg.error() is not None:
                    raise KafkaException(msg.error())
                record = consumed_record(msg)
                consumed.append(record)
                next_offsets[record.partition] = record.offset + 1
    finally:
        consumer.close()
    return consumed


def _stuck(next_offsets: dict[int, int], end_offsets: dict[int, int]) -> str:
    return f"consumer stuck: next offsets {next_offsets}, end offsets {end_offsets}"


# -- kafka-python ------------------------------------------------------------------------------
def kafka_python_produce(
    bootstrap: str, topic: str, records: Sequence[SentRecord], *, idempotent: bool = True
) -> list[tuple[int, int]]:
    """Produce with kafka-python's KafkaProducer (acks=all); return (partition, offset) per record."""
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=idempotent, linger_ms=5
    )
    try:
        futures = [producer.send(topic, key=r.key, value=r.value) for r in records]
        producer.flush(timeout=CLIENT_TIMEOUT_S)
        metadata = [future.get(timeout=CLIENT_TIMEOUT_S) for future in futures]
    finally:
        producer.close(timeout=10)
    return [(m.partition, m.offset) for m in metadata]


def kafka_python_consume(bootstrap: str, topic: str, partitions: int) -> list[ConsumedRecord]:
    """Read with kafka-python's KafkaConsumer: ``assign`` + ``seek_to_beginning``, no group."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KpTopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    consumed: list[ConsumedRecord] = []
    try:
        tps = [KpTopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        end_offsets = {tp.partition: offset for tp, offset in consumer.end_offsets(tps).items()}
        next_offsets = {p: 0 for p in range(partitions)}
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while any(next_offsets[p] < end_offsets[p] for p in range(partitions)):
            assert time.monotonic() < deadline, _stuck(next_offsets, end_offsets)
            for tp, messages in consumer.poll(timeout_ms=500).items():
                for m in messages:
                    consumed.append(ConsumedRecord(tp.partition, m.offset, m.key, m.value))
                    next_offsets[tp.partition] = m.offset + 1
    finally:
        consumer.close()
    return consumed


# -- aiokafka ----------------------------------------------------------------------------------
def aiokafka_produce(
    bootstrap: str, topic: str, records: Sequence[SentRecord], *, idempotent: bool
) -> list[tuple[int, int]]:
    """Produce with aiokafka (acks=all, idempotent or not); return (partition, offset) per record."""
    from aiokafka import AIOKafkaProducer

    async def run() -> list[tuple[int, int]]:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            acks="all",
            enable_idempotence=idempotent,
            linger_ms=5,
            request_timeout_ms=30000,
        )
        await producer.start()
        try:
            futures = [await producer.send(topic, r.value, key=r.key) for r in records]
            metadata = await asyncio.wait_for(asyncio.gather(*futures), CLIENT_TIMEOUT_S)
        finally:
            await producer.stop()
        return [(m.partition, m.offset) for m in metadata]

    return asyncio.run(run())


def aiokafka_consume(bootstrap: str, topic: str, partitions: int) -> list[ConsumedRecord]:
    """Read with aiokafka: ``assign`` + ``seek_to_beginning``, no group."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as AioTopicPartition

    async def run() -> list[ConsumedRecord]:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        await consumer.start()
        consumed: list[ConsumedRecord] = []
        try:
            tps = [AioTopicPartition(topic, p) for p in range(partitions)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            end_offsets = {tp.partition: o for tp, o in (await consumer.end_offsets(tps)).items()}
            next_offsets = {p: 0 for p in range(partitions)}
            deadline = time.monotonic() + CLIENT_TIMEOUT_S
            while any(next_offsets[p] < end_offsets[p] for p in range(partitions)):
                assert time.monotonic() < deadline, _stuck(next_offsets, end_offsets)
                batches = await consumer.getmany(timeout_ms=500)
                for tp, messages in batches.items():
                    for m in messages:
                        consumed.append(ConsumedRecord(tp.partition, m.offset, m.key, m.value))
                        next_offsets[tp.partition] = m.offset + 1
        finally:
            await consumer.stop()
        return consumed

    return asyncio.run(run())


# -- kcat --------------------------------------------------------------------------------------
def kcat_produce(bootstrap: str, topic: str, records: Sequence[SentRecord]) -> list[tuple[int, int]]:
    """Produce keyed lines with ``kcat -P -K:``; kcat reports no offsets, so none are returned."""
    for record in records:
        assert b":" not in record.key
        assert b"\n" not in record.key + record.value
    lines = b"".join(record.key + b":" + record.value + b"\n" for record in records)
    result = subprocess.run(
        [KCAT, "-b", bootstrap, "-P", "-t", topic, "-K:", "-X", "acks=all"],
        input=lines,
        capture_output=True,
        timeout=CLIENT_TIMEOUT_S,
    )
    assert result.returncode == 0, f"kcat -P failed ({result.returncode}): {result.stderr!r}"
    assert b"ERROR" not in result.stderr.upper(), f"kcat -P reported: {result.stderr!r}"
    return []


def kcat_consume(bootstrap: str, topic: str, partitions: int) -> list[ConsumedRecord]:
    """Read with ``kcat -C -e -o beginning`` (exits at the end of every partition)."""
    result = subprocess.run(
        [KCAT, "-b", bootstrap, "-C", "-e", "-q", "-t", topic, "-o", "beginning",
         "-f", "%p|%o|%k|%s\n"],
        capture_output=True,
        timeout=CLIENT_TIMEOUT_S,
    )
    assert result.returncode == 0, f"kcat -C failed ({result.returncode}): {result.stderr!r}"
    consumed = []
    for line in result.stdout.splitlines():
        partition, offset, key, value = line.split(b"|", 3)
        assert 0 <= int(partition) < partitions
        consumed.append(ConsumedRecord(int(partition), int(offset), key, value))
    return consumed


ProduceFn = Callable[[str, str, Sequence[SentRecord]], list[tuple[int, int]]]
ConsumeFn = Callable[[str, str, int], list[ConsumedRecord]]

PRODUCERS: dict[str, ProduceFn] = {
    "confluent": confluent_produce,
    "kafka-python": kafka_python_produce,
    "aiokafka": lambda b, t, r: aiokafka_produce(b, t, r, idempotent=True),
    "kcat": kcat_produce,
}
CONSUMERS: dict[str, ConsumeFn] = {
    "confluent": confluent_consume,
    "kafka-python": kafka_python_consume,
    "aiokafka": aiokafka_consume,
    "kcat": kcat_consume,
}
