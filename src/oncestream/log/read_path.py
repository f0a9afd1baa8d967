"""The partition log's read path over its segments: fetch ranges and timestamp lookups.

Pure functions over a log's segment list (oldest first), used by
:class:`~oncestream.log.partition_log.PartitionLog`, which checks the requested offsets against
the log start and end and supplies the high watermark, the LSO and the aborted transactions:

* :func:`read_batches`: whole batches from the one containing an offset (Kafka fetch semantics,
  KIP-74's first oversize batch), skipping gaps compaction left;
* :func:`offset_for_timestamp` / :func:`max_timestamp_ms`: ListOffsets by timestamp (the time
  index finds the batch, then one batch is decoded) and KIP-734's MAX_TIMESTAMP.
"""

from __future__ import annotations

import logging
import struct
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from oncestream.errors import OnceStreamError
from oncestream.log.file_range import FileRange
from oncestream.log.segment import Segment
from oncestream.protocol.record_batch import parse_header
from oncestream.protocol.records import decode_batch

# The logger of the log this read path belongs to, so its warnings keep the name they had.
log = logging.getLogger("oncestream.log.partition_log")


@dataclass(frozen=True, slots=True)
class ReadResult:
    """Whole batches for a fetch plus the partition's offsets at the time of the read."""

    chunks: list[bytes]  # whole batches, concatenated on the wire in this order
    size_bytes: int  # sum of len(chunks)
    high_watermark: int
    log_start_offset: int
    last_stable_offset: int  # first offset of the earliest open transaction, else high_watermark
    # (producer_id, first_offset) of the aborted transactions the returned range overlaps; only
    # filled for read(with_aborted=True) (read_committed fetches), else None.
    aborted_transactions: list[tuple[int, int]] | None = None
    # A zero-copy read's chunks (read(zero_copy=True), chunks then empty): FileRanges over the
    # segment files for the Fetch response writer to sendfile (bytes if out of descriptors).
    file_chunks: list[bytes | FileRange] | None = None


def segment_index_for(segments: Sequence[Segment], offset: int) -> int:
    """Index of the segment whose range holds ``offset`` (the last with base offset <= it)."""
    return bisect_right(segments, offset, key=lambda segment: segment.base_offset) - 1


def read_batches(
    segments: Sequence[Segment], fetch_offset: int, max_bytes: int, upper: int, *, min_one: bool,
    zero_copy: bool = False,
) -> tuple[list[Any], int, int]:
    """(chunks, size in bytes, offset after the last returned batch) of the whole batches from the
    one containing ``fetch_offset``, none with a base offset >= ``upper``. Stops before exceeding
    ``max_bytes`` but returns at least one batch when ``min_one`` (KIP-74). The caller has checked
    that ``fetch_offset`` lies within the log. With ``zero_copy`` the chunks are FileRanges (one per
    segment touched; bytes if the process is out of descriptors) instead of bytes read into the
    process."""
    chunks: list[Any] = []  # bytes, or (zero_copy) FileRanges and bytes
    total_bytes = 0
    offset = fetch_offset
    returned_end_offset = fetch_offset  # offset after the last returned batch
    if offset < upper:
        for segment in segments[segment_index_for(segments, offset) :]:
            if segment.base_offset >= upper:
                break
            start = max(offset, segment.base_offset)
            if segment.size_bytes == 0 or start >= segment.next_offset:
                continue  # empty, or the offset lies in a gap compaction left at its end
            extent = segment.extent(
                start,
                max_bytes - total_bytes,
                upper,
                allow_oversize_first=min_one and total_bytes == 0,
            )
            if extent.end_position > extent.start_position:
                take = segment.file_range if zero_copy else segment.read
                chunks.append(take(extent.start_position, extent.end_position))
                total_bytes += extent.end_position - extent.start_position
                returned_end_offset = extent.next_offset
            if not extent.segment_exhausted:
                break
            offset = segment.next_offset
    return chunks, total_bytes, returned_end_offset


def offset_for_timestamp(segments: Sequence[Segment], start: int, timestamp_ms: int) -> tuple[int, int] | None:
    """(offset, timestamp) of the earliest record at or after offset ``start`` with timestamp >=
    ``timestamp_ms``; None if no record is that recent. The caller has checked the log is not
    empty from ``start``."""
    for segment in segments[segment_index_for(segments, start) :]:
        found = segment.find_by_timestamp(timestamp_ms, start)
        if found is not None:
            position, size_bytes = found
            return first_record_at_or_after(segment.read(position, position + size_bytes), timestamp_ms, start)
    return None


def max_timestamp_ms(segments: Sequence[Segment], start: int) -> int:
    """The largest timestamp of the segments from the one holding ``start`` (-1 if none)."""
    return max(
        (segment.max_timestamp_ms for segment in segments[segment_index_for(segments, start) :]),
        default=-1,
    )


def first_record_at_or_after(batch: bytes, timestamp_ms: int, from_offset: int) -> tuple[int, int]:
    """(offset, timestamp) of the first record in ``batch`` reaching ``timestamp_ms`` at/after ``from_offset``."""
    header = parse_header(batch)
    try:
        for record in decode_batch(batch, verify_crc=False).records:
            if record.timestamp_ms >= timestamp_ms and record.offset >= from_offset:
                return record.offset, record.timestamp_ms
    except (OnceStreamError, ValueError, IndexError, struct.error) as exc:
        log.warning("cannot decode batch at offset %d for a timestamp lookup: %s", header.base_offset, exc)
    # Undecodable, or record timestamps that contradict the header: answer at batch granularity.
    return max(header.base_offset, from_offset), header.max_timestamp
