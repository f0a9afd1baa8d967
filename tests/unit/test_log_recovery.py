"""Recovery of a partition log after a crash: torn tails, corrupt batches, lost or damaged indexes."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oncestream.log.config import LogConfig
from oncestream.log.partition_log import PartitionLog
from oncestream.log.recovery import CLEAN_SHUTDOWN_FILE
from tests.unit._batches import (
    header_fields,
    idempotent_batch,
    make_batch,
    split_batches,
)

PID = 42


def open_log(tmp_path: Path, now_ms: int = 0, **config) -> PartitionLog:
    return PartitionLog.open(tmp_path / "topic-0", LogConfig(**config), now_ms)


def all_base_offsets(partition_log: PartitionLog) -> list[int]:
    result = partition_log.read(partition_log.log_start_offset, 2**31)
    return [header_fields(b)["base_offset"] for b in split_batches(b"".join(result.chunks))]


def segment_file(tmp_path: Path, base_offset: int, suffix: str) -> Path:
    return tmp_path / "topic-0" / f"{base_offset:020d}{suffix}"


def crashed_log(tmp_path: Path, batches: int = 6, **config) -> int:
    """Append ``batches`` idempotent batches of 2 records, then 'crash'; returns the log end."""
    partition_log = open_log(tmp_path, **config)
    for i in range(batches):
        partition_log.append(idempotent_batch(PID, 0, 2 * i, count=2, timestamp_ms=100 + i), 100 + i)
    end = partition_log.log_end_offset
    partition_log.abandon()  # like SIGKILL: buffered index entries are lost, no marker, no snapshot
    return end


@pytest.mark.parametrize("cut_bytes", [1, 5, 30, 70])
def test_torn_tail_is_truncated_and_every_complete_batch_kept(tmp_path: Path, cut_bytes: int) -> None:
    crashed_log(tmp_path)
    path = segment_file(tmp_path, 0, ".log")
    os.truncate(path, path.stat().st_size - cut_bytes)

    recovered = open_log(tmp_path)
    assert all_base_offsets(recovered) == [0, 2, 4, 6, 8]
    assert recovered.log_end_offset == 10
    assert path.stat().st_size == recovered.size_bytes
    # The lost batch can be resent (same sequence) and offsets stay contiguous.
    assert recovered.append(idempotent_batch(PID, 0, 10, count=2), 200).base_offset == 10
    assert recovered.append(idempotent_batch(PID, 0, 2, count=2), 200).duplicate


@pytest.mark.parametrize("garbage", [b"\x00" * 7, b"\xff" * 100, b"\x00" * 12 + b"\x7f" * 80])
def test_garbage_after_the_last_batch_is_truncated(tmp_path: Path, garbage: bytes) -> None:
    end = crashed_log(tmp_path)
    path = segment_file(tmp_path, 0, ".log")
    size = path.stat().st_size
    with open(path, "ab") as f:
        f.write(garbage)
    recovered = open_log(tmp_path)
    assert recovered.log_end_offset == end
    assert path.stat().st_size == size


def test_corrupt_batch_in_the_middle_truncates_from_there(tmp_path: Path) -> None:
    crashed_log(tmp_path)
    path = segment_file(tmp_path, 0, ".log")
    data = bytearray(path.read_bytes())
    third = sum(len(b) for b in split_batches(bytes(data))[:2])
    data[third + 70] ^= 0x01  # a record byte of the 3rd batch: CRC mismatch
    path.write_bytes(bytes(data))
    recovered = open_log(tmp_path)
    assert all_base_offsets(recovered) == [0, 2]
    assert [s.last_sequence for s in recovered.producer_states()] == [3]


def test_truncated_segment_before_the_active_one_drops_later_segments(tmp_path: Path) -> None:
    size = len(idempotent_batch(PID, 0, 0, count=2))
    crashed_log(tmp_path, segment_bytes=size * 2)
    first = segment_file(tmp_path, 0, ".log")
    os.truncate(first, first.stat().st_size - 3)
    recovered = open_log(tmp_path, segment_bytes=size * 2)
    # Offsets must stay contiguous: nothing after the hole can be kept.
    assert recovered.segment_base_offsets() == [0]
    assert all_base_offsets(recovered) == [0]
    assert not segment_file(tmp_path, 4, ".log").exists()
    assert recovered.append(make_batch(1), 1).base_offset == 2


def test_clean_shutdown_marker_skips_the_scan_and_is_removed_on_open(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path)
    partition_log.append(make_batch(2), 1)
    partition_log.close()
    marker = tmp_path / "topic-0" / CLEAN_SHUTDOWN_FILE
    assert marker.exists()
    reopened = open_log(tmp_path)
    assert not marker.exists()
    assert reopened.log_end_offset == 2
    reopened.abandon()
    # The marker is gone, so a crash now is recovered properly.
    path = segment_file(tmp_path, 0, ".log")
    with open(path, "ab") as f:
        f.write(b"\x01\x02\x03")
    assert open_log(tmp_path).size_bytes == len(make_batch(2))


@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
@pytest.mark.parametrize("damage", ["delete", "garbage", "unordered", "beyond-file"])
def test_missing_or_corrupt_index_is_rebuilt(tmp_path: Path, suffix: str, damage: str) -> None:
    config = dict(segment_bytes=600, index_interval_bytes=1)
    partition_log = open_log(tmp_path, **config)
    for i in range(12):
        partition_log.append(make_batch(2, timestamp_ms=1_000 + i), 1)
    expected = all_base_offsets(partition_log)
    partition_log.close()
    index = segment_file(tmp_path, 0, suffix)
    good = index.read_bytes()
    assert len(good) > 24
    if damage == "delete":
        index.unlink()
    elif damage == "garbage":
        index.write_bytes(good[:-3])
    elif damage == "unordered":
        entry = 8 if suffix == ".index" else 12
        index.write_bytes(good[entry : 2 * entry] + good[:entry] + good[2 * entry :])
    else:
        entry = 8 if suffix == ".index" else 12
        index.write_bytes(good + (b"\x7f\xff\xff\xf0" * (entry // 4)))

    reopened = open_log(tmp_path, **config)
    assert index.read_bytes() == good
    assert all_base_offsets(reopened) == expected
    assert reopened.offset_for_timestamp(1_003) == (6, 1_003)
    assert next(header_fields(b)["base_offset"] for b in split_batches(reopened.read(7, 10**6).chunks[0])) == 6


def test_index_pointing_at_the_wrong_batch_is_rebuilt(tmp_path: Path) -> None:
    config = dict(index_interval_bytes=1)
    partition_log = open_log(tmp_path, **config)
    for _ in range(6):
        partition_log.append(make_batch(2), 1)
    partition_log.close()
    index = segment_file(tmp_path, 0, ".index")
    good = index.read_bytes()
    # Keep it well-formed and monotonic but claim the last entry is one batch later than it is.
    import struct

    relative, position = struct.unpack_from(">ii", good, len(good) - 8)
    index.write_bytes(good[:-8] + struct.pack(">ii", relative + 2, position))
    reopened = open_log(tmp_path, **config)
    assert index.read_bytes() == good
    assert reopened.log_end_offset == 12


def test_crash_loses_buffered_index_entries_but_recovery_rebuilds_them(tmp_path: Path) -> None:
    crashed_log(tmp_path, batches=20, index_interval_bytes=1)
    recovered = open_log(tmp_path, index_interval_bytes=1)
    assert all_base_offsets(recovered) == list(range(0, 40, 2))
    assert len(segment_file(tmp_path, 0, ".index").read_bytes()) == 19 * 8
    assert recovered.offset_for_timestamp(110) == (20, 110)


def test_unflushed_rolled_segments_are_scanned_after_a_crash(tmp_path: Path) -> None:
    size = len(idempotent_batch(PID, 0, 0, count=2))
    crashed_log(tmp_path, segment_bytes=size * 2)
    # Damage an older, never-flushed segment: it is beyond the recovery point, so it is scanned.
    middle = segment_file(tmp_path, 4, ".log")
    data = bytearray(middle.read_bytes())
    data[-1] ^= 0xFF
    middle.write_bytes(bytes(data))
    recovered = open_log(tmp_path, segment_bytes=size * 2)
    assert all_base_offsets(recovered) == [0, 2, 4]


def test_flushed_segments_are_trusted_after_a_crash(tmp_path: Path) -> None:
    size = len(make_batch(2))
    partition_log = open_log(tmp_path, segment_bytes=size * 2)
    for _ in range(6):
        partition_log.append(make_batch(2), 1)
    partition_log.flush()  # recovery point moves to the active segment
    partition_log.abandon()
    # A flipped payload bit in a flushed segment is not looked for (only lengths and indexes).
    first = segment_file(tmp_path, 0, ".log")
    data = bytearray(first.read_bytes())
    data[-1] ^= 0xFF
    first.write_bytes(bytes(data))
    assert open_log(tmp_path, segment_bytes=size * 2).log_end_offset == 12


def test_leftover_temp_and_orphan_index_files_are_removed(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path)
    partition_log.append(make_batch(1), 1)
    partition_log.close()
    directory = tmp_path / "topic-0"
    (directory / f"{5:020d}.index").write_bytes(b"")
    (directory / f"{5:020d}.snapshot.tmp").write_bytes(b"x")
    open_log(tmp_path)
    assert not (directory / f"{5:020d}.index").exists()
    assert not (directory / f"{5:020d}.snapshot.tmp").exists()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    counts=st.lists(st.integers(min_value=1, max_value=4), min_size=1, max_size=12),
    segment_batches=st.integers(min_value=1, max_value=5),
    cut_fraction=st.floats(min_value=0.0, max_value=1.0),
)
def test_recovery_keeps_exactly_the_complete_batches(counts: list[int], segment_batches: int, cut_fraction: float) -> None:
    """Whatever prefix of the active segment survives a crash, recovery keeps every whole batch in
    it, drops the rest, and the log accepts appends at the next contiguous offset."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        config = dict(segment_bytes=len(make_batch(1)) * segment_batches, index_interval_bytes=1)
        partition_log = open_log(tmp_path, **config)
        ends = []
        for count in counts:
            ends.append(partition_log.append(make_batch(count), 1).last_offset + 1)
        active_base = partition_log.segment_base_offsets()[-1]
        partition_log.abandon()

        active = segment_file(tmp_path, active_base, ".log")
        data = active.read_bytes()
        keep = int(len(data) * cut_fraction)
        active.write_bytes(data[:keep])
        expected_end, position = active_base, 0
        for batch in split_batches(data):
            position += len(batch)
            if position > keep:
                break
            expected_end = header_fields(batch)["base_offset"] + header_fields(batch)["last_offset_delta"] + 1

        recovered = open_log(tmp_path, **config)
        assert recovered.log_end_offset == expected_end
        assert expected_end == active_base or expected_end in ends
        everything = all_base_offsets(recovered)
        assert everything == sorted(everything)
        assert (not everything or everything[0] == 0)
        assert recovered.append(make_batch(1), 2).base_offset == expected_end
