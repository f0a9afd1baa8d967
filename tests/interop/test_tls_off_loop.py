"""TLS off the event loop (issue 27 point 3), with librdkafka over real TLS connections.

In-process broker (``LoopThreadBroker``): a profiler on the event loop's thread sees every Python
and C call made there, so the test can tell that serving TLS clients (handshakes, produce, a large
zero-copy fetch) never calls into ``ssl`` on the loop, and that the fetched record bytes went out
with ``os.sendfile`` (into the TLS pump's socket pair). The old path (asyncio's TLS transport)
fails both: its SSLObject reads and writes run on the loop, and it could not sendfile.
A broker process then serves many TLS clients at once, large fetch responses and a client that
closes in the middle of one.

The in-process broker runs with each byte pump (``BrokerSeams.tls_byte_pump``): the C pump the
broker uses by default and the Python fallback for when the extension is absent.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import ssl
import struct
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from oncestream.broker.config import BrokerConfig
from oncestream.broker.seams import BrokerSeams
from oncestream.broker.state import BrokerState
from oncestream.broker.tls_pump import default_byte_pump, python_byte_pump
from oncestream.client.common.connection import parse_bootstrap
from tests.support.certs import Pki
from tests.support.cluster_kind import IN_PROCESS_BROKER, BrokerUnderTest, not_on_cluster
from tests.support.loop_thread_broker import LoopThreadBroker
from tests.support.wire import API_FETCH, api_versions_v3_body, fetch_request_body, frame, request_header

pytestmark = pytest.mark.interop

TIMEOUT_S = 60.0
VALUE_BYTES = 64 * 1024


def _tls_config(pki: Pki) -> dict[str, str]:
    return {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL", **pki.broker_stores()}


def _client_conf(bootstrap: str, pki: Pki) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SSL", "ssl.ca.location": str(pki.ca)}


def _values(count: int, seed: str) -> list[bytes]:
    return [hashlib.sha256(f"{seed}-{i}".encode()).digest() * (VALUE_BYTES // 32) for i in range(count)]


def _produce(conf: dict[str, Any], topic: str, values: list[bytes]) -> None:
    producer = Producer({**conf, "acks": "all", "linger.ms": 5})
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(TIMEOUT_S) == 0


def _consume(conf: dict[str, Any], topic: str, count: int, **extra: Any) -> list[bytes]:
    consumer = Consumer({**conf, "group.id": f"g-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, **extra})
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            value = message.value()
            assert value is not None
            values.append(value)
    finally:
        consumer.close()
    return values


class _LoopCalls:
    """A profiler on one thread: the calls into ``ssl`` (its Python module and the C ``_ssl``
    objects) and the ``os.sendfile`` calls made there."""

    def __init__(self) -> None:
        self.ssl_calls: list[str] = []
        self.sendfile_calls = 0

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename == ssl.__file__:
            self.ssl_calls.append(frame.f_code.co_name)
        elif event == "c_call":
            if arg is os.sendfile:
                self.sendfile_calls += 1
            elif type(getattr(arg, "__self__", None)).__module__ == "_ssl":
                self.ssl_calls.append(arg.__qualname__)


@pytest.fixture(params=["c", "python"])
def in_process_tls_broker(request: pytest.FixtureRequest, tmp_path: Path, pki: Pki) -> Iterator[LoopThreadBroker]:
    byte_pump = default_byte_pump() if request.param == "c" else python_byte_pump
    if request.param == "c":
        assert byte_pump is not python_byte_pump, "the C pump is not built (pip install -e .)"
    state = BrokerState(tmp_path / "data", BrokerConfig.from_properties("127.0.0.1", 0, _tls_config(pki)),
                        seams=BrokerSeams(tls_byte_pump=byte_pump))
    broker = LoopThreadBroker(state)
    try:
        yield broker
    finally:
        broker.stop()


@not_on_cluster(IN_PROCESS_BROKER)
def test_the_event_loop_never_calls_into_ssl_and_fetches_over_tls_use_sendfile(
        in_process_tls_broker: LoopThreadBroker, pki: Pki) -> None:
    broker = in_process_tls_broker
    (ssl_listener,) = [item for item in broker.state.config.listeners if item.name == "SSL"]
    conf = _client_conf(f"127.0.0.1:{ssl_listener.port}", pki)
    calls = _LoopCalls()
    broker.on_loop(lambda: sys.setprofile(calls))
    try:
        topic = f"off-loop-{uuid.uuid4().hex[:8]}"
        values = _values(40, topic)
        _produce(conf, topic, values)
        assert _consume(conf, topic, len(values)) == values
    finally:
        broker.on_loop(lambda: sys.setprofile(None))
    assert calls.ssl_calls == [], f"the event loop called into ssl: {sorted(set(calls.ssl_calls))}"
    assert calls.sendfile_calls > 0, "the fetched records did not go out with sendfile"


@not_on_cluster(IN_PROCESS_BROKER)
def test_stopping_the_broker_closes_its_tls_connections_and_their_threads(tmp_path: Path, pki: Pki) -> None:
    """SIGTERM's path (``BrokerServer.stop``) with TLS clients connected, one of them in the middle
    of its handshake: every client sees its connection end and the stop completes."""
    state = BrokerState(tmp_path / "data", BrokerConfig.from_properties("127.0.0.1", 0, _tls_config(pki)))
    broker = LoopThreadBroker(state)
    (ssl_listener,) = [item for item in state.config.listeners if item.name == "SSL"]
    context = ssl.create_default_context(cafile=str(pki.ca))
    api_versions = frame(request_header(18, 3, 1, flexible=True) + api_versions_v3_body())
    clients = [context.wrap_socket(socket.create_connection(("127.0.0.1", ssl_listener.port), timeout=TIMEOUT_S),
                                   server_hostname="localhost") for _ in range(3)]
    silent = socket.create_connection(("127.0.0.1", ssl_listener.port), timeout=TIMEOUT_S)  # no ClientHello
    try:
        for client in clients:
            client.sendall(api_versions)
            (size,) = struct.unpack(">i", _read(client, 4))
            _read(client, size)  # answered: the connection is being served
        assert broker.server.open_connections == 3
        broker.stop()
        assert broker.server.open_connections == 0
        for client in clients:
            with contextlib.suppress(ConnectionResetError, ssl.SSLError):
                assert client.recv(1024) == b""
        with contextlib.suppress(ConnectionResetError):
            assert silent.recv(1024) == b""
    finally:
        for client in clients:
            client.close()
        silent.close()


@pytest.fixture(scope="module")
def tls_broker(module_our_broker_factory: Callable[..., BrokerUnderTest], pki: Pki) -> BrokerUnderTest:
    """Our broker process, or a cluster (the raw clients below go to its first broker)."""
    return module_our_broker_factory(_tls_config(pki))


def test_many_tls_clients_at_once_each_read_large_fetches_whole(tls_broker: BrokerUnderTest, pki: Pki) -> None:
    """Eight librdkafka consumers read the same 12 MB over TLS at once (fetch responses of up to
    4 MB each), while a producer writes to another topic: every client gets every byte in order."""
    conf = _client_conf(tls_broker.listener_bootstrap("SSL"), pki)
    topic = f"many-{uuid.uuid4().hex[:8]}"
    values = _values(192, topic)
    _produce(conf, topic, values)
    results: dict[int, list[bytes]] = {}
    failures: list[BaseException] = []

    def run(index: int, work: Callable[[], list[bytes]]) -> None:
        try:
            results[index] = work()
        except BaseException as exc:  # noqa: BLE001  # reported by the test thread
            failures.append(exc)

    other_topic = f"beside-{uuid.uuid4().hex[:8]}"
    other_values = _values(64, other_topic)
    threads = [threading.Thread(target=run, args=(i, lambda: _consume(
        conf, topic, len(values), **{"fetch.max.bytes": 4 * 1024 * 1024}))) for i in range(8)]

    def produce_beside() -> list[bytes]:
        _produce(conf, other_topic, other_values)
        return []

    threads.append(threading.Thread(target=run, args=(8, produce_beside)))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(2 * TIMEOUT_S)
    assert not failures, failures
    for index in range(8):
        assert results[index] == values, f"consumer {index} read {len(results[index])} of {len(values)} records"
    assert _consume(conf, other_topic, len(other_values)) == other_values


def test_a_client_closing_in_the_middle_of_a_large_fetch_leaves_the_broker_serving(
        tls_broker: BrokerUnderTest, pki: Pki) -> None:
    """Raw TLS clients ask for 12 MB in one Fetch (sent by sendfile into the pump), read a little
    of the response and close; the broker's connections end and the next client is served whole."""
    conf = _client_conf(tls_broker.listener_bootstrap("SSL"), pki)
    topic = f"cut-{uuid.uuid4().hex[:8]}"
    values = _values(192, topic)
    _produce(conf, topic, values)
    host, port = parse_bootstrap(tls_broker.listener_bootstrap("SSL"))
    context = ssl.create_default_context(cafile=str(pki.ca))
    body = fetch_request_body(11, topic, 0, 0, max_wait_ms=0, min_bytes=1, max_bytes=64 * 1024 * 1024,
                              partition_max_bytes=64 * 1024 * 1024)
    for correlation_id in range(3):
        with context.wrap_socket(socket.create_connection((host, port), timeout=TIMEOUT_S),
                                 server_hostname="localhost") as client:
            client.sendall(frame(request_header(API_FETCH, 11, correlation_id, flexible=False) + body))
            (size,) = struct.unpack(">i", _read(client, 4))
            assert size > len(values) * VALUE_BYTES  # the whole log in one response
            _read(client, 64 * 1024)  # a little of it, then close
    assert _consume(conf, topic, len(values)) == values


def _read(client: ssl.SSLSocket, count: int) -> bytes:
    out = bytearray()
    while len(out) < count:
        chunk = client.recv(count - len(out))
        assert chunk, "the broker closed the connection"
        out += chunk
    return bytes(out)
