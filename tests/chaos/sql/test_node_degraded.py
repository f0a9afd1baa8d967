"""Degraded mode (issue 12 point 5): a corrupt record committed to the command topic (written
transactionally by another client) stops the node's replay there. The node keeps serving reads,
refuses new statements saying why, reports serverStatus ERROR and is unhealthy (/healthcheck still
answers 200, as ksqlDB does, with ``isHealthy`` false); restarted, it stops at the same record
instead of skipping it.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer

from oncestream.sql.server.command_topic import command_topic_name
from tests.support.sql_servers import LAZY_SPARK, SqlServerProcess, wait_until

pytestmark = pytest.mark.chaos


def _write_garbage(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"garbage-{uuid.uuid4().hex}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"\x00\x01 this is not a command \xff", b"stream/`BROKEN`/create", partition=0)
    # A well-formed command after it must not be applied either (never skip, never reorder).
    after = {"statement": "CREATE STREAM AFTER_GARBAGE (ID INT KEY, V STRING) WITH (KAFKA_TOPIC='after_garbage', "
                          "PARTITIONS=1, VALUE_FORMAT='JSON');", "streamsProperties": {}, "originalProperties": {},
             "plan": {}, "version": 1}
    producer.produce(topic, json.dumps(after).encode(), b"stream/`AFTER_GARBAGE`/create", partition=0)
    producer.commit_transaction(30)


def _check_degraded(node: SqlServerProcess) -> None:
    info = node.get("/info").json()["KsqlServerInfo"]
    assert info["serverStatus"] == "ERROR", info
    # ksqlDB's HealthCheckResource answers 200 whatever the checks say; the server is READY
    # (serving), only its command runner is not healthy.
    response = node.get("/healthcheck")
    assert response.status_code == 200, response.text
    health = response.json()
    assert health["isHealthy"] is False, health
    assert health["serverState"] == "READY", health
    assert health["details"]["commandRunner"]["isHealthy"] is False
    assert health["details"]["metastore"]["isHealthy"] is True
    assert health["details"]["kafka"]["isHealthy"] is True
    assert "offset" in health["details"]["commandRunner"]["error"]
    names = [s["name"] for s in node.ok("SHOW STREAMS;")[0]["streams"]]
    assert "BEFORE_GARBAGE" in names
    assert "AFTER_GARBAGE" not in names
    assert node.ok("DESCRIBE BEFORE_GARBAGE;")[0]["sourceDescription"]["name"] == "BEFORE_GARBAGE"
    explained = node.ok("EXPLAIN SELECT ID, V FROM BEFORE_GARBAGE EMIT CHANGES;")[0]["queryDescription"]
    assert explained["sources"] == ["BEFORE_GARBAGE"]
    assert [f["name"] for f in explained["fields"]] == ["ID", "V"]
    refused = node.ksql("CREATE STREAM NEW_ONE (ID INT KEY, V STRING) WITH (KAFKA_TOPIC='new_one', PARTITIONS=1, "
                        "VALUE_FORMAT='JSON');")
    assert refused.status_code == 500, refused.text
    message = refused.json()["message"]
    assert "degraded mode" in message, message
    assert "cannot be read" in message, message


def test_corrupt_command_record_degrades_the_node(broker, tmp_path: Path) -> None:
    service_id = f"degraded_{uuid.uuid4().hex[:6]}_"
    node = SqlServerProcess(bootstrap=broker.bootstrap, service_id=service_id, state_dir=tmp_path / "node",
                            config=LAZY_SPARK)
    node.start()
    try:
        node.ok("CREATE STREAM BEFORE_GARBAGE (ID INT KEY, V STRING) WITH (KAFKA_TOPIC='before_garbage', "
                "PARTITIONS=1, VALUE_FORMAT='JSON');")
        _write_garbage(broker.bootstrap, command_topic_name(service_id))
        wait_until(lambda: node.get("/info").json()["KsqlServerInfo"]["serverStatus"] == "ERROR", "degraded mode")
        _check_degraded(node)
        node.kill()
        node.start()  # replays, stops at the same record
        _check_degraded(node)
    finally:
        node.kill()
