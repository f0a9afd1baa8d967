"""Shared helpers of the diskless write-side tests: a metadata store with the schema, topics made
with plain SQL (the catalog's own API is another helper's), commits without an upload, row readers."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence

from oncestream.cluster.diskless.commit import AppendOutcome, commit_uploaded, record_uploading
from oncestream.cluster.diskless.produce_object import build_produce_object, new_object_key, validate_append
from oncestream.cluster.pg.store import Conn, MetadataStore, MetadataStoreConfig
from oncestream.log.config import LogConfig

NOW_MS = 1_800_000_000_000


async def open_store(url: str, **config: int) -> MetadataStore:
    """A MetadataStore on ``url`` with every schema step applied."""
    return await MetadataStore.open(url, MetadataStoreConfig(**config))


async def create_topic(store: MetadataStore, partitions: int = 3, name: str | None = None) -> uuid.UUID:
    """A topic and its partitions, inserted directly."""
    topic_id = uuid.uuid4()

    async def insert(conn: Conn) -> None:
        await conn.execute("INSERT INTO topics (topic_id, name, num_partitions) VALUES (%s, %s, %s)",
                           (topic_id, name or f"t-{topic_id.hex[:8]}", partitions))
        for partition in range(partitions):
            await conn.execute("INSERT INTO partitions (topic_id, partition) VALUES (%s, %s)", (topic_id, partition))

    await store.run(insert)
    return topic_id


async def commit_records(
    store: MetadataStore, appends: Sequence[tuple[uuid.UUID, int, bytes]], *, config: LogConfig | None = None,
    key: str | None = None, now_ms: int = NOW_MS,
) -> list[AppendOutcome]:
    """Record an object as uploading and commit it (no PUT: the commit does not read the bytes)."""
    key = key or new_object_key("test", now_ms)
    validated = [validate_append(t, p, records, config or LogConfig()) for t, p, records in appends]
    obj = build_produce_object(key, validated, now_ms)

    async def record(conn: Conn) -> None:
        await record_uploading(conn, key, len(obj.data), 1)

    async def commit(conn: Conn) -> list[AppendOutcome]:
        return await commit_uploaded(conn, key, obj.appends)

    await store.run(record)
    return await store.run(commit)


async def fetch_all(store: MetadataStore, query: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    """Every row of ``query``."""
    async def run(conn: Conn) -> list[tuple[object, ...]]:
        cursor = await conn.execute(query.encode(), params)
        return list(await cursor.fetchall())

    return await store.run(run)


async def batch_offsets(store: MetadataStore, topic_id: uuid.UUID, partition: int) -> list[tuple[int, int]]:
    """(base_offset, last_offset) of every batch row of the partition, in offset order."""
    rows = await fetch_all(store, "SELECT base_offset, last_offset FROM batches WHERE topic_id = %s AND"
                           " partition = %s ORDER BY base_offset", (topic_id, partition))
    return [(int(str(r[0])), int(str(r[1]))) for r in rows]


async def high_watermark(store: MetadataStore, topic_id: uuid.UUID, partition: int) -> int:
    rows = await fetch_all(store, "SELECT high_watermark FROM partitions WHERE topic_id = %s AND partition = %s",
                           (topic_id, partition))
    return int(str(rows[0][0]))


def assert_dense(offsets: list[tuple[int, int]], high_watermark_offset: int) -> None:
    """Offsets start at 0, leave no gap and no overlap, and end just below the high watermark."""
    expected = 0
    for base, last in offsets:
        assert base == expected, f"gap or overlap at {base} (expected {expected}): {offsets}"
        assert last >= base
        expected = last + 1
    assert expected == high_watermark_offset


def run_with_store(url: str, body: Callable[[MetadataStore], Awaitable[None]], **config: int) -> None:
    """Run ``body`` on a fresh event loop with a store on ``url``, closed afterwards."""
    async def main() -> None:
        store = await open_store(url, **config)
        try:
            await body(store)
        finally:
            await store.close()

    asyncio.run(main())
