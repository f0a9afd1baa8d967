"""What ``oncestream cluster status`` shows of consolidation: its lag and the objects by state.

Lag, per partition with batches outside consolidated objects (produce objects or inline markers):
how many batches and bytes, and the age of the oldest of their objects (PostgreSQL's clock, from
``objects.created_at``; inline markers have no object and count in batches and bytes only).
Objects: counts and bytes by state ('uploading', 'live', 'deleting'), and how many of the live
ones are consolidated segments. Read in one read-only snapshot.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from oncestream.cluster.diskless.consolidation import is_consolidated_sql
from oncestream.cluster.diskless.coordinates import begin_snapshot
from oncestream.cluster.pg.store import Conn, MetadataStore

_LAG = f"""
SELECT b.topic_id, t.name, b.partition, count(*), coalesce(sum(b.byte_size), 0),
       (extract(epoch FROM now() - min(o.created_at)) * 1000)::bigint
  FROM batches b
  JOIN topics t ON t.topic_id = b.topic_id
  LEFT JOIN objects o ON o.object_key = b.object_key
 WHERE b.object_key IS NULL OR NOT {is_consolidated_sql('b.object_key')}
 GROUP BY b.topic_id, t.name, b.partition
 ORDER BY count(*) DESC, t.name, b.partition LIMIT %(limit)s
"""

_OBJECTS = f"""
SELECT state, count(*), coalesce(sum(size_bytes), 0),
       count(*) FILTER (WHERE {is_consolidated_sql('object_key')})
  FROM objects GROUP BY state ORDER BY state
"""


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """A partition's batches not yet in a consolidated object."""

    topic_id: uuid.UUID
    topic: str
    partition: int
    batches: int
    bytes: int
    oldest_age_ms: int | None  # None when only inline markers lag


@dataclass(frozen=True, slots=True)
class ObjectCount:
    """Objects in one state."""

    state: str
    count: int
    bytes: int
    consolidated: int  # of them, consolidated segments


@dataclass(frozen=True, slots=True)
class ConsolidationStatus:
    """The status of consolidation across the cluster."""

    lagging: tuple[PartitionLag, ...]  # most batches first, at most ``limit`` partitions
    objects: tuple[ObjectCount, ...]  # one per state present

    @property
    def unconsolidated_batches(self) -> int:
        return sum(p.batches for p in self.lagging)


async def consolidation_status(metadata: MetadataStore, *, limit: int = 100) -> ConsolidationStatus:
    """Consolidation lag (the ``limit`` partitions lagging most) and object counts by state."""
    async def read(conn: Conn) -> ConsolidationStatus:
        await begin_snapshot(conn)
        return await read_consolidation_status(conn, limit=limit)

    return await metadata.run(read)


async def read_consolidation_status(conn: Conn, *, limit: int = 100) -> ConsolidationStatus:
    """``consolidation_status`` inside a transaction the caller opened (``oncestream cluster
    status`` reads it in its own read-only snapshot, without a MetadataStore)."""
    cursor = await conn.execute(_LAG, {"limit": limit})
    lagging = tuple(PartitionLag(row[0], str(row[1]), int(row[2]), int(row[3]), int(row[4]),
                                 None if row[5] is None else int(row[5])) for row in await cursor.fetchall())
    cursor = await conn.execute(_OBJECTS)
    objects = tuple(ObjectCount(str(r[0]), int(r[1]), int(r[2]), int(r[3])) for r in await cursor.fetchall())
    return ConsolidationStatus(lagging, objects)
