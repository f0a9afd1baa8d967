"""Test support of the diskless read side: data written through the write side's own path
(``build_produce_object`` -> ``record_uploading`` -> PUT -> ``commit_uploaded``, cluster/diskless)
and ``write_markers`` for transaction markers, on a ``MetadataStore``. A commit whose notification
is lost on its way (``notify=False``) is the same commit run on a connection that drops its
``pg_notify``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar, cast

from oncestream.cluster.diskless.commit import AppendOutcome, commit_uploaded, record_uploading
from oncestream.cluster.diskless.markers import MarkerOutcome, TxnMarker, write_markers
from oncestream.cluster.diskless.produce_object import ProduceObject, build_produce_object, new_object_key, validate_append
from oncestream.cluster.pg.store import Conn, MetadataStore
from oncestream.log.config import LogConfig
from oncestream.protocol.records import NewRecord, encode_batch
from oncestream.remote.object_store import ObjectStore
from tests.cluster import diskless_support

NOW_MS = 1_700_000_000_000
BROKER_ID = 1
MARKER_TIMESTAMP_MS = NOW_MS + 100_000


T = TypeVar("T")


def run_with_store(url: str, main: Callable[[MetadataStore], Awaitable[T]], *, timeout_s: float = 120) -> T:
    """``main`` on a fresh event loop with a MetadataStore of ``url`` (closed after), bounded in
    time and returning its result (``diskless_support.run_with_store`` is neither)."""
    async def bounded() -> T:
        async with asyncio.timeout(timeout_s):
            store = await open_store(url)
            try:
                return await main(store)
            finally:
                await store.close()

    return asyncio.run(bounded())


async def open_store(url: str) -> MetadataStore:
    """A MetadataStore on ``url`` (every schema step applied) that gives up quickly when down."""
    return await diskless_support.open_store(url, retry_timeout_ms=5_000)


def data_batch(values: Sequence[bytes], *, timestamps_ms: Sequence[int] | None = None, producer_id: int = -1,
               producer_epoch: int = -1, base_sequence: int = -1, transactional: bool = False) -> bytes:
    """A producer's batch (base offset 0, as producers send them)."""
    stamps = list(timestamps_ms) if timestamps_ms is not None else [NOW_MS + i for i in range(len(values))]
    return encode_batch([NewRecord(value=v, key=None, timestamp_ms=t) for v, t in zip(values, stamps, strict=True)],
                        now_ms=stamps[0], producer_id=producer_id, producer_epoch=producer_epoch,
                        base_sequence=base_sequence, transactional=transactional)


class _NotificationLost:
    """A connection whose ``pg_notify`` never happens (a notification lost on its way)."""

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    async def execute(self, query: Any, params: Any = None) -> Any:
        if isinstance(query, str) and query.startswith("SELECT pg_notify"):
            return None
        return await self._conn.execute(query, params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class BatchWriter:
    """Produces into diskless partitions through the write side's upload-then-commit path."""

    def __init__(self, store: MetadataStore, objects: ObjectStore) -> None:
        self.store = store
        self.objects = objects

    async def upload(self, appends: Sequence[tuple[uuid.UUID, int, bytes]]) -> ProduceObject:
        """Record the object as 'uploading' and PUT it: no batch row exists for it yet."""
        key = new_object_key("test", NOW_MS)
        obj = build_produce_object(key, [validate_append(t, p, data, LogConfig()) for t, p, data in appends], NOW_MS)

        async def record(conn: Conn) -> None:
            await record_uploading(conn, key, len(obj.data), BROKER_ID)

        await self.store.run(record)
        await asyncio.to_thread(self.objects.put, key, obj.data)
        return obj

    async def commit(self, obj: ProduceObject, *, notify: bool = True) -> list[AppendOutcome]:
        async def commit(conn: Conn) -> list[AppendOutcome]:
            target = conn if notify else cast(Conn, _NotificationLost(conn))
            return await commit_uploaded(target, obj.key, obj.appends)

        outcomes = await self.store.run(commit)
        for outcome in outcomes:
            assert outcome.error == 0, outcome
        return outcomes

    async def append(self, appends: Sequence[tuple[uuid.UUID, int, bytes]], *, notify: bool = True) -> list[AppendOutcome]:
        """Upload one object holding ``appends`` (one request per item) and commit it."""
        return await self.commit(await self.upload(appends), notify=notify)

    async def end_transaction(self, topic_id: uuid.UUID, partition: int, producer_id: int, producer_epoch: int,
                              *, commit: bool) -> int:
        """Write a COMMIT/ABORT marker (the write side's ``write_markers``); the marker's offset."""
        marker = TxnMarker(topic_id, partition, producer_id, producer_epoch, commit, coordinator_epoch=0)

        async def write(conn: Conn) -> list[MarkerOutcome]:
            return await write_markers(conn, [marker], MARKER_TIMESTAMP_MS)

        (outcome,) = await self.store.run(write)
        assert outcome.error == 0, outcome
        return outcome.offset
