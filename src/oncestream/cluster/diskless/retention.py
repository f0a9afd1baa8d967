"""Retention of diskless partitions by time (``retention.ms``) and size (``retention.bytes``).

Kafka deletes whole segments from the oldest while they are expired (largest timestamp older than
retention.ms) or while the log stays at least retention.bytes without them, never past the high
watermark. A diskless partition has no segments, so the unit is the batch row: the new log start
is the first batch that must stay, and ``log_start_moves.move_log_start`` does the rest (rows
deleted, objects nobody points at any more released after the grace). Time is PostgreSQL's
``now()``, the one clock every broker agrees on.

Work per round is bounded: at most ``partitions_per_round`` partitions (taken round-robin in
(topic_id, partition) order, so every partition comes up), at most ``max_batches_per_move`` rows
deleted per partition, one transaction per partition. Every broker may run an enforcer: moves
lock the partition row, and a move that finds the log start already past its target does nothing.
Topics whose cleanup.policy lacks ``delete`` are left alone (compaction is another process).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import psycopg

from oncestream.cluster.diskless.commit import DEFAULT_DELETE_GRACE_MS
from oncestream.cluster.diskless.coordinates import PartitionKey
from oncestream.cluster.diskless.log_start_moves import LogStartMove, move_log_start
from oncestream.cluster.diskless.metadata_access import TransactionSource
from oncestream.cluster.diskless.periodic import PeriodicRound

DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000  # log.retention.hours = 168
DEFAULT_RETENTION_BYTES = -1
DEFAULT_CHECK_INTERVAL_MS = 300_000  # log.retention.check.interval.ms

_NIL_UUID = uuid.UUID(int=0)

_PARTITIONS = """
SELECT p.topic_id, p.partition,
       (SELECT value FROM topic_configs c WHERE c.topic_id = p.topic_id AND c.key = 'retention.ms'),
       (SELECT value FROM topic_configs c WHERE c.topic_id = p.topic_id AND c.key = 'retention.bytes'),
       (SELECT value FROM topic_configs c WHERE c.topic_id = p.topic_id AND c.key = 'cleanup.policy')
  FROM partitions p
 WHERE (p.topic_id, p.partition) > (%(after_t)s, %(after_p)s) AND p.log_start_offset < p.high_watermark
 ORDER BY p.topic_id, p.partition LIMIT %(limit)s
"""

# The first batch (from the log start) not yet expired: the log must start there at the latest.
_FIRST_UNEXPIRED = """
SELECT base_offset FROM batches
 WHERE topic_id = %(t)s AND partition = %(p)s
   AND max_timestamp_ms >= (extract(epoch FROM now()) * 1000)::bigint - %(retention_ms)s
 ORDER BY base_offset LIMIT 1
"""

_TOTAL_BYTES = "SELECT coalesce(sum(byte_size), 0) FROM batches WHERE topic_id = %(t)s AND partition = %(p)s"

# The first batch that cannot go without the log falling below retention.bytes: the oldest
# batches whose sizes add up to at most %(excess)s (the bytes over the limit) may go.
_FIRST_KEPT_BY_SIZE = """
SELECT base_offset FROM (
    SELECT base_offset, sum(byte_size) OVER (ORDER BY base_offset) AS through
      FROM batches WHERE topic_id = %(t)s AND partition = %(p)s) w
 WHERE through > %(excess)s ORDER BY base_offset LIMIT 1
"""

_NTH_BATCH = """
SELECT base_offset FROM batches WHERE topic_id = %(t)s AND partition = %(p)s
 ORDER BY base_offset OFFSET %(n)s LIMIT 1
"""

_HIGH_WATERMARK = "SELECT high_watermark FROM partitions WHERE topic_id = %(t)s AND partition = %(p)s"


@dataclass(frozen=True, slots=True)
class RetentionDefaults:
    """The broker's defaults (log.retention.ms / log.retention.bytes) for topics without their own."""

    retention_ms: int = DEFAULT_RETENTION_MS
    retention_bytes: int = DEFAULT_RETENTION_BYTES


@dataclass(slots=True)
class RetentionRound:
    """What one round did."""

    partitions_checked: int = 0
    moves: dict[PartitionKey, LogStartMove] = field(default_factory=dict)


def _config_int(text: Any, default: int) -> int:
    try:
        return default if text is None else int(str(text))
    except ValueError:
        return default


