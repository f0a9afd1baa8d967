"""Transactions in the partition log (KIP-98): LSO, markers, aborted-transaction index, recovery."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from oncestream.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    StorageError,
)
from oncestream.log.config import LogConfig
from oncestream.log.partition_log import PartitionLog
from oncestream.log.transactions import OngoingTransactions
from oncestream.log.txn_index import TXN_ENTRY, AbortedTxn, decode_entries
from oncestream.protocol.markers import CONTROL_ABORT, CONTROL_COMMIT
from oncestream.protocol.records import control_marker_type, decode_batches
from tests.unit._batches import ATTR_TRANSACTIONAL, idempotent_batch, make_batch

P1, P2, P3 = 101, 202, 303
# One batch per segment: every batch (> 61 bytes) is larger than half of segment.bytes.
ONE_BATCH_SEGMENTS = {"segment_bytes": 100}


def open_log(tmp_path: Path, now_ms: int = 0, **config) -> PartitionLog:
    return PartitionLog.open(tmp_path / "topic-0", LogConfig(**config), now_ms)


def txn_batch(producer_id: int, epoch: int, sequence: int, count: int = 1) -> bytes:
    return make_batch(
        count, producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence, attributes=ATTR_TRANSACTIONAL
    )


def marker(log: PartitionLog, producer_id: int, epoch: int, *, commit: bool, coordinator_epoch: int = 0) -> int:
    return log.append_marker(
        producer_id=producer_id, producer_epoch=epoch, commit=commit, coordinator_epoch=coordinator_epoch, now_ms=5
    )


def aborted(log: PartitionLog, fetch_offset: int, upper_offset: int | None = None) -> list[tuple[int, int]]:
    result = log.read(fetch_offset, 2**31 - 1, upper_offset=upper_offset, with_aborted=True)
    assert result.aborted_transactions is not None
    return result.aborted_transactions


def txn_index_file(tmp_path: Path, base_offset: int) -> Path:
    return tmp_path / "topic-0" / f"{base_offset:020d}.txnindex"


def open_txns(log: PartitionLog) -> dict[int, int]:
    return {s.producer_id: s.current_txn_start_offset for s in log.producer_states() if s.current_txn_start_offset >= 0}


# --- LSO --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("commit", [True, False])
def test_kip98_open_transaction_holds_the_lso_until_its_marker(tmp_path: Path, commit: bool) -> None:
    log = open_log(tmp_path)
    log.append(make_batch(2), 1)  # 0-1, not transactional
    assert log.last_stable_offset == log.high_watermark == 2
    log.append(txn_batch(P1, 0, 0, count=3), 1)  # 2-4 opens P1's transaction
    log.append(make_batch(1), 1)  # 5
    log.append(txn_batch(P1, 0, 3), 1)  # 6, same transaction
    assert (log.last_stable_offset, log.high_watermark) == (2, 7)
    assert log.read(0, 2**20).last_stable_offset == 2

    marker_offset = marker(log, P1, 0, commit=commit)

    assert marker_offset == 7
    assert log.log_end_offset == 8
    assert log.last_stable_offset == log.high_watermark == 8
    assert aborted(log, 0) == ([] if commit else [(P1, 2)])


def test_kip98_interleaved_transactions_of_two_producers(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(txn_batch(P1, 0, 0), 1)  # 0
    log.append(txn_batch(P2, 0, 0), 1)  # 1
    log.append(txn_batch(P1, 0, 1), 1)  # 2
    assert log.last_stable_offset == 0
    assert open_txns(log) == {P1: 0, P2: 1}

    assert marker(log, P2, 0, commit=False) == 3  # P2 ends first: P1 still holds the LSO
    assert log.last_stable_offset == 0
    log.append(txn_batch(P2, 0, 1), 1)  # 4: P2's next transaction
    assert marker(log, P1, 0, commit=True) == 5
    assert log.last_stable_offset == 4
    assert marker(log, P2, 0, commit=False) == 6
    assert log.last_stable_offset == log.high_watermark == 7
    assert open_txns(log) == {}

    assert aborted(log, 0) == [(P2, 1), (P2, 4)]
    # The LSO recorded with each abort: P1's open transaction at 0 for the first, none for the second.
    index = log._segments.txn_indexes.get(0)
    assert index.entries == (AbortedTxn(P2, 1, 3, 0), AbortedTxn(P2, 4, 6, 7))


def test_read_committed_read_stops_at_the_lso(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(make_batch(2), 1)  # 0-1
    log.append(txn_batch(P1, 0, 0), 1)  # 2
    log.append(make_batch(1), 1)  # 3
    result = log.read(0, 2**20, upper_offset=log.last_stable_offset, with_aborted=True)
    assert [b.header.base_offset for b in decode_batches(b"".join(result.chunks))] == [0]
    assert result.aborted_transactions == []
    assert log.read(0, 2**20).aborted_transactions is None  # read_uncommitted: not asked for


# --- markers ----------------------------------------------------------------------------------------


def test_markers_take_an_offset_and_are_read_as_control_batches(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(txn_batch(P1, 0, 0, count=2), 1)  # 0-1
    commit_offset = marker(log, P1, 0, commit=True, coordinator_epoch=7)
    log.append(txn_batch(P1, 0, 2), 1)  # 3
    abort_offset = marker(log, P1, 0, commit=False, coordinator_epoch=7)
    log.append(make_batch(1), 1)  # 5

    assert (commit_offset, abort_offset) == (2, 4)
    batches = list(decode_batches(b"".join(log.read(0, 2**20).chunks)))
    assert [b.header.base_offset for b in batches] == [0, 2, 3, 4, 5]
    commit_batch, abort_batch = batches[1], batches[3]
    for batch, marker_type in ((commit_batch, CONTROL_COMMIT), (abort_batch, CONTROL_ABORT)):
        assert batch.header.is_control
        assert batch.header.is_transactional
        assert (batch.header.producer_id, batch.header.producer_epoch) == (P1, 0)
        assert len(batch.records) == 1
        assert control_marker_type(batch.records[0]) == marker_type
    assert log.producer_states()[0].coordinator_epoch == 7


def test_marker_without_an_open_transaction_is_written_and_indexes_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(txn_batch(P1, 0, 0), 1)  # 0
    assert marker(log, P1, 0, commit=False) == 1
    # The coordinator retries after a crash: the same marker again.
    assert marker(log, P1, 0, commit=False) == 2
    assert marker(log, P2, 3, commit=False) == 3  # a producer this partition never saw
    assert log.last_stable_offset == log.high_watermark == 4
    assert aborted(log, 0) == [(P1, 0)]
    assert [(s.producer_id, s.producer_epoch, s.current_txn_start_offset) for s in log.producer_states()] == [
        (P1, 0, -1),
        (P2, 3, -1),
    ]


def test_stale_epoch_marker_is_rejected_and_leaves_the_newer_transaction_open(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(txn_batch(P1, 0, 0), 1)  # 0: epoch 0
    marker(log, P1, 1, commit=False)  # 1: aborted with a bumped epoch (KIP-890)
    log.append(txn_batch(P1, 1, 0), 1)  # 2: the next transaction, epoch 1
    end = log.log_end_offset

    with pytest.raises(InvalidProducerEpochError):
        marker(log, P1, 0, commit=True)  # a delayed marker of the old epoch

    assert log.log_end_offset == end
    assert log.last_stable_offset == 2
    assert open_txns(log) == {P1: 2}
    marker(log, P1, 1, commit=True)
    assert log.last_stable_offset == log.high_watermark
    assert aborted(log, 0) == [(P1, 0)]


def test_newer_epoch_marker_fences_transactional_batches_of_the_older_epoch(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(txn_batch(P1, 0, 0), 1)
    log.append(txn_batch(P1, 0, 1), 1)
    marker(log, P1, 1, commit=False)  # the coordinator aborted it and bumped the epoch
    end = log.log_end_offset

    with pytest.raises(InvalidProducerEpochError):
        log.append(txn_batch(P1, 0, 2), 2)  # the zombie's next batch

    assert log.log_end_offset == end
    assert open_txns(log) == {}
    assert log.producer_states()[0].producer_epoch == 1
    assert log.append(txn_batch(P1, 1, 0), 2).base_offset == end  # the new epoch starts at 0
    assert open_txns(log) == {P1: end}


def test_non_transactional_batch_during_an_open_transaction_is_refused(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(txn_batch(P1, 0, 0), 1)
    with pytest.raises(InvalidTxnStateError):
        log.append(idempotent_batch(P1, 0, 1), 1)
    assert log.log_end_offset == 1
    assert log.append(txn_batch(P1, 0, 1), 1).base_offset == 1


def test_client_markers_are_still_refused(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(txn_batch(P1, 0, 0), 1)
    from oncestream.protocol.records import encode_control_batch

    forged = encode_control_batch(marker=CONTROL_ABORT, producer_id=P1, producer_epoch=0, coordinator_epoch=0, now_ms=1)
    with pytest.raises(InvalidRecordError):
        log.append(forged, 1)
    assert open_txns(log) == {P1: 0}


# --- aborted transactions in reads ------------------------------------------------------------------


def build_one_batch_segment_log(tmp_path: Path) -> PartitionLog:
    """Offsets (one batch, one segment each)::

        0 P1 txn | 1 plain | 2 P2 txn | 3 ABORT P1 | 4 plain | 5 ABORT P2 | 6 P3 txn | 7 ABORT P3 | 8 plain
    """
    log = open_log(tmp_path, **ONE_BATCH_SEGMENTS)
    log.append(txn_batch(P1, 0, 0), 1)
    log.append(make_batch(1), 1)
    log.append(txn_batch(P2, 0, 0), 1)
    assert marker(log, P1, 0, commit=False) == 3
    log.append(make_batch(1), 1)
    assert marker(log, P2, 0, commit=False) == 5
    log.append(txn_batch(P3, 0, 0), 1)
    assert marker(log, P3, 0, commit=False) == 7
    log.append(make_batch(1), 1)
    assert log.segment_base_offsets() == list(range(9))
    return log


ALL_ABORTED = [(P1, 0), (P2, 2), (P3, 6)]


def test_aborted_list_holds_only_transactions_overlapping_the_returned_range(tmp_path: Path) -> None:
    log = build_one_batch_segment_log(tmp_path)
    assert aborted(log, 0) == ALL_ABORTED
    assert aborted(log, 0, upper_offset=1) == [(P1, 0)]  # returned [0]: P2 starts at 2
    assert aborted(log, 1, upper_offset=3) == [(P1, 0), (P2, 2)]  # returned [1, 2]
    assert aborted(log, 4, upper_offset=5) == [(P2, 2)]  # P1 ended at 3, P3 starts at 6
    assert aborted(log, 6) == [(P3, 6)]
    assert aborted(log, 8) == []
    assert aborted(log, 9) == []  # nothing returned at the log end


def test_aborted_list_limited_by_max_bytes(tmp_path: Path) -> None:
    log = build_one_batch_segment_log(tmp_path)
    # max_bytes=1 with min_one: exactly the first batch is returned.
    result = log.read(1, 1, with_aborted=True)
    assert [b.header.base_offset for b in decode_batches(b"".join(result.chunks))] == [1]
    assert result.aborted_transactions == [(P1, 0)]


def test_abort_spanning_segments_is_found_through_its_marker_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path, **ONE_BATCH_SEGMENTS)
    log.append(txn_batch(P1, 0, 0), 1)  # 0
    for _ in range(3):
        log.append(make_batch(1), 1)  # 1-3
    marker(log, P1, 0, commit=False)  # 4, in the fifth segment
    assert aborted(log, 2, upper_offset=3) == [(P1, 0)]
    assert log._segments.txn_indexes.get(4).entries == (AbortedTxn(P1, 0, 4, 5),)
    assert all(not log._segments.txn_indexes.get(base).entries for base in range(4))


# --- recovery ---------------------------------------------------------------------------------------


def observed(log: PartitionLog) -> tuple:
    return (
        log.log_end_offset,
        log.last_stable_offset,
        open_txns(log),
        [aborted(log, offset) for offset in range(log.log_start_offset, log.log_end_offset + 1)],
        [(s.producer_id, s.producer_epoch, s.coordinator_epoch) for s in log.producer_states()],
    )


def build_log_with_open_and_aborted_txns(tmp_path: Path, **config) -> PartitionLog:
    log = open_log(tmp_path, **config)
    log.append(txn_batch(P1, 0, 0, count=2), 1)  # 0-1
    log.append(txn_batch(P2, 0, 0), 1)  # 2
    marker(log, P1, 0, commit=False, coordinator_epoch=3)  # 3
    log.append(make_batch(2), 1)  # 4-5
    log.append(txn_batch(P3, 0, 0), 1)  # 6: stays open
    marker(log, P2, 0, commit=True, coordinator_epoch=3)  # 7
    log.append(txn_batch(P1, 0, 2), 1)  # 8: P1's second transaction, stays open
    assert log.last_stable_offset == 6
    assert open_txns(log) == {P1: 8, P3: 6}
    return log


@pytest.mark.parametrize("config", [{}, ONE_BATCH_SEGMENTS])
def test_restart_after_close_restores_open_transactions_lso_and_aborts(tmp_path: Path, config: dict) -> None:
    log = build_log_with_open_and_aborted_txns(tmp_path, **config)
    before = observed(log)
    log.close()
    reopened = open_log(tmp_path, 10, **config)
    assert observed(reopened) == before
    marker(reopened, P3, 0, commit=False)
    marker(reopened, P1, 0, commit=True)
    assert reopened.last_stable_offset == reopened.high_watermark == 11
    assert aborted(reopened, 0) == [(P1, 0), (P3, 6)]


@pytest.mark.parametrize("config", [{}, ONE_BATCH_SEGMENTS])
def test_restart_after_crash_restores_open_transactions_lso_and_aborts(tmp_path: Path, config: dict) -> None:
    log = build_log_with_open_and_aborted_txns(tmp_path, **config)
    before = observed(log)
    log.abandon()  # like SIGKILL: no snapshot, no clean-shutdown marker
    reopened = open_log(tmp_path, 10, **config)
    assert observed(reopened) == before


def test_crash_after_a_clean_restart_keeps_aborts_from_both_runs(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(txn_batch(P1, 0, 0), 1)
    marker(log, P1, 0, commit=False)  # 1
    log.close()  # snapshot at 2
    log = open_log(tmp_path, 2)
    log.append(txn_batch(P2, 0, 0), 2)  # 2
    marker(log, P2, 0, commit=False)  # 3
    log.append(txn_batch(P3, 0, 0), 2)  # 4: open
    log.abandon()
    reopened = open_log(tmp_path, 3)
    assert aborted(reopened, 0) == [(P1, 0), (P2, 2)]
    assert reopened.last_stable_offset == 4


def test_crash_that_lost_unsynced_txn_index_entries_rebuilds_them(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(txn_batch(P1, 0, 0), 1)
    marker(log, P1, 0, commit=False)  # 1
    log.close()
    log = open_log(tmp_path, 2)
    log.append(txn_batch(P2, 0, 0), 2)  # 2
    marker(log, P2, 0, commit=False)  # 3
    log.flush()  # the log data is durable, the active segment's txn index is not
    log.abandon()
    path = txn_index_file(tmp_path, 0)
    assert len(path.read_bytes()) == 2 * TXN_ENTRY.size
    path.write_bytes(path.read_bytes()[: TXN_ENTRY.size + 5])  # power loss: the tail is torn
    reopened = open_log(tmp_path, 3)
    assert aborted(reopened, 0) == [(P1, 0), (P2, 2)]
    assert decode_entries(path.read_bytes()) == [AbortedTxn(P1, 0, 1, 2), AbortedTxn(P2, 2, 3, 4)]


@pytest.mark.parametrize("damage", ["delete", "garbage"])
@pytest.mark.parametrize("segment_base", [3, 5, 7])
def test_txn_index_is_rebuilt_when_its_file_is_lost_or_damaged(tmp_path: Path, damage: str, segment_base: int) -> None:
    log = build_one_batch_segment_log(tmp_path)
    log.close()
    path = txn_index_file(tmp_path, segment_base)
    original = path.read_bytes()
    assert len(original) == TXN_ENTRY.size
    if damage == "delete":
        path.unlink()
    else:
        path.write_bytes(b"\x00\x07" + original[2:])  # an unknown entry version
    reopened = open_log(tmp_path, 10, **ONE_BATCH_SEGMENTS)
    assert aborted(reopened, 0) == ALL_ABORTED
    assert path.read_bytes() == original


def test_txn_index_rebuild_from_an_older_snapshot_keeps_a_transaction_from_deleted_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path, **ONE_BATCH_SEGMENTS)
    log.append(make_batch(1), 1)  # 0
    log.append(make_batch(1), 1)  # 1
    log.append(txn_batch(P1, 0, 0), 1)  # 2
    log.append(make_batch(1), 1)  # 3
    marker(log, P1, 0, commit=False)  # 4
    log.delete_records(3)  # segments 0-2 go; P1's first batch with them
    assert log.segment_base_offsets() == [3, 4]
    log.close()
    txn_index_file(tmp_path, 4).unlink()
    reopened = open_log(tmp_path, 10, **ONE_BATCH_SEGMENTS)
    # Replayed from the snapshot taken when segment 4 was rolled, which knew P1's first offset.
    assert aborted(reopened, 3) == [(P1, 2)]


def test_txn_index_rebuild_without_any_snapshot_uses_what_the_log_still_holds(tmp_path: Path) -> None:
    log = open_log(tmp_path, **ONE_BATCH_SEGMENTS)
    log.append(make_batch(1), 1)  # 0
    log.append(txn_batch(P1, 0, 0), 1)  # 1
    log.append(txn_batch(P1, 0, 1), 1)  # 2
    marker(log, P1, 0, commit=False)  # 3
    log.delete_records(2)
    log.close()
    directory = tmp_path / "topic-0"
    for snapshot in directory.glob("*.snapshot"):
        snapshot.unlink()
    txn_index_file(tmp_path, 3).unlink()
    reopened = open_log(tmp_path, 10, **ONE_BATCH_SEGMENTS)
    # P1's batch at 1 is gone with its segment; the one at 2 is still there and still aborted.
    assert aborted(reopened, 2) == [(P1, 2)]
    assert reopened.last_stable_offset == reopened.high_watermark


def test_every_segment_has_a_txn_index_file_and_orphans_are_removed(tmp_path: Path) -> None:
    log = build_one_batch_segment_log(tmp_path)
    log.close()
    assert sorted(p.name for p in (tmp_path / "topic-0").glob("*.txnindex")) == [
        f"{base:020d}.txnindex" for base in range(9)
    ]
    orphan = txn_index_file(tmp_path, 50)
    orphan.write_bytes(b"")
    open_log(tmp_path, 10, **ONE_BATCH_SEGMENTS).close()
    assert not orphan.exists()


def test_failed_txn_index_write_keeps_the_abort_in_memory_and_forces_a_rebuild(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(tmp_path)
    log.append(txn_batch(P1, 0, 0), 1)

    def full_disk(fd: int, data: bytes) -> int:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(os, "write", full_disk)  # the os module txn_index writes through
        with pytest.raises(StorageError):
            marker(log, P1, 0, commit=False)
    assert log.log_end_offset == 2
    assert aborted(log, 0) == [(P1, 0)]
    assert not txn_index_file(tmp_path, 0).exists()
    log.append(txn_batch(P1, 0, 1), 2)  # 2
    marker(log, P1, 0, commit=False)  # 3: memory only, the file stays missing
    assert not txn_index_file(tmp_path, 0).exists()
    log.close()
    reopened = open_log(tmp_path, 3)
    assert aborted(reopened, 0) == [(P1, 0), (P1, 2)]
    assert len(txn_index_file(tmp_path, 0).read_bytes()) == 2 * TXN_ENTRY.size


# --- retention, DescribeProducers, expiry ------------------------------------------------------------


def test_open_transaction_below_the_log_start_keeps_holding_the_lso(tmp_path: Path) -> None:
    log = open_log(tmp_path, **ONE_BATCH_SEGMENTS)
    log.append(txn_batch(P1, 0, 0), 1)  # 0
    log.append(make_batch(1), 1)  # 1
    log.append(make_batch(1), 1)  # 2
    log.delete_records(2)
    assert log.log_start_offset == 2
    assert (log.last_stable_offset, log.high_watermark) == (2, 3)
    log.close()
    reopened = open_log(tmp_path, 10, **ONE_BATCH_SEGMENTS)
    assert reopened.last_stable_offset == 2
    assert open_txns(reopened) == {P1: 0}
    marker(reopened, P1, 0, commit=True)
    assert reopened.last_stable_offset == reopened.high_watermark == 4


def test_aborted_entries_go_with_their_deleted_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path, **ONE_BATCH_SEGMENTS)
    log.append(txn_batch(P1, 0, 0), 1)  # 0
    marker(log, P1, 0, commit=False)  # 1
    log.append(make_batch(1), 1)  # 2
    log.append(make_batch(1), 1)  # 3
    assert txn_index_file(tmp_path, 1).exists()
    log.delete_records(3)
    assert log.segment_base_offsets() == [3]
    assert not txn_index_file(tmp_path, 1).exists()
    assert not txn_index_file(tmp_path, 0).exists()
    assert aborted(log, 3) == []


def test_describe_producers_reports_the_open_transaction(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(make_batch(1), 1)  # 0
    log.append(txn_batch(P1, 2, 0, count=2), 1)  # 1-2
    log.append(idempotent_batch(P2, 0, 0), 1)  # 3
    states = {s.producer_id: s for s in log.producer_states()}
    assert (states[P1].current_txn_start_offset, states[P1].last_sequence, states[P1].producer_epoch) == (1, 1, 2)
    assert states[P2].current_txn_start_offset == -1
    marker(log, P1, 2, commit=True, coordinator_epoch=4)
    states = {s.producer_id: s for s in log.producer_states()}
    assert (states[P1].current_txn_start_offset, states[P1].coordinator_epoch) == (-1, 4)


def test_expiry_skips_producers_with_an_open_transaction(tmp_path: Path) -> None:
    log = open_log(tmp_path, producer_id_expiration_ms=1_000)
    log.append(txn_batch(P1, 0, 0), 100)
    log.append(idempotent_batch(P2, 0, 0), 100)
    assert log.expire_producers(5_000) == 1
    assert [s.producer_id for s in log.producer_states()] == [P1]
    assert log.last_stable_offset == 0
    log.append_marker(producer_id=P1, producer_epoch=0, commit=True, coordinator_epoch=0, now_ms=5_000)
    assert log.expire_producers(5_999) == 0
    assert log.expire_producers(6_000) == 1
    assert log.producer_states() == []


# --- the open-transaction set -------------------------------------------------------------------------


def test_ongoing_transactions_earliest_survives_ends_in_any_order() -> None:
    ongoing = OngoingTransactions()
    for pid, offset in ((1, 10), (2, 20), (3, 30), (4, 40)):
        ongoing.begin(pid, offset)
    ongoing.end(2)
    assert ongoing.earliest() == 10
    ongoing.end(1)
    assert ongoing.earliest() == 30
    ongoing.begin(1, 50)
    ongoing.end(3)
    ongoing.end(4)
    assert ongoing.earliest() == 50
    assert len(ongoing) == 1
    ongoing.end(1)
    assert ongoing.earliest() is None
    ongoing.reset({7: 5, 8: 3})
    assert ongoing.earliest() == 3
    assert ongoing.items() == [(7, 5), (8, 3)]
