"""The log cleaner's side of a partition log: when to clean, the plan, installing the result.

Split from ``partition_log`` to keep that module about appends, reads and retention;
``PartitionLog`` inherits it. The rules (what a clean keeps, tombstones, transactions) and the
crash-safe swap protocol are in ``compaction``; this class takes the plan on the log's thread
(paths and file identities of sealed, immutable segments, no descriptors), and installs the cleaned segments back on
it, discarding a result whose plan no longer holds (retention, DeleteRecords or a config change
got there first).
"""

from __future__ import annotations

import logging
import pathlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from oncestream.durable_files import fsync_directory
from oncestream.errors import LogInvariantError, StorageError
from oncestream.log import compaction
from oncestream.log.config import LogConfig
from oncestream.log.descriptors import SegmentDescriptors
from oncestream.log.producer_state import ProducerStateManager
from oncestream.log.recovery import Checkpoint, CheckpointFile
from oncestream.log.segment import Segment
from oncestream.log.txn_index import TxnIndex, TxnIndexes

log = logging.getLogger(__name__)


@dataclass(slots=True)
class SwapCommit:
    """The commit point of an installed clean, for any thread (the broker: its disk threads).

    ``run`` checks the ``.cleaned`` files are still there and writes the manifest durably (temp
    file, fsync, rename, directory fsync): from its rename on, the next open redoes the swap. The
    log's thread serves the old segments meanwhile and does not delete the planned ones (see
    ``CleanableLog._delete_oldest_segments``), so the committed manifest always describes the log.
    A failure before the rename removes the ``.cleaned`` files and the temp file (nothing was
    committed); after it the swap may be committed, so everything stays for the next open.
    """

    result: compaction.CleanedResult
    directory: pathlib.Path
    manifest: compaction.SwapManifest | None  # None: the clean changed no file (nothing to commit)
    renamed: bool = False  # the manifest's rename happened: the swap may be committed

    def run(self, fsync: Callable[[int], None] | None = None) -> None:
        """Write the manifest; StorageError if the disk fails (other errors pass unchanged)."""
        if self.manifest is None:
            return
        manifest = self.manifest

        def rename(source: pathlib.Path, target: pathlib.Path) -> None:
            compaction._rename(source, target)  # looked up now: tests stop the swap there
            self.renamed = True

        try:
            for group in self.result.groups:
                for path in compaction.cleaned_paths(self.directory, group.base_offset):
                    if not path.exists():
                        raise StorageError(f"cleaned file {path} disappeared before the swap")
            compaction.write_manifest(self.directory, manifest, rename=rename, fsync=fsync)
        except BaseException as exc:
            if not self.renamed:
                compaction.delete_cleaned_files(self.result)
                (self.directory / (compaction.MANIFEST_FILE + ".tmp")).unlink(missing_ok=True)
            if isinstance(exc, OSError):
                raise StorageError(f"cannot commit compaction of {self.directory}: {exc}") from exc
            raise


@dataclass(slots=True)
class SwapTail:
    """The durable end of an installed clean, for any thread (the broker: its disk threads).

    The same order as when it ran on the log's thread, so the same crash safety: the files of
    the replaced segments that no cleaned segment took over are removed (their descriptors were
    closed on the log's thread, which no longer serves them), the directory is fsynced, then the
    checkpoint carrying the new cleaned offset is written, then the manifest is removed (offset
    gaps are legal only below a durable cleaned offset, and while the manifest exists the next
    open redoes the swap). The checkpoint is written only if the log's thread has not written a
    newer one meanwhile (which carries this cleaned offset too); then the manifest is left for
    ``finish_install_cleaned``, which writes the checkpoint again first.
    """

    plan: compaction.CompactionPlan
    directory: pathlib.Path
    manifest: compaction.SwapManifest | None  # None: no file was swapped (nothing to sync or remove)
    checkpoint_file: CheckpointFile
    checkpoint: Checkpoint
    since_version: int
    written: bool = False

    @property
    def swapped(self) -> bool:
        """Whether files were renamed: a directory to sync and a manifest to remove."""
        return self.manifest is not None

    def run(self, fsync: Callable[[int], None] | None = None) -> None:
        """The removals and fsyncs; StorageError if the disk fails."""
        try:
            if self.manifest is not None:
                compaction.remove_replaced_files(self.directory, self.manifest)
                fsync_directory(self.directory, fsync=fsync)
            self.written = self.checkpoint_file.write_unless_changed(self.checkpoint, self.since_version, fsync)
            if self.written and self.manifest is not None:
                compaction.finish_swap(self.directory, fsync=fsync)
        except OSError as exc:
            raise StorageError(f"cannot finish the compaction swap of {self.directory}: {exc}") from exc


