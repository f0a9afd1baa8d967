"""The TLS pump (broker/tls_pump.py) on its own: a TLS listener on an asyncio loop thread whose
connections are handed to the test as plaintext socket pair ends, and real TLS clients (Python's
``ssl`` over real sockets, port 0). Bytes pass whole both ways under back-pressure, the handshake's
facts arrive in the ConnectionOrigin, and every way a connection ends ends its thread."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from oncestream.broker.tls_pump import ConnectionOrigin, TlsListener, bind_listening_sockets
from tests.support.certs import ClientCert, Pki

WAIT_S = 30.0  # a bound on a hang only, never a speed claim


def _server_context(pki: Pki, client_auth: ssl.VerifyMode = ssl.CERT_NONE) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki.server_keystore)
    context.load_verify_locations(pki.ca)
    context.verify_mode = client_auth
    return context


def _client(port: int, pki: Pki, cert: ClientCert | None = None) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=str(pki.ca))
    if cert is not None:
        context.load_cert_chain(cert.cert, cert.key)
    raw = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
    return context.wrap_socket(raw, server_hostname="localhost")


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.01)


@dataclass
class _Served:
    """A TLS listener served by a loop thread; each connection's pair end and origin are kept."""

    listener: TlsListener
    loop: asyncio.AbstractEventLoop
    port: int
    connections: list[tuple[socket.socket, ConnectionOrigin]] = field(default_factory=list)
    loop_thread_ssl_calls: list[str] = field(default_factory=list)

    def on_loop(self, fn: Callable[[], object]) -> object:
        async def call() -> object:
            return fn()

        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(WAIT_S)

    def connection(self, index: int = 0) -> tuple[socket.socket, ConnectionOrigin]:
        _until(lambda: len(self.connections) > index, "the connection reached the loop")
        return self.connections[index]


@pytest.fixture
def served(pki: Pki) -> Iterator[Callable[..., _Served]]:
    started: list[tuple[_Served, threading.Thread]] = []

    def start(client_auth: ssl.VerifyMode = ssl.CERT_NONE, linger_s: float = WAIT_S) -> _Served:
        loop = asyncio.new_event_loop()
        sockets = bind_listening_sockets("127.0.0.1", 0)
        holder: list[_Served] = []

        def deliver(pair_end: socket.socket, origin: ConnectionOrigin) -> None:
            pair_end.setblocking(True)
            pair_end.settimeout(WAIT_S)
            holder[0].connections.append((pair_end, origin))

        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            listener = TlsListener(sockets, _server_context(pki, client_auth), loop, handshake_timeout_s=WAIT_S,
                                   linger_s=linger_s, deliver=deliver)
            holder.append(_Served(listener, loop, sockets[0].getsockname()[1]))
            ready.set()
            loop.run_forever()
            loop.close()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        assert ready.wait(WAIT_S)
        started.append((holder[0], thread))
        return holder[0]

    yield start
    for one, thread in started:
        one.on_loop(one.listener.close)
        one.loop.call_soon_threadsafe(one.loop.stop)
        thread.join(WAIT_S)
        for pair_end, _origin in one.connections:
            pair_end.close()


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    out = bytearray()
    while len(out) < size:
        chunk = sock.recv(min(1 << 20, size - len(out)))
        if not chunk:
            raise AssertionError(f"end of stream after {len(out)} of {size} bytes")
        out += chunk
    return bytes(out)


def test_the_origin_carries_the_handshakes_facts(served: Callable[..., _Served], pki: Pki) -> None:
    one = served(ssl.CERT_REQUIRED)
    with _client(one.port, pki, pki.alice) as client:
        client.sendall(b"ping")
        pair_end, origin = one.connection()
        assert _recv_exactly(pair_end, 4) == b"ping"
        assert origin.peer == client.getsockname()  # the client's address, not the pair's
        assert origin.tls is not None
        assert origin.tls.server_name == "localhost"
        assert origin.tls.version == client.version()
        assert origin.tls.cipher == client.cipher()[0]  # type: ignore[index]  # set after the handshake
        assert origin.tls.peer_certificate is not None
        assert dict(pair[0] for pair in origin.tls.peer_certificate["subject"]) == {"commonName": "alice"}


def test_large_transfers_pass_whole_both_ways_at_once(served: Callable[..., _Served], pki: Pki) -> None:
    """Client and broker side write 24 MB each at the same time: each side's bytes arrive whole
    and in order while the other direction is back-pressured.

    The client is asyncio's TLS transport (one thread reads and writes one SSL object): an
    ``ssl.SSLSocket`` read in one thread while another writes it shares one OpenSSL object
    between threads, which OpenSSL does not allow (a CI run saw both directions end at ~10 MB)."""
    one = served()
    size = 24 * 1024 * 1024
    upstream, downstream = os.urandom(size), os.urandom(size)
    got_by_broker: list[bytes] = []

    def broker_side(pair_end: socket.socket) -> None:
        assert _recv_exactly(pair_end, 1) == b"x"
        got_by_broker.append(_recv_exactly(pair_end, size))

    def broker_writer(pair_end: socket.socket) -> None:
        pair_end.settimeout(None)  # sendall's timeout bounds the whole 24 MB; the join bounds a hang
        pair_end.sendall(downstream)

    async def client_side() -> bytes:
        context = ssl.create_default_context(cafile=str(pki.ca))
        reader, writer = await asyncio.open_connection("127.0.0.1", one.port, ssl=context,
                                                       server_hostname="localhost")
        writer.write(b"x")
        await writer.drain()
        pair_end, _origin = await asyncio.to_thread(one.connection)
        threads = [threading.Thread(target=broker_side, args=(pair_end,), daemon=True),
                   threading.Thread(target=broker_writer, args=(pair_end,), daemon=True)]
        for thread in threads:
            thread.start()

        async def send() -> None:
            writer.write(upstream)
            await writer.drain()

        sending = asyncio.create_task(send())
        received = await asyncio.wait_for(reader.readexactly(size), 4 * WAIT_S)
        await asyncio.wait_for(sending, WAIT_S)
        for thread in threads:
            await asyncio.to_thread(thread.join, 4 * WAIT_S)
        writer.close()
        return received

    got_by_client = asyncio.run(client_side())
    assert hashlib.sha256(got_by_client).digest() == hashlib.sha256(downstream).digest()
    assert len(got_by_broker) == 1
    assert hashlib.sha256(got_by_broker[0]).digest() == hashlib.sha256(upstream).digest()


