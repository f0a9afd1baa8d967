"""Share-partition state on leases (cluster/leases/share_state.py) against the real PostgreSQL:
one owner at a time, a paused former owner writes nothing, a new owner loads what the old one
committed, and records in flight come back available while acknowledged ones stay acknowledged."""

from __future__ import annotations

import uuid

import pytest

from oncestream.cluster.leases.coordinator_leases import CoordinatorLeases, LeaseLostError, resource_name
from oncestream.cluster.leases.share_state import PgShareState, share_resource
from oncestream.cluster.pg.store import MetadataStore
from oncestream.coordinator.share.partition import (
    AckBatch,
    AckType,
    LogSpan,
    RecordState,
    SharePartition,
    SharePartitionConfig,
)
from oncestream.coordinator.share.records import ShareStateValue
from tests.cluster.lease_support import expire, register, run_cluster
from tests.cluster.test_coordinator_leases import LONG_MS, wait_expired

KEY = ("share-group", uuid.uuid4(), 3)
CONFIG = SharePartitionConfig()


def _value(sp: SharePartition, epoch: int) -> ShareStateValue:
    start, batches = sp.snapshot()
    return ShareStateValue(epoch, start, tuple(batches))


def _restored(value: ShareStateValue) -> SharePartition:
    sp = SharePartition(CONFIG, value.start_offset)
    sp.apply_persisted(value.start_offset, value.batches, replace=True)
    return sp


def test_one_owner_at_a_time_and_a_dead_owners_lease_is_taken_over(pg_database):
    async def main(store: MetadataStore) -> None:
        state = PgShareState(store)
        first, second = await register(store, 1, LONG_MS), await register(store, 2, LONG_MS)
        lease = await state.take(first, KEY)
        assert lease is not None
        assert lease.resource == share_resource(KEY)
        assert await state.take(first, KEY) == lease  # already held: same epoch
        assert await state.take(second, KEY) is None  # held by a live broker
        await expire(store, first.node_id)
        taken = await state.take(second, KEY)
        assert taken is not None
        assert taken.epoch == lease.epoch + 1
        await state.release(second, [KEY])
        again = await state.take(second, KEY)
        assert again is not None
        assert again.epoch == taken.epoch + 1

    run_cluster(pg_database, main)


def test_a_paused_former_owner_writes_nothing_and_the_new_owner_loads_what_it_committed(pg_database):
    async def main(store: MetadataStore) -> None:
        state = PgShareState(store, idle_timeout_ms=LONG_MS)
        paused = await register(store, 1, 500)
        old_lease = await state.take(paused, KEY)
        assert old_lease is not None
        assert await state.load(KEY) is None

        # The old owner hands out offsets 0..9, the member acknowledges 0..3, and it persists.
        sp = SharePartition(CONFIG, 0)
        assert sp.acquire("m1", [LogSpan(o, o) for o in range(10)], 10, 0)
        assert sp.acknowledge("m1", [AckBatch(0, 3, (AckType.ACCEPT,))], 1).name == "none"
        await state.save(old_lease, KEY, _value(sp, 0))

        # It is paused past its broker lease; the leader of the partition takes over.
        successor = await register(store, 2, LONG_MS)
        await wait_expired(store, paused)
        new_lease = await state.take(successor, KEY)
        assert new_lease is not None
        assert new_lease.epoch > old_lease.epoch

        # The former owner resumes: the member acknowledged 4..9 there, but nothing is written.
        assert sp.acknowledge("m1", [AckBatch(4, 9, (AckType.ACCEPT,))], 2).name == "none"
        with pytest.raises(LeaseLostError):
            await state.save(old_lease, KEY, _value(sp, 1))
        with pytest.raises(LeaseLostError):
            await state.delete(old_lease, KEY)

        # The new owner loads what was committed: 0..3 acknowledged (never delivered again),
        # 4..9 in flight then, so AVAILABLE again with their delivery count kept.
        loaded = await state.load(KEY)
        assert loaded is not None
        assert loaded.snapshot_epoch == 0
        restored = _restored(loaded)
        assert restored.start_offset == 4
        records = [restored.record(o) for o in range(4, 10)]
        assert [(r.state, r.delivery_count) if r else None for r in records] == [(RecordState.AVAILABLE, 1)] * 6
        again = restored.acquire("m2", [LogSpan(o, o) for o in range(12)], 20, 3)
        assert min(r.first_offset for r in again) == 4
        assert sum(r.last_offset - r.first_offset + 1 for r in again) == 8  # 4..11, never 0..3

        # The new owner writes on and deletes; its writes are fenced by its own epoch.
        await state.save(new_lease, KEY, _value(restored, 1))
        reloaded = await state.load(KEY)
        assert reloaded is not None
        assert reloaded.snapshot_epoch == 1
        await state.delete(new_lease, KEY)
        assert await state.load(KEY) is None

    run_cluster(pg_database, main)


