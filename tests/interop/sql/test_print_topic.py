"""PRINT over ksqlDB's REST API against a real node and broker: records produced with
confluent-kafka, PRINT's text lines read over HTTP as ksqlDB's CLI reads them (/query), its
/query-stream form, the missing-topic errors of both, and /ksql's refusal.

The expected lines are ksqlDB's (RecordFormatter / TopicStreamWriter): a ``Key format:`` and a
``Value format:`` line, then ``rowtime: <UTC>, key: .., value: .., partition: n`` per record.
Runs on conftest's ``shared_spark_node`` (PRINT starts no Spark query); unique topic names.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = [pytest.mark.interop, pytest.mark.spark]

TS_MS = 1589821418020            # 2020/05/18 17:03:38.020 Z
ROWTIME = "2020/05/18 17:03:38.020 Z"
TIMEOUT_S = 120.0
ROOT = Path(__file__).resolve().parents[3]


def new_topic(bootstrap: str, partitions: int = 1, name: str | None = None) -> str:
    topic = name or f"print_{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})   # kept alive until the topic exists
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    return topic


def produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None, int]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for key, value, partition in records:
        producer.produce(topic, value, key, partition=partition, timestamp=TS_MS)
    assert producer.flush(30) == 0


def post_lines(url: str, path: str, body: dict[str, Any]) -> list[str]:
    """The response's non-empty lines (empty ones are the keep-alive newlines); the response
    ends by itself at LIMIT."""
    with httpx.stream("POST", url + path, json=body, timeout=TIMEOUT_S) as response:
        assert response.status_code == 200, response.read()
        return [line for line in response.iter_lines() if line]


def print_lines(url: str, statement: str) -> list[str]:
    return post_lines(url, "/query", {"ksql": statement, "streamsProperties": {}})


def test_print_from_beginning_limit_shows_ksqldb_lines(shared_spark_node) -> None:
    broker, node = shared_spark_node
    topic = new_topic(broker.bootstrap)
    produce(broker.bootstrap, topic, [(f"k{i}".encode(), json.dumps({"id": i}).encode(), 0) for i in range(4)])
    lines = print_lines(node.url, f"PRINT '{topic}' FROM BEGINNING LIMIT 3;")
    assert lines == [
        "Key format: KAFKA_STRING",
        "Value format: JSON or KAFKA_STRING",
        f'rowtime: {ROWTIME}, key: k0, value: {{"id": 0}}, partition: 0',
        f'rowtime: {ROWTIME}, key: k1, value: {{"id": 1}}, partition: 0',
        f'rowtime: {ROWTIME}, key: k2, value: {{"id": 2}}, partition: 0',
    ]


def test_print_int_keys_over_partitions_and_null_values(shared_spark_node) -> None:
    broker, node = shared_spark_node
    topic = new_topic(broker.bootstrap, partitions=2)
    produce(broker.bootstrap, topic, [(struct.pack(">i", 7), b'{"a":1}', 0), (struct.pack(">i", 8), None, 1)])
    lines = print_lines(node.url, f"PRINT {topic} FROM BEGINNING LIMIT 2;")
    assert lines[0] == "Key format: KAFKA_INT or KAFKA_STRING"
    # Partitions come back in either order; the value guess depends on which came first.
    assert lines[1] in ("Value format: JSON or KAFKA_STRING", "Value format: ¯\\_(ツ)_/¯ - no data processed")
    records = [line for line in lines if line.startswith("rowtime")]
    assert sorted(records) == [f'rowtime: {ROWTIME}, key: 7, value: {{"a":1}}, partition: 0',
                               f"rowtime: {ROWTIME}, key: 8, value: <null>, partition: 1"]


def test_print_interval_prints_every_nth_record(shared_spark_node) -> None:
    broker, node = shared_spark_node
    topic = new_topic(broker.bootstrap)
    produce(broker.bootstrap, topic, [(b"k", f"v{i}".encode(), 0) for i in range(7)])
    lines = print_lines(node.url, f"PRINT '{topic}' FROM BEGINNING INTERVAL 3 LIMIT 3;")
    assert [line.split("value: ")[1] for line in lines if line.startswith("rowtime")] == [
        "v0, partition: 0", "v3, partition: 0", "v6, partition: 0"]


def test_print_without_from_beginning_starts_at_the_end(shared_spark_node) -> None:
    broker, node = shared_spark_node
    topic = new_topic(broker.bootstrap)
    produce(broker.bootstrap, topic, [(b"old", b"before", 0)])
    result: list[str] = []
    with httpx.stream("POST", node.url + "/query", json={"ksql": f"PRINT '{topic}' LIMIT 1;"},
                      timeout=TIMEOUT_S) as response:
        # The status line is out once the node has placed its consumer at the end.
        assert response.status_code == 200
        reader = threading.Thread(target=lambda: result.extend(line for line in response.iter_lines() if line))
        reader.start()
        produce(broker.bootstrap, topic, [(b"new", b"after", 0)])
        reader.join(TIMEOUT_S)
    assert result[-1] == f"rowtime: {ROWTIME}, key: new, value: after, partition: 0"
    assert not any("before" in line for line in result)


def test_print_unknown_topic_is_ksqldbs_error_with_case_suggestion(shared_spark_node) -> None:
    broker, node = shared_spark_node
    name = f"Print_Case_{uuid.uuid4().hex[:6]}"
    new_topic(broker.bootstrap, name=name)
    response = httpx.post(node.url + "/query", json={"ksql": f"PRINT '{name.lower()}';"}, timeout=TIMEOUT_S)
    assert response.status_code == 400
    body = response.json()
    assert body["error_code"] == 40000
    assert body["message"] == (f"Could not find topic '{name.lower()}', or the KSQL user does not have permissions "
                               "to list the topic. Topic names are case-sensitive.\nDid you mean:\n"
                               f"\tprint {name};")
    missing = f"nowhere_{uuid.uuid4().hex[:6]}"
    response = httpx.post(node.url + "/query", json={"ksql": f"PRINT {missing};"}, timeout=TIMEOUT_S)
    assert response.status_code == 400
    assert response.json()["message"] == (f"Could not find topic '{missing}', or the KSQL user does not have "
                                          "permissions to list the topic. Topic names are case-sensitive.")


def test_print_on_ksql_endpoint_says_to_use_the_query_endpoint(shared_spark_node) -> None:
    _broker, node = shared_spark_node
    response = node.ksql("PRINT 'anything' FROM BEGINNING;")
    assert response.status_code == 400
    body = response.json()
    assert body["error_code"] == 40002
    assert body["message"] == ("The following statement types should be issued to the websocket endpoint "
                               "'/query':\n\t* PRINT\n\t* SELECT")
    assert body["statementText"] == "PRINT 'anything' FROM BEGINNING;"


def test_print_on_query_stream_writes_record_lines_only(shared_spark_node) -> None:
    broker, node = shared_spark_node
    topic = new_topic(broker.bootstrap)
    produce(broker.bootstrap, topic, [(b"a", b"1", 0), (b"b", b"2", 0)])
    lines = post_lines(node.url, "/query-stream", {"sql": f"PRINT '{topic}' FROM BEGINNING LIMIT 2;"})
    assert lines == [f"rowtime: {ROWTIME}, key: a, value: 1, partition: 0",
                     f"rowtime: {ROWTIME}, key: b, value: 2, partition: 0"]
    missing = f"nowhere_{uuid.uuid4().hex[:6]}"
    response = httpx.post(node.url + "/query-stream", json={"sql": f"PRINT '{missing}';"}, timeout=TIMEOUT_S)
    assert response.status_code == 400
    assert response.json()["message"] == f"Topic does not exist: {missing}"


def test_shell_prints_a_topic_as_ksqldbs_cli_does(shared_spark_node) -> None:
    broker, node = shared_spark_node
    topic = new_topic(broker.bootstrap)
    produce(broker.bootstrap, topic, [(b"k", b'{"x":"y"}', 0)])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-m", "oncestream.cli", "sql", "--server", node.url,
                           "-e", f"PRINT '{topic}' FROM BEGINNING LIMIT 1;"],
                          capture_output=True, text=True, env=env, timeout=TIMEOUT_S)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines() == ["Key format: KAFKA_STRING", "Value format: JSON or KAFKA_STRING",
                                        f'rowtime: {ROWTIME}, key: k, value: {{"x":"y"}}, partition: 0',
                                        "Topic printing ceased"]


def test_print_interval_below_one_is_refused_and_a_client_leaving_ends_the_print(shared_spark_node) -> None:
    broker, node = shared_spark_node
    topic = new_topic(broker.bootstrap)
    response = httpx.post(node.url + "/query", json={"ksql": f"PRINT '{topic}' INTERVAL 0;"}, timeout=TIMEOUT_S)
    assert response.status_code == 400
    assert response.json()["message"] == "INTERVAL must be greater than one, but was: 0"
    produce(broker.bootstrap, topic, [(b"k", b"v", 0)])
    # No LIMIT: the print runs until the client goes; the node then serves the next one.
    with httpx.stream("POST", node.url + "/query", json={"ksql": f"PRINT '{topic}' FROM BEGINNING;"},
                      timeout=TIMEOUT_S) as endless:
        lines = (line for line in endless.iter_lines() if line)    # without the keep-alive newlines
        assert [next(lines) for _ in range(3)][-1] == f"rowtime: {ROWTIME}, key: k, value: v, partition: 0"
    assert print_lines(node.url, f"PRINT '{topic}' FROM BEGINNING LIMIT 1;")[-1].endswith("value: v, partition: 0")
