"""The Overview page's throughput from the brokers' own /metrics (``--metrics-url``): a real
broker with ``metrics.listen``, records produced and read with confluent-kafka between two looks
of the page, and a metrics URL nobody serves (shown with its error while the other still counts)."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from tests.console.conftest import ConsoleClient
from tests.support.clients import create_topic
from tests.support.cluster_kind import CLUSTER_METRICS_OF_ONE_PROCESS, not_on_cluster
from tests.support.metrics import METRICS_BROKER_CONFIG, metrics_url_of

pytestmark = [pytest.mark.interop, not_on_cluster(CLUSTER_METRICS_OF_ONE_PROCESS)]

MODULE_BROKER_CONFIG = METRICS_BROKER_CONFIG  # read by tests/conftest.py's broker fixture
RECORDS = 50
WAIT_S = 30.0


def _unserved_url() -> str:
    """A /metrics URL on a port nobody listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/metrics"


@pytest.fixture(scope="module")
def unserved_url() -> str:
    return _unserved_url()


@pytest.fixture(scope="module")
def console_extra_args(console_broker: Any, unserved_url: str) -> list[str]:
    return ["--metrics-url", metrics_url_of(console_broker), "--metrics-url", unserved_url]


def test_overview_shows_the_throughput_the_brokers_metrics_count(
        http_login: Callable[..., ConsoleClient], console_broker: Any, unique_name: Callable[[str], str],
        unserved_url: str) -> None:
    alice = http_login("alice")
    first = alice.get("/api/overview").json()["throughput"]
    assert first["bytes_in_per_s"] is None  # one look: no rate yet
    topic = unique_name("throughput")
    create_topic(console_broker.bootstrap, topic, partitions=1)
    producer = Producer({"bootstrap.servers": console_broker.bootstrap})
    for n in range(RECORDS):
        producer.produce(topic, value=b"x" * 1000, key=str(n).encode())
    assert producer.flush(WAIT_S) == 0
    consumer = Consumer({"bootstrap.servers": console_broker.bootstrap, "group.id": unique_name("throughput-reader"),
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        read = 0
        while read < RECORDS:
            msg = consumer.poll(WAIT_S)
            assert msg is not None, f"read {read} of {RECORDS}"
            read += msg.error() is None
    finally:
        consumer.close()
    second = alice.get("/api/overview").json()["throughput"]
    assert second["bytes_in_per_s"] > 0
    assert second["messages_in_per_s"] > 0
    assert second["bytes_out_per_s"] > 0
    by_url = {row["url"]: row for row in second["brokers"]}
    assert by_url[metrics_url_of(console_broker)]["error"] is None
    assert by_url[unserved_url]["error"]  # refused: shown, not counted
    page = alice.get("/").text
    assert 'id="throughput"' in page
    assert unserved_url in page
