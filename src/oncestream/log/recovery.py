"""Opening a partition log after a clean shutdown or a crash (sans-io, synchronous).

Order of work when a log directory is opened (``recover_log``):

1. An interrupted compaction swap is finished, or an uncommitted one's ``.cleaned`` files are
   dropped (see ``compaction``); leftover ``.tmp`` files and indexes without a ``.log`` go.
2. Segments are opened oldest first. Without the clean-shutdown marker every segment that may
   hold data written after the recovery point (always the active one) is scanned batch by batch,
   truncated at the first torn or corrupt batch, and its indexes are rebuilt; other segments have
   their indexes validated (and rebuilt if missing or wrong). A hole in the offsets that
   compaction did not make, or a truncated segment with later ones after it, drops everything
   from there on: nothing past it could be served with contiguous offsets.
3. Producer state (open transactions included) is loaded from the newest snapshot and completed
   by replaying the batches after it, markers decoded (``recover_producer_and_txn_state``).
   Segments whose data may have been cut by crash recovery (``scanned``) and segments whose
   ``.txnindex`` is missing or damaged get their index rebuilt by that replay. Index entries for
   markers below the snapshot offset are trusted from the existing file of a scanned segment: the
   file was fsynced before the snapshot was written. A segment whose file is unusable needs the
   replay to start at or before the segment, from an older snapshot, or from the oldest segment
   when there is none.
4. The clean-shutdown marker is removed (durably): until then a crash would pass for a clean
   shutdown.

The checkpoint (``partition.checkpoint``: log start offset, recovery point, the cleaner's cleaned
offset and tombstone horizon, and for a tiered log the local log start; JSON, replaced atomically)
is read and written here too. A log whose checkpointed local start is above its log start
(tiered storage holds the offsets between) keeps its log start on open; any other log's start is
clamped up to its first segment.
"""

from __future__ import annotations

import json
import logging
import pathlib
import struct
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from oncestream.durable_files import (
    TMP_SUFFIX,
    fsync_directory,
    write_file_atomically,
)
from oncestream.errors import LogInvariantError, OnceStreamError, StorageError
from oncestream.log import compaction
from oncestream.log.descriptors import SegmentDescriptors
from oncestream.log.producer_state import ProducerStateManager
from oncestream.log.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    Segment,
    offsets_follow,
    parse_offset_file_name,
)
from oncestream.log.transactions import ControlMarker, read_control_marker
from oncestream.log.txn_index import TXN_INDEX_SUFFIX, AbortedTxn, TxnIndex, TxnIndexes
from oncestream.protocol.record_batch import BatchHeader

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".clean_shutdown"
CHECKPOINT_FILE = "partition.checkpoint"


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """What ``partition.checkpoint`` holds."""

    log_start_offset: int = 0
    recovery_point: int = 0  # segments at or after the one holding it are scanned after a crash
    cleaned_offset: int = 0  # offsets below it were compacted; only there may offsets have gaps
    tombstone_horizon_ms: int = compaction.NO_HORIZON
    # First offset on local disk: above the log start only once tiered segments were deleted
    # locally (the offsets between are in remote storage). Never below the log start.
    local_log_start_offset: int = 0

    @property
    def tiered(self) -> bool:
        """Whether offsets below the local start are served from remote storage."""
        return self.local_log_start_offset > self.log_start_offset


def read_checkpoint(directory: pathlib.Path) -> Checkpoint:
    """The checkpoint file's values; all zero (no horizon) if absent or bad."""
    try:
        data = json.loads((directory / CHECKPOINT_FILE).read_text())
        log_start, recovery_point = int(data["log_start_offset"]), int(data["recovery_point"])
        # Written only once a log was compacted: older checkpoints lack them.
        cleaned_offset = int(data.get("cleaned_offset", 0))
        horizon_ms = int(data.get("tombstone_horizon_ms", compaction.NO_HORIZON))
        # Written only for tiered logs whose local start moved past the log start.
        local_start = int(data.get("local_log_start_offset", log_start))
    except FileNotFoundError:
        return Checkpoint()
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        log.warning("%s: ignoring unreadable %s", directory, CHECKPOINT_FILE)
        return Checkpoint()
    log_start = max(log_start, 0)
    return Checkpoint(
        log_start, max(recovery_point, 0), max(cleaned_offset, 0), horizon_ms, max(local_start, log_start)
    )


