"""A segment roll does no fsync on the caller's thread (issue 10 point 5): the sealed segment,
its aborted-transaction index and the producer snapshot taken at the roll are made durable by
the next flush job, which the broker runs on a disk thread, in the order recovery relies on
(txn index entries before the snapshot that vouches for them)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from oncestream.log.config import LogConfig
from oncestream.log.partition_log import PartitionLog
from tests.support.narrow import present
from tests.unit._batches import ATTR_TRANSACTIONAL, make_batch

PID = 4242


@pytest.fixture
def disk_calls(monkeypatch) -> list[str]:
    """Paths of every fsync/fdatasync made through ``os``, in order."""
    calls: list[str] = []
    real_fsync, real_fdatasync = os.fsync, os.fdatasync

    def recorder(real):
        def call(fd: int) -> None:
            calls.append(os.readlink(f"/proc/self/fd/{fd}"))
            real(fd)
        return call

    monkeypatch.setattr(os, "fsync", recorder(real_fsync))
    monkeypatch.setattr(os, "fdatasync", recorder(real_fdatasync))
    return calls


def test_a_roll_leaves_every_fsync_to_the_flush_job(tmp_path: Path, disk_calls: list[str]) -> None:
    partition_log = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=300), 0)
    disk_calls.clear()
    # An aborted transaction in the first segment, then enough data to roll twice.
    partition_log.append(make_batch(2, producer_id=PID, producer_epoch=0, base_sequence=0,
                                    attributes=ATTR_TRANSACTIONAL), 1)
    partition_log.append_marker(producer_id=PID, producer_epoch=0, commit=False, coordinator_epoch=0, now_ms=1)
    for _ in range(6):
        partition_log.append(make_batch(3, value_size=40), 2)
    assert partition_log.segment_count >= 3
    assert disk_calls == []  # appends and rolls: nothing waited on the disk
    assert partition_log.wants_flush()

    job = partition_log.begin_flush()
    assert job is not None
    job.run()  # the broker runs this on a disk thread
    partition_log.finish_flush(job)
    assert not partition_log.wants_flush()

    first = "00000000000000000000"
    txn_index = disk_calls.index(str(tmp_path / "t-0" / f"{first}.txnindex"))
    sealed_data = disk_calls.index(str(tmp_path / "t-0" / f"{first}.log"))
    snapshot_tmp = [i for i, path in enumerate(disk_calls) if path.endswith(".snapshot.tmp")]
    assert len(snapshot_tmp) == 1
    assert max(txn_index, sealed_data) < snapshot_tmp[0]
    assert len(list((tmp_path / "t-0").glob("*.snapshot"))) == 1

    # A crash now: the sealed segments are below the recovery point and the snapshot is used.
    partition_log.abandon()
    reopened = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=300), 3)
    try:
        assert reopened.read(0, 1 << 20, with_aborted=True).aborted_transactions == [(PID, 0)]
    finally:
        reopened.close()


def test_the_flush_job_writes_the_advanced_recovery_point_but_never_over_a_newer_checkpoint(
    tmp_path: Path, disk_calls: list[str],
) -> None:
    """The checkpoint after a roll is written by the job (off the loop), after the fsyncs that
    make its recovery point true; a checkpoint the log wrote meanwhile (DeleteRecords) wins."""
    config = LogConfig(segment_bytes=300)
    partition_log = PartitionLog.open(tmp_path / "t-0", config, 0)
    for _ in range(6):
        partition_log.append(make_batch(3, value_size=40), 1)
    active_base = partition_log.segment_base_offsets()[-1]
    disk_calls.clear()
    job = present(partition_log.begin_flush(), "flush job")
    assert disk_calls == []  # begin_flush, on the loop, waits on nothing
    job.run()
    checkpoint_fsyncs = [i for i, path in enumerate(disk_calls) if path.endswith("partition.checkpoint.tmp")]
    data_fsyncs = [i for i, path in enumerate(disk_calls) if path.endswith(".log")]
    assert len(checkpoint_fsyncs) == 1
    assert max(data_fsyncs) < checkpoint_fsyncs[0]
    partition_log.finish_flush(job)
    assert json.loads((tmp_path / "t-0" / "partition.checkpoint").read_text())["recovery_point"] == active_base

    for _ in range(6):
        partition_log.append(make_batch(3, value_size=40), 1)
    stale = present(partition_log.begin_flush(), "flush job")
    partition_log.delete_records(3)  # the loop writes a newer checkpoint while the job is out
    stale.run()
    partition_log.finish_flush(stale)
    written = json.loads((tmp_path / "t-0" / "partition.checkpoint").read_text())
    assert written["log_start_offset"] == 3  # not overwritten by the job's older view
    assert written["recovery_point"] == active_base  # the job's advance waits for the next write
    partition_log.close()
