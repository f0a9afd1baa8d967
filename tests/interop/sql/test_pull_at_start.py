"""A restarted node answers pull queries from its KIP-892 stores before its Spark session is up
(issue 24 point 5).

A node materializes a TABLE over a topic (Spark not needed: ``ksql.spark.start=lazy`` for the
first run), answers a scan and a key lookup, and is SIGKILLed. Started again on the same state
directory with Spark started at once (the default, ``eager``), it answers the same pull queries
with the same rows, each answer reporting its store's lag per partition (and /clusterStatus the
stores' lags, as ksqlDB does), while its log shows
Spark still starting: the "Spark session ready" line is not there yet when the answers arrived
(read after them). ``ksql.query.pull.max.allowed.offset.lag`` below any possible lag gets
ksqlDB's routing error. Timings are in bench/pull_query.py ``--mode restart``, not here.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Producer

from tests.support.clients import CLIENT_TIMEOUT_S, create_topic, unique_topic
from tests.support.cluster_kind import BrokerUnderTest
from tests.support.groups import GROUP_BROKER_CONFIG
from tests.support.sql_servers import LAZY_SPARK, SqlServerProcess, wait_until

pytestmark = [pytest.mark.interop, pytest.mark.spark]

PARTITIONS = 2
LAG_HEADER = "x-oncestream-offset-lag"
SPARK_STARTING = "Spark session starting"
SPARK_UP = "Spark session ready"


def _pull(node: SqlServerProcess, sql: str, properties: dict[str, Any] | None = None) -> httpx.Response:
    assert node.url is not None
    return httpx.post(f"{node.url}/query-stream", json={"sql": sql, "properties": properties or {}},
                      headers={"Accept": "application/json"}, timeout=60)


def _answer(node: SqlServerProcess, sql: str) -> tuple[list[list[Any]], dict[int, int]] | None:
    """(rows, lag per partition) once the node answers 200, else None (store not open yet)."""
    response = _pull(node, sql)
    if response.status_code != 200:
        return None
    lag = {int(p): int(n) for p, n in (pair.split("=") for pair in response.headers[LAG_HEADER].split(", "))}
    return sorted(row for row in response.json()[1:] if isinstance(row, list)), lag


@pytest.fixture(scope="module")
def broker(module_our_broker_factory: Callable[..., BrokerUnderTest]) -> BrokerUnderTest:
    """The broker under test (our single broker or a cluster) with the group suites' config: the
    node's query-assignment group joins without Kafka's 3 s initial delay."""
    return module_our_broker_factory(GROUP_BROKER_CONFIG)


def test_restarted_node_answers_pull_queries_from_its_stores_before_spark(broker: BrokerUnderTest,
                                                                          tmp_path: Path) -> None:
    topic = unique_topic("pull-start")
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    for i in range(10):
        producer.produce(topic, json.dumps({"NAME": f"n{i}", "AMOUNT": i * 10}).encode(), key=f"k{i}".encode(),
                         partition=i % PARTITIONS)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0

    node = SqlServerProcess(bootstrap=broker.bootstrap, service_id=f"pullstart_{uuid.uuid4().hex[:6]}_",
                            state_dir=tmp_path / "node", config=LAZY_SPARK, name="node")
    scan, lookup = "SELECT * FROM ACCOUNTS;", "SELECT NAME, AMOUNT FROM ACCOUNTS WHERE ID = 'k3';"
    try:
        node.start()
        node.ok(f"CREATE TABLE ACCOUNTS (ID STRING PRIMARY KEY, NAME STRING, AMOUNT BIGINT) "
                f"WITH (KAFKA_TOPIC='{topic}', VALUE_FORMAT='JSON');")
        expected = sorted([f"k{i}", f"n{i}", i * 10] for i in range(10))
        before = wait_until(lambda: (a := _answer(node, scan)) is not None and a[0] == expected and a,
                            "the table materialized", timeout_s=120, nodes=[node])
        assert before[1] == {0: 0, 1: 0}
        assert _answer(node, lookup) == ([["n3", 30]], {0: 0, 1: 0})
        node.kill()

        node.start(config={})   # Spark starts at once, beside the node
        after = wait_until(lambda: _answer(node, scan), "a pull query answered after the restart",
                           timeout_s=120, nodes=[node])
        answered_lookup = _answer(node, lookup)
        too_strict = _pull(node, lookup, {"ksql.query.pull.max.allowed.offset.lag": -1})
        cluster = node.get("/clusterStatus").json()["clusterStatus"]
        log = node.log_tail(1 << 20)   # read after the answers: Spark was not up when they came
        assert SPARK_STARTING in log, log[-4000:]
        assert SPARK_UP not in log, log[-4000:]

        assert after == (expected, {0: 0, 1: 0})
        # ksqlDB's own report of the stores' lags, also served before Spark.
        assert node.url is not None
        lags = cluster[node.url.split("://", 1)[1]]["hostStoreLags"]["stateStoreLags"]
        assert {p: v["offsetLag"] for p, v in lags["ACCOUNTS"]["lagByPartition"].items()} == {"0": 0, "1": 0}
        assert answered_lookup == ([["n3", 30]], {0: 0, 1: 0})
        assert too_strict.status_code == 500, too_strict.text
        assert too_strict.json()["message"].startswith(
            "Unable to execute pull query. [Partition 0 failed to find valid host. Hosts scanned: [")
        assert "Host excluded because lag 0 exceeds maximum allowed lag -1." in too_strict.json()["message"]
    finally:
        node.kill()