def write_checkpoint(
    directory: pathlib.Path, checkpoint: Checkpoint, *, fsync: Callable[[int], None] | None = None
) -> None:
    """Replace the checkpoint atomically and durably; StorageError on failure."""
    fields = {"log_start_offset": checkpoint.log_start_offset, "recovery_point": checkpoint.recovery_point}
    if checkpoint.cleaned_offset or checkpoint.tombstone_horizon_ms != compaction.NO_HORIZON:
        fields["cleaned_offset"] = checkpoint.cleaned_offset
        fields["tombstone_horizon_ms"] = checkpoint.tombstone_horizon_ms
    if checkpoint.tiered:
        fields["local_log_start_offset"] = checkpoint.local_log_start_offset
    try:
        write_file_atomically(directory / CHECKPOINT_FILE, json.dumps(fields).encode(), fsync=fsync)
    except OSError as exc:
        raise StorageError(f"cannot write {directory / CHECKPOINT_FILE}: {exc}") from exc


class CheckpointFile:
    """The checkpoint of one log, written from the log's thread and from flush jobs.

    A flush job (on a disk thread) writes the recovery point it made true, with the other fields
    as they were when the job began; it must not overwrite a newer checkpoint the log's thread
    wrote meanwhile (a DeleteRecords' log start, a clean's cleaned offset). Every write bumps a
    version under a lock, and the job writes only if the version is still the one it began
    with; otherwise it skips, and the recovery point reaches the file with the next write (until
    then a crash rescans a little more). The log's thread waits for the lock only while a job
    is writing this one small file."""

    def __init__(self, directory: pathlib.Path) -> None:
        self.directory = directory
        self._lock = threading.Lock()
        self._version = 0

    @property
    def version(self) -> int:
        return self._version

    def write(self, checkpoint: Checkpoint) -> None:
        """Write ``checkpoint`` now (the log's thread)."""
        with self._lock:
            self._version += 1
            write_checkpoint(self.directory, checkpoint)

    def write_unless_changed(
        self, checkpoint: Checkpoint, since_version: int, fsync: Callable[[int], None] | None = None
    ) -> bool:
        """Write ``checkpoint`` unless anything was written since ``since_version`` (a flush
        job, any thread); whether it was written."""
        with self._lock:
            if self._version != since_version:
                return False
            self._version += 1
            write_checkpoint(self.directory, checkpoint, fsync=fsync)
            return True


@dataclass(slots=True)
class RecoveredLog:
    """What ``recover_log`` found: the segments (the last one active) and the offsets."""

    segments: list[Segment]
    log_start_offset: int
    recovery_point: int
    cleaned_offset: int
    tombstone_horizon_ms: int
    directory_dirty: bool  # a file was created or deleted: the next flush fsyncs the directory
    local_log_start_offset: int  # >= log_start_offset; above it only for a tiered log


def recover_log(
    directory: pathlib.Path,
    *,
    index_interval_bytes: int,
    producers: ProducerStateManager,
    txn_indexes: TxnIndexes,
    descriptors: SegmentDescriptors,
    now_ms: int,
) -> RecoveredLog:
    """Open and, after a crash, repair the log in ``directory`` (see the module docstring).

    Fills ``producers`` and ``txn_indexes``. On an exception every segment opened so far is
    released again."""
    marker = directory / CLEAN_SHUTDOWN_FILE
    clean = marker.exists()
    checkpoint = _recover_interrupted_clean(directory, read_checkpoint(directory))
    segments: list[Segment] = []
    directory_dirty = False
    try:
        bases = _list_segment_files(directory)
        for position, base_offset in enumerate(bases):
            next_base = bases[position + 1] if position + 1 < len(bases) else None
            # After a crash, anything at or beyond the recovery point may be torn or lost.
            recover = not clean and (next_base is None or next_base > checkpoint.recovery_point)
            segment, truncated_bytes = Segment.open(
                directory,
                base_offset,
                now_ms,
                recover=recover,
                index_interval_bytes=index_interval_bytes,
                compacted_below=checkpoint.cleaned_offset,
            )
            # Every file goes through the cache at once, so that opening a log of thousands of
            # segments never holds more files open than it allows.
            segment.seal(descriptors)
            if segments and not offsets_follow(segments[-1].next_offset, segment.base_offset, checkpoint.cleaned_offset):
                # A hole in the offsets that compaction did not make (a lost or truncated file
                # before this one): nothing from here on can be served with contiguous offsets.
                log.error(
                    "%s: segment %d does not follow offset %d; dropping it and later segments",
                    directory, base_offset, segments[-1].next_offset,
                )
                segment.delete()
                _delete_segment_files(directory, txn_indexes, bases[position + 1 :])
                directory_dirty = True
                break
            segments.append(segment)
            if truncated_bytes and next_base is not None:
                log.error("%s: dropping segments after truncated segment %d", directory, base_offset)
                _delete_segment_files(directory, txn_indexes, bases[position + 1 :])
                directory_dirty = True
                break
        if not segments:
            first_local = max(checkpoint.log_start_offset, checkpoint.local_log_start_offset, 0)
            segments.append(Segment.create(directory, first_local, now_ms))
            segments[-1].use_descriptor_cache(descriptors)
            directory_dirty = True
        log_end_offset = segments[-1].next_offset
        local_log_start_offset = min(
            max(checkpoint.log_start_offset, checkpoint.local_log_start_offset, segments[0].base_offset),
            log_end_offset,
        )
        # A tiered log keeps its log start below the local segments (the offsets between are in
        # remote storage); any other log's start is clamped into its segments.
        log_start_offset = (
            min(checkpoint.log_start_offset, local_log_start_offset) if checkpoint.tiered else local_log_start_offset
        )
        recovery_point = log_end_offset if clean else min(checkpoint.recovery_point, log_end_offset)
        # After a crash every segment holding data past the recovery point was scanned: its data
        # may have lost a tail, or its (never fsynced) txn index entries, so the index of each is
        # re-derived by the replay.
        scanned: set[int] = set()
        if not clean:
            scanned = {s.base_offset for s in segments if s.next_offset > recovery_point}
            scanned.add(segments[-1].base_offset)
        recover_producer_and_txn_state(producers, segments, txn_indexes, scanned=scanned, now_ms=now_ms)
        if clean:
            # Until the marker is gone for good, a crash would be mistaken for a clean shutdown.
            marker.unlink()
            fsync_directory(directory)
    except BaseException:
        for segment in segments:
            segment.release()
        raise
    return RecoveredLog(
        segments, log_start_offset, recovery_point, checkpoint.cleaned_offset, checkpoint.tombstone_horizon_ms,
        directory_dirty, local_log_start_offset,
    )


