"""A TCP proxy in front of a Kafka-protocol broker that can hold back chosen requests.

It reproduces the fault Jepsen used against Bufstream 0.1.0 (and Kafka, KAFKA-17754): a request
delayed in the network arrives long after its client gave up on it, when the client has already
moved on to a newer transaction. The proxy listens on 127.0.0.1 port 0, opens one upstream
connection per client connection, and forwards whole frames. It parses the request header
(api key, version, correlation id, client id) of every client frame, so a test can arm a rule
("hold the next EndTxn") and later release the held frame.

Holding is faithful to TCP: a held frame also holds every later frame of the same connection
(the byte stream is ordered), and other connections pass freely. When the client closes its
connection while a frame is held, the upstream connection stays open, so on release the frame
still reaches the broker, exactly like a segment delivered late. The broker's response to a held
request is captured (the client may be gone) and can be decoded for assertions.

For clients to stay on the proxy after bootstrapping, the broker must advertise the proxy's
address (``advertised.listeners=PLAINTEXT://127.0.0.1:<proxy port>``); the upstream address may
be given as a callable so the proxy can be started before the broker.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

HOST = "127.0.0.1"
_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhih")
MAX_FRAME_BYTES = 100 * 1024 * 1024
HOLD_CAP_S = 120.0  # a held frame is released anyway after this long (a test forgot to)
API_VERSIONS_KEY = 18


class ProxyError(RuntimeError):
    """The proxy saw something it cannot forward (a malformed frame) or a wait timed out."""


@dataclass(frozen=True)
class RequestInfo:
    """The header of one request frame seen by the proxy."""

    connection_id: int
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


class HeldRequest:
    """A rule "hold the next request matching ``predicate``" and, once matched, that request."""

    def __init__(self, predicate: Callable[[RequestInfo], bool]) -> None:
        self.predicate = predicate
        self.info: RequestInfo | None = None
        self._matched = threading.Event()
        self._released = threading.Event()
        self._forwarded = threading.Event()
        self._responded = threading.Event()
        self.response_payload: bytes | None = None  # response frame after its correlation id

    def wait_held(self, timeout_s: float) -> RequestInfo:
        """Block until a request matched the rule and is being held; return its header."""
        if not self._matched.wait(timeout_s):
            raise ProxyError(f"no request matched the hold rule within {timeout_s}s")
        assert self.info is not None
        return self.info

    @property
    def is_held(self) -> bool:
        """True between the match and the release."""
        return self._matched.is_set() and not self._released.is_set()

    def release(self) -> None:
        """Let the held frame (and everything queued behind it) go on to the broker."""
        self._released.set()

    def wait_forwarded(self, timeout_s: float) -> None:
        """Block until the released frame was written to the upstream connection."""
        if not self._forwarded.wait(timeout_s):
            raise ProxyError(f"held request not forwarded within {timeout_s}s")

    def wait_response(self, timeout_s: float) -> bytes:
        """Block until the broker answered the held request; return the raw response body."""
        if not self._responded.wait(timeout_s):
            raise ProxyError(f"no response to the held request within {timeout_s}s")
        assert self.response_payload is not None
        return self.response_payload

    def decode_response(self, timeout_s: float) -> Any:
        """The broker's answer to the held request, decoded with kio at the request's version."""
        payload = self.wait_response(timeout_s)
        assert self.info is not None
        return decode_response(self.info.api_key, self.info.api_version, payload)


def decode_response(api_key: int, api_version: int, payload: bytes) -> Any:
    """Decode a response body (the bytes after the correlation id) with kio's schemas."""
    from kio.index import load_entity_module
    from kio.schema.index import api_key_map
    from kio.serial import entity_reader
    from kio.static.constants import EntityType
    from kio.static.protocol import Entity

    module = load_entity_module(api_key_map[api_key], api_version, EntityType.response)
    cls: type[Entity] = next(
        v for v in vars(module).values()
        if isinstance(v, type) and getattr(v, "__type__", None) == EntityType.response
    )
    pos = 0
    if cls.__flexible__ and api_key != API_VERSIONS_KEY:
        count, pos = _read_uvarint(payload, pos)  # response header v1: tagged fields
        for _ in range(count):
            _tag, pos = _read_uvarint(payload, pos)
            size, pos = _read_uvarint(payload, pos)
            pos += size
    response: Any
    response, _ = entity_reader(cls)(payload, pos)
    return response


def _read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _recv_exact(sock: socket.socket, size: int) -> bytes | None:
    """``size`` bytes, or None on EOF / reset before they all arrived."""
    chunks = bytearray()
    while len(chunks) < size:
        try:
            chunk = sock.recv(min(size - len(chunks), 1 << 20))
        except OSError:
            return None
        if not chunk:
            return None
        chunks += chunk
    return bytes(chunks)


