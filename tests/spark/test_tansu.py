"""The connector against another Kafka-protocol broker: Tansu (no KIP-939). The source reads it
(read_uncommitted: Tansu hands aborted records to read_committed readers anyway); the sink works
with exactlyOnce=false and refuses the default exactly-once mode with a clear error."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.brokers import TansuProcess
from tests.support.narrow import message_value

pytestmark = [pytest.mark.spark, pytest.mark.interop]

UNCOMMITTED = {"kafka.isolation.level": "read_uncommitted"}


@pytest.fixture(scope="module")
def tansu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TansuProcess]:
    broker = TansuProcess(log_dir=tmp_path_factory.mktemp("tansu"))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def _topic(bootstrap: str) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, 2, 1)]).values():
        future.result(30)
    return name


def _produce(bootstrap: str, topic: str, count: int) -> list[bytes]:
    """One record per batch: Tansu 0.6's ListOffsets(LATEST) answers the last batch's base offset
    + 1, which is the end offset only when every batch holds one record (librdkafka's
    get_watermark_offsets shows the same number)."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0,
                         "batch.num.messages": 1, "max.in.flight.requests.per.connection": 1})
    values = [f"tansu-{i}".encode() for i in range(count)]
    for i, value in enumerate(values):
        producer.produce(topic, value=value, key=f"k{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    return values


def _consume_all(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
    out: list[bytes] = []
    idle = 0
    while len(out) < count or idle < 4:  # a few quiet polls after the expected count: no extras
        msg = consumer.poll(0.5)
        if msg is None or msg.error():
            idle += 1
            if idle > 60:
                break
            continue
        idle = 0
        out.append(message_value(msg))
    consumer.close()
    return out


def test_source_reads_tansu(spark, tansu):
    """Batch and streaming reads of a Tansu topic return every record once, with the columns."""
    topic = _topic(tansu.bootstrap)
    values = _produce(tansu.bootstrap, topic, 80)
    df = (spark.read.format("oncestream").option("kafka.bootstrap.servers", tansu.bootstrap)
          .option("subscribe", topic).options(**UNCOMMITTED).load())
    rows = df.collect()
    assert Counter(bytes(r.value) for r in rows) == Counter(values)
    assert {r.partition for r in rows} == {0, 1}
    assert all(r.topic == topic for r in rows)
    stream = (spark.readStream.format("oncestream").option("kafka.bootstrap.servers", tansu.bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest").options(**UNCOMMITTED)
              .option("maxOffsetsPerTrigger", "30").load())
    query = (stream.select("value").writeStream.format("memory").queryName(f"tansu_{topic[2:]}")
             .trigger(availableNow=True).start())
    query.awaitTermination(300)
    assert query.exception() is None
    streamed = spark.sql(f"SELECT value FROM tansu_{topic[2:]}").collect()
    assert Counter(bytes(r.value) for r in streamed) == Counter(values)
    assert len([p for p in query.recentProgress if p["numInputRows"] > 0]) >= 3


def test_at_least_once_sink_writes_to_tansu(spark, tansu, tmp_path):
    """exactlyOnce=false: a streaming copy Tansu -> Tansu delivers every record."""
    source, target = _topic(tansu.bootstrap), _topic(tansu.bootstrap)
    values = _produce(tansu.bootstrap, source, 60)
    stream = (spark.readStream.format("oncestream").option("kafka.bootstrap.servers", tansu.bootstrap)
              .option("subscribe", source).option("startingOffsets", "earliest").options(**UNCOMMITTED).load())
    query = (stream.select("key", "value").writeStream.format("oncestream")
             .option("kafka.bootstrap.servers", tansu.bootstrap).option("topic", target)
             .option("exactlyOnce", "false").option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(availableNow=True).start())
    query.awaitTermination(300)
    assert query.exception() is None
    assert Counter(_consume_all(tansu.bootstrap, target, len(values))) == Counter(values)


def test_exactly_once_sink_refuses_a_broker_without_kip939(spark, tansu):
    """The default exactly-once sink needs InitProducerId v6; Tansu lacks it: a clear error."""
    target = _topic(tansu.bootstrap)
    df = spark.createDataFrame([(b"v",)], "value binary")
    with pytest.raises(Exception, match="exactlyOnce=false"):
        (df.write.format("oncestream").option("kafka.bootstrap.servers", tansu.bootstrap)
         .option("topic", target).mode("append").save())