def test_a_save_that_commits_late_never_replaces_a_newer_snapshot(pg_database):
    """Two requests on one share-partition save concurrently: the first takes its snapshot
    (records acquired), the second acknowledges them, takes a newer one and commits first. The
    first commits last; the acknowledgement the second request promised must stay, or the next
    owner delivers acknowledged records again."""
    key = ("late-save-group", uuid.uuid4(), 0)

    async def main(store: MetadataStore) -> None:
        state = PgShareState(store)
        owner = await register(store, 1, LONG_MS)
        lease = await state.take(owner, key)
        assert lease is not None
        sp = SharePartition(CONFIG, 0)
        assert sp.acquire("m1", [LogSpan(o, o) for o in range(10)], 10, 0)
        await state.save(lease, key, _value(sp, 0))
        older = _value(sp, 1)  # taken by the first request, which then waits for PostgreSQL
        assert sp.acknowledge("m1", [AckBatch(0, 9, (AckType.ACCEPT,))], 1).name == "none"
        newer = _value(sp, 2)
        await state.save(lease, key, newer)  # the acknowledgement's save commits first
        await state.save(lease, key, older)  # the late commit of the older snapshot
        loaded = await state.load(key)
        assert loaded is not None
        assert loaded.snapshot_epoch == 2
        restored = _restored(loaded)
        assert restored.start_offset == 10  # 0..9 acknowledged: never delivered again
        assert not restored.acquire("m2", [LogSpan(o, o) for o in range(10)], 10, 2)

    run_cluster(pg_database, main)


def test_a_lease_of_another_share_partition_is_refused(pg_database):
    async def main(store: MetadataStore) -> None:
        state = PgShareState(store)
        me = await register(store, 1, LONG_MS)
        lease = await state.take(me, KEY)
        assert lease is not None
        other = (KEY[0], KEY[1], KEY[2] + 1)
        with pytest.raises(ValueError, match="does not cover"):
            await state.save(lease, other, ShareStateValue(0, 0, ()))

    run_cluster(pg_database, main)


def test_the_group_coordinator_writes_through_the_owners_fencing(pg_database):
    """AlterShareGroupOffsets / DeleteShareGroupOffsets on a cluster (PgShareState.overwrite): the
    coordinator's write takes the owner's lease, so the owner's stale copy is never written, the
    owner learns it (``lost``) and loads the coordinator's state when it takes the lease again; a
    coordinator that lost its own lease writes nothing."""
    key = ("admin-group", uuid.uuid4(), 0)

    async def main(store: MetadataStore) -> None:
        state = PgShareState(store, idle_timeout_ms=LONG_MS)
        coordinator = await register(store, 1, LONG_MS)  # alone: it takes the group's partition
        group_partition = resource_name("__consumer_offsets", 0)
        group_lease = (await CoordinatorLeases(store).acquire(coordinator, [group_partition])).held[group_partition]
        owner = await register(store, 2, LONG_MS)
        lease = await state.take(owner, key)
        assert lease is not None
        sp = SharePartition(CONFIG, 0)
        assert sp.acquire("m1", [LogSpan(o, o) for o in range(10)], 10, 0)
        assert sp.acknowledge("m1", [AckBatch(0, 3, (AckType.ACCEPT,))], 1).name == "none"
        await state.save(lease, key, _value(sp, 0))
        assert await state.lost(owner, [lease]) == set()

        await state.overwrite(group_lease, {key: ShareStateValue(0, 7, ())})
        assert await state.lost(owner, [lease]) == {lease.resource}
        with pytest.raises(LeaseLostError):  # the owner's stale copy (start 4, 4..9 acquired)
            await state.save(lease, key, _value(sp, 1))
        again = await state.take(owner, key)
        assert again is not None
        assert again.epoch == lease.epoch + 2  # the coordinator's takeover, then the owner's
        loaded = await state.load(key)
        assert loaded is not None
        assert (loaded.start_offset, loaded.batches) == (7, ())

        await state.overwrite(group_lease, {key: None})  # DeleteShareGroupOffsets
        assert await state.load(key) is None
        with pytest.raises(LeaseLostError):
            await state.save(again, key, _value(_restored(loaded), 1))
        assert await state.load(key) is None

        await expire(store, coordinator.node_id)
        with pytest.raises(LeaseLostError):
            await state.overwrite(group_lease, {key: ShareStateValue(0, 1, ())})
        assert await state.load(key) is None

    run_cluster(pg_database, main)
