"""Consolidation of diskless partitions: many small produce objects -> one segment per partition.

Every produce object holds a few batches of many partitions, so a partition's log ends up spread
over thousands of small objects: reading it back costs one GET per object, and the objects live
as long as their longest-lived batch. A consolidation round, per partition (issue 22 point 5,
invariants 6 and 7 of docs/cluster.md):

1. **Pick** partitions with at least ``min_batches`` committed batches (or ``segment_bytes``
   bytes) not yet in a consolidated object, skipping those another job holds a lease on;
   round-robin in (topic_id, partition) order, ``partitions_per_round`` at a time.
2. **Claim** the partition: a row of ``consolidation_leases`` valid until ``now() + lease_ms``
   (PostgreSQL's clock), taken only if free or expired. The lease keeps two brokers from doing the
   same work; it is not what keeps the result right (step 5 is), so a paused holder whose lease
   expired does no harm.
3. **Plan** from one snapshot: the partition's log start, HW and LSO, and the rows to rewrite.
   Topics without ``compact`` in cleanup.policy: the batches not yet consolidated, in offset
   order, up to ``segment_bytes`` / ``max_batches_per_object``; or, when those are too few, the
   batches of the first run of ``merge_min_objects`` consecutive consolidated objects each under
   half a segment (objects grow toward ``segment_bytes`` in tiers, like an LSM's merges). Compacted topics: every batch from
   the log start below the LSO (only decided data is compacted) and below the first batch younger
   than min.compaction.lag.ms, consolidated or not, up to ``compaction_max_bytes``, with the
   partition's aborted transactions and producers' last offsets (the cleaner's inputs); only if
   the dirty part (batches outside consolidated objects: a compacted partition is consolidated
   only by cleaning it) reaches min.cleanable.dirty.ratio.
4. **Build and upload**: the batches are read through the read side's range cache and checks
   (``DisklessReader.load_batch``: base offset patched, header checked against its row), laid out
   as one ``.log`` (``consolidated_object``; compacted on the way for compacted topics), its key
   recorded 'uploading' BEFORE the PUT (as produce does: an upload whose swap never happens is
   collected by the object GC), then PUT.
5. **Swap** in ONE transaction: the partition row locked (DeleteRecords and retention lock it
   too), the new object's row locked and still 'uploading'; each planned row is updated to its
   range in the new object (or deleted, when compaction dropped the whole batch) only if it is
   still exactly what was read (same offsets, same object, same byte range). A row that changed
   meanwhile (log start moved by DeleteRecords or retention, another job swapped it first) is
   skipped, and its bytes in the new object are garbage. The new object becomes 'live' (or
   'deleting' if no row was swapped); every old object no row points at any more becomes
   'deleting' with ``delete_after = now() + delete_grace_ms``, so a reader holding old coordinates
   still finds it (the grace exceeds the coordinate cache's TTL and any fetch). Locks are taken
   partition first, then objects in key order, as ``log_start_moves`` does: no cycle.

A double run (two jobs on the same partition, leases expired) is harmless: the second swap finds
the rows changed and swaps none of them. ``ConsolidationJob.run_round`` does one bounded round;
``start``/``close`` run rounds every ``interval_ms`` on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from oncestream.cluster.diskless.commit import DEFAULT_DELETE_GRACE_MS, record_uploading
from oncestream.cluster.diskless.consolidated_object import (
    CONSOLIDATED_SUFFIX,
    CompactionRules,
    ConsolidatedSegment,
    SourceBatch,
    build_segment,
    consolidated_object_key,
)
from oncestream.cluster.diskless.coordinates import (
    BATCH_COLUMNS,
    BatchCoordinate,
    PartitionKey,
    begin_snapshot,
    read_partition_offsets,
    row_to_batch,
)
from oncestream.cluster.diskless.log_start_moves import release_unreferenced
from oncestream.cluster.diskless.object_cache import ObjectRangeCache
from oncestream.cluster.diskless.periodic import PeriodicRound
from oncestream.cluster.diskless.read_path import DisklessReader
from oncestream.cluster.pg.store import Conn, MetadataStore
from oncestream.errors import OnceStreamError
from oncestream.log.compaction import AbortedData
from oncestream.log.config import LogConfig
from oncestream.log.txn_index import AbortedTxn
from oncestream.remote.object_store import ObjectStore

log = logging.getLogger(__name__)



def is_consolidated_sql(column: str) -> str:
    """SQL true when the object key in ``column`` names a consolidated object (its suffix; no
    ``%`` in it, so it fits queries with placeholders)."""
    return f"right({column}, {len(CONSOLIDATED_SUFFIX)}) = '{CONSOLIDATED_SUFFIX}'"



@dataclass(frozen=True, slots=True)
class ConsolidationConfig:
    """Settings of the consolidation job (broker configs ``diskless.consolidation.*``)."""

    # diskless.consolidation.min.batches: a partition is consolidated once it has this many
    # batches outside consolidated objects ...
    min_batches: int = 100
    # diskless.consolidation.segment.bytes: ... or this many bytes; also the target size of one
    # consolidated object (a round writes at most this much per partition).
    segment_bytes: int = 64 * 1024 * 1024
    # diskless.consolidation.merge.min.objects: this many consecutive consolidated objects, each
    # smaller than half of segment.bytes, are merged into one (topics without compaction): the
    # objects grow toward segment.bytes in tiers, each byte rewritten about
    # log_{merge.min.objects}(segment.bytes / round size) times.
    merge_min_objects: int = 10
    # diskless.consolidation.max.batches.per.object: bounds the rows one swap rewrites.
    max_batches_per_object: int = 50_000
    # diskless.consolidation.compaction.max.bytes: how much of a compacted partition (from its log
    # start) one round reads and cleans; records are compared only within that range.
    compaction_max_bytes: int = 256 * 1024 * 1024
    # diskless.consolidation.partitions.per.round
    partitions_per_round: int = 10
    # diskless.consolidation.interval.ms: time between rounds of the background loop.
    interval_ms: int = 30_000
    # diskless.consolidation.lease.ms: how long a claim on a partition lasts (PostgreSQL's clock);
    # longer than a round's work on one partition.
    lease_ms: int = 600_000
    # diskless.object.delete.grace.ms: how long a swapped-out object stays readable.
    delete_grace_ms: int = DEFAULT_DELETE_GRACE_MS

    def __post_init__(self) -> None:
        if self.min_batches < 2 or self.segment_bytes < 1 or self.max_batches_per_object < 2 or self.merge_min_objects < 2:
            raise ValueError("consolidation needs min.batches >= 2, segment.bytes >= 1, max.batches.per.object >= 2,"
                             " merge.min.objects >= 2")
        if self.partitions_per_round < 1 or self.interval_ms < 0 or self.lease_ms < 0 or self.delete_grace_ms < 0:
            raise ValueError("consolidation needs partitions.per.round >= 1 and non-negative times")

    @classmethod
    def from_broker_configs(cls, props: Mapping[str, str]) -> ConsolidationConfig:
        """The settings from broker properties (``diskless.consolidation.*``), defaults otherwise."""
        names = {
            "diskless.consolidation.min.batches": "min_batches",
            "diskless.consolidation.segment.bytes": "segment_bytes",
            "diskless.consolidation.max.batches.per.object": "max_batches_per_object",
            "diskless.consolidation.merge.min.objects": "merge_min_objects",
            "diskless.consolidation.compaction.max.bytes": "compaction_max_bytes",
            "diskless.consolidation.partitions.per.round": "partitions_per_round",
            "diskless.consolidation.interval.ms": "interval_ms",
            "diskless.consolidation.lease.ms": "lease_ms",
            "diskless.object.delete.grace.ms": "delete_grace_ms",
        }
        values: dict[str, int] = {}
        for name, attribute in names.items():
            if name in props:
                try:
                    values[attribute] = int(props[name])
                except ValueError as exc:
                    raise ValueError(f"{name}: {props[name]!r} is not an integer") from exc
        return cls(**values)


@dataclass(frozen=True, slots=True)
class PartitionPlan:
    """What one partition's consolidation rewrites, read from one snapshot."""

    topic_id: uuid.UUID
    partition: int
    rows: tuple[BatchCoordinate, ...]  # offset order
    compaction: CompactionRules | None  # None: copied verbatim


