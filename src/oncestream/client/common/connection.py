"""A blocking connection to one Kafka-protocol broker, with API version negotiation.

It frames kio request dataclasses, picks for each API the highest version both sides support
(our kio schemas, an optional cap, and the broker's ApiVersions answer), and decodes the response.
It talks to any Kafka-protocol broker, not only ours.
"""

from __future__ import annotations

import io
import socket
import ssl
import struct
from collections.abc import Callable
from types import ModuleType
from typing import Any

from oncestream.client.common.sasl import SaslClientError, SaslCredentials, authenticate_blocking
from oncestream.protocol.api_keys import API_VERSIONS_KEY, SASL_AUTHENTICATE
from oncestream.protocol.codec import reader_for, writer_for
from oncestream.protocol.length_guard import check_array_lengths
from oncestream.protocol.schemas import kio_versions, request_module, response_class
from oncestream.protocol.varint import read_uvarint

_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhih")


class BrokerUnreachableError(ConnectionError):
    """The broker could not be reached or closed the connection."""


class UnsupportedApiError(RuntimeError):
    """The broker supports no version of an API we know."""


class BrokerConnection:
    """One TCP connection; ``call`` sends a request and returns the decoded response, ``call_raw``
    the response frame undecoded."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str = "oncestream",
        timeout_s: float = 30.0,
        max_versions: dict[int, int] | None = None,
        sasl: SaslCredentials | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.host, self.port = host, port
        self._client_id = client_id.encode()
        self._max_versions = max_versions or {}
        self._correlation_id = 0
        try:
            self._sock = _open_socket(host, port, timeout_s, ssl_context)
        except OSError as exc:  # ssl.SSLError (a failed handshake) included
            raise BrokerUnreachableError(f"cannot connect to {host}:{port}: {exc}") from exc
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.broker_versions: dict[int, tuple[int, int]] = {}
        response = self._call_version(API_VERSIONS_KEY, 0, lambda m: m.ApiVersionsRequest())
        self.broker_versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        if sasl is not None:
            try:
                authenticate_blocking(lambda key, version, request: self._call_version(key, version, lambda m: request),
                                      sasl, min(2, self.broker_versions.get(SASL_AUTHENTICATE, (0, 0))[1]))
            except SaslClientError:
                self._sock.close()
                raise

    def version_for(self, api_key: int) -> int:
        """Highest version of ``api_key`` supported by kio, the cap and the broker."""
        lo, hi = kio_versions(api_key)
        hi = min(hi, self._max_versions.get(api_key, hi))
        blo, bhi = self.broker_versions.get(api_key, (0, -1))
        version = min(hi, bhi)
        if version < max(lo, blo):
            raise UnsupportedApiError(f"no common version for api {api_key}")
        return version

    def call(self, api_key: int, make: Callable[[ModuleType], Any]) -> Any:
        """Send ``make(request_module)`` at the negotiated version and return the response."""
        return self._call_version(api_key, self.version_for(api_key), make)

    def call_with_version(self, api_key: int, make: Callable[[ModuleType, int], Any]) -> Any:
        version = self.version_for(api_key)
        return self._call_version(api_key, version, lambda m: make(m, version))

    def call_raw(self, api_key: int, make: Callable[[ModuleType], Any]) -> tuple[int, memoryview, int]:
        """Send ``make(request_module)`` at the negotiated version; return the response undecoded.

        Returns (version, payload, body_offset): ``payload`` is the read-only response frame
        (without its size prefix) in the buffer it was received into, and the body starts at
        ``body_offset`` (after the correlation id and the header's tagged fields). For a reader
        that keeps parts of the frame as views instead of copying them (``fetch_response_view``).
        """
        version = self.version_for(api_key)
        correlation_id = self._send(api_key, version, make)
        payload, body_offset = self._receive(api_key, version, correlation_id)
        return version, payload, body_offset

    def _call_version(self, api_key: int, version: int, make: Callable[[ModuleType], Any]) -> Any:
        correlation_id = self._send(api_key, version, make)
        payload, pos = self._receive(api_key, version, correlation_id)
        resp_cls = response_class(api_key, version)
        check_array_lengths(resp_cls, payload, pos)  # kio would abort the process (length_guard)
        response, _ = reader_for(resp_cls)(payload, pos)
        return response

    def _send(self, api_key: int, version: int, make: Callable[[ModuleType], Any]) -> int:
        """Frame and send one request; returns its correlation id."""
        request = make(request_module(api_key, version))
        self._correlation_id += 1
        correlation_id = self._correlation_id
        buf = io.BytesIO()
        buf.write(b"\0\0\0\0")
        buf.write(_HEADER.pack(api_key, version, correlation_id, len(self._client_id)))
        buf.write(self._client_id)
        if request.__flexible__:
            buf.write(b"\0")  # header v2: no tagged fields
        writer_for(type(request))(buf, request)
        frame = buf.getbuffer()
        _SIZE.pack_into(frame, 0, len(frame) - 4)
        try:
            self._sock.sendall(frame)
        except OSError as exc:
            raise BrokerUnreachableError(f"{self.host}:{self.port}: {exc}") from exc
        finally:
            del frame
        return correlation_id

    def _receive(self, api_key: int, version: int, correlation_id: int) -> tuple[memoryview, int]:
        """The response frame to ``correlation_id`` and the offset of its body (after the
        response header: correlation id, then tagged fields in header v1)."""
        try:
            payload = self._recv_frame()
        except OSError as exc:
            raise BrokerUnreachableError(f"{self.host}:{self.port}: {exc}") from exc
        if len(payload) < 4:
            raise BrokerUnreachableError(f"{self.host}:{self.port}: response shorter than its header")
        (got_id,) = _SIZE.unpack_from(payload, 0)
        if got_id != correlation_id:
            raise BrokerUnreachableError("response correlation id mismatch")
        pos = 4
        # Flexible responses use header v1, except ApiVersions' (always v0, KIP-511).
        if response_class(api_key, version).__flexible__ and api_key != API_VERSIONS_KEY:
            count, pos = read_uvarint(payload, pos)
            for _ in range(count):
                _tag, pos = read_uvarint(payload, pos)
                size, pos = read_uvarint(payload, pos)
                pos += size
            if pos > len(payload):
                raise BrokerUnreachableError(f"{self.host}:{self.port}: response header runs past the frame")
        return payload, pos

    def _recv_exact(self, size: int) -> bytearray:
        """Exactly ``size`` bytes from the socket, received straight into one buffer.

        One allocation and no copy beyond the kernel's: a Fetch response of tens of MB was
        otherwise copied three times (chunks, their concatenation, the final bytes)."""
        buf = bytearray(size)
        view = memoryview(buf)
        got = 0
        while got < size:
            n = self._sock.recv_into(view[got:])
            if not n:
                raise BrokerUnreachableError(f"{self.host}:{self.port} closed the connection")
            got += n
        view.release()
        return buf

    def _recv_frame(self) -> memoryview:
        (size,) = _SIZE.unpack(self._recv_exact(4))
        if size < 0:
            raise BrokerUnreachableError(f"{self.host}:{self.port}: negative response size {size}")
        # Read-only: kio's reader refuses writable buffers, and views handed out (call_raw) must
        # not be able to change the frame under another view. (Receiving into pyarrow's pool
        # instead, uninitialized memory, was measured and dropped: docs/benchmarks.md.)
        return memoryview(self._recv_exact(size)).toreadonly()

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> BrokerConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _open_socket(host: str, port: int, timeout_s: float, ssl_context: ssl.SSLContext | None) -> socket.socket:
    """A TCP socket to ``host:port``, TLS-wrapped (handshake done) when ``ssl_context`` is given."""
    sock = socket.create_connection((host, port), timeout=timeout_s)
    if ssl_context is None:
        return sock
    try:
        # The host name is what the certificate is checked against (endpoint identification).
        return ssl_context.wrap_socket(sock, server_hostname=host)
    except BaseException:
        sock.close()
        raise


def parse_bootstrap(servers: str) -> tuple[str, int]:
    """First host:port of a bootstrap list."""
    first = servers.split(",")[0].strip()
    if "://" in first:
        first = first.split("://", 1)[1]
    host, _, port = first.rpartition(":")
    return host or "127.0.0.1", int(port)
