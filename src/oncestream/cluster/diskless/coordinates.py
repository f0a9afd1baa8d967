"""Coordinates of a diskless fetch: which committed batches to serve, read from one PostgreSQL
snapshot, with a per-partition cache so that a consumer following the tail reads only new rows.

A fetch needs, consistently: the partition's log start, high watermark and LSO; the committed
batch rows from the one containing the fetch offset on (Kafka returns whole batches), below the
HW (read_uncommitted) or the LSO (read_committed), bounded by bytes; and, for read_committed, the
aborted transactions overlapping the returned range. All of it is read in one REPEATABLE READ,
READ ONLY transaction, so the LSO, the batches and the aborted ranges agree (invariant 5 of
docs/cluster.md: a reader never sees a batch whose coordinates are not committed, and needs no
broker-local index for read_committed).

Batch rows are immutable once committed and new ones only append, so ``CoordinateCache`` keeps
the rows already read per partition. Consolidation may later move a batch to another object; the
old object stays readable for the deletion grace period, so cached rows expire after ``ttl_ms``,
which must stay well below that grace.
"""

from __future__ import annotations

import time
import uuid
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from oncestream.cluster.diskless.metadata_access import TransactionSource
from oncestream.errors import OffsetOutOfRangeError, UnknownTopicOrPartitionError

PartitionKey = tuple[uuid.UUID, int]

# At most this many batch rows per query: a fetch of many tiny batches answers fewer bytes than
# it asked for and the consumer simply fetches again (bounds the rows one query may return).
MAX_BATCHES_PER_QUERY = 1000

# The columns of a ``batches`` row that ``row_to_batch`` reads, in its order.
BATCH_COLUMNS = ("base_offset, last_offset, object_key, inline_bytes, byte_offset, byte_size, producer_id,"
                 " is_transactional, is_control, max_timestamp_ms")


_SNAPSHOT = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"

# LSO: the first offset of the earliest open transaction (producer_states.txn_first_offset), else
# the HW; never below the log start (Kafka moves the first unstable offset up with the log start).
_OFFSETS = """
SELECT log_start_offset, high_watermark,
       greatest(log_start_offset, least(high_watermark, coalesce(
           (SELECT min(txn_first_offset) FROM producer_states
             WHERE topic_id = %(t)s AND partition = %(p)s), high_watermark)))
  FROM partitions WHERE topic_id = %(t)s AND partition = %(p)s
"""

# Whole batches from the one containing %(from)s, below %(upper)s, at most %(limit)s rows, each
# starting before %(max_bytes)s bytes were reached (the caller applies the exact byte rule).
_BATCHES = f"""
SELECT {BATCH_COLUMNS}
  FROM (SELECT b.*, sum(b.byte_size) OVER (ORDER BY b.base_offset) - b.byte_size AS bytes_before
          FROM (SELECT * FROM batches
                 WHERE topic_id = %(t)s AND partition = %(p)s
                   AND base_offset >= coalesce(
                       (SELECT max(base_offset) FROM batches
                         WHERE topic_id = %(t)s AND partition = %(p)s AND base_offset <= %(from)s),
                       %(from)s)
                   AND last_offset >= %(from)s AND base_offset < %(upper)s
                 ORDER BY base_offset LIMIT %(limit)s) b) w
 WHERE bytes_before < %(max_bytes)s
 ORDER BY base_offset
"""

# Kafka's rule (TransactionIndex.collectAbortedTxns): aborts whose range overlaps [fetch, upper).
_ABORTED = """
SELECT producer_id, first_offset, last_offset FROM aborted_txns
 WHERE topic_id = %(t)s AND partition = %(p)s AND last_offset >= %(from)s AND first_offset < %(upper)s
 ORDER BY first_offset, last_offset
"""


@dataclass(frozen=True, slots=True)
class BatchCoordinate:
    """One committed batch row: where its bytes are (an object range, or inline for markers)."""

    base_offset: int
    last_offset: int
    object_key: str | None
    inline_bytes: bytes | None
    byte_offset: int
    byte_size: int
    producer_id: int
    is_transactional: bool
    is_control: bool
    max_timestamp_ms: int

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """An aborted transaction of a partition: its first offset and its abort marker's offset."""

    producer_id: int
    first_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    """A partition's log start, high watermark (= log end) and last stable offset."""

    log_start_offset: int
    high_watermark: int
    last_stable_offset: int


@dataclass(frozen=True, slots=True)
class FetchCoordinates:
    """What one fetch of one partition serves, all from one snapshot."""

    offsets: PartitionOffsets
    batches: tuple[BatchCoordinate, ...]  # whole batches in offset order, within the byte rule
    aborted: tuple[AbortedTxn, ...]  # overlapping [fetch offset, end of batches); read_committed only


