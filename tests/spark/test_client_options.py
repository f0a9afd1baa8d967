"""``kafka.*`` options reach every client the connector creates, as with Spark's Kafka connector.

The broker of this module advertises a recording proxy (tests/support/delay_proxy.py), so every
connection the connector opens, bootstrap or not, shows up there with its request header. While a
Spark action runs nothing else talks to this broker, so the requests recorded during it are exactly
the connector's: source tasks and driver planning for reads, task producers and the driver's
holding producers, journal and ListTransactions clients for writes.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from oncestream.protocol import record_batch as rb
from oncestream.protocol.records import NewRecord, encode_batch
from oncestream.spark.errors import OptionError
from oncestream.spark.log_client import LogClient
from oncestream.spark.options import sink_options, source_options
from tests.spark.conftest import TWO_PC_CONFIG
from tests.spark.spark_support import committed_values, read_committed
from tests.support.brokers import BrokerProcess
from tests.support.delay_proxy import DelayProxy, RequestInfo

pytestmark = pytest.mark.spark

PRODUCE, FETCH, LIST_OFFSETS, METADATA, INIT_PRODUCER_ID, END_TXN, LIST_TRANSACTIONS = 0, 1, 2, 3, 22, 26, 66
GZIP = 1


@pytest.fixture(scope="module")
def proxied(tmp_path_factory):
    """(bootstrap, proxy): a two-phase-commit broker whose every connection goes through a proxy
    that records each request's api key and client id."""
    holder: dict[str, BrokerProcess] = {}
    proxy = DelayProxy(lambda: (holder["broker"].host, holder["broker"].port)).start()
    broker = BrokerProcess(data_dir=tmp_path_factory.mktemp("proxied-broker") / "data",
                           config={**TWO_PC_CONFIG, "advertised.listeners": f"PLAINTEXT://{proxy.bootstrap}"})
    holder["broker"] = broker
    broker.start()
    try:
        yield proxy.bootstrap, proxy
    finally:
        proxy.close()
        broker.stop()


def _topic(bootstrap: str, partitions: int = 1) -> str:
    name = f"opt-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(30)
    return name


def _recorded_during(proxy: DelayProxy, action) -> list[RequestInfo]:
    """The requests the proxy saw while ``action`` ran."""
    before = len(proxy.requests)
    action()
    return list(proxy.requests[before:])


def _one_batch_per_record(bootstrap: str, topic: str, count: int) -> None:
    """``count`` records of 200 bytes in partition 0, each in its own batch."""
    with LogClient(bootstrap, client_id="test-setup") as client:
        for i in range(count):
            now_ms = int(time.time() * 1000)
            client.produce((topic, 0), encode_batch([NewRecord(f"{i:04d}".encode() * 50)], now_ms=now_ms))


def test_read_clients_use_kafka_client_id_and_fetch_size(spark, proxied):
    """A batch read with kafka.client.id and kafka.max.partition.fetch.bytes: every request of
    the driver's planning and of the tasks carries the client id, and the tasks' fetches are
    bounded by the partition fetch size (each returns at most that many bytes of whole batches,
    so reading the partition takes at least its size divided by the bound)."""
    bootstrap, proxy = proxied
    topic = _topic(bootstrap)
    _one_batch_per_record(bootstrap, topic, 200)
    with LogClient(bootstrap, client_id="test-check") as client:
        log_bytes = len(client.fetch((topic, 0), 0, max_bytes=1 << 24, read_committed=False).records)
    bound = 2048
    client_id = f"reader-{uuid.uuid4().hex[:8]}"

    def read(**extra: str) -> list:
        reader = (spark.read.format("oncestream").option("kafka.bootstrap.servers", bootstrap)
                  .option("subscribe", topic).option("kafka.client.id", client_id))
        for key, value in extra.items():
            reader = reader.option(key, value)
        return reader.load().collect()

    rows: list = []
    bounded = _recorded_during(proxy, lambda: rows.extend(read(**{"kafka.max.partition.fetch.bytes": str(bound)})))
    assert len(rows) == 200
    assert {r.client_id for r in bounded} == {client_id}
    assert {METADATA, LIST_OFFSETS, FETCH} <= {r.api_key for r in bounded}
    bounded_fetches = sum(1 for r in bounded if r.api_key == FETCH)
    assert bounded_fetches >= log_bytes // bound, (bounded_fetches, log_bytes)

    unbounded = _recorded_during(proxy, read)
    unbounded_fetches = sum(1 for r in unbounded if r.api_key == FETCH)
    assert unbounded_fetches < bounded_fetches, (unbounded_fetches, bounded_fetches)