def _recover_interrupted_clean(directory: pathlib.Path, checkpoint: Checkpoint) -> Checkpoint:
    """Finish a committed compaction swap, drop uncommitted cleaned files (see ``compaction``)."""
    manifest = compaction.read_manifest(directory)
    if manifest is not None:
        log.warning("%s: finishing an interrupted compaction swap", directory)
        compaction.apply_swap_files(directory, manifest)
        checkpoint = Checkpoint(
            checkpoint.log_start_offset,
            checkpoint.recovery_point,
            max(checkpoint.cleaned_offset, manifest.cleaned_offset),
            manifest.tombstone_horizon_ms,
            checkpoint.local_log_start_offset,
        )
        # The cleaned offset must be durable before the manifest that carries it goes: the
        # gaps the swap made are only legal below it.
        write_checkpoint(directory, checkpoint)
        compaction.finish_swap(directory)
    removed = compaction.remove_leftover_cleaned_files(directory)
    if removed:
        log.warning("%s: removed %d file(s) of an uncommitted compaction", directory, removed)
    return checkpoint


def _list_segment_files(directory: pathlib.Path) -> list[int]:
    """Base offsets of the .log files; removes temp files and indexes without a log."""
    bases: set[int] = set()
    index_files: list[tuple[int, pathlib.Path]] = []
    for path in directory.iterdir():
        name = path.name
        if name.endswith(TMP_SUFFIX):
            path.unlink(missing_ok=True)
            continue
        base = parse_offset_file_name(name, LOG_SUFFIX)
        if base is not None:
            bases.add(base)
            continue
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            base = parse_offset_file_name(name, suffix)
            if base is not None:
                index_files.append((base, path))
    for base, path in index_files:
        if base not in bases:
            path.unlink(missing_ok=True)
    return sorted(bases)


def _delete_segment_files(directory: pathlib.Path, txn_indexes: TxnIndexes, bases: list[int]) -> None:
    for base in bases:
        for path in Segment.paths(directory, base):
            path.unlink(missing_ok=True)
        txn_indexes.drop(base)


# --- producer state and aborted-transaction indexes ------------------------------------------


def _append_time_ms(header: BatchHeader, now_ms: int) -> int:
    """The expiry clock of a replayed batch: its timestamp, capped at now."""
    return now_ms if header.max_timestamp < 0 else min(header.max_timestamp, now_ms)


def _batches_from(
    segments: Sequence[Segment], offset: int
) -> Iterator[tuple[Segment, BatchHeader, ControlMarker | None]]:
    """(segment, header, marker) of every batch with base offset >= ``offset``, oldest first."""
    for segment in segments:
        if segment.next_offset <= offset:
            continue
        for position, header in segment.batches():
            if header.base_offset < offset:
                continue
            marker = None
            if header.is_control:
                try:
                    marker = read_control_marker(segment.read(position, position + header.size_bytes))
                except (OnceStreamError, ValueError, IndexError, struct.error) as exc:
                    # It was validated when written; a batch that no longer decodes is skipped
                    # rather than failing the whole partition.
                    log.error(
                        "%s: undecodable control batch at offset %d: %s", segment.log_path, header.base_offset, exc
                    )
                    continue
            yield segment, header, marker


