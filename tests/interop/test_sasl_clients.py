"""SASL_PLAINTEXT with real clients (issue 14 point 3): librdkafka (confluent-kafka),
kafka-python and our client authenticate with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, then run a
committed and an aborted transaction that a read_committed consumer of the same client checks."""

from __future__ import annotations

import time
import uuid

import pytest

from tests.support.clients import CLIENT_TIMEOUT_S, unique_topic
from tests.support.sasl import ALL_MECHANISMS, SASL_SUITES_EXTRA, kafka_python_conf, librdkafka_conf, sasl_broker_of_kind

pytestmark = pytest.mark.interop

COMMITTED = [f"c{i}".encode() for i in range(5)]
ABORTED = [f"a{i}".encode() for i in range(3)]


@pytest.fixture(scope="module")
def sasl_broker(module_our_broker_factory):
    """Our single broker, or a cluster (its brokers log in to each other with PLAIN as admin),
    shared with test_sasl_negative under the ``cluster`` kind."""
    return sasl_broker_of_kind(module_our_broker_factory, SASL_SUITES_EXTRA)


def _confluent_like(module, bootstrap: str, topic: str, sec: dict[str, str]) -> list[bytes]:
    """Transactions and a read_committed read with confluent-kafka or oncestream.client."""
    producer = module.Producer({"bootstrap.servers": bootstrap, "transactional.id": f"t-{uuid.uuid4().hex[:8]}",
                                **sec})
    producer.init_transactions(CLIENT_TIMEOUT_S)
    for values, commit in ((ABORTED, False), (COMMITTED, True)):
        producer.begin_transaction()
        for v in values:
            producer.produce(topic, v, partition=0)
        if commit:
            producer.commit_transaction(CLIENT_TIMEOUT_S)
        else:
            producer.abort_transaction(CLIENT_TIMEOUT_S)
    consumer = module.Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                                "auto.offset.reset": "earliest", "isolation.level": "read_committed", **sec})
    got: list[bytes] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(got) < len(COMMITTED) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.append(msg.value())
    finally:
        consumer.close()
    return got


def _kafka_python(bootstrap: str, topic: str, sec: dict[str, str]) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"kp-{uuid.uuid4().hex[:8]}", **sec)
    try:
        producer.init_transactions()
        for values, commit in ((ABORTED, False), (COMMITTED, True)):
            producer.begin_transaction()
            for v in values:
                producer.send(topic, v, partition=0).get(timeout=CLIENT_TIMEOUT_S)
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
    finally:
        producer.close(timeout=10)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest",
                             isolation_level="read_committed", enable_auto_commit=False, **sec)
    got: list[bytes] = []
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(got) < len(COMMITTED) and time.monotonic() < deadline:
            for messages in consumer.poll(timeout_ms=200).values():
                got.extend(m.value for m in messages)
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("mechanism", ALL_MECHANISMS)
@pytest.mark.parametrize("client", ["confluent", "kafka-python", "oncestream"])
def test_transaction_round_trip_over_sasl(sasl_broker, client, mechanism):
    topic = unique_topic(f"sasl-{client}-{mechanism.lower()}")
    if client == "confluent":
        import confluent_kafka

        got = _confluent_like(confluent_kafka, sasl_broker.bootstrap, topic, librdkafka_conf(mechanism))
    elif client == "oncestream":
        import oncestream.client

        got = _confluent_like(oncestream.client, sasl_broker.bootstrap, topic, librdkafka_conf(mechanism))
    else:
        got = _kafka_python(sasl_broker.bootstrap, topic, kafka_python_conf(mechanism))
    assert got == COMMITTED


def test_spark_log_client_authenticates_with_kafka_sasl_options(sasl_broker):
    """The Spark connector's protocol client takes the kafka.sasl.* options (without the prefix,
    as the connector hands them over) and refuses a wrong password with a SASL error."""
    from oncestream.spark.errors import BrokerRequestError
    from oncestream.spark.log_client import ClientSettings, LogClient

    topic = unique_topic("sasl-spark")
    for mechanism in ALL_MECHANISMS:
        settings = ClientSettings.from_config(librdkafka_conf(mechanism))
        client = LogClient(sasl_broker.bootstrap, settings=settings)
        try:
            client.create_topic(topic, 2) if mechanism == "PLAIN" else None
            assert client.metadata([topic]) == {topic: [0, 1]}
        finally:
            client.close()
    bad = LogClient(sasl_broker.bootstrap, settings=ClientSettings.from_config(
        librdkafka_conf("SCRAM-SHA-512", password="wrong")))
    try:
        with pytest.raises(BrokerRequestError, match="SASL authentication failed"):
            bad.metadata([topic])
    finally:
        bad.close()


def test_cli_tools_take_security_settings_from_command_config(sasl_broker, tmp_path):
    """``oncestream topics|produce|consume --command-config FILE`` with librdkafka's properties."""
    import subprocess
    import sys
    from pathlib import Path

    cli = str(Path(sys.executable).parent / "oncestream")
    config = tmp_path / "client.properties"
    config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                      "sasl.username=scram-alice\nsasl.password=scram-secret\n")
    common = ["--bootstrap-server", sasl_broker.bootstrap, "--command-config", str(config)]
    topic = unique_topic("sasl-cli")

    def run(*args: str, stdin: bytes = b"") -> str:
        result = subprocess.run([cli, *args, *common], input=stdin, capture_output=True, timeout=60)
        assert result.returncode == 0, result.stderr.decode()
        return result.stdout.decode()

    run("topics", "create", topic, "--partitions", "1")
    assert topic in run("topics", "list").split()
    run("produce", topic, stdin=b"one\ntwo\n")
    assert run("consume", topic, "--from-beginning", "--max-messages", "2").split() == ["one", "two"]
    refused = subprocess.run([cli, "topics", "list", "--bootstrap-server", sasl_broker.bootstrap],
                             capture_output=True, timeout=60)
    assert refused.returncode != 0  # no SASL settings: the broker closes the connection
