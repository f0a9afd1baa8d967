"""Topic-level compression.type with real clients (issue 14 point 6): a topic whose codec differs
from the producer's stores batches recompressed (checked in the segment files), and librdkafka
(confluent-kafka and kcat) and kafka-python read back exactly what was sent: keys, values,
headers, timestamps, offsets; idempotent and transactional producers keep their guarantees."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from oncestream.protocol.compression import COMPRESSION_BY_NAME
from oncestream.protocol.record_batch import iter_batches
from tests.support.brokers import BrokerProcess
from tests.support.clients import (
    CLIENT_TIMEOUT_S,
    admin_client,
    confluent_consumer,
    create_topic,
    kafka_python_consume,
    kafka_python_produce,
    kcat_consume,
    unique_topic,
)
from tests.support.records import SentRecord

pytestmark = pytest.mark.interop

RECORDS = 300
# topic compression.type -> (codec id stored, codec the producer uses: always a different one)
CASES = {
    "gzip": (COMPRESSION_BY_NAME["gzip"], "none"),
    "snappy": (COMPRESSION_BY_NAME["snappy"], "zstd"),
    "lz4": (COMPRESSION_BY_NAME["lz4"], "none"),
    "zstd": (COMPRESSION_BY_NAME["zstd"], "gzip"),
    "uncompressed": (COMPRESSION_BY_NAME["none"], "lz4"),
}
# kafka-python here has no snappy/lz4/zstd library installed: it reads the other two.
KAFKA_PYTHON_READABLE = {"gzip", "uncompressed"}


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """Our broker: the test reads its segment files to see the stored codec."""
    process = BrokerProcess(data_dir=tmp_path_factory.mktemp("compression") / "data")
    process.start()
    try:
        yield process
    finally:
        process.stop()


def stored_codecs(broker: BrokerProcess, topic: str, partition: int = 0) -> list[int]:
    """The codec of every batch in the partition's segment files, in offset order."""
    directory = Path(broker.data_dir) / "logs" / f"{topic}-{partition}"
    codecs: list[int] = []
    for segment in sorted(directory.glob("*.log")):
        codecs += [header.compression for header, _ in iter_batches(segment.read_bytes())]
    return codecs


def _stored_flags(broker: BrokerProcess, topic: str) -> list[tuple[bool, bool, int]]:
    directory = Path(broker.data_dir) / "logs" / f"{topic}-0"
    out = []
    for segment in sorted(directory.glob("*.log")):
        out += [(h.is_transactional, h.is_control, h.compression) for h, _ in iter_batches(segment.read_bytes())]
    return out


def _sent(index: int) -> tuple[bytes, bytes, list[tuple[str, str | bytes | None]], int]:
    return (b"key-%04d" % index, b"value-%04d " % index * 8, [("i", b"%d" % index)], 1_700_000_000_000 + index)