def test_what_the_broker_wrote_before_closing_reaches_the_client(served: Callable[..., _Served], pki: Pki) -> None:
    one = served()
    body = os.urandom(8 * 1024 * 1024)
    with _client(one.port, pki) as client:
        client.sendall(b"x")
        pair_end, _origin = one.connection()
        _recv_exactly(pair_end, 1)

        def respond_and_close() -> None:  # the broker closes right after its last response
            pair_end.sendall(body)
            pair_end.close()

        broker_side = threading.Thread(target=respond_and_close)
        broker_side.start()
        received = bytearray()
        while chunk := client.recv(1 << 20):
            received += chunk
        broker_side.join(WAIT_S)
        assert bytes(received) == body  # then a clean end of stream (close_notify)
    _until(lambda: one.listener.pump_count == 0, "the pump thread ended")


def test_a_client_closing_mid_response_ends_the_broker_side(served: Callable[..., _Served], pki: Pki) -> None:
    """The broker side, blocked writing a response larger than every buffer, is released and then
    reads end-of-stream; once it closes, the pump ends."""
    one = served()
    client = _client(one.port, pki)
    client.sendall(b"request")
    pair_end, _origin = one.connection()
    _recv_exactly(pair_end, 7)
    written: list[int] = []

    def respond() -> None:  # 256 MiB: far more than the buffers hold, the writer blocks on the client
        for _ in range(256):
            pair_end.sendall(b"r" * (1024 * 1024))
        written.append(1)

    writer = threading.Thread(target=respond)
    writer.start()
    assert client.recv(1024)  # the response has started
    client.close()
    writer.join(WAIT_S)
    assert written, "the broker side stayed blocked on a client that went away"
    assert pair_end.recv(1024) == b""
    pair_end.close()
    _until(lambda: one.listener.pump_count == 0, "the pump thread ended")


def test_a_request_sent_just_before_the_client_half_closes_still_reaches_the_broker(
        served: Callable[..., _Served], pki: Pki) -> None:
    """acks=0 Produce then close: the bytes are handed over, then the broker reads end-of-stream."""
    one = served()
    body = os.urandom(3 * 1024 * 1024)
    with _client(one.port, pki) as client:
        client.sendall(body)
        socket.socket.shutdown(client, socket.SHUT_WR)  # TCP's half close under the TLS stream
        pair_end, _origin = one.connection()
        received = bytearray()
        while chunk := pair_end.recv(1 << 20):
            received += chunk
        assert bytes(received) == body
        pair_end.close()
        assert client.recv(1024) == b""
    _until(lambda: one.listener.pump_count == 0, "the pump thread ended")


def _handshake_fails(port: int, pki: Pki) -> bool:
    try:
        with _client(port, pki) as client:
            client.sendall(b"x")
            return client.recv(1) == b""  # TLS 1.3: the refusal arrives after the client's Finished
    except (ssl.SSLError, ConnectionError):
        return True


def test_a_failed_handshake_never_reaches_the_loop(served: Callable[..., _Served], pki: Pki) -> None:
    one = served(ssl.CERT_REQUIRED)
    with socket.create_connection(("127.0.0.1", one.port), timeout=WAIT_S) as plain:
        plain.sendall(b"\x00\x00\x00\x0aNOT A TLS CLIENT HELLO")
        with contextlib.suppress(ConnectionResetError):  # an alert perhaps, then the socket closes
            while plain.recv(1024):
                pass
        _until(lambda: one.listener.pump_count == 0, "the pump thread ended")
    assert _handshake_fails(one.port, pki)  # required client certificate missing
    _until(lambda: one.listener.pump_count == 0, "the pump thread ended")
    with _client(one.port, pki, pki.alice) as good:  # and the listener keeps serving
        good.sendall(b"ok")
        assert _recv_exactly(one.connection(0)[0], 2) == b"ok"
    assert len(one.connections) == 1


def test_closing_the_listener_cuts_a_handshake_in_progress(served: Callable[..., _Served], pki: Pki) -> None:
    one = served()
    with socket.create_connection(("127.0.0.1", one.port), timeout=WAIT_S) as silent:
        _until(lambda: one.listener.pump_count == 1, "the pump thread started")
        one.on_loop(one.listener.close)
        _until(lambda: one.listener.pump_count == 0, "the handshake was cut")
        assert silent.recv(1) == b""
    assert one.connections == []
