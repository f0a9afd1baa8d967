"""Idempotent producer rules of a partition (KIP-98, KIP-360), snapshots, replay and expiry."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from oncestream.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    OutOfOrderSequenceError,
    UnknownProducerIdError,
)
from oncestream.log.config import LogConfig
from oncestream.log.partition_log import PartitionLog
from oncestream.log.producer_state import (
    BatchMetadata,
    ProducerEntry,
    ProducerStateManager,
)
from tests.support.narrow import present
from tests.unit._batches import control_batch, idempotent_batch, make_batch

INT32_MAX = 2**31 - 1
PID = 1000


def open_log(directory: Path, now_ms: int = 0, **config) -> PartitionLog:
    return PartitionLog.open(directory / "topic-0", LogConfig(**config), now_ms)


@pytest.fixture
def log(tmp_path: Path) -> PartitionLog:
    return open_log(tmp_path)


def table(partition_log: PartitionLog) -> dict[int, ProducerEntry]:
    return {pid: entry.copy() for pid, entry in partition_log._producers.entries.items()}


# --- duplicates -------------------------------------------------------------------------------------


def test_kip98_retried_batch_is_a_duplicate_and_gets_its_original_offsets(log: PartitionLog) -> None:
    log.append(make_batch(2), 1)  # offsets 0-1 from a non-idempotent producer
    first = log.append(idempotent_batch(PID, 0, 0, count=3), 1)
    second = log.append(idempotent_batch(PID, 0, 3, count=2), 1)
    size_before, end_before = log.size_bytes, log.log_end_offset

    retry = log.append(idempotent_batch(PID, 0, 0, count=3), 2)

    assert (first.base_offset, first.last_offset, first.duplicate) == (2, 4, False)
    assert (retry.base_offset, retry.last_offset, retry.duplicate) == (2, 4, True)
    assert log.append(idempotent_batch(PID, 0, 3, count=2), 2).base_offset == second.base_offset
    assert (log.size_bytes, log.log_end_offset) == (size_before, end_before)


def test_kip98_only_the_last_five_batches_are_remembered(log: PartitionLog) -> None:
    for sequence in range(6):
        log.append(idempotent_batch(PID, 0, sequence), 1)
    assert log.append(idempotent_batch(PID, 0, 1), 1).duplicate  # 2nd of 6: still in the window
    with pytest.raises(OutOfOrderSequenceError):
        log.append(idempotent_batch(PID, 0, 0), 1)  # 1st of 6: fell out, so it is a gap backwards
    assert log.log_end_offset == 6


def test_duplicate_in_log_append_time_topic_reports_the_original_append_time(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    first = partition_log.append(idempotent_batch(PID, 0, 0), 1_000)
    retry = partition_log.append(idempotent_batch(PID, 0, 0), 2_000)
    assert (first.log_append_time_ms, retry.log_append_time_ms, retry.duplicate) == (1_000, 1_000, True)


def test_duplicate_needs_the_same_sequence_range(log: PartitionLog) -> None:
    log.append(idempotent_batch(PID, 0, 0, count=3), 1)
    with pytest.raises(OutOfOrderSequenceError):
        log.append(idempotent_batch(PID, 0, 0, count=2), 1)


# --- sequence and epoch rules -----------------------------------------------------------------------


def test_kip98_sequence_gap_is_out_of_order_and_writes_nothing(log: PartitionLog) -> None:
    log.append(idempotent_batch(PID, 0, 0, count=2), 1)
    with pytest.raises(OutOfOrderSequenceError):
        log.append(idempotent_batch(PID, 0, 3), 1)
    assert log.log_end_offset == 2
    assert log.append(idempotent_batch(PID, 0, 2), 1).base_offset == 2


def test_kip98_older_epoch_is_fenced(log: PartitionLog) -> None:
    log.append(idempotent_batch(PID, 5, 0), 1)
    with pytest.raises(InvalidProducerEpochError):
        log.append(idempotent_batch(PID, 4, 1), 1)
    with pytest.raises(InvalidProducerEpochError):
        log.append(idempotent_batch(PID, 4, 0), 1)
    assert log.log_end_offset == 1


def test_kip98_new_epoch_must_start_at_sequence_zero(log: PartitionLog) -> None:
    log.append(idempotent_batch(PID, 0, 0, count=4), 1)
    with pytest.raises(OutOfOrderSequenceError):
        log.append(idempotent_batch(PID, 1, 4), 1)
    result = log.append(idempotent_batch(PID, 1, 0, count=4), 1)
    assert (result.base_offset, result.duplicate) == (4, False)
    # The old epoch's window is gone: the same sequences in epoch 1 continue, epoch 0 is fenced.
    assert log.append(idempotent_batch(PID, 1, 4), 1).base_offset == 8
    with pytest.raises(InvalidProducerEpochError):
        log.append(idempotent_batch(PID, 0, 0, count=4), 1)
    assert log.producer_states()[0].producer_epoch == 1


def test_kip360_unknown_producer_must_start_at_zero(log: PartitionLog) -> None:
    with pytest.raises(UnknownProducerIdError):
        log.append(idempotent_batch(PID, 0, 7), 1)
    assert log.log_end_offset == 0
    assert log.append(idempotent_batch(PID, 0, 0), 1).base_offset == 0


def test_sequences_wrap_from_int32_max_to_zero(log: PartitionLog) -> None:
    # A long-lived producer: pretend its last batch ended just below int32 max (2**31 appends of
    # real batches would take too long), then cross the wrap inside one batch.
    log.append(idempotent_batch(PID, 0, 0), 1)
    entry = log._producers.entries[PID]
    entry.batches[-1] = BatchMetadata(INT32_MAX - 3, INT32_MAX - 3, 0, 0, 1)
    wrapped = log.append(idempotent_batch(PID, 0, INT32_MAX - 2, count=5), 1)  # seqs MAX-2..MAX, 0, 1
    assert log._producers.entries[PID].last_seq == 1
    assert log.append(idempotent_batch(PID, 0, 2), 1).base_offset == wrapped.last_offset + 1
    assert log.append(idempotent_batch(PID, 0, INT32_MAX - 2, count=5), 1).duplicate
    with pytest.raises(OutOfOrderSequenceError):
        log.append(idempotent_batch(PID, 0, 0), 1)


def test_batch_ending_exactly_at_int32_max_is_followed_by_zero(log: PartitionLog) -> None:
    log.append(idempotent_batch(PID, 0, 0), 1)
    log._producers.entries[PID].batches[-1] = BatchMetadata(INT32_MAX - 1, INT32_MAX - 1, 0, 0, 1)
    log.append(idempotent_batch(PID, 0, INT32_MAX), 1)
    with pytest.raises(OutOfOrderSequenceError):
        log.append(idempotent_batch(PID, 0, 1), 1)
    assert log.append(idempotent_batch(PID, 0, 0), 1).duplicate is False


def test_batches_without_producer_id_skip_all_checks(log: PartitionLog) -> None:
    for _ in range(3):
        assert not log.append(make_batch(2), 1).duplicate
    assert log.log_end_offset == 6
    assert log.producer_states() == []


def test_control_batch_moves_epoch_without_sequence_checks(log: PartitionLog) -> None:
    log.append(idempotent_batch(PID, 0, 0, count=3), 1)
    log.append(control_batch(PID, 2), 1, from_client=False)
    assert log.producer_states()[0].producer_epoch == 2
    with pytest.raises(InvalidProducerEpochError):
        log.append(control_batch(PID, 1), 1, from_client=False)
    with pytest.raises(InvalidProducerEpochError):
        log.append(idempotent_batch(PID, 0, 3), 1)
    # Same epoch as the marker, empty window: the next batch must start at 0.
    with pytest.raises(OutOfOrderSequenceError):
        log.append(idempotent_batch(PID, 2, 3), 1)
    assert log.append(idempotent_batch(PID, 2, 0), 1).base_offset == 4


def test_one_call_is_checked_batch_after_batch_and_applied_all_or_nothing(log: PartitionLog) -> None:
    ok = log.append(idempotent_batch(PID, 0, 0, count=5) + idempotent_batch(PID, 0, 5, count=5), 1)
    assert (ok.base_offset, ok.last_offset) == (0, 9)
    with pytest.raises(OutOfOrderSequenceError):
        log.append(idempotent_batch(PID, 0, 10, count=5) + idempotent_batch(PID, 0, 17), 1)
    assert log.log_end_offset == 10
    assert log._producers.entries[PID].last_seq == 9  # the failed call staged nothing
    with pytest.raises(InvalidRecordError):
        log.append(idempotent_batch(PID, 0, 5, count=5) + idempotent_batch(PID, 0, 10), 1)
    assert log.log_end_offset == 10


def test_producer_states_for_describe_producers(log: PartitionLog) -> None:
    log.append(idempotent_batch(7, 3, 0, count=4, timestamp_ms=555), 9)
    log.append(idempotent_batch(5, 0, 0), 9)
    states = log.producer_states()
    assert [s.producer_id for s in states] == [5, 7]
    assert (states[1].producer_epoch, states[1].last_sequence, states[1].last_timestamp_ms) == (3, 3, 555)
    assert states[1].current_txn_start_offset == -1


# --- snapshots and replay ---------------------------------------------------------------------------


def _produce_mixed(partition_log: PartitionLog, now_ms: int) -> None:
    for i in range(12):
        pid = PID + i % 3
        sequence = (i // 3) * 2
        partition_log.append(idempotent_batch(pid, 0, sequence, count=2, timestamp_ms=now_ms), now_ms)
        partition_log.append(make_batch(1, timestamp_ms=now_ms), now_ms)
        if partition_log.wants_flush():  # as the broker does after a roll (off its event loop)
            partition_log.flush()


def test_snapshot_plus_replay_rebuilds_identical_state_after_a_crash(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path, segment_bytes=600)
    _produce_mixed(partition_log, 50)
    assert partition_log.segment_count > 2  # rolls wrote snapshots; the tail needs a replay
    before = table(partition_log)
    partition_log.abandon()  # crash: no close, no final snapshot

    reopened = open_log(tmp_path, 60, segment_bytes=600)
    assert table(reopened) == before
    snapshots = sorted(p.name for p in (tmp_path / "topic-0").glob("*.snapshot"))
    assert len(snapshots) == 2  # only the newest two are kept
    assert reopened.append(idempotent_batch(PID, 0, 6, count=2, timestamp_ms=50), 60).duplicate


def test_clean_close_snapshots_at_log_end(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path)
    _produce_mixed(partition_log, 50)
    before = table(partition_log)
    end = partition_log.log_end_offset
    partition_log.close()
    assert (tmp_path / "topic-0" / f"{end:020d}.snapshot").exists()
    reopened = open_log(tmp_path, 60)
    assert table(reopened) == before


def test_corrupt_snapshot_is_ignored(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path, segment_bytes=600)
    _produce_mixed(partition_log, 50)
    before = table(partition_log)
    partition_log.close()
    directory = tmp_path / "topic-0"
    newest = sorted(directory.glob("*.snapshot"))[-1]
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0x55
    newest.write_bytes(bytes(data))

    reopened = open_log(tmp_path, 60, segment_bytes=600)
    assert table(reopened) == before  # older snapshot + replay
    assert not newest.exists()
    reopened.close()

    for snapshot in directory.glob("*.snapshot"):
        snapshot.write_bytes(b"garbage")
    assert table(open_log(tmp_path, 60, segment_bytes=600)) == before  # full replay


def test_snapshot_beyond_log_end_is_discarded(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path)
    partition_log.append(idempotent_batch(PID, 0, 0, timestamp_ms=5), 5)
    partition_log.close()
    directory = tmp_path / "topic-0"
    # A snapshot claiming a longer log (e.g. the log was truncated by recovery since).
    manager = ProducerStateManager(directory)
    manager.entries = {99: ProducerEntry(99, 0, [BatchMetadata(0, 0, 5, 5, 5)], 5, 5)}
    manager.write_snapshot(50)
    reopened = open_log(tmp_path, 5)
    assert list(table(reopened)) == [PID]
    assert not (directory / f"{50:020d}.snapshot").exists()


def test_snapshot_encoding_round_trips_and_detects_damage(tmp_path: Path) -> None:
    manager = ProducerStateManager(tmp_path)
    manager.entries = {
        3: ProducerEntry(3, 7, [BatchMetadata(0, 4, 10, 14, 99), BatchMetadata(5, 5, 15, 15, 100)], 100, 120),
        4: ProducerEntry(4, 0, [], 1, 2, coordinator_epoch=3, current_txn_first_offset=12),
    }
    data = manager.encode_snapshot(16)
    offset, entries = present(ProducerStateManager.decode_snapshot(data), "decoded snapshot")
    assert offset == 16
    assert entries == manager.entries
    assert ProducerStateManager.decode_snapshot(data[:-3]) is None
    assert ProducerStateManager.decode_snapshot(data + b"\x00") is None
    assert ProducerStateManager.decode_snapshot(b"OSPS" + data[4:9] + bytes([data[9] ^ 1]) + data[10:]) is None


def test_snapshot_write_leaves_no_temp_file(tmp_path: Path) -> None:
    manager = ProducerStateManager(tmp_path)
    for offset in (10, 20, 30):
        manager.write_snapshot(offset)
    assert sorted(os.listdir(tmp_path)) == [f"{20:020d}.snapshot", f"{30:020d}.snapshot"]


# --- KIP-360 retention and expiry -------------------------------------------------------------------


def test_kip360_delete_records_keeps_producer_state(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path, segment_bytes=300)
    for sequence in range(0, 10, 2):
        partition_log.append(idempotent_batch(PID, 0, sequence, count=2), 1)
    last = partition_log.append(idempotent_batch(PID, 0, 10, count=2), 1)
    partition_log.delete_records(-1)
    assert partition_log.log_start_offset == partition_log.log_end_offset == 12
    assert partition_log.segment_count == 1

    retry = partition_log.append(idempotent_batch(PID, 0, 10, count=2), 2)
    assert retry.duplicate
    assert retry.base_offset == last.base_offset
    assert partition_log.append(idempotent_batch(PID, 0, 12), 2).base_offset == 12
    partition_log.close()
    reopened = open_log(tmp_path, 3, segment_bytes=300)
    assert reopened.append(idempotent_batch(PID, 0, 13), 3).base_offset == 13


def test_kip360_retention_keeps_producer_state(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path, segment_bytes=200, retention_ms=1000)
    for sequence in range(6):
        partition_log.append(idempotent_batch(PID, 0, sequence, timestamp_ms=10), 10)
    assert partition_log.apply_retention(5_000) > 0
    assert partition_log.log_start_offset > 0
    assert partition_log.append(idempotent_batch(PID, 0, 6), 5_000).base_offset == 6


def test_producers_expire_after_producer_id_expiration_ms(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path, producer_id_expiration_ms=1_000)
    partition_log.append(idempotent_batch(1, 0, 0), 100)
    partition_log.append(idempotent_batch(2, 0, 0), 600)
    assert partition_log.expire_producers(1_099) == 0
    assert partition_log.expire_producers(1_100) == 1
    assert [s.producer_id for s in partition_log.producer_states()] == [2]
    # Expired means unknown: a continuing sequence now needs the KIP-360 epoch bump.
    with pytest.raises(UnknownProducerIdError):
        partition_log.append(idempotent_batch(1, 0, 1), 1_200)
    assert partition_log.append(idempotent_batch(1, 1, 0), 1_200).duplicate is False
    assert partition_log.expire_producers(1_700) == 1  # producer 2, idle since 600


def test_expiry_survives_a_restart(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path, producer_id_expiration_ms=1_000)
    partition_log.append(idempotent_batch(1, 0, 0, timestamp_ms=100), 100)
    partition_log.close()
    reopened = open_log(tmp_path, 500, producer_id_expiration_ms=1_000)
    assert reopened.expire_producers(1_099) == 0
    assert reopened.expire_producers(1_100) == 1
