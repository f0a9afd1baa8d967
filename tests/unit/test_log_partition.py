"""PartitionLog append/read/retention/DeleteRecords semantics (Kafka produce, fetch, ListOffsets)."""

from __future__ import annotations

from pathlib import Path

import pytest

from oncestream.errors import (
    CorruptRecordError,
    InvalidRecordError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    UnsupportedMagicError,
)
from oncestream.log.config import LogConfig
from oncestream.log.partition_log import PartitionLog, parse_partition_dir_name
from oncestream.protocol.record_batch import (
    ATTR_TIMESTAMP_TYPE_LOG_APPEND,
    iter_batches,
)
from tests.unit._batches import header_fields, make_batch, split_batches, with_bad_crc


def open_log(tmp_path: Path, now_ms: int = 0, name: str = "topic-0", **config) -> PartitionLog:
    return PartitionLog.open(tmp_path / name, LogConfig(**config), now_ms)


def stored(partition_log: PartitionLog) -> list[bytes]:
    result = partition_log.read(partition_log.log_start_offset, 2**31)
    return split_batches(b"".join(result.chunks))


def base_offsets(chunks: list[bytes]) -> list[int]:
    return [header_fields(batch)["base_offset"] for batch in split_batches(b"".join(chunks))]


# --- append -----------------------------------------------------------------------------------------


def test_append_assigns_offsets_by_patching_only_the_base_offset(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path)
    batches = [make_batch(3, base_offset=777), make_batch(1), make_batch(5)]
    results = [partition_log.append(batch, 10) for batch in batches]
    assert [(r.base_offset, r.last_offset) for r in results] == [(0, 2), (3, 3), (4, 8)]
    assert all(r.log_append_time_ms == -1 and not r.duplicate and r.log_start_offset == 0 for r in results)
    for original, on_disk, result in zip(batches, stored(partition_log), results):
        assert on_disk[8:] == original[8:]  # stored verbatim, CRC untouched
        assert header_fields(on_disk)["base_offset"] == result.base_offset
    assert partition_log.log_end_offset == partition_log.high_watermark == partition_log.last_stable_offset == 9
    assert partition_log.size_bytes == sum(map(len, batches))
    assert header_fields(batches[0])["base_offset"] == 777  # the caller's buffer is not modified


def test_append_of_several_batches_in_one_call(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path)
    result = partition_log.append(make_batch(2) + make_batch(3) + make_batch(1), 10)
    assert (result.base_offset, result.last_offset) == (0, 5)
    assert base_offsets(partition_log.read(0, 10_000).chunks) == [0, 2, 5]


@pytest.mark.parametrize(
    ("damage", "error"),
    [
        (lambda good: good + with_bad_crc(make_batch(2)), CorruptRecordError),
        (lambda good: good + make_batch(2, magic=1), UnsupportedMagicError),
        (lambda good: good + make_batch(2)[:-5], CorruptRecordError),
        (lambda good: good + make_batch(1, value_size=2_000), MessageTooLargeError),
    ],
    ids=["bad-crc", "old-magic", "truncated", "too-large"],
)
def test_invalid_batch_rejects_the_whole_call_and_writes_nothing(tmp_path: Path, damage, error) -> None:
    partition_log = open_log(tmp_path, max_message_bytes=1_000)
    partition_log.append(make_batch(1), 10)
    with pytest.raises(error):
        partition_log.append(damage(make_batch(3)), 10)
    assert (partition_log.log_end_offset, partition_log.size_bytes) == (1, len(make_batch(1)))
    assert partition_log.append(make_batch(1), 10).base_offset == 1


def test_max_message_bytes_is_inclusive(tmp_path: Path) -> None:
    batch = make_batch(1, value_size=100)
    partition_log = open_log(tmp_path, max_message_bytes=len(batch))
    partition_log.append(batch, 1)
    with pytest.raises(MessageTooLargeError):
        partition_log.append(make_batch(1, value_size=101), 1)


def test_record_count_must_match_last_offset_delta(tmp_path: Path) -> None:
    import struct

    import crc32c

    partition_log = open_log(tmp_path)
    bad = bytearray(make_batch(3))
    struct.pack_into(">i", bad, 57, 2)  # record count 2 but last offset delta 2
    struct.pack_into(">I", bad, 17, crc32c.crc32c(bytes(bad[21:])))
    with pytest.raises(InvalidRecordError):
        partition_log.append(bytes(bad), 1)
    with pytest.raises(InvalidRecordError):
        partition_log.append(b"", 1)
    assert partition_log.log_end_offset == 0


