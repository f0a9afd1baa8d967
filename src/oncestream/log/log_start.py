"""DeleteRecords' durable part, split so the broker can run the fsyncs off its event loop.

``PartitionLog.begin_delete_records`` (log's thread) moves the log start in memory and returns a
``LogStartMove``; ``run`` (any thread, e.g. the broker's disk executor) makes the new log start
durable in the checkpoint; ``PartitionLog.finish_delete_records`` (log's thread) then deletes the
segments wholly below it. Crash safety is the synchronous order, unchanged: the checkpoint naming
the new log start is durable before any segment below it is deleted, so a crash in between leaves
segments that are merely unreadable (below the log start) and removed at the next DeleteRecords
or retention pass, never a log start behind data that is already gone. Remote retention moves a
tiered log's start the same way, and local retention of a tiered log its local log start
(``LocalStartMove``: the checkpoint naming it is durable before the local segments below go).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from oncestream.log.recovery import Checkpoint, CheckpointFile


@dataclass(slots=True)
class CheckpointMove:
    """A position moved in memory on the log's thread whose checkpoint is still to be written."""

    checkpoint_file: CheckpointFile
    checkpoint: Checkpoint  # the log's checkpoint as of the move
    since_version: int  # the checkpoint file's version when the move was made
    written: bool = False

    def run(self, fsync: Callable[[int], None] | None = None) -> None:
        """Write the checkpoint (any thread); StorageError if the disk fails.

        Skipped if the log's thread wrote the checkpoint since the move: that write carried the
        moved position (positions only grow) and newer other fields, which an older snapshot
        must not overwrite. The finishing step then writes once more on the log's thread, since
        the newer write may have failed.
        """
        self.written = self.checkpoint_file.write_unless_changed(self.checkpoint, self.since_version, fsync)


@dataclass(slots=True, kw_only=True)
class LogStartMove(CheckpointMove):
    """DeleteRecords (or remote retention) moved the log start; ``finish_delete_records`` then
    deletes the segments wholly below it."""

    log_start_offset: int


@dataclass(slots=True, kw_only=True)
class LocalStartMove(CheckpointMove):
    """Local retention of a tiered log moved its local log start in memory (reads below it go to
    remote storage from now on). The same three steps: ``PartitionLog.begin_delete_tiered_local_segments``
    on the log's thread, ``run`` on any thread, ``finish_delete_tiered_local_segments`` back on
    the log's thread, which deletes the local segments wholly below it."""

    local_log_start_offset: int
