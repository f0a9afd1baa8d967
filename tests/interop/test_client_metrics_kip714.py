"""KIP-714 client metrics with librdkafka (confluent-kafka 2.16.1, whose ``enable.metrics.push``
defaults to true) against a real broker process: a ClientMetrics subscription set with
IncrementalAlterConfigs (our Admin: confluent-kafka's ResourceType has no CLIENT_METRICS) makes
its producer and consumer push, the pushed values appear on the broker's ``/metrics`` (parsed by
prometheus-client) with the client's labels within two push intervals, and a subscription change
(another metric prefix) reaches the clients: their next pushes carry the new set. The
subscriptions survive a broker restart and ListConfigResources lists them.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer

from oncestream.cli import main as cli_main
from oncestream.client import Admin
from tests.support.brokers import BrokerProcess
from tests.support.clients import CLIENT_TIMEOUT_S, create_topic, unique_topic
from tests.support.cluster_kind import CLUSTER_METRICS_OF_ONE_PROCESS, not_on_cluster
from tests.support.metrics import METRICS_BROKER_CONFIG, Samples, metrics_url_of, scrape

pytestmark = [pytest.mark.interop, not_on_cluster(CLUSTER_METRICS_OF_ONE_PROCESS)]

INTERVAL_MS = 1000
# The acceptance bound: two push intervals, plus one second for scrapes and a loaded machine.
ARRIVAL_BOUND_S = 2 * INTERVAL_MS / 1000 + 1.0
CHANGE_BOUND_S = 15.0  # a refused push, a new GetTelemetrySubscriptions, then a push: bounded, not timed

LATENCY = "org_apache_kafka_{role}_node_request_latency_avg"
CONNECTIONS = "org_apache_kafka_{role}_connection_creation_rate"


@pytest.fixture
def broker(tmp_path):
    broker = BrokerProcess(data_dir=tmp_path / "data", config=dict(METRICS_BROKER_CONFIG))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def _samples_of(samples: Samples, name: str, client_id: str) -> list[dict[str, str]]:
    return [dict(labels) for (n, labels), _v in samples.items() if n == name and ("client_id", client_id) in labels]


def _wait_for(url: str, name: str, client_id: str, bound_s: float, pump) -> list[dict[str, str]]:
    deadline = time.monotonic() + bound_s
    while True:
        found = _samples_of(scrape(url), name, client_id)
        if found or time.monotonic() > deadline:
            return found
        pump()


def test_librdkafka_pushes_its_subscribed_metrics_and_follows_a_subscription_change(broker):
    url = metrics_url_of(broker)
    topic = unique_topic("kip714")
    create_topic(broker.bootstrap, topic)
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.alter_client_metrics("kip714-latency", {
            "metrics": "org.apache.kafka.producer.node.request.latency.,org.apache.kafka.consumer.node.request.latency.",
            "interval.ms": str(INTERVAL_MS), "match": "client_id=kip714-.*"})
        assert admin.list_client_metrics() == ["kip714-latency"]
        assert admin.describe_client_metrics("kip714-latency")["interval.ms"] == str(INTERVAL_MS)

    producer = Producer({"bootstrap.servers": broker.bootstrap, "client.id": "kip714-producer"})
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "client.id": "kip714-consumer",
                         "group.id": unique_topic("kip714-group"), "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])

        def pump() -> None:
            producer.produce(topic, b"v")
            producer.poll(0)
            consumer.poll(0.2)

        pump()
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
        for role, client_id in (("producer", "kip714-producer"), ("consumer", "kip714-consumer")):
            found = _wait_for(url, LATENCY.format(role=role), client_id, ARRIVAL_BOUND_S, pump)
            assert found, f"no {role} metrics on /metrics within two push intervals"
            labels = found[0]
            assert labels["client_software_name"] == "confluent-kafka-python"
            assert labels["client_software_version"].startswith("2.16.1")
            assert labels["client_instance_id"]
            assert "node_id" in labels  # the data point's own attribute
            # Not subscribed yet: the other prefix is absent.
            assert not _samples_of(scrape(url), CONNECTIONS.format(role=role), client_id)

        with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
            admin.alter_client_metrics("kip714-latency", {
                "metrics": "org.apache.kafka.producer.connection.creation.,org.apache.kafka.consumer.connection.creation."})
        for role, client_id in (("producer", "kip714-producer"), ("consumer", "kip714-consumer")):
            found = _wait_for(url, CONNECTIONS.format(role=role), client_id, CHANGE_BOUND_S, pump)
            assert found, f"the {role} never pushed the new subscription's metrics"
    finally:
        consumer.close()
        producer.flush(CLIENT_TIMEOUT_S)

    broker.restart()
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        assert admin.list_client_metrics() == ["kip714-latency"]
        assert admin.describe_client_metrics("kip714-latency")["metrics"] == \
            "org.apache.kafka.producer.connection.creation.,org.apache.kafka.consumer.connection.creation."


def test_cli_sets_describes_lists_and_deletes_a_subscription(broker, capsys):
    def cli(*args: str) -> tuple[int, str]:
        code = cli_main(["client-metrics", *args, "-b", broker.bootstrap])
        return code, capsys.readouterr().out

    assert cli("alter", "--name", "producers", "--metrics", "org.apache.kafka.producer.", "--interval", "10000",
               "--match", "client_software_name=confluent-kafka-python") == \
        (0, "Altered client metrics config for producers.\n")
    assert cli("list") == (0, "producers\n")
    assert cli("describe", "--name", "producers") == (0, (
        "Client metrics configs for producers are interval.ms=10000, "
        "match=client_software_name=confluent-kafka-python, metrics=org.apache.kafka.producer.\n"))
    code = cli_main(["client-metrics", "alter", "--name", "producers", "--interval", "50", "-b", broker.bootstrap])
    assert code == 1
    assert "INVALID_CONFIG" in capsys.readouterr().err
    assert cli("delete", "--name", "producers") == (0, "Deleted client metrics config for producers.\n")
    assert cli("list") == (0, "")
