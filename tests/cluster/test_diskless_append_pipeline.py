"""The diskless produce pipeline against a real PostgreSQL and a real S3 server (SeaweedFS):
requests of many producers and partitions share one object, nothing is answered before its
commit, retries through another broker are answered with the first offsets, several brokers'
pipelines keep offsets dense, a failed upload acknowledges nothing and its row is collected."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from oncestream.cluster.diskless.append_pipeline import DisklessAppendConfig, DisklessAppender, PartitionAppend
from oncestream.cluster.diskless.object_gc import ObjectGarbageCollector
from oncestream.errors import RemoteObjectNotFoundError, RemoteStorageError
from oncestream.log.config import LogConfig
from oncestream.remote.object_store import ObjectStore, open_object_store
from tests.cluster.diskless_support import (
    assert_dense,
    batch_offsets,
    create_topic,
    fetch_all,
    high_watermark,
    open_store,
)
from tests.support.seaweedfs import SeaweedServer, clean_environ
from tests.unit._batches import idempotent_batch, make_batch, with_bad_crc

CONFIG = LogConfig()


@pytest.fixture
def s3(seaweedfs: SeaweedServer) -> ObjectStore:
    """A fresh key prefix in the session's SeaweedFS bucket."""
    return open_object_store(seaweedfs.uri(f"diskless-{uuid.uuid4().hex}"), clean_environ(**seaweedfs.env()))


