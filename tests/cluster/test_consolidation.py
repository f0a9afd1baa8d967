"""Consolidation of diskless partitions against the real PostgreSQL and SeaweedFS: many small
produce objects become one segment per partition, coordinates swapped in one transaction that
refuses rows changed meanwhile, old objects kept for the grace (invariants 6 and 7), and a double
run on two brokers harmless."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from oncestream.cluster.diskless.consolidated_object import CONSOLIDATED_SUFFIX
from oncestream.cluster.diskless.consolidation import ConsolidationConfig
from oncestream.cluster.diskless.log_start_moves import delete_records
from oncestream.cluster.diskless.object_gc import ObjectGarbageCollector
from oncestream.cluster.pg.store import Conn, MetadataStore
from oncestream.errors import RemoteObjectNotFoundError
from oncestream.postgres_process import PostgresServer
from oncestream.protocol import record_batch as rb
from oncestream.remote.object_store import ObjectStore
from tests.cluster.consolidation_support import (
    SMALL,
    job,
    keyed_batch,
    new_reader,
    object_states,
    read_records,
    row_objects,
    run,
    set_topic_config,
)
from tests.cluster.diskless_read_support import BatchWriter, data_batch
from tests.cluster.diskless_support import assert_dense, batch_offsets, create_topic, fetch_all, open_store


async def write_small_objects(writer: BatchWriter, topic: uuid.UUID, count: int, *, shared_partition: int | None = None,
                              ) -> list[str]:
    """``count`` objects of two records each for partition 0 (the first also holding a batch of
    ``shared_partition``); their keys."""
    keys: list[str] = []
    for i in range(count):
        appends = [(topic, 0, data_batch([f"v{i}a".encode(), f"v{i}b".encode()]))]
        if i == 0 and shared_partition is not None:
            appends.append((topic, shared_partition, data_batch([b"other"])))
        uploaded = await writer.upload(appends)
        await writer.commit(uploaded)
        keys.append(uploaded.key)
    return keys


async def delete_after_seconds(store: MetadataStore, key: str) -> float:
    rows = await fetch_all(store, "SELECT extract(epoch FROM delete_after - now()) FROM objects WHERE object_key = %s",
                           (key,))
    return float(str(rows[0][0]))


def test_a_round_merges_a_partitions_objects_into_one_segment_and_readers_see_the_same_records(
        pg_database: str, object_store: ObjectStore) -> None:
    async def main(store: MetadataStore) -> None:
        topic = await create_topic(store, 2)
        writer = BatchWriter(store, object_store)
        keys = await write_small_objects(writer, topic, 5, shared_partition=1)
        old_reader = new_reader(store, object_store)
        before = await read_records(store, old_reader, topic, 0)  # caches the old coordinates
        assert [offset for offset, _, _ in before] == list(range(10))
        consolidation = job(store, object_store)

        round_task = asyncio.ensure_future(consolidation.run_round())
        during: list[list[tuple[int, bytes | None, bytes | None]]] = []
        for _ in range(10_000):  # consumers read the partition for as long as the round runs
            during.append(await read_records(store, new_reader(store, object_store), topic, 0))
            if round_task.done():
                break
        round_result = await round_task
        during.append(await read_records(store, new_reader(store, object_store), topic, 0))
        assert len(during) >= 2
        assert all(records == before for records in during)
        swap = round_result.swaps[(topic, 0)]
        assert (swap.rows_swapped, swap.rows_skipped, swap.rows_dropped) == (5, 0, 0)
        assert (topic, 1) not in round_result.swaps  # one batch: below min.batches

        rows = await row_objects(store, topic, 0)
        assert {key for _, key in rows} == {swap.object_key}
        assert swap.object_key.endswith(CONSOLIDATED_SUFFIX)
        # The object is a .log: the batches with their committed offsets back to back.
        segment = await asyncio.to_thread(object_store.get, swap.object_key)
        assert [h.base_offset for h, _ in rb.iter_batches(segment, verify_crc=True)] == [base for base, _ in rows]
        assert sum(h.size_bytes for h, _ in rb.iter_batches(segment)) == len(segment)

        states = await object_states(store)
        assert states[swap.object_key] == "live"
        assert states[keys[0]] == "live"  # partition 1's batch is still in it
        assert swap.objects_released == tuple(sorted(keys[1:]))
        for key in keys[1:]:
            assert states[key] == "deleting"
            assert await delete_after_seconds(store, key) > SMALL.delete_grace_ms / 1000 - 60
            assert await asyncio.to_thread(object_store.size, key) > 0  # still there for old readers

        # A reader holding the old coordinates (its cache) and a fresh one read the same records.
        assert await read_records(store, old_reader, topic, 0) == before
        assert await read_records(store, new_reader(store, object_store), topic, 0) == before
        assert await read_records(store, new_reader(store, object_store), topic, 1) == [(0, None, b"other")]

    run(pg_database, main)


def test_the_swap_skips_rows_a_concurrent_delete_records_changed(pg_database: str, object_store: ObjectStore) -> None:
    async def main(store: MetadataStore) -> None:
        topic = await create_topic(store, 1)
        writer = BatchWriter(store, object_store)
        await write_small_objects(writer, topic, 6)  # offsets 0-11, two per batch
        consolidation = job(store, object_store)
        plan = await consolidation.plan(topic, 0)
        assert plan is not None
        assert len(plan.rows) == 6
        uploaded = await consolidation.upload(plan)

        async def delete(conn: Conn) -> None:
            await delete_records(conn, topic, 0, 6)

        await store.run(delete)  # the log start moves while the segment is uploaded
        swap = await consolidation.swap(uploaded)
        assert (swap.rows_swapped, swap.rows_skipped) == (3, 3)
        rows = await row_objects(store, topic, 0)
        assert rows == [(6, uploaded.object_key), (8, uploaded.object_key), (10, uploaded.object_key)]
        records = await read_records(store, new_reader(store, object_store), topic, 0)
        assert [offset for offset, _, _ in records] == list(range(6, 12))
        assert [value for _, _, value in records] == [f"v{i}{s}".encode() for i in range(3, 6) for s in "ab"]

    run(pg_database, main)


def test_a_stale_swap_after_another_consolidation_swaps_nothing_and_its_upload_is_garbage(
        pg_database: str, object_store: ObjectStore) -> None:
    async def main(store: MetadataStore) -> None:
        topic = await create_topic(store, 1)
        writer = BatchWriter(store, object_store)
        await write_small_objects(writer, topic, 4)
        first, second = job(store, object_store, broker_id=1), job(store, object_store, broker_id=2)
        late_plan = await second.plan(topic, 0)
        assert late_plan is not None
        late = await second.upload(late_plan)
        done = await first.consolidate_partition(topic, 0)
        assert done is not None
        assert done.rows_swapped == 4
        stale = await second.swap(late)
        assert (stale.rows_swapped, stale.rows_skipped, stale.objects_released) == (0, 4, ())
        states = await object_states(store)
        assert states[late.object_key] == "deleting"  # nothing points at it: garbage
        assert states[done.object_key] == "live"
        assert {key for _, key in await row_objects(store, topic, 0)} == {done.object_key}

    run(pg_database, main)


def test_two_brokers_running_rounds_at_once_duplicate_nothing_and_lose_nothing(
        pg_database: str, object_store: ObjectStore) -> None:
    async def main(store: MetadataStore) -> None:
        topic = await create_topic(store, 3)
        writer = BatchWriter(store, object_store)
        for i in range(4):
            await writer.append([(topic, p, data_batch([f"p{p}-{i}".encode()])) for p in range(3)])
        reader = new_reader(store, object_store)
        before = {p: await read_records(store, reader, topic, p) for p in range(3)}
        rows_before = {p: [base for base, _ in await row_objects(store, topic, p)] for p in range(3)}

        # With leases: each partition is consolidated by one of the two brokers.
        a, b = job(store, object_store, broker_id=1), job(store, object_store, broker_id=2)
        round_a, round_b = await asyncio.gather(a.run_round(), b.run_round())
        assert set(round_a.swaps) | set(round_b.swaps) == {(topic, p) for p in range(3)}
        assert not set(round_a.swaps) & set(round_b.swaps)

        # Without them (leases of 0 ms, both past their plan before either swaps): still harmless.
        for i in range(4, 8):
            await writer.append([(topic, p, data_batch([f"p{p}-{i}".encode()])) for p in range(3)])
        before = {p: await read_records(store, reader, topic, p) for p in range(3)}
        rows_before = {p: [base for base, _ in await row_objects(store, topic, p)] for p in range(3)}
        no_lease = ConsolidationConfig(min_batches=3, lease_ms=0)
        a = job(store, object_store, broker_id=1, config=no_lease)
        b = job(store, object_store, broker_id=2, config=no_lease)
        plans = await asyncio.gather(*(j.plan(topic, p) for p in range(3) for j in (a, b)))
        uploads = await asyncio.gather(*(j.upload(plan) for plan, j in zip(plans, [a, b] * 3, strict=True)
                                         if plan is not None))
        swaps = await asyncio.gather(*(j.swap(u) for u, j in zip(uploads, [a, b] * 3, strict=True)))
        for p in range(3):
            pair = swaps[2 * p : 2 * p + 2]
            assert sorted(s.rows_swapped for s in pair) == [0, 4]
            winner = next(s for s in pair if s.rows_swapped)
            loser = next(s for s in pair if not s.rows_swapped)
            rows = await row_objects(store, topic, p)
            assert [key for base, key in rows if base >= 4] == [winner.object_key] * 4
            assert loser.object_key not in {key for _, key in rows}
            assert (await object_states(store))[loser.object_key] == "deleting"
            assert [base for base, _ in await row_objects(store, topic, p)] == rows_before[p]
            assert await read_records(store, new_reader(store, object_store), topic, p) == before[p]
        duplicates = await fetch_all(store, "SELECT topic_id, partition, base_offset FROM batches GROUP BY 1, 2, 3"
                                            " HAVING count(*) > 1")
        assert duplicates == []

    run(pg_database, main)


def test_a_held_lease_keeps_other_brokers_off_the_partition_until_released_or_expired(
        pg_database: str, object_store: ObjectStore) -> None:
    async def main(store: MetadataStore) -> None:
        topic = await create_topic(store, 1)
        await write_small_objects(BatchWriter(store, object_store), topic, 3)
        holder, other = job(store, object_store, broker_id=1), job(store, object_store, broker_id=2)
        assert await holder.claim((topic, 0))
        assert not await other.claim((topic, 0))
        assert (await other.run_round()).swaps == {}  # not even a candidate while leased
        await holder.release((topic, 0))
        assert (topic, 0) in (await other.run_round()).swaps

        brief = job(store, object_store, broker_id=3, config=ConsolidationConfig(min_batches=3, lease_ms=0))
        assert await brief.claim((topic, 0))
        assert await other.claim((topic, 0))  # the expired lease is taken over (PostgreSQL's clock)

    run(pg_database, main)


def test_the_background_loop_consolidates_until_closed(pg_database: str, object_store: ObjectStore) -> None:
    async def main(store: MetadataStore) -> None:
        topic = await create_topic(store, 1)
        await write_small_objects(BatchWriter(store, object_store), topic, 3)
        looping = job(store, object_store, config=ConsolidationConfig(min_batches=3, interval_ms=10))
        looping.start()
        try:
            for _ in range(1200):  # bounded: 60 s
                keys = {key for _, key in await row_objects(store, topic, 0)}
                if len(keys) == 1:
                    break
                await asyncio.sleep(0.05)
        finally:
            await looping.close()
        assert len(keys) == 1
        assert str(next(iter(keys))).endswith(CONSOLIDATED_SUFFIX)

    run(pg_database, main)


def test_configs_come_from_broker_properties() -> None:
    config = ConsolidationConfig.from_broker_configs({
        "diskless.consolidation.min.batches": "50", "diskless.consolidation.segment.bytes": "1048576",
        "diskless.consolidation.interval.ms": "1000", "diskless.object.delete.grace.ms": "600000",
        "unrelated.setting": "x"})
    assert (config.min_batches, config.segment_bytes, config.interval_ms, config.delete_grace_ms) == (
        50, 1 << 20, 1000, 600_000)
    assert ConsolidationConfig.from_broker_configs({}) == ConsolidationConfig()
    with pytest.raises(ValueError, match=r"diskless\.consolidation\.min\.batches"):
        ConsolidationConfig.from_broker_configs({"diskless.consolidation.min.batches": "many"})
    with pytest.raises(ValueError, match=r"min\.batches >= 2"):
        ConsolidationConfig(min_batches=1)


def test_a_topic_deleted_during_consolidation_leaves_only_garbage(pg_database: str, object_store: ObjectStore) -> None:
    async def main(store: MetadataStore) -> None:
        topic = await create_topic(store, 1)
        await write_small_objects(BatchWriter(store, object_store), topic, 3)
        consolidation = job(store, object_store)
        plan = await consolidation.plan(topic, 0)
        assert plan is not None
        uploaded = await consolidation.upload(plan)

        async def delete_topic(conn: Conn) -> None:
            await conn.execute("DELETE FROM topics WHERE topic_id = %s", (topic,))

        await store.run(delete_topic)
        swap = await consolidation.swap(uploaded)
        assert (swap.rows_swapped, swap.rows_skipped) == (0, 3)
        assert (await object_states(store))[uploaded.object_key] == "deleting"
        assert not await consolidation.claim((topic, 0))

    run(pg_database, main)


def test_a_missing_object_fails_that_partition_only_and_changes_nothing(
        pg_database: str, object_store: ObjectStore) -> None:
    async def main(store: MetadataStore) -> None:
        topic = await create_topic(store, 2)
        writer = BatchWriter(store, object_store)
        for i in range(3):
            await writer.append([(topic, 0, data_batch([f"{i}".encode()]))])
            await writer.append([(topic, 1, data_batch([f"{i}".encode()]))])
        rows_before = await row_objects(store, topic, 0)
        await asyncio.to_thread(object_store.delete, str(rows_before[1][1]))  # the store lost one
        round_result = await job(store, object_store).run_round()
        assert set(round_result.failures) == {(topic, 0)}
        assert set(round_result.swaps) == {(topic, 1)}
        assert await row_objects(store, topic, 0) == rows_before
        assert await fetch_all(store, "SELECT count(*) FROM consolidation_leases") == [(0,)]  # released

    run(pg_database, main)


def test_swapped_out_objects_are_deleted_by_the_gc_only_after_the_grace(
        pg_database: str, object_store: ObjectStore) -> None:
    async def main(store: MetadataStore) -> None:
        topic = await create_topic(store, 1)
        keys = await write_small_objects(BatchWriter(store, object_store), topic, 3)
        old_reader = new_reader(store, object_store)
        before = await read_records(store, old_reader, topic, 0)  # holds the old coordinates
        swap = await job(store, object_store).consolidate_partition(topic, 0)
        assert swap is not None
        assert swap.objects_released == tuple(sorted(keys))
        gc = ObjectGarbageCollector(store, object_store)
        assert (await gc.run_once()).deleted == 0  # within the grace
        for key in keys:
            assert await asyncio.to_thread(object_store.size, key) > 0
        assert await read_records(store, old_reader, topic, 0) == before

        async def grace_over(conn: Conn) -> None:  # PostgreSQL's clock moves on
            await conn.execute("UPDATE objects SET delete_after = now() WHERE state = 'deleting'")

        await store.run(grace_over)
        assert (await gc.run_once()).deleted == 3
        states = await object_states(store)
        assert set(states) == {swap.object_key}
        for key in keys:
            with pytest.raises(RemoteObjectNotFoundError):
                await asyncio.to_thread(object_store.size, key)
        # A reader whose cached coordinates name the deleted objects reads them afresh.
        assert await read_records(store, old_reader, topic, 0) == before

    run(pg_database, main)


def test_a_partition_that_needs_nothing_does_not_keep_the_others_waiting(
        pg_database: str, object_store: ObjectStore) -> None:
    async def main(store: MetadataStore) -> None:
        compacted, plain = sorted([await create_topic(store, 1), await create_topic(store, 1)])
        await set_topic_config(store, compacted, "cleanup.policy", "compact")
        writer = BatchWriter(store, object_store)
        for i in range(3):  # a large clean part: distinct keys, big values
            await writer.append([(compacted, 0, keyed_batch([(f"k{i}".encode(), b"x" * 4000)]))])
        first = job(store, object_store, config=ConsolidationConfig(min_batches=3, partitions_per_round=1))
        assert set((await first.run_round()).swaps) == {(compacted, 0)}
        for i in range(4):  # dirty, but far below min.cleanable.dirty.ratio: nothing to do
            await writer.append([(compacted, 0, keyed_batch([(f"k{i}".encode(), b"y")]))])
        for i in range(3):
            await writer.append([(plain, 0, data_batch([f"{i}".encode()]))])
        one_at_a_time = job(store, object_store, config=ConsolidationConfig(min_batches=3, partitions_per_round=1))
        rounds = [await one_at_a_time.run_round() for _ in range(2)]
        assert [r.candidates for r in rounds] == [1, 1]
        assert set(rounds[0].swaps) | set(rounds[1].swaps) == {(plain, 0)}

    run(pg_database, main)


def test_rounds_take_the_partitions_round_robin(pg_database: str, object_store: ObjectStore) -> None:
    async def main(store: MetadataStore) -> None:
        topic = await create_topic(store, 3)
        writer = BatchWriter(store, object_store)
        for i in range(3):
            await writer.append([(topic, p, data_batch([f"{i}".encode()])) for p in range(3)])
        one_at_a_time = job(store, object_store, config=ConsolidationConfig(min_batches=3, partitions_per_round=1))
        rounds = [await one_at_a_time.run_round() for _ in range(3)]
        assert [set(r.swaps) for r in rounds] == [{(topic, 0)}, {(topic, 1)}, {(topic, 2)}]
        assert (await one_at_a_time.run_round()).candidates == 0

    run(pg_database, main)


def test_appends_committed_during_a_round_are_kept_and_offsets_stay_dense(
        pg_database: str, object_store: ObjectStore) -> None:
    async def main(store: MetadataStore) -> None:
        topic = await create_topic(store, 1)
        writer = BatchWriter(store, object_store)
        await write_small_objects(writer, topic, 4)  # offsets 0-7
        round_task = asyncio.ensure_future(job(store, object_store).run_round())
        appended = 0
        while not round_task.done() and appended < 200:
            await writer.append([(topic, 0, data_batch([f"late{appended}".encode()]))])
            appended += 1
        round_result = await round_task
        assert appended >= 1
        assert (topic, 0) in round_result.swaps
        records = await read_records(store, new_reader(store, object_store), topic, 0)
        assert [offset for offset, _, _ in records] == list(range(8 + appended))
        assert [value for _, _, value in records[8:]] == [f"late{i}".encode() for i in range(appended)]
        assert_dense(await batch_offsets(store, topic, 0), 8 + appended)

    run(pg_database, main)


def test_a_swap_whose_commit_answer_was_lost_is_resolved_by_reading_back(
        postgres: PostgresServer, pg_database: str, object_store: ObjectStore) -> None:
    """The swap's COMMIT reached PostgreSQL, its answer did not reach the broker: reading back
    finds the new object 'live' and the rows on it; nothing is swapped twice."""
    from tests.cluster.test_metadata_store import _CommitDroppingProxy

    dbname = pg_database.rsplit("/", 1)[1]

    async def main() -> None:
        proxy = _CommitDroppingProxy(postgres.port)
        await proxy.start()
        store = await open_store(f"postgresql://postgres@127.0.0.1:{proxy.port}/{dbname}", retry_timeout_ms=20_000)
        try:
            topic = await create_topic(store, 1)
            await write_small_objects(BatchWriter(store, object_store), topic, 3)
            before = await read_records(store, new_reader(store, object_store), topic, 0)
            consolidation = job(store, object_store)
            plan = await consolidation.plan(topic, 0)
            assert plan is not None
            uploaded = await consolidation.upload(plan)
            proxy.armed = True
            swap = await consolidation.swap(uploaded)
            assert proxy.cut == 1
            assert (swap.object_key, swap.rows_swapped, swap.rows_skipped) == (uploaded.object_key, 3, 0)
            assert {key for _, key in await row_objects(store, topic, 0)} == {uploaded.object_key}
            assert (await object_states(store))[uploaded.object_key] == "live"
            assert await read_records(store, new_reader(store, object_store), topic, 0) == before
        finally:
            await store.close()
            await proxy.stop()

    asyncio.run(asyncio.wait_for(main(), 180))


def test_small_consolidated_objects_are_merged_toward_the_segment_size(
        pg_database: str, object_store: ObjectStore) -> None:
    async def main(store: MetadataStore) -> None:
        topic = await create_topic(store, 1)
        writer = BatchWriter(store, object_store)
        merging = job(store, object_store, config=ConsolidationConfig(min_batches=3, merge_min_objects=3))
        small: list[str] = []
        for _ in range(3):
            await write_small_objects(writer, topic, 3)
            swap = (await merging.run_round()).swaps[(topic, 0)]
            small.append(swap.object_key)
        before = await read_records(store, new_reader(store, object_store), topic, 0)
        assert len({key for _, key in await row_objects(store, topic, 0)}) == 3

        merged = (await merging.run_round()).swaps[(topic, 0)]
        assert merged.rows_swapped == 9
        assert merged.objects_released == tuple(sorted(small))
        assert {key for _, key in await row_objects(store, topic, 0)} == {merged.object_key}
        assert await read_records(store, new_reader(store, object_store), topic, 0) == before
        assert (await merging.run_round()).candidates == 0  # one object: nothing left to merge

    run(pg_database, main)