def test_batch_write_task_producers_compress_and_every_client_uses_client_id(spark, proxied):
    """A batch write with kafka.compression.type=gzip and kafka.client.id: every data batch in
    the output log is gzip-compressed (the task producers got the setting), and every request of
    the write (tasks' producers, the driver's two-phase-commit check, its ListTransactions and
    holding producers that commit) carries the client id."""
    bootstrap, proxy = proxied
    topic = _topic(bootstrap, partitions=2)
    client_id = f"writer-{uuid.uuid4().hex[:8]}"
    values = [f"value-{i:03d}".encode() * 20 for i in range(60)]
    df = spark.createDataFrame([(v,) for v in values], "value binary").repartition(2)

    def write() -> None:
        (df.write.format("oncestream").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
         .option("kafka.compression.type", "gzip").option("kafka.client.id", client_id).mode("append").save())

    requests = _recorded_during(proxy, write)
    assert {r.client_id for r in requests} == {client_id}
    assert {PRODUCE, INIT_PRODUCER_ID, END_TXN, LIST_TRANSACTIONS} <= {r.api_key for r in requests}

    data_batches = []
    with LogClient(bootstrap, client_id="test-check") as client:
        for partition in (0, 1):
            records = client.fetch((topic, partition), 0, max_bytes=1 << 24, read_committed=False).records
            data_batches += [h for h, _ in rb.iter_batches(memoryview(records)) if not h.is_control]
    assert data_batches, [h.compression for h in data_batches]
    assert all(h.compression == GZIP for h in data_batches), [h.compression for h in data_batches]
    assert sorted(v for v in committed_values(bootstrap, topic)) == sorted(values)


def test_streaming_driver_journal_and_leftover_clients_use_client_id(spark, proxied, tmp_path):
    """A streaming query: every request of its source (kafka.client.id A) and of its exactly-once
    sink (kafka.client.id B), including the driver's commit journal and ListTransactions clients,
    carries the query's client id; nothing uses a built-in name."""
    bootstrap, proxy = proxied
    topic_in, topic_out = _topic(bootstrap), _topic(bootstrap)
    _one_batch_per_record(bootstrap, topic_in, 30)
    source_id, sink_id = f"sreader-{uuid.uuid4().hex[:8]}", f"swriter-{uuid.uuid4().hex[:8]}"

    def run() -> None:
        source = (spark.readStream.format("oncestream").option("kafka.bootstrap.servers", bootstrap)
                  .option("subscribe", topic_in).option("startingOffsets", "earliest")
                  .option("kafka.client.id", source_id).load())
        query = (source.select("value").writeStream.format("oncestream")
                 .option("kafka.bootstrap.servers", bootstrap).option("topic", topic_out)
                 .option("kafka.client.id", sink_id).option("checkpointLocation", str(tmp_path / "cp"))
                 .trigger(availableNow=True).start())
        query.awaitTermination(300)
        assert query.exception() is None

    requests = _recorded_during(proxy, run)
    assert {r.client_id for r in requests} == {source_id, sink_id}
    sink_keys = {r.api_key for r in requests if r.client_id == sink_id}
    assert {PRODUCE, END_TXN, LIST_TRANSACTIONS, METADATA} <= sink_keys, sink_keys
    assert len(read_committed(bootstrap, topic_out)) == 30


