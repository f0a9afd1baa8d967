"""The segments of one partition log, oldest first, with their aborted-transaction indexes.

One of ``PartitionLog``'s collaborators (see ``log_state``): it owns the segment list and what
changes with it (the byte count, the per-segment ``.txnindex`` files, the open-file cache the
sealed segments use, the files of deleted segments waiting for removal, whether the directory
needs an fsync). It knows nothing of producers, transactions or the cleaner; the log decides
when to roll and what to delete, this class does it and keeps the list consistent.
"""

from __future__ import annotations

import logging
import pathlib
from collections.abc import Callable, Iterator
from itertools import pairwise

from oncestream.errors import LogInvariantError
from oncestream.log.descriptors import SegmentDescriptors
from oncestream.log.file_removal import FileRemoval
from oncestream.log.read_path import segment_index_for
from oncestream.log.segment import PreparedBatch, Segment, offsets_follow
from oncestream.log.txn_index import AbortedTxn, TxnIndexes, txn_index_path

log = logging.getLogger(__name__)

# (segment, the segment after it) -> whether the oldest segment goes.
DeletePredicate = Callable[[Segment, Segment], bool]


class SegmentList:
    """A log's segments (the last one active) and their aborted-transaction indexes."""

    def __init__(self, directory: pathlib.Path, descriptors: SegmentDescriptors) -> None:
        self.directory = directory
        # Sealed segments close their files through this (shared by a broker's logs).
        self.descriptors = descriptors
        self.txn_indexes = TxnIndexes(directory)  # aborted transactions, per segment
        self._segments: list[Segment] = []
        self._size_bytes = 0
        self._doomed_files: list[pathlib.Path] = []  # of deleted segments, not removed yet
        self.directory_dirty = False  # a file was created or deleted since the last directory fsync

    # --- views ----------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Segment]:
        return iter(self._segments)

    def __len__(self) -> int:
        return len(self._segments)

    def __getitem__(self, index: int) -> Segment:
        return self._segments[index]

    @property
    def segments(self) -> list[Segment]:
        """The list itself, oldest first (read-only by convention: the read path walks it)."""
        return self._segments

    @property
    def active(self) -> Segment:
        """The segment appends go to."""
        return self._segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        return self._size_bytes

    def base_offsets(self) -> list[int]:
        return [segment.base_offset for segment in self._segments]

    def index_for(self, offset: int) -> int:
        """Index of the segment holding ``offset`` (see ``read_path.segment_index_for``)."""
        return segment_index_for(self._segments, offset)

    # --- changes --------------------------------------------------------------------------------

    def replace(self, segments: list[Segment]) -> None:
        """Take ``segments`` as the whole list (recovery, a compaction swap)."""
        self._segments = segments
        self._size_bytes = sum(segment.size_bytes for segment in segments)

    def append(self, prepared: list[PreparedBatch], index_interval_bytes: int, now_ms: int,
               aborted: list[AbortedTxn]) -> None:
        """Write ``prepared`` to the active segment; index the transactions its markers aborted."""
        active = self._segments[-1]
        active.append(prepared, index_interval_bytes, now_ms)
        self._size_bytes += sum(batch.size_bytes for batch in prepared)
        if aborted:
            self.txn_indexes.record_aborts(active.base_offset, aborted)

    def roll(self, now_ms: int) -> int:
        """Seal the active segment and start one at the log end; returns its base offset.

        No fsync here (the event loop may be the caller): the owner's next flush makes the sealed
        segment and its index durable."""
        active = self._segments[-1]
        active.seal(self.descriptors)
        new_base = active.next_offset
        self.txn_indexes.seal(active.base_offset)
        new_segment = Segment.create(self.directory, new_base, now_ms)
        new_segment.use_descriptor_cache(self.descriptors)
        self._segments.append(new_segment)
        self.txn_indexes.create(new_base)
        self.directory_dirty = True
        log.debug("%s: rolled to segment %d", self.directory, new_base)
        return new_base

    def delete_oldest(self, predicate: DeletePredicate, held: Callable[[Segment], bool]) -> int:
        """Delete segments from the oldest while ``predicate(segment, next_segment)`` holds and
        the segment is not ``held``; the active one never goes. Returns how many went; their
        files wait for ``take_file_removal``."""
        deleted = 0
        while len(self._segments) > 1 and not held(self._segments[0]) and predicate(self._segments[0], self._segments[1]):
            segment = self._segments.pop(0)
            self._size_bytes -= segment.size_bytes
            # Out of the list and its descriptor closed: nothing reaches the files any more, so
            # their unlinks may run later on another thread (``take_file_removal``).
            segment.release()
            self._doomed_files.extend(Segment.paths(self.directory, segment.base_offset))  # .log first
            # Aborts indexed with this segment's markers go with it (after the .log, so a crash
            # in between leaves an orphan index that the next open removes).
            self.txn_indexes.drop(segment.base_offset, unlink=False)
            self._doomed_files.append(txn_index_path(self.directory, segment.base_offset))
            self.directory_dirty = True
            deleted += 1
        return deleted

    def doom_files(self, paths: list[pathlib.Path]) -> None:
        """Remove ``paths`` with the next ``take_file_removal`` (files that went with deleted
        segments, such as a tiered log's producer snapshots)."""
        fresh = [path for path in paths if path not in self._doomed_files]
        if fresh:
            self._doomed_files.extend(fresh)
            self.directory_dirty = True

    def take_file_removal(self) -> FileRemoval | None:
        """The files of segments deleted since the last call; None if there are none."""
        if not self._doomed_files:
            return None
        doomed, self._doomed_files = self._doomed_files, []
        return FileRemoval(files=doomed)

    def move_descriptors_to(self, descriptors: SegmentDescriptors) -> None:
        self.descriptors = descriptors
        for segment in self._segments:
            segment.use_descriptor_cache(descriptors)

    def release_all(self) -> None:
        """Close every file without flushing (the log is abandoned)."""
        for segment in self._segments:
            segment.release()
        self.txn_indexes.release_all()

    def check(self, log_start_offset: int, cleaned_offset: int, local_log_start_offset: int) -> None:
        """LogInvariantError unless the list describes a log: an active segment, offsets that
        follow each other (gaps only below ``cleaned_offset``), the local log start inside the
        segments and the log start not above it (below it only for tiered storage), the byte
        count equal to the segments' sizes."""
        segments = self._segments
        if not segments:
            raise LogInvariantError("a log always has an active segment")
        for previous, current in pairwise(segments):
            if not offsets_follow(previous.next_offset, current.base_offset, cleaned_offset):
                raise LogInvariantError(
                    f"segment {current.base_offset} does not follow segment {previous.base_offset} "
                    f"(which ends before {previous.next_offset}); only compaction below {cleaned_offset} leaves gaps"
                )
        if not segments[0].base_offset <= local_log_start_offset <= self.log_end_offset:
            raise LogInvariantError(
                f"local log start offset {local_log_start_offset} is outside the segments "
                f"[{segments[0].base_offset}, {self.log_end_offset}]"
            )
        if not 0 <= log_start_offset <= local_log_start_offset:
            raise LogInvariantError(
                f"log start offset {log_start_offset} is above the local log start {local_log_start_offset}"
            )
        counted = sum(segment.size_bytes for segment in segments)
        if self._size_bytes != counted:
            raise LogInvariantError(f"the log counts {self._size_bytes} bytes but its segments hold {counted}")
