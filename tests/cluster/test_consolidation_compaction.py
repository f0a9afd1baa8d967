"""Consolidation of compacted diskless topics (cleanup.policy=compact and compact,delete) against
the real PostgreSQL and SeaweedFS: the single broker's cleaner rules, offsets unchanged."""

from __future__ import annotations

import pytest

from oncestream.cluster.diskless.read_path import READ_COMMITTED
from oncestream.cluster.pg.store import MetadataStore
from oncestream.remote.object_store import ObjectStore
from tests.cluster.consolidation_support import (
    job,
    keyed_batch,
    new_reader,
    read_records,
    row_objects,
    run,
    set_topic_config,
)
from tests.cluster.diskless_read_support import NOW_MS, BatchWriter
from tests.cluster.diskless_support import create_topic

DELETE_RETENTION_MS = 1000


@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
def test_a_round_keeps_the_latest_record_per_key_at_its_offset(
        pg_database: str, object_store: ObjectStore, policy: str) -> None:
    async def main(store: MetadataStore) -> None:
        topic = await create_topic(store, 1)
        await set_topic_config(store, topic, "cleanup.policy", policy)
        await set_topic_config(store, topic, "delete.retention.ms", str(DELETE_RETENTION_MS))
        await set_topic_config(store, topic, "min.cleanable.dirty.ratio", "0.05")
        writer = BatchWriter(store, object_store)
        await writer.append([(topic, 0, keyed_batch([(b"k1", b"a1"), (b"k2", b"b1")]))])  # 0-1
        await writer.append([(topic, 0, keyed_batch([(b"k1", b"a2")]))])  # 2
        await writer.append([(topic, 0, keyed_batch([(b"k3", b"c1"), (b"k2", None)]))])  # 3-4, k2 deleted
        await writer.append([(topic, 0, keyed_batch([(b"k3", b"aborted")], producer_id=7, producer_epoch=0,
                                                    base_sequence=0, transactional=True))])  # 5
        assert await writer.end_transaction(topic, 0, 7, 0, commit=False) == 6
        await writer.append([(topic, 0, keyed_batch([(b"k4", b"d1")], producer_id=8, producer_epoch=0,
                                                    base_sequence=0, transactional=True))])  # 7
        assert await writer.end_transaction(topic, 0, 8, 0, commit=True) == 8
        await writer.append([(topic, 0, keyed_batch([(b"k1", b"a3")]))])  # 9
        before = await read_records(store, new_reader(store, object_store), topic, 0)
        assert len(before) == 8  # read_uncommitted sees the aborted record too (markers are no records)

        now_ms = NOW_MS
        consolidation = job(store, object_store, clock_ms=lambda: now_ms)
        round_result = await consolidation.run_round()
        swap = round_result.swaps[(topic, 0)]
        assert swap.rows_dropped == 2  # offsets 0-1 and 2: every record superseded

        latest = [(3, b"k3", b"c1"), (4, b"k2", None), (7, b"k4", b"d1"), (9, b"k1", b"a3")]
        for isolation in (0, READ_COMMITTED):
            records = await read_records(store, new_reader(store, object_store), topic, 0, isolation_level=isolation)
            assert records == latest
        assert all(record in before for record in latest)  # same offsets as before the round
        rows = await row_objects(store, topic, 0)
        # Producer 7's aborted batch stays, emptied (a live producer's last batch); markers stay.
        assert [base for base, _ in rows] == [3, 5, 6, 7, 8, 9]
        assert {key for _, key in rows} == {swap.object_key}

        # Nothing new: nothing dirty, no clean.
        assert await consolidation.plan(topic, 0) is None
        # Past the tombstone's delete horizon (first clean + delete.retention.ms) the next clean
        # drops it too.
        await writer.append([(topic, 0, keyed_batch([(b"k5", b"e1")]))])  # 10
        now_ms = NOW_MS + 2 * DELETE_RETENTION_MS
        again = await consolidation.consolidate_partition(topic, 0)
        assert again is not None
        records = await read_records(store, new_reader(store, object_store), topic, 0)
        assert records == [(3, b"k3", b"c1"), (7, b"k4", b"d1"), (9, b"k1", b"a3"), (10, b"k5", b"e1")]

    run(pg_database, main)


def test_compaction_waits_for_the_dirty_ratio_and_leaves_records_younger_than_the_lag(
        pg_database: str, object_store: ObjectStore) -> None:
    async def main(store: MetadataStore) -> None:
        topic = await create_topic(store, 1)
        await set_topic_config(store, topic, "cleanup.policy", "compact")
        await set_topic_config(store, topic, "min.compaction.lag.ms", "60000")
        writer = BatchWriter(store, object_store)
        for i in range(4):  # offsets 0-3, old enough
            await writer.append([(topic, 0, keyed_batch([(b"k", f"old{i}".encode())]))])
        young_ms = NOW_MS + 600_000
        for i in range(2):  # offsets 4-5, younger than the lag
            await writer.append([(topic, 0, keyed_batch([(b"k", f"young{i}".encode())], timestamp_ms=young_ms))])
        consolidation = job(store, object_store, clock_ms=lambda: young_ms + 1000)
        swap = await consolidation.consolidate_partition(topic, 0)
        assert swap is not None
        assert swap.rows_dropped == 3  # old0-old2; old3 is the latest among the old enough
        rows = await row_objects(store, topic, 0)
        assert [base for base, _ in rows] == [3, 4, 5]
        assert rows[0][1] == swap.object_key
        assert swap.object_key not in (rows[1][1], rows[2][1])  # the young ones are untouched

        # Until the young batches are old enough nothing below them is dirty; then they are.
        assert await job(store, object_store, clock_ms=lambda: young_ms + 1000).plan(topic, 0) is None
        later = job(store, object_store, clock_ms=lambda: young_ms + 120_000)
        assert await later.plan(topic, 0) is not None
        await later.consolidate_partition(topic, 0)
        records = await read_records(store, new_reader(store, object_store), topic, 0)
        assert records == [(5, b"k", b"young1")]
        # min.cleanable.dirty.ratio: one dirty batch beside one clean one is a ratio of 0.5.
        await writer.append([(topic, 0, keyed_batch([(b"k", b"newest")], timestamp_ms=young_ms))])
        await set_topic_config(store, topic, "min.cleanable.dirty.ratio", "0.6")
        assert await later.plan(topic, 0) is None
        await writer.append([(topic, 0, keyed_batch([(b"k", b"newer still")], timestamp_ms=young_ms))])
        assert await later.plan(topic, 0) is not None  # two of three: 0.67

    run(pg_database, main)
