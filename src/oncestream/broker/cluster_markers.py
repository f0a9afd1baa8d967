"""Transaction markers in cluster mode: the transaction coordinator's ``TxnMarkerWriter``.

Where each partition of a marker job goes (docs/cluster.md, "Transactions"):

- **data partitions** (diskless topics): one PostgreSQL transaction that first runs ``fenced(conn,
  lease.resource, lease.epoch, lease.incarnation)`` with the lease of the transaction's
  ``__transaction_state`` partition, then ``cluster/diskless/markers.write_markers`` for every
  partition of the job. A coordinator that lost its lease writes no marker (``LeaseLostError``);
  a partition whose topic was deleted counts as written, as Kafka skips it.
- **``__consumer_offsets`` partitions this broker's group service owns** are completed by the
  transaction service itself (``GroupService.complete_txn_offsets_async``), never reaching here.
- **``__consumer_offsets`` partitions another broker owns**: forwarded to the owner with
  WriteTxnMarkers (``MarkerForwarder``), whose handler completes the staged offsets on its group
  service (handlers/transactions.py). An owner that is not known, not reachable or not the owner
  any more makes the job fail: the coordinator's timer retries it (a repeated marker changes
  nothing).
"""

from __future__ import annotations

import asyncio
import io
import logging
import struct
from collections.abc import Callable, Sequence

from kio.schema.errors import ErrorCode

from oncestream.broker.cluster_node import BrokerAddress, ClusterNode
from oncestream.cluster.diskless.markers import TxnMarker, write_markers
from oncestream.cluster.diskless.partition_rows import Conn
from oncestream.cluster.leases.coordinator_leases import Lease, fenced
from oncestream.cluster.pg.store import MetadataStore
from oncestream.coordinator.txn import MarkerJob
from oncestream.errors import NotCoordinatorError, OnceStreamError
from oncestream.protocol.api_keys import WRITE_TXN_MARKERS
from oncestream.protocol.codec import build, reader_for, writer_for
from oncestream.protocol.length_guard import check_array_lengths
from oncestream.protocol.schemas import request_module, response_class
from oncestream.protocol.varint import read_uvarint
from oncestream.topic_partition import TopicPartition

log = logging.getLogger("oncestream.broker")

OFFSETS_TOPIC = "__consumer_offsets"
FORWARD_TIMEOUT_S = 10.0
_VERSION = 1  # WriteTxnMarkers v1: flexible (request header v2, response header v1)
_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhih")


class MarkerForwarder:
    """Sends WriteTxnMarkers (v1) for ``__consumer_offsets`` partitions to the broker that owns them.

    One short-lived connection per forward (markers of another broker's offsets partitions are
    rare: one per transaction whose group is coordinated elsewhere), over the owner's endpoint of
    the listener this broker registered first; a PLAINTEXT listener (a SASL or TLS inter-broker
    listener is not supported yet: the forward fails and the job is retried, logged)."""

    def __init__(self, listener_name: str, client_id: str) -> None:
        self._listener_name = listener_name
        self._client_id = client_id.encode()

    async def forward(self, owner: BrokerAddress, job: MarkerJob, partitions: Sequence[TopicPartition]) -> bool:
        """True when the owner answered NONE for every partition."""
        host, port = owner.endpoint_for(self._listener_name)
        try:
            codes = await asyncio.wait_for(self._send(host, port, job, partitions), FORWARD_TIMEOUT_S)
        except (OSError, TimeoutError, asyncio.IncompleteReadError, OnceStreamError) as exc:
            log.warning("forwarding markers of producer %d to %s:%d failed: %s", job.producer_id, host, port, exc)
            return False
        if any(codes):
            log.warning("markers of producer %d forwarded to %s:%d answered %s", job.producer_id, host, port, codes)
        return len(codes) == len(partitions) and not any(codes)

    async def _send(self, host: str, port: int, job: MarkerJob, partitions: Sequence[TopicPartition]) -> list[int]:
        m = request_module(WRITE_TXN_MARKERS, _VERSION)
        request = build(m.WriteTxnMarkersRequest, markers=(build(
            m.WritableTxnMarker, producer_id=job.producer_id, producer_epoch=job.producer_epoch,
            transaction_result=job.commit,
            topics=(build(m.WritableTxnMarkerTopic, name=OFFSETS_TOPIC,
                          partition_indexes=tuple(tp.partition for tp in partitions)),),
            coordinator_epoch=job.coordinator_epoch),))
        buf = io.BytesIO()
        buf.write(b"\0\0\0\0")
        buf.write(_HEADER.pack(WRITE_TXN_MARKERS, _VERSION, 1, len(self._client_id)))
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
            raise OSError("WriteTxnMarkers answer with another correlation id")
        count, pos = read_uvarint(payload, 4)  # response header v1: tagged fields
        for _ in range(count):
            _tag, pos = read_uvarint(payload, pos)
            length, pos = read_uvarint(payload, pos)
            pos += length
        response_cls = response_class(WRITE_TXN_MARKERS, _VERSION)
        check_array_lengths(response_cls, payload, pos)
        response, _ = reader_for(response_cls)(payload, pos)
        return [int(p.error_code) for marker in response.markers for t in marker.topics for p in t.partitions]


