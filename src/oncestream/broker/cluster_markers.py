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
import logging
from collections.abc import Callable, Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from oncestream.broker.cluster_node import BrokerAddress, ClusterNode
from oncestream.broker.peer_requests import PeerRequests
from oncestream.cluster.diskless.markers import TxnMarker, write_markers
from oncestream.cluster.diskless.partition_rows import Conn
from oncestream.cluster.leases.coordinator_leases import Lease, fenced
from oncestream.cluster.pg.store import MetadataStore
from oncestream.coordinator.txn import MarkerJob
from oncestream.errors import NotCoordinatorError, OnceStreamError
from oncestream.protocol.api_keys import WRITE_TXN_MARKERS
from oncestream.protocol.codec import build
from oncestream.topic_partition import TopicPartition

log = logging.getLogger("oncestream.broker")

OFFSETS_TOPIC = "__consumer_offsets"


class MarkerForwarder:
    """Sends WriteTxnMarkers (v1) for ``__consumer_offsets`` partitions to the broker that owns
    them (markers of another broker's offsets partitions are rare: one per transaction whose
    group is coordinated elsewhere)."""

    def __init__(self, peers: PeerRequests) -> None:
        self._peers = peers

    async def forward(self, owner: BrokerAddress, job: MarkerJob, partitions: Sequence[TopicPartition]) -> bool:
        """True when the owner answered NONE for every partition."""

        def make(m: Any) -> Any:
            return build(m.WriteTxnMarkersRequest, markers=(build(
                m.WritableTxnMarker, producer_id=job.producer_id, producer_epoch=job.producer_epoch,
                transaction_result=job.commit,
                topics=(build(m.WritableTxnMarkerTopic, name=OFFSETS_TOPIC,
                              partition_indexes=tuple(tp.partition for tp in partitions)),),
                coordinator_epoch=job.coordinator_epoch),))

        try:
            response = await self._peers.call(owner, WRITE_TXN_MARKERS, 1, make)
        except (OSError, TimeoutError, asyncio.IncompleteReadError, OnceStreamError) as exc:
            log.warning("forwarding markers of producer %d to node %d failed: %s", job.producer_id, owner.node_id, exc)
            return False
        codes = [int(p.error_code) for marker in response.markers for t in marker.topics for p in t.partitions]
        if any(codes):
            log.warning("markers of producer %d forwarded to node %d answered %s", job.producer_id, owner.node_id, codes)
        return len(codes) == len(partitions) and not any(codes)


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

