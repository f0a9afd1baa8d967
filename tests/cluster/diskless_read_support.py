"""Test support of the diskless read side: the tables, a connection source, and a writer that
commits batches the way the commit transaction does (objects uploaded first, then one PostgreSQL
transaction that assigns offsets, records the rows and the new high watermark, and notifies).

The diskless tables are the produce helper's (cluster/diskless/diskless_schema.py, step
0101_diskless); until that step is among ``all_steps()`` the definitions of CLUSTER-PLAN.md are
applied from here, so the read side is tested against the agreed shape either way.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import psycopg

from oncestream.cluster.pg.schema import SchemaStep, all_steps, apply_schema
from oncestream.protocol import record_batch as rb
from oncestream.protocol.markers import CONTROL_ABORT, CONTROL_COMMIT
from oncestream.protocol.records import NewRecord, encode_batch, encode_control_batch
from oncestream.remote.object_store import ObjectStore

APPENDS_CHANNEL = "oncestream_appends"

_PLAN_DISKLESS_STEP = SchemaStep("0101_diskless", """
CREATE TABLE objects (
    object_key text PRIMARY KEY,
    state text NOT NULL CHECK (state IN ('uploading', 'live', 'deleting')),
    size_bytes bigint,
    created_by int,
    created_at timestamptz DEFAULT now(),
    delete_after timestamptz
);
CREATE TABLE batches (
    topic_id uuid NOT NULL, partition int NOT NULL, base_offset bigint NOT NULL, last_offset bigint NOT NULL,
    object_key text NULL REFERENCES objects, inline_bytes bytea NULL,
    byte_offset bigint, byte_size int,
    producer_id bigint, producer_epoch smallint, base_sequence int, last_sequence int,
    is_transactional bool, is_control bool, timestamp_type smallint,
    max_timestamp_ms bigint, append_time_ms bigint,
    PRIMARY KEY (topic_id, partition, base_offset)
);
CREATE TABLE producer_states (
    topic_id uuid NOT NULL, partition int NOT NULL, producer_id bigint NOT NULL, producer_epoch smallint,
    recent_batches jsonb, txn_first_offset bigint NULL, last_timestamp_ms bigint,
    PRIMARY KEY (topic_id, partition, producer_id)
);
CREATE TABLE aborted_txns (
    topic_id uuid NOT NULL, partition int NOT NULL, producer_id bigint, first_offset bigint, last_offset bigint NOT NULL,
    PRIMARY KEY (topic_id, partition, last_offset)
);
""")


def schema_steps() -> tuple[SchemaStep, ...]:
    """The catalog's steps and the diskless tables (the produce helper's step once it exists)."""
    steps = all_steps()
    if any(step.name == _PLAN_DISKLESS_STEP.name for step in steps):
        return steps
    return (*steps, _PLAN_DISKLESS_STEP)


async def create_schema(url: str) -> None:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        await apply_schema(conn, schema_steps())


class ConnectPerTransaction:
    """A TransactionSource and NotificationSource over a database URL: a new connection per
    transaction (simple and restart-proof; the broker's pool is MetadataStore's), and LISTEN on a
    connection that reconnects after a loss, as MetadataStore.listen does."""

    def __init__(self, url: str, *, reconnect_delay_s: float = 0.1) -> None:
        self.url = url
        self._reconnect_delay_s = reconnect_delay_s

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        async with await psycopg.AsyncConnection.connect(self.url, connect_timeout=5) as conn:
            async with conn.transaction():
                yield conn

    async def listen(self, channel: str) -> AsyncIterator[str]:
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(self.url, autocommit=True, connect_timeout=5) as conn:
                    await conn.execute(f"LISTEN {channel}")
                    async for notify in conn.notifies():
                        yield notify.payload
            except psycopg.OperationalError:
                pass
            await asyncio.sleep(self._reconnect_delay_s)


async def create_topic(url: str, name: str, num_partitions: int) -> uuid.UUID:
    """A topic row and its partitions' rows (the catalog's tables)."""
    topic_id = uuid.uuid4()
    async with await psycopg.AsyncConnection.connect(url) as conn:
        await conn.execute("INSERT INTO topics (topic_id, name, num_partitions) VALUES (%s, %s, %s)",
                           (topic_id, name, num_partitions))
        for partition in range(num_partitions):
            await conn.execute("INSERT INTO partitions (topic_id, partition) VALUES (%s, %s)", (topic_id, partition))
        await conn.commit()
    return topic_id


def data_batch(values: Sequence[bytes], *, timestamps_ms: Sequence[int] | None = None, producer_id: int = -1,
               producer_epoch: int = -1, base_sequence: int = -1, transactional: bool = False) -> bytes:
    """A producer's batch (base offset 0, as producers send them)."""
    stamps = list(timestamps_ms) if timestamps_ms is not None else [1_700_000_000_000 + i for i in range(len(values))]
    return encode_batch([NewRecord(value=v, key=None, timestamp_ms=t) for v, t in zip(values, stamps, strict=True)],
                        now_ms=stamps[0], producer_id=producer_id, producer_epoch=producer_epoch,
                        base_sequence=base_sequence, transactional=transactional)


