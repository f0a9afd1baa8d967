"""Three ``oncestream broker`` processes of one cluster (PostgreSQL + SeaweedFS), real clients.

- Metadata and DescribeCluster on every broker list the three live brokers with the cluster id of PostgreSQL, and a
  topic created through one broker is described identically by all of them, each partition led
  by a live broker, the partitions spread over all three.
- librdkafka idempotent acks=all producers and ``assign()`` consumers, each bootstrapped from a
  different broker: every record read exactly once, in order per key.
- A broker stopped by SIGSTOP past its session timeout leaves Metadata (and comes back once it is
  resumed: it registers again); a broker stopped by SIGTERM leaves it at once (it deregisters).
- Topic configs and partition counts changed through one broker are what the others describe;
  a deleted topic is gone on all of them.
- kcat, kafka-python and aiokafka produce through one broker; they and librdkafka read it all
  through another.
- ListOffsets and DeleteRecords: any broker answers, all agree (the offsets live in PostgreSQL).
- A consumer group (classic protocol, subscribe) whose members bootstrap from different brokers
  finds one coordinator (the owner of its partition's lease) and resumes from its commits.
- The objects of a deleted topic are deleted from the object store by the garbage collector.
- ``oncestream cluster status`` lists the brokers (live and gone) and the committed objects.
- Bad input: Produce to an unknown topic and a corrupt batch (raw wire) are answered with Kafka
  error codes, a transactional producer is refused (not yet in cluster mode), and the brokers
  keep serving.
"""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ClusterMetadata,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    OffsetSpec,
    ResourceType,
)

from oncestream.broker_process import oncestream_command
from tests.support.clients import CLIENT_TIMEOUT_S, CONSUMERS, PRODUCERS, create_topic, unique_topic
from tests.support.cluster import Cluster, cluster_factory  # noqa: F401  (fixture)
from tests.support.cluster_clients import consume_all, produce_all
from tests.support.narrow import consumed_record
from tests.support.records import ConsumedRecord, SentRecord, assert_exactly_once_in_key_order, keyed_records
from tests.support.wire import (
    API_PRODUCE,
    BATCH_CRC,
    ERROR_CORRUPT_MESSAGE,
    ERROR_NONE,
    WireConnection,
    parse_produce_response,
    produce_request_body,
    record_batch,
)

pytestmark = pytest.mark.interop

WAIT_S = 60.0  # a bound on a hang only


def _metadata(bootstrap: str, topic: str | None = None) -> ClusterMetadata:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.list_topics(topic, timeout=CLIENT_TIMEOUT_S)


def _live_ids(bootstrap: str) -> set[int]:
    return set(_metadata(bootstrap).brokers)