def test_bad_or_owned_kafka_options_fail_the_query_on_the_driver(spark, proxied):
    """A malformed client value and a property the connector owns fail the read and the write
    with a message naming the option, before any task runs."""
    bootstrap, _proxy = proxied
    topic = _topic(bootstrap)
    base = spark.read.format("oncestream").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
    with pytest.raises(Exception, match=r"invalid value for fetch\.max\.bytes"):
        base.option("kafka.fetch.max.bytes", "lots").load().collect()
    with pytest.raises(Exception, match=r"kafka\.auto\.offset\.reset is not supported.*startingOffsets"):
        base.option("kafka.auto.offset.reset", "earliest").load().collect()
    df = spark.createDataFrame([(b"v",)], "value binary")
    with pytest.raises(Exception, match=r"kafka\.enable\.idempotence cannot be changed"):
        (df.write.format("oncestream").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
         .option("kafka.enable.idempotence", "false").mode("append").save())


@pytest.mark.parametrize(("options", "message"), [
    ({"kafka.auto.offset.reset": "latest"}, "startingOffsets"),
    ({"kafka.enable.auto.commit": "true"}, "checkpoint"),
    ({"kafka.key.deserializer": "x"}, "bytes"),
    ({"kafka.value.deserializer": "x"}, "bytes"),
    ({"kafka.interceptor.classes": "x"}, "interceptors"),
    ({"kafka.fetch.wait.max.ms": "soon"}, "fetch.wait.max.ms"),
    ({"kafka.security.protocol": "TLS"}, "plaintext, ssl, sasl_plaintext, sasl_ssl"),  # SSL and SASL_* are supported
])
def test_source_refuses_owned_and_malformed_client_options(options, message):
    """The source refuses what Spark's Kafka source refuses, and values the client cannot parse."""
    with pytest.raises(OptionError, match=message):
        source_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t", **options}, streaming=False)


@pytest.mark.parametrize(("options", "message"), [
    ({"kafka.key.serializer": "x"}, "bytes"),
    ({"kafka.value.serializer": "x"}, "bytes"),
    ({"kafka.acks": "1"}, "acks=all"),
    ({"kafka.request.required.acks": "0"}, "acks=all"),
    ({"kafka.enable.idempotence": "false"}, "idempotent"),
    ({"kafka.transaction.two.phase.commit.enable": "false"}, "two-phase commit"),
    ({"kafka.linger.ms": "soon"}, "linger.ms"),
])
def test_sink_refuses_owned_and_malformed_client_options(options, message):
    """The sink refuses Spark's forbidden serializers, changes to what exactly-once needs (also
    through an alias), and values the client cannot parse."""
    with pytest.raises(OptionError, match=message):
        sink_options({"kafka.bootstrap.servers": "h:1", "topic": "t", **options})


def test_client_settings_are_parsed_once_and_carried_to_the_clients():
    """Allowed kafka.* options: the owned values spelled as the sink uses them pass; the protocol
    client's settings (source and sink) come from the options, aliases included."""
    sink = sink_options({"kafka.bootstrap.servers": "h:1", "topic": "t", "kafka.acks": "all",
                         "kafka.enable.idempotence": "true", "kafka.client.id": "w",
                         "kafka.request.timeout.ms": "7000", "kafka.compression.type": "gzip"})
    assert sink.producer_config["compression.type"] == "gzip"
    assert (sink.client.client_id, sink.client.request_timeout_ms) == ("w", 7000)
    at_least_once = sink_options({"kafka.bootstrap.servers": "h:1", "topic": "t", "exactlyOnce": "false",
                                  "kafka.transaction.two.phase.commit.enable": "false"})
    assert not at_least_once.exactly_once
    source = source_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "kafka.client.id": "r",
                             "kafka.max.partition.fetch.bytes": "1024", "kafka.fetch.max.wait.ms": "50",
                             "kafka.fetch.min.bytes": "10", "kafka.group.id": "allowed-as-in-spark"},
                            streaming=True)
    assert (source.client.client_id, source.client.partition_fetch_max_bytes, source.client.fetch_max_wait_ms,
            source.client.fetch_min_bytes) == ("r", 1024, 50, 10)
    default = source_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t"}, streaming=True)
    assert default.client.client_id is None
    assert default.client.partition_fetch_max_bytes == 4 * 1024 * 1024