async def _first_offset(conn: psycopg.AsyncConnection[Any], query: str, params: dict[str, Any]) -> int | None:
    cursor = await conn.execute(query, params)
    row = await cursor.fetchone()
    return None if row is None or row[0] is None else int(row[0])


async def retention_target(conn: psycopg.AsyncConnection[Any], topic_id: uuid.UUID, partition: int, *,
                           retention_ms: int, retention_bytes: int, max_batches: int) -> int | None:
    """The log start retention asks for (None: nothing to delete), at most ``max_batches`` rows on."""
    params: dict[str, Any] = {"t": topic_id, "p": partition}
    high_watermark = await _first_offset(conn, _HIGH_WATERMARK, params)
    if high_watermark is None:
        return None
    target: int | None = None
    if retention_ms >= 0:
        first_unexpired = await _first_offset(conn, _FIRST_UNEXPIRED, {**params, "retention_ms": retention_ms})
        target = high_watermark if first_unexpired is None else first_unexpired
    if retention_bytes >= 0:
        total = await _first_offset(conn, _TOTAL_BYTES, params) or 0
        if total > retention_bytes:
            kept = await _first_offset(conn, _FIRST_KEPT_BY_SIZE, {**params, "excess": total - retention_bytes})
            by_size = high_watermark if kept is None else kept
            target = by_size if target is None else max(target, by_size)
    if target is None:
        return None
    cap = await _first_offset(conn, _NTH_BATCH, {**params, "n": max_batches})
    return target if cap is None else min(target, cap)


class RetentionEnforcer:
    """Applies retention.ms and retention.bytes to diskless partitions, a bounded round at a time
    (see the module doc). ``run_round()`` for one round; ``start()``/``close()`` for the periodic
    task of a broker."""

    def __init__(self, source: TransactionSource, *, defaults: RetentionDefaults | None = None,
                 partitions_per_round: int = 100, max_batches_per_move: int = 10_000,
                 delete_grace_ms: int = DEFAULT_DELETE_GRACE_MS,
                 check_interval_ms: int = DEFAULT_CHECK_INTERVAL_MS) -> None:
        if partitions_per_round < 1 or max_batches_per_move < 1:
            raise ValueError("a retention round must be allowed some work")
        self._source = source
        self._defaults = defaults or RetentionDefaults()
        self._partitions_per_round = partitions_per_round
        self._max_batches = max_batches_per_move
        self._grace_ms = delete_grace_ms
        self._after: PartitionKey = (_NIL_UUID, -1)
        # A failed round (PostgreSQL down, or a bug) is logged and the next one retries: the
        # enforcer must outlive anything one round runs into.
        self._loop = PeriodicRound("diskless-retention", check_interval_ms, self.run_round)

    async def run_round(self) -> RetentionRound:
        """Check the next ``partitions_per_round`` partitions (round-robin) and move their log starts."""
        result = RetentionRound()
        async with self._source.transaction() as conn:
            cursor = await conn.execute(_PARTITIONS, {"after_t": self._after[0], "after_p": self._after[1],
                                                      "limit": self._partitions_per_round})
            rows = await cursor.fetchall()
        self._after = (_NIL_UUID, -1) if len(rows) < self._partitions_per_round else (rows[-1][0], int(rows[-1][1]))
        for row in rows:
            topic_id, partition = row[0], int(row[1])
            if row[4] is not None and "delete" not in str(row[4]).split(","):
                continue
            retention_ms = _config_int(row[2], self._defaults.retention_ms)
            retention_bytes = _config_int(row[3], self._defaults.retention_bytes)
            result.partitions_checked += 1
            async with self._source.transaction() as conn:
                target = await retention_target(conn, topic_id, partition, retention_ms=retention_ms,
                                                retention_bytes=retention_bytes, max_batches=self._max_batches)
                if target is None:
                    continue
                move = await move_log_start(conn, topic_id, partition, target, delete_grace_ms=self._grace_ms)
            if move.batches_deleted or move.objects_released:
                result.moves[(topic_id, partition)] = move
        return result

    def start(self) -> None:
        """Run a round every check interval until ``close`` (a failed round is logged, not fatal)."""
        self._loop.start()

    async def close(self) -> None:
        """Stop the periodic rounds, cutting a round in progress (each move is its own transaction)."""
        await self._loop.close()
