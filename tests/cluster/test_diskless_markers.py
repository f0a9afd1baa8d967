"""Transaction markers on diskless partitions against a real PostgreSQL (WriteTxnMarkers, KIP-98):
offsets like any batch, inline control batches, the open transaction closed, aborted ranges
recorded, and markers of fenced (older) producer epochs refused."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from oncestream.cluster.diskless.markers import MarkerOutcome, TxnMarker, write_markers
from oncestream.cluster.pg.store import Conn, MetadataStore
from oncestream.log.transactions import read_control_marker
from oncestream.protocol.record_batch import iter_batches
from tests.cluster.diskless_support import (
    NOW_MS,
    batch_offsets,
    commit_records,
    create_topic,
    fetch_all,
    run_with_store,
)
from tests.unit._batches import ATTR_TRANSACTIONAL, idempotent_batch, make_batch


def _txn(pid: int, epoch: int, seq: int, count: int = 1) -> bytes:
    return idempotent_batch(pid, epoch, seq, count=count, attributes=ATTR_TRANSACTIONAL)


async def _write(store, markers: list[TxnMarker]) -> list[MarkerOutcome]:
    async def run(conn: Conn) -> list[MarkerOutcome]:
        return await write_markers(conn, markers, NOW_MS)

    return await store.run(run)


def test_an_abort_marker_closes_the_transaction_and_records_its_range(pg_database):
    async def main(store: MetadataStore) -> None:
        topic = await create_topic(store, 2)
        await commit_records(store, [(topic, 0, make_batch(2))])  # offsets 0-1
        await commit_records(store, [(topic, 0, _txn(11, 0, 0, 2)), (topic, 1, _txn(12, 0, 0))])  # 2-3 | 0
        await commit_records(store, [(topic, 0, make_batch(1)), (topic, 0, _txn(11, 0, 2))])  # 4, 5
        open_txns = await fetch_all(store, "SELECT producer_id, txn_first_offset FROM producer_states ORDER BY 1")
        assert open_txns == [(11, 2), (12, 0)]
        outcomes = await _write(store, [
            TxnMarker(topic, 0, 11, 0, commit=False, coordinator_epoch=3),
            TxnMarker(topic, 1, 12, 0, commit=True, coordinator_epoch=3),
        ])
        assert outcomes == [MarkerOutcome(offset=6), MarkerOutcome(offset=1)]
        assert (await batch_offsets(store, topic, 0))[-1] == (6, 6)
        closed = await fetch_all(store, "SELECT producer_id, txn_first_offset FROM producer_states ORDER BY 1")
        assert closed == [(11, None), (12, None)]
        aborted = await fetch_all(store, "SELECT partition, producer_id, first_offset, last_offset FROM aborted_txns")
        assert aborted == [(0, 11, 2, 6)]  # the COMMIT on partition 1 records nothing
        [(inline, control, obj)] = await fetch_all(
            store, "SELECT inline_bytes, is_control, object_key FROM batches WHERE partition = 0 AND base_offset = 6")
        assert (control, obj) == (True, None)
        assert isinstance(inline, bytes)
        [(header, batch)] = list(iter_batches(inline))
        assert (header.is_control, header.producer_id) == (True, 11)
        marker = read_control_marker(batch)
        assert marker is not None
        assert (marker.commit, marker.coordinator_epoch) == (False, 3)
        [(hw,)] = await fetch_all(store, "SELECT high_watermark FROM partitions WHERE partition = 0")
        assert hw == 7

    run_with_store(pg_database, main)


def test_markers_of_an_older_producer_epoch_are_fenced(pg_database):
    async def main(store: MetadataStore) -> None:
        topic = await create_topic(store, 1)
        await commit_records(store, [(topic, 0, _txn(21, 5, 0))])
        outcomes = await _write(store, [
            TxnMarker(topic, 0, 21, 4, commit=True, coordinator_epoch=0),  # a zombie's marker
            TxnMarker(uuid.uuid4(), 0, 21, 5, commit=True, coordinator_epoch=0),  # no such topic
        ])
        assert [o.error for o in outcomes] == [ErrorCode.invalid_producer_epoch, ErrorCode.unknown_topic_or_partition]
        assert await batch_offsets(store, topic, 0) == [(0, 0)]  # nothing written
        assert await fetch_all(store, "SELECT txn_first_offset FROM producer_states") == [(0,)]
        # KIP-890: the coordinator ends the transaction with the epoch bumped.
        [bumped] = await _write(store, [TxnMarker(topic, 0, 21, 6, commit=False, coordinator_epoch=0)])
        assert bumped == MarkerOutcome(offset=1)
        assert await fetch_all(store, "SELECT producer_epoch, txn_first_offset FROM producer_states") == [(6, None)]
        [late] = await commit_records(store, [(topic, 0, _txn(21, 5, 1))])
        assert late.error == ErrorCode.invalid_producer_epoch  # the old epoch cannot write any more

    run_with_store(pg_database, main)


def test_a_marker_without_an_open_transaction_is_still_written(pg_database):
    """The coordinator retries markers after a crash: the second copy takes an offset and
    changes nothing else (as in Kafka)."""
    async def main(store: MetadataStore) -> None:
        topic = await create_topic(store, 1)
        await commit_records(store, [(topic, 0, _txn(31, 0, 0))])
        marker = TxnMarker(topic, 0, 31, 0, commit=False, coordinator_epoch=1)
        assert await _write(store, [marker]) == [MarkerOutcome(offset=1)]
        assert await _write(store, [marker]) == [MarkerOutcome(offset=2)]
        assert len(await fetch_all(store, "SELECT * FROM aborted_txns")) == 1

    run_with_store(pg_database, main)
