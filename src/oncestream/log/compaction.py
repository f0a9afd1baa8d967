"""Log compaction (cleanup.policy=compact): keep the latest record per key, in three steps.

1. ``PartitionLog.compaction_plan(now_ms)`` (on the log's thread) decides whether the log is
   worth cleaning and snapshots what to clean: the sealed segments below the first uncleanable
   offset, each by path and file identity (device, inode, size), the producers' last offsets
   and the settings. The plan holds no descriptor: a log of thousands of sealed segments must
   not open thousands of files at once (issue 10 point 6, ``descriptors``).
2. ``build_cleaned(plan)`` (any thread; it touches no log object) builds the key -> latest offset
   map over the dirty segments, rewrites every planned segment into ``*.cleaned`` files, fsyncs
   them and returns a ``CleanedResult``. It opens one planned segment at a time, and only if it
   is still the planned file; a segment deleted (retention, DeleteRecords) or replaced since the
   plan raises ``StalePlan``: the clean is abandoned, which is not a failure of the partition.
3. ``PartitionLog.install_cleaned(result, now_ms)`` (on the log's thread) checks the plan still
   holds (retention, DeleteRecords or topic deletion may have changed the log) and swaps the
   cleaned segments in crash-safely, or discards them.

What a clean keeps (Apache Kafka's rules, with this package's choices where Kafka has options):

* A record is dropped if a later record with the same key lies in the dirty part that was mapped
  (records are never compared with anything newer than the map), or if it has no key (Kafka's
  cleaner drops those too; compacted topics refuse them at append, so they only exist if the
  topic was switched from ``delete`` to ``compact``).
* Tombstones (null value) use KIP-534's delete horizon: the first clean that keeps a tombstone
  stamps its batch with horizon = clean time + delete.retention.ms (attribute bit 6, horizon in
  the base timestamp); a later clean at or after the horizon drops it. So a tombstone stays
  readable for at least delete.retention.ms after the first clean that saw it, which is the time
  a consumer has to observe the delete. A log whose earliest horizon has passed is cleanable even
  if it has no new dirty data.
* Offsets never change. A batch keeps its base offset and its last offset delta (so its last
  sequence), even when records inside it are dropped; a batch that loses every record disappears,
  leaving an offset gap readers skip. Exception: the last batch a live producer wrote is kept,
  empty if need be, so producer state (idempotent dedup of the last batch) survives a restart
  even without snapshots.
* Transactional data is cleaned like any other once decided, and only decided data is ever in a
  clean (everything below the last stable offset is): committed records supersede and are
  superseded by key as usual; records of aborted transactions (known from the ``.txnindex``
  entries, wherever their ABORT marker lies) are dropped and supersede nothing, since no
  read_committed reader ever saw them as values.
* Control batches (transaction markers) are kept, each with its ``.txnindex`` entry: a reader
  that fetched an aborted transaction's data before a clean still finds the ABORT marker that
  ends it, and a marker whose data is gone costs one small batch. A cleaned segment's
  ``.txnindex`` is the concatenation of those of the segments it replaces. (Kafka also removes
  markers whose transaction has no data left, one delete.retention.ms after a clean found them
  so; this cleaner does not yet.)
* The active segment, segments at or beyond the last stable offset, and dirty segments younger
  than min.compaction.lag.ms (by their newest timestamp) are never touched.
* A log is cleaned when dirty bytes / (clean + dirty bytes) >= min.cleanable.dirty.ratio, where
  "clean" is everything below the cleaned offset (the end of the previous clean) and "dirty" the
  sealed segments from there up to the first uncleanable offset.

Crash safety (the swap protocol; every step is idempotent):

========================  =====================================================================
state on disk             what ``PartitionLog.open`` does before it opens any segment
========================  =====================================================================
``*.cleaned`` files only  uncommitted build: the files are deleted, the old segments stay
``cleaner.swap.tmp``      uncommitted manifest write: deleted (with the ``.cleaned`` files)
``cleaner.swap`` present  committed: every ``<base>.{index,timeindex,txnindex,log}.cleaned`` left
                          is renamed over ``<base>.*``, the other replaced segments are deleted,
                          the cleaned offset goes to the checkpoint, then the manifest is removed
========================  =====================================================================

The manifest ``cleaner.swap`` (JSON, written to a temp file, fsynced, renamed, directory
fsynced) is the commit point: it names the replaced and installed segments and the new cleaned
offset. The ``.cleaned`` files and their directory entries are fsynced before it is written.
Offset gaps are legal only below the cleaned offset (segment recovery treats a gap above it as
damage), and the cleaned offset reaches the checkpoint before the manifest is removed.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from bisect import bisect_right
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from oncestream.durable_files import fsync_directory, write_file_atomically
from oncestream.errors import LogInvariantError, StorageError
from oncestream.log.batch_records import (
    RawRecord,
    delete_horizon_ms,
    iter_raw_records,
    rebuild_batch,
)
from oncestream.log.config import INT64_MAX
from oncestream.log.segment import (
    INDEX_SUFFIX,
    INT32_MAX,
    LOG_SUFFIX,
    SCAN_WINDOW_BYTES,
    TIME_INDEX_SUFFIX,
    Segment,
    offset_file_name,
)
from oncestream.log.segment_writer import SegmentWriter
from oncestream.log.txn_index import TXN_INDEX_SUFFIX, AbortedTxn
from oncestream.protocol.record_batch import (
    CURRENT_MAGIC,
    HEADER_SIZE_BYTES,
    BatchHeader,
    compute_crc,
    parse_header,
)

log = logging.getLogger(__name__)

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)

MANIFEST_FILE = "cleaner.swap"
CLEANED_SUFFIX = ".cleaned"
_MANIFEST_VERSION = 1
# Memory bound of the key -> offset map of one clean, Kafka's log.cleaner.dedupe.buffer.size
# (128 MiB). When the dirty part has more distinct keys, the clean stops at a segment boundary and
# the next clean continues from there. Kafka stores 24-byte hashes; this map keeps the keys
# themselves (no collisions), so an entry is charged its key length plus the cost of a Python dict
# slot, a bytes object and an int.
DEFAULT_MAX_MAP_BYTES = 128 * 1024 * 1024
MAP_ENTRY_OVERHEAD_BYTES = 160
NO_HORIZON = -1


class CompactionAborted(Exception):
    """The build was cancelled (broker shutdown); nothing was installed."""


class StalePlan(Exception):
    """A planned segment was deleted or replaced before the build read it; nothing was written.

    Not a failure: the log changed under the plan (retention, DeleteRecords, topic deletion) and
    the next pass plans afresh."""


class _SegmentView(Protocol):
    base_offset: int
    next_offset: int
    size_bytes: int

    @property
    def retention_timestamp_ms(self) -> int: ...


# --- deciding --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CompactionCandidate:
    """How dirty a log is and how far a clean may reach (from ``evaluate_candidate``)."""

    dirty_ratio: float
    dirty_bytes: int
    clean_bytes: int
    first_dirty_offset: int
    first_uncleanable_offset: int  # base offset of the first segment a clean must not touch
    tombstones_due: bool  # a delete horizon has passed: worth cleaning even if not dirty


def evaluate_candidate(
    segments: Sequence[_SegmentView],
    *,
    cleaned_offset: int,
    last_stable_offset: int,
    tombstone_horizon_ms: int,
    min_compaction_lag_ms: int,
    min_cleanable_dirty_ratio: float,
    now_ms: int,
) -> CompactionCandidate | None:
    """The cleanable range of a log whose segments (oldest first, active last) are ``segments``.

    None if a clean would not be worth it: no dirty bytes reaching the ratio and no tombstone
    whose horizon passed.
    """
    if not segments:
        raise LogInvariantError("a log always has an active segment")
    first_dirty = max(cleaned_offset, segments[0].base_offset)
    end_index = 0
    for index, segment in enumerate(segments[:-1]):  # never the active segment
        if segment.next_offset > last_stable_offset:
            break  # undecided transactions beyond the LSO
        if (
            min_compaction_lag_ms > 0
            and segment.base_offset >= first_dirty
            and segment.retention_timestamp_ms > now_ms - min_compaction_lag_ms
        ):
            break  # too young to compact (Kafka compares the segment's largest timestamp)
        end_index = index + 1
    first_uncleanable = segments[end_index].base_offset
    cleanable = segments[:end_index]
    dirty_bytes = sum(s.size_bytes for s in cleanable if s.base_offset >= first_dirty)
    clean_bytes = sum(s.size_bytes for s in cleanable if s.base_offset < first_dirty)
    total = dirty_bytes + clean_bytes
    ratio = dirty_bytes / total if total else 0.0
    tombstones_due = bool(cleanable) and tombstone_horizon_ms != NO_HORIZON and now_ms >= tombstone_horizon_ms
    if not ((dirty_bytes > 0 and ratio >= min_cleanable_dirty_ratio) or tombstones_due):
        return None
    return CompactionCandidate(ratio, dirty_bytes, clean_bytes, first_dirty, first_uncleanable, tombstones_due)


# --- the plan --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SegmentSnapshot:
    """A sealed segment as planned: its offsets, size, and which file it is (path and identity).

    A sealed segment's ``.log`` file is never written again, only deleted or replaced by a new
    file (a clean's swap renames over it): the same device and inode with at least the planned
    size is the same bytes. Anything else is a stale plan.
    """

    base_offset: int
    next_offset: int
    size_bytes: int
    path: Path
    device: int
    inode: int

    @classmethod
    def of_file(cls, base_offset: int, next_offset: int, size_bytes: int, path: Path) -> SegmentSnapshot:
        """Snapshot of the segment file at ``path`` (one ``stat``, no descriptor kept)."""
        status = os.stat(path)
        return cls(base_offset, next_offset, size_bytes, path, status.st_dev, status.st_ino)


class AbortedData:
    """Which transactional data batches belong to aborted transactions, from the ``.txnindex``
    entries overlapping the cleaned range: a producer's batch in [first offset, ABORT marker)."""

    def __init__(self, entries: Sequence[AbortedTxn] = ()) -> None:
        self._ranges: dict[int, list[tuple[int, int]]] = {}
        for entry in entries:
            self._ranges.setdefault(entry.producer_id, []).append((entry.first_offset, entry.last_offset))
        for ranges in self._ranges.values():
            ranges.sort()

    def holds(self, header: BatchHeader) -> bool:
        """True for a data batch of an aborted transaction (never for markers or plain data)."""
        if header.is_control or not header.is_transactional:
            return False
        ranges = self._ranges.get(header.producer_id)
        if not ranges:
            return False
        slot = bisect_right(ranges, (header.base_offset, INT64_MAX)) - 1
        return slot >= 0 and ranges[slot][0] <= header.base_offset < ranges[slot][1]


@dataclass(eq=False)
class CompactionPlan:
    """Everything ``build_cleaned`` needs, detached from the log (safe to hand to a thread)."""

    directory: Path
    segments: tuple[SegmentSnapshot, ...]  # oldest first, all below end_offset
    first_dirty_offset: int
    end_offset: int
    producer_last_offsets: Mapping[int, int]  # producer id -> last offset of its last data batch
    aborted_txns: Mapping[int, tuple[AbortedTxn, ...]]  # segment base -> its .txnindex entries
    aborted_data: AbortedData  # which transactional batches of the planned segments were aborted
    now_ms: int
    delete_retention_ms: int
    segment_bytes: int
    index_interval_bytes: int
    max_map_bytes: int = DEFAULT_MAX_MAP_BYTES
    abort: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True, slots=True)
