"""Asyncio connection to one Kafka-protocol broker: pipelined requests, ApiVersions negotiation.

Requests are written as soon as they are submitted; responses come back in order on a Kafka
connection, so a FIFO of pending requests matches them (the correlation id is checked as an
invariant). Reading uses ``asyncio.BufferedProtocol``: small frames are parsed out of one staging
buffer, a frame larger than that buffer is received straight into its own ``bytearray`` (a fetch
response of megabytes is copied once, not once per TCP read).

Bodies are encoded with kio's writers, except the produce request, which is the hot path and is
framed by hand in ``produce_request_frame`` (kio's pure-Python writer costs ~100 µs per request).
Responses are decoded with kio's native reader.
"""

from __future__ import annotations

import asyncio
import collections
import io
import ssl
import struct
import time
from dataclasses import dataclass
from typing import Any

from kio.schema.index import api_key_map

from oncestream.client.common.errors import BrokerResponseError, ClientInvariantError, ConnectionLostError, RequestTimedOutError
from oncestream.client.common.sasl import REAUTH_AT_LIFETIME_SHARE, SaslClientError, SaslCredentials, authenticate_async
from oncestream.protocol.api_keys import API_VERSIONS_KEY, PRODUCE, SASL_AUTHENTICATE
from oncestream.protocol.codec import reader_for, writer_for
from oncestream.protocol.length_guard import check_array_lengths
from oncestream.protocol.schemas import kio_versions, request_class, request_module, response_class
from oncestream.protocol.varint import encode_uvarint, read_uvarint

PRODUCE_KEY = PRODUCE  # the sender's name for it
_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">ihhih")  # size, api key, version, correlation id, client id length
_STAGE_BYTES = 256 * 1024
_UNSUPPORTED_VERSION = 35


class UnsupportedApiError(BrokerResponseError):
    """The broker supports no version of an API (or of the feature) the client needs."""

    def __init__(self, message: str) -> None:
        super().__init__(_UNSUPPORTED_VERSION, message)


@dataclass(slots=True)
class _Pending:
    correlation_id: int
    response_cls: type | None
    future: asyncio.Future[Any]
    flexible_response_header: bool
    deadline_monotonic: float
    decoder: Any = None
    on_response: Any = None


