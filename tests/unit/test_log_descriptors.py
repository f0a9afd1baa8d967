"""Bounded file handles (issue 10 point 6): sealed segments close their files when unused, in one
LRU shared by every log of a broker, and reopen them on demand, so thousands of segments never
hold more than ``oncestream.log.max.open.segment.files`` descriptors."""

from __future__ import annotations

import os

import pytest

from oncestream.errors import InvalidConfigError
from oncestream.log.config import LogConfig
from oncestream.log.descriptors import MAX_OPEN_PROPERTY, SegmentDescriptors
from oncestream.log.partition_log import PartitionLog
from tests.support.narrow import present
from tests.support.wire import decode_batches, record_batch

SEGMENTS = 1500
MAX_OPEN = 40
# Besides the cache: per log its active segment (.log and at most its two index files and
# .txnindex), plus a snapshot or checkpoint being written at the moment of counting (none).
PER_LOG_SLACK = 4
TINY_SEGMENTS = LogConfig(segment_bytes=14)  # Kafka's minimum: every batch rolls a segment


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _values(partition_log: PartitionLog, start: int, end: int) -> list[bytes]:
    """Every value in [start, end), one batch per read: each read opens a sealed segment."""
    values: list[bytes] = []
    offset = start
    while offset < end:
        result = partition_log.read(offset, 1)  # min_one: exactly the next batch
        batches = decode_batches(b"".join(result.chunks))
        values.extend(present(value, f"value at {offset}") for offset, _, value in batches)
        offset = batches[-1][0] + 1
    return values


def test_thousands_of_segments_stay_under_the_bound_while_written_read_and_reopened(tmp_path) -> None:
    baseline = open_fds()
    bound = baseline + MAX_OPEN + 2 * PER_LOG_SLACK
    descriptors = SegmentDescriptors(MAX_OPEN)
    expected = [b"value-%d" % i for i in range(SEGMENTS)]
    first = PartitionLog.open(tmp_path / "a-0", TINY_SEGMENTS, 0, descriptors=descriptors)
    other = PartitionLog.open(tmp_path / "b-0", TINY_SEGMENTS, 0, descriptors=descriptors)
    peak = 0
    for i, value in enumerate(expected):
        first.append(record_batch([value], timestamp_ms=i), i)
        if i % 4 == 0:
            other.append(record_batch([value], timestamp_ms=i), i)
        if i % 50 == 0:
            peak = max(peak, open_fds())
    assert first.segment_count == SEGMENTS
    assert other.segment_count == SEGMENTS // 4
    assert peak <= bound
    assert open_fds() <= bound

    # Reading every segment of both logs in turn: each read reopens a file, the oldest one closes.
    for offset in range(0, SEGMENTS, 97):
        assert _values(first, offset, offset + 1) == [expected[offset]]
        peak = max(peak, open_fds())
        assert len(descriptors) <= MAX_OPEN
    assert _values(first, 0, SEGMENTS) == expected
    assert _values(other, 0, SEGMENTS // 4) == expected[::4]
    assert open_fds() <= bound
    assert peak <= bound
    assert descriptors.evictions > SEGMENTS  # files really were closed and reopened

    # Appends go on, and a log reopened after a close opens its thousands of segments the same way.
    first.append(record_batch([b"after"], timestamp_ms=SEGMENTS), SEGMENTS)
    first.close()
    other.close()
    assert open_fds() == baseline
    reopened = PartitionLog.open(tmp_path / "a-0", TINY_SEGMENTS, SEGMENTS, descriptors=descriptors)
    try:
        assert open_fds() <= baseline + MAX_OPEN + PER_LOG_SLACK
        assert _values(reopened, 0, SEGMENTS + 1) == [*expected, b"after"]
        assert open_fds() <= baseline + MAX_OPEN + PER_LOG_SLACK
    finally:
        reopened.close()


def test_a_crash_reopen_scans_and_still_bounds_descriptors(tmp_path) -> None:
    """Without a clean shutdown the tail is scanned (recovery) and indexes checked: the same bound."""
    descriptors = SegmentDescriptors(8)
    log = PartitionLog.open(tmp_path / "c-0", TINY_SEGMENTS, 0, descriptors=descriptors)
    for i in range(200):
        log.append(record_batch([b"v%d" % i], timestamp_ms=i), i)
    log.abandon()  # like a crash: no flush, no clean-shutdown marker
    baseline = open_fds()
    recovered = PartitionLog.open(tmp_path / "c-0", TINY_SEGMENTS, 200, descriptors=descriptors)
    try:
        assert open_fds() <= baseline + 8 + PER_LOG_SLACK
        assert _values(recovered, 0, 200) == [b"v%d" % i for i in range(200)]
    finally:
        recovered.close()


def test_the_bound_is_a_broker_property() -> None:
    assert SegmentDescriptors.from_properties({}).max_open == 256
    assert SegmentDescriptors.from_properties({MAX_OPEN_PROPERTY: "1000"}).max_open == 1000
    for bad in ("0", "many"):
        with pytest.raises(InvalidConfigError):
            SegmentDescriptors.from_properties({MAX_OPEN_PROPERTY: bad})


def test_active_segments_of_many_partitions_share_the_bound(tmp_path) -> None:
    """Not only sealed segments: a broker with more partitions than the bound keeps each
    partition's active file closed while idle and reopens it for the next append or read."""
    partitions, max_open = 300, 32
    baseline = open_fds()
    descriptors = SegmentDescriptors(max_open)
    logs = [PartitionLog.open(tmp_path / f"p-{i}", LogConfig(), 0, descriptors=descriptors) for i in range(partitions)]
    assert open_fds() <= baseline + max_open + PER_LOG_SLACK
    for round_number in range(3):
        for i, partition_log in enumerate(logs):
            partition_log.append(record_batch([b"%d-%d" % (i, round_number)], timestamp_ms=round_number), 1)
        assert open_fds() <= baseline + max_open + PER_LOG_SLACK
    for i, partition_log in enumerate(logs):
        assert _values(partition_log, 0, 3) == [b"%d-%d" % (i, r) for r in range(3)]
    assert open_fds() <= baseline + max_open + PER_LOG_SLACK
    for partition_log in logs:
        partition_log.close()
    assert open_fds() == baseline