class CleanedGroup:
    """One cleaned segment, replacing ``replaced_bases`` (the first of which is its own base)."""

    base_offset: int
    replaced_bases: tuple[int, ...]
    size_bytes: int


@dataclass(frozen=True, slots=True)
class CleaningStats:
    """What a clean did (for the log line)."""

    bytes_before: int
    bytes_after: int
    records_read: int
    records_removed: int
    batches_removed: int


@dataclass(frozen=True, slots=True)
class CleanedResult:
    """The files ``build_cleaned`` wrote and the state ``install_cleaned`` commits."""

    plan: CompactionPlan
    groups: tuple[CleanedGroup, ...]  # only groups that changed; their .cleaned files exist
    cleaned_offset: int  # everything below is clean after installing
    tombstone_horizon_ms: int  # earliest delete horizon of a kept tombstone, NO_HORIZON if none
    stats: CleaningStats


def cleaned_path(directory: Path, base_offset: int, suffix: str) -> Path:
    """Temporary name of a cleaned segment file: ``<base><suffix>.cleaned``."""
    return directory / (offset_file_name(base_offset, suffix) + CLEANED_SUFFIX)


# The files of a segment the swap replaces, in the order it renames them: the data file last.
SWAPPED_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, LOG_SUFFIX)


def cleaned_paths(directory: Path, base_offset: int) -> tuple[Path, ...]:
    """Every ``.cleaned`` file of the cleaned segment at ``base_offset`` (SWAPPED_SUFFIXES order)."""
    return tuple(cleaned_path(directory, base_offset, suffix) for suffix in SWAPPED_SUFFIXES)


