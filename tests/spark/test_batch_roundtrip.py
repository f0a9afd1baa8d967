"""Batch read and write through format("oncestream"): Spark's Kafka connector columns and options,
read_committed by default, atomic writes."""

from __future__ import annotations

import datetime
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from oncestream.spark.log_client import LogClient
from tests.spark.spark_support import committed_values
from tests.support.narrow import present

pytestmark = pytest.mark.spark


def _topic(bootstrap: str, partitions: int = 2) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # keep it alive until the futures finish
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(30)
    return name


def _produce_with_aborted(bootstrap: str, topic: str) -> list[bytes]:
    """Committed records c0..c29 around an aborted transaction; returns the committed values."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"gen-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(20):
        headers: list[tuple[str, str | bytes | None]] | None = (
            [("trace", f"h{i}".encode()), ("empty", None)] if i % 5 == 0 else None)
        producer.produce(topic, value=f"c{i}".encode(), key=f"k{i}".encode(), partition=i % 2,
                         headers=headers, timestamp=1_700_000_000_000 + i)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(7):
        producer.produce(topic, value=f"aborted{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0  # the aborted records must reach the log, not be purged
    producer.abort_transaction(30)
    producer.begin_transaction()
    for i in range(20, 30):
        producer.produce(topic, value=f"c{i}".encode(), key=None, partition=i % 2)
    producer.commit_transaction(30)
    return [f"c{i}".encode() for i in range(30)]


def _read(spark, bootstrap: str, **options: str):
    reader = spark.read.format("oncestream").option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_batch_read_has_kafka_columns_and_skips_aborted_records(spark, eos_broker):
    """read_committed (KIP-98): aborted records and markers never show; columns match Spark's."""
    topic = _topic(eos_broker.bootstrap)
    committed = _produce_with_aborted(eos_broker.bootstrap, topic)
    df = _read(spark, eos_broker.bootstrap, subscribe=topic, includeHeaders="true")
    assert [f.name for f in df.schema.fields] == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
    rows = df.collect()
    assert sorted(bytes(r.value) for r in rows) == sorted(committed)
    first = next(r for r in rows if r.value == b"c0")
    assert (first.key, first.topic, first.partition, first.offset, first.timestampType) == (b"k0", topic, 0, 0, 0)
    assert first.timestamp.replace(tzinfo=None) == datetime.datetime.fromtimestamp(1_700_000_000).replace(
        tzinfo=None)
    assert [(h.key, h.value) for h in first.headers] == [("trace", b"h0"), ("empty", None)]
    assert next(r for r in rows if r.value == b"c1").headers is None
    # Offsets inside a partition are increasing and skip the aborted batch and the markers.
    p0 = sorted(r.offset for r in rows if r.partition == 0)
    assert len(p0) == 15
    assert p0 == sorted(set(p0))
    assert p0[-1] > 15


def test_read_uncommitted_returns_aborted_records(spark, eos_broker):
    """kafka.isolation.level=read_uncommitted is passed to the fetch, as with Spark's connector."""
    topic = _topic(eos_broker.bootstrap)
    committed = _produce_with_aborted(eos_broker.bootstrap, topic)
    rows = _read(spark, eos_broker.bootstrap, subscribe=topic,
                 **{"kafka.isolation.level": "read_uncommitted"}).collect()
    assert len(rows) == len(committed) + 7


def test_offset_ranges_assign_and_pattern(spark, eos_broker):
    """startingOffsets/endingOffsets JSON per partition, assign, subscribePattern."""
    topic = _topic(eos_broker.bootstrap)
    _produce_with_aborted(eos_broker.bootstrap, topic)
    ranged = _read(spark, eos_broker.bootstrap, subscribe=topic,
                   startingOffsets=f'{{"{topic}":{{"0":2,"1":-2}}}}',
                   endingOffsets=f'{{"{topic}":{{"0":5,"1":3}}}}').collect()
    assert sorted((r.partition, r.offset) for r in ranged) == [(0, 2), (0, 3), (0, 4), (1, 0), (1, 1), (1, 2)]
    assigned = _read(spark, eos_broker.bootstrap, assign=f'{{"{topic}":[1]}}').collect()
    assert {r.partition for r in assigned} == {1}
    assert len(assigned) == 15
    prefix = topic[:6]
    matched = _read(spark, eos_broker.bootstrap, subscribePattern=f"{prefix}.*").collect()
    assert {r.topic for r in matched} == {topic}
    split = _read(spark, eos_broker.bootstrap, subscribe=topic, maxRecordsPerPartition="4")
    assert split.rdd.getNumPartitions() >= 8
    assert split.count() == 30


def test_batch_write_round_trip_is_atomic_and_complete(spark, eos_broker):
    """df.write.format("oncestream"): rows land once with key, value, headers and explicit
    partitions; nothing is visible before the driver commits; no transaction is left open."""
    source = _topic(eos_broker.bootstrap)
    target = _topic(eos_broker.bootstrap, partitions=3)
    committed = _produce_with_aborted(eos_broker.bootstrap, source)
    df = _read(spark, eos_broker.bootstrap, subscribe=source, includeHeaders="true").selectExpr(
        "key", "value", "headers", "CAST(offset % 3 AS INT) AS partition")
    (df.repartition(3).write.format("oncestream").option("kafka.bootstrap.servers", eos_broker.bootstrap)
     .option("topic", target).mode("append").save())
    out = _read(spark, eos_broker.bootstrap, subscribe=target, includeHeaders="true").collect()
    assert sorted(bytes(r.value) for r in out) == sorted(committed)
    assert {bytes(r.value): r.key for r in out}[b"c0"] == b"k0"
    with_headers = next(r for r in out if r.value == b"c5")
    assert [(h.key, h.value) for h in with_headers.headers] == [("trace", b"h5"), ("empty", None)]
    assert sorted(v for v in committed_values(eos_broker.bootstrap, target)) == sorted(committed)
    with LogClient(eos_broker.bootstrap) as client:
        open_txns = [t for t in present(client.list_transactions(), "transactions") if t[2] == "Ongoing"]
    assert open_txns == []


def test_topic_column_routes_rows(spark, eos_broker):
    """Without the topic option each row's topic column picks its topic (Spark's rule)."""
    a, b = _topic(eos_broker.bootstrap), _topic(eos_broker.bootstrap)
    rows = [(a, b"to-a"), (b, b"to-b"), (a, b"to-a-2")]
    df = spark.createDataFrame(rows, "topic string, value binary")
    df.write.format("oncestream").option("kafka.bootstrap.servers", eos_broker.bootstrap).mode("append").save()
    assert sorted(v for v in committed_values(eos_broker.bootstrap, a)) == [b"to-a", b"to-a-2"]
    assert [v for v in committed_values(eos_broker.bootstrap, b)] == [b"to-b"]


def test_option_errors_are_clear(spark, eos_broker):
    """Missing or conflicting options fail with the connector's messages."""
    with pytest.raises(Exception, match=r"kafka\.bootstrap\.servers is required"):
        spark.read.format("oncestream").option("subscribe", "x").load().collect()
    with pytest.raises(Exception, match="exactly one of the options subscribe"):
        _read(spark, eos_broker.bootstrap, subscribe="x", assign='{"x":[0]}').collect()
    df = spark.createDataFrame([(b"v",)], "value binary")
    with pytest.raises(Exception, match="no topic"):
        df.write.format("oncestream").option("kafka.bootstrap.servers", eos_broker.bootstrap).mode("append").save()
