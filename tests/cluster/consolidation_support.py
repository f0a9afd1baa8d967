"""Shared helpers of the consolidation tests (real PostgreSQL and SeaweedFS)."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from oncestream.cluster.diskless.consolidation import ConsolidationConfig, ConsolidationJob
from oncestream.cluster.diskless.object_cache import ObjectRangeCache
from oncestream.cluster.diskless.read_path import READ_COMMITTED, DisklessReader
from oncestream.cluster.pg.store import Conn, MetadataStore
from oncestream.protocol.records import NewRecord, committed_records, encode_batch
from oncestream.remote.object_store import ObjectStore
from tests.cluster.diskless_read_support import NOW_MS, run_with_store
from tests.cluster.diskless_support import fetch_all

T = TypeVar("T")

SMALL = ConsolidationConfig(min_batches=3, segment_bytes=1 << 20)


def run(url: str, main: Callable[[MetadataStore], Awaitable[T]]) -> T:
    """``main(store)`` on a fresh MetadataStore, bounded in time."""
    return run_with_store(url, main, timeout_s=180)


def job(store: MetadataStore, objects: ObjectStore, *, broker_id: int = 1,
        config: ConsolidationConfig = SMALL, clock_ms: Callable[[], int] = lambda: NOW_MS) -> ConsolidationJob:
    return ConsolidationJob(store, objects, broker_id=broker_id, key_prefix="test", config=config, clock_ms=clock_ms)


def keyed_batch(items: Sequence[tuple[bytes, bytes | None]], *, producer_id: int = -1, producer_epoch: int = -1,
                base_sequence: int = -1, transactional: bool = False, timestamp_ms: int = NOW_MS) -> bytes:
    """A producer's batch of (key, value) records (value None: a tombstone), stamped from ``timestamp_ms``."""
    return encode_batch([NewRecord(value=v, key=k, timestamp_ms=timestamp_ms + i) for i, (k, v) in enumerate(items)],
                        now_ms=timestamp_ms, producer_id=producer_id, producer_epoch=producer_epoch,
                        base_sequence=base_sequence, transactional=transactional)


async def set_topic_config(store: MetadataStore, topic_id: uuid.UUID, key: str, value: str) -> None:
    async def insert(conn: Conn) -> None:
        await conn.execute("INSERT INTO topic_configs (topic_id, key, value) VALUES (%s, %s, %s)",
                           (topic_id, key, value))

    await store.run(insert)


async def read_records(store: MetadataStore, reader: DisklessReader, topic_id: uuid.UUID, partition: int, *,
                       isolation_level: int = 0) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every record a consumer reads from the log start to the end: (offset, key, value), by
    fetching as a consumer does (the next fetch from after the last batch served)."""
    records: list[tuple[int, bytes | None, bytes | None]] = []
    offset = await log_start(store, topic_id, partition)
    while True:
        result = await reader.read(topic_id, partition, offset, 64 * 1024, isolation_level)
        upper = result.last_stable_offset if isolation_level == READ_COMMITTED else result.high_watermark
        if offset >= upper or not result.chunks:
            return records
        blob = b"".join(result.chunks)
        aborted = None
        if isolation_level == READ_COMMITTED:
            aborted = [_Aborted(p, f) for p, f in result.aborted_transactions or []]
        last = offset
        for batch, record in committed_records(blob, aborted):
            last = max(last, batch.header.last_offset + 1)
            if record is not None:
                records.append((record.offset, record.key, record.value))
        offset = last


class _Aborted:
    def __init__(self, producer_id: int, first_offset: int) -> None:
        self.producer_id = producer_id
        self.first_offset = first_offset


async def log_start(store: MetadataStore, topic_id: uuid.UUID, partition: int) -> int:
    rows = await fetch_all(store, "SELECT log_start_offset FROM partitions WHERE topic_id = %s AND partition = %s",
                           (topic_id, partition))
    return int(str(rows[0][0]))


def new_reader(store: MetadataStore, objects: ObjectStore) -> DisklessReader:
    return DisklessReader(store, ObjectRangeCache(objects))


async def object_states(store: MetadataStore) -> dict[str, str]:
    return {str(k): str(s) for k, s in await fetch_all(store, "SELECT object_key, state FROM objects")}


async def row_objects(store: MetadataStore, topic_id: uuid.UUID, partition: int) -> list[tuple[int, str | None]]:
    rows = await fetch_all(store, "SELECT base_offset, object_key FROM batches WHERE topic_id = %s AND partition = %s"
                                  " ORDER BY base_offset", (topic_id, partition))
    return [(int(str(r[0])), None if r[1] is None else str(r[1])) for r in rows]
