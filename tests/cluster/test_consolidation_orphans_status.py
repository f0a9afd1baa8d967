"""Orphaned diskless objects are deleted after a grace, and the status of consolidation (lag,
objects by state), against the real PostgreSQL and SeaweedFS."""

from __future__ import annotations

import asyncio

import pytest

from oncestream.cluster.diskless.consolidation_status import consolidation_status
from oncestream.cluster.diskless.orphans import OrphanSweeper
from oncestream.cluster.pg.store import MetadataStore
from oncestream.errors import RemoteObjectNotFoundError
from oncestream.remote.object_store import ObjectStore
from tests.cluster.consolidation_support import job, run
from tests.cluster.diskless_read_support import BatchWriter, data_batch
from tests.cluster.diskless_support import create_topic, fetch_all

ORPHAN = "test/diskless/2026-11-28/0123456789abcdef.batches"
ELSEWHERE = "test/elsewhere/not-diskless.batches"


async def exists(objects: ObjectStore, key: str) -> bool:
    try:
        await asyncio.to_thread(objects.size, key)
    except RemoteObjectNotFoundError:
        return False
    return True


def test_an_object_without_a_row_is_deleted_only_after_the_grace(pg_database: str, object_store: ObjectStore) -> None:
    async def main(store: MetadataStore) -> None:
        topic = await create_topic(store, 1)
        writer = BatchWriter(store, object_store)
        committed = (await writer.upload([(topic, 0, data_batch([b"kept"]))])).key
        await writer.commit(await writer.upload([(topic, 0, data_batch([b"more"]))]))
        uploading = (await writer.upload([(topic, 0, data_batch([b"not yet committed"]))])).key
        await asyncio.to_thread(object_store.put, ORPHAN, b"a late upload whose row was collected")
        await asyncio.to_thread(object_store.put, ELSEWHERE, b"not under the diskless prefix")

        patient = OrphanSweeper(store, object_store, key_prefix="test", grace_ms=3_600_000)
        first = await patient.run_round()
        assert (first.listed, first.recorded, first.deleted) == (4, 1, ())
        assert await exists(object_store, ORPHAN)
        assert await fetch_all(store, "SELECT object_key FROM diskless_orphans") == [(ORPHAN,)]

        due = OrphanSweeper(store, object_store, key_prefix="test", grace_ms=0)
        second = await due.run_round()
        assert second.deleted == (ORPHAN,)
        assert not await exists(object_store, ORPHAN)
        assert await fetch_all(store, "SELECT object_key FROM diskless_orphans") == []
        for key in (committed, uploading, ELSEWHERE):  # a row, even 'uploading', or another prefix
            assert await exists(object_store, key)

    run(pg_database, main)


def test_the_sweep_lists_a_bounded_page_per_round(pg_database: str, object_store: ObjectStore) -> None:
    async def main(store: MetadataStore) -> None:
        for i in range(5):
            await asyncio.to_thread(object_store.put, f"test/diskless/2026-11-28/{i:032x}.batches", b"orphan")
        sweeper = OrphanSweeper(store, object_store, key_prefix="test", grace_ms=3_600_000, page_size=2)
        listed = [(await sweeper.run_round()).listed for _ in range(4)]
        assert listed == [2, 2, 1, 2]  # the cursor wraps around after the last page
        rows = await fetch_all(store, "SELECT count(*) FROM diskless_orphans")
        assert rows == [(5,)]

    run(pg_database, main)


def test_status_shows_the_lag_and_the_objects_by_state(pg_database: str, object_store: ObjectStore) -> None:
    async def main(store: MetadataStore) -> None:
        topic = await create_topic(store, 2, name="lagging")
        writer = BatchWriter(store, object_store)
        for i in range(4):
            await writer.append([(topic, 0, data_batch([f"{i}".encode()]))])
        await writer.append([(topic, 1, data_batch([b"one"]))])
        status = await consolidation_status(store)
        lag = {(p.topic, p.partition): (p.batches, p.bytes) for p in status.lagging}
        assert lag[("lagging", 0)][0] == 4
        assert lag[("lagging", 1)][0] == 1
        assert all(p.oldest_age_ms is not None and p.oldest_age_ms >= 0 for p in status.lagging)
        assert {c.state: (c.count, c.consolidated) for c in status.objects} == {"live": (5, 0)}

        await job(store, object_store).run_round()
        status = await consolidation_status(store)
        assert [(p.topic, p.partition, p.batches) for p in status.lagging] == [("lagging", 1, 1)]
        counts = {c.state: (c.count, c.consolidated) for c in status.objects}
        assert counts == {"live": (2, 1), "deleting": (4, 0)}

    run(pg_database, main)


@pytest.mark.parametrize("bad", [{"grace_ms": -1}, {"page_size": 0}])
def test_the_sweeper_refuses_bounds_that_allow_no_work(bad: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="orphan sweep"):
        OrphanSweeper(None, None, **bad)  # type: ignore[arg-type]
