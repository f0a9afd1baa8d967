"""ListOffsets of a diskless partition: latest, earliest, max timestamp (KIP-734) and by time.

Answered as the single broker's ``list_offsets`` handler answers for a local log: latest (-1) is
the HW, or the LSO for read_committed; earliest (-2) and earliest local (-4, KIP-1005) the log
start, since every batch of a diskless partition is equally at hand; latest tiered (-5) is -1
(nothing is tiered: diskless data is in the object store from the start). By time: the first
batch row (offset order, from the log start) whose max timestamp reaches the target, then the
first record in it that does, read from the object store as Kafka reads one batch after its time
index; MAX_TIMESTAMP likewise finds the first batch carrying the largest timestamp (below the HW).
A result at or past the HW (LSO for read_committed) is no result, as in Kafka.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Protocol

import psycopg

from oncestream.cluster.diskless.coordinates import (
    BATCH_COLUMNS,
    BatchCoordinate,
    begin_snapshot,
    read_partition_offsets,
    row_to_batch,
)
from oncestream.cluster.diskless.metadata_access import TransactionSource
from oncestream.log.read_path import first_record_at_or_after

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5

_FIRST_REACHING = f"""
SELECT {BATCH_COLUMNS} FROM batches
 WHERE topic_id = %(t)s AND partition = %(p)s AND last_offset >= %(start)s AND base_offset < %(upper)s
   AND max_timestamp_ms >= %(ts)s
 ORDER BY base_offset LIMIT 1
"""

_FIRST_WITH_MAX = f"""
SELECT {BATCH_COLUMNS} FROM batches
 WHERE topic_id = %(t)s AND partition = %(p)s AND last_offset >= %(start)s AND base_offset < %(upper)s
 ORDER BY max_timestamp_ms DESC, base_offset LIMIT 1
"""


@dataclass(frozen=True, slots=True)
class OffsetAnswer:
    """A ListOffsets partition answer: the offset and, for timestamp lookups, the record's timestamp
    (-1, -1 when no record qualifies)."""

    offset: int
    timestamp_ms: int = -1


NO_ANSWER = OffsetAnswer(-1, -1)


class BatchReader(Protocol):
    """What a lookup needs of the reader (``DisklessReader``): its transactions and one batch's bytes."""

    @property
    def source(self) -> TransactionSource: ...

    async def load_batch(self, batch: BatchCoordinate) -> bytes:
        """The committed batch as served (base offset patched)."""
        ...


async def _one_batch(conn: psycopg.AsyncConnection[Any], query: str, params: dict[str, Any]) -> BatchCoordinate | None:
    cursor = await conn.execute(query, params)
    row = await cursor.fetchone()
    return None if row is None else row_to_batch(row)


async def list_offset(reader: BatchReader, topic_id: uuid.UUID, partition: int, timestamp: int, *,
                      read_committed: bool = False) -> OffsetAnswer:
    """The ListOffsets answer for ``timestamp`` (see the module doc). UnknownTopicOrPartitionError
    for a partition without a row; ValueError for a negative code this API does not define (the
    handler answers UNSUPPORTED_VERSION, as for a local log); the reader's errors for a batch it
    cannot read."""
    if timestamp < LATEST_TIERED_TIMESTAMP:
        raise ValueError(f"ListOffsets timestamp {timestamp} is neither a time nor a defined code")
    params: dict[str, Any] = {"t": topic_id, "p": partition}
    async with reader.source.transaction() as conn:
        await begin_snapshot(conn)
        offsets = await read_partition_offsets(conn, topic_id, partition)
        upper = offsets.last_stable_offset if read_committed else offsets.high_watermark
        if timestamp == LATEST_TIMESTAMP:
            return OffsetAnswer(upper)
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return OffsetAnswer(offsets.log_start_offset)
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return NO_ANSWER
        # Kafka finds the largest timestamp below the HW, then drops it when past the LSO.
        search_upper = offsets.high_watermark if timestamp == MAX_TIMESTAMP else upper
        params.update(start=offsets.log_start_offset, upper=search_upper, ts=timestamp)
        query = _FIRST_WITH_MAX if timestamp == MAX_TIMESTAMP else _FIRST_REACHING
        batch = await _one_batch(conn, query, params)
    if batch is None or batch.max_timestamp_ms < 0:
        return NO_ANSWER
    target_ms = batch.max_timestamp_ms if timestamp == MAX_TIMESTAMP else timestamp
    found_offset, found_ms = first_record_at_or_after(await reader.load_batch(batch), target_ms,
                                                      offsets.log_start_offset)
    if found_offset >= upper:
        return NO_ANSWER
    return OffsetAnswer(found_offset, found_ms)