class FailingPuts:
    """An ObjectStore whose PUTs fail (the store is down or refuses); everything else passes."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.description = inner.description
        self.puts = 0

    def put(self, key: str, data: bytes | memoryview) -> None:
        self.puts += 1
        raise RemoteStorageError(f"injected: PUT of {key} failed")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _appender(store, objects, broker_id=1, **config) -> DisklessAppender:
    appender = DisklessAppender(store, objects, broker_id=broker_id, key_prefix="pre",
                                config=DisklessAppendConfig(**config))
    appender.start()
    return appender


def test_many_producers_share_one_object_and_the_coordinates_find_their_bytes(pg_database, s3):
    async def main() -> None:
        store = await open_store(pg_database)
        appender = _appender(store, s3, commit_interval_ms=1_000)
        try:
            topic = await create_topic(store, 3)
            sent = {(p, i): make_batch(1 + i, value_size=20 + p) for p in range(3) for i in range(4)}
            answers = await asyncio.gather(*(
                appender.append([PartitionAppend(topic, p, records, CONFIG)]) for (p, _), records in sent.items()))
            assert all(a.error == ErrorCode.none for [a] in answers)
            assert appender.objects_committed == 1  # one object, one transaction for 12 requests
            assert appender.objects_uploaded == 1
            assert appender.bytes_uploaded == sum(len(r) for r in sent.values())
            rows = await fetch_all(store, "SELECT partition, base_offset, object_key, byte_offset, byte_size FROM batches")
            assert len(rows) == 12
            [(key, state)] = await fetch_all(store, "SELECT object_key, state FROM objects")
            assert state == "live"
            assert isinstance(key, str)
            assert key.startswith("pre/diskless/")
            by_offset = {(p, base): (int(str(pos)), int(str(size))) for p, base, _, pos, size in rows}
            for ((partition, _), records), [answer] in zip(sent.items(), answers, strict=True):
                pos, size = by_offset[(partition, answer.base_offset)]
                stored = s3.get_range(key, pos, pos + size)
                assert stored[8:] == records[8:]  # verbatim but for the base offset
            for partition in range(3):
                assert_dense(await batch_offsets(store, topic, partition), await high_watermark(store, topic, partition))
        finally:
            await appender.close()
            await store.close()

    asyncio.run(main())


def test_invalid_data_is_answered_at_once_and_does_not_hold_back_the_rest(pg_database, s3):
    async def main() -> None:
        store = await open_store(pg_database)
        appender = _appender(store, s3, commit_interval_ms=10)
        try:
            topic = await create_topic(store, 2)
            bad, good = await appender.append([
                PartitionAppend(topic, 0, with_bad_crc(make_batch(2)), CONFIG),
                PartitionAppend(topic, 1, make_batch(2), CONFIG)])
            assert bad.error == ErrorCode.corrupt_message
            assert (good.error, good.base_offset) == (ErrorCode.none, 0)
            assert await high_watermark(store, topic, 0) == 0
        finally:
            await appender.close()
            await store.close()

    asyncio.run(main())


def test_a_retry_through_another_broker_is_answered_with_the_first_offsets(pg_database, s3):
    """Invariant 3: the producer's retry lands on broker 2 after broker 1 committed; the second
    object holds only garbage and is collected after its grace."""
    async def main() -> None:
        store = await open_store(pg_database)
        one = _appender(store, s3, broker_id=1, commit_interval_ms=10, delete_grace_ms=0)
        two = _appender(store, s3, broker_id=2, commit_interval_ms=10, delete_grace_ms=0)
        try:
            topic = await create_topic(store, 1)
            await one.append([PartitionAppend(topic, 0, make_batch(3), CONFIG)])
            batch = idempotent_batch(1234, 0, 0, count=2)
            [first] = await one.append([PartitionAppend(topic, 0, batch, CONFIG)])
            [retry] = await two.append([PartitionAppend(topic, 0, batch, CONFIG)])
            assert (first.base_offset, first.duplicate) == (3, False)
            assert (retry.error, retry.base_offset, retry.last_offset, retry.duplicate) == (ErrorCode.none, 3, 4, True)
            assert await batch_offsets(store, topic, 0) == [(0, 2), (3, 4)]
            [(garbage,)] = await fetch_all(store, "SELECT object_key FROM objects WHERE state = 'deleting'")
            assert s3.size(garbage) == len(batch)
            gc = ObjectGarbageCollector(store, s3, delete_grace_ms=0)
            done = await gc.run_once()
            assert done.deleted == 1
            with pytest.raises(RemoteObjectNotFoundError):
                s3.get(garbage)
            assert len(await fetch_all(store, "SELECT 1 FROM objects WHERE state = 'live'")) == 2
        finally:
            await one.close()
            await two.close()
            await store.close()

    asyncio.run(main())


def test_pipelines_of_three_brokers_at_once_keep_offsets_dense_and_answers_exact(pg_database, s3):
    async def main() -> None:
        stores = [await open_store(pg_database) for _ in range(3)]
        appenders = [_appender(stores[i], s3, broker_id=i, commit_interval_ms=5) for i in range(3)]
        try:
            topic = await create_topic(stores[0], 2)

            async def producer(appender: DisklessAppender, pid: int) -> list[tuple[int, int, int]]:
                answered = []
                for seq in range(6):  # an idempotent producer: one request at a time, in order
                    parts = [PartitionAppend(topic, p, idempotent_batch(pid, 0, seq * (1 + p), count=1 + p), CONFIG)
                             for p in range(2)]
                    outcomes = await appender.append(parts)
                    assert [o.error for o in outcomes] == [ErrorCode.none, ErrorCode.none]
                    answered += [(p, o.base_offset, o.last_offset) for p, o in enumerate(outcomes)]
                return answered

            results = await asyncio.gather(*(producer(appenders[pid % 3], pid) for pid in range(9)))
            for partition in range(2):
                offsets = await batch_offsets(stores[0], topic, partition)
                assert len(offsets) == 54
                assert_dense(offsets, await high_watermark(stores[0], topic, partition))
                answered = sorted((b, e) for r in results for p, b, e in r if p == partition)
                assert answered == offsets  # every acknowledgement is exactly one committed row
        finally:
            for appender in appenders:
                await appender.close()
            for store in stores:
                await store.close()

    asyncio.run(main())


def test_a_failed_upload_acknowledges_nothing_and_its_row_is_collected(pg_database, s3):
    async def main() -> None:
        store = await open_store(pg_database)
        failing = FailingPuts(s3)
        appender = _appender(store, failing, commit_interval_ms=10)
        try:
            topic = await create_topic(store, 1)
            [answer] = await appender.append([PartitionAppend(topic, 0, make_batch(2), CONFIG)])
            assert answer.error == ErrorCode.kafka_storage_error
            assert "injected" in (answer.error_message or "")
            assert failing.puts == 1
            assert (appender.upload_failures, appender.objects_uploaded, appender.objects_committed) == (1, 0, 0)
            assert await high_watermark(store, topic, 0) == 0
            assert await batch_offsets(store, topic, 0) == []
            [(key, state)] = await fetch_all(store, "SELECT object_key, state FROM objects")
            assert state == "uploading"
            patient = ObjectGarbageCollector(store, s3, upload_timeout_ms=3_600_000)
            assert (await patient.run_once()).abandoned_uploads == 0  # not old enough yet
            s3.put(key, b"the PUT landed after all")  # an upload that timed out may still land
            gc = ObjectGarbageCollector(store, s3, upload_timeout_ms=0)
            done = await gc.run_once()
            assert (done.abandoned_uploads, done.deleted, done.failed) == (1, 1, 0)
            assert await fetch_all(store, "SELECT * FROM objects") == []
            assert s3.list("") == []
        finally:
            await appender.close()
            await store.close()

    asyncio.run(main())


def test_the_gc_never_deletes_a_referenced_object_and_collects_one_left_unreferenced(pg_database, s3):
    async def main() -> None:
        store = await open_store(pg_database)
        appender = _appender(store, s3, commit_interval_ms=10)
        try:
            topic = await create_topic(store, 1)
            await appender.append([PartitionAppend(topic, 0, make_batch(2), CONFIG)])
            gc = ObjectGarbageCollector(store, s3, upload_timeout_ms=0, delete_grace_ms=0)
            assert await gc.run_once() == type(await gc.run_once())(0, 0, 0, 0)
            [(key,)] = await fetch_all(store, "SELECT object_key FROM objects WHERE state = 'live'")
            assert s3.size(key) > 0
            # Retention (the read side's) removes the batch rows: the object is then garbage.
            await store.run(lambda conn: conn.execute("DELETE FROM batches"))
            done = await gc.run_once()
            assert (done.unreferenced, done.deleted) == (1, 1)
            with pytest.raises(RemoteObjectNotFoundError):
                s3.size(key)
        finally:
            await appender.close()
            await store.close()

    asyncio.run(main())


def test_close_answers_every_buffered_request_and_refuses_new_ones(pg_database, s3):
    async def main() -> None:
        store = await open_store(pg_database)
        appender = _appender(store, s3, commit_interval_ms=3_600_000)
        try:
            topic = await create_topic(store, 1)
            waiting = asyncio.ensure_future(appender.append([PartitionAppend(topic, 0, make_batch(1), CONFIG)]))
            await asyncio.sleep(0.1)
            assert not waiting.done()
            await appender.close()
            [answer] = await asyncio.wait_for(waiting, 30)
            assert answer.error == ErrorCode.not_leader_or_follower
            [late] = await appender.append([PartitionAppend(topic, 0, make_batch(1), CONFIG)])
            assert late.error == ErrorCode.not_leader_or_follower
            assert await fetch_all(store, "SELECT * FROM objects") == []
        finally:
            await appender.close()
            await store.close()

    asyncio.run(main())


class StalledPuts:
    """An ObjectStore whose PUTs hang until released, then land (an upload that timed out for the
    broker but completed later)."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.description = inner.description
        self.release = threading.Event()
        self.landed = threading.Event()

    def put(self, key: str, data: bytes | memoryview) -> None:
        self.release.wait(120)
        self.inner.put(key, data)
        self.landed.set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_an_upload_that_times_out_acknowledges_nothing_and_its_late_object_is_collected(pg_database, s3):
    async def main() -> None:
        store = await open_store(pg_database)
        stalled = StalledPuts(s3)
        appender = _appender(store, stalled, commit_interval_ms=10, upload_timeout_ms=200)
        try:
            topic = await create_topic(store, 1)
            [answer] = await appender.append([PartitionAppend(topic, 0, make_batch(2), CONFIG)])
            assert answer.error == ErrorCode.kafka_storage_error
            assert "did not end within 200 ms" in (answer.error_message or "")
            stalled.release.set()
            assert await asyncio.to_thread(stalled.landed.wait, 60)
            [(key, state)] = await fetch_all(store, "SELECT object_key, state FROM objects")
            assert state == "uploading"
            assert isinstance(key, str)
            assert s3.size(key) > 0  # the late PUT landed: garbage nobody committed
            assert await high_watermark(store, topic, 0) == 0
            done = await ObjectGarbageCollector(store, s3, upload_timeout_ms=0).run_once()
            assert (done.abandoned_uploads, done.deleted) == (1, 1)
            assert s3.list("") == []
        finally:
            await appender.close()
            await store.close()

    asyncio.run(main())


