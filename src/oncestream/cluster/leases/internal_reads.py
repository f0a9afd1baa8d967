"""Reading the coordinators' internal topics as a consumer would (Fetch, ListOffsets).

In cluster mode ``__consumer_offsets``, ``__transaction_state`` and ``__share_group_state`` are rows
of ``coordinator_records`` (pg_internal_topic.py): the latest value per key with the offset it was
appended at, i.e. exactly what compaction of the topic keeps. Tools that read these topics
(``kafka-console-consumer --formatter ...OffsetsMessageFormatter``, lag monitors such as Burrow)
see that compacted log: the rows in offset order, with gaps where keys were overwritten or
deleted, and the high watermark ``coordinator_partitions.next_offset``. Reads need no lease: only
writes are fenced, and a read sees committed rows only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from oncestream.cluster.leases.coordinator_leases import TransactionSource


@dataclass(frozen=True)
class InternalRange:
    """Rows of one internal partition from an offset on: (offset, key, value) in offset order, all
    below ``next_offset`` (the partition's high watermark when they were read)."""

    records: list[tuple[int, bytes, bytes]]
    next_offset: int


async def read_internal_range(store: TransactionSource, topic: str, partition: int, from_offset: int,
                              max_records: int) -> InternalRange:
    """At most ``max_records`` rows of ``topic``/``partition`` at or after ``from_offset``. The high
    watermark is read first and bounds the rows, so a row appended in between (its offset is at or
    past it) is not returned ahead of the watermark that covers it."""
    async with store.transaction() as conn:
        next_offset = await _next_offset(conn, topic, partition)
        cursor = await conn.execute(
            'SELECT "offset", key, value FROM coordinator_records WHERE topic = %s AND partition = %s'
            ' AND "offset" >= %s AND "offset" < %s ORDER BY "offset" LIMIT %s',
            (topic, partition, from_offset, next_offset, max_records))
        rows: list[Any] = await cursor.fetchall()
    return InternalRange([(int(r[0]), bytes(r[1]), bytes(r[2])) for r in rows], next_offset)


async def internal_next_offset(store: TransactionSource, topic: str, partition: int) -> int:
    """The high watermark of one internal partition (0 before its first record)."""
    async with store.transaction() as conn:
        return await _next_offset(conn, topic, partition)


async def _next_offset(conn: Any, topic: str, partition: int) -> int:
    cursor = await conn.execute(
        "SELECT next_offset FROM coordinator_partitions WHERE topic = %s AND partition = %s", (topic, partition))
    row = await cursor.fetchone()
    return int(row[0]) if row is not None else 0
