"""Moving the log start of a diskless partition (DeleteRecords, retention) and releasing objects.

One transaction, run inside the caller's (``MetadataStore.run`` retries it whole): the partition
row is locked, its log start moved, the batch rows wholly below the new start deleted, and every
object those rows pointed at that no batch row points at any more becomes 'deleting' with
``delete_after = now() + grace`` (PostgreSQL's clock), the grace being longer than any fetch
(invariant 6 of docs/cluster.md: a reader holding the old coordinates still finds the bytes).
The garbage collector deletes the object after that time, then its row.

Objects are shared by partitions (a produce object holds batches of many), so two moves of
different partitions may release the same object concurrently. Each locks the objects it
released rows of (in key order, after its partition: no lock cycle) and only then asks whether
any row still points at them; under READ COMMITTED that question sees every move that committed
before the lock was granted, so the last of them marks the object, and none marks it early.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import psycopg

from oncestream.cluster.diskless.commit import DEFAULT_DELETE_GRACE_MS
from oncestream.errors import OffsetOutOfRangeError, UnknownTopicOrPartitionError

# DeleteRecords' offset -1: up to the high watermark (Kafka's DeleteRecordsRequest.HIGH_WATERMARK).
DELETE_TO_HIGH_WATERMARK = -1

_LOCK_PARTITION = """
SELECT log_start_offset, high_watermark FROM partitions
 WHERE topic_id = %(t)s AND partition = %(p)s FOR UPDATE
"""

_DELETE_BELOW = """
DELETE FROM batches WHERE topic_id = %(t)s AND partition = %(p)s AND last_offset < %(start)s
RETURNING object_key
"""

_LOCK_OBJECTS = "SELECT object_key FROM objects WHERE object_key = ANY(%(keys)s) ORDER BY object_key FOR UPDATE"

_RELEASE_UNREFERENCED = """
UPDATE objects o SET state = 'deleting', delete_after = now() + %(grace_ms)s * interval '1 millisecond'
 WHERE o.object_key = ANY(%(keys)s) AND o.state = 'live'
   AND NOT EXISTS (SELECT 1 FROM batches b WHERE b.object_key = o.object_key)
RETURNING o.object_key
"""


@dataclass(frozen=True, slots=True)
class LogStartMove:
    """What one move did."""

    log_start_offset: int  # the partition's log start afterwards
    batches_deleted: int
    objects_released: tuple[str, ...]  # now 'deleting'


async def move_log_start(conn: psycopg.AsyncConnection[Any], topic_id: uuid.UUID, partition: int,
                         new_start: int, *, delete_grace_ms: int = DEFAULT_DELETE_GRACE_MS) -> LogStartMove:
    """Move the partition's log start up to ``new_start`` (never down, never past the HW: clamped)
    inside the caller's transaction. UnknownTopicOrPartitionError for a partition without a row."""
    params: dict[str, Any] = {"t": topic_id, "p": partition}
    cursor = await conn.execute(_LOCK_PARTITION, params)
    row = await cursor.fetchone()
    if row is None:
        raise UnknownTopicOrPartitionError(f"diskless partition {topic_id}-{partition} does not exist")
    log_start, high_watermark = int(row[0]), int(row[1])
    new_start = min(new_start, high_watermark)
    if new_start <= log_start:
        return LogStartMove(log_start, 0, ())
    await conn.execute("UPDATE partitions SET log_start_offset = %(start)s WHERE topic_id = %(t)s AND partition = %(p)s",
                       {**params, "start": new_start})
    cursor = await conn.execute(_DELETE_BELOW, {**params, "start": new_start})
    deleted = await cursor.fetchall()
    released = await release_unreferenced(conn, {str(r[0]) for r in deleted if r[0] is not None},
                                          delete_grace_ms=delete_grace_ms)
    return LogStartMove(new_start, len(deleted), released)


async def release_unreferenced(conn: psycopg.AsyncConnection[Any], keys: set[str] | list[str], *,
                               delete_grace_ms: int) -> tuple[str, ...]:
    """Mark 'deleting' (after ``delete_grace_ms`` by PostgreSQL's clock) every live object of
    ``keys`` that no batch row points at any more, inside the caller's transaction, after the
    caller deleted or repointed rows that pointed at them. The objects are locked in key order
    first (the module docstring says why that makes concurrent releases safe). The keys marked,
    sorted."""
    ordered = sorted(set(keys))
    if not ordered:
        return ()
    await conn.execute(_LOCK_OBJECTS, {"keys": ordered})
    cursor = await conn.execute(_RELEASE_UNREFERENCED, {"keys": ordered, "grace_ms": delete_grace_ms})
    return tuple(sorted(str(r[0]) for r in await cursor.fetchall()))


async def delete_records(conn: psycopg.AsyncConnection[Any], topic_id: uuid.UUID, partition: int, offset: int, *,
                         delete_grace_ms: int = DEFAULT_DELETE_GRACE_MS) -> LogStartMove:
    """DeleteRecords for one partition, inside the caller's transaction: the log start becomes
    ``offset`` (``-1``: the high watermark); an offset at or below the current log start changes
    nothing (Kafka answers the current low watermark). OffsetOutOfRangeError for an offset past
    the high watermark or another negative one, as Kafka answers."""
    cursor = await conn.execute(_LOCK_PARTITION, {"t": topic_id, "p": partition})
    row = await cursor.fetchone()
    if row is None:
        raise UnknownTopicOrPartitionError(f"diskless partition {topic_id}-{partition} does not exist")
    high_watermark = int(row[1])
    if offset == DELETE_TO_HIGH_WATERMARK:
        offset = high_watermark
    if offset < 0 or offset > high_watermark:
        raise OffsetOutOfRangeError(
            f"cannot delete records of {topic_id}-{partition} before offset {offset}: the high watermark is {high_watermark}")
    return await move_log_start(conn, topic_id, partition, offset, delete_grace_ms=delete_grace_ms)
