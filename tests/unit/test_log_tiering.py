"""The log's side of tiered storage (KIP-405): local log start, tierable segments, local retention,
remote-owned retention, the global log start moved by remote retention, and recovery of a log
whose oldest offsets live only in remote storage."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from oncestream.errors import (
    InvalidConfigError,
    OffsetMovedToTieredStorageError,
    OffsetOutOfRangeError,
    StorageError,
)
from oncestream.log.config import LogConfig
from oncestream.log.partition_log import PartitionLog
from tests.unit._batches import ATTR_TRANSACTIONAL, header_fields, idempotent_batch, make_batch, split_batches

# One batch per segment: every batch (> 61 bytes) is larger than half of segment.bytes.
TIERED: dict[str, Any] = {"segment_bytes": 100, "remote_storage_enable": True}
PID = 7


def open_log(tmp_path: Path, now_ms: int = 0, **config) -> PartitionLog:
    return PartitionLog.open(tmp_path / "topic-0", LogConfig(**config), now_ms)


def fill(partition_log: PartitionLog, batches: int, *, first_ts_ms: int = 1_000) -> None:
    """Idempotent one-record batches of producer PID, one per segment with TIERED; flushed."""
    start = partition_log.log_end_offset
    for i in range(batches):
        partition_log.append(idempotent_batch(PID, 0, start + i, timestamp_ms=first_ts_ms + i), first_ts_ms + i)
    partition_log.flush()


def snapshot_offsets(tmp_path: Path) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in (tmp_path / "topic-0").glob("*.snapshot"))


def checkpoint(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "topic-0" / "partition.checkpoint").read_text())


def read_offsets(partition_log: PartitionLog, offset: int) -> list[int]:
    chunks = partition_log.read(offset, 2**31 - 1).chunks
    return [header_fields(batch)["base_offset"] for batch in split_batches(b"".join(chunks))]


# --- LogConfig --------------------------------------------------------------------------------------


def test_local_retention_minus_two_means_retention_and_minus_one_unlimited() -> None:
    default = LogConfig(retention_ms=5_000, retention_bytes=800)
    assert (default.local_retention_ms, default.local_retention_bytes) == (-2, -2)
    assert (default.effective_local_retention_ms, default.effective_local_retention_bytes) == (5_000, 800)
    unlimited = LogConfig.from_topic_configs({"local.retention.ms": "-1", "local.retention.bytes": "-1"}, default)
    assert (unlimited.effective_local_retention_ms, unlimited.effective_local_retention_bytes) == (-1, -1)
    own = LogConfig.from_topic_configs({"local.retention.ms": "100", "local.retention.bytes": "50"}, default)
    assert (own.effective_local_retention_ms, own.effective_local_retention_bytes) == (100, 50)
    with pytest.raises(InvalidConfigError):
        LogConfig.from_topic_configs({"local.retention.ms": "-3"})
    with pytest.raises(InvalidConfigError):
        LogConfig(local_retention_bytes=-3)


def test_tiering_switches_parse_describe_and_take_broker_defaults() -> None:
    config = LogConfig.from_topic_configs(
        {"remote.storage.enable": "TRUE", "remote.log.copy.disable": "false", "remote.log.delete.on.disable": "true"}
    )
    assert (config.remote_storage_enable, config.remote_log_copy_disable, config.remote_log_delete_on_disable) == (
        True, False, True,
    )
    described = config.to_topic_configs()
    assert described["remote.storage.enable"] == "true"  # Kafka's spelling, not Python's
    assert described["remote.log.copy.disable"] == "false"
    assert described["local.retention.ms"] == "-2"
    assert LogConfig.from_topic_configs(described) == config
    with pytest.raises(InvalidConfigError):
        LogConfig.from_topic_configs({"remote.storage.enable": "yes"})
    broker = LogConfig.from_broker_configs({"log.local.retention.ms": "60000", "log.local.retention.bytes": "4096"})
    assert (broker.local_retention_ms, broker.local_retention_bytes) == (60_000, 4_096)


# --- segments to tier -------------------------------------------------------------------------------


def test_closed_segments_to_tier_are_sealed_flushed_and_carry_their_files(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path, **TIERED)
    for i in range(4):
        partition_log.append(idempotent_batch(PID, 0, i, timestamp_ms=1_000 + i), 1_000 + i)
    # Rolled but not flushed yet: the segments and their snapshots are not durable.
    assert partition_log.closed_segments_to_tier(0) == []
    partition_log.flush()
    tierable = partition_log.closed_segments_to_tier(0)
    assert [(s.base_offset, s.last_offset) for s in tierable] == [(0, 0), (1, 1), (2, 2)]  # never the active one
    for segment in tierable:
        assert segment.log_path.stat().st_size == segment.size_bytes > 0
        assert segment.index_path.exists()
        assert segment.timeindex_path.exists()
        assert segment.max_timestamp_ms == 1_000 + segment.base_offset
        assert segment.txnindex_path is None
        assert segment.producer_snapshot_path is not None
        assert segment.producer_snapshot_path.name == f"{segment.last_offset + 1:020d}.snapshot"
        assert segment.producer_snapshot_path.exists()
    assert [s.base_offset for s in partition_log.closed_segments_to_tier(2)] == [2]
    assert partition_log.closed_segments_to_tier(3) == []


def test_tiered_rolls_keep_every_snapshot_even_between_flushes(tmp_path: Path) -> None:
    """Kafka writes a producer snapshot at each roll and keeps it with its segment; other logs
    keep the newest two (and only the newest roll's when several rolls share one flush)."""
    tiered = open_log(tmp_path, **TIERED)
    for i in range(5):  # four rolls before a single flush
        tiered.append(idempotent_batch(PID, 0, i), 10)
    tiered.flush()
    assert snapshot_offsets(tmp_path) == [1, 2, 3, 4]
    tiered.close()
    assert snapshot_offsets(tmp_path) == [1, 2, 3, 4, 5]

    plain_dir = tmp_path / "plain"
    plain = open_log(plain_dir, segment_bytes=100)
    for i in range(5):
        plain.append(idempotent_batch(PID, 0, i), 10)
    plain.flush()
    plain.close()
    assert snapshot_offsets(plain_dir) == [4, 5]


def test_segment_with_an_aborted_transaction_names_its_txn_index(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path, **TIERED)
    partition_log.append(make_batch(1, producer_id=9, producer_epoch=0, base_sequence=0, attributes=ATTR_TRANSACTIONAL), 5)
    partition_log.append_marker(producer_id=9, producer_epoch=0, commit=False, coordinator_epoch=0, now_ms=5)
    partition_log.append(make_batch(1), 5)
    partition_log.flush()
    tierable = partition_log.closed_segments_to_tier(0)
    assert [s.base_offset for s in tierable] == [0, 1]
    assert tierable[0].txnindex_path is None  # the abort is indexed with its marker, in segment 1
    assert tierable[1].txnindex_path is not None
    assert tierable[1].txnindex_path.stat().st_size > 0


def test_open_transaction_bounds_what_is_tiered_and_deleted_locally(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path, **TIERED, local_retention_ms=0)
    partition_log.append(make_batch(1), 5)  # offset 0
    partition_log.append(make_batch(1, producer_id=9, producer_epoch=0, base_sequence=0, attributes=ATTR_TRANSACTIONAL), 5)
    partition_log.append(make_batch(1), 5)  # offset 2
    partition_log.append(make_batch(1), 5)  # offset 3, active
    partition_log.flush()
    assert partition_log.last_stable_offset == 1
    assert [s.base_offset for s in partition_log.closed_segments_to_tier(0)] == [0]
    # Even a caller claiming more was copied cannot make the open transaction's segment go.
    assert partition_log.delete_tiered_local_segments(copied_last_offset=2, now_ms=10_000) == 1
    assert partition_log.local_log_start_offset == 1
    partition_log.append_marker(producer_id=9, producer_epoch=0, commit=True, coordinator_epoch=0, now_ms=6)
    partition_log.flush()
    assert [s.base_offset for s in partition_log.closed_segments_to_tier(1)] == [1, 2, 3]


# --- local retention --------------------------------------------------------------------------------


def test_local_retention_by_time_deletes_only_copied_segments_and_moves_the_local_start(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path, **TIERED, local_retention_ms=1_000, retention_ms=-1)
    fill(partition_log, 6, first_ts_ms=1_000)  # segments 0..4 sealed, 5 active; timestamps 1000..1005
    assert partition_log.delete_tiered_local_segments(copied_last_offset=2, now_ms=2_000) == 0  # none old enough
    assert partition_log.delete_tiered_local_segments(copied_last_offset=2, now_ms=2_004) == 3  # 0..2, not 3
    assert partition_log.segment_base_offsets() == [3, 4, 5]
    assert (partition_log.log_start_offset, partition_log.local_log_start_offset) == (0, 3)
    # Durable before any file goes: the checkpoint names the new local start already.
    assert checkpoint(tmp_path)["local_log_start_offset"] == 3
    assert (tmp_path / "topic-0" / f"{0:020d}.log").exists()
    removal = partition_log.take_file_removal()
    assert removal is not None
    removal.run()
    assert not (tmp_path / "topic-0" / f"{0:020d}.log").exists()
    assert snapshot_offsets(tmp_path) == [3, 4, 5]  # those of deleted segments went with them
    with pytest.raises(OffsetMovedToTieredStorageError) as raised:
        partition_log.read(1, 10_000)
    assert (raised.value.offset, raised.value.local_log_start_offset) == (1, 3)
    assert read_offsets(partition_log, 3) == [3, 4, 5]
    with pytest.raises(OffsetOutOfRangeError):
        partition_log.read(7, 10_000)
    # ListOffsets by timestamp stays local (the remote reader answers below).
    assert partition_log.offset_for_timestamp(0) == (3, 1_003)


def test_local_retention_by_size_and_never_the_active_segment(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path, **TIERED, retention_ms=-1)
    fill(partition_log, 5)
    one_segment = partition_log.size_bytes // 5
    partition_log.update_config(LogConfig(**TIERED, retention_ms=-1, local_retention_bytes=2 * one_segment))
    assert partition_log.delete_tiered_local_segments(copied_last_offset=100, now_ms=0) == 3
    assert partition_log.segment_base_offsets() == [3, 4]
    partition_log.update_config(LogConfig(**TIERED, retention_ms=-1, local_retention_bytes=0))
    assert partition_log.delete_tiered_local_segments(copied_last_offset=100, now_ms=0) == 1
    assert partition_log.segment_base_offsets() == [4]  # the active segment stays


def test_local_retention_minus_two_follows_retention_and_minus_one_keeps_everything(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path, **TIERED, retention_ms=500)
    fill(partition_log, 3, first_ts_ms=1_000)
    partition_log.update_config(LogConfig(**TIERED, retention_ms=500, local_retention_ms=-1))
    assert partition_log.delete_tiered_local_segments(copied_last_offset=100, now_ms=10_000) == 0
    partition_log.update_config(LogConfig(**TIERED, retention_ms=500))  # -2: as retention.ms
    assert partition_log.delete_tiered_local_segments(copied_last_offset=100, now_ms=10_000) == 2


def test_retention_is_left_to_the_remote_manager_on_tiered_topics(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path, **TIERED, retention_ms=10, retention_bytes=1)
    fill(partition_log, 4)
    assert partition_log.apply_retention(now_ms=1_000_000) == 0
    assert partition_log.segment_base_offsets() == [0, 1, 2, 3]
    # DeleteRecords still removes what it put below the log start.
    partition_log.delete_records(2)
    assert partition_log.segment_base_offsets() == [2, 3]
    plain = PartitionLog.open(tmp_path / "plain-0", LogConfig(segment_bytes=100, retention_ms=10), 0)
    fill(plain, 4)
    assert plain.apply_retention(now_ms=1_000_000) == 3


@pytest.mark.parametrize("shutdown", ["clean", "crash"])
def test_producer_state_survives_local_deletion_and_reopen(tmp_path: Path, shutdown: str) -> None:
    """KIP-360: deleting segments keeps the producers; a retried batch is still a duplicate."""
    partition_log = open_log(tmp_path, **TIERED, local_retention_ms=0)
    fill(partition_log, 4)
    assert partition_log.delete_tiered_local_segments(copied_last_offset=2, now_ms=100_000) == 3
    removal = partition_log.take_file_removal()
    assert removal is not None
    removal.run()
    retried = partition_log.append(idempotent_batch(PID, 0, 3, timestamp_ms=1_003), 1_003)
    assert retried.duplicate
    assert retried.base_offset == 3
    if shutdown == "clean":
        partition_log.close()
    else:
        partition_log.abandon()
    reopened = open_log(tmp_path, **TIERED, local_retention_ms=0)
    assert [(s.producer_id, s.last_sequence) for s in reopened.producer_states()] == [(PID, 3)]
    assert reopened.append(idempotent_batch(PID, 0, 3, timestamp_ms=1_003), 1_003).duplicate
    assert reopened.append(idempotent_batch(PID, 0, 4), 1_004).base_offset == 4


# --- global log start and recovery ------------------------------------------------------------------


def test_advance_log_start_moves_the_global_start_and_drops_local_segments_below(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path, **TIERED, local_retention_ms=0)
    fill(partition_log, 6)
    partition_log.delete_tiered_local_segments(copied_last_offset=1, now_ms=100_000)
    assert (partition_log.log_start_offset, partition_log.local_log_start_offset) == (0, 2)
    move = partition_log.advance_log_start(1)  # remote retention expired remote segment [0, 0]
    assert move is not None
    move.run()
    partition_log.finish_delete_records(move)
    assert (partition_log.log_start_offset, partition_log.local_log_start_offset) == (1, 2)
    assert checkpoint(tmp_path)["log_start_offset"] == 1
    with pytest.raises(OffsetOutOfRangeError):
        partition_log.read(0, 1_000)
    assert partition_log.advance_log_start(1) is None
    move = partition_log.advance_log_start(4)  # beyond the local start: local segments go too
    assert move is not None
    move.run()
    partition_log.finish_delete_records(move)
    assert (partition_log.log_start_offset, partition_log.local_log_start_offset) == (4, 4)
    assert partition_log.segment_base_offsets() == [4, 5]
    with pytest.raises(OffsetOutOfRangeError):
        partition_log.advance_log_start(partition_log.high_watermark + 1)


@pytest.mark.parametrize("shutdown", ["clean", "crash"])
def test_tiered_log_reopens_with_log_start_below_its_local_segments(tmp_path: Path, shutdown: str) -> None:
    partition_log = open_log(tmp_path, **TIERED, local_retention_ms=0)
    fill(partition_log, 5)
    partition_log.delete_tiered_local_segments(copied_last_offset=2, now_ms=100_000)
    removal = partition_log.take_file_removal()
    assert removal is not None
    removal.run()
    if shutdown == "clean":
        partition_log.close()
    else:
        partition_log.abandon()
    reopened = open_log(tmp_path, **TIERED)
    assert (reopened.log_start_offset, reopened.local_log_start_offset) == (0, 3)
    assert reopened.segment_base_offsets() == [3, 4]
    with pytest.raises(OffsetMovedToTieredStorageError):
        reopened.read(0, 1_000)
    assert read_offsets(reopened, 3) == [3, 4]


def test_crash_between_checkpoint_and_unlink_leaves_segments_that_go_next_time(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path, **TIERED, local_retention_ms=0)
    fill(partition_log, 5)
    partition_log.delete_tiered_local_segments(copied_last_offset=1, now_ms=100_000)
    partition_log.abandon()  # the files of segments 0 and 1 were never removed
    reopened = open_log(tmp_path, **TIERED, local_retention_ms=0)
    assert reopened.segment_base_offsets() == [0, 1, 2, 3, 4]
    assert (reopened.log_start_offset, reopened.local_log_start_offset) == (0, 2)
    with pytest.raises(OffsetMovedToTieredStorageError):
        reopened.read(1, 1_000)
    assert reopened.delete_tiered_local_segments(copied_last_offset=1, now_ms=100_000) == 2
    assert reopened.segment_base_offsets() == [2, 3, 4]
    assert reopened.local_log_start_offset == 2


def test_untiered_log_start_is_still_clamped_to_the_first_segment(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path, segment_bytes=100)
    fill(partition_log, 4)
    partition_log.close()
    for base in (0, 1):
        for suffix in (".log", ".index", ".timeindex", ".txnindex"):
            (tmp_path / "topic-0" / f"{base:020d}{suffix}").unlink(missing_ok=True)
    reopened = open_log(tmp_path, segment_bytes=100)
    assert (reopened.log_start_offset, reopened.local_log_start_offset) == (2, 2)
    assert "local_log_start_offset" not in checkpoint(tmp_path)


def test_local_retention_in_three_steps_writes_the_checkpoint_off_the_log_thread(tmp_path: Path) -> None:
    """As DeleteRecords: the broker moves the local start on its loop, writes the checkpoint on a
    disk thread (``run``, fsync seam), and deletes the segments back on the loop."""
    partition_log = open_log(tmp_path, **TIERED, local_retention_ms=0)
    fill(partition_log, 5)
    move = partition_log.begin_delete_tiered_local_segments(copied_last_offset=1, now_ms=100_000)
    assert move is not None
    assert partition_log.local_log_start_offset == 2
    with pytest.raises(OffsetMovedToTieredStorageError):
        partition_log.read(1, 1_000)  # the remote reader serves it from now on
    assert "local_log_start_offset" not in checkpoint(tmp_path)  # not durable yet
    assert partition_log.segment_base_offsets() == [0, 1, 2, 3, 4]  # nothing deleted before it is

    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    with pytest.raises(StorageError):
        move.run(failing_fsync)
    assert partition_log.segment_base_offsets() == [0, 1, 2, 3, 4]  # a failed run deletes nothing
    # The next pass makes the same move and, written this time, deletes the segments.
    move = partition_log.begin_delete_tiered_local_segments(copied_last_offset=1, now_ms=100_000)
    assert move is not None
    synced: list[int] = []
    move.run(synced.append)
    assert synced
    assert checkpoint(tmp_path)["local_log_start_offset"] == 2
    assert partition_log.finish_delete_tiered_local_segments(move) == 2
    assert partition_log.segment_base_offsets() == [2, 3, 4]
    assert partition_log.begin_delete_tiered_local_segments(copied_last_offset=1, now_ms=100_000) is None


def test_a_checkpoint_written_meanwhile_makes_finish_write_it_again(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path, **TIERED, local_retention_ms=0)
    fill(partition_log, 4)
    move = partition_log.begin_delete_tiered_local_segments(copied_last_offset=0, now_ms=100_000)
    assert move is not None
    delete_move = partition_log.begin_delete_records(0)  # nothing moves: no write
    assert delete_move is None
    partition_log.append(idempotent_batch(PID, 0, 4), 2_000)
    partition_log.flush()  # its job writes a newer checkpoint (recovery point), local start included
    move.run()
    assert not move.written  # the older snapshot of the positions must not overwrite it
    assert partition_log.finish_delete_tiered_local_segments(move) == 1
    assert checkpoint(tmp_path)["local_log_start_offset"] == 1


def test_with_copies_disabled_local_segments_follow_retention_without_a_copy(tmp_path: Path) -> None:
    """KIP-950 (Kafka's localRetentionMs with remote.log.copy.disable): retention.ms applies, not
    local.retention.ms, and segments need no remote copy to go."""
    partition_log = open_log(tmp_path, **TIERED, retention_ms=5_000, local_retention_ms=10)
    fill(partition_log, 4, first_ts_ms=1_000)
    partition_log.update_config(LogConfig(**TIERED, retention_ms=5_000, local_retention_ms=10,
                                          remote_log_copy_disable=True))
    assert partition_log.delete_tiered_local_segments(copied_last_offset=-1, now_ms=5_500) == 0  # not 5 s old
    assert partition_log.delete_tiered_local_segments(copied_last_offset=-1, now_ms=6_002) == 2
    assert (partition_log.log_start_offset, partition_log.local_log_start_offset) == (0, 2)
    partition_log.update_config(LogConfig(**TIERED, retention_ms=5_000, local_retention_ms=10))
    assert partition_log.delete_tiered_local_segments(copied_last_offset=-1, now_ms=100_000) == 0  # copying: needs copies
