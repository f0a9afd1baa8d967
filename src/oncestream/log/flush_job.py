"""One fsync round of a partition log, split so that the slow part can run off the event loop.

A flush has three steps:

1. ``PartitionLog.begin_flush()`` on the thread that owns the log (the broker's event loop): it
   hands buffered index entries to the OS, takes a duplicate of the descriptor of every file
   written since the last flush, and clears the dirty marks. Nothing here waits on the disk.
2. ``FlushJob.run()`` on any thread: ``fdatasync`` of every descriptor; ``fsync`` of the
   directory when a file was created or renamed in it; the producer snapshot a segment roll left
   to write (after the aborted-transaction indexes it vouches for are durable); last, if the job
   made every sealed segment durable, the checkpoint with the new recovery point (unless the
   owner wrote a newer one meanwhile, see ``recovery.CheckpointFile``). It touches no structure
   of the log, only its own duplicated descriptors and those files, so the loop may append, roll
   or delete segments meanwhile; a duplicate keeps a deleted file's inode alive until the job
   closes it.
3. ``PartitionLog.finish_flush(job)`` back on the owner's thread: advance the recovery point in
   memory. ``fail_flush(job, error)`` instead takes the log offline: after a failed fsync the
   kernel may have dropped the dirty pages, so nothing written since can be trusted until a
   restart recovers the log (as Kafka takes a log directory offline on an IOException).

Ordering: everything a job covers was written before ``begin_flush``; anything written later sets
the dirty marks again and is covered by the next job. Two jobs of one log must not overlap: the
second would find the marks cleared by the first and finish before the first's fsyncs are done.
The broker's flusher (broker/flusher.py) therefore runs at most one job per log at a time.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from oncestream.durable_files import fsync_directory
from oncestream.errors import StorageError
from oncestream.log.producer_state import PendingSnapshot
from oncestream.log.recovery import Checkpoint, CheckpointFile

# The fsync calls, injectable so a test can observe or delay them.
FdatasyncFn = Callable[[int], None]


@dataclass(eq=False)  # jobs are told apart by identity (PartitionLog keeps a list of them)
class FlushJob:
    """The fsyncs of one flush round: duplicated descriptors, and the directory if it changed."""

    descriptors: list[tuple[int, str]]  # (duplicated fd, path for error messages)
    directory: Path | None
    recovery_point: int  # every segment below it is durable once the job has run
    # Written after the fsyncs, oldest first: recovery trusts what precedes them. One per roll on
    # a tiered topic (each sealed segment's snapshot is copied with it), else only the newest.
    snapshots: tuple[PendingSnapshot, ...] = ()
    # (file, checkpoint carrying ``recovery_point``, version it was taken at): written last
    checkpoint: tuple[CheckpointFile, Checkpoint, int] | None = None
    fdatasync: FdatasyncFn | None = None  # None: os.fdatasync
    fsync: FdatasyncFn | None = None  # the directory's (None: os.fsync)
    done: bool = field(default=False, init=False)
    # Set by a failed run, read by the log's owner (PartitionLog.close: a failure it was not told
    # of yet must not end in a clean-shutdown marker).
    error: StorageError | None = field(default=None, init=False)

    def run(self) -> None:
        """fsync everything the job covers; StorageError if any fsync fails. Safe on any thread;
        runs once (its descriptors are closed at the end, whatever happens)."""
        if self.done:
            raise StorageError("a flush job runs once")
        self.done = True
        try:
            for fd, path in self.descriptors:
                try:
                    (os.fdatasync if self.fdatasync is None else self.fdatasync)(fd)
                except OSError as exc:
                    self.error = StorageError(f"fsync of {path} failed: {exc}")
                    raise self.error from exc
            if self.directory is not None:
                try:
                    fsync_directory(self.directory, fsync=self.fsync)
                except OSError as exc:
                    self.error = StorageError(f"fsync of {self.directory} failed: {exc}")
                    raise self.error from exc
            try:
                for snapshot in self.snapshots:
                    snapshot.write(self.fsync)
                if self.checkpoint is not None:
                    checkpoint_file, checkpoint, version = self.checkpoint
                    checkpoint_file.write_unless_changed(checkpoint, version, self.fsync)
            except StorageError as exc:
                self.error = exc
                raise
        finally:
            self.release()

    def release(self) -> None:
        """Close the duplicated descriptors (a job that will never run)."""
        descriptors, self.descriptors = self.descriptors, []
        for fd, _ in descriptors:
            os.close(fd)
