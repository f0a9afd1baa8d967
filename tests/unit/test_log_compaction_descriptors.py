"""The log cleaner and the broker-wide bound on open segment files (issue 10 point 6).

A compaction plan names its segments by path and file identity and holds no descriptor; the build
opens one planned segment at a time. So cleaning a log of thousands of sealed segments keeps the
process under ``oncestream.log.max.open.segment.files`` (plus a small constant), and a planned
segment deleted or replaced before the build reads it makes the plan stale (``StalePlan``), which
abandons the clean without writing anything.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import pytest

from oncestream.log import compaction
from oncestream.log.config import LogConfig
from oncestream.log.descriptors import SegmentDescriptors
from oncestream.log.partition_log import PartitionLog
from oncestream.protocol.records import NewRecord, decode_batches, encode_batch

T0 = 1_700_000_000_000
SEGMENTS = 2000
KEYS = 50
MAX_OPEN = 40
# Besides the cache: the log's active segment (.log, two indexes, .txnindex), as in
# test_log_descriptors.py, and the cleaner's own: one planned segment being read, the cleaned
# .log being written and one index or .txnindex file being written at that moment.
PER_LOG_SLACK = 4
CLEANER_SLACK = 3
# Kafka's minimum segment.bytes: every batch rolls a segment.
TINY_COMPACTED = LogConfig(segment_bytes=14, cleanup_policy="compact", min_cleanable_dirty_ratio=0.01)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _append(partition_log: PartitionLog, key: bytes, value: bytes) -> None:
    partition_log.append(encode_batch([NewRecord(value=value, key=key)], now_ms=T0), T0)


def _contents(partition_log: PartitionLog) -> list[tuple[bytes | None, bytes | None]]:
    records: list[tuple[bytes | None, bytes | None]] = []
    offset = partition_log.log_start_offset
    while offset < partition_log.log_end_offset:
        result = partition_log.read(offset, 1 << 20)
        batches = list(decode_batches(b"".join(result.chunks)))
        records.extend((record.key, record.value) for batch in batches for record in batch.records)
        offset = batches[-1].header.last_offset + 1
    return records


def _fill(partition_log: PartitionLog, count: int) -> dict[bytes, bytes]:
    latest = {}
    for i in range(count):
        key, value = b"key-%d" % (i % KEYS), b"value-%d" % i
        _append(partition_log, key, value)
        latest[key] = value
    return latest


def test_cleaning_thousands_of_segments_stays_under_the_descriptor_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    baseline = open_fds()
    bound = baseline + MAX_OPEN + PER_LOG_SLACK + CLEANER_SLACK
    descriptors = SegmentDescriptors(MAX_OPEN)
    partition_log = PartitionLog.open(tmp_path / "table-0", TINY_COMPACTED, T0, descriptors=descriptors)
    try:
        latest = _fill(partition_log, SEGMENTS)
        assert partition_log.segment_count == SEGMENTS
        # Cleaned segments may be larger (segment.bytes raised since), so the clean merges the
        # thousands of planned segments into one: a few renames, not thousands of fsyncs.
        partition_log.update_config(dataclasses.replace(TINY_COMPACTED, segment_bytes=1 << 20))

        plan = partition_log.compaction_plan(T0)
        assert plan is not None
        assert len(plan.segments) == SEGMENTS - 1
        assert open_fds() <= bound, "the plan holds no descriptors"

        # Count while the build runs: at every segment it opens, and again when it closes it.
        opened: list[Path] = []
        peak = 0
        real_open = compaction.open_snapshot

        def counting_open(snapshot: compaction.SegmentSnapshot) -> int:
            nonlocal peak
            fd = real_open(snapshot)
            opened.append(snapshot.path)
            peak = max(peak, open_fds())
            return fd

        monkeypatch.setattr(compaction, "open_snapshot", counting_open)
        result = compaction.build_cleaned(plan)
        assert len(set(opened)) == SEGMENTS - 1, "every planned segment was read"
        assert peak <= bound, f"{peak} descriptors open while cleaning, bound {bound}"
        assert len(result.groups) == 1
        assert len(result.groups[0].replaced_bases) == SEGMENTS - 1

        assert partition_log.install_cleaned(result, T0)
        assert open_fds() <= bound
        assert partition_log.segment_count == 2  # the cleaned one and the active one
        records = _contents(partition_log)
        # Every key's latest value survives, once, plus the active segment's last record; every
        # older value of a key is gone.
        for key, value in latest.items():
            assert records.count((key, value)) == 1, key
        assert len(records) == KEYS or (len(records) == KEYS + 1 and records[-1] in latest.items())
        assert not list(partition_log.directory.glob("*.cleaned"))
    finally:
        partition_log.close()
    assert open_fds() == baseline


def _small_log(directory: Path) -> PartitionLog:
    partition_log = PartitionLog.open(directory, TINY_COMPACTED, T0)
    _fill(partition_log, 20)
    return partition_log


def test_a_planned_segment_deleted_before_the_build_makes_the_plan_stale(tmp_path: Path) -> None:
    """DeleteRecords (or retention) removes planned segments between plan and build: the build
    raises StalePlan, writes nothing, and the log can be planned again."""
    partition_log = _small_log(tmp_path / "table-0")
    try:
        plan = partition_log.compaction_plan(T0)
        assert plan is not None
        partition_log.delete_records(plan.segments[3].base_offset)  # deletes the first three files
        with pytest.raises(compaction.StalePlan):
            compaction.build_cleaned(plan)
        assert not list(partition_log.directory.glob("*.cleaned"))
        partition_log.cancel_compaction(plan)
        assert partition_log.compaction_plan(T0) is not None
    finally:
        partition_log.close()


def test_a_planned_segment_replaced_by_another_file_makes_the_plan_stale(tmp_path: Path) -> None:
    """Same name, same bytes, different file (a new inode): not the planned segment."""
    partition_log = _small_log(tmp_path / "table-0")
    try:
        plan = partition_log.compaction_plan(T0)
        assert plan is not None
        victim = plan.segments[5].path
        shutil.copyfile(victim, victim.with_suffix(".copy"))
        os.replace(victim.with_suffix(".copy"), victim)
        with pytest.raises(compaction.StalePlan):
            compaction.build_cleaned(plan)
        assert not list(partition_log.directory.glob("*.cleaned"))
        partition_log.cancel_compaction(plan)
    finally:
        partition_log.close()
