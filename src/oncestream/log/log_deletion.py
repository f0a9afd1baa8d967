"""Deleting a partition log's oldest segments: retention, DeleteRecords, and tiered storage's
local retention and remote-retention log start.

``LogDeletion`` is one of ``PartitionLog``'s collaborators (see ``log_state``): it works on the
log's segments, producers and positions, which it is given, and keeps the log start, the local
log start and the recovery point consistent with the segments that remain. ``PartitionLog``
hands it the topic config, the high watermark and the LSO.

- retention.ms / retention.bytes delete whole segments from the oldest (never the active one)
  and move the log start with them; on a tiered topic (remote.storage.enable) neither applies
  here: the RemoteLogManager owns both retentions.
- A log start moved by DeleteRecords or by remote retention (``move_log_start``) is made durable
  in the checkpoint (``log_start.LogStartMove``) before the segments wholly below it go.
- Local retention of a tiered log (``begin_tiered_local``, ``log_start.LocalStartMove``,
  ``finish_tiered_local``) deletes copied segments and moves only the local log start (written
  durably first), so the offsets stay readable remotely.

The deleted segments' files wait in the segment list for ``take_file_removal``.
"""

from __future__ import annotations

import logging
import pathlib

from oncestream.errors import OffsetOutOfRangeError
from oncestream.log.config import LogConfig
from oncestream.log.local_tiering import locally_expired_count
from oncestream.log.log_cleaning import LogCleaning
from oncestream.log.log_start import LocalStartMove, LogStartMove
from oncestream.log.log_state import LogPositions
from oncestream.log.producer_state import ProducerStateManager
from oncestream.log.segment import Segment
from oncestream.log.segment_list import DeletePredicate, SegmentList

log = logging.getLogger("oncestream.log.partition_log")  # the messages keep the log's logger name


class LogDeletion:
    """The deletion rules of one log over its segments, producers and positions."""

    def __init__(
        self,
        directory: pathlib.Path,
        segments: SegmentList,
        producers: ProducerStateManager,
        positions: LogPositions,
        cleaning: LogCleaning,
    ) -> None:
        self.directory = directory
        self._segments = segments
        self._producers = producers
        self._positions = positions
        self._cleaning = cleaning

    def move_log_start(self, offset: int, high_watermark: int) -> LogStartMove | None:
        """Move the log start to ``offset`` in memory (reads below it are refused from now on);
        None if it does not move, else the checkpoint write to ``run``, then ``finish_move``.
        OffsetOutOfRangeError outside [0, high watermark]."""
        if offset < 0 or offset > high_watermark:
            raise OffsetOutOfRangeError(f"cannot delete records before {offset}: high watermark is {high_watermark}")
        positions = self._positions
        if offset <= positions.log_start_offset:
            return None
        positions.move_log_start(offset)
        return LogStartMove(checkpoint_file=positions.file, checkpoint=positions.checkpoint(),
                            since_version=positions.file.version, log_start_offset=offset)

    def finish_move(self, move: LogStartMove) -> None:
        """Once ``move`` ran: delete the segments wholly below the log start it made durable
        (not below a later one that may not be durable yet)."""
        if not move.written:
            self._positions.write()  # rare: a concurrent write may have failed (see LogStartMove)
        self.delete_oldest(lambda segment, next_segment: next_segment.base_offset <= move.log_start_offset)

    def apply_retention(self, config: LogConfig, now_ms: int) -> int:
        """retention.ms and retention.bytes (not on a tiered topic), then the segments wholly
        below the log start; returns how many segments went."""
        deleted = 0
        tiered = config.remote_storage_enable
        if config.deletes_by_retention and config.retention_ms >= 0 and not tiered:
            deleted += self.delete_oldest(lambda segment, _: now_ms - segment.retention_timestamp_ms > config.retention_ms)
        if config.deletes_by_retention and config.retention_bytes >= 0 and not tiered:
            excess_bytes = self._segments.size_bytes - config.retention_bytes

            def over_size(segment: Segment, _: Segment) -> bool:
                nonlocal excess_bytes
                if excess_bytes - segment.size_bytes < 0:
                    return False
                excess_bytes -= segment.size_bytes
                return True

            deleted += self.delete_oldest(over_size)
        # DeleteRecords may have moved the log start beyond whole segments since the last check.
        log_start_offset = self._positions.log_start_offset
        deleted += self.delete_oldest(
            lambda _, next_segment: next_segment.base_offset <= log_start_offset, moves_log_start=not tiered
        )
        return deleted

    def delete_oldest(self, predicate: DeletePredicate, *, moves_log_start: bool = True) -> int:
        """Delete segments from the oldest while ``predicate(segment, next_segment)`` holds.
        The local log start follows the first segment left, and the log start too unless
        ``moves_log_start`` is false (a tiered log: remote storage still serves the offsets)."""
        # A segment named by a manifest being committed stays until the swap is applied.
        deleted = self._segments.delete_oldest(predicate, held=self._cleaning.holds)
        positions = self._positions
        if deleted:
            first_base = self._segments[0].base_offset
            if moves_log_start:
                positions.move_log_start(first_base)
            positions.local_log_start_offset = max(positions.local_log_start_offset, first_base)
            positions.recovery_point = max(positions.recovery_point, first_base)
            log.info("%s: deleted %d segment(s); log start %d", self.directory, deleted, positions.log_start_offset)
        self._segments.check(positions.log_start_offset, positions.cleaned_offset, positions.local_log_start_offset)
        return deleted

    def begin_tiered_local(self, config: LogConfig, copied_last_offset: int, last_stable_offset: int,
                           now_ms: int) -> LocalStartMove | None:
        """Local retention of a tiered log over its copied segments (``local_tiering``): move the
        local log start past the segments that go, in memory; None if none goes. The returned
        move's checkpoint must be durable (``run``) before ``finish_tiered_local`` deletes them."""
        segments = self._segments
        count = locally_expired_count(
            segments.segments, config, copied_last_offset=copied_last_offset,
            last_stable_offset=last_stable_offset, now_ms=now_ms, held=self._cleaning.holds,
        )
        if count == 0:
            return None
        positions = self._positions
        positions.local_log_start_offset = max(positions.local_log_start_offset, segments[count].base_offset)
        return LocalStartMove(checkpoint_file=positions.file, checkpoint=positions.checkpoint(),
                              since_version=positions.file.version,
                              local_log_start_offset=positions.local_log_start_offset)

    def finish_tiered_local(self, move: LocalStartMove) -> int:
        """Once ``move`` ran: delete the local segments wholly below the local log start it made
        durable, with the producer snapshots taken below it; returns how many segments went."""
        if not move.written:
            self._positions.write()  # rare: a concurrent write may have failed (see LogStartMove)
        deleted = self.delete_oldest(
            lambda _, next_segment: next_segment.base_offset <= move.local_log_start_offset, moves_log_start=False
        )
        # Kafka deletes a segment's producer snapshot with the segment; the one at the new local
        # start stays (the newest snapshots serve recovery).
        positions = self._positions
        self._segments.doom_files(self._producers.snapshot_paths_below(positions.local_log_start_offset))
        log.info(
            "%s: deleted %d tiered segment(s) locally; local log start %d, log start %d",
            self.directory, deleted, positions.local_log_start_offset, positions.log_start_offset,
        )
        return deleted