@dataclass(frozen=True, slots=True)
class UploadedSegment:
    """A consolidated object in the store (recorded 'uploading'), not yet swapped in."""

    plan: PartitionPlan
    object_key: str
    segment: ConsolidatedSegment


@dataclass(frozen=True, slots=True)
class SwapResult:
    """What a swap did."""

    object_key: str
    rows_swapped: int  # rows now pointing at the new object
    rows_dropped: int  # rows compaction removed
    rows_skipped: int  # rows changed concurrently: left as they were
    objects_released: tuple[str, ...]  # old objects now 'deleting'


@dataclass(slots=True)
class ConsolidationRound:
    """What one round did."""

    candidates: int = 0
    leased_elsewhere: int = 0
    swaps: dict[PartitionKey, SwapResult] = field(default_factory=dict)
    failures: dict[PartitionKey, str] = field(default_factory=dict)


_START: PartitionKey = (uuid.UUID(int=0), -1)  # before every partition

# Partitions with enough batches outside consolidated objects, or enough small consolidated objects.
_CANDIDATES = f"""
SELECT c.topic_id, c.partition FROM (
    SELECT b.topic_id, b.partition FROM batches b
     WHERE (b.object_key IS NULL OR NOT {is_consolidated_sql('b.object_key')})
       AND (b.topic_id, b.partition) > (%(after_t)s, %(after_p)s)
     GROUP BY b.topic_id, b.partition
    HAVING count(*) >= %(min_batches)s OR sum(b.byte_size) >= %(segment_bytes)s
    UNION
    SELECT b.topic_id, b.partition FROM batches b JOIN objects o ON o.object_key = b.object_key
     WHERE {is_consolidated_sql('b.object_key')} AND 2 * o.size_bytes < %(segment_bytes)s
       AND (b.topic_id, b.partition) > (%(after_t)s, %(after_p)s)
     GROUP BY b.topic_id, b.partition
    HAVING count(DISTINCT b.object_key) >= %(merge_min_objects)s) c
 WHERE NOT EXISTS (SELECT 1 FROM consolidation_leases l
                    WHERE l.topic_id = c.topic_id AND l.partition = c.partition AND l.lease_until > now())
 ORDER BY c.topic_id, c.partition LIMIT %(limit)s
"""

