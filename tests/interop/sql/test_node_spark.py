"""A node with Spark: INSERT INTO ... VALUES and a push query (``/query-stream``, LIMIT) through
the node; then a persistent query that fails (issue 12 point 8) is shown as ERROR with its error
in SHOW QUERIES, DESCRIBE EXTENDED and EXPLAIN, and does not take the server down; SIGTERM ends
the process with status 0 and no child left.

The failure is a real one: the exactly-once sink needs KIP-939 two-phase commit, and this broker
runs without ``transaction.two.phase.commit.enable``, so the query's first write fails in Spark.
"""

from __future__ import annotations

import json
import struct
import uuid
from pathlib import Path

import httpx
import pytest
from confluent_kafka import Producer

from tests.support.brokers import NO_INITIAL_REBALANCE_DELAY
from tests.support.sql_servers import LAZY_SPARK, SqlServerProcess, wait_until

pytestmark = [pytest.mark.interop, pytest.mark.spark]

MODULE_BROKER_CONFIG = NO_INITIAL_REBALANCE_DELAY  # read by conftest's broker fixture


def test_failed_query_shows_error_and_node_survives(broker, tmp_path: Path) -> None:
    service_id = f"failing_{uuid.uuid4().hex[:6]}_"
    src, dst = f"src_{uuid.uuid4().hex[:6]}", f"dst_{uuid.uuid4().hex[:6]}"
    node = SqlServerProcess(bootstrap=broker.bootstrap, service_id=service_id, state_dir=tmp_path / "node",
                            config=LAZY_SPARK)
    node.start()
    try:
        node.ok(f"CREATE STREAM SRC (ID INT KEY, V STRING) WITH (KAFKA_TOPIC='{src}', PARTITIONS=1, VALUE_FORMAT='JSON');")
        status = node.ok(f"CREATE STREAM DST WITH (KAFKA_TOPIC='{dst}') AS SELECT ID, V FROM SRC EMIT CHANGES;",
                         {"ksql.streams.auto.offset.reset": "earliest"})[0]
        query_id = status["commandStatus"]["queryId"]
        node.ok("INSERT INTO SRC (ID, V) VALUES (1, 'x');")
        with httpx.stream("POST", f"{node.url}/query-stream", timeout=240,
                          json={"sql": "SELECT ID, V FROM SRC EMIT CHANGES LIMIT 1;",
                                "properties": {"auto.offset.reset": "earliest"}}) as response:
            lines = [json.loads(line) for line in response.iter_lines() if line.strip()]
        assert lines[0]["columnNames"] == ["ID", "V"], lines
        assert lines[1:] == [[1, "x"]], lines
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        producer.produce(src, json.dumps({"V": "y"}).encode(), struct.pack(">i", 2))
        assert producer.flush(30) == 0

        def state() -> str | None:
            queries = node.ok("SHOW QUERIES;")[0]["queries"]
            found = [q["state"] for q in queries if q["id"] == query_id]
            return found[0] if found and found[0] == "ERROR" else None

        wait_until(state, "the query shown as ERROR", timeout_s=240, nodes=[node])
        description = node.ok("DESCRIBE DST EXTENDED;")[0]["sourceDescription"]
        assert [q["state"] for q in description["writeQueries"]] == ["ERROR"]
        # The runtime's error text (what Spark reported) is shown with the query id.
        error_stats = description["errorStats"]
        assert error_stats.startswith(f"{query_id}: "), error_stats
        assert len(error_stats) > len(query_id) + 10, error_stats
        explained = node.ok(f"EXPLAIN {query_id};")[0]["queryDescription"]
        assert list(explained["ksqlHostQueryStatus"].values()) == ["ERROR"]
        assert explained["state"] == "ERROR"
        assert explained["queryErrors"][0]["errorMessage"] == error_stats.split(": ", 1)[1]
        # The node goes on serving.
        assert node.get("/healthcheck").json()["isHealthy"] is True
        node.ok("CREATE STREAM OTHER (ID INT KEY, V STRING) WITH (KAFKA_TOPIC='other_topic', PARTITIONS=1, "
                "VALUE_FORMAT='JSON');")
        # SIGTERM with Spark running: exit 0, nothing left of the session (JVM, Python workers).
        assert node.terminate() == 0, node.log_tail()
        assert node.session_processes() == []
    finally:
        node.kill()
