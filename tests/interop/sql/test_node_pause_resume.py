"""ksqlDB's PAUSE / RESUME on a real node (our broker, Spark, the REST API), checked with
librdkafka's read_committed consumer (ksqlDB's PauseResumeIntegrationTest, made exact):

- PAUSE answers "Query paused."; the node running the query stops it at a batch boundary and
  SHOW QUERIES, EXPLAIN and DESCRIBE EXTENDED then say PAUSED;
- while paused nothing is written: a second, running query over the same input (the control)
  processes what is produced meanwhile, and only then is the paused query's output compared with
  what it was when it showed PAUSED: its end offset has not moved. This cannot flake: the paused
  query has no Spark query to write with, however long the control takes;
- the PAUSE is a command of the command topic: a restarted node replays it and keeps the query
  paused (checked the same way);
- RESUME answers "Query resumed." and the query goes on from its checkpoint: its output then
  holds every input record exactly once;
- an unknown query id is refused with ksqlDB's "Unknown queryId: <id>"; PAUSE ALL / RESUME ALL
  cover every query; TERMINATE of a paused query removes it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.spark.spark_support import read_committed
from tests.support.brokers import NO_INITIAL_REBALANCE_DELAY
from tests.support.cluster_kind import BrokerUnderTest
from tests.support.sql_servers import LAZY_SPARK, SqlServerProcess, produce_numbered, wait_until, wait_until_running

pytestmark = [pytest.mark.interop, pytest.mark.spark]

EARLIEST = {"ksql.streams.auto.offset.reset": "earliest"}
BATCH = 20   # records produced at each step


@pytest.fixture
def broker(broker_factory: Callable[..., BrokerUnderTest]) -> BrokerUnderTest:
    """Our broker with KIP-939 two-phase commit (the exactly-once sink needs it)."""
    return broker_factory({**NO_INITIAL_REBALANCE_DELAY, "transaction.two.phase.commit.enable": "true"})


def _values(bootstrap: str, topic: str) -> list[str]:
    """What a read_committed reader sees in ``topic`` now (callers wait until enough is)."""
    return sorted(json.loads(value)["V"] for _key, value in read_committed(bootstrap, topic, end_at_eof=True)
                  if value is not None)


def _end_offset(bootstrap: str, topic: str) -> int:
    """The partition's high watermark: it moves with any write, committed, aborted or open."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"hw-{uuid.uuid4().hex}"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    finally:
        consumer.close()


def _states(node: SqlServerProcess) -> dict[str, str]:
    return {q["id"]: q["state"] for q in node.ok("SHOW QUERIES;")[0]["queries"]}


def _status(node: SqlServerProcess, statement: str) -> dict[str, Any]:
    return node.ok(statement)[0]["commandStatus"]


def _wait_paused(node: SqlServerProcess, query_id: str) -> None:
    """PAUSED on the node running it: its Spark query has stopped (local_queries: RUNNING while
    PAUSING, until the last batch is written)."""
    wait_until(lambda: _states(node).get(query_id) == "PAUSED", f"{query_id} PAUSED", timeout_s=120, nodes=[node])