# The partition's consolidated objects in offset order, with their sizes.
_CONSOLIDATED_OBJECTS = f"""
SELECT b.object_key, min(b.base_offset), o.size_bytes FROM batches b JOIN objects o ON o.object_key = b.object_key
 WHERE b.topic_id = %(t)s AND b.partition = %(p)s AND {is_consolidated_sql('b.object_key')}
 GROUP BY b.object_key, o.size_bytes ORDER BY 2
"""

_ROWS_OF_OBJECTS = f"""
SELECT {BATCH_COLUMNS} FROM batches
 WHERE topic_id = %(t)s AND partition = %(p)s AND object_key = ANY(%(keys)s) ORDER BY base_offset LIMIT %(limit)s
"""

_CLAIM = """
INSERT INTO consolidation_leases (topic_id, partition, holder, lease_until)
SELECT topic_id, partition, %(holder)s, now() + %(lease_ms)s * interval '1 millisecond'
  FROM partitions WHERE topic_id = %(t)s AND partition = %(p)s
ON CONFLICT (topic_id, partition) DO UPDATE SET holder = EXCLUDED.holder, lease_until = EXCLUDED.lease_until
 WHERE consolidation_leases.lease_until <= now()
RETURNING holder
"""

_RELEASE_LEASE = "DELETE FROM consolidation_leases WHERE topic_id = %(t)s AND partition = %(p)s AND holder = %(holder)s"

_TOPIC_CONFIGS = "SELECT key, value FROM topic_configs WHERE topic_id = %(t)s"

# Batches not yet consolidated, offset order, each starting before %(max_bytes)s were reached.
_UNCONSOLIDATED = f"""
SELECT {BATCH_COLUMNS} FROM (
    SELECT b.*, sum(b.byte_size) OVER (ORDER BY b.base_offset) - b.byte_size AS bytes_before
      FROM batches b
     WHERE b.topic_id = %(t)s AND b.partition = %(p)s AND b.last_offset >= %(start)s
       AND (b.object_key IS NULL OR NOT {is_consolidated_sql('b.object_key')})) w
 WHERE bytes_before < %(max_bytes)s OR bytes_before = 0
 ORDER BY base_offset LIMIT %(limit)s
"""

