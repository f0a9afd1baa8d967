"""Requests from one broker of a cluster to another (cluster mode's broker-to-broker calls).

The transaction coordinator forwards WriteTxnMarkers of ``__consumer_offsets`` partitions to
their group coordinator (broker/cluster_markers.py); a broker receiving a transactional Produce
v12+ (KIP-890 part 2, implicit add) sends AddPartitionsToTxn to the transaction coordinator
(handlers/cluster_produce.py). Kafka's brokers do the same over their inter-broker listener.
"""

from __future__ import annotations

import asyncio
import io
import struct
from collections.abc import Callable
from typing import Any, Protocol

from oncestream.protocol.codec import reader_for, writer_for
from oncestream.protocol.length_guard import check_array_lengths
from oncestream.protocol.schemas import request_module, response_class
from oncestream.protocol.varint import read_uvarint

PEER_TIMEOUT_S = 10.0
_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhih")


class PeerEndpoints(Protocol):
    """A live broker's advertised endpoints (cluster_node.BrokerAddress)."""

    def endpoint_for(self, listener_name: str) -> tuple[str, int]:
        """(host, port) of ``listener_name``."""
        ...


class PeerRequests:
    """Requests from this broker to another broker of the cluster (WriteTxnMarkers to a group
    coordinator, AddPartitionsToTxn to a transaction coordinator): one short-lived connection
    per request, to the peer's endpoint of the listener this broker registered first. Flexible
    versions only (request header v2, response header v1); a PLAINTEXT listener (a SASL or TLS
    inter-broker listener is not supported yet: the request fails, the caller retries, logged)."""

    def __init__(self, listener_name: str, client_id: str) -> None:
        self._listener_name = listener_name
        self._client_id = client_id.encode()

    async def call(self, endpoints: PeerEndpoints, api_key: int, version: int, make: Callable[[Any], Any]) -> Any:
        """Send ``make(request module)`` to the peer; its decoded response. OSError, TimeoutError
        or asyncio.IncompleteReadError when the peer cannot be reached or answers garbage."""
        host, port = endpoints.endpoint_for(self._listener_name)
        return await asyncio.wait_for(self._call(host, port, api_key, version, make), PEER_TIMEOUT_S)

    async def _call(self, host: str, port: int, api_key: int, version: int, make: Callable[[Any], Any]) -> Any:
        request = make(request_module(api_key, version))
        buf = io.BytesIO()
        buf.write(b"\0\0\0\0")
        buf.write(_HEADER.pack(api_key, version, 1, len(self._client_id)))
        buf.write(self._client_id)
        buf.write(b"\0")  # request header v2: no tagged fields
        writer_for(type(request))(buf, request)
        frame = bytearray(buf.getbuffer())
        _SIZE.pack_into(frame, 0, len(frame) - 4)
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(frame)
            await writer.drain()
            (size,) = _SIZE.unpack(await reader.readexactly(4))
            payload = memoryview(await reader.readexactly(size))
        finally:
            writer.close()
        (correlation_id,) = _SIZE.unpack_from(payload, 0)
        if correlation_id != 1:
            raise OSError(f"{host}:{port} answered another correlation id")
        count, pos = read_uvarint(payload, 4)  # response header v1: tagged fields
        for _ in range(count):
            _tag, pos = read_uvarint(payload, pos)
            length, pos = read_uvarint(payload, pos)
            pos += length
        response_cls = response_class(api_key, version)
        check_array_lengths(response_cls, payload, pos)
        response, _ = reader_for(response_cls)(payload, pos)
        return response
