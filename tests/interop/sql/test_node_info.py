"""A node's ``/info`` and ``/healthcheck`` as ksqlDB's clients read them: ``kafkaClusterId`` is the
Kafka cluster's real id (Metadata v2+ ``cluster_id``, the one librdkafka reports for the same
broker; ksqlDB asks DescribeCluster), and a healthy node's check is ksqlDB's HealthCheckResponse
(``isHealthy``, the three details, ``serverState`` READY). Runs against Tansu too
(``ONCESTREAM_TEST_BROKER=tansu``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient as ConfluentAdmin

from tests.support.brokers import ManagedBroker
from tests.support.sql_servers import LAZY_SPARK, SqlServerProcess

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def node(broker: ManagedBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SqlServerProcess]:
    process = SqlServerProcess(bootstrap=broker.bootstrap, service_id=f"info_{uuid.uuid4().hex[:6]}_",
                               state_dir=tmp_path_factory.mktemp("sql-info"), config=LAZY_SPARK)
    process.start()
    try:
        yield process
    finally:
        process.stop()


def test_info_reports_the_kafka_cluster_id(broker: ManagedBroker, node: SqlServerProcess) -> None:
    info = node.get("/info").json()["KsqlServerInfo"]
    expected = ConfluentAdmin({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=30).cluster_id
    assert expected, info
    assert info["kafkaClusterId"] == expected, info
    assert (info["ksqlServiceId"], info["serverStatus"]) == (node.service_id, "RUNNING")


def test_healthy_node_healthcheck_is_ksqldbs_response(node: SqlServerProcess) -> None:
    response = node.get("/healthcheck")
    assert response.status_code == 200
    assert response.json() == {"isHealthy": True, "serverState": "READY",
                               "details": {"metastore": {"isHealthy": True}, "kafka": {"isHealthy": True},
                                           "commandRunner": {"isHealthy": True}}}
