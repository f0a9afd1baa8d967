"""The TLS pump (broker/tls_pump.py) on its own: a TLS listener on an asyncio loop thread whose
connections are handed to the test as plaintext socket pair ends, and real TLS clients (Python's
``ssl`` over real sockets, port 0). Bytes pass whole both ways under back-pressure, the handshake's
facts arrive in the ConnectionOrigin, and every way a connection ends ends its thread.

Every test that serves connections runs with both byte pumps: the C one
(``oncestream._native.tls_pump``, what the broker uses when it is built) and the Python fallback.
What the client sends is Kafka frames (a size, then that many bytes), as on a broker's listener:
the C pump hands the broker whole frames. The edge cases at the end make their TLS records by hand
(a record cut short, a forged one, a frame's size split over records)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import select
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from oncestream._native import tls_pump as native_module
from oncestream.broker import tls_pump
from oncestream.broker.tls_pump import (
    BytePumpFactory,
    ConnectionOrigin,
    TlsListener,
    bind_listening_sockets,
    default_byte_pump,
    python_byte_pump,
)
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


def frame(body: bytes) -> bytes:
    """One Kafka frame: the body's size, then the body."""
    return struct.pack(">i", len(body)) + body


# The byte pumps every serving test runs with: the one the broker uses (the C pump; a test below
# checks that it is built and chosen) and the Python fallback.
BYTE_PUMPS: dict[str, BytePumpFactory] = {"c": default_byte_pump(), "python": python_byte_pump}


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


@pytest.fixture(params=sorted(BYTE_PUMPS))
def byte_pump(request: pytest.FixtureRequest) -> BytePumpFactory:
    return BYTE_PUMPS[request.param]


@pytest.fixture
def served(pki: Pki, byte_pump: BytePumpFactory) -> Iterator[Callable[..., _Served]]:
    started: list[tuple[_Served, threading.Thread]] = []

    def start(client_auth: ssl.VerifyMode = ssl.CERT_NONE, linger_s: float = WAIT_S,
              pump: BytePumpFactory = byte_pump) -> _Served:
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
                                   linger_s=linger_s, deliver=deliver, byte_pump=pump)
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
        client.sendall(frame(b"ping"))
        pair_end, origin = one.connection()
        assert _recv_exactly(pair_end, 8) == frame(b"ping")
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
    upstream = b"".join(frame(os.urandom(1024 * 1024 - 4)) for _ in range(24))  # 1 MiB requests
    downstream = os.urandom(size)
    got_by_broker: list[bytes] = []

    def broker_side(pair_end: socket.socket) -> None:
        assert _recv_exactly(pair_end, 5) == frame(b"x")
        got_by_broker.append(_recv_exactly(pair_end, size))

    def broker_writer(pair_end: socket.socket) -> None:
        pair_end.sendall(downstream)

    async def client_side() -> bytes:
        context = ssl.create_default_context(cafile=str(pki.ca))
        reader, writer = await asyncio.open_connection("127.0.0.1", one.port, ssl=context,
                                                       server_hostname="localhost")
        writer.write(frame(b"x"))
        await writer.drain()
        pair_end, _origin = await asyncio.to_thread(one.connection)
        # Blocking, before either thread uses it: sendall's timeout would bound the whole 24 MB (the
        # joins bound a hang), and a timeout changed while the other thread is in recv makes CPython
        # switch the descriptor's blocking mode under that recv (a BlockingIOError seen 1 run in 5).
        pair_end.settimeout(None)
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
        client.sendall(frame(b"x"))
        pair_end, _origin = one.connection()
        _recv_exactly(pair_end, 5)

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
    client.sendall(frame(b"request"))
    pair_end, _origin = one.connection()
    _recv_exactly(pair_end, 11)
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
    """acks=0 Produce then close: the bytes are handed over, then the broker reads end-of-stream
    (random bytes: whatever a frame's size says, everything reaches the broker once the client
    is gone)."""
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
        good.sendall(frame(b"ok"))
        assert _recv_exactly(one.connection(0)[0], 6) == frame(b"ok")
    assert len(one.connections) == 1