def row_to_batch(row: Sequence[Any]) -> BatchCoordinate:
    """A ``BatchCoordinate`` from a row of ``BATCH_COLUMNS``."""
    inline = row[3]
    return BatchCoordinate(
        base_offset=int(row[0]),
        last_offset=int(row[1]),
        object_key=None if row[2] is None else str(row[2]),
        inline_bytes=None if inline is None else bytes(inline),
        byte_offset=int(row[4] or 0),
        byte_size=int(row[5]),
        producer_id=int(row[6]),
        is_transactional=bool(row[7]),
        is_control=bool(row[8]),
        max_timestamp_ms=int(row[9]),
    )


async def begin_snapshot(conn: psycopg.AsyncConnection[Any]) -> None:
    """Make the transaction just opened on ``conn`` one consistent, read-only snapshot."""
    await conn.execute(_SNAPSHOT)


async def read_partition_offsets(conn: psycopg.AsyncConnection[Any], topic_id: uuid.UUID, partition: int) -> PartitionOffsets:
    """The partition's offsets; UnknownTopicOrPartitionError if it has no row."""
    cursor = await conn.execute(_OFFSETS, {"t": topic_id, "p": partition})
    row = await cursor.fetchone()
    if row is None:
        raise UnknownTopicOrPartitionError(f"diskless partition {topic_id}-{partition} does not exist")
    return PartitionOffsets(int(row[0]), int(row[1]), int(row[2]))


async def read_batch_rows(conn: psycopg.AsyncConnection[Any], topic_id: uuid.UUID, partition: int, *,
                          from_offset: int, upper_offset: int, max_bytes: int,
                          limit: int = MAX_BATCHES_PER_QUERY) -> list[BatchCoordinate]:
    """Committed batches from the one containing ``from_offset`` (or the first after it), each
    with base offset below ``upper_offset``, in offset order; rows stop once ``max_bytes`` is
    reached (the row that crosses it is included). Complete for [from_offset, last row's end)."""
    cursor = await conn.execute(_BATCHES, {"t": topic_id, "p": partition, "from": from_offset,
                                           "upper": upper_offset, "limit": limit, "max_bytes": max_bytes})
    return [row_to_batch(row) for row in await cursor.fetchall()]


async def read_aborted(conn: psycopg.AsyncConnection[Any], topic_id: uuid.UUID, partition: int,
                       from_offset: int, upper_offset: int) -> list[AbortedTxn]:
    """Aborted transactions whose range overlaps [``from_offset``, ``upper_offset``)."""
    cursor = await conn.execute(_ABORTED, {"t": topic_id, "p": partition, "from": from_offset, "upper": upper_offset})
    return [AbortedTxn(int(r[0]), int(r[1]), int(r[2])) for r in await cursor.fetchall()]


@dataclass(slots=True)
class _Run:
    """Rows known complete for offsets [start, end), loaded no earlier than ``loaded_at_ms``."""

    start: int
    end: int
    rows: list[BatchCoordinate]
    loaded_at_ms: float


def _monotonic_ms() -> float:
    return time.monotonic() * 1000.0


class CoordinateCache:
    """Committed batch rows per partition, one contiguous run each, bounded in rows (LRU over
    partitions) and in age (``ttl_ms``, below the object deletion grace: see the module doc).

    Shared by every reader of a broker; not thread-safe (the broker's event loop only).
    """

    def __init__(self, *, max_batches: int = 200_000, ttl_ms: int = 30_000,
                 clock_ms: Callable[[], float] = _monotonic_ms) -> None:
        if max_batches < 1:
            raise ValueError("the coordinate cache needs room for at least one batch")
        self._max_batches = max_batches
        self._ttl_ms = ttl_ms
        self._clock_ms = clock_ms
        self._runs: OrderedDict[PartitionKey, _Run] = OrderedDict()
        self._batch_count = 0

    @property
    def batch_count(self) -> int:
        """Rows held now (at most ``max_batches``)."""
        return self._batch_count

    def lookup(self, key: PartitionKey, offset: int) -> tuple[list[BatchCoordinate], int] | None:
        """(rows from the one containing ``offset`` to the end of the run, the run's end offset) if
        the run covers ``offset``; None otherwise."""
        run = self._runs.get(key)
        if run is None:
            return None
        if self._clock_ms() - run.loaded_at_ms > self._ttl_ms:
            self._drop(key)
            return None
        if not run.start <= offset < run.end:
            return None
        self._runs.move_to_end(key)
        first = bisect_left(run.rows, offset, key=lambda row: row.last_offset)
        return run.rows[first:], run.end

    def store(self, key: PartitionKey, from_offset: int, rows: list[BatchCoordinate]) -> None:
        """Remember ``rows``, the complete answer of a query from ``from_offset``. Joined to the
        partition's run when they overlap or touch; else the run reaching further is kept (the
        tail, which the most readers follow)."""
        if not rows:
            return
        now_ms = self._clock_ms()
        new = _Run(min(from_offset, rows[0].base_offset), rows[-1].next_offset, list(rows), now_ms)
        old = self._runs.pop(key, None)
        if old is not None:
            self._batch_count -= len(old.rows)
        if old is not None and now_ms - old.loaded_at_ms <= self._ttl_ms:
            if new.start <= old.end and old.start <= new.end:
                first, second = (old, new) if old.start <= new.start else (new, old)
                if second.end <= first.end:
                    new = first  # one run holds the other
                else:
                    cut = bisect_left(first.rows, second.start, key=lambda row: row.base_offset)
                    del first.rows[cut:]
                    first.rows.extend(second.rows)  # in place: the tail's common case is cheap
                    new = _Run(first.start, second.end, first.rows, min(first.loaded_at_ms, second.loaded_at_ms))
            elif old.end > new.end:
                new = old
        excess = len(new.rows) - self._max_batches
        if excess > 0:  # keep the newest rows of an oversized run
            del new.rows[:excess]
            new.start = new.rows[0].base_offset
        self._runs[key] = new
        self._batch_count += len(new.rows)
        while self._batch_count > self._max_batches:
            self._drop(next(iter(self._runs)))

    def forget(self, key: PartitionKey) -> None:
        """Drop the partition's rows (its log start moved, its object went missing)."""
        self._drop(key)

    def _drop(self, key: PartitionKey) -> None:
        run = self._runs.pop(key, None)
        if run is not None:
            self._batch_count -= len(run.rows)


