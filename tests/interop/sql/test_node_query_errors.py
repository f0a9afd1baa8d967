"""A failed persistent query's error names its real cause (issue 12 point 8).

The failure is a real one: the exactly-once sink writes with KIP-939 two-phase commit, and this
broker runs without ``transaction.two.phase.commit.enable=true``, so it refuses the sink's
``InitProducerId`` (``TRANSACTIONAL_ID_AUTHORIZATION_FAILED``) and the query's first write fails in
a Python worker. Spark wraps that in ``[PYTHON_EXCEPTION] An exception was thrown from the Python
worker: Traceback ...``; what an operator needs in ``DESCRIBE EXTENDED`` and ``EXPLAIN`` is the
exception at the bottom of that traceback, not its first line.
"""

from __future__ import annotations

import json
import re
import struct
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.support.sql_servers import LAZY_SPARK, SqlServerProcess, wait_until

pytestmark = [pytest.mark.interop, pytest.mark.spark]

# Any of these names the refusal: our sink's words, the typed error, or the Kafka error name.
CAUSE = re.compile(r"two-phase|2PC|TwoPhaseCommitUnsupportedError|TRANSACTIONAL_ID_AUTHORIZATION_FAILED", re.IGNORECASE)


def test_query_refused_two_phase_commit_shows_the_cause(broker_factory, tmp_path: Path) -> None:
    broker = broker_factory()  # our broker, two-phase commit left disabled (the default)
    service_id = f"errors_{uuid.uuid4().hex[:6]}_"
    src, dst = f"src_{uuid.uuid4().hex[:6]}", f"dst_{uuid.uuid4().hex[:6]}"
    node = SqlServerProcess(bootstrap=broker.bootstrap, service_id=service_id, state_dir=tmp_path / "node",
                            config=LAZY_SPARK)
    try:
        node.start()
        node.ok(f"CREATE STREAM SRC (ID INT KEY, V STRING) WITH (KAFKA_TOPIC='{src}', PARTITIONS=1, VALUE_FORMAT='JSON');")
        status = node.ok(f"CREATE STREAM DST WITH (KAFKA_TOPIC='{dst}') AS SELECT ID, V FROM SRC EMIT CHANGES;",
                         {"ksql.streams.auto.offset.reset": "earliest"})[0]
        query_id = status["commandStatus"]["queryId"]
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        producer.produce(src, json.dumps({"V": "x"}).encode(), struct.pack(">i", 1))
        assert producer.flush(30) == 0

        def failed() -> bool:
            queries = node.ok("SHOW QUERIES;")[0]["queries"]
            return [q["state"] for q in queries if q["id"] == query_id] == ["ERROR"]

        wait_until(failed, "the query shown as ERROR in SHOW QUERIES", timeout_s=240, nodes=[node])
        error_stats = node.ok("DESCRIBE DST EXTENDED;")[0]["sourceDescription"]["errorStats"]
        assert error_stats.startswith(f"{query_id}: "), error_stats
        assert CAUSE.search(error_stats), f"DESCRIBE EXTENDED does not name the cause: {error_stats!r}"
        # Not a dangling traceback header in place of the error.
        assert not error_stats.rstrip().endswith("Traceback (most recent call last):"), error_stats
        errors = node.ok(f"EXPLAIN {query_id};")[0]["queryDescription"]["queryErrors"]
        assert len(errors) == 1, errors
        assert CAUSE.search(errors[0]["errorMessage"]), errors
        assert node.get("/healthcheck").json()["isHealthy"] is True
    finally:
        node.kill()
