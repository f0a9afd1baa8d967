"""CreatePartitions (key 37) through three admin clients, and what the new partitions mean to
producers and consumers: they start empty at offset 0, survive a broker restart, and a librdkafka
group member subscribed to the topic is assigned them after its next metadata refresh. The
coordinators' internal topics are listed as internal and keep their partition count."""

from __future__ import annotations

import struct
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import ConfigResource, NewPartitions, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.admin import NewPartitions as KafkaPythonNewPartitions
from kafka.errors import InvalidPartitionsError

from oncestream.client import Admin
from tests.support.brokers import NO_INITIAL_REBALANCE_DELAY, BrokerProcess
from tests.support.clients import (
    CLIENT_TIMEOUT_S,
    admin_client,
    assign_from_beginning,
    confluent_consume,
    confluent_consumer,
    confluent_end_offsets,
    create_topic,
    unique_topic,
)
from tests.support.narrow import message_position, message_value

pytestmark = pytest.mark.interop

MODULE_BROKER_CONFIG = NO_INITIAL_REBALANCE_DELAY  # read by conftest's broker fixture


def _partition_count(bootstrap: str, topic: str) -> int:
    metadata = admin_client(bootstrap).list_topics(topic, timeout=CLIENT_TIMEOUT_S)
    return len(metadata.topics[topic].partitions)


def _grow(bootstrap: str, topic: str, count: int, validate_only: bool = False) -> None:
    admin = admin_client(bootstrap)  # held until the future resolves: a destroyed handle fails it
    futures = admin.create_partitions(
        [NewPartitions(topic, count)], validate_only=validate_only, request_timeout=CLIENT_TIMEOUT_S)
    futures[topic].result(timeout=CLIENT_TIMEOUT_S)


def _produce(bootstrap: str, topic: str, partition: int, values: list[bytes]) -> list[int]:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    offsets: list[int] = []

    def on_delivery(err, msg) -> None:
        assert err is None, err
        offsets.append(msg.offset())

    for value in values:
        producer.produce(topic, value, partition=partition, on_delivery=on_delivery)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    return offsets


def test_librdkafka_admin_grows_a_topic_and_the_new_partition_takes_records(broker):
    topic = unique_topic("parts-grow")
    create_topic(broker.bootstrap, topic, partitions=1)
    _produce(broker.bootstrap, topic, 0, [b"old"])
    _grow(broker.bootstrap, topic, 3, validate_only=True)
    assert _partition_count(broker.bootstrap, topic) == 1, "validate_only changed the topic"
    _grow(broker.bootstrap, topic, 3)
    assert _partition_count(broker.bootstrap, topic) == 3
    assert _produce(broker.bootstrap, topic, 2, [b"new-0", b"new-1"]) == [0, 1]
    by_partition = {(r.partition, r.value) for r in confluent_consume(broker.bootstrap, topic, 3)}
    assert by_partition == {(0, b"old"), (2, b"new-0"), (2, b"new-1")}


@pytest.mark.parametrize(
    ("count", "target", "code"),
    [
        (1, None, KafkaError.INVALID_PARTITIONS),  # not more than now
        (5, "missing", KafkaError.UNKNOWN_TOPIC_OR_PART),
        (100, "__consumer_offsets", KafkaError.INVALID_PARTITIONS),  # coordinators hash over it
    ],
)
def test_refusals_carry_kafka_error_codes(broker, count, target, code):
    topic = unique_topic("parts-bad")
    create_topic(broker.bootstrap, topic, partitions=2)
    name = topic if target is None else (unique_topic("parts-missing") if target == "missing" else target)
    with pytest.raises(KafkaException) as failure:
        _grow(broker.bootstrap, name, count)
    assert failure.value.args[0].code() == code
    assert _partition_count(broker.bootstrap, topic) == 2