def test_pause_holds_a_query_across_a_restart_and_resume_writes_every_record_exactly_once(
        broker: BrokerUnderTest, tmp_path: Path) -> None:
    bootstrap = broker.bootstrap
    node = SqlServerProcess(bootstrap=bootstrap, service_id=f"pause_{uuid.uuid4().hex[:6]}_",
                            state_dir=tmp_path / "node", config=LAZY_SPARK, name="pause-node")
    node.start()
    try:
        node.ok("CREATE STREAM SRC (ID INT KEY, V STRING) WITH (KAFKA_TOPIC='src', PARTITIONS=1, "
                "VALUE_FORMAT='JSON');")
        paused = node.ok("CREATE STREAM DST WITH (KAFKA_TOPIC='dst', PARTITIONS=1) AS SELECT ID, V FROM SRC "
                         "EMIT CHANGES;", EARLIEST)[0]["commandStatus"]["queryId"]
        control = node.ok("CREATE STREAM CTL WITH (KAFKA_TOPIC='ctl', PARTITIONS=1) AS SELECT ID, V FROM SRC "
                          "EMIT CHANGES;", EARLIEST)[0]["commandStatus"]["queryId"]

        def expected(upto: int) -> list[str]:
            return sorted(f"v{i}" for i in range(upto))

        def control_has(upto: int) -> None:
            wait_until(lambda: len(_values(bootstrap, "ctl")) >= upto, f"{upto} records in ctl", timeout_s=300,
                       interval_s=1.0, nodes=[node])
            assert _values(bootstrap, "ctl") == expected(upto)

        produce_numbered(bootstrap, "src", range(BATCH))
        wait_until(lambda: len(_values(bootstrap, "dst")) >= BATCH, "the first records in dst", timeout_s=300,
                   interval_s=1.0, nodes=[node])
        control_has(BATCH)

        # ksqlDB's ValidatedCommandFactory text for an unknown id, for PAUSE and RESUME alike.
        for verb in ("PAUSE", "RESUME"):
            refused = node.ksql(f"{verb} CSAS_NOPE_0;")
            assert refused.status_code == 400, refused.text
            assert refused.json()["message"] == "Unknown queryId: CSAS_NOPE_0"

        assert _status(node, f"PAUSE {paused};") == {"status": "SUCCESS", "message": "Query paused.", "queryId": None}
        _wait_paused(node, paused)
        assert _states(node)[control] == "RUNNING"
        explained = node.ok(f"EXPLAIN {paused};")[0]["queryDescription"]
        assert explained["state"] == "PAUSED"
        assert "PAUSED" in explained["ksqlHostQueryStatus"].values()
        described = node.ok("DESCRIBE DST EXTENDED;")[0]["sourceDescription"]
        assert [(q["id"], q["state"]) for q in described["writeQueries"]] == [(paused, "PAUSED")]

        before = (_end_offset(bootstrap, "dst"), _values(bootstrap, "dst"))
        assert before[1] == expected(BATCH)
        produce_numbered(bootstrap, "src", range(BATCH, 2 * BATCH))
        control_has(2 * BATCH)    # the records were there to process, and the control did
        assert (_end_offset(bootstrap, "dst"), _values(bootstrap, "dst")) == before

        # A restarted node replays the PAUSE from the command topic: still paused, still silent.
        assert node.terminate() == 0, node.log_tail()
        node.start()
        _wait_paused(node, paused)
        produce_numbered(bootstrap, "src", range(2 * BATCH, 3 * BATCH))
        wait_until_running(node, [control], timeout_s=240)
        control_has(3 * BATCH)
        assert (_end_offset(bootstrap, "dst"), _values(bootstrap, "dst")) == before

        assert _status(node, f"RESUME {paused};") == {"status": "SUCCESS", "message": "Query resumed.",
                                                      "queryId": None}
        wait_until(lambda: len(_values(bootstrap, "dst")) >= 3 * BATCH, "dst caught up", timeout_s=300,
                   interval_s=1.0, nodes=[node])
        assert _values(bootstrap, "dst") == expected(3 * BATCH)   # every input record exactly once
        wait_until_running(node, [paused, control])

        # PAUSE ALL pauses both; TERMINATE of a paused query removes it; RESUME ALL the rest.
        assert _status(node, "PAUSE ALL;")["message"] == "Query paused."
        _wait_paused(node, paused)
        _wait_paused(node, control)
        assert _status(node, f"TERMINATE {paused};")["message"] == "Query terminated."
        assert paused not in _states(node)
        assert _status(node, "RESUME ALL;")["message"] == "Query resumed."
        wait_until_running(node, [control], timeout_s=240)
        produce_numbered(bootstrap, "src", range(3 * BATCH, 4 * BATCH))
        control_has(4 * BATCH)
    finally:
        node.stop()