class Connection(asyncio.BufferedProtocol):
    """A pipelined connection; ``send`` returns a future resolved with the decoded response."""

    def __init__(self, host: str, port: int, *, node_id: int, client_id: str,
                 request_timeout_s: float = 30.0, ssl_context: ssl.SSLContext | None = None,
                 sasl: SaslCredentials | None = None) -> None:
        self.host, self.port, self.node_id = host, port, node_id
        # TLS (client/common/tls.py) when security.protocol is ssl or sasl_ssl; SASL (client/common/sasl.py)
        # over it after ApiVersions when it is sasl_plaintext or sasl_ssl.
        self.ssl_context = ssl_context
        self._sasl = sasl
        self._reauth_task: asyncio.Task[None] | None = None  # KIP-368 re-authentication in progress
        self.request_timeout_s = request_timeout_s
        self._client_id = client_id.encode()
        self._transport: asyncio.Transport | None = None
        self._pending: collections.deque[_Pending] = collections.deque()
        self._correlation_id = 0
        self._closed_error: BaseException | None = None
        self._stage = bytearray(_STAGE_BYTES)
        self._stage_view = memoryview(self._stage)
        self._stage_len = 0
        self._frame: bytearray | None = None
        self._frame_view: memoryview | None = None
        self._frame_pos = 0
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[Any]] = []
        self._on_close: list[Any] = []
        self.broker_versions: dict[int, tuple[int, int]] = {}
        # Finalized feature levels (ApiVersions v3+), e.g. {"transaction.version": 2}.
        self.finalized_features: dict[str, int] = {}

    # --- lifecycle ----------------------------------------------------------------------------

    async def open(self, timeout_s: float) -> None:
        """Connect and negotiate API versions (ApiVersions v3, falling back to v0 per KIP-511)."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout_s):  # not wait_for: see async_wait
                await self._create_connection(loop)
        except (TimeoutError, OSError) as exc:  # ssl.SSLError (a failed handshake) is an OSError
            raise ConnectionLostError(f"cannot connect to {self.host}:{self.port}: {exc!r}") from exc
        response = None
        for version in (3, 0):
            module = request_module(API_VERSIONS_KEY, version)
            kwargs = {}
            if version >= 3:
                kwargs = {"client_software_name": "oncestream", "client_software_version": "0.1"}
            try:
                async with asyncio.timeout(timeout_s):
                    response = await self.send(API_VERSIONS_KEY, version, module.ApiVersionsRequest(**kwargs))
            except TimeoutError as exc:
                self.close(RequestTimedOutError("ApiVersions timed out"))
                raise ConnectionLostError(f"{self.host}:{self.port}: ApiVersions timed out") from exc
            except _ResponseDecodeError:
                continue  # a broker answering an unknown version in v0 format: try v0
            if response is None:  # only acks=0 produces go unanswered
                raise ConnectionLostError(f"{self.host}:{self.port}: ApiVersions got no answer")
            if response.error_code == _UNSUPPORTED_VERSION and version != 0:
                continue
            break
        if response is None or response.error_code != 0:
            self.close(ConnectionLostError("ApiVersions failed"))
            raise ConnectionLostError(f"{self.host}:{self.port}: ApiVersions failed")
        self.broker_versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        self.finalized_features = {
            f.name: int(f.max_version_level) for f in getattr(response, "finalized_features", ()) or ()
        }
        if self._sasl is not None:
            await self._authenticate(self._sasl, timeout_s)

    async def _authenticate(self, creds: SaslCredentials, timeout_s: float) -> None:
        """SASL right after ApiVersions (client/common/sasl.py); a refusal closes the connection and
        surfaces as ConnectionLostError naming the reason."""
        async def send(api_key: int, version: int, request: Any) -> Any:
            async with asyncio.timeout(timeout_s):
                return await self.send(api_key, version, request)

        try:
            lifetime_ms = await authenticate_async(send, creds, self.version_for(SASL_AUTHENTICATE, 2))
        except (SaslClientError, TimeoutError, BrokerResponseError, ConnectionLostError) as exc:
            self.close(ConnectionLostError(f"SASL authentication failed: {exc}"))
            raise ConnectionLostError(f"{self.host}:{self.port}: SASL authentication failed: {exc}") from exc
        if lifetime_ms > 0 and not self.closed:
            # KIP-368: re-authenticate on this connection before the broker's session ends
            # (past it the broker closes the connection at our next request).
            loop = asyncio.get_running_loop()
            loop.call_later(lifetime_ms * REAUTH_AT_LIFETIME_SHARE / 1000, self._start_reauthentication,
                            creds, timeout_s)

    def _start_reauthentication(self, creds: SaslCredentials, timeout_s: float) -> None:
        if not self.closed:
            self._reauth_task = asyncio.get_running_loop().create_task(self._reauthenticate(creds, timeout_s))

    async def _reauthenticate(self, creds: SaslCredentials, timeout_s: float) -> None:
        try:
            await self._authenticate(creds, timeout_s)
        except ConnectionLostError:
            pass  # _authenticate closed the connection: its pending requests fail and are retried

    async def _create_connection(self, loop: asyncio.AbstractEventLoop) -> object:
        if self.ssl_context is None:
            return await loop.create_connection(lambda: self, self.host, self.port)
        # The host name is what the certificate is checked against (endpoint identification).
        return await loop.create_connection(lambda: self, self.host, self.port, ssl=self.ssl_context,
                                            server_hostname=self.host)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail_all(ConnectionLostError(f"{self.host}:{self.port} closed: {exc!r}"))

    def close(self, reason: BaseException | None = None) -> None:
        """Close the socket; every pending request fails with ``reason``."""
        if self._transport is not None:
            self._transport.close()
        self._fail_all(reason or ConnectionLostError(f"{self.host}:{self.port} closed"))

    def _fail_all(self, error: BaseException) -> None:
        if self._closed_error is None:
            self._closed_error = error
        pending, self._pending = self._pending, collections.deque()
        for p in pending:
            if not p.future.done():
                p.future.set_exception(error)
                if p.on_response is not None:
                    p.on_response(None, error)
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._drain_waiters.clear()
        callbacks, self._on_close = self._on_close, []
        for callback in callbacks:
            callback(self)

    def add_close_callback(self, callback: Any) -> None:
        """Call ``callback(connection)`` once when the connection closes."""
        if self._closed_error is not None:
            callback(self)
        else:
            self._on_close.append(callback)

    @property
    def closed(self) -> bool:
        """True once the connection failed or was closed."""
        return self._closed_error is not None

    @property
    def in_flight(self) -> int:
        """Requests sent and not yet answered."""
        return len(self._pending)

    def has_expired_request(self, now: float) -> bool:
        """Whether some unanswered request is past its deadline."""
        return any(p.deadline_monotonic < now for p in self._pending)

    # --- versions -----------------------------------------------------------------------------

    def version_for(self, api_key: int, max_version: int | None = None, min_version: int = 0) -> int:
        """Highest version of ``api_key`` supported by kio, the caller and the broker."""
        lo, hi = kio_versions(api_key)
        if max_version is not None:
            hi = min(hi, max_version)
        blo, bhi = self.broker_versions.get(api_key, (0, -1))
        version = min(hi, bhi)
        if version < max(lo, blo, min_version):
            raise UnsupportedApiError(
                f"broker {self.host}:{self.port} supports no usable version of api {api_key} "
                f"({api_key_map.get(api_key, '?')}); broker range {blo}..{bhi}"
            )
        return version

    def supports(self, api_key: int) -> bool:
        """Whether the broker advertises the API at all."""
        return api_key in self.broker_versions

    # --- sending ------------------------------------------------------------------------------

    def send(self, api_key: int, version: int, request: Any, *, timeout_s: float | None = None,
             decoder: Any = None) -> asyncio.Future[Any]:
        """Encode and send a kio request; the future resolves with the kio response.
        ``timeout_s`` overrides request.timeout.ms (JoinGroup waits for the whole rebalance);
        ``decoder(body, pos)`` replaces kio's reader for responses kio cannot read."""
        flexible = bool(request.__flexible__)
        buf = io.BytesIO()
        buf.write(b"\0" * _HEADER.size)
        buf.write(self._client_id)
        if flexible:
            buf.write(b"\0")  # request header v2: no tagged fields
        writer_for(type(request))(buf, request)
        frame = buf.getbuffer()
        correlation_id = self._next_correlation_id()
        _HEADER.pack_into(frame, 0, len(frame) - 4, api_key, version, correlation_id, len(self._client_id))
        data = bytes(frame)
        del frame
        return self._send_frame([data], api_key, version, correlation_id, True, timeout_s, decoder)

    def send_frame(
        self, api_key: int, version: int, body_parts: list[bytes], *, expect_response: bool = True,
        on_response: Any = None,
    ) -> asyncio.Future[Any]:
        """Send a request whose body the caller encoded (the produce and fetch fast paths).

        ``on_response(response, error)`` is called synchronously from the read callback as soon
        as the answer is decoded (or with the error when the connection fails), one event-loop
        iteration earlier than a future's done-callbacks: a fetcher can put its next request on
        the wire before another thread takes the GIL."""
        correlation_id = self._next_correlation_id()
        flexible = bool(request_class(api_key, version).__flexible__)
        body_size = sum(len(p) for p in body_parts)
        header = _HEADER.pack(
            _HEADER.size - 4 + len(self._client_id) + (1 if flexible else 0) + body_size,
            api_key,
            version,
            correlation_id,
            len(self._client_id),
        ) + self._client_id + (b"\0" if flexible else b"")
        future = self._send_frame([header, *body_parts], api_key, version, correlation_id,
                                  expect_response, None, None)
        if on_response is not None:
            pending = self._pending[-1] if self._pending and self._pending[-1].future is future else None
            if pending is None:  # failed at once (closed connection)
                future.add_done_callback(lambda f: on_response(None, f.exception()))
            else:
                pending.on_response = on_response
                future.add_done_callback(_retrieve)  # the callback reported any error
        return future

    def _next_correlation_id(self) -> int:
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        return self._correlation_id

    def _send_frame(
        self, parts: list[bytes], api_key: int, version: int, correlation_id: int,
        expect_response: bool, timeout_s: float | None, decoder: Any,
    ) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        if self._closed_error is not None or self._transport is None:
            future.set_exception(self._closed_error or ConnectionLostError("not connected"))
            return future
        if expect_response:
            resp_cls = response_class(api_key, version)
            # Flexible responses use header v1, except ApiVersions (always v0, KIP-511).
            flexible_header = bool(resp_cls.__flexible__) and api_key != API_VERSIONS_KEY
            timeout = self.request_timeout_s if timeout_s is None else timeout_s
            self._pending.append(
                _Pending(correlation_id, resp_cls, future, flexible_header, time.monotonic() + timeout,
                         decoder)
            )
        self._transport.writelines(parts)
        if not expect_response:
            future.set_result(None)
        return future

    async def drain(self) -> None:
        """Wait until the transport's write buffer is below its high-water mark."""
        if not self._write_paused or self._closed_error is not None:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._drain_waiters.append(waiter)
        await waiter

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._drain_waiters.clear()

    # --- receiving ----------------------------------------------------------------------------

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame_view is not None:
            return self._frame_view[self._frame_pos :]
        if self._stage_len == _STAGE_BYTES:  # cannot happen: a full stage always holds a frame
            raise AssertionError("staging buffer full")
        return self._stage_view[self._stage_len :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._frame is not None:
            self._frame_pos += nbytes
            if self._frame_pos == len(self._frame):
                view = self._frame_view
                if view is None:
                    raise ClientInvariantError("a complete frame has its view")
                self._frame = self._frame_view = None
                self._deliver(view.toreadonly())  # kio's reader wants a read-only buffer
            return
        self._stage_len += nbytes
        stage, end, pos = self._stage, self._stage_len, 0
        while end - pos >= 4:
            (size,) = _SIZE.unpack_from(stage, pos)
            if size < 4:
                self.close(ConnectionLostError(f"bad frame size {size}"))
                return
            if end - pos - 4 >= size:
                self._deliver(bytes(stage[pos + 4 : pos + 4 + size]))
                pos += 4 + size
                continue
            if size + 4 > _STAGE_BYTES - pos and size + 4 > _STAGE_BYTES // 2:
                # A big frame: receive it directly into its own buffer.
                frame = bytearray(size)
                have = end - pos - 4
                frame[:have] = stage[pos + 4 : end]
                self._frame, self._frame_view, self._frame_pos = frame, memoryview(frame), have
                pos = end
            break
        if pos:
            remaining = end - pos
            if remaining:
                stage[:remaining] = stage[pos:end]
            self._stage_len = remaining

    def eof_received(self) -> bool:
        return False

    def _deliver(self, frame: bytes | memoryview) -> None:
        if not self._pending:
            self.close(ConnectionLostError("response without a request"))
            return
        pending = self._pending.popleft()
        (correlation_id,) = _SIZE.unpack_from(frame, 0)
        if correlation_id != pending.correlation_id:
            self.close(ConnectionLostError("response correlation id mismatch"))
            if not pending.future.done():
                pending.future.set_exception(ConnectionLostError("correlation id mismatch"))
            return
        if pending.future.done():  # the caller gave up waiting; the answer is dropped
            return
        try:
            pos = 4
            if pending.flexible_response_header:
                count, pos = read_uvarint(frame, pos)
                for _ in range(count):
                    _tag, pos = read_uvarint(frame, pos)
                    size, pos = read_uvarint(frame, pos)
                    pos += size
            if pending.decoder is not None:
                response = pending.decoder(frame, pos)
            elif pending.response_cls is None:
                raise ClientInvariantError("a request that expects an answer has a decoder or a response class")
            else:
                # kio aborts the process on an array length it cannot allocate (length_guard).
                check_array_lengths(pending.response_cls, frame, pos)
                response, _ = reader_for(pending.response_cls)(frame, pos)
        except Exception as exc:  # noqa: BLE001 - kio raises assorted errors on a body it cannot parse; handed to the caller
            error = _ResponseDecodeError(f"cannot decode response: {exc!r}")
            pending.future.set_exception(error)
            if pending.on_response is not None:
                pending.on_response(None, error)
            return
        pending.future.set_result(response)
        if pending.on_response is not None:
            pending.on_response(response, None)


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark a future's exception as handled (it was delivered through ``on_response``)."""
    if not future.cancelled():
        future.exception()


class _ResponseDecodeError(ConnectionLostError):
    """A response body did not parse with the expected schema."""


# --- produce request fast path ----------------------------------------------------------------


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")


def produce_request_body(
    version: int,
    transactional_id: str | None,
    acks: int,
    timeout_ms: int,
    topics: dict[str, list[tuple[int, bytes, bytes]]],
) -> list[bytes]:
    """Encode a ProduceRequest body (v3..v12) as a list of parts; each partition's records are
    given as (index, batch header, batch records) and are not copied."""
    parts: list[bytes] = []
    flexible = version >= 9
    tid = transactional_id.encode() if transactional_id is not None else None
    if flexible:
        parts.append(b"\0" if tid is None else encode_uvarint(len(tid) + 1) + tid)
        parts.append(_ACKS_TIMEOUT.pack(acks, timeout_ms) + encode_uvarint(len(topics) + 1))
    else:
        parts.append(_I16.pack(-1) if tid is None else _I16.pack(len(tid)) + tid)
        parts.append(_ACKS_TIMEOUT.pack(acks, timeout_ms) + _I32.pack(len(topics)))
    for topic, partitions in topics.items():
        name = topic.encode()
        if flexible:
            head = encode_uvarint(len(name) + 1) + name + encode_uvarint(len(partitions) + 1)
        else:
            head = _I16.pack(len(name)) + name + _I32.pack(len(partitions))
        parts.append(head)
        for index, header, records in partitions:
            size = len(header) + len(records)
            if flexible:
                parts.append(_I32.pack(index) + encode_uvarint(size + 1) + header)
                parts.append(records)
                parts.append(b"\0")  # partition tagged fields
            else:
                parts.append(_I32.pack(index) + _I32.pack(size) + header)
                parts.append(records)
        if flexible:
            parts.append(b"\0")  # topic tagged fields
    if flexible:
        parts.append(b"\0")  # request tagged fields
    return parts


# --- fetch request fast path ------------------------------------------------------------------

_FETCH_HEAD = struct.Struct(">iiii")  # replica id, max wait, min bytes, max bytes
_I64 = struct.Struct(">q")


def fetch_request_body(
    version: int,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    isolation_level: int,
    topics: list[tuple[str, list[tuple[int, int, int]]]],
) -> list[bytes]:
    """Encode a sessionless FetchRequest body (v4..v12) for (topic, [(partition, fetch offset,
    partition max bytes)]). Written by hand because the fetcher sends one per response and
    kio's pure-Python writer would cost more than the rest of the round trip's Python work."""
    if not 4 <= version <= 12:
        raise ValueError(f"Produce v{version} is not encoded here (v4-v12)")
    flexible = version >= 12
    out = bytearray(_FETCH_HEAD.pack(-1, max_wait_ms, min_bytes, max_bytes))
    out.append(isolation_level & 0xFF)
    if version >= 7:
        out += _I32.pack(0) + _I32.pack(-1)  # no fetch session (KIP-227): id 0, epoch -1
    out += encode_uvarint(len(topics) + 1) if flexible else _I32.pack(len(topics))
    for topic, partitions in topics:
        name = topic.encode()
        out += (encode_uvarint(len(name) + 1) if flexible else _I16.pack(len(name))) + name
        out += encode_uvarint(len(partitions) + 1) if flexible else _I32.pack(len(partitions))
        for partition, offset, partition_max_bytes in partitions:
            out += _I32.pack(partition)
            if version >= 9:
                out += _I32.pack(-1)  # current leader epoch: unknown
            out += _I64.pack(offset)
            if version >= 12:
                out += _I32.pack(-1)  # last fetched epoch
            if version >= 5:
                out += _I64.pack(-1)  # log start offset (followers only)
            out += _I32.pack(partition_max_bytes)
            if flexible:
                out.append(0)
        if flexible:
            out.append(0)
    if version >= 7:
        out += encode_uvarint(1) if flexible else _I32.pack(0)  # no forgotten topics
    if version >= 11:
        out += encode_uvarint(1) if flexible else _I16.pack(0)  # rack id ""
    if flexible:
        out.append(0)
    return [bytes(out)]
