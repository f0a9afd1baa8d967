"""Fetch from a diskless partition: coordinates from PostgreSQL, bytes from the object store.

``DisklessReader.read`` answers what ``PartitionLog.read`` answers for a local log (the same
``ReadResult``), so the broker's Fetch handler treats both alike: whole batches from the one
containing the fetch offset, below the HW (read_uncommitted) or the LSO (read_committed), within
the byte limit except for a first batch (KIP-74), with the partition's offsets and, for
read_committed, the aborted transactions the returned range overlaps. Failures are typed errors
of this one partition (``OnceStreamError`` with the Kafka code to answer), never a crash.

A stored batch is the producer's batch as uploaded; its base offset field (bytes 0-7, outside the
CRC32C) is patched to the committed base offset when served, on a copy (cached ranges are shared).
Adjacent batches of one object are read as one range.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from oncestream.cluster.diskless.coordinates import (
    BatchCoordinate,
    CoordinateCache,
    FetchCoordinates,
    begin_snapshot,
    fetch_coordinates_in,
    read_fetch_coordinates,
)
from oncestream.cluster.diskless.metadata_access import TransactionSource
from oncestream.cluster.diskless.object_cache import ObjectRangeCache
from oncestream.cluster.diskless.offsets_query import OffsetAnswer, list_offset
from oncestream.errors import (
    OffsetOutOfRangeError,
    OnceStreamError,
    RemoteObjectNotFoundError,
    StorageError,
    UnknownTopicOrPartitionError,
)
from oncestream.log.read_path import ReadResult
from oncestream.protocol import record_batch as rb

READ_UNCOMMITTED = 0
READ_COMMITTED = 1


class DisklessObjectMissingError(StorageError):
    """A committed batch row names an object the store does not have (KAFKA_STORAGE_ERROR, which
    clients retry): a consolidation swapped it out longer ago than the grace period, or the store
    lost it."""


class DisklessBatchMismatchError(StorageError):
    """The bytes at a batch row's range are not the batch the row describes (KAFKA_STORAGE_ERROR)."""


def _ranges(batches: tuple[BatchCoordinate, ...]) -> list[list[BatchCoordinate]]:
    """Batches grouped into runs that one ranged read serves: same object, contiguous bytes.
    Inline batches (transaction markers) form runs of their own."""
    runs: list[list[BatchCoordinate]] = []
    for batch in batches:
        last = runs[-1][-1] if runs else None
        if (last is not None and batch.object_key is not None and last.object_key == batch.object_key
                and last.byte_offset + last.byte_size == batch.byte_offset):
            runs[-1].append(batch)
        else:
            runs.append([batch])
    return runs


def _served_batch(stored: bytes | memoryview, batch: BatchCoordinate) -> bytes:
    """A copy of the stored batch with its committed base offset, checked against its row."""
    if len(stored) != batch.byte_size:
        raise DisklessBatchMismatchError(
            f"batch {batch.base_offset} in {batch.object_key!r}: {len(stored)} bytes where {batch.byte_size} were committed")
    served = bytearray(stored)
    header = rb.parse_header(served)
    if header.size_bytes != batch.byte_size or header.last_offset_delta != batch.last_offset - batch.base_offset:
        raise DisklessBatchMismatchError(
            f"batch {batch.base_offset} in {batch.object_key!r}: the stored header does not match its committed row")
    rb.patch_base_offset(served, batch.base_offset)
    return bytes(served)


@dataclass(frozen=True, slots=True)
class PartitionRead:
    """One partition of a Fetch request: where to read from and its own byte limit."""

    topic_id: uuid.UUID
    partition: int
    fetch_offset: int
    max_bytes: int  # the request's partition_max_bytes


def _read_result(coordinates: FetchCoordinates, chunks: list[bytes], read_committed: bool) -> ReadResult:
    offsets = coordinates.offsets
    return ReadResult(
        chunks=chunks,
        size_bytes=sum(len(chunk) for chunk in chunks),
        high_watermark=offsets.high_watermark,
        log_start_offset=offsets.log_start_offset,
        last_stable_offset=offsets.last_stable_offset,
        aborted_transactions=[(a.producer_id, a.first_offset) for a in coordinates.aborted]
        if read_committed else None,
    )