def test_the_gc_task_collects_in_the_background_and_stops_when_asked(pg_database, s3):
    async def main() -> None:
        store = await open_store(pg_database)
        appender = _appender(store, FailingPuts(s3), commit_interval_ms=10)
        try:
            topic = await create_topic(store, 1)
            [answer] = await appender.append([PartitionAppend(topic, 0, make_batch(1), CONFIG)])
            assert answer.error == ErrorCode.kafka_storage_error
            stop = asyncio.Event()
            task = asyncio.ensure_future(ObjectGarbageCollector(store, s3, upload_timeout_ms=0).run_every(20, stop))
            for _ in range(600):  # bounded: 60 s
                if not await fetch_all(store, "SELECT 1 FROM objects"):
                    break
                await asyncio.sleep(0.1)
            assert await fetch_all(store, "SELECT 1 FROM objects") == []
            stop.set()
            await asyncio.wait_for(task, 30)
        finally:
            await appender.close()
            await store.close()

    asyncio.run(main())


class FirstPutSlow:
    """An ObjectStore whose first PUT takes longer than the ones after it."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.description = inner.description
        self.puts = 0
        self.order: list[str] = []

    def put(self, key: str, data: bytes | memoryview) -> None:
        self.puts += 1
        if self.puts == 1:
            time.sleep(0.5)
        self.inner.put(key, data)
        self.order.append(key)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_objects_commit_in_the_order_they_were_cut_even_when_uploads_overlap(pg_database, s3):
    """A producer with several requests in flight (max.in.flight > 1) sends sequences 0, 1, 2 in
    requests that land in different objects; the first object's upload is the slowest, yet the
    commits keep the order, so no request is refused OUT_OF_ORDER_SEQUENCE_NUMBER."""
    async def main() -> None:
        store = await open_store(pg_database)
        slow = FirstPutSlow(s3)
        appender = _appender(store, slow, commit_interval_ms=0, max_uploads_in_flight=3)
        try:
            topic = await create_topic(store, 1)
            in_flight = []
            for seq in range(3):
                in_flight.append(asyncio.ensure_future(
                    appender.append([PartitionAppend(topic, 0, idempotent_batch(8, 0, seq), CONFIG)])))
                await asyncio.sleep(0.05)  # each request is cut into an object of its own
            answers = [a for [a] in await asyncio.gather(*in_flight)]
            assert [(a.error, a.base_offset) for a in answers] == [(ErrorCode.none, i) for i in range(3)]
            assert slow.puts == 3
            [(first_key,)] = await fetch_all(store, "SELECT object_key FROM batches WHERE base_offset = 0")
            assert slow.order[-1] == first_key  # its upload ended last, its commit came first
        finally:
            await appender.close()
            await store.close()

    asyncio.run(main())
