"""What DescribeProducers reads of diskless partitions (cluster/diskless/partition_rows.py's
``partition_producers``) against a real PostgreSQL: every producer a partition remembers, as the
commits and the transaction markers stored it (epoch, last sequence, last timestamp, coordinator
epoch of its last marker, first offset of its open transaction)."""

from __future__ import annotations

from oncestream.cluster.diskless.markers import TxnMarker, write_markers
from oncestream.cluster.diskless.partition_rows import partition_producers
from oncestream.cluster.pg.store import Conn, MetadataStore
from oncestream.log.producer_state import NO_COORDINATOR_EPOCH, NO_OFFSET, ProducerEntry
from tests.cluster.diskless_support import NOW_MS, commit_records, create_topic, run_with_store
from tests.unit._batches import ATTR_TRANSACTIONAL, idempotent_batch, make_batch


def _described(entries: list[ProducerEntry]) -> list[tuple[int, int, int, int, int, int]]:
    """(producer id, epoch, last sequence, last timestamp, coordinator epoch, txn start offset)."""
    return [(e.producer_id, e.epoch, e.last_seq, e.last_timestamp_ms, e.coordinator_epoch, e.current_txn_first_offset)
            for e in entries]


def test_every_producer_of_a_partition_with_its_open_transaction_and_last_marker(pg_database):
    async def main(store: MetadataStore) -> None:
        topic, other = await create_topic(store, 3), await create_topic(store, 1)
        await commit_records(store, [(topic, 0, make_batch(2))])  # no producer id: remembered by nobody
        await commit_records(store, [
            (topic, 0, idempotent_batch(31, 2, 0, count=2, attributes=ATTR_TRANSACTIONAL, timestamp_ms=5_000)),  # 2-3
            (topic, 0, idempotent_batch(17, 0, 0, count=3, timestamp_ms=6_000)),  # 4-6
            (topic, 1, idempotent_batch(40, 1, 0, attributes=ATTR_TRANSACTIONAL, timestamp_ms=7_000)),  # 0
            (other, 0, idempotent_batch(50, 0, 0, timestamp_ms=8_000)),
        ])
        await commit_records(store, [
            (topic, 0, idempotent_batch(31, 2, 2, attributes=ATTR_TRANSACTIONAL, timestamp_ms=9_000))])  # 7

        async def commit_partition_1(conn: Conn) -> None:
            await write_markers(conn, [TxnMarker(topic, 1, 40, 1, commit=True, coordinator_epoch=4)], NOW_MS)

        await store.run(commit_partition_1)

        found = await store.run(lambda conn: partition_producers(conn, [(topic, 0), (topic, 1), (topic, 2)]))
        assert set(found) == {(topic, 0), (topic, 1), (topic, 2)}
        assert _described(found[(topic, 0)]) == [
            (17, 0, 2, 6_000, NO_COORDINATOR_EPOCH, NO_OFFSET),
            (31, 2, 2, 9_000, NO_COORDINATOR_EPOCH, 2),  # its transaction is open from offset 2
        ]
        # The COMMIT closed producer 40's transaction and left its coordinator epoch (and the
        # marker's time, as the single broker's log keeps it).
        assert _described(found[(topic, 1)]) == [(40, 1, 0, NOW_MS, 4, NO_OFFSET)]
        assert found[(topic, 2)] == []
        assert await store.run(lambda conn: partition_producers(conn, [])) == {}

    run_with_store(pg_database, main)
