"""Query failover (issue 12 point 6): two nodes, one persistent query. SIGKILL the node running it
(its Spark JVM and workers with it); after the session timeout the survivor's next generation of
the query-assignment group gives it the query, which resumes from the shared checkpoint; the
output, read_committed by librdkafka, holds every input record exactly once (the sink's
transactional ids fence the dead writer). Then SIGTERM the survivor: exit status 0 and no process
left in its session (Spark JVM, Python workers).
"""

from __future__ import annotations

import json
import struct
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.spark.spark_support import read_committed
from tests.support.sql_servers import LAZY_SPARK, SqlServerProcess, wait_until

pytestmark = [pytest.mark.chaos, pytest.mark.spark]

RECORDS = 200
BROKER_CONFIG = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000"}
NODE_CONFIG = {**LAZY_SPARK, "ksql.query.assignment.session.timeout.ms": "4000",
               "ksql.query.assignment.heartbeat.interval.ms": "500"}
EARLIEST = {"ksql.streams.auto.offset.reset": "earliest"}


def _produce(bootstrap: str, topic: str, ids: range) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in ids:
        producer.produce(topic, json.dumps({"V": f"v{i}"}).encode(), struct.pack(">i", i))
    assert producer.flush(60) == 0


def _values(bootstrap: str, topic: str) -> list[str]:
    return [json.loads(value)["V"] for _key, value in read_committed(bootstrap, topic) if value is not None]


def _owner(nodes: list[SqlServerProcess], query_id: str) -> SqlServerProcess | None:
    for node in nodes:
        if not node.alive:
            continue
        description = node.ok(f"EXPLAIN {query_id};")[0]["queryDescription"]
        running = [host for host, state in description["ksqlHostQueryStatus"].items() if state == "RUNNING"]
        if running:
            by_host = {n.url.split("://", 1)[1]: n for n in nodes if n.url is not None}
            return by_host.get(running[0])
    return None


def test_query_fails_over_exactly_once(broker_factory, tmp_path: Path) -> None:
    broker = broker_factory(BROKER_CONFIG)
    service_id = f"failover_{uuid.uuid4().hex[:6]}_"
    config = {**NODE_CONFIG, "checkpoint.root": str(tmp_path / "shared-checkpoints")}
    nodes = [SqlServerProcess(bootstrap=broker.bootstrap, service_id=service_id, state_dir=tmp_path / n,
                              config=config, name=n) for n in ("a", "b")]
    for node in nodes:
        node.start()
    try:
        a = nodes[0]
        a.ok("CREATE STREAM SRC (ID INT KEY, V STRING) WITH (KAFKA_TOPIC='src', PARTITIONS=1, VALUE_FORMAT='JSON');")
        status = a.ok("CREATE STREAM DST WITH (KAFKA_TOPIC='dst', PARTITIONS=1) AS SELECT ID, V FROM SRC EMIT CHANGES;",
                      EARLIEST)[0]
        query_id = status["commandStatus"]["queryId"]
        assert query_id, status
        _produce(broker.bootstrap, "src", range(RECORDS // 2))
        owner = wait_until(lambda: _owner(nodes, query_id), "the query running somewhere", timeout_s=240)
        wait_until(lambda: len(_values(broker.bootstrap, "dst")) >= RECORDS // 4, "first output", timeout_s=240)
        survivor = nodes[1] if owner is nodes[0] else nodes[0]
        owner.kill()
        _produce(broker.bootstrap, "src", range(RECORDS // 2, RECORDS))
        wait_until(lambda: _owner([survivor], query_id) is survivor, "the survivor running the query", timeout_s=240)
        expected = sorted(f"v{i}" for i in range(RECORDS))
        wait_until(lambda: len(_values(broker.bootstrap, "dst")) >= RECORDS, "all output", timeout_s=300)
        assert sorted(_values(broker.bootstrap, "dst")) == expected  # every input exactly once
        shows = survivor.ok("SHOW QUERIES;")[0]["queries"]
        assert [q["state"] for q in shows if q["id"] == query_id] == ["RUNNING"], shows

        assert survivor.terminate() == 0, survivor.log_tail()
        assert survivor.session_processes() == [], "processes left behind after SIGTERM"
    finally:
        for node in nodes:
            node.kill()
