"""DeleteRecords and retention of diskless partitions against PostgreSQL and SeaweedFS: the log
start moves durably, rows wholly below it go, and an object is released ('deleting' after a grace
longer than any fetch) only once no batch row of any partition points at it (invariant 6)."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from oncestream.cluster.diskless.log_start_moves import delete_records
from oncestream.cluster.diskless.object_cache import ObjectRangeCache
from oncestream.cluster.diskless.offsets_query import EARLIEST_TIMESTAMP, OffsetAnswer
from oncestream.cluster.diskless.read_path import DisklessReader
from oncestream.cluster.diskless.retention import RetentionEnforcer
from oncestream.cluster.pg.store import Conn, MetadataStore
from oncestream.errors import OffsetOutOfRangeError
from oncestream.protocol import record_batch as rb
from oncestream.remote.object_store import ObjectStore
from tests.cluster.diskless_read_support import BatchWriter, data_batch, run_with_store
from tests.cluster.diskless_support import create_topic, fetch_all

HOUR_MS = 3600 * 1000



async def object_states(store: MetadataStore) -> dict[str, str]:
    return {str(k): str(s) for k, s in await fetch_all(store, "SELECT object_key, state FROM objects")}


async def assert_no_released_object_is_referenced(store: MetadataStore) -> None:
    """Invariant 6: no object is 'deleting' while a batch row points at it."""
    rows = await fetch_all(store, "SELECT o.object_key FROM objects o WHERE o.state = 'deleting'"
                                  " AND EXISTS (SELECT 1 FROM batches b WHERE b.object_key = o.object_key)")
    assert rows == []


async def delete(store: MetadataStore, topic: uuid.UUID, partition: int, offset: int) -> int:
    async def step(conn: Conn) -> int:
        return (await delete_records(conn, topic, partition, offset)).log_start_offset

    return await store.run(step)


def test_delete_records_moves_the_log_start_and_releases_only_unreferenced_objects(
        pg_database: str, object_store: ObjectStore) -> None:
    async def main(store: MetadataStore) -> None:
        topic = await create_topic(store, 2)
        writer = BatchWriter(store, object_store)
        uploaded = await writer.upload([(topic, 0, data_batch([b"a", b"b"])), (topic, 1, data_batch([b"x"]))])  # 0-1
        await writer.commit(uploaded)
        shared = uploaded.key
        await writer.append([(topic, 0, data_batch([b"c"]))])  # 2
        await writer.append([(topic, 0, data_batch([b"d", b"e"]))])  # 3-4
        reader = DisklessReader(store, ObjectRangeCache(object_store))
        await reader.read(topic, 0, 0, 1 << 20)  # the reader caches coordinates from 0 on
        keys_before = await object_states(store)

        assert await delete(store, topic, 0, 3) == 3
        states = await object_states(store)
        assert states[shared] == "live"  # partition 1's row still points at it
        released = [k for k, s in states.items() if s == "deleting"]
        assert len(released) == 1  # the object of offset 2 only
        grace = await fetch_all(store, "SELECT delete_after > now() + interval '60 seconds' FROM objects"
                                       " WHERE state = 'deleting'")
        assert grace == [(True,)]
        with pytest.raises(OffsetOutOfRangeError):
            await reader.read(topic, 0, 2, 1 << 20)
        assert [h.base_offset for h, _ in rb.iter_batches(b"".join((await reader.read(topic, 0, 3, 1 << 20)).chunks))] == [3]
        assert await reader.list_offset(topic, 0, EARLIEST_TIMESTAMP) == OffsetAnswer(3)

        # Inside a batch: the batch stays (it holds offsets at and after the log start) and is served whole.
        assert await delete(store, topic, 0, 4) == 4
        result = await reader.read(topic, 0, 4, 1 << 20)
        assert [h.base_offset for h, _ in rb.iter_batches(b"".join(result.chunks))] == [3]
        assert result.log_start_offset == 4
        assert await delete(store, topic, 0, 2) == 4  # below the log start: nothing changes
        with pytest.raises(OffsetOutOfRangeError):
            await delete(store, topic, 0, 6)  # past the high watermark (5)

        assert await delete(store, topic, 1, -1) == 1  # -1: up to the high watermark
        assert (await object_states(store))[shared] == "deleting"
        assert set(await object_states(store)) == set(keys_before)  # rows stay until the GC deletes objects
        await assert_no_released_object_is_referenced(store)

    run_with_store(pg_database, main)


def test_concurrent_moves_of_partitions_sharing_objects_release_each_object_once_all_are_gone(
        pg_database: str, object_store: ObjectStore) -> None:
    async def main(store: MetadataStore) -> None:
        topic = await create_topic(store, 4)
        writer = BatchWriter(store, object_store)
        for i in range(6):  # every object holds a batch of every partition
            await writer.append([(topic, p, data_batch([f"{i}-{p}".encode()])) for p in range(4)])
        for round_number in range(2):
            # Half way first, then all: both times the four moves run at once.
            offset = 3 if round_number == 0 else -1
            await asyncio.gather(*(delete(store, topic, p, offset) for p in range(4)))
            await assert_no_released_object_is_referenced(store)
            states = await object_states(store)
            assert sorted(states.values()).count("deleting") == (3 if round_number == 0 else 6)

    run_with_store(pg_database, main)


def test_retention_by_time_and_size_in_bounded_rounds(pg_database: str, object_store: ObjectStore) -> None:
    async def main(store: MetadataStore) -> None:
        now_ms = int(time.time() * 1000)
        by_time = await create_topic(store, 1, "by-time")
        by_size = await create_topic(store, 1, "by-size")
        compacted = await create_topic(store, 1, "compacted")
        writer = BatchWriter(store, object_store)
        old, recent = [now_ms - 3 * HOUR_MS], [now_ms - 60_000]
        for topic in (by_time, compacted):
            await writer.append([(topic, 0, data_batch([b"old"], timestamps_ms=old))])
            await writer.append([(topic, 0, data_batch([b"old"], timestamps_ms=old))])
            await writer.append([(topic, 0, data_batch([b"recent"], timestamps_ms=recent))])
        batch = data_batch([b"s" * 50], timestamps_ms=recent)
        for _ in range(5):
            await writer.append([(by_size, 0, batch)])

        async def configure(conn: Conn) -> None:
            for topic, key, value in ((by_time, "retention.ms", str(HOUR_MS)),
                                      (by_size, "retention.bytes", str(2 * len(batch))),
                                      (by_size, "retention.ms", "-1"),
                                      (compacted, "retention.ms", str(HOUR_MS)),
                                      (compacted, "cleanup.policy", "compact")):
                await conn.execute("INSERT INTO topic_configs (topic_id, key, value) VALUES (%s, %s, %s)",
                                   (topic, key, value))

        await store.run(configure)
        # One partition and one batch per round: the work of a round is bounded.
        enforcer = RetentionEnforcer(store, partitions_per_round=1, max_batches_per_move=1)
        for _ in range(12):
            await enforcer.run_round()
        reader = DisklessReader(store, ObjectRangeCache(object_store))
        assert await reader.list_offset(by_time, 0, EARLIEST_TIMESTAMP) == OffsetAnswer(2)  # the recent batch stays
        assert await reader.list_offset(by_size, 0, EARLIEST_TIMESTAMP) == OffsetAnswer(3)  # two batches are retention.bytes
        assert await reader.list_offset(compacted, 0, EARLIEST_TIMESTAMP) == OffsetAnswer(0)
        await assert_no_released_object_is_referenced(store)
        states = await object_states(store)
        assert sorted(states.values()).count("deleting") == 2 + 3
        first_round = await RetentionEnforcer(store).run_round()  # nothing left to do
        assert first_round.moves == {}

    run_with_store(pg_database, main)