def test_internal_topics_are_listed_as_internal_and_keep_their_partition_count(broker):
    """__consumer_offsets and __transaction_state as Metadata shows them to librdkafka and
    kafka-python (all topics, by name): internal, every partition led by a listed broker; growing
    or creating them is refused and changes nothing (coordinators hash ids over the count)."""
    admin = admin_client(broker.bootstrap)
    listed = admin.list_topics(timeout=CLIENT_TIMEOUT_S)
    counts: dict[str, int] = {}
    for name in ("__consumer_offsets", "__transaction_state"):
        topic = listed.topics[name]
        assert topic.error is None
        counts[name] = len(topic.partitions)
        assert counts[name] > 0
        assert {p.leader for p in topic.partitions.values()} <= set(listed.brokers)
    for name, future in admin.describe_topics(TopicCollection(sorted(counts)),
                                              request_timeout=CLIENT_TIMEOUT_S).items():
        described = future.result(timeout=CLIENT_TIMEOUT_S)
        assert described.is_internal
        assert len(described.partitions) == counts[name]
    ours = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000))
    try:
        described_by_kafka_python = {d["name"]: d for d in ours.describe_topics(sorted(counts))}
    finally:
        ours.close()
    assert {name: (d["error_code"], d["is_internal"], len(d["partitions"]))
            for name, d in described_by_kafka_python.items()} == {name: (0, True, n) for name, n in counts.items()}

    with pytest.raises(KafkaException) as grown:
        _grow(broker.bootstrap, "__transaction_state", counts["__transaction_state"] + 1)
    assert grown.value.args[0].code() == KafkaError.INVALID_PARTITIONS
    created = admin.create_topics([NewTopic("__consumer_offsets", 1)], request_timeout=CLIENT_TIMEOUT_S)
    with pytest.raises(KafkaException) as exists:
        created["__consumer_offsets"].result(timeout=CLIENT_TIMEOUT_S)
    assert exists.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    assert {name: _partition_count(broker.bootstrap, name) for name in counts} == counts


def test_internal_topics_configs_are_described_on_every_broker_kind(broker):
    """DescribeConfigs of the coordinators' internal topics (what ``kafka-configs --describe
    --entity-type topics`` asks): compacted with Kafka's segment size, from the single broker's
    logs and from a cluster (where their records are PostgreSQL rows, not segments)."""
    admin = admin_client(broker.bootstrap)
    resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in ("__consumer_offsets", "__transaction_state")]
    for resource, future in admin.describe_configs(resources, request_timeout=CLIENT_TIMEOUT_S).items():
        entries = future.result(timeout=CLIENT_TIMEOUT_S)
        assert entries["cleanup.policy"].value == "compact", resource
        assert entries["segment.bytes"].value == "104857600", resource


def _offset_commits(records: list[tuple[bytes | None, bytes | None]], group: str) -> dict[tuple[str, int], int]:
    """The latest committed offset per (topic, partition) of ``group`` among __consumer_offsets
    records (OffsetCommitKey v0/v1: version, group, topic, partition; value: version, offset)."""
    found: dict[tuple[str, int], int] = {}
    for key, value in records:
        if key is None or struct.unpack_from(">h", key)[0] not in (0, 1):
            continue
        group_len = struct.unpack_from(">h", key, 2)[0]
        if key[4:4 + group_len].decode() != group:
            continue
        topic_len = struct.unpack_from(">h", key, 4 + group_len)[0]
        topic = key[6 + group_len:6 + group_len + topic_len].decode()
        partition = struct.unpack_from(">i", key, 6 + group_len + topic_len)[0]
        if value is None:
            found.pop((topic, partition), None)
        else:
            found[(topic, partition)] = struct.unpack_from(">q", value, 2)[0]
    return found


