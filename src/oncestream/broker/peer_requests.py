"""Requests from one broker of a cluster to another (cluster mode's broker-to-broker calls).

The transaction coordinator forwards WriteTxnMarkers of ``__consumer_offsets`` partitions to
their group coordinator (broker/cluster_markers.py); a broker receiving a transactional Produce
v12+ (KIP-890 part 2, implicit add) sends AddPartitionsToTxn to the transaction coordinator
(handlers/cluster_produce.py). Kafka's brokers do the same over their inter-broker listener, and
so does this module: to the peer's endpoint of that listener, with its TLS and SASL
(broker/inter_broker.py: ``inter.broker.listener.name``, ``sasl.mechanism.inter.broker.protocol``,
the listener's JAAS config and stores).

Connections are kept for reuse, a few per peer endpoint: a connection serves one request at a
time (taken from the idle set, given back once answered), so concurrent calls open more. One
that failed is closed. A reused connection the peer closed while idle (its
``connections.max.idle.ms``, a restart) fails at once: the request is sent again, once, on a new
connection; both requests are idempotent at the peer (a marker written twice, a partition added
twice, change nothing). A SASL session is not reused past 85% of the lifetime the peer announced
(``connections.max.reauth.ms``, KIP-368): a new connection authenticates afresh instead.
"""

from __future__ import annotations

import asyncio
import io
import struct
import time
from collections.abc import Callable
from typing import Any, Protocol

from oncestream.broker.inter_broker import InterBrokerSecurity
from oncestream.protocol.api_keys import API_VERSIONS_KEY
from oncestream.protocol.codec import is_flexible, reader_for, writer_for
from oncestream.protocol.length_guard import check_array_lengths
from oncestream.protocol.sasl_client import REAUTH_AT_LIFETIME_SHARE, authenticate_async
from oncestream.protocol.schemas import request_module, response_class
from oncestream.protocol.varint import read_uvarint

PEER_TIMEOUT_S = 10.0
SASL_AUTHENTICATE_VERSION = 2  # every broker of the cluster runs this code: its highest version
IDLE_CONNECTIONS_PER_PEER = 4
_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhih")


class PeerEndpoints(Protocol):
    """A live broker's advertised endpoints (cluster_node.BrokerAddress)."""

    def endpoint_for(self, listener_name: str) -> tuple[str, int]:
        """(host, port) of ``listener_name``."""
        ...


class _PeerConnection:
    """One connection to a peer, TLS and SASL done: ``request`` sends one request and reads its
    answer (one at a time; the caller holds the connection exclusively)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_id: bytes) -> None:
        self._reader = reader
        self._writer = writer
        self._client_id = client_id
        self._correlation_id = 0
        self.reuse_until_monotonic: float | None = None  # SASL session lifetime; None: no limit

    @classmethod
    async def open(cls, host: str, port: int, security: InterBrokerSecurity, client_id: bytes) -> _PeerConnection:
        """Connect (TLS handshake first on SSL listeners) and authenticate (SASL listeners).
        OSError (ssl.SSLError, SaslClientError among them) when either fails."""
        context = security.ssl_context
        reader, writer = await asyncio.open_connection(host, port, ssl=context,
                                                       server_hostname=host if context is not None else None)
        conn = cls(reader, writer, client_id)
        if security.sasl is None:
            return conn
        try:
            lifetime_ms = await authenticate_async(conn.request, security.sasl, SASL_AUTHENTICATE_VERSION)
        except BaseException:
            conn.close()
            raise
        if lifetime_ms > 0:
            conn.reuse_until_monotonic = time.monotonic() + lifetime_ms * REAUTH_AT_LIFETIME_SHARE / 1000
        return conn

    def reusable(self) -> bool:
        """Still worth keeping: open, and its SASL session not near its end."""
        if self._writer.is_closing():
            return False
        return self.reuse_until_monotonic is None or time.monotonic() < self.reuse_until_monotonic

    async def request(self, api_key: int, version: int, request: Any) -> Any:
        """Send ``request`` and return its decoded response. OSError or IncompleteReadError when
        the connection fails, OSError when the answer is not this request's."""
        self._correlation_id += 1
        correlation_id = self._correlation_id
        flexible = is_flexible(api_key, version)
        buf = io.BytesIO()
        buf.write(b"\0\0\0\0")
        buf.write(_HEADER.pack(api_key, version, correlation_id, len(self._client_id)))
        buf.write(self._client_id)
        if flexible:
            buf.write(b"\0")  # request header v2: no tagged fields
        writer_for(type(request))(buf, request)
        frame = bytearray(buf.getbuffer())
        _SIZE.pack_into(frame, 0, len(frame) - 4)
        self._writer.write(frame)
        await self._writer.drain()
        (size,) = _SIZE.unpack(await self._reader.readexactly(4))
        payload = memoryview(await self._reader.readexactly(size))
        (answered,) = _SIZE.unpack_from(payload, 0)
        if answered != correlation_id:
            raise OSError(f"the peer answered correlation id {answered} to request {correlation_id}")
        pos = 4
        if flexible and api_key != API_VERSIONS_KEY:  # response header v1: tagged fields
            count, pos = read_uvarint(payload, pos)
            for _ in range(count):
                _tag, pos = read_uvarint(payload, pos)
                length, pos = read_uvarint(payload, pos)
                pos += length
        response_cls = response_class(api_key, version)
        check_array_lengths(response_cls, payload, pos)
        response, _ = reader_for(response_cls)(payload, pos)
        return response

    def close(self) -> None:
        self._writer.close()