def _write_txn_index(path: Path, entries: Sequence[AbortedTxn]) -> None:
    """The merged aborted-transaction index of a cleaned segment (fsynced). The cleaner keeps every
    marker, so each entry stays true; a merged segment holds the markers of all the segments it
    replaces, oldest first."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(b"".join(entry.encode() for entry in entries))
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


# --- building (worker thread) ----------------------------------------------------------------


def open_snapshot(snapshot: SegmentSnapshot) -> int:
    """A read-only descriptor of the planned segment file (caller closes it), or StalePlan if the
    file is gone or is not the planned one any more.

    Once open, the descriptor reads the planned bytes even if the file is deleted meanwhile;
    ``install_cleaned`` then sees the log changed and discards the result.
    """
    try:
        fd = os.open(snapshot.path, os.O_RDONLY | _CLOEXEC)
    except FileNotFoundError as exc:
        raise StalePlan(f"planned segment {snapshot.path} was deleted") from exc
    except OSError as exc:
        raise StorageError(f"cannot open planned segment {snapshot.path}: {exc}") from exc
    try:
        status = os.fstat(fd)
    except OSError as exc:
        os.close(fd)
        raise StorageError(f"cannot stat planned segment {snapshot.path}: {exc}") from exc
    if (status.st_dev, status.st_ino) != (snapshot.device, snapshot.inode) or status.st_size < snapshot.size_bytes:
        os.close(fd)
        raise StalePlan(f"planned segment {snapshot.path} was replaced")
    return fd


def _snapshot_batches(
    snapshot: SegmentSnapshot, abort: threading.Event
) -> Generator[tuple[BatchHeader, memoryview], None, None]:
    """Every batch of a planned segment, CRC-checked (a damaged batch is never rewritten).

    Holds the segment's descriptor only while iterating; use it under ``contextlib.closing`` so
    an exception in the consumer closes it at once.
    """
    if abort.is_set():
        raise CompactionAborted("cleaning cancelled")
    fd = open_snapshot(snapshot)
    try:
        yield from _batches_of(fd, snapshot, abort)
    finally:
        os.close(fd)


def _batches_of(fd: int, snapshot: SegmentSnapshot, abort: threading.Event) -> Iterator[tuple[BatchHeader, memoryview]]:
    end = snapshot.size_bytes
    buffer = b""
    buffer_start = position = 0
    while position < end:
        if abort.is_set():
            raise CompactionAborted("cleaning cancelled")
        relative = position - buffer_start
        if relative + HEADER_SIZE_BYTES > len(buffer):
            buffer = os.pread(fd, min(SCAN_WINDOW_BYTES, end - position), position)
            buffer_start, relative = position, 0
            if len(buffer) < HEADER_SIZE_BYTES:
                raise StorageError(f"segment {snapshot.base_offset} is shorter than planned")
        header = parse_header(buffer, relative)
        size = header.size_bytes
        if header.magic != CURRENT_MAGIC or size < HEADER_SIZE_BYTES or position + size > end:
            raise StorageError(f"segment {snapshot.base_offset} has a malformed batch at byte {position}")
        if relative + size > len(buffer):
            buffer = os.pread(fd, max(size, min(SCAN_WINDOW_BYTES, end - position)), position)
            buffer_start, relative = position, 0
            if len(buffer) < size:
                raise StorageError(f"segment {snapshot.base_offset} is shorter than planned")
        batch = memoryview(buffer)[relative : relative + size]
        if compute_crc(batch) != header.crc:
            raise StorageError(f"segment {snapshot.base_offset}: CRC32C mismatch in the batch at byte {position}")
        yield header, batch
        position += size


def _supersedes(header: BatchHeader, aborted_data: AbortedData) -> bool:
    # Markers and aborted data hide nothing (see the module docstring).
    return not header.is_control and not aborted_data.holds(header)


def map_batch_keys(header: BatchHeader, batch: bytes | memoryview, aborted_data: AbortedData,
                   staged: dict[bytes, int], known: Mapping[bytes, int]) -> int:
    """Record in ``staged`` the offset of every keyed record of the batch that can supersede
    others (not a marker, not aborted data); the map bytes its keys new to ``staged`` and
    ``known`` add. One batch's share of ``build_offset_map`` (consolidation of diskless topics
    builds its map with it too)."""
    if not _supersedes(header, aborted_data):
        return 0
    added_bytes = 0
    for record in iter_raw_records(header, batch):
        if record.key is not None:
            if record.key not in staged and record.key not in known:
                added_bytes += len(record.key) + MAP_ENTRY_OVERHEAD_BYTES
            staged[record.key] = header.base_offset + record.offset_delta
    return added_bytes


def build_offset_map(plan: CompactionPlan) -> tuple[dict[bytes, int], int]:
    """(key -> offset of its latest record, end offset) over the dirty segments of ``plan``.

    Stops at a segment boundary once the map would outgrow ``plan.max_map_bytes`` (always taking
    at least one segment, so every clean makes progress); the end offset says where it stopped.
    """
    offset_map: dict[bytes, int] = {}
    map_bytes = 0
    for snapshot in plan.segments:
        if snapshot.base_offset < plan.first_dirty_offset:
            continue
        staged: dict[bytes, int] = {}
        staged_bytes = 0
        with closing(_snapshot_batches(snapshot, plan.abort)) as batches:
            for header, batch in batches:
                staged_bytes += map_batch_keys(header, batch, plan.aborted_data, staged, offset_map)
        if offset_map and map_bytes + staged_bytes > plan.max_map_bytes:
            return offset_map, snapshot.base_offset
        offset_map.update(staged)
        map_bytes += staged_bytes
    return offset_map, plan.end_offset


def group_segments(segments: Sequence[SegmentSnapshot], max_size_bytes: int) -> list[list[SegmentSnapshot]]:
    """Consecutive segments merged while their total size fits one segment (Kafka's grouping)
    and their offsets fit the int32 relative offsets of the indexes."""
    groups: list[list[SegmentSnapshot]] = []
    current: list[SegmentSnapshot] = []
    size_bytes = 0
    for snapshot in segments:
        if current and (
            size_bytes + snapshot.size_bytes > max_size_bytes
            or snapshot.next_offset - 1 - current[0].base_offset > INT32_MAX
        ):
            groups.append(current)
            current, size_bytes = [], 0
        current.append(snapshot)
        size_bytes += snapshot.size_bytes
    if current:
        groups.append(current)
    return groups


class CleaningRules(Protocol):
    """What cleaning one batch needs to know (a ``CompactionPlan`` is one; diskless consolidation
    has its own)."""

    @property
    def aborted_data(self) -> AbortedData: ...
    @property
    def now_ms(self) -> int: ...
    @property
    def delete_retention_ms(self) -> int: ...
    @property
    def producer_last_offsets(self) -> Mapping[int, int]: ...


@dataclass(slots=True)
class CleaningCounters:
    """What the cleaning of batches removed (for ``CleaningStats``)."""

    records_read: int = 0
    records_removed: int = 0
    batches_removed: int = 0
    earliest_horizon_ms: int = NO_HORIZON

    def saw_horizon(self, horizon_ms: int) -> None:
        if self.earliest_horizon_ms == NO_HORIZON or horizon_ms < self.earliest_horizon_ms:
            self.earliest_horizon_ms = horizon_ms


def clean_batch(
    header: BatchHeader, batch: bytes | memoryview, offset_map: Mapping[bytes, int], plan: CleaningRules,
    counters: CleaningCounters,
) -> tuple[bytes | memoryview | None, bool]:
    """(what to write for this batch or None to drop it, whether it differs from the original),
    by the rules of the module docstring; ``offset_map`` is key -> offset of its latest record."""
    if header.is_control:
        return batch, False
    records = iter_raw_records(header, batch)
    if plan.aborted_data.holds(header):  # none of its records was ever a committed value
        counters.records_read += len(records)
        counters.records_removed += len(records)
        return _rebuilt_or_dropped(header, [], None, plan, counters), True
    horizon_ms = delete_horizon_ms(header)
    kept: list[RawRecord] = []
    keeps_tombstone = False
    for record in records:
        if record.key is None:
            continue  # keyless records have no place in a compacted log
        latest = offset_map.get(record.key)
        if latest is not None and header.base_offset + record.offset_delta < latest:
            continue  # superseded by a later record with the same key
        if not record.has_value:
            if horizon_ms is not None and plan.now_ms >= horizon_ms:
                continue  # a tombstone whose delete horizon has passed
            keeps_tombstone = True
        kept.append(record)
    counters.records_read += len(records)
    counters.records_removed += len(records) - len(kept)
    new_horizon_ms = None
    if keeps_tombstone:
        if horizon_ms is None:
            new_horizon_ms = plan.now_ms + plan.delete_retention_ms
            counters.saw_horizon(new_horizon_ms)
        else:
            counters.saw_horizon(horizon_ms)
    if len(kept) == len(records) and new_horizon_ms is None:
        return batch, False
    return _rebuilt_or_dropped(header, kept, new_horizon_ms, plan, counters), True


def _rebuilt_or_dropped(header: BatchHeader, kept: list[RawRecord], new_horizon_ms: int | None, plan: CleaningRules,
                        counters: CleaningCounters) -> bytes | None:
    """The batch with only ``kept``; None (dropped) when empty, unless it is the last batch of a
    live producer, which stays (empty) so producer state survives a restart."""
    producers_last = header.has_producer_id and plan.producer_last_offsets.get(header.producer_id) == header.last_offset
    if not kept and not producers_last:
        counters.batches_removed += 1
        return None
    return rebuild_batch(header, kept, new_delete_horizon_ms=new_horizon_ms)


def build_cleaned(plan: CompactionPlan) -> CleanedResult:
    """Write the cleaned segments of ``plan`` as fsynced ``*.cleaned`` files (any thread).

    Reads only the planned segment files (one open at a time) and writes only ``*.cleaned``
    files in the log directory, so it can run while the log keeps serving appends and reads. On
    any failure (CompactionAborted, StalePlan included) the files it wrote are removed before
    raising.
    """
    writers: list[SegmentWriter] = []
    try:
        offset_map, end_offset = build_offset_map(plan)
        planned = [s for s in plan.segments if s.base_offset < end_offset]
        counters = CleaningCounters()
        groups: list[CleanedGroup] = []
        bytes_before = bytes_after = 0
        for group in group_segments(planned, plan.segment_bytes):
            base_offset = group[0].base_offset
            writer = SegmentWriter(
                cleaned_path(plan.directory, base_offset, LOG_SUFFIX),
                cleaned_path(plan.directory, base_offset, INDEX_SUFFIX),
                cleaned_path(plan.directory, base_offset, TIME_INDEX_SUFFIX),
                base_offset,
                plan.index_interval_bytes,
            )
            writers.append(writer)
            changed = len(group) > 1  # merging segments is a change even if every batch stays
            for snapshot in group:
                bytes_before += snapshot.size_bytes
                with closing(_snapshot_batches(snapshot, plan.abort)) as batches:
                    for header, batch in batches:
                        output, batch_changed = clean_batch(header, batch, offset_map, plan, counters)
                        changed = changed or batch_changed
                        if output is not None:
                            writer.append(output, header if output is batch else parse_header(output))
            writer.finish()
            bytes_after += writer.size_bytes
            if changed:
                _write_txn_index(
                    cleaned_path(plan.directory, base_offset, TXN_INDEX_SUFFIX),
                    [entry for s in group for entry in plan.aborted_txns.get(s.base_offset, ())],
                )
                groups.append(CleanedGroup(base_offset, tuple(s.base_offset for s in group), writer.size_bytes))
            else:
                writer.abandon()  # identical to the segment on disk: nothing to swap
                writers.remove(writer)
        if groups:
            # The directory entries of the .cleaned files must be durable before the manifest
            # that names them can be.
            fsync_directory(plan.directory)
        stats = CleaningStats(
            bytes_before, bytes_after, counters.records_read, counters.records_removed, counters.batches_removed
        )
        return CleanedResult(plan, tuple(groups), end_offset, counters.earliest_horizon_ms, stats)
    except BaseException:
        for writer in writers:
            try:
                writer.abandon()
                cleaned_path(plan.directory, writer.base_offset, TXN_INDEX_SUFFIX).unlink(missing_ok=True)
            except OSError:
                log.exception("cannot remove %s", writer.paths[0])
        raise


def delete_cleaned_files(result: CleanedResult) -> None:
    """Remove the ``.cleaned`` files of a result that will not be installed."""
    for group in result.groups:
        for path in cleaned_paths(result.plan.directory, group.base_offset):
            path.unlink(missing_ok=True)


# --- the swap (log thread, and recovery) -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class SwapManifest:
    """The committed intent of one swap (the content of ``cleaner.swap``)."""

    replaced_bases: tuple[int, ...]
    installed_bases: tuple[int, ...]
    cleaned_offset: int
    tombstone_horizon_ms: int

    def __post_init__(self) -> None:
        if not (set(self.installed_bases) <= set(self.replaced_bases)):
            raise LogInvariantError("a cleaned segment replaces its own base")

    @classmethod
    def for_result(cls, result: CleanedResult) -> SwapManifest:
        replaced = tuple(base for group in result.groups for base in group.replaced_bases)
        installed = tuple(group.base_offset for group in result.groups)
        return cls(replaced, installed, result.cleaned_offset, result.tombstone_horizon_ms)

    def encode(self) -> bytes:
        return json.dumps(
            {
                "version": _MANIFEST_VERSION,
                "replaced": list(self.replaced_bases),
                "installed": list(self.installed_bases),
                "cleaned_offset": self.cleaned_offset,
                "tombstone_horizon_ms": self.tombstone_horizon_ms,
            }
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> SwapManifest:
        """Parse a manifest; StorageError if it is not one (it is written atomically, so that is
        damage, and guessing could lose data)."""
        try:
            raw = json.loads(data)
            if raw["version"] != _MANIFEST_VERSION:
                raise ValueError(f"version {raw['version']!r}")
            manifest = cls(
                tuple(int(b) for b in raw["replaced"]),
                tuple(int(b) for b in raw["installed"]),
                int(raw["cleaned_offset"]),
                int(raw["tombstone_horizon_ms"]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise StorageError(f"unreadable compaction manifest: {exc}") from exc
        return manifest


# Every file-system change of the swap goes through these two, so tests can stop the swap at
# any one of them and check that recovery finishes it.
def _rename(source: Path, target: Path) -> None:
    os.replace(source, target)


def _remove(path: Path) -> None:
    path.unlink(missing_ok=True)


def write_manifest(directory: Path, manifest: SwapManifest, *, rename: Callable[[Path, Path], None] | None = None,
                   fsync: Callable[[int], None] | None = None) -> None:
    """Commit a swap: write ``cleaner.swap`` durably (temp file, fsync, rename, directory fsync).
    ``rename`` (default ``_rename``) and ``fsync`` (default ``os.fsync``) let a caller observe
    those steps (the install's commit job, a test's held disk)."""
    write_file_atomically(directory / MANIFEST_FILE, manifest.encode(), rename=rename or _rename, fsync=fsync)


def read_manifest(directory: Path) -> SwapManifest | None:
    """The committed but maybe unfinished swap of ``directory``, if there is one."""
    try:
        data = (directory / MANIFEST_FILE).read_bytes()
    except FileNotFoundError:
        return None
    return SwapManifest.decode(data)


def apply_swap_files(directory: Path, manifest: SwapManifest, *, sync_directory: bool = True) -> None:
    """Put the cleaned files in place and delete the segments they replace (idempotent).
    ``sync_directory=False`` leaves the directory fsync to the caller."""
    rename_cleaned_files(directory, manifest)
    remove_replaced_files(directory, manifest)
    if sync_directory:
        fsync_directory(directory)


def rename_cleaned_files(directory: Path, manifest: SwapManifest) -> None:
    """The first half of ``apply_swap_files``: every ``.cleaned`` file left over its segment."""
    for base_offset in manifest.installed_bases:
        # Indexes first and the data file last; a crash in between leaves old data with new
        # indexes only while the manifest exists, and recovery finishes this loop before any
        # segment is opened.
        for suffix in SWAPPED_SUFFIXES:
            source = cleaned_path(directory, base_offset, suffix)
            if source.exists():
                _rename(source, directory / offset_file_name(base_offset, suffix))


def remove_replaced_files(directory: Path, manifest: SwapManifest) -> None:
    """The second half of ``apply_swap_files``: the files of the replaced segments that no
    cleaned segment took over (merged into an earlier one). Only after the renames: a crash in
    between must still find the merged data in a cleaned file or under its old name."""
    installed = set(manifest.installed_bases)
    for base_offset in manifest.replaced_bases:
        if base_offset not in installed:
            for path in Segment.paths(directory, base_offset):  # .log first
                _remove(path)
            _remove(directory / offset_file_name(base_offset, TXN_INDEX_SUFFIX))


def finish_swap(directory: Path, *, fsync: Callable[[int], None] | None = None) -> None:
    """The last step, once the cleaned offset is in the checkpoint: drop the manifest."""
    _remove(directory / MANIFEST_FILE)
    fsync_directory(directory, fsync=fsync)


def remove_leftover_cleaned_files(directory: Path) -> int:
    """Delete ``*.cleaned`` files of builds that were never committed; returns how many."""
    removed = 0
    for path in directory.iterdir():
        if path.name.endswith(CLEANED_SUFFIX):
            path.unlink(missing_ok=True)
            removed += 1
    return removed


def describe(result: CleanedResult) -> str:
    """One line about a finished clean."""
    stats = result.stats
    return (
        f"cleaned {sum(len(g.replaced_bases) for g in result.groups)} changed segment(s) below offset {result.cleaned_offset}: "
        f"{stats.bytes_before} -> {stats.bytes_after} bytes, {stats.records_removed}/{stats.records_read} "
        f"records and {stats.batches_removed} batches removed"
    )

