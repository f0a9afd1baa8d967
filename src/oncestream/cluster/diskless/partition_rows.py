"""What the commit and the marker writer read and write of a partition's rows, in one place.

Both lock the partitions they touch (``lock_partitions``: ``FOR UPDATE`` in (topic_id, partition)
order, so two brokers committing the same partitions wait for each other instead of deadlocking),
load the producers' rows into the single broker's ``ProducerEntry`` (so the idempotence and epoch
rules of ``log/producer_state`` apply unchanged), and write back what changed, the new high
watermarks and the notification readers wake up on.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import TupleRow

from oncestream.log.producer_state import MAX_BATCHES_PER_PRODUCER, NO_OFFSET, BatchMetadata, ProducerEntry

Conn = psycopg.AsyncConnection[TupleRow]
TopicPartitionKey = tuple[uuid.UUID, int]
ProducerKey = tuple[uuid.UUID, int, int]  # topic_id, partition, producer_id

APPENDS_CHANNEL = "oncestream_appends"
_NOTIFY_PAYLOAD_MAX_BYTES = 7000  # PostgreSQL refuses payloads of 8000 bytes and more


@dataclass(slots=True)
class LockedPartition:
    """A partition's log state, locked for the rest of the transaction."""

    log_start_offset: int
    high_watermark: int  # the next offset to assign
    initial_high_watermark: int


async def lock_partitions(conn: Conn, keys: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, LockedPartition]:
    """Lock the existing partitions among ``keys`` in (topic_id, partition) order; missing ones
    (a deleted topic, a partition that never existed) are absent from the result."""
    ordered = sorted(set(keys))
    cursor = await conn.execute(
        "SELECT p.topic_id, p.partition, p.log_start_offset, p.high_watermark FROM partitions p"
        " JOIN unnest(%s::uuid[], %s::int[]) AS k(topic_id, partition)"
        "   ON p.topic_id = k.topic_id AND p.partition = k.partition"
        " ORDER BY p.topic_id, p.partition FOR UPDATE OF p",
        ([k[0] for k in ordered], [k[1] for k in ordered]),
    )
    locked: dict[TopicPartitionKey, LockedPartition] = {}
    for topic_id, partition, log_start_offset, high_watermark in await cursor.fetchall():
        locked[(topic_id, partition)] = LockedPartition(log_start_offset, high_watermark, high_watermark)
    return locked


_PRODUCER_COLUMNS = ("s.topic_id, s.partition, s.producer_id, s.producer_epoch, s.recent_batches,"
                     " s.txn_first_offset, s.last_timestamp_ms, s.coordinator_epoch")


def _entry_from_row(producer_id: int, epoch: int, recent: list[list[int]], txn_first_offset: int | None,
                    last_timestamp_ms: int, coordinator_epoch: int) -> ProducerEntry:
    return ProducerEntry(
        producer_id,
        epoch,
        [BatchMetadata(*item) for item in recent],
        last_timestamp_ms=last_timestamp_ms,
        coordinator_epoch=coordinator_epoch,
        current_txn_first_offset=NO_OFFSET if txn_first_offset is None else txn_first_offset,
    )


async def load_producers(conn: Conn, keys: Iterable[ProducerKey]) -> dict[ProducerKey, ProducerEntry]:
    """The stored state of these producers (call after locking their partitions)."""
    wanted = sorted(set(keys))
    if not wanted:
        return {}
    cursor = await conn.execute(
        f"SELECT {_PRODUCER_COLUMNS} FROM producer_states s"
        " JOIN unnest(%s::uuid[], %s::int[], %s::bigint[]) AS k(topic_id, partition, producer_id)"
        "   ON s.topic_id = k.topic_id AND s.partition = k.partition AND s.producer_id = k.producer_id",
        ([k[0] for k in wanted], [k[1] for k in wanted], [k[2] for k in wanted]),
    )
    found: dict[ProducerKey, ProducerEntry] = {}
    for topic_id, partition, producer_id, *state in await cursor.fetchall():
        found[(topic_id, partition, producer_id)] = _entry_from_row(producer_id, *state)
    return found


async def partition_producers(conn: Conn, keys: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, list[ProducerEntry]]:
    """Every producer these partitions remember, by partition (DescribeProducers), ordered by
    producer id; a partition without producers maps to an empty list. A plain read: each row is
    as its last commit left it."""
    wanted = sorted(set(keys))
    found: dict[TopicPartitionKey, list[ProducerEntry]] = {key: [] for key in wanted}
    if not wanted:
        return found
    cursor = await conn.execute(
        f"SELECT {_PRODUCER_COLUMNS} FROM producer_states s"
        " JOIN unnest(%s::uuid[], %s::int[]) AS k(topic_id, partition)"
        "   ON s.topic_id = k.topic_id AND s.partition = k.partition"
        " ORDER BY s.topic_id, s.partition, s.producer_id",
        ([k[0] for k in wanted], [k[1] for k in wanted]),
    )
    for topic_id, partition, producer_id, *state in await cursor.fetchall():
        found[(topic_id, partition)].append(_entry_from_row(producer_id, *state))
    return found


