"""Query failover (issue 12 point 6): two nodes, one persistent query. SIGKILL the node running it
(its Spark JVM and workers with it); after the session timeout the survivor's next generation of
the query-assignment group gives it the query, which resumes from the shared checkpoint; the
output, read_committed by librdkafka, holds every input record exactly once (the sink's
transactional ids fence the dead writer). Then SIGTERM the survivor: exit status 0 and no process
left in its session (Spark JVM, Python workers).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from tests.spark.spark_support import read_committed
from tests.support.sql_servers import LAZY_SPARK, SqlServerProcess, produce_numbered, wait_until, wait_until_running

pytestmark = [pytest.mark.chaos, pytest.mark.spark]

# The exactly-once sink writes with KIP-939 two-phase commit.
BROKER_CONFIG = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000",
                 "transaction.two.phase.commit.enable": "true"}
NODE_CONFIG = {**LAZY_SPARK, "ksql.query.assignment.session.timeout.ms": "4000",
               "ksql.query.assignment.heartbeat.interval.ms": "500"}
EARLIEST = {"ksql.streams.auto.offset.reset": "earliest"}


def _values(bootstrap: str, topic: str) -> list[str]:
    # end_at_eof: what is visible now (every caller waits until enough is), without a quiet wait
    return [json.loads(value)["V"] for _key, value in read_committed(bootstrap, topic, end_at_eof=True)
            if value is not None]


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


def _move_back(bootstrap: str, nodes: list[SqlServerProcess], restarted: SqlServerProcess, survivor: SqlServerProcess,
               query_id: str, records: int) -> None:
    second = survivor.ok("CREATE STREAM DST2 WITH (KAFKA_TOPIC='dst2', PARTITIONS=1) AS SELECT ID, V FROM SRC "
                         "EMIT CHANGES;", EARLIEST)[0]["commandStatus"]["queryId"]
    wait_until(lambda: _owner([survivor], second) is survivor, "the survivor running both queries", timeout_s=240,
               nodes=[survivor])
    wait_until(lambda: len(_values(bootstrap, "dst2")) >= records // 2, "output of the second query", timeout_s=240,
               nodes=[survivor])
    restarted.start()  # the group now moves one query: stopped on the survivor, then started here

    def balanced() -> bool:
        owners = {q: _owner(nodes, q) for q in (query_id, second)}
        return None not in owners.values() and len(set(owners.values())) == 2

    wait_until(balanced, "one query per node", timeout_s=300, nodes=nodes)
    produce_numbered(bootstrap, "src", range(records, records + records // 2))
    expected = sorted(f"v{i}" for i in range(records + records // 2))
    for topic in ("dst", "dst2"):
        wait_until(lambda topic=topic: len(_values(bootstrap, topic)) >= len(expected), f"all of {topic}",
                   timeout_s=300, nodes=nodes)
        assert sorted(_values(bootstrap, topic)) == expected, topic


@pytest.mark.parametrize(("records", "move_back", "root_form"), [
    (200, False, "url"),
    pytest.param(200, False, "path", marks=pytest.mark.slow),
    pytest.param(3000, True, "url", marks=pytest.mark.slow),
])
def test_query_fails_over_exactly_once(broker_factory, tmp_path: Path, records: int, move_back: bool,
                                       root_form: str) -> None:
    """``root_form``: ``checkpoint.root`` as a Hadoop ``file://`` URL (the form a cluster uses,
    e.g. ``hdfs://``; the default run) or as a plain path. ``move_back`` (long variant): then
    restart the killed node and add a second query; the group balances one query per node by
    stopping one on the survivor (at a batch boundary) before the restarted node starts it: both
    outputs still hold every input exactly once."""
    broker = broker_factory(BROKER_CONFIG)
    service_id = f"failover_{uuid.uuid4().hex[:6]}_"
    shared = tmp_path / "shared-checkpoints"
    config = {**NODE_CONFIG, "checkpoint.root": shared.as_uri() if root_form == "url" else str(shared)}
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
        produce_numbered(broker.bootstrap, "src", range(records // 2))
        owner = wait_until(lambda: _owner(nodes, query_id), "the query running somewhere", timeout_s=240, nodes=nodes)
        wait_until(lambda: len(_values(broker.bootstrap, "dst")) >= records // 4, "first output", timeout_s=240, nodes=nodes)
        survivor = nodes[1] if owner is nodes[0] else nodes[0]
        owner.kill()
        produce_numbered(broker.bootstrap, "src", range(records // 2, records))
        wait_until(lambda: _owner([survivor], query_id) is survivor, "the survivor running the query", timeout_s=240,
                   nodes=[survivor])
        expected = sorted(f"v{i}" for i in range(records))
        wait_until(lambda: len(_values(broker.bootstrap, "dst")) >= records, "all output", timeout_s=300, nodes=[survivor])
        assert sorted(_values(broker.bootstrap, "dst")) == expected  # every input exactly once
        wait_until_running(survivor, [query_id])
        # Both nodes ran the query from the one checkpoint the root names, URL or path.
        assert (shared / service_id / query_id / "commits").is_dir()
        if move_back:
            _move_back(broker.bootstrap, nodes, owner, survivor, query_id, records)

        assert survivor.terminate() == 0, survivor.log_tail()
        assert survivor.session_processes() == [], "processes left behind after SIGTERM"
    finally:
        for node in nodes:
            node.kill()
