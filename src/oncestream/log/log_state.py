"""What the collaborators of one partition log share: whether it may serve, and its durable positions.

``PartitionLog`` is made of collaborators (its segments in ``segment_list``, its producers in
``producer_state``, its cleaning in ``log_cleaning``); each gets the two objects here instead of a
reference back to the log, so none of them re-declares the log's fields:

- ``LogStatus``: open, closed (deleted topic, shutdown) or offline (a failed fsync or a swap that
  failed after its commit point: the files no longer match the segments in memory, so every call
  fails until the next open repairs them, as Kafka takes the log directory offline).
- ``LogPositions``: the offsets ``partition.checkpoint`` keeps (log start, recovery point,
  cleaned offset, tombstone horizon, local log start) and the file that keeps them.
"""

from __future__ import annotations

import logging
import pathlib

from oncestream.errors import StorageError
from oncestream.log import compaction
from oncestream.log.recovery import Checkpoint, CheckpointFile

log = logging.getLogger(__name__)


class LogStatus:
    """Whether a log serves: open, closed, or offline with the reason (see the module docstring)."""

    def __init__(self, directory: pathlib.Path) -> None:
        self.directory = directory
        self.closed = False
        self.offline_reason: str | None = None

    @property
    def serving(self) -> bool:
        """Open and not offline."""
        return not self.closed and self.offline_reason is None

    def take_offline(self, reason: str) -> None:
        """Refuse all work from now on (no-op if closed or offline already: the first reason stays)."""
        if not self.serving:
            return
        self.offline_reason = reason
        log.error("%s: %s; the log is offline until restarted", self.directory, reason)

    def check_open(self) -> None:
        """StorageError unless the log serves."""
        if self.closed:
            raise StorageError(f"log {self.directory} is closed")
        if self.offline_reason is not None:
            raise StorageError(f"log {self.directory} is offline: {self.offline_reason}")


class LogPositions:
    """The durable positions of a log and ``partition.checkpoint``, which keeps them.

    ``log_start_offset``: the first offset served (retention, DeleteRecords). ``recovery_point``:
    segments at or after the one holding it are scanned after a crash. ``cleaned_offset``: offsets
    below it were compacted (only there may offsets have gaps). ``tombstone_horizon_ms``: the
    earliest time a kept tombstone may go (``compaction.NO_HORIZON``: none is waiting).
    ``local_log_start_offset``: the first offset on local disk; above the log start only for a
    tiered log whose oldest segments were deleted locally after being copied.
    """

    def __init__(self, directory: pathlib.Path) -> None:
        self.file = CheckpointFile(directory)
        self.log_start_offset = 0
        self.recovery_point = 0
        self.cleaned_offset = 0
        self.tombstone_horizon_ms = compaction.NO_HORIZON
        # First offset on local disk (>= log start; above it once tiered segments went locally).
        self.local_log_start_offset = 0

    def move_log_start(self, offset: int) -> None:
        """Raise the log start to ``offset`` (the local start follows: it is never below)."""
        self.log_start_offset = max(self.log_start_offset, offset)
        self.local_log_start_offset = max(self.local_log_start_offset, self.log_start_offset)

    def checkpoint(self, recovery_point: int | None = None) -> Checkpoint:
        """The checkpoint of the positions now (with another recovery point if given)."""
        return Checkpoint(
            self.log_start_offset,
            self.recovery_point if recovery_point is None else recovery_point,
            self.cleaned_offset,
            self.tombstone_horizon_ms,
            self.local_log_start_offset,
        )

    def write(self) -> None:
        """Write the checkpoint now, on the log's thread (StorageError if the disk fails)."""
        self.file.write(self.checkpoint())