class ClusterMarkerWriter:
    """The ``TxnMarkerWriter`` of a cluster broker (see module docstring). ``offsets_owner(p)``
    names the node that coordinates ``__consumer_offsets`` partition ``p`` (the lease keeper's
    last round; None when unknown)."""

    def __init__(self, node: ClusterNode, store: MetadataStore, forwarder: MarkerForwarder, *,
                 now_ms: Callable[[], int], idle_timeout_ms: int) -> None:
        self._node = node
        self._store = store
        self._forwarder = forwarder
        self._now_ms = now_ms
        self._idle_timeout_ms = idle_timeout_ms
        self.offsets_owner: Callable[[int], int | None] = lambda partition: None

    async def write_markers(self, job: MarkerJob, lease: Lease) -> bool:
        """Write ``job``'s markers (``TxnMarkerWriter``); raises LeaseLostError when the lease is lost."""
        data = [tp for tp in job.partitions if tp.topic != OFFSETS_TOPIC]
        offsets = [tp for tp in job.partitions if tp.topic == OFFSETS_TOPIC]
        ok = True
        if data:
            ok = await self._write_data_markers(job, data, lease)
        if offsets:
            ok = await self._forward_offsets_markers(job, offsets) and ok
        return ok

    async def _write_data_markers(self, job: MarkerJob, partitions: Sequence[TopicPartition], lease: Lease) -> bool:
        try:
            topics = await self._node.topics(sorted({tp.topic for tp in partitions}))
        except OnceStreamError as exc:
            log.warning("markers of %r: the catalog cannot be read: %s", job.transactional_id, exc)
            return False
        markers = [TxnMarker(topics[tp.topic].topic_id, tp.partition, job.producer_id, job.producer_epoch, job.commit,
                             job.coordinator_epoch)
                   for tp in partitions
                   if tp.topic in topics and 0 <= tp.partition < topics[tp.topic].num_partitions]
        if not markers:
            return True  # every topic was deleted: nothing left to mark
        now_ms = self._now_ms()

        async def write(conn: Conn) -> list[ErrorCode]:
            await fenced(conn, lease.resource, lease.epoch, lease.incarnation, idle_timeout_ms=self._idle_timeout_ms)
            return [outcome.error for outcome in await write_markers(conn, markers, now_ms)]

        try:
            # A retry after a commit whose outcome is unknown writes the marker again: harmless
            # (a marker for a producer with no open transaction changes nothing but the offset).
            errors = await self._store.run(write)
        except OnceStreamError as exc:
            if isinstance(exc, NotCoordinatorError):
                raise  # LeaseLostError: the coordinator unloads the partition
            log.warning("markers of %r not written: %s", job.transactional_id, exc)
            return False
        for marker, error in zip(markers, errors, strict=True):
            if error == ErrorCode.unknown_topic_or_partition:
                continue  # deleted while the job ran
            if error != ErrorCode.none:
                log.error("marker of %r on %s-%d refused: %s", job.transactional_id, marker.topic_id,
                          marker.partition, error.name)
                return False
        return True

    async def _forward_offsets_markers(self, job: MarkerJob, partitions: Sequence[TopicPartition]) -> bool:
        by_owner: dict[int, list[TopicPartition]] = {}
        for tp in partitions:
            owner = self.offsets_owner(tp.partition)
            if owner is None or owner == self._node.node_id:
                return False  # not known yet, or ours but loading: the job is retried
            by_owner.setdefault(owner, []).append(tp)
        live = {b.node_id: b for b in await self._node.live_brokers()}
        ok = True
        for owner, tps in sorted(by_owner.items()):
            address = live.get(owner)
            if address is None:
                ok = False
                continue
            ok = await self._forwarder.forward(address, job, tps) and ok
        return ok