def test_closing_the_listener_cuts_a_handshake_in_progress(served: Callable[..., _Served], pki: Pki) -> None:
    one = served()
    with socket.create_connection(("127.0.0.1", one.port), timeout=WAIT_S) as silent:
        _until(lambda: one.listener.pump_count == 1, "the pump thread started")
        one.on_loop(one.listener.close)
        _until(lambda: one.listener.pump_count == 0, "the handshake was cut")
        assert silent.recv(1) == b""
    assert one.connections == []


# ---- the byte pumps' choice -------------------------------------------------------------------


def test_the_c_pump_is_built_and_chosen() -> None:
    """The install builds the extension (setup.py) and this Python's SSL objects pass its guards;
    without it every serving test above would run the Python pump twice."""
    assert native_module.openssl_shared_with(ssl_module_path())
    assert default_byte_pump() is not python_byte_pump
    assert tls_pump.native_byte_pump(native_module) is not None


def ssl_module_path() -> str:
    import _ssl

    return _ssl.__file__


class _NoSharedOpenssl:
    """An extension whose guard says this Python's _ssl uses another libssl."""

    UnknownLayout = native_module.UnknownLayout

    @staticmethod
    def openssl_shared_with(_path: str) -> bool:
        return False


def test_without_the_extension_the_python_pump_moves_the_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    assert tls_pump.native_byte_pump(None) is None  # not built
    assert tls_pump.native_byte_pump(_NoSharedOpenssl) is None  # type: ignore[arg-type]  # built, refused
    default_byte_pump.cache_clear()
    try:
        monkeypatch.setattr(tls_pump, "_native", None)
        assert default_byte_pump() is python_byte_pump
        default_byte_pump.cache_clear()
        monkeypatch.undo()
        monkeypatch.setenv("ONCESTREAM_NATIVE", "0")
        assert default_byte_pump() is python_byte_pump
    finally:
        default_byte_pump.cache_clear()


class _RefusingPump:
    """An extension that accepts this Python but refuses every SSL object (as the C pump does one
    whose layout it does not know)."""

    UnknownLayout = native_module.UnknownLayout

    @staticmethod
    def openssl_shared_with(_path: str) -> bool:
        return True

    @staticmethod
    def Pump(*_args: object) -> None:  # the extension's class name
        raise native_module.UnknownLayout("not this one")


def test_a_connection_the_c_pump_refuses_is_pumped_in_python(served: Callable[..., _Served], pki: Pki) -> None:
    factory = tls_pump.native_byte_pump(_RefusingPump)  # type: ignore[arg-type]
    assert factory is not None
    one = served(pump=factory)
    with _client(one.port, pki) as client:
        client.sendall(frame(b"served anyway"))
        pair_end, _origin = one.connection()
        assert _recv_exactly(pair_end, 17) == frame(b"served anyway")
        pair_end.sendall(b"answer")
        assert client.recv(6) == b"answer"


def test_the_c_pump_refuses_ssl_objects_it_cannot_drive(pki: Pki) -> None:
    """Its guards: only a server-side _ssl._SSLSocket whose handshake is done."""
    with pytest.raises(native_module.UnknownLayout):
        native_module.Pump(object(), 0, 0, 1.0)
    context = _server_context(pki)
    unstarted = context.wrap_bio(ssl.MemoryBIO(), ssl.MemoryBIO(), server_side=True)
    with pytest.raises(native_module.UnknownLayout):
        native_module.Pump(unstarted._sslobj, 0, 0, 1.0)  # type: ignore[attr-defined]
    client = ssl.create_default_context(cafile=str(pki.ca)).wrap_bio(
        ssl.MemoryBIO(), ssl.MemoryBIO(), server_hostname="localhost")
    with pytest.raises(native_module.UnknownLayout):
        native_module.Pump(client._sslobj, 0, 0, 1.0)  # type: ignore[attr-defined]


# ---- edges, with TLS records made by hand -----------------------------------------------------


