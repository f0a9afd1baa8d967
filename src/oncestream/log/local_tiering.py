"""The local side of tiered storage (KIP-405): which sealed segments may be copied, and which
copied ones local retention lets go.

Pure functions over a log's segment list (oldest first), used by
:class:`~oncestream.log.partition_log.PartitionLog`; the remote package (``oncestream.remote``)
copies the segments and keeps their metadata, and this module never imports it.

* :func:`tierable_segments`: sealed segments wholly below the LSO and the high watermark whose
  data, indexes and producer snapshot are durable (below the recovery point), as
  :class:`TierableSegment` (the paths the copier uploads).
* :func:`locally_expired_count`: how many of the oldest segments local retention
  (``local.retention.ms`` / ``local.retention.bytes``, -2 meaning ``retention.*``) deletes,
  among those already copied (wholly at or below the highest copied offset).
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from oncestream.log.config import LogConfig
from oncestream.log.segment import Segment
from oncestream.log.txn_index import TxnIndexes, txn_index_path


@dataclass(frozen=True, slots=True)
class TierableSegment:
    """A sealed local segment ready to be copied to remote storage, with the files that go."""

    base_offset: int
    last_offset: int  # inclusive: the next segment's base offset - 1
    size_bytes: int
    max_timestamp_ms: int  # -1 if no batch carried a timestamp
    log_path: pathlib.Path
    index_path: pathlib.Path
    timeindex_path: pathlib.Path
    txnindex_path: pathlib.Path | None  # None: the segment holds no aborted transaction's marker
    producer_snapshot_path: pathlib.Path | None  # snapshot at the next base offset; None if absent


def tierable_segments(
    segments: Sequence[Segment],
    txn_indexes: TxnIndexes,
    snapshot_path: Callable[[int], pathlib.Path],
    *,
    after_offset: int,
    log_start_offset: int,
    last_stable_offset: int,
    high_watermark: int,
    recovery_point: int,
) -> list[TierableSegment]:
    """The sealed segments with base offset >= ``after_offset`` that may be copied, oldest first.

    A segment qualifies when its last offset is below the LSO (no open transaction's data is
    copied, Kafka's ``candidateLogSegments``) and the high watermark, and when it lies below the
    recovery point: a flush made its files durable and wrote the producer snapshot taken when it
    rolled. Empty segments and segments wholly below the log start (DeleteRecords will remove
    them) are skipped; the walk stops at the first segment that does not qualify yet.
    """
    found: list[TierableSegment] = []
    for segment in segments[:-1]:  # the active segment is never copied
        if segment.base_offset < after_offset or segment.next_offset <= log_start_offset:
            continue
        if segment.next_offset == segment.base_offset:
            continue
        last_offset = segment.next_offset - 1
        if last_offset >= last_stable_offset or last_offset >= high_watermark or segment.next_offset > recovery_point:
            break
        directory = segment.directory
        log_path, index_path, timeindex_path = Segment.paths(directory, segment.base_offset)
        has_aborts = segment.base_offset in txn_indexes and bool(txn_indexes.get(segment.base_offset).entries)
        snapshot = snapshot_path(segment.next_offset)
        found.append(
            TierableSegment(
                base_offset=segment.base_offset,
                last_offset=last_offset,
                size_bytes=segment.size_bytes,
                max_timestamp_ms=segment.max_timestamp_ms,
                log_path=log_path,
                index_path=index_path,
                timeindex_path=timeindex_path,
                txnindex_path=txn_index_path(directory, segment.base_offset) if has_aborts else None,
                producer_snapshot_path=snapshot if snapshot.exists() else None,
            )
        )
    return found


def locally_expired_count(
    segments: Sequence[Segment],
    config: LogConfig,
    *,
    copied_last_offset: int,
    last_stable_offset: int,
    now_ms: int,
    held: Callable[[Segment], bool],
) -> int:
    """How many of the oldest segments local retention deletes (Kafka's local retention in
    ``UnifiedLog.deleteOldSegments`` for remote-enabled topics).

    Only segments wholly at or below ``copied_last_offset`` (their copy finished) and below the
    LSO are eligible, never the active one nor one ``held`` (the cleaner's); the walk stops at the
    first ineligible segment. Of those, a segment goes when its retention timestamp is older than
    ``effective_local_retention_ms`` or while the local size exceeds
    ``effective_local_retention_bytes`` by at least the segment's size (both -1: forever).

    With remote.log.copy.disable (KIP-950) nothing is copied any more, so, as in Kafka
    (``UnifiedLog.localRetentionMs/Size`` and ``isSegmentEligibleForDeletion``), local segments
    follow retention.ms / retention.bytes and need no copy to go.
    """
    copying = not config.remote_log_copy_disable
    retention_ms = config.effective_local_retention_ms if copying else config.retention_ms
    retention_bytes = config.effective_local_retention_bytes if copying else config.retention_bytes
    excess_bytes = sum(segment.size_bytes for segment in segments) - retention_bytes if retention_bytes >= 0 else -1
    count = 0
    for segment in segments[:-1]:
        uncopied = copying and segment.next_offset - 1 > copied_last_offset
        if held(segment) or uncopied or segment.next_offset > last_stable_offset:
            break
        by_time = retention_ms >= 0 and now_ms - segment.retention_timestamp_ms > retention_ms
        by_size = retention_bytes >= 0 and excess_bytes - segment.size_bytes >= 0
        if not (by_time or by_size):
            break
        excess_bytes -= segment.size_bytes
        count += 1
    return count