def _recv_frame(sock: socket.socket) -> bytes | None:
    """One size-prefixed frame including its size prefix, or None at EOF."""
    prefix = _recv_exact(sock, 4)
    if prefix is None:
        return None
    (size,) = _SIZE.unpack(prefix)
    if not 0 <= size <= MAX_FRAME_BYTES:
        raise ProxyError(f"frame size {size} out of bounds")
    body = _recv_exact(sock, size)
    if body is None:
        return None
    return prefix + body


def parse_request_header(connection_id: int, frame: bytes) -> RequestInfo:
    """Request header v1/v2 prefix: api key, version, correlation id, nullable client id."""
    api_key, api_version, correlation_id, client_id_len = _HEADER.unpack_from(frame, 4)
    client_id = None
    if client_id_len >= 0:
        start = 4 + _HEADER.size
        client_id = frame[start : start + client_id_len].decode("utf-8", "replace")
    return RequestInfo(connection_id, api_key, api_version, correlation_id, client_id)


class DelayProxy:
    """The proxy; ``hold_next`` arms a rule, ``requests`` lists every request header seen."""

    def __init__(self, upstream: tuple[str, int] | Callable[[], tuple[str, int]]) -> None:
        self._upstream = upstream if callable(upstream) else (lambda: upstream)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((HOST, 0))
        self._listener.listen(64)
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._rules: list[HeldRequest] = []
        # (connection id, correlation id) -> the rule holding that request, to route its response
        self._held_by_request: dict[tuple[int, int], HeldRequest] = {}
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._next_connection_id = 0
        self._closed = threading.Event()
        self.requests: list[RequestInfo] = []

    @property
    def bootstrap(self) -> str:
        """``host:port`` of the proxy, for clients and for ``advertised.listeners``."""
        return f"{HOST}:{self.port}"

    def start(self) -> DelayProxy:
        """Start accepting connections (on a daemon thread)."""
        self._spawn(self._accept_loop, "proxy-accept")
        return self

    def hold_next(self, predicate: Callable[[RequestInfo], bool]) -> HeldRequest:
        """Hold the next request frame for which ``predicate(info)`` is true (once)."""
        rule = HeldRequest(predicate)
        with self._lock:
            self._rules.append(rule)
        return rule

    def close(self) -> None:
        """Release everything, close every socket and wait briefly for the threads."""
        self._closed.set()
        with self._lock:
            rules = list(self._rules) + list(self._held_by_request.values())
            sockets = list(self._sockets)
        for rule in rules:
            rule.release()
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept loop (close() does not)
        except OSError:
            pass
        try:
            self._listener.close()
        except OSError:
            pass
        for sock in sockets:
            # shutdown first: close() alone does not wake a thread blocked in recv() on the
            # socket, and each such thread would hold close() for its whole join timeout.
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                sock.close()
            except OSError:
                pass
        for thread in self._threads:
            thread.join(timeout=2)

    def __enter__(self) -> DelayProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------------------
    def _spawn(self, target: Callable[..., None], name: str, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self._upstream(), timeout=10)
            except OSError:
                client.close()  # the broker is down: the client sees a refused-like close
                continue
            upstream.settimeout(None)
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                connection_id = self._next_connection_id
                self._next_connection_id += 1
                self._sockets += [client, upstream]
            self._spawn(self._client_to_upstream, f"proxy-c2u-{connection_id}", connection_id, client, upstream)
            self._spawn(self._upstream_to_client, f"proxy-u2c-{connection_id}", connection_id, client, upstream)

    def _match(self, info: RequestInfo) -> HeldRequest | None:
        with self._lock:
            self.requests.append(info)
            for rule in self._rules:
                if rule.predicate(info):
                    self._rules.remove(rule)
                    rule.info = info
                    self._held_by_request[(info.connection_id, info.correlation_id)] = rule
                    rule._matched.set()
                    return rule
        return None

    def _client_to_upstream(self, connection_id: int, client: socket.socket, upstream: socket.socket) -> None:
        try:
            while True:
                frame = _recv_frame(client)
                if frame is None:
                    break
                rule = self._match(parse_request_header(connection_id, frame))
                if rule is not None:
                    rule._released.wait(HOLD_CAP_S)
                try:
                    upstream.sendall(frame)
                except OSError:
                    break
                if rule is not None:
                    rule._forwarded.set()
        finally:
            # No more requests: the broker answers what it has and closes its side.
            try:
                upstream.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def _upstream_to_client(self, connection_id: int, client: socket.socket, upstream: socket.socket) -> None:
        client_gone = False
        try:
            while True:
                frame = _recv_frame(upstream)
                if frame is None:
                    break
                (correlation_id,) = _SIZE.unpack_from(frame, 4)
                with self._lock:
                    rule = self._held_by_request.pop((connection_id, correlation_id), None)
                if rule is not None:
                    rule.response_payload = frame[8:]
                    rule._responded.set()
                if not client_gone:
                    try:
                        client.sendall(frame)
                    except OSError:
                        client_gone = True  # keep reading: a held request's answer may follow
        finally:
            for sock in (client, upstream):
                try:
                    sock.close()
                except OSError:
                    pass