class _RecordClient:
    """A TLS client over a plain socket: the test makes its records (``record``) and sends what it
    likes of them, whole, cut short or forged."""

    def __init__(self, port: int, pki: Pki) -> None:
        context = ssl.create_default_context(cafile=str(pki.ca))
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_hostname="localhost")
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self.sock.sendall(self.outgoing.read())
                data = self.sock.recv(65536)
                assert data, "the server closed during the handshake"
                self.incoming.write(data)
        self.sock.sendall(self.outgoing.read())  # the client's Finished

    def record(self, plaintext: bytes) -> bytes:
        """``plaintext`` (at most 16 KiB) as one TLS record."""
        assert len(plaintext) <= 16384
        self.tls.write(plaintext)
        return self.outgoing.read()

    def records(self, plaintext: bytes, size: int) -> bytes:
        """``plaintext`` as records of ``size`` bytes each."""
        return b"".join(self.record(plaintext[i:i + size]) for i in range(0, len(plaintext), size))

    def close(self) -> None:
        self.sock.close()


def _read_to_end(sock: socket.socket) -> bytes:
    out = bytearray()
    while chunk := sock.recv(1 << 20):
        out += chunk
    return bytes(out)


def test_a_client_closing_mid_record_hands_over_what_came_before(
        served: Callable[..., _Served], pki: Pki) -> None:
    one = served()
    client = _RecordClient(one.port, pki)
    whole = client.record(frame(b"first"))
    cut = client.record(frame(b"second, never complete"))
    client.sock.sendall(whole + cut[:len(cut) // 2])
    client.close()
    pair_end, _origin = one.connection()
    assert _read_to_end(pair_end) == frame(b"first")
    pair_end.close()
    _until(lambda: one.listener.pump_count == 0, "the pump thread ended")


def test_a_forged_record_ends_its_connection_and_the_listener_serves_others(
        served: Callable[..., _Served], pki: Pki) -> None:
    one = served()
    bad = _RecordClient(one.port, pki)
    bad_end, _origin = one.connection(0)
    with _client(one.port, pki) as good:
        good.sendall(frame(b"before"))
        good_end, _origin = one.connection(1)
        assert _recv_exactly(good_end, 10) == frame(b"before")
        genuine = bad.record(frame(b"genuine"))  # records in order: each one's sequence number counts
        forged = bytearray(bad.record(frame(b"forged")))
        forged[-1] ^= 1  # the AEAD tag no longer matches
        bad.sock.sendall(genuine + bytes(forged) + bad.record(frame(b"after")))
        assert _read_to_end(bad_end) == frame(b"genuine")  # then end-of-stream: nothing after the forgery
        bad_end.close()
        with contextlib.suppress(ConnectionResetError):
            while bad.sock.recv(65536):  # the pump closes the TCP connection (its alert, perhaps)
                pass
        bad.close()
        good.sendall(frame(b"after"))
        assert _recv_exactly(good_end, 9) == frame(b"after")
        good_end.sendall(b"still served")
        assert _recv_exactly(good, 12) == b"still served"
    good_end.close()
    _until(lambda: one.listener.pump_count == 0, "the pump threads ended")


def test_frames_of_every_shape_arrive_whole(served: Callable[..., _Served], pki: Pki) -> None:
    """Empty frames, sizes split over records, frames far larger than what the C pump holds back
    (256 KiB), records smaller and larger than frames; then a negative size (not Kafka): what follows
    still reaches the broker."""
    one = served()
    client = _RecordClient(one.port, pki)
    bodies = [b"", b"a", os.urandom(3000), os.urandom(300 * 1024), b"", os.urandom(1024 * 1024 + 7), b"z"]
    stream = b"".join(frame(body) for body in bodies)
    pair_end, _origin = one.connection()
    sent = 0
    for size in (1, 2, 3, 5, 3000, 16384):  # record sizes, taking turns
        piece = stream[sent:sent + size * 40]
        client.sock.sendall(client.records(piece, size))
        sent += len(piece)
    client.sock.sendall(client.records(stream[sent:], 16384))
    assert _recv_exactly(pair_end, len(stream)) == stream
    unframed = struct.pack(">i", -1) + b"not a kafka frame"
    client.sock.sendall(client.record(unframed))
    assert _recv_exactly(pair_end, len(unframed)) == unframed
    client.close()
    assert pair_end.recv(1024) == b""
    pair_end.close()
    _until(lambda: one.listener.pump_count == 0, "the pump thread ended")


def test_a_broker_closing_while_requests_are_pending_ends_the_pump(
        served: Callable[..., _Served], pki: Pki) -> None:
    """The client keeps sending (far more than the buffers hold) and the broker closes its end
    after a few bytes: the pump drops what the broker will never read and ends."""
    one = served()
    client = _client(one.port, pki)
    client.sendall(frame(b"first"))
    pair_end, _origin = one.connection()
    assert _recv_exactly(pair_end, 9) == frame(b"first")
    failures: list[BaseException] = []

    def flood() -> None:
        try:
            for _ in range(256):
                client.sendall(frame(os.urandom(1024 * 1024 - 4)))
        except (OSError, ssl.SSLError) as exc:  # the connection went away mid-flood: expected
            failures.append(exc)

    sender = threading.Thread(target=flood, daemon=True)
    sender.start()
    pair_end.recv(1024)  # some of the flood arrived
    pair_end.close()
    _until(lambda: one.listener.pump_count == 0, "the pump thread ended")
    sender.join(WAIT_S)
    assert not sender.is_alive()
    assert failures, "256 MiB went through a connection whose broker side had closed"
    client.close()


@pytest.mark.parametrize("byte_pump", [BYTE_PUMPS["c"]], ids=["c"])
def test_a_client_that_stops_reading_is_cut_after_the_linger(served: Callable[..., _Served], pki: Pki) -> None:
    """The broker writes until nothing more fits (the client does not read) and closes: the pump
    gives up on what is still pending after linger_s and ends; the client then gets less than the
    broker wrote. The C pump only: the Python pump stops reading the pair while the client is
    behind and so does not see the broker close until the client reads (a known gap of the
    fallback)."""
    one = served(linger_s=0.2)
    client = _client(one.port, pki)
    client.sendall(frame(b"x"))
    pair_end, _origin = one.connection()
    _recv_exactly(pair_end, 5)
    pair_end.setblocking(False)
    written = 0
    chunk = b"r" * (1024 * 1024)
    while select.select([], [pair_end], [], 5.0)[1]:  # until the pair stays full (how much to write, not a claim)
        with contextlib.suppress(BlockingIOError):
            written += pair_end.send(chunk)
    pair_end.close()
    _until(lambda: one.listener.pump_count == 0, "the pump thread ended")
    received = 0
    with contextlib.suppress(ConnectionResetError, ssl.SSLError):
        while data := client.recv(1 << 20):
            received += len(data)
    client.close()
    assert received < written


def test_closing_the_listener_ends_a_connection_whose_client_left_and_broker_stays(
        served: Callable[..., _Served], pki: Pki) -> None:
    """The pump of a client that closed waits on the pair alone, for the broker to close its end; a
    shutdown of the TCP socket cannot wake that wait (the CI of stop 36 hung there once, when the
    pump read the end-of-stream of the listener's own shutdown mid-transfer). Closing the listener
    must still end it while the broker keeps its end open."""
    one = served()
    client = _client(one.port, pki)
    client.sendall(frame(b"x"))
    pair_end, _origin = one.connection()
    _recv_exactly(pair_end, 5)
    client.close()
    assert pair_end.recv(1) == b""  # the pump saw the client go and now waits on the broker
    one.on_loop(one.listener.close)
    _until(lambda: one.listener.pump_count == 0, "the pump thread ended")


def test_closing_the_listener_ends_established_connections(served: Callable[..., _Served], pki: Pki) -> None:
    one = served()
    with _client(one.port, pki) as client:
        client.sendall(frame(b"x"))
        pair_end, _origin = one.connection()
        _recv_exactly(pair_end, 5)
        one.on_loop(one.listener.close)
        _until(lambda: one.listener.pump_count == 0, "the pump thread ended")
        with contextlib.suppress(ConnectionResetError, ssl.SSLError):
            assert client.recv(1024) == b""
