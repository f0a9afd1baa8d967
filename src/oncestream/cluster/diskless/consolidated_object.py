"""Consolidated objects: one partition's batches back to back, in the ``.log`` segment format.

Consolidation (``consolidation``) reads a partition's committed batches out of many small produce
objects and writes them into ONE object: each batch with its committed base offset written into
its header (bytes 0-7, outside the CRC), in offset order, nothing between them. That is exactly a
``.log`` file of the single broker's segments and of tiered storage (``log/segment``), so the
object can be read as a segment; offsets may have gaps (a compacted log's, or rows DeleteRecords
removed while the object was built). No offset index is written: readers find batches by the
coordinates in PostgreSQL, which record each batch's byte range.

Compacted topics (cleanup.policy containing ``compact``) are cleaned on the way with the single
broker's cleaner rules, from their one home ``log/compaction``: ``map_batch_keys`` builds the key ->
latest offset map over the batches read, ``clean_batch`` keeps the latest record per key,
tombstones until their delete horizon (KIP-534), drops data of aborted transactions and keeps
control batches and a live producer's last batch. Rewritten batches keep their offsets.

Keys are unique per attempt (``<prefix>/diskless/segments/<topic_id>-<partition>/<base:020d>-<uuid>.log``):
two brokers consolidating the same partition, or a retried upload, never overwrite each other.
Consolidated keys end in ``.log``, produce objects' in ``.batches``: the status query tells them
apart by that suffix.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from oncestream.cluster.diskless.coordinates import BatchCoordinate
from oncestream.log.compaction import AbortedData, CleaningCounters, clean_batch, map_batch_keys
from oncestream.protocol import record_batch as rb

CONSOLIDATED_SUFFIX = ".log"
SEGMENTS_DIRECTORY = "diskless/segments"


def consolidated_object_key(prefix: str, topic_id: uuid.UUID, partition: int, base_offset: int) -> str:
    """A key never used before for a consolidated object of the partition starting at ``base_offset``."""
    path = f"{SEGMENTS_DIRECTORY}/{topic_id}-{partition}/{base_offset:020d}-{uuid.uuid4().hex}{CONSOLIDATED_SUFFIX}"
    prefix = prefix.strip("/")
    return f"{prefix}/{path}" if prefix else path


@dataclass(frozen=True, slots=True)
class CompactionRules:
    """What compacting a partition's batches needs (``log.compaction.CleaningRules``)."""

    aborted_data: AbortedData
    now_ms: int
    delete_retention_ms: int
    producer_last_offsets: Mapping[int, int] = field(default_factory=dict)  # producer id -> last offset


@dataclass(frozen=True, slots=True)
class SourceBatch:
    """A committed batch as read: its row and its bytes with the committed base offset."""

    row: BatchCoordinate
    data: bytes


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a source batch went: a byte range of the new object, or nowhere (compacted away)."""

    row: BatchCoordinate
    byte_offset: int  # -1 when dropped
    byte_size: int  # 0 when dropped

    @property
    def dropped(self) -> bool:
        return self.byte_offset < 0


@dataclass(frozen=True, slots=True)
class ConsolidatedSegment:
    """The bytes of a consolidated object and where every source batch went."""

    data: bytes
    placements: tuple[Placement, ...]
    records_removed: int


def build_segment(batches: Sequence[SourceBatch], compaction: CompactionRules | None = None) -> ConsolidatedSegment:
    """Lay ``batches`` (offset order, committed base offsets in their bytes) out as one ``.log``;
    with ``compaction``, cleaned by the log cleaner's rules over exactly these batches."""
    offset_map: dict[bytes, int] = {}
    parsed = [(source, rb.parse_header(source.data)) for source in batches]
    if compaction is not None:
        for source, header in parsed:
            map_batch_keys(header, source.data, compaction.aborted_data, offset_map, {})
    counters = CleaningCounters()
    chunks: list[bytes | memoryview] = []
    placements: list[Placement] = []
    position = 0
    for source, header in parsed:
        output: bytes | memoryview | None = source.data
        if compaction is not None:
            output, _ = clean_batch(header, memoryview(source.data), offset_map, compaction, counters)
        if output is None:
            placements.append(Placement(source.row, -1, 0))
            continue
        chunks.append(output)
        placements.append(Placement(source.row, position, len(output)))
        position += len(output)
    return ConsolidatedSegment(b"".join(chunks), tuple(placements), counters.records_removed)
