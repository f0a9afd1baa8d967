"""A failed persistent query's error names its real cause (issue 12 point 8).

The failure is a real one: the exactly-once sink writes with KIP-939 two-phase commit, and this
broker runs without ``transaction.two.phase.commit.enable=true``, so it refuses the sink's
``InitProducerId`` (``TRANSACTIONAL_ID_AUTHORIZATION_FAILED``) and the query's first write fails in
a Python worker. Spark wraps that in ``[PYTHON_EXCEPTION] An exception was thrown from the Python
worker: Traceback ...``; what an operator needs in ``DESCRIBE EXTENDED`` and ``EXPLAIN`` is the
exception at the bottom of that traceback, not its first line.

Both tests run on conftest's ``shared_spark_node`` (the broker under test, our single broker or a
cluster, with two-phase commit left disabled, the default; a node with Spark; unique stream names
keep the tests apart).
"""

from __future__ import annotations

import json
import re
import struct
import uuid

import pytest
from confluent_kafka import Producer

from tests.support.sql_servers import wait_until

pytestmark = [pytest.mark.interop, pytest.mark.spark]

# Any of these names the refusal: our sink's words, the typed error, or the Kafka error name.
WHOLE_LOG_CHARS = 1 << 30  # log_tail() of this many characters: the whole log
CAUSE = re.compile(r"two-phase|2PC|TwoPhaseCommitUnsupportedError|TRANSACTIONAL_ID_AUTHORIZATION_FAILED", re.IGNORECASE)


def _suffix() -> str:
    return uuid.uuid4().hex[:6].upper()


def test_query_refused_two_phase_commit_shows_the_cause(shared_spark_node) -> None:
    """Also (issue 12 point 8): the failed query is ERROR in SHOW QUERIES, DESCRIBE EXTENDED and
    EXPLAIN with one error text, and the node goes on serving statements."""
    broker, node = shared_spark_node
    src, dst = f"src_{uuid.uuid4().hex[:6]}", f"dst_{uuid.uuid4().hex[:6]}"
    src_name, dst_name = f"SRC_{_suffix()}", f"DST_{_suffix()}"
    node.ok(f"CREATE STREAM {src_name} (ID INT KEY, V STRING) WITH (KAFKA_TOPIC='{src}', PARTITIONS=1, "
            "VALUE_FORMAT='JSON');")
    status = node.ok(f"CREATE STREAM {dst_name} WITH (KAFKA_TOPIC='{dst}') AS SELECT ID, V FROM {src_name} "
                     "EMIT CHANGES;", {"ksql.streams.auto.offset.reset": "earliest"})[0]
    query_id = status["commandStatus"]["queryId"]
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(src, json.dumps({"V": "x"}).encode(), struct.pack(">i", 1))
    assert producer.flush(30) == 0

    def failed() -> bool:
        queries = node.ok("SHOW QUERIES;")[0]["queries"]
        return [q["state"] for q in queries if q["id"] == query_id] == ["ERROR"]

    wait_until(failed, "the query shown as ERROR in SHOW QUERIES", timeout_s=240, nodes=[node])
    description = node.ok(f"DESCRIBE {dst_name} EXTENDED;")[0]["sourceDescription"]
    assert [q["state"] for q in description["writeQueries"]] == ["ERROR"], description["writeQueries"]
    error_stats = description["errorStats"]
    assert error_stats.startswith(f"{query_id}: "), error_stats
    assert CAUSE.search(error_stats), f"DESCRIBE EXTENDED does not name the cause: {error_stats!r}"
    # Not a dangling traceback header in place of the error.
    assert not error_stats.rstrip().endswith("Traceback (most recent call last):"), error_stats
    explained = node.ok(f"EXPLAIN {query_id};")[0]["queryDescription"]
    assert list(explained["ksqlHostQueryStatus"].values()) == ["ERROR"], explained
    assert explained["state"] == "ERROR", explained
    errors = explained["queryErrors"]
    assert len(errors) == 1, errors
    assert CAUSE.search(errors[0]["errorMessage"]), errors
    # The one error text, shown by DESCRIBE EXTENDED with the query id in front.
    assert errors[0]["errorMessage"] == error_stats.split(": ", 1)[1], (errors, error_stats)
    # The node goes on serving.
    assert node.get("/healthcheck").json()["isHealthy"] is True
    other = f"OTHER_{_suffix()}"
    node.ok(f"CREATE STREAM {other} (ID INT KEY, V STRING) WITH (KAFKA_TOPIC='{other.lower()}', PARTITIONS=1, "
            "VALUE_FORMAT='JSON');")


def test_broker_refusing_two_phase_commit_is_named_at_start_and_fails_queries_at_once(shared_spark_node) -> None:
    """Issue 24 point 7: the node says at start that its broker refuses two-phase commit, naming the
    setting to change; a persistent query over an idle input (nothing ever written, so Spark never
    runs the sink) is shown as ERROR at once, with ksqlDB's QueryError shape, instead of RUNNING
    without ever being able to write."""
    _broker, node = shared_spark_node
    src = f"idle_{uuid.uuid4().hex[:6]}"
    src_name, table = f"SRC_{_suffix()}", f"COUNTS_{_suffix()}"
    node.ok(f"CREATE STREAM {src_name} (ID INT KEY, V STRING) WITH (KAFKA_TOPIC='{src}', PARTITIONS=1, "
            "VALUE_FORMAT='JSON');")
    status = node.ok(f"CREATE TABLE {table} AS SELECT ID, COUNT(*) AS N FROM {src_name} GROUP BY ID "
                     "EMIT CHANGES;")[0]
    query_id = status["commandStatus"]["queryId"]

    def shown_error() -> list[dict[str, object]]:
        queries = node.ok("SHOW QUERIES;")[0]["queries"]
        return [q for q in queries if q["id"] == query_id and q["state"] == "ERROR"]

    wait_until(shown_error, "the idle query shown as ERROR", timeout_s=240, nodes=[node])
    description = node.ok(f"DESCRIBE {table} EXTENDED;")[0]["sourceDescription"]
    assert [q["state"] for q in description["writeQueries"]] == ["ERROR"], description["writeQueries"]
    assert "transaction.two.phase.commit.enable=true" in description["errorStats"], description["errorStats"]
    explained = node.ok(f"EXPLAIN {query_id};")[0]["queryDescription"]
    assert explained["state"] == "ERROR", explained
    [error] = explained["queryErrors"]
    assert set(error) == {"type", "errorMessage", "timestamp"}, error
    assert error["type"] == "USER", error
    assert isinstance(error["timestamp"], int), error
    assert "transaction.two.phase.commit.enable=true" in error["errorMessage"], error
    assert node.get("/healthcheck").json()["isHealthy"] is True
    # Said at start, in the node's log, with the setting to change (checked last: a node
    # that only logged it would still leave the query RUNNING). The whole log: the node is
    # shared, so the other test's output may follow the start-up lines.
    wait_until(lambda: "persistent queries cannot run" in node.log_tail(WHOLE_LOG_CHARS),
               "the start-up check's ERROR line", timeout_s=120, nodes=[node])
    line = next(t for t in node.log_tail(WHOLE_LOG_CHARS).splitlines() if "persistent queries cannot run" in t)
    assert " ERROR " in line, line
    assert "transaction.two.phase.commit.enable=true" in line, line