@dataclass(frozen=True)
class Committed:
    """Where a committed batch landed."""

    partition: int
    base_offset: int
    last_offset: int


class BatchWriter:
    """Commits batches as the produce path does: upload the object, then one transaction."""

    def __init__(self, url: str, store: ObjectStore) -> None:
        self.url = url
        self.store = store
        self._objects = 0

    async def record_uploading(self, object_key: str) -> None:
        async with await psycopg.AsyncConnection.connect(self.url) as conn:
            await conn.execute("INSERT INTO objects (object_key, state) VALUES (%s, 'uploading')", (object_key,))
            await conn.commit()

    async def upload(self, batches: Sequence[tuple[uuid.UUID, int, bytes]]) -> tuple[str, list[int]]:
        """Record the object as uploading, PUT it; (key, byte offset of each batch)."""
        self._objects += 1
        key = f"objects/{uuid.uuid4().hex}"
        await self.record_uploading(key)
        positions: list[int] = []
        blob = bytearray()
        for _, _, batch in batches:
            positions.append(len(blob))
            blob += batch
        await asyncio.to_thread(self.store.put, key, bytes(blob))
        return key, positions

    async def commit(self, object_key: str, batches: Sequence[tuple[uuid.UUID, int, bytes]],
                     positions: Sequence[int], *, txn_open_partitions: bool = True) -> list[Committed]:
        """The commit transaction: partitions locked in order, offsets assigned, rows written,
        the object made live, the HW moved, a NOTIFY sent (delivered at commit)."""
        out: list[Committed] = []
        async with await psycopg.AsyncConnection.connect(self.url) as conn:
            keys = sorted({(t, p) for t, p, _ in batches})
            hws: dict[tuple[uuid.UUID, int], int] = {}
            for t, p in keys:
                cur = await conn.execute("SELECT high_watermark FROM partitions WHERE topic_id = %s AND partition = %s"
                                         " FOR UPDATE", (t, p))
                row = await cur.fetchone()
                assert row is not None
                hws[(t, p)] = int(row[0])
            total = 0
            for (t, p, batch), position in zip(batches, positions, strict=True):
                header = rb.parse_header(batch)
                base = hws[(t, p)]
                last = base + header.last_offset_delta
                hws[(t, p)] = last + 1
                total += len(batch)
                await conn.execute(
                    "INSERT INTO batches (topic_id, partition, base_offset, last_offset, object_key, byte_offset,"
                    " byte_size, producer_id, producer_epoch, base_sequence, last_sequence, is_transactional,"
                    " is_control, timestamp_type, max_timestamp_ms, append_time_ms)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, 0, %s, -1)",
                    (t, p, base, last, object_key, position, len(batch), header.producer_id, header.producer_epoch,
                     header.base_sequence, header.last_sequence, header.is_transactional, header.is_control,
                     header.max_timestamp))
                if header.is_transactional and txn_open_partitions:
                    await conn.execute(
                        "INSERT INTO producer_states (topic_id, partition, producer_id, producer_epoch,"
                        " recent_batches, txn_first_offset) VALUES (%s, %s, %s, %s, '[]', %s)"
                        " ON CONFLICT (topic_id, partition, producer_id) DO UPDATE"
                        " SET txn_first_offset = coalesce(producer_states.txn_first_offset, EXCLUDED.txn_first_offset)",
                        (t, p, header.producer_id, header.producer_epoch, base))
                out.append(Committed(p, base, last))
            for (t, p), hw in hws.items():
                await conn.execute("UPDATE partitions SET high_watermark = %s WHERE topic_id = %s AND partition = %s",
                                   (hw, t, p))
            await conn.execute("UPDATE objects SET state = 'live', size_bytes = %s WHERE object_key = %s",
                               (total, object_key))
            await conn.execute("SELECT pg_notify(%s, %s)",
                               (APPENDS_CHANNEL, ",".join(f"{t}:{p}" for t, p in keys)))
            await conn.commit()
        return out

    async def append(self, batches: Sequence[tuple[uuid.UUID, int, bytes]]) -> list[Committed]:
        """Upload one object holding ``batches`` and commit them."""
        key, positions = await self.upload(batches)
        return await self.commit(key, batches, positions)

    async def end_transaction(self, topic_id: uuid.UUID, partition: int, producer_id: int, producer_epoch: int,
                              *, commit: bool) -> int:
        """Write a COMMIT/ABORT marker inline; an abort records its aborted range. The marker's offset."""
        async with await psycopg.AsyncConnection.connect(self.url) as conn:
            cur = await conn.execute("SELECT high_watermark FROM partitions WHERE topic_id = %s AND partition = %s"
                                     " FOR UPDATE", (topic_id, partition))
            row = await cur.fetchone()
            assert row is not None
            offset = int(row[0])
            marker = encode_control_batch(marker=CONTROL_COMMIT if commit else CONTROL_ABORT, producer_id=producer_id,
                                          producer_epoch=producer_epoch, coordinator_epoch=0, now_ms=1_700_000_100_000)
            cur = await conn.execute(
                "SELECT txn_first_offset FROM producer_states WHERE topic_id = %s AND partition = %s AND producer_id = %s",
                (topic_id, partition, producer_id))
            first_row = await cur.fetchone()
            first = int(first_row[0]) if first_row is not None and first_row[0] is not None else offset
            await conn.execute(
                "INSERT INTO batches (topic_id, partition, base_offset, last_offset, inline_bytes, byte_offset,"
                " byte_size, producer_id, producer_epoch, base_sequence, last_sequence, is_transactional,"
                " is_control, timestamp_type, max_timestamp_ms, append_time_ms)"
                " VALUES (%s, %s, %s, %s, %s, 0, %s, %s, %s, -1, -1, true, true, 0, %s, -1)",
                (topic_id, partition, offset, offset, marker, len(marker), producer_id, producer_epoch,
                 1_700_000_100_000))
            await conn.execute("UPDATE producer_states SET txn_first_offset = NULL"
                               " WHERE topic_id = %s AND partition = %s AND producer_id = %s",
                               (topic_id, partition, producer_id))
            if not commit:
                await conn.execute("INSERT INTO aborted_txns (topic_id, partition, producer_id, first_offset, last_offset)"
                                   " VALUES (%s, %s, %s, %s, %s)", (topic_id, partition, producer_id, first, offset))
            await conn.execute("UPDATE partitions SET high_watermark = %s WHERE topic_id = %s AND partition = %s",
                               (offset + 1, topic_id, partition))
            await conn.execute("SELECT pg_notify(%s, %s)", (APPENDS_CHANNEL, f"{topic_id}:{partition}"))
            await conn.commit()
        return offset