def replay(producers: ProducerStateManager, segments: Sequence[Segment], from_offset: int, now_ms: int) -> int:
    """Feed every batch from ``from_offset`` to ``producers``; returns how many were replayed."""
    count = 0
    for _, header, marker in _batches_from(segments, from_offset):
        producers.replay(header, _append_time_ms(header, now_ms), marker)
        count += 1
    return count


def recover_producer_and_txn_state(
    producers: ProducerStateManager,
    segments: Sequence[Segment],
    txn_indexes: TxnIndexes,
    *,
    scanned: set[int],
    now_ms: int,
) -> None:
    """Load producer state (open transactions included) and every segment's ``.txnindex``.

    ``scanned`` holds the base offsets of segments recovery scanned (their data may have lost a
    tail, so their index is re-derived from the replay past the starting snapshot).
    """
    if not segments:
        raise LogInvariantError("broken invariant: segments")
    directory = segments[0].directory
    oldest_base = segments[0].base_offset
    log_end_offset = segments[-1].next_offset
    loaded: dict[int, TxnIndex | None] = {}
    unusable: set[int] = set()  # segments whose index must be rebuilt from the segment's start
    for segment in segments:
        index = TxnIndex.load(directory, segment.base_offset)
        if index is not None and segment.base_offset not in scanned and not index.fits(segment.next_offset):
            log.warning("%s names markers outside its segment", index.path)
            index = None
        if index is None and segment.next_offset == segment.base_offset:
            # An empty segment has nothing to index (e.g. a crash right after a roll).
            index = TxnIndex.create(directory, segment.base_offset)
        loaded[segment.base_offset] = index
        if index is None:
            unusable.add(segment.base_offset)

    newest_snapshot = producers.load_latest_snapshot(log_end_offset)
    if newest_snapshot is not None and newest_snapshot < oldest_base:
        # Retention removed batches the snapshot did not cover: the state of those producers is
        # incomplete, which KIP-360 clients recover from (UNKNOWN_PRODUCER_ID / new epoch).
        log.warning("%s: producer snapshot %d is below the oldest segment", directory, newest_snapshot)
    rebuild = scanned | unusable
    if not rebuild:
        start = newest_snapshot if newest_snapshot is not None else oldest_base
        replay(producers, segments, start, now_ms)
        for index in loaded.values():
            if index is None:
                raise LogInvariantError("broken invariant: index is not None")
            txn_indexes.put(index)
        return

    start_snapshot = newest_snapshot
    if unusable and (newest_snapshot is None or newest_snapshot > min(unusable)):
        start_snapshot = producers.load_snapshot_at_or_below(min(unusable))
    start = start_snapshot if start_snapshot is not None else oldest_base
    # State is exact only if nothing before the replay start is missing; otherwise a transaction
    # opened in a deleted segment may still be open, so recorded LSOs are capped at the oldest
    # segment (searches through those entries then never stop early).
    if start_snapshot is not None:
        exact = start_snapshot >= oldest_base
    else:
        exact = oldest_base == 0
    lso_cap = None if exact else oldest_base

    # Entries below ``trusted_end`` come from the existing file; the replay derives the rest.
    trusted_end: dict[int, int] = {}
    entries: dict[int, list[AbortedTxn]] = {}
    for segment in segments:
        base = segment.base_offset
        if base not in rebuild:
            continue
        index = loaded[base]
        if index is None:
            if not (start <= base):
                raise LogInvariantError("an unusable index needs the replay to start at its segment")
            trusted_end[base] = base
            entries[base] = []
        else:
            trusted_end[base] = min(max(base, start), segment.next_offset)
            entries[base] = [entry for entry in index.entries if entry.last_offset < trusted_end[base]]

    for segment, header, marker in _batches_from(segments, start):
        completed = producers.replay(header, _append_time_ms(header, now_ms), marker)
        base = segment.base_offset
        if completed is None or not completed.aborted or base not in entries:
            continue
        if completed.last_offset >= trusted_end[base]:
            entries[base].append(completed.aborted_entry(lso_cap))

    for segment in segments:
        base = segment.base_offset
        if base in entries:
            index = loaded[base]
            if index is None or list(index.entries) != entries[base]:
                log.info("%s: rebuilt the aborted-transaction index (%d entries)", segment.log_path, len(entries[base]))
                index = TxnIndex.write_new(directory, base, entries[base])
            txn_indexes.put(index)
        else:
            index = loaded[base]
            if index is None:
                raise LogInvariantError("broken invariant: index is not None")
            txn_indexes.put(index)

    if start_snapshot != newest_snapshot and newest_snapshot is not None:
        # The replay from an older point rebuilt indexes; the newest snapshot (which may know
        # producers whose batches retention deleted since) gives the current state.
        producers.load_latest_snapshot(log_end_offset)
        replay(producers, segments, newest_snapshot, now_ms)