async def store_producers(conn: Conn, entries: dict[ProducerKey, ProducerEntry]) -> None:
    """Write these producers' state back (insert or replace)."""
    if not entries:
        return
    rows: list[tuple[Any, ...]] = []
    for (topic_id, partition, producer_id), entry in sorted(entries.items()):
        recent = [[b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp_ms]
                  for b in entry.batches[-MAX_BATCHES_PER_PRODUCER:]]
        txn_first = None if entry.current_txn_first_offset == NO_OFFSET else entry.current_txn_first_offset
        rows.append((topic_id, partition, producer_id, entry.epoch, json.dumps(recent), txn_first,
                     entry.last_timestamp_ms, entry.coordinator_epoch))
    async with conn.cursor() as cursor:
        await cursor.executemany(
            "INSERT INTO producer_states (topic_id, partition, producer_id, producer_epoch, recent_batches,"
            " txn_first_offset, last_timestamp_ms, coordinator_epoch) VALUES (%s, %s, %s, %s, %s::jsonb, %s, %s, %s)"
            " ON CONFLICT (topic_id, partition, producer_id) DO UPDATE SET"
            " producer_epoch = EXCLUDED.producer_epoch, recent_batches = EXCLUDED.recent_batches,"
            " txn_first_offset = EXCLUDED.txn_first_offset, last_timestamp_ms = EXCLUDED.last_timestamp_ms,"
            " coordinator_epoch = EXCLUDED.coordinator_epoch",
            rows,
        )


async def store_high_watermarks(conn: Conn, partitions: dict[TopicPartitionKey, LockedPartition]) -> list[TopicPartitionKey]:
    """Write the moved high watermarks; the partitions that moved, in key order."""
    moved = sorted(key for key, p in partitions.items() if p.high_watermark != p.initial_high_watermark)
    if moved:
        await conn.execute(
            "UPDATE partitions p SET high_watermark = k.hw"
            " FROM unnest(%s::uuid[], %s::int[], %s::bigint[]) AS k(topic_id, partition, hw)"
            " WHERE p.topic_id = k.topic_id AND p.partition = k.partition",
            ([k[0] for k in moved], [k[1] for k in moved], [partitions[k].high_watermark for k in moved]),
        )
    return moved


def notify_payload(moved: Sequence[TopicPartitionKey]) -> str:
    """``<topic_id>:<partition>,...``; '' ("anything may have changed") when it would be too long."""
    payload = ",".join(f"{topic_id}:{partition}" for topic_id, partition in moved)
    return payload if len(payload.encode()) < _NOTIFY_PAYLOAD_MAX_BYTES else ""


async def notify_appends(conn: Conn, moved: Sequence[TopicPartitionKey]) -> None:
    """Wake readers of these partitions once the transaction commits (a wake-up only)."""
    if moved:
        await conn.execute("SELECT pg_notify(%s, %s)", (APPENDS_CHANNEL, notify_payload(moved)))


@dataclass(frozen=True, slots=True)
class BatchRow:
    """One ``batches`` row: a committed batch, in an object's byte range or inline (markers)."""

    topic_id: uuid.UUID
    partition: int
    base_offset: int
    last_offset: int
    object_key: str | None
    inline_bytes: bytes | None
    byte_offset: int
    byte_size: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_sequence: int
    is_transactional: bool
    is_control: bool
    timestamp_type: int
    max_timestamp_ms: int
    append_time_ms: int


async def insert_batches(conn: Conn, rows: Sequence[BatchRow]) -> None:
    """Insert the rows (their offsets were assigned under the partitions' locks)."""
    if not rows:
        return
    async with conn.cursor() as cursor:
        await cursor.executemany(
            "INSERT INTO batches (topic_id, partition, base_offset, last_offset, object_key, inline_bytes,"
            " byte_offset, byte_size, producer_id, producer_epoch, base_sequence, last_sequence,"
            " is_transactional, is_control, timestamp_type, max_timestamp_ms, append_time_ms)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            [(r.topic_id, r.partition, r.base_offset, r.last_offset, r.object_key, r.inline_bytes, r.byte_offset,
              r.byte_size, r.producer_id, r.producer_epoch, r.base_sequence, r.last_sequence, r.is_transactional,
              r.is_control, r.timestamp_type, r.max_timestamp_ms, r.append_time_ms) for r in rows],
        )
