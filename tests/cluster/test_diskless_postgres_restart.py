"""PostgreSQL stopped while a produce object is being uploaded (issue 22, faults): its producers
are answered a retriable error, nothing is acknowledged; once PostgreSQL is back the same
pipeline commits again by itself and the producer's retry is written exactly once."""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import psycopg
from kio.schema.errors import ErrorCode

from oncestream.cluster.diskless.append_pipeline import DisklessAppendConfig, DisklessAppender, PartitionAppend
from oncestream.cluster.diskless.object_gc import ObjectGarbageCollector
from oncestream.log.config import LogConfig
from oncestream.remote.object_store import ObjectStore, open_object_store
from tests.cluster.diskless_support import batch_offsets, create_topic, fetch_all, open_store
from tests.support.seaweedfs import clean_environ
from tests.unit._batches import idempotent_batch


class StopsPostgresDuringFirstPut:
    """An ObjectStore that stops PostgreSQL in the middle of its first PUT (after the object was
    recorded 'uploading', before its commit)."""

    def __init__(self, inner: ObjectStore, stop: threading.Event, stopped: threading.Event) -> None:
        self.inner = inner
        self.description = inner.description
        self._stop = stop
        self._stopped = stopped
        self.puts = 0

    def put(self, key: str, data: bytes | memoryview) -> None:
        self.puts += 1
        if self.puts == 1:
            self._stop.set()
            self._stopped.wait(120)
        self.inner.put(key, data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_postgres_down_during_an_upload_acknowledges_nothing_and_the_pipeline_resumes(postgres_factory, seaweedfs):
    server = postgres_factory()
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute("CREATE DATABASE diskless_restart")
    s3 = open_object_store(seaweedfs.uri(f"restart-{uuid.uuid4().hex}"), clean_environ(**seaweedfs.env()))
    stop, stopped = threading.Event(), threading.Event()
    objects = StopsPostgresDuringFirstPut(s3, stop, stopped)

    async def main() -> None:
        store = await open_store(server.url("diskless_restart"), retry_timeout_ms=1_500, connect_timeout_ms=2_000)
        appender = DisklessAppender(store, objects, broker_id=1,
                                    config=DisklessAppendConfig(commit_interval_ms=10))
        appender.start()
        try:
            topic = await create_topic(store, 1)
            batch = [PartitionAppend(topic, 0, idempotent_batch(99, 0, 0, count=3), LogConfig())]
            first = asyncio.ensure_future(appender.append(batch))
            assert await asyncio.to_thread(stop.wait, 60)
            await asyncio.to_thread(server.stop)
            stopped.set()
            [answer] = await asyncio.wait_for(first, 120)
            assert answer.error == ErrorCode.request_timed_out  # retriable; nothing acknowledged
            assert appender.commit_failures == 1
            await asyncio.to_thread(server.start)
            [retry] = await asyncio.wait_for(appender.append(batch), 120)
            assert (retry.error, retry.base_offset, retry.last_offset, retry.duplicate) == (ErrorCode.none, 0, 2, False)
            assert await batch_offsets(store, topic, 0) == [(0, 2)]
            states = sorted(str(r[0]) for r in await fetch_all(store, "SELECT state FROM objects"))
            assert states == ["live", "uploading"]  # the first object never committed
            done = await ObjectGarbageCollector(store, s3, upload_timeout_ms=0).run_once()
            assert (done.abandoned_uploads, done.deleted) == (1, 1)
            assert len(s3.list("")) == 1
        finally:
            await appender.close()
            await store.close()

    asyncio.run(main())
