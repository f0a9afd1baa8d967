"""Client security settings on the SQL server (issue 14 point 5): ``--config security.protocol=...
sasl.*`` reach every Kafka client a node creates. Against a SASL_PLAINTEXT-only broker, two nodes
write and replay the command topic (transactions, read_committed), create topics, and form the
query-assignment group; nothing works without the settings. The broker is the SASL suites' (our
single broker, or under the ``cluster`` kind the cluster test_sasl_clients and test_sasl_negative
share): the node's names carry its service id."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.cluster_kind import BrokerUnderTest
from tests.support.sasl import SASL_SUITES_EXTRA, librdkafka_conf, sasl_broker_of_kind
from tests.support.sql_servers import LAZY_SPARK, SqlServerProcess, wait_until

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def sasl_broker(module_our_broker_factory: Callable[..., BrokerUnderTest]) -> BrokerUnderTest:
    return sasl_broker_of_kind(module_our_broker_factory, SASL_SUITES_EXTRA)


def test_nodes_speak_sasl_to_the_broker(sasl_broker: BrokerUnderTest, tmp_path: Path) -> None:
    broker = sasl_broker
    nodes: list[SqlServerProcess] = []
    try:
        service_id = f"sasl_{uuid.uuid4().hex[:6]}_"
        topic = f"{service_id}secure"
        config = {**LAZY_SPARK, **librdkafka_conf("SCRAM-SHA-256")}
        nodes = [SqlServerProcess(bootstrap=broker.bootstrap, service_id=service_id, state_dir=tmp_path / n,
                                  config=config, name=n) for n in ("a", "b")]
        for node in nodes:
            node.start()
        status = nodes[0].ok(f"CREATE STREAM SECURE (ID INT KEY, V STRING) WITH (KAFKA_TOPIC='{topic}', PARTITIONS=2, "
                             "VALUE_FORMAT='JSON');")[0]
        described = nodes[1].ok("DESCRIBE SECURE EXTENDED;",
                                command_sequence_number=status["commandSequenceNumber"])[0]["sourceDescription"]
        assert described["partitions"] == 2
        assert topic in [t["name"] for t in nodes[1].ok("SHOW TOPICS;")[0]["topics"]]
        hosts = sorted(n.url.split("://", 1)[1] for n in nodes if n.url)
        wait_until(lambda: sorted(nodes[1].get("/clusterStatus").json()["clusterStatus"]) == hosts,
                   "both nodes in the assignment group", nodes=nodes)
        assert all(n.get("/healthcheck").json()["isHealthy"] for n in nodes)

        # Without the settings the node cannot even create or read its command topic.
        plain = SqlServerProcess(bootstrap=broker.bootstrap, service_id=service_id, state_dir=tmp_path / "plain",
                                 config=LAZY_SPARK, name="plain")
        nodes.append(plain)
        plain.start(wait=False)
        assert plain.process is not None
        assert plain.process.wait(120) == 1
        assert "cannot start the node" in plain.log_tail()
        assert "Traceback" not in plain.log_tail()
    finally:
        for node in nodes:
            node.kill()
