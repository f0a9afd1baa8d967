"""The log cleaner's side of a partition log: when to clean, the plan, installing the result.

``LogCleaning`` is one of ``PartitionLog``'s collaborators (see ``log_state``): it holds the
cleaner's state of one log (the plan being built, the segments it names, whether its manifest is
being committed) and works on the log's segments, producers and positions, which it is given;
``PartitionLog``'s compaction methods hand it the topic config and the last stable offset.

The rules (what a clean keeps, tombstones, transactions) and the crash-safe swap protocol are in
``compaction``; this class takes the plan on the log's thread (paths and file identities of
sealed, immutable segments, no descriptors), and installs the cleaned segments back on it,
discarding a result whose plan no longer holds (retention, DeleteRecords or a config change got
there first).
"""

from __future__ import annotations

import logging
import pathlib
from collections.abc import Callable
from dataclasses import dataclass

from oncestream.durable_files import fsync_directory
from oncestream.errors import LogInvariantError, StorageError
from oncestream.log import compaction
from oncestream.log.config import LogConfig
from oncestream.log.log_state import LogPositions, LogStatus
from oncestream.log.producer_state import ProducerStateManager
from oncestream.log.recovery import Checkpoint, CheckpointFile
from oncestream.log.segment import Segment
from oncestream.log.segment_list import SegmentList
from oncestream.log.txn_index import TxnIndex

log = logging.getLogger(__name__)


