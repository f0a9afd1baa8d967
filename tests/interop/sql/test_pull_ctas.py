"""Pull queries on tables made by ``CREATE TABLE AS SELECT`` (issue 13 part 3), through a real
``oncestream sql-server`` process running the persistent queries on Spark.

The CTAS sink topic is written by the Spark runtime's exactly-once sink (serde's Spark column
form) and materialized by the node from that topic read_committed; pull queries decode it with
serde's Python form. So this checks both halves agree on the key layout, windowed keys included:
an aggregate keyed by ``PAGE``, and a TUMBLING-windowed one queried with ``WINDOWSTART`` bounds.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Producer

from tests.support.clients import CLIENT_TIMEOUT_S, create_topic, unique_topic
from tests.support.metrics import scrape, value
from tests.support.sql_servers import SqlServerProcess, wait_until

pytestmark = [pytest.mark.interop, pytest.mark.spark]

BROKER_CONFIG = {"transaction.two.phase.commit.enable": "true", "group.initial.rebalance.delay.ms": "0",
                 "group.min.session.timeout.ms": "1000"}
EARLIEST = {"ksql.streams.auto.offset.reset": "earliest"}
MINUTE_MS = 60_000


def _pull(node: SqlServerProcess, sql: str) -> list[list[Any]] | None:
    assert node.url is not None
    response = httpx.post(f"{node.url}/query-stream", json={"sql": sql, "properties": {}},
                          headers={"Accept": "application/json"}, timeout=60)
    if response.status_code != 200:
        return None
    body = response.json()
    return sorted(row for row in body[1:] if isinstance(row, list))


def _check_metrics(node: SqlServerProcess) -> None:
    """The node's /metrics (metrics.listen), parsed by prometheus-client: the three statements
    applied from the command topic, both CTAS queries running on this node having read the six
    records each (exactly once: a count that replayed would show more) and caught up with their
    source, and the pull queries above timed."""
    bound = node.ready_info["metrics"]
    url = f"http://{bound['host']}:{bound['port']}/metrics"
    samples = scrape(url)
    assert value(samples, "oncestream_sql_command_topic_offset") >= 2
    assert value(samples, "oncestream_sql_persistent_queries", state="RUNNING") == 2
    assert value(samples, "oncestream_sql_pull_query_latency_seconds_count") >= 5
    rows = {dict(labels)["query_id"]: v for (name, labels), v in samples.items()
            if name == "oncestream_sql_query_processed_rows_total"}
    assert len(rows) == 2, rows
    assert set(rows.values()) == {6}, rows
    behind = [v for (name, _), v in samples.items() if name == "oncestream_sql_query_offsets_behind_latest"]
    assert behind
    assert all(v == 0 for v in behind), behind


def test_pull_queries_on_ctas_tables_plain_and_windowed(broker_factory, tmp_path: Path) -> None:
    broker = broker_factory(BROKER_CONFIG)
    topic = unique_topic("pull-views")
    create_topic(broker.bootstrap, topic, partitions=2)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    # (page, minute): home x3 in minute 0, home x1 in minute 1, about x2 in minute 1.
    for page, minute in [("home", 0), ("home", 0), ("home", 0), ("home", 1), ("about", 1), ("about", 1)]:
        producer.produce(topic, json.dumps({"PAGE": page, "USERID": "u"}).encode(), key=page.encode(),
                         timestamp=minute * MINUTE_MS + 1000)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0

    node = SqlServerProcess(bootstrap=broker.bootstrap, service_id=f"pullctas_{uuid.uuid4().hex[:6]}_",
                            state_dir=tmp_path / "node", config={"metrics.listen": "127.0.0.1:0"}, name="node")
    try:
        node.start()
        node.ok(f"CREATE STREAM VIEWS (PAGE STRING, USERID STRING) WITH (KAFKA_TOPIC='{topic}', VALUE_FORMAT='JSON');")
        node.ok("CREATE TABLE PAGE_COUNTS AS SELECT PAGE, COUNT(*) AS N FROM VIEWS GROUP BY PAGE;", EARLIEST)
        node.ok("CREATE TABLE PAGE_MINUTES AS SELECT PAGE, COUNT(*) AS N FROM VIEWS "
                "WINDOW TUMBLING (SIZE 1 MINUTE) GROUP BY PAGE;", EARLIEST)

        wait_until(lambda: _pull(node, "SELECT * FROM PAGE_COUNTS;") == [["about", 2], ["home", 4]],
                   "PAGE_COUNTS materialized", timeout_s=300)
        assert _pull(node, "SELECT N FROM PAGE_COUNTS WHERE PAGE = 'home';") == [[4]]
        assert _pull(node, "SELECT PAGE FROM PAGE_COUNTS WHERE PAGE IN ('about', 'nope');") == [["about"]]

        wait_until(lambda: _pull(node, "SELECT * FROM PAGE_MINUTES WHERE PAGE = 'home';")
                   == [["home", 0, MINUTE_MS, 3], ["home", MINUTE_MS, 2 * MINUTE_MS, 1]],
                   "PAGE_MINUTES materialized", timeout_s=300)
        assert _pull(node, f"SELECT PAGE, N FROM PAGE_MINUTES WHERE WINDOWSTART = {MINUTE_MS};") == [["about", 2],
                                                                                                    ["home", 1]]
        assert _pull(node, "SELECT N FROM PAGE_MINUTES WHERE PAGE = 'home' AND WINDOWSTART >= 1000;") == [[1]]
        _check_metrics(node)
    finally:
        node.kill()