def _produce(bootstrap: str, topic: str, codec: str, count: int) -> None:
    """An idempotent librdkafka producer, several batches (small batch.size)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "compression.type": codec, "linger.ms": 5, "batch.size": 4000})
    errors: list[object] = []
    for index in range(count):
        key, value, headers, ts = _sent(index)
        producer.produce(topic, value, key=key, headers=headers, timestamp=ts, partition=0,
                         on_delivery=lambda err, _msg: errors.append(err) if err else None)
        producer.poll(0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    assert not errors, errors[:3]


def _confluent_read(bootstrap: str, topic: str, count: int, isolation: str = "read_uncommitted") -> list[tuple]:
    consumer = confluent_consumer(bootstrap, {"isolation.level": isolation})
    out: list[tuple] = []
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(out) < count:
            assert time.monotonic() < deadline, f"no more records after {len(out)}"
            for msg in consumer.consume(num_messages=500, timeout=0.5):
                if msg.error() is not None:
                    raise KafkaException(msg.error())
                out.append((msg.offset(), msg.key(), msg.value(), msg.headers(), msg.timestamp()[1]))
    finally:
        consumer.close()
    return out


@pytest.mark.parametrize("topic_type", sorted(CASES))
def test_topic_codec_is_applied_and_every_client_reads_the_records(ours: BrokerProcess, topic_type: str) -> None:
    stored_codec, producer_codec = CASES[topic_type]
    topic = unique_topic(f"codec-{topic_type}")
    create_topic(ours.bootstrap, topic, config={"compression.type": topic_type})
    _produce(ours.bootstrap, topic, producer_codec, RECORDS)

    codecs = stored_codecs(ours, topic)
    assert len(codecs) > 1, "the producer should have sent several batches"
    assert set(codecs) == {stored_codec}

    expected = [(i, *_sent(i)) for i in range(RECORDS)]
    got = _confluent_read(ours.bootstrap, topic, RECORDS)
    assert [(o, k, v, [(hk, hv) for hk, hv in h], ts) for o, k, v, h, ts in got] == \
        [(o, k, v, h, ts) for o, k, v, h, ts in expected]

    kcat = kcat_consume(ours.bootstrap, topic, 1)
    assert [(r.offset, r.key, r.value) for r in kcat] == [(o, k, v) for o, k, v, _, _ in expected]
    if topic_type in KAFKA_PYTHON_READABLE:
        kp = kafka_python_consume(ours.bootstrap, topic, 1)
        assert [(r.offset, r.key, r.value) for r in kp] == [(o, k, v) for o, k, v, _, _ in expected]


def test_transactions_on_a_recompressing_topic(ours: BrokerProcess) -> None:
    """KIP-98 over recompression: a committed and an aborted transaction; read_committed readers
    (librdkafka and kcat) see only the committed records, the markers stay uncompressed control
    batches and the data batches keep their transactional flag."""
    topic = unique_topic("codec-txn")
    create_topic(ours.bootstrap, topic, config={"compression.type": "zstd"})
    producer = Producer({"bootstrap.servers": ours.bootstrap, "transactional.id": unique_topic("txn"),
                         "compression.type": "none", "linger.ms": 5})
    producer.init_transactions(CLIENT_TIMEOUT_S)
    for tag, commit in ((b"committed", True), (b"aborted", False), (b"again", True)):
        producer.begin_transaction()
        for i in range(20):
            producer.produce(topic, tag + b"-%d" % i, key=b"k%d" % i, partition=0)
        producer.flush(CLIENT_TIMEOUT_S)
        if commit:
            producer.commit_transaction(CLIENT_TIMEOUT_S)
        else:
            producer.abort_transaction(CLIENT_TIMEOUT_S)

    values = [v for _, _, v, _, _ in _confluent_read(ours.bootstrap, topic, 40, "read_committed")]
    assert values == [b"committed-%d" % i for i in range(20)] + [b"again-%d" % i for i in range(20)]
    flags = _stored_flags(ours, topic)
    zstd, none = COMPRESSION_BY_NAME["zstd"], COMPRESSION_BY_NAME["none"]
    assert all(f == (True, False, zstd) for f in flags if not f[1])
    assert [f for f in flags if f[1]] == [(True, True, none)] * 3


def test_changing_compression_type_applies_to_later_batches(ours: BrokerProcess) -> None:
    topic = unique_topic("codec-change")
    create_topic(ours.bootstrap, topic, config={"compression.type": "uncompressed"})
    _produce(ours.bootstrap, topic, "lz4", 50)
    admin = admin_client(ours.bootstrap)
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("compression.type", "gzip", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("compression.gzip.level", "9", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(timeout=CLIENT_TIMEOUT_S)
    _produce(ours.bootstrap, topic, "lz4", 50)
    codecs = stored_codecs(ours, topic)
    none, gzip = COMPRESSION_BY_NAME["none"], COMPRESSION_BY_NAME["gzip"]
    assert set(codecs) == {none, gzip}
    assert codecs == sorted(codecs, key=lambda c: c == gzip)
    # kafka-python reads both parts (it has no lz4 library: the broker's rewrite is what it reads).
    assert [(r.offset, r.key) for r in kafka_python_consume(ours.bootstrap, topic, 1)] == \
        [(i, b"key-%04d" % (i % 50)) for i in range(100)]


def test_kafka_python_idempotent_producer_into_a_zstd_topic(ours: BrokerProcess) -> None:
    """kafka-python's idempotent producer (uncompressed batches) into a zstd topic: stored as
    zstd, read back by librdkafka in order, once each."""
    topic = unique_topic("codec-kp")
    create_topic(ours.bootstrap, topic, config={"compression.type": "zstd"})
    sent = [SentRecord(key=b"k%03d" % i, value=b"v%03d " % i * 20) for i in range(200)]
    offsets = kafka_python_produce(ours.bootstrap, topic, sent)
    assert [offset for _, offset in offsets] == list(range(200))
    assert set(stored_codecs(ours, topic)) == {COMPRESSION_BY_NAME["zstd"]}
    got = _confluent_read(ours.bootstrap, topic, 200)
    assert [(o, k, v) for o, k, v, _, _ in got] == [(i, r.key, r.value) for i, r in enumerate(sent)]


def test_broker_wide_zstd_covers_the_internal_topics_and_survives_restart(tmp_path: Path) -> None:
    """compression.type=zstd given to the broker: the coordinators' own topics (__consumer_offsets,
    __transaction_state) are stored recompressed too, and both coordinators replay them after a
    restart (committed offsets and a committed transaction are still there)."""
    broker = BrokerProcess(data_dir=tmp_path / "data", config={"compression.type": "zstd"})
    broker.start()
    try:
        topic = unique_topic("codec-internal")
        create_topic(broker.bootstrap, topic)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": unique_topic("txn"),
                             "linger.ms": 5})
        producer.init_transactions(CLIENT_TIMEOUT_S)
        producer.begin_transaction()
        for i in range(10):
            producer.produce(topic, b"v%d" % i, key=b"k", partition=0)
        producer.commit_transaction(CLIENT_TIMEOUT_S)
        group = unique_topic("group")
        consumer = confluent_consumer(broker.bootstrap, {"group.id": group})
        consumer.commit(offsets=[TopicPartition(topic, 0, 7)], asynchronous=False)
        consumer.close()
        zstd = COMPRESSION_BY_NAME["zstd"]
        offsets_codecs = {c for p in range(50) for c in stored_codecs(broker, "__consumer_offsets", p)}
        txn_codecs = {c for p in range(50) for c in stored_codecs(broker, "__transaction_state", p)}
        assert offsets_codecs == {zstd}
        assert txn_codecs == {zstd}

        broker.restart()
        consumer = confluent_consumer(broker.bootstrap, {"group.id": group})
        try:
            [committed] = consumer.committed([TopicPartition(topic, 0)], timeout=CLIENT_TIMEOUT_S)
        finally:
            consumer.close()
        assert committed.offset == 7
        values = [v for _, _, v, _, _ in _confluent_read(broker.bootstrap, topic, 10, "read_committed")]
        assert values == [b"v%d" % i for i in range(10)]
    finally:
        broker.stop()