class DisklessReader:
    """Reads diskless partitions for Fetch (see the module doc). One per broker, shared by every
    fetch; its caches (coordinates, object ranges) are the broker's only state for reads."""

    def __init__(self, source: TransactionSource, objects: ObjectRangeCache, *,
                 coordinates: CoordinateCache | None = None) -> None:
        self._source = source
        self._objects = objects
        self._coordinates = coordinates if coordinates is not None else CoordinateCache()

    @property
    def source(self) -> TransactionSource:
        """Where the reader's PostgreSQL transactions come from."""
        return self._source

    @property
    def objects(self) -> ObjectRangeCache:
        """The object range cache (its ``stats()`` are the broker's metrics of it)."""
        return self._objects

    @property
    def coordinates(self) -> CoordinateCache:
        """The coordinate cache (``forget`` a partition whose log start moved on this broker)."""
        return self._coordinates

    async def read(self, topic_id: uuid.UUID, partition: int, fetch_offset: int, max_bytes: int,
                   isolation_level: int = READ_UNCOMMITTED, *, min_one: bool = True) -> ReadResult:
        """Whole batches from ``fetch_offset`` (see the module doc). ``min_one``: return a first
        batch even when larger than ``max_bytes`` (the first partition of a response, KIP-74).

        Raises OffsetOutOfRangeError (below the log start, above the HW), UnknownTopicOrPartitionError,
        DisklessObjectMissingError, DisklessBatchMismatchError; errors of PostgreSQL propagate
        (the metadata store is down for every partition alike)."""
        read_committed = isolation_level == READ_COMMITTED
        key = (topic_id, partition)
        for attempt in range(2):
            coordinates = await read_fetch_coordinates(
                self._source, self._coordinates, topic_id, partition, fetch_offset, max_bytes,
                read_committed=read_committed, min_one=min_one)
            try:
                chunks = await self._load(coordinates)
                break
            except RemoteObjectNotFoundError as exc:
                # Cached rows may predate a consolidation that moved these batches: forget them
                # and read the coordinates afresh, once.
                self._coordinates.forget(key)
                if attempt == 1:
                    raise DisklessObjectMissingError(
                        f"diskless partition {topic_id}-{partition} at offset {fetch_offset}: {exc}") from exc
        return _read_result(coordinates, chunks, read_committed)

    async def read_many(self, reads: Sequence[PartitionRead], *, response_max_bytes: int,
                        isolation_level: int = READ_UNCOMMITTED) -> list[ReadResult | OnceStreamError]:
        """The partitions of one Fetch, in request order, their coordinates all from one snapshot
        (one PostgreSQL transaction for the whole request) and their object ranges read
        concurrently. Each partition gets at most its ``max_bytes`` and what is left of
        ``response_max_bytes``; the first partition returning data may exceed both by its first
        batch (KIP-74), as the single broker's Fetch does. Per partition: its ``ReadResult`` or the
        typed error to answer for it (OffsetOutOfRangeError, UnknownTopicOrPartitionError, the
        store's and the reader's errors). Errors of PostgreSQL propagate (every partition alike)."""
        read_committed = isolation_level == READ_COMMITTED
        planned: list[tuple[PartitionRead, int, bool, FetchCoordinates | OnceStreamError]] = []
        async with self._source.transaction() as conn:
            await begin_snapshot(conn)
            total_bytes = 0
            for read in reads:
                limit = max(min(read.max_bytes, response_max_bytes - total_bytes), 0)
                min_one = total_bytes == 0
                try:
                    coordinates = await fetch_coordinates_in(
                        conn, self._coordinates, read.topic_id, read.partition, read.fetch_offset, limit,
                        read_committed=read_committed, min_one=min_one)
                except (OffsetOutOfRangeError, UnknownTopicOrPartitionError) as exc:
                    planned.append((read, limit, min_one, exc))
                    continue
                planned.append((read, limit, min_one, coordinates))
                total_bytes += sum(batch.byte_size for batch in coordinates.batches)
        # A produce object holds the batches of many partitions back to back: one GET per span of
        # adjacent runs, started first, which the partitions' own range reads then join.
        spans = _ranges(tuple(sorted(
            (batch for *_, plan in planned if isinstance(plan, FetchCoordinates) for batch in plan.batches
             if batch.object_key is not None),
            key=lambda batch: (batch.object_key or "", batch.byte_offset))))
        prefetches = [asyncio.ensure_future(self._objects.get_range(
            str(span[0].object_key), span[0].byte_offset, span[-1].byte_offset + span[-1].byte_size))
            for span in spans if len(span) > 1]
        try:
            return list(await asyncio.gather(*(self._finish(read, limit, min_one, plan, isolation_level)
                                               for read, limit, min_one, plan in planned)))
        finally:
            await asyncio.gather(*prefetches, return_exceptions=True)  # their errors reached the joiners

    async def _finish(self, read: PartitionRead, limit: int, min_one: bool, plan: FetchCoordinates | OnceStreamError,
                      isolation_level: int) -> ReadResult | OnceStreamError:
        if isinstance(plan, OnceStreamError):
            return plan
        try:
            try:
                return _read_result(plan, await self._load(plan), isolation_level == READ_COMMITTED)
            except RemoteObjectNotFoundError:
                # As in read(): the coordinates may be stale; read this partition again on its own.
                self._coordinates.forget((read.topic_id, read.partition))
                return await self.read(read.topic_id, read.partition, read.fetch_offset, limit, isolation_level,
                                       min_one=min_one)
        except OnceStreamError as exc:
            return exc

    async def load_batch(self, batch: BatchCoordinate) -> bytes:
        """One committed batch as served (its base offset patched); RemoteObjectNotFoundError if
        its object is gone, DisklessBatchMismatchError if its bytes are not the batch."""
        (served,) = await self._load_run([batch])
        return served

    async def list_offset(self, topic_id: uuid.UUID, partition: int, timestamp: int,
                          isolation_level: int = READ_UNCOMMITTED) -> OffsetAnswer:
        """ListOffsets for one partition (``offsets_query.list_offset``)."""
        return await list_offset(self, topic_id, partition, timestamp,
                                 read_committed=isolation_level == READ_COMMITTED)

    async def _load(self, coordinates: FetchCoordinates) -> list[bytes]:
        runs = _ranges(coordinates.batches)
        loaded = await asyncio.gather(*(self._load_run(run) for run in runs))
        return [chunk for chunks in loaded for chunk in chunks]

    async def _load_run(self, run: list[BatchCoordinate]) -> list[bytes]:
        first = run[0]
        if first.object_key is None:
            if first.inline_bytes is None:
                raise DisklessBatchMismatchError(f"batch {first.base_offset} has neither an object nor inline bytes")
            return [_served_batch(first.inline_bytes, first)]
        start = first.byte_offset
        end = run[-1].byte_offset + run[-1].byte_size
        data = memoryview(await self._objects.get_range(first.object_key, start, end))
        return [_served_batch(data[b.byte_offset - start : b.byte_offset - start + b.byte_size], b) for b in run]
