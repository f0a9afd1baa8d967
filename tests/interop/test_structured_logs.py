"""Structured logs from a real broker process (docs/logging.md): ``log.format=json`` and levels
per logger, read back from the broker's stderr while librdkafka fails to authenticate and has a
request refused."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.clients import CLIENT_TIMEOUT_S, unique_topic
from tests.support.sasl import librdkafka_conf, start_sasl_broker

pytestmark = pytest.mark.interop


def _lines(path: Path) -> list[dict[str, Any]]:
    """Every line of the broker's stderr, each parsed as JSON (a line that is not fails)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _wait_for(path: Path, found: Any) -> list[dict[str, Any]]:
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while True:
        lines = _lines(path)
        if found(lines) or time.monotonic() > deadline:
            return lines
        time.sleep(0.1)


def test_json_logs_name_the_client_principal_request_and_error(tmp_path: Path) -> None:
    broker = start_sasl_broker(tmp_path / "data", {
        "log.format": "json",
        "log.level": "WARNING",  # the root: the startup INFO lines are left out
        "log.level.oncestream.broker.sasl": "DEBUG",
        "log.level.oncestream.broker.request": "INFO",  # failed requests, as kafka.request.logger
    })
    try:
        assert broker.log_path is not None
        bad = Producer({"bootstrap.servers": broker.bootstrap, **librdkafka_conf("PLAIN", "alice", "wrong")})
        with pytest.raises(KafkaException):
            bad.list_topics(timeout=5)
        del bad
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, **librdkafka_conf("PLAIN")})
        topic = unique_topic("logs")
        future = admin.create_topics([NewTopic(topic, 1, 3)])[topic]  # one broker: refused
        with pytest.raises(KafkaException):
            future.result(timeout=CLIENT_TIMEOUT_S)

        def complete(lines: list[dict[str, Any]]) -> bool:
            return (any(line.get("event") == "authentication_failed" for line in lines)
                    and any(line.get("request") == "CreateTopics" for line in lines))

        lines = _wait_for(broker.log_path, complete)
    finally:
        broker.stop()

    auth = [line for line in lines if line.get("event") == "authentication_failed"]
    assert auth, lines
    assert auth[0]["logger"].startswith("oncestream.broker.sasl")
    assert auth[0]["level"] == "INFO"
    assert auth[0]["client"].startswith("127.0.0.1:")
    assert auth[0]["principal"] == "User:ANONYMOUS"
    assert auth[0]["mechanism"] == "PLAIN"
    assert auth[0]["error"] == "SASL_AUTHENTICATION_FAILED"

    refused = [line for line in lines if line.get("request") == "CreateTopics"]
    assert refused, lines
    assert refused[0]["logger"] == "oncestream.broker.request"
    assert refused[0]["principal"] == "User:alice"
    assert refused[0]["client"].startswith("127.0.0.1:")
    assert refused[0]["error"] == "INVALID_REPLICATION_FACTOR"
    assert refused[0]["client_id"]
    # log.level=WARNING holds for everything not named: no INFO line from any other logger.
    named = ("oncestream.broker.sasl", "oncestream.broker.request")
    assert not [line for line in lines if line["level"] in ("INFO", "DEBUG") and not line["logger"].startswith(named)]