@dataclass(slots=True)
class SwapCommit:
    """The commit point of an installed clean, for any thread (the broker: its disk threads).

    ``run`` checks the ``.cleaned`` files are still there and writes the manifest durably (temp
    file, fsync, rename, directory fsync): from its rename on, the next open redoes the swap. The
    log's thread serves the old segments meanwhile and does not delete the planned ones (see
    ``LogCleaning.holds``), so the committed manifest always describes the log.
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


class LogCleaning:
    """The cleaner's state of one partition log and the steps that change it.

    Public through ``PartitionLog``'s compaction methods (``compaction_plan``, ``install_cleaned``
    and the split install steps), which pass the topic config and the last stable offset.
    """

    def __init__(self, directory: pathlib.Path, segments: SegmentList, producers: ProducerStateManager,
                 positions: LogPositions, status: LogStatus) -> None:
        self.directory = directory
        self._segments = segments
        self._producers = producers
        self._positions = positions
        self._status = status
        self._plan: compaction.CompactionPlan | None = None  # planned, not yet installed
        self._planned: list[Segment] = []  # the segments the plan names
        self._committing = False  # the plan's manifest is being written: its segments stay

    def holds(self, segment: Segment) -> bool:
        """Whether ``segment`` is named by a manifest being committed (it may not go yet: the
        manifest, once durable, must describe the log; a later pass deletes it)."""
        return self._committing and any(segment is planned for planned in self._planned)

    def _forget(self, plan: compaction.CompactionPlan) -> None:
        if self._plan is plan:
            self._plan = None
            self._planned = []

    def candidate(self, config: LogConfig, last_stable_offset: int, now_ms: int) -> compaction.CompactionCandidate | None:
        """How dirty the log is, or None if it is not to be cleaned now (see
        ``PartitionLog.compaction_candidate``)."""
        if not self._status.serving or self._plan is not None:
            return None
        if not config.compacts:
            return None
        return compaction.evaluate_candidate(
            self._segments.segments,
            cleaned_offset=self._positions.cleaned_offset,
            last_stable_offset=last_stable_offset,
            tombstone_horizon_ms=self._positions.tombstone_horizon_ms,
            min_compaction_lag_ms=config.min_compaction_lag_ms,
            min_cleanable_dirty_ratio=config.min_cleanable_dirty_ratio,
            now_ms=now_ms,
        )

    def plan(self, config: LogConfig, last_stable_offset: int, now_ms: int,
             max_map_bytes: int) -> compaction.CompactionPlan | None:
        """Snapshot what a clean would rewrite (see ``PartitionLog.compaction_plan``)."""
        candidate = self.candidate(config, last_stable_offset, now_ms)
        if candidate is None:
            return None
        segments = self._segments
        planned = [s for s in segments if s.base_offset < candidate.first_uncleanable_offset]
        if not planned or segments.active in planned:
            raise LogInvariantError(
                f"{self.directory}: a clean below offset {candidate.first_uncleanable_offset} would take the active segment"
            )
        try:
            snapshots = [
                compaction.SegmentSnapshot.of_file(segment.base_offset, segment.next_offset, segment.size_bytes,
                                                   segment.log_path)
                for segment in planned
            ]
        except OSError as exc:
            raise StorageError(f"cannot plan compaction of {self.directory}: {exc}") from exc
        txn_indexes = segments.txn_indexes
        plan = compaction.CompactionPlan(
            directory=self.directory,
            segments=tuple(snapshots),
            first_dirty_offset=candidate.first_dirty_offset,
            end_offset=candidate.first_uncleanable_offset,
            producer_last_offsets={
                pid: entry.last_offset for pid, entry in self._producers.entries.items() if entry.batches
            },
            aborted_txns={
                s.base_offset: txn_indexes.get(s.base_offset).entries
                for s in planned
                if s.base_offset in txn_indexes
            },
            aborted_data=compaction.AbortedData(
                txn_indexes.overlapping(planned[0].base_offset, planned[0].base_offset,
                                        candidate.first_uncleanable_offset)
            ),
            now_ms=now_ms,
            delete_retention_ms=config.delete_retention_ms,
            segment_bytes=config.segment_bytes,
            index_interval_bytes=config.index_interval_bytes,
            max_map_bytes=max_map_bytes,
        )
        self._plan = plan
        self._planned = planned
        return plan

    def cancel(self, plan: compaction.CompactionPlan) -> None:
        """Give back a plan that will not be installed (idempotent; another plan is left alone)."""
        self._forget(plan)

    def _plan_still_valid(self, config: LogConfig, result: compaction.CleanedResult) -> bool:
        if not self._status.serving or self._plan is not result.plan:
            return False
        if not config.compacts:
            return False  # cleanup.policy changed meanwhile
        cleaned = [s for s in self._planned if s.base_offset < result.cleaned_offset]
        # Retention or DeleteRecords deleting a planned segment, or anything else replacing one,
        # shows up here; appends only add segments after them.
        current = self._segments.segments[: len(cleaned)]
        return len(self._segments) > len(cleaned) and all(a is b for a, b in zip(current, cleaned))

    def install(self, config: LogConfig, result: compaction.CleanedResult, now_ms: int) -> bool:
        """Every install step on the calling thread (see ``PartitionLog.install_cleaned``)."""
        commit = self.begin_install(config, result)
        if commit is None:
            return False
        try:
            commit.run()
        except BaseException as exc:
            self.fail_commit(commit, exc)
            raise
        tail = self.apply_install(config, commit, now_ms)
        if tail is None:
            return False
        try:
            tail.run()
        except BaseException as exc:
            self.fail_install(tail, exc)
            raise
        self.finish_install(tail)
        return True

    def begin_install(self, config: LogConfig, result: compaction.CleanedResult) -> SwapCommit | None:
        """Step 1 (see ``PartitionLog.begin_install_cleaned``)."""
        if not self._plan_still_valid(config, result):
            self._forget(result.plan)
            compaction.delete_cleaned_files(result)
            log.info("%s: discarding a compaction whose plan no longer holds", self.directory)
            return None
        self._committing = True  # the plan stays set: no new plan until finish_install
        manifest = compaction.SwapManifest.for_result(result) if result.groups else None
        return SwapCommit(result, self.directory, manifest)

    def fail_commit(self, commit: SwapCommit, exc: BaseException) -> None:
        """``commit.run()`` failed (see ``PartitionLog.fail_commit_cleaned``)."""
        self._committing = False
        self._forget(commit.result.plan)
        if commit.renamed:
            self._status.take_offline(f"compaction commit failed after its manifest rename: {exc}")

    def apply_install(self, config: LogConfig, commit: SwapCommit, now_ms: int) -> SwapTail | None:
        """Step 2 (see ``PartitionLog.apply_install_cleaned``)."""
        self._committing = False
        result = commit.result
        if not self._status.serving:
            self._forget(result.plan)
            return None
        self._planned = []
        positions = self._positions
        if commit.manifest is None:
            # Nothing changed on disk, but the range is clean now.
            positions.cleaned_offset = max(positions.cleaned_offset, result.cleaned_offset)
            positions.tombstone_horizon_ms = result.tombstone_horizon_ms
            return self._swap_tail(result, None)
        try:
            self._apply_swap(config, result, commit.manifest, now_ms)
        except BaseException as exc:
            self._plan = None
            reason = f"compaction swap failed after its commit point: {exc}"
            self._status.take_offline(reason)
            raise StorageError(f"{self.directory}: {reason}") from exc
        log.info("%s: %s", self.directory, compaction.describe(result))
        return self._swap_tail(result, commit.manifest)

    def _swap_tail(self, result: compaction.CleanedResult, manifest: compaction.SwapManifest | None) -> SwapTail:
        positions = self._positions
        return SwapTail(result.plan, self.directory, manifest, positions.file, positions.checkpoint(),
                        positions.file.version)

    def finish_install(self, tail: SwapTail) -> None:
        """Back on the log's thread after ``tail.run()`` (see ``PartitionLog.finish_install_cleaned``)."""
        if self._plan is tail.plan:
            self._plan = None
        if self._status.closed:
            return  # a manifest left behind is finished by the next open
        if not tail.written:
            # The log's thread wrote the checkpoint meanwhile (with this clean's cleaned offset)
            # and may have failed: write it once more before the manifest goes.
            self._positions.write()
            if tail.swapped:
                compaction.finish_swap(self.directory)

    def fail_install(self, tail: SwapTail, exc: BaseException) -> None:
        """``tail.run()`` failed after the commit point (see ``PartitionLog.fail_install_cleaned``)."""
        if self._plan is tail.plan:
            self._plan = None
        if tail.swapped:
            self._status.take_offline(f"compaction swap failed after its commit point: {exc}")

    def _apply_swap(self, config: LogConfig, result: compaction.CleanedResult,
                    manifest: compaction.SwapManifest, now_ms: int) -> None:
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
                index_interval_bytes=config.index_interval_bytes,
                compacted_below=result.cleaned_offset,
            )
            new_segment.use_descriptor_cache(self._segments.descriptors)
            if truncated_bytes or new_segment.size_bytes != group.size_bytes:
                raise StorageError(f"cleaned segment {group.base_offset} does not match what was written")
            # Retention's fallback clock for batches without timestamps must not restart.
            new_segment.last_append_ms = max(old_by_base[b].last_append_ms for b in group.replaced_bases)
            segments.append(new_segment)
        txn_indexes = self._segments.txn_indexes
        for base_offset in replaced:
            old_by_base[base_offset].release()  # their files are gone or replaced already
            if base_offset in by_group:
                index = TxnIndex.load(self.directory, base_offset)  # the merged one just renamed in
                if index is None:
                    raise StorageError(f"cleaned segment {base_offset} has no valid aborted-transaction index")
                txn_indexes.put(index)
            else:
                txn_indexes.drop(base_offset, unlink=False)  # the tail removes its file
        self._segments.replace(segments)
        positions = self._positions
        positions.cleaned_offset = max(positions.cleaned_offset, result.cleaned_offset)
        positions.tombstone_horizon_ms = result.tombstone_horizon_ms
        self._segments.check(positions.log_start_offset, positions.cleaned_offset, positions.local_log_start_offset)