class CleanableLog:
    """Compaction methods of ``PartitionLog`` (the fields below are set by its constructor)."""

    directory: pathlib.Path
    config: LogConfig
    _segments: list[Segment]
    _producers: ProducerStateManager
    _txn_indexes: TxnIndexes
    _descriptors: SegmentDescriptors
    _size_bytes: int
    _closed: bool
    _offline_reason: str | None
    _cleaned_offset: int
    _tombstone_horizon_ms: int
    _cleaning: compaction.CompactionPlan | None
    _cleaning_segments: list[Segment]
    _committing: bool
    _checkpoint_file: CheckpointFile
    _recovery_point: int

    if TYPE_CHECKING:  # PartitionLog's, declared for the type checker only

        @property
        def last_stable_offset(self) -> int: ...

        def _write_checkpoint(self) -> None: ...

        def _checkpoint(self, recovery_point: int) -> Checkpoint: ...

        def _assert_invariants(self) -> None: ...

    def compaction_candidate(self, now_ms: int) -> compaction.CompactionCandidate | None:
        """How dirty this log is, or None if it is not to be cleaned now.

        None unless cleanup.policy contains ``compact`` and either the dirty ratio reaches
        min.cleanable.dirty.ratio or a kept tombstone's delete horizon has passed; also None while
        a plan of this log is being built.
        """
        if self._closed or self._offline_reason is not None or self._cleaning is not None:
            return None
        if not self.config.compacts:
            return None
        return compaction.evaluate_candidate(
            self._segments,
            cleaned_offset=self._cleaned_offset,
            last_stable_offset=self.last_stable_offset,
            tombstone_horizon_ms=self._tombstone_horizon_ms,
            min_compaction_lag_ms=self.config.min_compaction_lag_ms,
            min_cleanable_dirty_ratio=self.config.min_cleanable_dirty_ratio,
            now_ms=now_ms,
        )

    def compaction_plan(
        self, now_ms: int, *, max_map_bytes: int = compaction.DEFAULT_MAX_MAP_BYTES
    ) -> compaction.CompactionPlan | None:
        """Snapshot what a clean would rewrite (None if ``compaction_candidate`` says no).

        The plan names the sealed segments below the first uncleanable offset by path and file
        identity and holds no descriptor, so a log of thousands of segments stays under the
        broker's open-files bound; ``compaction.build_cleaned`` (any thread) opens them one at a
        time. Hand the result to ``install_cleaned``, or give the plan back with
        ``cancel_compaction``. One plan at a time.
        """
        candidate = self.compaction_candidate(now_ms)
        if candidate is None:
            return None
        planned = [s for s in self._segments if s.base_offset < candidate.first_uncleanable_offset]
        if not (planned and self._segments[-1] not in planned):
            raise LogInvariantError("the active segment is never cleaned")
        try:
            snapshots = [
                compaction.SegmentSnapshot.of_file(segment.base_offset, segment.next_offset, segment.size_bytes,
                                                   segment.log_path)
                for segment in planned
            ]
        except OSError as exc:
            raise StorageError(f"cannot plan compaction of {self.directory}: {exc}") from exc
        plan = compaction.CompactionPlan(
            directory=self.directory,
            segments=tuple(snapshots),
            first_dirty_offset=candidate.first_dirty_offset,
            end_offset=candidate.first_uncleanable_offset,
            producer_last_offsets={
                pid: entry.last_offset for pid, entry in self._producers.entries.items() if entry.batches
            },
            aborted_txns={
                s.base_offset: self._txn_indexes.get(s.base_offset).entries
                for s in planned
                if s.base_offset in self._txn_indexes
            },
            aborted_data=compaction.AbortedData(
                self._txn_indexes.overlapping(planned[0].base_offset, planned[0].base_offset,
                                              candidate.first_uncleanable_offset)
            ),
            now_ms=now_ms,
            delete_retention_ms=self.config.delete_retention_ms,
            segment_bytes=self.config.segment_bytes,
            index_interval_bytes=self.config.index_interval_bytes,
            max_map_bytes=max_map_bytes,
        )
        self._cleaning = plan
        self._cleaning_segments = planned
        return plan

    def cancel_compaction(self, plan: compaction.CompactionPlan) -> None:
        """Give back a plan that will not be installed (the build failed, was cancelled or went
        stale, or installing it failed before taking it). Idempotent; a plan already taken or
        replaced by another one is left alone."""
        if self._cleaning is plan:
            self._cleaning = None
            self._cleaning_segments = []

    def _plan_still_valid(self, result: compaction.CleanedResult) -> bool:
        if self._closed or self._offline_reason is not None or self._cleaning is not result.plan:
            return False
        if not self.config.compacts:
            return False  # cleanup.policy changed meanwhile
        cleaned = [s for s in self._cleaning_segments if s.base_offset < result.cleaned_offset]
        # Retention or DeleteRecords deleting a planned segment, or anything else replacing one,
        # shows up here; appends only add segments after them.
        current = self._segments[: len(cleaned)]
        return len(self._segments) > len(cleaned) and all(a is b for a, b in zip(current, cleaned))

    def install_cleaned(self, result: compaction.CleanedResult, now_ms: int) -> bool:
        """Swap the cleaned segments in (crash-safely), or discard them if the plan went stale.

        Returns False if discarded (the ``.cleaned`` files are then removed). StorageError if the
        disk fails: before the commit point nothing changed; after it the log goes offline until
        the next open, which finishes the swap. All on the calling thread; the broker splits it
        (``begin_install_cleaned``) to run the manifest write and the tail's fsyncs off its loop.
        """
        commit = self.begin_install_cleaned(result, now_ms)
        if commit is None:
            return False
        try:
            commit.run()
        except BaseException as exc:
            self.fail_commit_cleaned(commit, exc)
            raise
        tail = self.apply_install_cleaned(commit, now_ms)
        if tail is None:
            return False
        try:
            tail.run()
        except BaseException as exc:
            self.fail_install_cleaned(tail, exc)
            raise
        self.finish_install_cleaned(tail)
        return True

    def begin_install_cleaned(self, result: compaction.CleanedResult, now_ms: int) -> SwapCommit | None:
        """Step 1 of the install, on the log's thread: None if the plan no longer holds (the
        result is discarded, as ``install_cleaned``); else the returned commit (the manifest
        write) is to ``run`` on any thread, then ``apply_install_cleaned`` (or
        ``fail_commit_cleaned``) here. Until then the log serves its old segments and keeps the
        planned ones from retention and DeleteRecords, so the manifest, once durable, still
        describes the log; no new plan is taken until ``finish_install_cleaned``."""
        if not self._plan_still_valid(result):
            if self._cleaning is result.plan:
                self._cleaning = None
                self._cleaning_segments = []
            compaction.delete_cleaned_files(result)
            log.info("%s: discarding a compaction whose plan no longer holds", self.directory)
            return None
        self._committing = True  # self._cleaning stays set: see the docstring
        manifest = compaction.SwapManifest.for_result(result) if result.groups else None
        return SwapCommit(result, self.directory, manifest)

    def fail_commit_cleaned(self, commit: SwapCommit, exc: BaseException) -> None:
        """``commit.run()`` failed. Before its rename nothing was committed (it removed its
        files) and the log carries on; after it the swap may be committed, so the log goes
        offline until the next open finishes it."""
        self._committing = False
        if self._cleaning is commit.result.plan:
            self._cleaning = None
            self._cleaning_segments = []
        if commit.renamed and not self._closed:
            self._offline_reason = f"compaction commit failed after its manifest rename: {exc}"
            log.error("%s: %s; the log is offline until restarted", self.directory, self._offline_reason)

    def apply_install_cleaned(self, commit: SwapCommit, now_ms: int) -> SwapTail | None:
        """Step 2, on the log's thread once ``commit.run()`` returned: the cleaned segments are
        renamed in and serve reads from now on; the returned tail (removal of the merged-away
        segments, directory fsync, checkpoint, manifest removal) is to ``run`` on any thread,
        then ``finish_install_cleaned`` (or ``fail_install_cleaned``) here. None if the log was
        closed or went offline meanwhile: the committed manifest is then finished by the next
        open."""
        self._committing = False
        result = commit.result
        if self._closed or self._offline_reason is not None:
            if self._cleaning is result.plan:
                self._cleaning = None
                self._cleaning_segments = []
            return None
        self._cleaning_segments = []
        if commit.manifest is None:
            # Nothing changed on disk, but the range is clean now.
            self._cleaned_offset = max(self._cleaned_offset, result.cleaned_offset)
            self._tombstone_horizon_ms = result.tombstone_horizon_ms
            return self._swap_tail(result, None)
        try:
            self._apply_swap(result, commit.manifest, now_ms)
        except BaseException as exc:
            self._cleaning = None
            self._offline_reason = f"compaction swap failed after its commit point: {exc}"
            log.error("%s: %s; the log is offline until restarted", self.directory, self._offline_reason)
            raise StorageError(f"{self.directory}: {self._offline_reason}") from exc
        log.info("%s: %s", self.directory, compaction.describe(result))
        return self._swap_tail(result, commit.manifest)

    def _swap_held(self, segment: Segment) -> bool:
        """Whether ``segment`` is named by a manifest being committed (it may not go yet)."""
        return self._committing and any(segment is planned for planned in self._cleaning_segments)

    def _swap_tail(self, result: compaction.CleanedResult, manifest: compaction.SwapManifest | None) -> SwapTail:
        return SwapTail(result.plan, self.directory, manifest, self._checkpoint_file,
                        self._checkpoint(self._recovery_point), self._checkpoint_file.version)

    def finish_install_cleaned(self, tail: SwapTail) -> None:
        """Back on the log's thread after ``tail.run()`` returned: the clean is complete."""
        if self._cleaning is tail.plan:
            self._cleaning = None
        if self._closed:
            return  # a manifest left behind is finished by the next open
        if not tail.written:
            # The log's thread wrote the checkpoint meanwhile (with this clean's cleaned offset)
            # and may have failed: write it once more before the manifest goes.
            self._write_checkpoint()
            if tail.swapped:
                compaction.finish_swap(self.directory)

    def fail_install_cleaned(self, tail: SwapTail, exc: BaseException) -> None:
        """``tail.run()`` failed after the commit point: offline until the next open finishes
        the swap (as when the swap itself fails)."""
        if self._cleaning is tail.plan:
            self._cleaning = None
        if not self._closed and tail.swapped:
            self._offline_reason = f"compaction swap failed after its commit point: {exc}"
            log.error("%s: %s; the log is offline until restarted", self.directory, self._offline_reason)

    def _apply_swap(self, result: compaction.CleanedResult, manifest: compaction.SwapManifest, now_ms: int) -> None:
        # The renames stay on the log's thread: a reader reopening a segment by path (the
        # descriptor cache may have closed it) must find the file that matches the segment in
        # memory, so the files switch in the same step as the segment list. The merged-away
        # segments' files and the directory fsync are the tail's (SwapTail); until it ends the
        # manifest is on disk, so a crash redoes all of it before any segment is opened.
        compaction.rename_cleaned_files(self.directory, manifest)
        replaced = set(manifest.replaced_bases)
        by_group = {group.base_offset: group for group in result.groups}
        old_by_base = {s.base_offset: s for s in self._segments if s.base_offset in replaced}
        segments: list[Segment] = []
        for segment in self._segments:
            if segment.base_offset not in replaced:
                segments.append(segment)
                continue
            group = by_group.get(segment.base_offset)
            if group is None:
                continue  # merged into the segment of an earlier group
            new_segment, truncated_bytes = Segment.open(
                self.directory,
                group.base_offset,
                now_ms,
                recover=False,
                index_interval_bytes=self.config.index_interval_bytes,
                compacted_below=result.cleaned_offset,
            )
            new_segment.use_descriptor_cache(self._descriptors)
            if truncated_bytes or new_segment.size_bytes != group.size_bytes:
                raise StorageError(f"cleaned segment {group.base_offset} does not match what was written")
            # Retention's fallback clock for batches without timestamps must not restart.
            new_segment.last_append_ms = max(old_by_base[b].last_append_ms for b in group.replaced_bases)
            segments.append(new_segment)
        for base_offset in replaced:
            old_by_base[base_offset].release()  # their files are gone or replaced already
            if base_offset in by_group:
                index = TxnIndex.load(self.directory, base_offset)  # the merged one just renamed in
                if index is None:
                    raise StorageError(f"cleaned segment {base_offset} has no valid aborted-transaction index")
                self._txn_indexes.put(index)
            else:
                self._txn_indexes.drop(base_offset, unlink=False)  # the tail removes its file
        self._segments = segments
        self._size_bytes = sum(segment.size_bytes for segment in segments)
        self._cleaned_offset = max(self._cleaned_offset, result.cleaned_offset)
        self._tombstone_horizon_ms = result.tombstone_horizon_ms
        self._assert_invariants()