def test_log_append_time_stamps_batches_and_keeps_crc_valid(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    original = make_batch(4, timestamp_ms=5)
    result = partition_log.append(original, 123_456)
    assert result.log_append_time_ms == 123_456
    (on_disk,) = stored(partition_log)
    header, _ = next(iter_batches(on_disk))  # verifies the recomputed CRC
    assert header.attributes & ATTR_TIMESTAMP_TYPE_LOG_APPEND
    assert header.max_timestamp == 123_456
    assert header.base_timestamp == 5
    assert on_disk[61:] == original[61:]
    assert partition_log.offset_for_timestamp(100_000) == (0, 123_456)


# --- read -------------------------------------------------------------------------------------------


@pytest.fixture
def ten_batches(tmp_path: Path) -> tuple[PartitionLog, int]:
    partition_log = open_log(tmp_path, segment_bytes=400, index_interval_bytes=50)
    for i in range(10):
        partition_log.append(make_batch(2, timestamp_ms=1_000 + i), 1_000 + i)
    assert partition_log.segment_count > 2
    return partition_log, len(make_batch(2))


def test_read_returns_whole_batches_within_max_bytes(ten_batches) -> None:
    partition_log, size = ten_batches
    result = partition_log.read(0, size * 3 + size // 2)
    assert base_offsets(result.chunks) == [0, 2, 4]
    assert result.size_bytes == 3 * size == sum(map(len, result.chunks))
    assert (result.high_watermark, result.log_start_offset, result.last_stable_offset) == (20, 0, 20)
    everything = partition_log.read(0, 10**6)
    assert base_offsets(everything.chunks) == list(range(0, 20, 2))  # across segments


def test_read_starts_with_the_batch_containing_the_offset(ten_batches) -> None:
    partition_log, size = ten_batches
    assert base_offsets(partition_log.read(7, size * 2).chunks) == [6, 8]
    assert base_offsets(partition_log.read(19, 10**6).chunks) == [18]


def test_kip74_min_one_returns_an_oversized_first_batch(ten_batches) -> None:
    partition_log, size = ten_batches
    assert base_offsets(partition_log.read(4, 10).chunks) == [4]
    empty = partition_log.read(4, 10, min_one=False)
    assert empty.chunks == []
    assert empty.size_bytes == 0
    assert base_offsets(partition_log.read(4, size + 1).chunks) == [4]


def test_read_stops_below_upper_offset(ten_batches) -> None:
    partition_log, _ = ten_batches
    assert base_offsets(partition_log.read(0, 10**6, upper_offset=6).chunks) == [0, 2, 4]
    assert base_offsets(partition_log.read(0, 10**6, upper_offset=5).chunks) == [0, 2, 4]
    assert partition_log.read(6, 10**6, upper_offset=6).chunks == []


def test_read_at_log_end_is_empty_and_outside_the_log_is_out_of_range(ten_batches) -> None:
    partition_log, _ = ten_batches
    assert partition_log.read(20, 10**6).chunks == []
    with pytest.raises(OffsetOutOfRangeError):
        partition_log.read(21, 10**6)
    partition_log.delete_records(5)
    with pytest.raises(OffsetOutOfRangeError):
        partition_log.read(4, 10**6)
    assert base_offsets(partition_log.read(5, 10**6).chunks)[0] == 4  # batch containing 5


def test_read_of_a_large_batch_is_one_chunk(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path)
    big = make_batch(1, value_size=1_000_000)
    partition_log.append(make_batch(1), 1)
    partition_log.append(big, 1)
    result = partition_log.read(1, 1_048_576)
    assert len(result.chunks) == 1
    assert result.chunks[0][8:] == big[8:]


# --- timestamps -------------------------------------------------------------------------------------


def test_offset_for_timestamp_finds_the_first_record_reaching_it(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path, segment_bytes=300)
    # Batch max timestamps 100, 300, 200, 400, 400, 500, 250; each batch's first record is 50 older.
    for timestamp in (100, 300, 200, 400, 400, 500, 250):
        partition_log.append(make_batch(2, timestamps_ms=[timestamp - 50, timestamp]), 1)
    assert partition_log.segment_count > 1
    assert partition_log.offset_for_timestamp(0) == (0, 50)
    assert partition_log.offset_for_timestamp(100) == (1, 100)
    assert partition_log.offset_for_timestamp(150) == (2, 250)  # batch 4-5 (max 200) comes later
    assert partition_log.offset_for_timestamp(275) == (3, 300)
    assert partition_log.offset_for_timestamp(301) == (6, 350)
    assert partition_log.offset_for_timestamp(450) == (10, 450)
    assert partition_log.offset_for_timestamp(501) is None


def test_offset_for_timestamp_in_log_append_time_batches(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    partition_log.append(make_batch(3, timestamps_ms=[1, 2, 3]), 1_000)
    partition_log.append(make_batch(3, timestamps_ms=[1, 2, 3]), 2_000)
    assert partition_log.offset_for_timestamp(1_500) == (3, 2_000)


def test_offset_for_timestamp_respects_the_log_start(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path)
    for timestamp in (500, 300, 400):
        partition_log.append(make_batch(2, timestamp_ms=timestamp), 1)
    partition_log.delete_records(3)  # inside the 2nd batch, same segment
    assert partition_log.offset_for_timestamp(200) == (3, 300)
    partition_log.delete_records(4)
    assert partition_log.offset_for_timestamp(350) == (4, 400)
    assert partition_log.offset_for_timestamp(450) is None


# --- rolling ----------------------------------------------------------------------------------------


def test_segment_rolls_by_size(tmp_path: Path) -> None:
    size = len(make_batch(2))
    partition_log = open_log(tmp_path, segment_bytes=size * 3)
    for _ in range(7):
        partition_log.append(make_batch(2), 1)
    assert partition_log.segment_base_offsets() == [0, 6, 12]
    files = sorted(p.name for p in (tmp_path / "topic-0").iterdir() if p.suffix == ".log")
    assert files == [f"{b:020d}.log" for b in (0, 6, 12)]


def test_batch_larger_than_segment_bytes_gets_its_own_segment(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path, segment_bytes=100)
    for _ in range(3):
        partition_log.append(make_batch(1, value_size=200), 1)
    assert partition_log.segment_base_offsets() == [0, 1, 2]


def test_segment_rolls_by_time_since_first_append(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path, segment_ms=1_000)
    partition_log.append(make_batch(1), 10_000)
    partition_log.append(make_batch(1), 11_000)
    assert partition_log.segment_count == 1
    partition_log.append(make_batch(1), 11_001)
    assert partition_log.segment_base_offsets() == [0, 2]
    partition_log.append(make_batch(1), 12_000)
    assert partition_log.segment_base_offsets() == [0, 2]


# --- retention and DeleteRecords --------------------------------------------------------------------


def test_retention_by_time_uses_segment_max_timestamp(tmp_path: Path) -> None:
    size = len(make_batch(1))
    partition_log = open_log(tmp_path, segment_bytes=size * 2, retention_ms=1_000)
    for timestamp in (100, 200, 300, 900, 2_000, 2_100):
        partition_log.append(make_batch(1, timestamp_ms=timestamp), timestamp)
    assert partition_log.segment_base_offsets() == [0, 2, 4]
    assert partition_log.apply_retention(1_250) == 1  # segment 0 (max 200) is older than 1000 ms
    assert (partition_log.log_start_offset, partition_log.segment_base_offsets()) == (2, [2, 4])
    assert partition_log.apply_retention(1_000_000) == 1  # never the active segment
    assert partition_log.segment_base_offsets() == [4]
    assert partition_log.log_start_offset == 4
    assert not (tmp_path / "topic-0" / f"{0:020d}.log").exists()
    with pytest.raises(OffsetOutOfRangeError):
        partition_log.read(3, 100)


def test_retention_by_size_keeps_at_least_retention_bytes(tmp_path: Path) -> None:
    size = len(make_batch(1))
    partition_log = open_log(tmp_path, segment_bytes=size * 2, retention_bytes=size * 3)
    for _ in range(7):
        partition_log.append(make_batch(1), 1)
    assert partition_log.segment_base_offsets() == [0, 2, 4, 6]
    assert partition_log.apply_retention(1) == 2  # 7 batches -> 5 -> 3; dropping more would go below
    assert partition_log.segment_base_offsets() == [4, 6]
    assert partition_log.size_bytes == size * 3


def test_infinite_retention_and_compact_policy_delete_nothing(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path, segment_bytes=100, retention_ms=-1)
    for _ in range(4):
        partition_log.append(make_batch(1, timestamp_ms=1), 1)
    assert partition_log.apply_retention(10**12) == 0
    partition_log.update_config(LogConfig(segment_bytes=100, retention_ms=1, cleanup_policy="compact"))
    assert partition_log.apply_retention(10**12) == 0
    partition_log.update_config(LogConfig(segment_bytes=100, retention_ms=1, cleanup_policy="compact,delete"))
    assert partition_log.apply_retention(10**12) == 3


def test_delete_records_moves_log_start_and_deletes_whole_segments(tmp_path: Path) -> None:
    size = len(make_batch(2))
    partition_log = open_log(tmp_path, segment_bytes=size * 2)
    for _ in range(5):
        partition_log.append(make_batch(2), 1)
    assert partition_log.segment_base_offsets() == [0, 4, 8]
    assert partition_log.delete_records(3) == 3
    assert partition_log.segment_base_offsets() == [0, 4, 8]  # offset 3 still lives in segment 0
    assert partition_log.delete_records(5) == 5
    assert partition_log.segment_base_offsets() == [4, 8]
    assert partition_log.delete_records(1) == 5  # never moves backwards
    with pytest.raises(OffsetOutOfRangeError):
        partition_log.delete_records(11)
    assert partition_log.delete_records(-1) == 10
    assert partition_log.segment_base_offsets() == [8]  # the active segment stays
    assert partition_log.read(10, 100).chunks == []
    partition_log.close()
    assert open_log(tmp_path, segment_bytes=size * 2).log_start_offset == 10  # persisted


def test_appends_continue_after_everything_was_deleted(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path, segment_bytes=100)
    partition_log.append(make_batch(1, value_size=200), 1)
    partition_log.append(make_batch(1, value_size=200), 1)
    partition_log.delete_records(-1)
    assert partition_log.append(make_batch(1), 1).base_offset == 2
    assert partition_log.append(make_batch(1), 1).log_start_offset == 2


# --- misc -------------------------------------------------------------------------------------------


def test_topic_and_partition_come_from_the_directory_name(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path, name="my-dashed-topic-12")
    assert (partition_log.topic, partition_log.partition) == ("my-dashed-topic", 12)
    assert parse_partition_dir_name("a-0") == ("a", 0)
    with pytest.raises(ValueError, match=r"'nopartition' is not a <topic>-<partition> directory name"):
        parse_partition_dir_name("nopartition")


def test_flush_messages_one_means_flush_on_ack(tmp_path: Path) -> None:
    assert not open_log(tmp_path, name="a-0").needs_flush_on_ack()
    partition_log = open_log(tmp_path, name="b-0", flush_messages=1)
    assert partition_log.needs_flush_on_ack()
    partition_log.append(make_batch(1), 1)
    partition_log.flush()
    assert not partition_log._segments[-1].log_dirty


def test_flush_messages_n_makes_a_flush_due_every_n_messages(tmp_path: Path) -> None:
    """The append itself never fsyncs (it may run on the broker's event loop); it makes the
    flush due, and the broker runs it on a disk thread."""
    partition_log = open_log(tmp_path, flush_messages=5)
    partition_log.append(make_batch(3), 1)
    assert partition_log._segments[-1].log_dirty
    assert not partition_log.wants_flush()
    partition_log.append(make_batch(2), 1)
    assert partition_log._segments[-1].log_dirty
    assert partition_log.wants_flush()
    partition_log.flush()
    assert not partition_log._segments[-1].log_dirty
    assert not partition_log.wants_flush()


def test_client_control_batches_are_rejected(tmp_path) -> None:
    """Only the broker writes transaction markers; a client-sent control batch is INVALID_RECORD."""
    from oncestream.errors import InvalidRecordError
    from oncestream.log.config import LogConfig
    from oncestream.log.partition_log import PartitionLog
    from oncestream.protocol.markers import CONTROL_COMMIT
    from oncestream.protocol.records import encode_control_batch

    log = PartitionLog.open(tmp_path / "t-0", LogConfig(), 0)
    marker = encode_control_batch(marker=CONTROL_COMMIT, producer_id=1, producer_epoch=0, coordinator_epoch=0, now_ms=1)
    with pytest.raises(InvalidRecordError):
        log.append(marker, 1)
    assert log.log_end_offset == 0
    assert log.append(marker, 1, from_client=False).base_offset == 0
    log.close()


def test_offset_for_max_timestamp_is_the_first_record_with_the_largest_timestamp(tmp_path) -> None:
    """KIP-734: ListOffsets MAX_TIMESTAMP answers the first record carrying the largest timestamp."""
    from oncestream.log.config import LogConfig
    from oncestream.log.partition_log import PartitionLog
    from oncestream.protocol.records import NewRecord, encode_batch

    log = PartitionLog.open(tmp_path / "t-0", LogConfig(), 0)
    assert log.offset_for_max_timestamp() is None
    log.append(encode_batch([NewRecord(b"a", timestamp_ms=100), NewRecord(b"b", timestamp_ms=900)], now_ms=1), 1)
    log.append(encode_batch([NewRecord(b"c", timestamp_ms=900), NewRecord(b"d", timestamp_ms=300)], now_ms=1), 1)
    assert log.offset_for_max_timestamp() == (1, 900)
    log.close()