# Every batch from the log start below %(upper)s (compacted topics), within %(max_bytes)s.
_COMPACTABLE = f"""
SELECT {BATCH_COLUMNS} FROM (
    SELECT b.*, sum(b.byte_size) OVER (ORDER BY b.base_offset) - b.byte_size AS bytes_before
      FROM batches b
     WHERE b.topic_id = %(t)s AND b.partition = %(p)s AND b.last_offset >= %(start)s
       AND b.base_offset < %(upper)s) w
 WHERE bytes_before < %(max_bytes)s OR bytes_before = 0
 ORDER BY base_offset LIMIT %(limit)s
"""

# The first batch younger than min.compaction.lag.ms: compaction stops before it.
_FIRST_YOUNG = """
SELECT min(base_offset) FROM batches
 WHERE topic_id = %(t)s AND partition = %(p)s AND max_timestamp_ms > %(since_ms)s
"""

_ABORTED_BELOW = """
SELECT producer_id, first_offset, last_offset FROM aborted_txns
 WHERE topic_id = %(t)s AND partition = %(p)s AND first_offset < %(upper)s
"""

_PRODUCERS = "SELECT producer_id, recent_batches FROM producer_states WHERE topic_id = %(t)s AND partition = %(p)s"

_LOCK_PARTITION = "SELECT 1 FROM partitions WHERE topic_id = %(t)s AND partition = %(p)s FOR UPDATE"

_LOCK_NEW_OBJECT = "SELECT state FROM objects WHERE object_key = %(key)s FOR UPDATE"

_SWAP_ROWS = """
UPDATE batches b SET object_key = %(key)s, inline_bytes = NULL, byte_offset = k.new_pos, byte_size = k.new_size
  FROM unnest(%(base)s::bigint[], %(last)s::bigint[], %(old_key)s::text[], %(old_pos)s::bigint[],
              %(old_size)s::int[], %(new_pos)s::bigint[], %(new_size)s::int[])
       AS k(base, last, old_key, old_pos, old_size, new_pos, new_size)
 WHERE b.topic_id = %(t)s AND b.partition = %(p)s AND b.base_offset = k.base AND b.last_offset = k.last
   AND b.object_key IS NOT DISTINCT FROM k.old_key AND b.byte_offset = k.old_pos AND b.byte_size = k.old_size
RETURNING b.base_offset
"""

_DROP_ROWS = """
DELETE FROM batches b
 USING unnest(%(base)s::bigint[], %(last)s::bigint[], %(old_key)s::text[], %(old_pos)s::bigint[],
              %(old_size)s::int[]) AS k(base, last, old_key, old_pos, old_size)
 WHERE b.topic_id = %(t)s AND b.partition = %(p)s AND b.base_offset = k.base AND b.last_offset = k.last
   AND b.object_key IS NOT DISTINCT FROM k.old_key AND b.byte_offset = k.old_pos AND b.byte_size = k.old_size
RETURNING b.base_offset
"""

_SET_NEW_OBJECT_STATE = """
UPDATE objects SET state = CASE WHEN %(live)s THEN 'live' ELSE 'deleting' END,
       delete_after = CASE WHEN %(live)s THEN NULL ELSE now() END
 WHERE object_key = %(key)s
"""


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


def _dirty_enough(rows: list[BatchCoordinate], min_cleanable_dirty_ratio: float) -> bool:
    """Kafka's trigger: dirty bytes / all bytes >= min.cleanable.dirty.ratio. A compacted
    partition's batches are only ever consolidated by compacting them, so the batches outside
    consolidated objects are exactly those no clean has seen yet (the dirty part)."""
    total = sum(r.byte_size for r in rows)
    dirty = sum(r.byte_size for r in rows if r.object_key is None or not r.object_key.endswith(CONSOLIDATED_SUFFIX))
    return total > 0 and dirty > 0 and dirty >= min_cleanable_dirty_ratio * total