def _wait_live(bootstrap: str, expected: set[int], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while (seen := _live_ids(bootstrap)) != expected:
        assert time.monotonic() < deadline, f"{what}: live brokers {seen}, expected {expected}"
        time.sleep(0.2)


def test_every_broker_lists_the_cluster_and_describes_topics_alike(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(3)
    topic = unique_topic("cluster-describe")
    create_topic(cluster.brokers[0].bootstrap, topic, partitions=12)
    views = []
    for broker in cluster.brokers:
        md = _metadata(broker.bootstrap, topic)
        assert set(md.brokers) == {1, 2, 3}
        assert {(b.id, b.host, b.port) for b in md.brokers.values()} == {
            (b.node_id, b.host, b.port) for b in cluster.brokers}
        t = md.topics[topic]
        assert t.error is None
        views.append((md.cluster_id, md.controller_id, sorted((p.id, p.leader) for p in t.partitions.values())))
    assert views[0][0]  # the cluster id of PostgreSQL, the same everywhere
    assert views[0] == views[1] == views[2]
    for broker in cluster.brokers:  # DescribeCluster (KIP-700) agrees with Metadata
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        described = admin.describe_cluster(request_timeout=CLIENT_TIMEOUT_S).result(timeout=CLIENT_TIMEOUT_S)
        assert described.cluster_id == views[0][0]
        assert described.controller.id == views[0][1]
        assert {(n.id, n.host, n.port) for n in described.nodes} == {(b.node_id, b.host, b.port) for b in cluster.brokers}
    leaders = Counter(leader for _, leader in views[0][2])
    assert set(leaders) == {1, 2, 3}, f"12 partitions should be spread over all three brokers: {leaders}"


def test_idempotent_producers_and_consumers_spread_over_the_brokers(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(3)
    topic = unique_topic("cluster-roundtrip")
    partitions = 6
    create_topic(cluster.brokers[1].bootstrap, topic, partitions=partitions)
    sent = []
    for i, broker in enumerate(cluster.brokers):
        records = keyed_records(300, 5, tag=f"p{i}-", seed=i)
        produce_all(broker.bootstrap, topic, records)
        sent += records
    for broker in cluster.brokers:  # each consumer bootstrapped from another broker reads it all
        consumed = consume_all(broker.bootstrap, topic, partitions, len(sent))
        assert_exactly_once_in_key_order(sent, consumed)


def test_a_silent_broker_leaves_metadata_and_a_stopped_one_at_once(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(3)
    first = cluster.brokers[0].bootstrap
    _wait_live(first, {1, 2, 3}, "at start")
    paused = cluster.broker(3)
    paused.pause()
    try:
        _wait_live(first, {1, 2}, "after SIGSTOP past the session timeout")
    finally:
        paused.resume()
    _wait_live(first, {1, 2, 3}, "after SIGCONT (the broker registers again)")
    assert cluster.broker(2).stop() == 0
    # Deregistered before it exited: gone from the very next Metadata (after the live-broker cache).
    _wait_live(first, {1, 3}, "after SIGTERM")


def test_bad_produce_is_answered_with_error_codes(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(2, {"auto.create.topics.enable": "false"})
    errors: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "message.timeout.ms": 5000,
                         "topic.metadata.refresh.interval.ms": 500})
    producer.produce(unique_topic("cluster-nowhere"), b"v", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(CLIENT_TIMEOUT_S)
    assert errors
    assert errors[0] is not None
    assert errors[0].code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._MSG_TIMED_OUT)
    topic = unique_topic("cluster-after-bad")
    create_topic(cluster.brokers[0].bootstrap, topic, partitions=1)
    records = keyed_records(50, 2)
    produce_all(cluster.brokers[1].bootstrap, topic, records)
    assert_exactly_once_in_key_order(records, consume_all(cluster.brokers[0].bootstrap, topic, 1, len(records)))


def _offsets(bootstrap: str, tp: TopicPartition, spec: OffsetSpec) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # held until the result is in
    result = admin.list_offsets({tp: spec}, request_timeout=CLIENT_TIMEOUT_S)[tp].result(timeout=CLIENT_TIMEOUT_S)
    return int(result.offset)


def test_list_offsets_and_delete_records_on_any_broker(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(3)
    b1, b2, b3 = (broker.bootstrap for broker in cluster.brokers)
    topic = unique_topic("cluster-offsets")
    create_topic(b1, topic, partitions=1)
    records = keyed_records(100, 1)
    produce_all(b1, topic, records)
    tp = TopicPartition(topic, 0)
    assert [_offsets(b, tp, OffsetSpec.earliest()) for b in (b1, b2, b3)] == [0, 0, 0]
    assert [_offsets(b, tp, OffsetSpec.latest()) for b in (b1, b2, b3)] == [100, 100, 100]
    admin = AdminClient({"bootstrap.servers": b3})
    deleted = admin.delete_records([TopicPartition(topic, 0, 40)], request_timeout=CLIENT_TIMEOUT_S)
    assert deleted[TopicPartition(topic, 0, 40)].result(timeout=CLIENT_TIMEOUT_S).low_watermark == 40
    assert [_offsets(b, tp, OffsetSpec.earliest()) for b in (b1, b2, b3)] == [40, 40, 40]
    assert [_offsets(b, tp, OffsetSpec.latest()) for b in (b1, b2, b3)] == [100, 100, 100]
    consumer_records = consume_all(b2, topic, 1, 60, {"auto.offset.reset": "earliest"})
    assert [r.offset for r in consumer_records] == list(range(40, 100))


def test_topic_changes_on_one_broker_are_seen_by_all(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(3, {"auto.create.topics.enable": "false"})  # a deleted topic stays deleted
    b1, b2, b3 = (broker.bootstrap for broker in cluster.brokers)
    topic = unique_topic("cluster-changes")
    create_topic(b1, topic, partitions=2, config={"retention.ms": "3600000"})
    resource = ConfigResource(ResourceType.TOPIC, topic)
    admins = {b: AdminClient({"bootstrap.servers": b}) for b in (b1, b2, b3)}  # held: a collected client cancels
    altered = admins[b2].incremental_alter_configs([ConfigResource(
        ResourceType.TOPIC, topic, incremental_configs=[
            ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET)])])
    altered[resource].result(timeout=CLIENT_TIMEOUT_S)
    for bootstrap in (b1, b2, b3):
        described = admins[bootstrap].describe_configs([resource])[resource].result(timeout=CLIENT_TIMEOUT_S)
        assert described["retention.ms"].value == "7200000"
    grown = admins[b3].create_partitions([NewPartitions(topic, 5)])
    grown[topic].result(timeout=CLIENT_TIMEOUT_S)
    assert [len(_metadata(b, topic).topics[topic].partitions) for b in (b1, b2, b3)] == [5, 5, 5]
    deleted = admins[b1].delete_topics([topic], operation_timeout=30)
    deleted[topic].result(timeout=CLIENT_TIMEOUT_S)
    for bootstrap in (b1, b2, b3):
        assert _metadata(bootstrap, topic).topics[topic].error is not None


UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_REQUEST = 42


def test_corrupt_batches_and_unknown_topics_get_error_codes(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(2, {"auto.create.topics.enable": "false"})
    topic = unique_topic("cluster-raw")
    create_topic(cluster.brokers[0].bootstrap, topic, partitions=1)
    good = record_batch([b"one", b"two"], timestamp_ms=int(time.time() * 1000))
    corrupt = bytearray(good)
    corrupt[BATCH_CRC.start] ^= 0xFF
    broker = cluster.brokers[1]
    with WireConnection(broker.host, broker.port) as conn:
        answers = []
        for n, (name, records) in enumerate([(topic, bytes(corrupt)), (unique_topic("nowhere"), good),
                                             (topic, good)]):
            _, results = parse_produce_response(
                conn.request(API_PRODUCE, 8, n, produce_request_body(name, 0, records)), 8)
            answers.append((results[0].error_code, results[0].base_offset))
    assert answers == [(ERROR_CORRUPT_MESSAGE, -1), (UNKNOWN_TOPIC_OR_PARTITION, -1), (ERROR_NONE, 0)]
    assert [r.value for r in consume_all(cluster.brokers[0].bootstrap, topic, 1, 2)] == [b"one", b"two"]


def test_transactional_producers_are_refused_for_now(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(1)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": unique_topic("txn")})
    with pytest.raises(KafkaException) as refused:
        producer.init_transactions(5)  # librdkafka retries the refusal until this timeout, then reports it
    assert refused.value.args[0].code() == INVALID_REQUEST


def test_cluster_status_shows_brokers_and_objects(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(2)
    topic = unique_topic("cluster-status")
    create_topic(cluster.brokers[0].bootstrap, topic, partitions=3)
    produce_all(cluster.brokers[1].bootstrap, topic, keyed_records(30, 3))
    assert cluster.broker(2).stop() == 0
    done = subprocess.run([*oncestream_command(), "cluster", "status", "--metadata-store", cluster.metadata_store],
                          capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("cluster ")
    assert "brokers: 1 live of 2 registered" in lines
    assert any(line.startswith("  node 1 ") and " live " in line for line in lines)
    assert any(line.startswith("  node 2 ") and " gone " in line for line in lines)
    assert "topics: 1, partitions: 3, batches: " in done.stdout
    live_objects = next(line for line in lines if line.startswith("objects live: "))
    assert not live_objects.startswith("objects live: 0 "), live_objects


def test_a_consumer_group_spans_brokers_and_resumes_from_its_commits(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(3, {"group.initial.rebalance.delay.ms": "0"})
    topic = unique_topic("cluster-group")
    partitions = 6
    create_topic(cluster.brokers[0].bootstrap, topic, partitions=partitions)
    first = keyed_records(120, 6, tag="a")
    produce_all(cluster.brokers[1].bootstrap, topic, first)
    group = unique_topic("cluster-group-id")
    consumed = _group_read(cluster.brokers[2].bootstrap, topic, group, len(first))
    assert_exactly_once_in_key_order(first, consumed)
    second = keyed_records(60, 6, tag="b")
    produce_all(cluster.brokers[0].bootstrap, topic, second)
    # Another member, bootstrapped from another broker, finds the same coordinator and resumes.
    assert_exactly_once_in_key_order(second, _group_read(cluster.brokers[1].bootstrap, topic, group, len(second)))


def _group_read(bootstrap: str, topic: str, group: str, count: int) -> list[ConsumedRecord]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "session.timeout.ms": 10000})
    consumed: list[ConsumedRecord] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + WAIT_S
        while len(consumed) < count:
            assert time.monotonic() < deadline, f"group {group} read {len(consumed)} of {count}"
            for msg in consumer.consume(num_messages=500, timeout=0.2):
                if msg.error() is not None:
                    raise KafkaException(msg.error())
                consumed.append(consumed_record(msg))
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return consumed


def test_objects_of_a_deleted_topic_are_collected(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(1, {"diskless.object.delete.grace.ms": "0", "diskless.gc.interval.ms": "200"})
    store = cluster.object_store()
    topic = unique_topic("cluster-gc")
    create_topic(cluster.bootstrap, topic, partitions=2)
    produce_all(cluster.bootstrap, topic, keyed_records(40, 4))
    assert store.list(""), "the produce uploaded no object"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.delete_topics([topic], operation_timeout=30)[topic].result(timeout=CLIENT_TIMEOUT_S)
    deadline = time.monotonic() + WAIT_S
    while (left := store.list("")):
        assert time.monotonic() < deadline, f"objects of the deleted topic still in the store: {left[:3]}"
        time.sleep(0.2)


def test_other_clients_produce_and_consume_through_different_brokers(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(2)
    first, second = (broker.bootstrap for broker in cluster.brokers)
    topic = unique_topic("cluster-clients")
    create_topic(first, topic, partitions=3)
    sent: list[SentRecord] = []
    for name in ("kcat", "kafka-python", "aiokafka"):
        records = keyed_records(60, 3, tag=f"{name}-", seed=len(sent))
        PRODUCERS[name](first, topic, records)
        sent += records
    for name in ("kcat", "kafka-python", "aiokafka", "confluent"):
        assert_exactly_once_in_key_order(sent, CONSUMERS[name](second, topic, 3))
