"""The streaming source: offsets in Spark's checkpoint in Spark's JSON shape, rate limit, new
partitions (new topics by pattern, CreatePartitions on a subscribed topic) picked up, deleted partitions
handled per failOnDataLoss (as Spark's Kafka source)."""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

pytestmark = pytest.mark.spark


def _create(bootstrap: str, *names: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(n, 2, 1) for n in names]).values():
        future.result(30)


def _delete(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics([name]).values():
        future.result(30)


def _produce(bootstrap: str, topic: str, count: int, tag: str = "") -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, value=f"{tag or topic}-{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0


def _stream(spark, bootstrap: str, **options: str):
    reader = (spark.readStream.format("oncestream").option("kafka.bootstrap.servers", bootstrap)
              .option("startingOffsets", "earliest"))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_rate_limit_and_spark_offset_json_in_checkpoint(spark, eos_broker, tmp_path):
    """maxOffsetsPerTrigger caps every micro-batch; Spark's offset log holds {"topic":{"0":n}}."""
    topic = f"rl-{uuid.uuid4().hex[:8]}"
    _create(eos_broker.bootstrap, topic)
    _produce(eos_broker.bootstrap, topic, 100)
    name = f"rl_{uuid.uuid4().hex[:8]}"
    query = (_stream(spark, eos_broker.bootstrap, subscribe=topic, maxOffsetsPerTrigger="30")
             .select("value").writeStream.format("memory").queryName(name)
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    query.awaitTermination(300)
    assert query.exception() is None
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 100
    assert max(sizes) <= 30
    assert len(sizes) >= 4
    assert spark.sql(f"SELECT count(*) AS n FROM {name}").collect()[0].n == 100
    last = max((p for p in (tmp_path / "cp" / "offsets").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    offsets = json.loads(last.read_text().splitlines()[-1])
    assert offsets == {topic: {"0": 50, "1": 50}}


def test_new_topic_matching_pattern_is_read_from_earliest(spark, eos_broker):
    """subscribePattern: partitions that appear while the query runs are read from offset 0."""
    prefix = f"pat{uuid.uuid4().hex[:6]}"
    first, second = f"{prefix}-a", f"{prefix}-b"
    _create(eos_broker.bootstrap, first)
    _produce(eos_broker.bootstrap, first, 10)
    name = f"pat_{uuid.uuid4().hex[:8]}"
    query = (_stream(spark, eos_broker.bootstrap, subscribePattern=f"{prefix}-.*").select("topic", "value")
             .writeStream.format("memory").queryName(name).trigger(processingTime="200 milliseconds").start())
    try:
        query.processAllAvailable()
        _create(eos_broker.bootstrap, second)
        _produce(eos_broker.bootstrap, second, 6)
        query.processAllAvailable()
        rows = spark.sql(f"SELECT topic, count(*) AS n FROM {name} GROUP BY topic").collect()
    finally:
        query.stop()
    assert {r.topic: r.n for r in rows} == {first: 10, second: 6}


def test_partitions_added_to_a_subscribed_topic_are_read_from_earliest(spark, eos_broker):
    """CreatePartitions while the query runs: the new partitions join at offset 0 (none of their
    records is skipped, as in Spark's Kafka source) and the old ones go on where they were."""
    topic = f"grow-{uuid.uuid4().hex[:8]}"
    _create(eos_broker.bootstrap, topic)
    _produce(eos_broker.bootstrap, topic, 10)
    name = f"grow_{uuid.uuid4().hex[:8]}"
    query = (_stream(spark, eos_broker.bootstrap, subscribe=topic).select("partition", "value")
             .writeStream.format("memory").queryName(name).trigger(processingTime="200 milliseconds").start())
    try:
        query.processAllAvailable()
        admin = AdminClient({"bootstrap.servers": eos_broker.bootstrap})
        admin.create_partitions([NewPartitions(topic, 4)])[topic].result(30)
        producer = Producer({"bootstrap.servers": eos_broker.bootstrap, "linger.ms": 5})
        for i in range(12):
            producer.produce(topic, value=f"new-{i}".encode(), partition=i % 4)
        assert producer.flush(30) == 0
        query.processAllAvailable()
        rows = spark.sql(f"SELECT partition, count(*) AS n, count(DISTINCT value) AS d FROM {name} "
                         "GROUP BY partition").collect()
    finally:
        query.stop()
    assert {r.partition: (r.n, r.d) for r in rows} == {0: (8, 8), 1: (8, 8), 2: (3, 3), 3: (3, 3)}


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_deleted_topic_is_data_loss(spark, eos_broker, fail_on_data_loss):
    """A subscribed topic that is deleted fails the query (failOnDataLoss=true, the default) or is
    dropped while the other topics go on (false)."""
    keep, doomed = f"keep-{uuid.uuid4().hex[:8]}", f"doomed-{uuid.uuid4().hex[:8]}"
    _create(eos_broker.bootstrap, keep, doomed)
    _produce(eos_broker.bootstrap, keep, 4)
    _produce(eos_broker.bootstrap, doomed, 4)
    name = f"dl_{uuid.uuid4().hex[:8]}"
    query = (_stream(spark, eos_broker.bootstrap, subscribe=f"{keep},{doomed}",
                     failOnDataLoss=str(fail_on_data_loss).lower()).select("topic", "value")
             .writeStream.format("memory").queryName(name).trigger(processingTime="200 milliseconds").start())
    try:
        query.processAllAvailable()
        _delete(eos_broker.bootstrap, doomed)
        _produce(eos_broker.bootstrap, keep, 4, tag="after")
        if fail_on_data_loss:
            with pytest.raises(Exception, match="were deleted"):
                query.processAllAvailable()
            return
        query.processAllAvailable()
        rows = spark.sql(f"SELECT topic, count(*) AS n FROM {name} GROUP BY topic").collect()
    finally:
        query.stop()
    assert {r.topic: r.n for r in rows} == {keep: 8, doomed: 4}