def _select_within_bytes(rows: Sequence[BatchCoordinate], selected: list[BatchCoordinate], total_bytes: int,
                         max_bytes: int, upper_offset: int, min_one: bool) -> tuple[int, bool]:
    """Append to ``selected`` the rows (in order) Kafka's byte rule admits: each must fit in
    ``max_bytes``, except a first batch when ``min_one`` (KIP-74). (new total, stopped early)."""
    for row in rows:
        if row.base_offset >= upper_offset:
            return total_bytes, True
        if total_bytes + row.byte_size > max_bytes and not (min_one and not selected):
            return total_bytes, True
        selected.append(row)
        total_bytes += row.byte_size
    return total_bytes, False


async def read_fetch_coordinates(source: TransactionSource, cache: CoordinateCache | None, topic_id: uuid.UUID,
                                 partition: int, fetch_offset: int, max_bytes: int, *, read_committed: bool,
                                 min_one: bool = True) -> FetchCoordinates:
    """The batches one fetch serves and the partition's offsets, from one snapshot (see the module
    doc). OffsetOutOfRangeError below the log start or above the high watermark (as Kafka);
    UnknownTopicOrPartitionError for a partition without a row."""
    async with source.transaction() as conn:
        await begin_snapshot(conn)
        return await fetch_coordinates_in(conn, cache, topic_id, partition, fetch_offset, max_bytes,
                                          read_committed=read_committed, min_one=min_one)


async def fetch_coordinates_in(conn: psycopg.AsyncConnection[Any], cache: CoordinateCache | None, topic_id: uuid.UUID,
                               partition: int, fetch_offset: int, max_bytes: int, *, read_committed: bool,
                               min_one: bool = True) -> FetchCoordinates:
    """``read_fetch_coordinates`` inside a snapshot the caller opened (``begin_snapshot``), so that
    the partitions of one Fetch are read in one transaction. Its errors are raised before any
    statement fails, so the transaction stays usable for the next partition."""
    key = (topic_id, partition)
    offsets = await read_partition_offsets(conn, topic_id, partition)
    if not offsets.log_start_offset <= fetch_offset <= offsets.high_watermark:
        raise OffsetOutOfRangeError(
            f"fetch offset {fetch_offset} of {topic_id}-{partition} is outside"
            f" [{offsets.log_start_offset}, {offsets.high_watermark}]")
    upper = offsets.last_stable_offset if read_committed else offsets.high_watermark
    selected: list[BatchCoordinate] = []
    total_bytes = 0
    resume = fetch_offset
    stopped = fetch_offset >= upper
    hit = cache.lookup(key, fetch_offset) if cache is not None and not stopped else None
    if hit is not None:
        rows, resume = hit
        total_bytes, stopped = _select_within_bytes(rows, selected, total_bytes, max_bytes, upper, min_one)
    if not stopped and resume < upper:
        wanted_bytes = max_bytes - total_bytes
        if wanted_bytes > 0 or (min_one and not selected):
            rows = await read_batch_rows(conn, topic_id, partition, from_offset=resume,
                                         upper_offset=upper, max_bytes=max(wanted_bytes, 1))
            if cache is not None:
                cache.store(key, resume, rows)
            total_bytes, _ = _select_within_bytes(rows, selected, total_bytes, max_bytes, upper, min_one)
    aborted: list[AbortedTxn] = []
    if read_committed and selected:
        aborted = await read_aborted(conn, topic_id, partition, fetch_offset, selected[-1].next_offset)
    return FetchCoordinates(offsets, tuple(selected), tuple(aborted))