def _row_arrays(rows: list[BatchCoordinate]) -> dict[str, list[Any]]:
    return {"base": [r.base_offset for r in rows], "last": [r.last_offset for r in rows],
            "old_key": [r.object_key for r in rows], "old_pos": [r.byte_offset for r in rows],
            "old_size": [r.byte_size for r in rows]}


class ConsolidationJob:
    """Consolidates diskless partitions, a bounded round at a time (see the module doc). One per
    broker; every broker may run one."""

    def __init__(self, metadata: MetadataStore, objects: ObjectStore, *, broker_id: int, key_prefix: str = "",
                 config: ConsolidationConfig | None = None, clock_ms: Callable[[], int] = _wall_clock_ms,
                 executor: concurrent.futures.Executor | None = None, read_budget_bytes: int = 32 * 1024 * 1024) -> None:
        self._metadata = metadata
        self._objects = objects
        self._broker_id = broker_id
        self._prefix = key_prefix
        self._config = config or ConsolidationConfig()
        self._clock_ms = clock_ms
        self._executor = executor
        self._cache = ObjectRangeCache(objects, budget_bytes=read_budget_bytes, executor=executor)
        self._reader = DisklessReader(metadata, self._cache)
        # Distinct per job instance: two jobs of one broker (or a restarted one) never share a lease.
        self._holder = f"{broker_id}:{uuid.uuid4().hex}"
        self._after: PartitionKey = _START  # where the next round's candidates start
        self._loop = PeriodicRound("diskless-consolidation", self._config.interval_ms, self.run_round)

    @property
    def config(self) -> ConsolidationConfig:
        return self._config

    async def run_round(self) -> ConsolidationRound:
        """Consolidate up to ``partitions_per_round`` partitions. A partition's failure (object
        store down, an object missing) is recorded and the round goes on; errors of PostgreSQL
        propagate (every partition would fail alike)."""
        result = ConsolidationRound()
        candidates = await self._metadata.run(self._candidates)
        result.candidates = len(candidates)
        for key in candidates:
            if not await self.claim(key):
                result.leased_elsewhere += 1
                continue
            try:
                swap = await self.consolidate_partition(*key)
            except OnceStreamError as exc:
                # The object store failed, an object is missing, the topic was deleted meanwhile:
                # this partition only.
                result.failures[key] = str(exc)
                log.warning("consolidation of %s-%s failed (the next round retries): %s", key[0], key[1], exc)
                continue
            finally:
                await self.release(key)
            if swap is not None:
                result.swaps[key] = swap
        return result

    async def consolidate_partition(self, topic_id: uuid.UUID, partition: int) -> SwapResult | None:
        """Plan, build, upload and swap one partition (the caller holds its lease); None when
        there is nothing worth rewriting."""
        plan = await self.plan(topic_id, partition)
        if plan is None:
            return None
        uploaded = await self.upload(plan)
        return await self.swap(uploaded)

    async def claim(self, key: PartitionKey) -> bool:
        """Take the partition's lease if it is free or expired (False too for a deleted partition)."""
        async def claim(conn: Conn) -> bool:
            cursor = await conn.execute(_CLAIM, {"t": key[0], "p": key[1], "holder": self._holder,
                                                 "lease_ms": self._config.lease_ms})
            return await cursor.fetchone() is not None

        return await self._metadata.run(claim)

    async def release(self, key: PartitionKey) -> None:
        """Give the partition's lease back (if still ours)."""
        async def release(conn: Conn) -> None:
            await conn.execute(_RELEASE_LEASE, {"t": key[0], "p": key[1], "holder": self._holder})

        await self._metadata.run(release)

    async def _candidates(self, conn: Conn) -> list[PartitionKey]:
        # Round-robin in (topic_id, partition) order from where the last round stopped, so a
        # partition that needs nothing this time (a compacted one below its dirty ratio) never
        # keeps the others waiting.
        limit = self._config.partitions_per_round
        cursor = await conn.execute(_CANDIDATES, {"min_batches": self._config.min_batches,
                                                  "segment_bytes": self._config.segment_bytes, "limit": limit,
                                                  "merge_min_objects": self._config.merge_min_objects,
                                                  "after_t": self._after[0], "after_p": self._after[1]})
        found: list[PartitionKey] = [(row[0], int(row[1])) for row in await cursor.fetchall()]
        self._after = found[-1] if len(found) == limit else _START
        return found

    async def plan(self, topic_id: uuid.UUID, partition: int) -> PartitionPlan | None:
        """What to rewrite, from one snapshot (module doc, step 3); None if fewer than two batches."""
        async def read(conn: Conn) -> PartitionPlan | None:
            await begin_snapshot(conn)
            params: dict[str, Any] = {"t": topic_id, "p": partition, "limit": self._config.max_batches_per_object}
            offsets = await read_partition_offsets(conn, topic_id, partition)
            cursor = await conn.execute(_TOPIC_CONFIGS, params)
            config = LogConfig.from_topic_configs({str(k): str(v) for k, v in await cursor.fetchall()})
            params["start"] = offsets.log_start_offset
            compaction: CompactionRules | None = None
            if config.compacts:
                now_ms = self._clock_ms()
                upper = offsets.last_stable_offset
                if config.min_compaction_lag_ms > 0:
                    cursor = await conn.execute(_FIRST_YOUNG, {**params, "since_ms": now_ms - config.min_compaction_lag_ms})
                    young = await cursor.fetchone()
                    if young is not None and young[0] is not None:
                        upper = min(upper, int(young[0]))
                params.update(upper=upper, max_bytes=self._config.compaction_max_bytes)
                cursor = await conn.execute(_COMPACTABLE, params)
                rows = [row_to_batch(r) for r in await cursor.fetchall()]
                if not _dirty_enough(rows, config.min_cleanable_dirty_ratio):
                    return None
                compaction = await self._compaction_rules(conn, params, config, now_ms)
            else:
                params["max_bytes"] = self._config.segment_bytes
                cursor = await conn.execute(_UNCONSOLIDATED, params)
                rows = [row_to_batch(r) for r in await cursor.fetchall()]
                if len(rows) < self._config.min_batches and sum(r.byte_size for r in rows) < self._config.segment_bytes:
                    rows = await self._small_objects_to_merge(conn, params) or rows
            if len(rows) < 2:
                return None
            return PartitionPlan(topic_id, partition, tuple(rows), compaction)

        return await self._metadata.run(read)

    async def _small_objects_to_merge(self, conn: Conn, params: dict[str, Any]) -> list[BatchCoordinate]:
        """The rows of the first run of at least ``merge_min_objects`` consecutive consolidated
        objects each smaller than half a segment, together at most a segment; [] if none."""
        cursor = await conn.execute(_CONSOLIDATED_OBJECTS, params)
        run: list[str] = []
        run_bytes = 0
        for key, _, size_bytes in await cursor.fetchall():
            size = int(size_bytes)
            if 2 * size >= self._config.segment_bytes or run_bytes + size > self._config.segment_bytes:
                if len(run) >= self._config.merge_min_objects:
                    break
                run, run_bytes = [], 0
                if 2 * size >= self._config.segment_bytes:
                    continue
            run.append(str(key))
            run_bytes += size
        if len(run) < self._config.merge_min_objects:
            return []
        cursor = await conn.execute(_ROWS_OF_OBJECTS, {**params, "keys": run})
        return [row_to_batch(r) for r in await cursor.fetchall()]

    async def _compaction_rules(self, conn: Conn, params: dict[str, Any], config: LogConfig,
                                now_ms: int) -> CompactionRules:
        cursor = await conn.execute(_ABORTED_BELOW, params)
        aborted = [AbortedTxn(int(r[0]), int(r[1]), int(r[2]), int(r[2]) + 1) for r in await cursor.fetchall()]
        cursor = await conn.execute(_PRODUCERS, params)
        last_offsets: dict[int, int] = {}
        for producer_id, recent in await cursor.fetchall():
            if recent:
                last_offsets[int(producer_id)] = int(recent[-1][3])
        return CompactionRules(AbortedData(aborted), now_ms, config.delete_retention_ms, last_offsets)

    async def upload(self, plan: PartitionPlan) -> UploadedSegment:
        """Read the planned batches, build the segment, record its key 'uploading', PUT it.
        RemoteObjectNotFoundError if a planned batch's object is gone (another job swapped it
        out and the grace passed: the plan is stale)."""
        sources = await self._read_batches(plan.rows)
        segment = build_segment(sources, plan.compaction)
        key = consolidated_object_key(self._prefix, plan.topic_id, plan.partition, plan.rows[0].base_offset)

        async def record(conn: Conn) -> None:
            await record_uploading(conn, key, len(segment.data), self._broker_id)

        await self._metadata.run(record)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, functools.partial(self._objects.put, key, segment.data))
        return UploadedSegment(plan, key, segment)

    async def _read_batches(self, rows: tuple[BatchCoordinate, ...]) -> list[SourceBatch]:
        by_object: dict[str | None, list[BatchCoordinate]] = {}
        for row in rows:
            by_object.setdefault(row.object_key, []).append(row)
        loaded: dict[int, bytes] = {}
        for object_key, object_rows in by_object.items():
            if object_key is not None:
                # One ranged GET per object; load_batch then finds every batch in the cache.
                start = min(r.byte_offset for r in object_rows)
                end = max(r.byte_offset + r.byte_size for r in object_rows)
                await self._cache.get_range(object_key, start, end)
            for row in object_rows:
                loaded[row.base_offset] = await self._reader.load_batch(row)
        return [SourceBatch(row, loaded[row.base_offset]) for row in rows]

    async def swap(self, uploaded: UploadedSegment) -> SwapResult:
        """The swap transaction (module doc, step 5)."""
        plan = uploaded.plan
        kept = [p for p in uploaded.segment.placements if not p.dropped]
        dropped = [p for p in uploaded.segment.placements if p.dropped]
        params: dict[str, Any] = {"t": plan.topic_id, "p": plan.partition, "key": uploaded.object_key}

        async def swap(conn: Conn) -> SwapResult:
            await conn.execute(_LOCK_PARTITION, params)
            cursor = await conn.execute(_LOCK_NEW_OBJECT, params)
            state = await cursor.fetchone()
            if state is None or state[0] != "uploading":
                # The object GC gave up on this upload: nothing may point at it now.
                return SwapResult(uploaded.object_key, 0, 0, len(plan.rows), ())
            swapped: list[int] = []
            if kept:
                cursor = await conn.execute(_SWAP_ROWS, {
                    **params, **_row_arrays([p.row for p in kept]),
                    "new_pos": [p.byte_offset for p in kept], "new_size": [p.byte_size for p in kept]})
                swapped = [int(r[0]) for r in await cursor.fetchall()]
            removed: list[int] = []
            if dropped:
                cursor = await conn.execute(_DROP_ROWS, {**params, **_row_arrays([p.row for p in dropped])})
                removed = [int(r[0]) for r in await cursor.fetchall()]
            await conn.execute(_SET_NEW_OBJECT_STATE, {**params, "live": bool(swapped)})
            done = set(swapped) | set(removed)
            old_keys = {r.object_key for r in plan.rows
                        if r.base_offset in done and r.object_key is not None and r.object_key != uploaded.object_key}
            released = await release_unreferenced(conn, old_keys, delete_grace_ms=self._config.delete_grace_ms)
            return SwapResult(uploaded.object_key, len(swapped), len(removed), len(plan.rows) - len(done), released)

        async def read_back(conn: Conn) -> SwapResult | None:
            cursor = await conn.execute("SELECT state FROM objects WHERE object_key = %(key)s", params)
            row = await cursor.fetchone()
            if row is not None and row[0] == "uploading":
                return None  # the swap did not commit: run it again
            cursor = await conn.execute("SELECT count(*) FROM batches WHERE object_key = %(key)s", params)
            count = await cursor.fetchone()
            swapped_count = int(count[0]) if count is not None else 0
            return SwapResult(uploaded.object_key, swapped_count, 0, len(plan.rows) - swapped_count, ())

        return await self._metadata.run(swap, read_back=read_back)

    def start(self) -> None:
        """Run a round every ``interval_ms`` until ``close`` (a failed round is logged, not fatal)."""
        self._loop.start()

    async def close(self) -> None:
        """Stop the background rounds."""
        await self._loop.close()