class PeerRequests:
    """Requests from this broker to another broker of the cluster (WriteTxnMarkers to a group
    coordinator, AddPartitionsToTxn to a transaction coordinator) over the inter-broker listener
    (see the module docstring)."""

    def __init__(self, security: InterBrokerSecurity, client_id: str, *, timeout_s: float = PEER_TIMEOUT_S) -> None:
        self._security = security
        self._client_id = client_id.encode()
        self._timeout_s = timeout_s
        self._idle: dict[tuple[str, int], list[_PeerConnection]] = {}

    @property
    def listener_name(self) -> str:
        """The inter-broker listener: a peer is reached on its endpoint of this listener."""
        return self._security.listener_name

    async def call(self, endpoints: PeerEndpoints, api_key: int, version: int, make: Callable[[Any], Any]) -> Any:
        """Send ``make(request module)`` to the peer; its decoded response. OSError (a refused
        TLS handshake or SASL authentication among them), TimeoutError or
        asyncio.IncompleteReadError when the peer cannot be reached or answers garbage."""
        host, port = endpoints.endpoint_for(self._security.listener_name)
        request = make(request_module(api_key, version))
        return await asyncio.wait_for(self._call((host, port), api_key, version, request), self._timeout_s)

    async def _call(self, endpoint: tuple[str, int], api_key: int, version: int, request: Any) -> Any:
        idle = self._idle.setdefault(endpoint, [])
        while idle:
            conn = idle.pop()
            if not conn.reusable():
                conn.close()
                continue
            try:
                response = await conn.request(api_key, version, request)
            except (OSError, asyncio.IncompleteReadError):
                conn.close()  # closed by the peer while idle: once more on a new connection
                break
            except BaseException:
                conn.close()
                raise
            self._give_back(endpoint, conn)
            return response
        conn = await _PeerConnection.open(endpoint[0], endpoint[1], self._security, self._client_id)
        try:
            response = await conn.request(api_key, version, request)
        except BaseException:
            conn.close()
            raise
        self._give_back(endpoint, conn)
        return response

    def _give_back(self, endpoint: tuple[str, int], conn: _PeerConnection) -> None:
        idle = self._idle.setdefault(endpoint, [])
        if conn.reusable() and len(idle) < IDLE_CONNECTIONS_PER_PEER:
            idle.append(conn)
        else:
            conn.close()

    def close(self) -> None:
        """Close every idle connection (the broker is stopping)."""
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()
