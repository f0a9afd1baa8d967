"""The broker's ``/metrics`` (metrics.listen, docs/metrics.md) scraped with prometheus-client's
parser while librdkafka produces, consumes and runs transactions against a real broker process.

What each test proves:
- bytes in per topic move by exactly the bytes of the batches librdkafka sent (the sum of the
  partition's segment file sizes: the log stores the batches as sent) and messages in by exactly
  the records; a consumer's fetches move bytes out by at least those bytes and the group's
  committed offset and lag show its commit; Produce and Fetch move the request counters and every
  stage histogram by the same count; the Produce responses' partition errors count as NONE; the
  log's end offset and the listener's connections show;
- a client over its produce byte-rate quota is throttled, and Produce's ThrottleTimeMs histogram
  shows it (the KIP-219 mute);
- the transaction gauges show a librdkafka transaction as open and a KIP-939 two-phase-commit
  transaction (our client: librdkafka 2.16.1 cannot prepare) as prepared, hold the LSO lag, and
  drop back to zero once both commit.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from oncestream.client import Admin
from oncestream.client import Producer as OnceProducer
from oncestream.client.admin.admin_quotas import CLIENT_ID, ClientQuotaAlteration, ClientQuotaEntity, ClientQuotaOp
from tests.support.brokers import BrokerProcess
from tests.support.clients import CLIENT_TIMEOUT_S, create_topic, unique_topic
from tests.support.cluster_kind import CLUSTER_METRICS_OF_ONE_PROCESS, not_on_cluster
from tests.support.metrics import METRICS_BROKER_CONFIG, metrics_url_of, scrape, total, value
from tests.support.txn import TXN_BROKER_CONFIG, wait_until

pytestmark = [pytest.mark.interop, not_on_cluster(CLUSTER_METRICS_OF_ONE_PROCESS)]

RECORDS = 40
VALUE_BYTES = 300


@pytest.fixture(scope="module")
def metered(tmp_path_factory):
    config = {**TXN_BROKER_CONFIG, **METRICS_BROKER_CONFIG, "transaction.two.phase.commit.enable": "true",
              # Quota rates over 1 s (two 1 s samples): a short burst is throttled for about a second.
              "quota.window.num": "2", "quota.window.size.seconds": "1"}
    broker = BrokerProcess(data_dir=tmp_path_factory.mktemp("metrics") / "data", config=config)
    broker.start()
    try:
        yield broker, metrics_url_of(broker)
    finally:
        broker.stop()


def _segment_bytes(broker: BrokerProcess, topic: str) -> int:
    partition_dir = Path(broker.data_dir) / "logs" / f"{topic}-0"
    return sum(path.stat().st_size for path in partition_dir.glob("*.log"))


def test_counters_move_by_what_librdkafka_sent_and_read(metered):
    broker, url = metered
    topic = unique_topic("metrics")
    create_topic(broker.bootstrap, topic)
    before = scrape(url)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20, "batch.num.messages": 7,
                         "compression.type": "none"})
    for i in range(RECORDS):
        producer.produce(topic, (b"%04d" % i) * (VALUE_BYTES // 4), partition=0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    sent_bytes = _segment_bytes(broker, topic)
    assert sent_bytes > RECORDS * VALUE_BYTES
    mid = scrape(url)
    assert value(mid, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == RECORDS
    assert value(mid, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic) == sent_bytes
    assert value(mid, "kafka_log_log_logendoffset", topic=topic, partition="0") == RECORDS
    assert value(mid, "kafka_log_log_size", topic=topic, partition="0") == sent_bytes
    produces = total(mid, "kafka_network_requestmetrics_requests_total", request="Produce") - total(
        before, "kafka_network_requestmetrics_requests_total", request="Produce")
    assert produces >= RECORDS // 7  # batch.num.messages: at least this many batches
    for stage in ("totaltimems", "requestqueuetimems", "localtimems", "throttletimems", "responsesendtimems"):
        name = f"kafka_network_requestmetrics_{stage}_count"
        assert value(mid, name, request="Produce") - value(before, name, request="Produce") == produces
    # One partition per Produce request here: one NONE per request.
    assert value(mid, "kafka_network_requestmetrics_errors_total", request="Produce", error="NONE") - value(
        before, "kafka_network_requestmetrics_errors_total", request="Produce", error="NONE") == produces
    assert value(mid, "kafka_server_socket_server_metrics_connection_count", listener="PLAINTEXT") >= 1

    group = unique_topic("metrics-group")
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        got = 0
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while got < RECORDS and time.monotonic() < deadline:
            got += sum(1 for m in consumer.consume(RECORDS, timeout=1.0) if m.error() is None)
        consumer.commit(asynchronous=False)
        after = scrape(url)
    finally:
        consumer.close()
    assert got == RECORDS
    assert value(after, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic) >= sent_bytes
    assert total(after, "kafka_network_requestmetrics_totaltimems_count", request="Fetch") > total(
        before, "kafka_network_requestmetrics_totaltimems_count", request="Fetch")
    assert value(after, "kafka_consumergroup_current_offset", consumergroup=group, topic=topic, partition="0") == RECORDS
    assert value(after, "kafka_consumergroup_lag", consumergroup=group, topic=topic, partition="0") == 0
    assert value(after, "oncestream_group_state", consumergroup=group, protocol="classic", state="stable") == 1


def _txn_gauges(url: str) -> tuple[float, float]:
    samples = scrape(url)
    return value(samples, "oncestream_transactions_open"), value(samples, "oncestream_transactions_prepared")


def test_transaction_gauges_show_open_and_prepared_until_commit(metered):
    broker, url = metered
    topic = unique_topic("metrics-txn")
    create_topic(broker.bootstrap, topic)
    assert _txn_gauges(url) == (0, 0)
    plain = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": unique_topic("metrics-open")})
    plain.init_transactions(CLIENT_TIMEOUT_S)
    plain.begin_transaction()
    plain.produce(topic, b"open", partition=0)
    assert plain.flush(CLIENT_TIMEOUT_S) == 0
    opened = scrape(url)
    assert value(opened, "oncestream_transactions_open") == 1
    assert value(opened, "oncestream_transactions_prepared") == 0
    assert value(opened, "oncestream_log_laststableoffsetlag", topic=topic, partition="0") == 1
    assert value(opened, "oncestream_transactions_oldest_open_age_seconds") >= 0

    two_phase = OnceProducer({"bootstrap.servers": broker.bootstrap, "transactional.id": unique_topic("metrics-2pc"),
                              "transaction.two.phase.commit.enable": True})
    try:
        two_phase.init_transactions(CLIENT_TIMEOUT_S)
        two_phase.begin_transaction()
        two_phase.produce(topic, b"prepared", partition=0)
        two_phase.prepare_transaction()
        assert _txn_gauges(url) == (1, 1)
        plain.commit_transaction(CLIENT_TIMEOUT_S)
        two_phase.commit_transaction(CLIENT_TIMEOUT_S)
    finally:
        two_phase.close()
    # The commits answer once the markers are written; the states read back at once.
    wait_until(lambda: _txn_gauges(url) == (0, 0), CLIENT_TIMEOUT_S, "both transactions completed")
    done = scrape(url)
    assert value(done, "oncestream_log_laststableoffsetlag", topic=topic, partition="0") == 0
    assert value(done, "oncestream_transactions_oldest_open_age_seconds") == 0
    assert value(done, "oncestream_transactions_hanging") == 0


def test_throttle_time_shows_a_produce_quota(metered):
    broker, url = metered
    topic = unique_topic("metrics-quota")
    create_topic(broker.bootstrap, topic)
    quota_bytes_per_s = 20_000.0
    admin = Admin({"bootstrap.servers": broker.bootstrap})
    try:
        entity = ClientQuotaEntity.of({CLIENT_ID: "metrics-throttled"})
        assert admin.alter_client_quotas([ClientQuotaAlteration(
            entity, (ClientQuotaOp("producer_byte_rate", quota_bytes_per_s),))]) == {entity: None}
    finally:
        admin.close()
    before = scrape(url)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "client.id": "metrics-throttled"})
    for i in range(4):  # 4 requests of 10 KB: twice the quota's second
        for j in range(10):
            producer.produce(topic, b"%04d" % (i * 10 + j) * 256, partition=0)
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
    after = scrape(url)
    name = "kafka_network_requestmetrics_throttletimems"
    assert value(after, f"{name}_sum", request="Produce") > value(before, f"{name}_sum", request="Produce")
    # Throttled requests land above the 0-ms bucket.
    over_zero = value(after, f"{name}_count", request="Produce") - value(after, f"{name}_bucket", request="Produce", le="0.1")
    assert over_zero > 0
