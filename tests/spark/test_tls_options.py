"""The Spark connector over mutual TLS and over SASL_SSL: ``kafka.security.protocol``,
``kafka.ssl.*`` and ``kafka.sasl.*`` reach
every client it creates (source planning and tasks, the sink's task and holding producers, the
driver's journal and two-phase-commit checks), as with Spark's Kafka connector (issue 14, point 5).

The broker's only other listener is PLAINTEXT, used by the test itself to check the result; the
connector is given the mutual-TLS listener alone, so any client that ignored the options would
fail its handshake and the query with it.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.spark.conftest import TWO_PC_CONFIG
from tests.spark.spark_support import committed_values
from tests.support.brokers import BrokerProcess
from tests.support.certs import Pki
from tests.support.sasl import MECHANISM_USERS, PLAIN_USERS, add_scram_users, plain_jaas

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def mtls_broker(tmp_path_factory, pki: Pki):
    data_dir = tmp_path_factory.mktemp("mtls-broker") / "data"
    data_dir.mkdir(parents=True)
    add_scram_users(data_dir, {"scram-alice": MECHANISM_USERS["SCRAM-SHA-512"][1]})
    broker = BrokerProcess(data_dir=data_dir, config={
        **TWO_PC_CONFIG,
        "listeners": "PLAINTEXT://127.0.0.1:0,MTLS://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,MTLS:SSL,SASL_SSL:SASL_SSL",
        **pki.broker_stores(),
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": plain_jaas(PLAIN_USERS),
    })
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def test_exactly_once_write_and_read_over_mutual_tls(spark, mtls_broker: BrokerProcess, pki: Pki) -> None:
    plain = mtls_broker.listener_bootstrap("PLAINTEXT")
    topic = f"tls-spark-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": plain})  # kept alive until its futures resolve
    for future in admin.create_topics([NewTopic(topic, 2, 1)]).values():
        future.result(30)
    tls_options = {
        "kafka.bootstrap.servers": mtls_broker.listener_bootstrap("MTLS"),
        "kafka.security.protocol": "SSL",
        "kafka.ssl.ca.location": str(pki.ca),
        "kafka.ssl.certificate.location": str(pki.alice.cert),
        "kafka.ssl.key.location": str(pki.alice.key),
    }
    values = [f"v-{i:03d}".encode() for i in range(40)]
    df = spark.createDataFrame([(v,) for v in values], "value binary").repartition(2)
    df.write.format("oncestream").options(**tls_options).option("topic", topic).mode("append").save()
    assert sorted(v for v in committed_values(plain, topic)) == sorted(values)

    rows = spark.read.format("oncestream").options(**tls_options).option("subscribe", topic).load().collect()
    assert sorted(bytes(r.value) for r in rows) == sorted(values)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_exactly_once_write_and_read_over_sasl_ssl(spark, mtls_broker: BrokerProcess, pki: Pki,
                                                   mechanism: str) -> None:
    """TLS, then SASL, for every client the connector creates (an unauthenticated one would be
    closed by the broker's pre-authentication gate and fail the query)."""
    plain = mtls_broker.listener_bootstrap("PLAINTEXT")
    topic = f"sasl-spark-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": plain})
    for future in admin.create_topics([NewTopic(topic, 2, 1)]).values():
        future.result(30)
    user, password = MECHANISM_USERS[mechanism]
    options = {
        "kafka.bootstrap.servers": mtls_broker.listener_bootstrap("SASL_SSL"),
        "kafka.security.protocol": "SASL_SSL",
        "kafka.ssl.ca.location": str(pki.ca),
        "kafka.sasl.mechanism": mechanism,
        "kafka.sasl.username": user,
        "kafka.sasl.password": password,
    }
    values = [f"s-{i:03d}".encode() for i in range(30)]
    df = spark.createDataFrame([(v,) for v in values], "value binary").repartition(2)
    df.write.format("oncestream").options(**options).option("topic", topic).mode("append").save()
    assert sorted(v for v in committed_values(plain, topic)) == sorted(values)

    rows = spark.read.format("oncestream").options(**options).option("subscribe", topic).load().collect()
    assert sorted(bytes(r.value) for r in rows) == sorted(values)