def test_the_offsets_topic_is_read_as_a_compacted_log_on_every_broker_kind(broker):
    """A tool reading __consumer_offsets (kafka-console-consumer's OffsetsMessageFormatter, lag
    monitors) with librdkafka: the latest commit of a group is there, and the reader's position
    reaches every partition's high watermark (on a cluster the records are PostgreSQL rows, the
    overwritten ones gone as compaction leaves them)."""
    topic = unique_topic("offsets-read")
    create_topic(broker.bootstrap, topic, partitions=2)
    group = unique_topic("offsets-reader-group")
    committer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        for offset in (3, 7, 11):  # overwrites: on a cluster only the last commit keeps a row
            committer.commit(offsets=[TopicPartition(topic, 0, offset), TopicPartition(topic, 1, offset + 1)],
                             asynchronous=False)
    finally:
        committer.close()
    deleted = unique_topic("offsets-deleted-group")  # its rows become tombstones: none left on a cluster
    committer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": deleted, "enable.auto.commit": False})
    try:
        committer.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)
    finally:
        committer.close()
    admin = admin_client(broker.bootstrap)  # held until the future resolves
    admin.delete_consumer_groups([deleted], request_timeout=CLIENT_TIMEOUT_S)[deleted].result(timeout=CLIENT_TIMEOUT_S)
    partitions = _partition_count(broker.bootstrap, "__consumer_offsets")
    # The end of every partition is where its high watermark is: librdkafka reports it
    # (PARTITION_EOF) only once its fetch position got there, also past a header-only batch.
    reader = confluent_consumer(broker.bootstrap, {"enable.partition.eof": True})
    records: list[tuple[bytes | None, bytes | None]] = []
    at_end: dict[int, int] = {}
    try:
        assign_from_beginning(reader, "__consumer_offsets", partitions)
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"partitions read to their end: {at_end}"
            for msg in reader.consume(num_messages=1000, timeout=0.2):
                if msg.error() is None:
                    records.append((msg.key(), msg.value()))
                elif msg.error().code() == KafkaError._PARTITION_EOF:
                    at_end[msg.partition()] = msg.offset()
                else:
                    raise KafkaException(msg.error())
    finally:
        reader.close()
    end_offsets = confluent_end_offsets(broker.bootstrap, "__consumer_offsets", partitions)
    assert at_end == end_offsets  # no commit in between: every reader reached its high watermark
    assert _offset_commits(records, group) == {(topic, 0): 11, (topic, 1): 12}
    assert _offset_commits(records, deleted) == {}


def test_kafka_python_and_our_admin_grow_topics(broker):
    topic = unique_topic("parts-clients")
    create_topic(broker.bootstrap, topic, partitions=1)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000))
    try:
        admin.create_partitions({topic: KafkaPythonNewPartitions(total_count=2)})
        with pytest.raises(InvalidPartitionsError):
            admin.create_partitions({topic: KafkaPythonNewPartitions(total_count=2)})
    finally:
        admin.close()
    assert _partition_count(broker.bootstrap, topic) == 2

    ours = Admin({"bootstrap.servers": broker.bootstrap})
    try:
        assert ours.create_partitions({topic: 4}) == {topic: None}
        error = ours.create_partitions({topic: 3})[topic]
        assert error is not None
        assert error.name() == "INVALID_PARTITIONS"
        assert len(ours.describe_topics([topic])[topic].partitions) == 4
    finally:
        ours.close()


def test_new_partitions_survive_a_restart(tmp_path):
    process = BrokerProcess(data_dir=tmp_path / "data")
    process.start()
    try:
        topic = unique_topic("parts-restart")
        create_topic(process.bootstrap, topic, partitions=1)
        _grow(process.bootstrap, topic, 2)
        _produce(process.bootstrap, topic, 1, [b"a", b"b"])
        process.kill()  # SIGKILL: nothing flushed on the way out
        process.start()
        assert _partition_count(process.bootstrap, topic) == 2
        assert [r.value for r in confluent_consume(process.bootstrap, topic, 2)] == [b"a", b"b"]
    finally:
        process.stop()


def test_a_subscribed_group_member_is_assigned_the_new_partitions(broker):
    topic = unique_topic("parts-group")
    create_topic(broker.bootstrap, topic, partitions=1)
    consumer = Consumer({
        "bootstrap.servers": broker.bootstrap,
        "group.id": unique_topic("parts-group-g"),
        "auto.offset.reset": "earliest",
        "topic.metadata.refresh.interval.ms": 300,
        "enable.auto.commit": False,
    })
    try:
        consumer.subscribe([topic])
        _produce(broker.bootstrap, topic, 0, [b"before"])
        assert _poll_one(consumer) == (0, b"before")  # joined, assigned the one partition
        assert {tp.partition for tp in consumer.assignment()} == {0}
        consumer.commit(asynchronous=False)  # the rebalance below must not replay "before"
        _grow(broker.bootstrap, topic, 3)
        _produce(broker.bootstrap, topic, 2, [b"on-new-partition"])
        assert _poll_one(consumer) == (2, b"on-new-partition")
        assert {tp.partition for tp in consumer.assignment()} == {0, 1, 2}
    finally:
        consumer.close()


def _poll_one(consumer: Consumer) -> tuple[int, bytes] | None:
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            return message_position(msg)[0], message_value(msg)
    return None
