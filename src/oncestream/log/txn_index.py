"""Aborted-transaction index of the log segments (Kafka's ``.txnindex``, KIP-98).

A read_committed consumer receives every batch up to the last stable offset, aborted ones
included, plus the list of aborted transactions the fetched range overlaps; it drops the records
of those producers from each listed first offset up to the producer's ABORT marker. This module
keeps that list: one entry per aborted transaction, stored with the segment holding its ABORT
marker.

File ``<20-digit base offset>.txnindex`` next to the segment, fixed 34-byte big-endian entries
in marker order (the layout Kafka uses, so the file reads the same to anyone who knows Kafka's)::

    version int16 (0) | producer_id int64 | first_offset int64 | last_offset int64
    | last_stable_offset int64

``first_offset`` is the offset of the transaction's first batch (possibly in an earlier segment),
``last_offset`` the offset of the ABORT marker (always inside this segment) and
``last_stable_offset`` the partition's LSO right after the marker: the first offset of the
earliest transaction still open then, else ``last_offset + 1``. No transaction completed after
this entry can have started below that LSO, which is what lets a search stop early.

Every segment has the file from its creation on, empty if nothing was aborted in it, so a missing
file always means "lost" and makes recovery rebuild it. Entries are written with one ``os.write``
as the marker is appended (aborts are rare, so there is nothing to batch); they are fsynced with
the sealed segment's other indexes, and a rebuilt index is written atomically.
"""

from __future__ import annotations

import logging
import os
import struct
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from oncestream.durable_files import write_file_atomically
from oncestream.errors import LogInvariantError, StorageError
from oncestream.log.segment import offset_file_name

log = logging.getLogger(__name__)

TXN_INDEX_SUFFIX = ".txnindex"
TXN_ENTRY = struct.Struct(">hqqqq")
TXN_ENTRY_VERSION = 0
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_APPEND_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND | _CLOEXEC


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One aborted transaction as the index stores it."""

    producer_id: int
    first_offset: int  # first batch of the transaction
    last_offset: int  # the ABORT marker
    last_stable_offset: int  # the partition's LSO right after the marker

    def __post_init__(self) -> None:
        if not (self.producer_id >= 0):
            raise LogInvariantError("broken invariant: self.producer_id >= 0")
        if not (0 <= self.first_offset <= self.last_offset):
            raise LogInvariantError("broken invariant: 0 <= self.first_offset <= self.last_offset")
        if not (0 <= self.last_stable_offset <= self.last_offset + 1):
            raise LogInvariantError("broken invariant: 0 <= self.last_stable_offset <= self.last_offset + 1")

    def encode(self) -> bytes:
        return TXN_ENTRY.pack(
            TXN_ENTRY_VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset
        )


def txn_index_path(directory: Path, base_offset: int) -> Path:
    """Path of the ``.txnindex`` of the segment starting at ``base_offset``."""
    return directory / offset_file_name(base_offset, TXN_INDEX_SUFFIX)


def decode_entries(raw: bytes) -> list[AbortedTxn] | None:
    """The entries of a ``.txnindex`` file's bytes; None unless every entry is well formed.

    Well formed: whole 34-byte entries, version 0, sane offsets, markers strictly increasing.
    """
    if len(raw) % TXN_ENTRY.size:
        return None
    entries: list[AbortedTxn] = []
    previous_last_offset = -1
    for version, producer_id, first_offset, last_offset, lso in TXN_ENTRY.iter_unpack(raw):
        if version != TXN_ENTRY_VERSION or producer_id < 0 or not 0 <= first_offset <= last_offset:
            return None
        if not 0 <= lso <= last_offset + 1 or last_offset <= previous_last_offset:
            return None
        entries.append(AbortedTxn(producer_id, first_offset, last_offset, lso))
        previous_last_offset = last_offset
    return entries


class TxnIndex:
    """The aborted transactions whose ABORT marker lies in one segment, oldest marker first."""

    def __init__(self, path: Path, base_offset: int, entries: list[AbortedTxn]) -> None:
        self.path = path
        self.base_offset = base_offset
        self._entries = entries
        self.dirty = False  # written since the last fsync
        # After a failed write the file is removed and never written again, so that the next open
        # finds it missing and rebuilds it; until then the entries live in memory only.
        self._file_lost = False

    @classmethod
    def create(cls, directory: Path, base_offset: int) -> TxnIndex:
        """A new, empty index; its (empty) file exists from now on."""
        path = txn_index_path(directory, base_offset)
        # Truncate, not just create: a leftover file of a segment that was dropped earlier may
        # carry the same name. Empty content needs no fsync; the directory fsync covers the name.
        os.close(os.open(path, _APPEND_FLAGS | os.O_TRUNC, 0o644))
        return cls(path, base_offset, [])

    @classmethod
    def load(cls, directory: Path, base_offset: int) -> TxnIndex | None:
        """The index as stored; None if the file is missing or not well formed."""
        path = txn_index_path(directory, base_offset)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        entries = decode_entries(raw)
        if entries is None:
            log.warning("%s is damaged", path)
            return None
        return cls(path, base_offset, entries)

    @classmethod
    def write_new(cls, directory: Path, base_offset: int, entries: list[AbortedTxn]) -> TxnIndex:
        """Replace the file with ``entries`` (a rebuild): temp file, fsync, rename."""
        previous_last_offset = -1
        for entry in entries:
            if not (entry.last_offset > previous_last_offset and entry.last_offset >= base_offset):
                raise LogInvariantError(
                    "broken invariant: entry.last_offset > previous_last_offset and entry.last_offset >= base_offset")
            previous_last_offset = entry.last_offset
        path = txn_index_path(directory, base_offset)
        # The caller fsyncs the directory once for all the files it writes.
        write_file_atomically(path, b"".join(entry.encode() for entry in entries), sync_directory=False)
        return cls(path, base_offset, list(entries))

    @property
    def entries(self) -> tuple[AbortedTxn, ...]:
        return tuple(self._entries)

    def fits(self, next_offset: int) -> bool:
        """Whether every marker lies inside a segment spanning [base offset, ``next_offset``)."""
        return all(self.base_offset <= entry.last_offset < next_offset for entry in self._entries)

    def append(self, entry: AbortedTxn) -> None:
        """Record an abort whose marker was just written to this segment."""
        if self._entries and entry.last_offset <= self._entries[-1].last_offset:
            raise LogInvariantError("markers are appended in offset order")
        if not (entry.last_offset >= self.base_offset):
            raise LogInvariantError("broken invariant: entry.last_offset >= self.base_offset")
        # In memory first: reads must see the abort even if the file write fails.
        self._entries.append(entry)
        if self._file_lost:
            return
        try:
            # Opened per write (aborts are few): an index keeps no descriptor open.
            fd = os.open(self.path, _APPEND_FLAGS, 0o644)
            try:
                data = entry.encode()
                if os.write(fd, data) != len(data):
                    raise OSError(f"short write to {self.path}")
            finally:
                os.close(fd)
        except OSError as exc:
            # A file that misses an entry must not look valid to the next open: without it the
            # index is rebuilt from the log.
            self._file_lost = True
            self.release()
            try:
                self.path.unlink(missing_ok=True)
            except OSError:
                log.exception("cannot remove %s after a failed write", self.path)
            raise StorageError(f"cannot write {self.path}: {exc}") from exc
        self.dirty = True

    def collect(self, fetch_offset: int, upper_offset: int, out: list[AbortedTxn]) -> bool:
        """Add to ``out`` the aborts overlapping [``fetch_offset``, ``upper_offset``); True once no
        later segment can hold one (Kafka's TransactionIndex.collectAbortedTxns)."""
        # Markers below the fetch offset cannot overlap it: start at the first one at/after it.
        first = bisect_left(self._entries, fetch_offset, key=lambda entry: entry.last_offset)
        for entry in self._entries[first:]:
            if entry.last_offset >= fetch_offset and entry.first_offset < upper_offset:
                out.append(entry)
            if entry.last_stable_offset >= upper_offset:
                # Every transaction still open after this marker started at or above this LSO,
                # and later ones start later still: none of them reaches below upper_offset.
                return True
        return False

    def fsync(self) -> None:
        """Make the entries durable."""
        if self.dirty and not self._file_lost:
            fd = os.open(self.path, os.O_RDONLY | _CLOEXEC)
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)
        self.dirty = False

    def take_flush_descriptor(self) -> int | None:
        """For a FlushJob: a duplicate of the descriptor if entries are unsynced, marked clean."""
        if not self.dirty or self._file_lost:
            self.dirty = False
            return None
        self.dirty = False
        return os.open(self.path, os.O_RDONLY | _CLOEXEC)  # the job's own descriptor

    def release(self) -> None:
        """The index is no longer written here (it keeps no descriptor: nothing to close)."""


class TxnIndexes:
    """The ``.txnindex`` of every segment of one partition, keyed by segment base offset.

    Also keeps, sorted, the bases of the segments that hold any abort, so that a read_committed
    fetch in a log without aborts after it costs one bisect, however many segments follow.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._by_base: dict[int, TxnIndex] = {}
        self._bases_with_aborts: list[int] = []  # sorted
        self._unsynced: set[int] = set()  # bases of indexes written since their last fsync

    def __contains__(self, base_offset: int) -> bool:
        return base_offset in self._by_base

    def get(self, base_offset: int) -> TxnIndex:
        return self._by_base[base_offset]

    def _note_aborts(self, base_offset: int, has_aborts: bool) -> None:
        slot = bisect_left(self._bases_with_aborts, base_offset)
        present = slot < len(self._bases_with_aborts) and self._bases_with_aborts[slot] == base_offset
        if has_aborts and not present:
            self._bases_with_aborts.insert(slot, base_offset)
        elif present and not has_aborts:
            del self._bases_with_aborts[slot]

    def put(self, index: TxnIndex) -> None:
        """Adopt a loaded or rebuilt index (replacing any previous one for that segment)."""
        previous = self._by_base.get(index.base_offset)
        if previous is not None and previous is not index:
            previous.release()
        self._by_base[index.base_offset] = index
        self._note_aborts(index.base_offset, bool(index.entries))
        if index.dirty:
            self._unsynced.add(index.base_offset)
        else:
            self._unsynced.discard(index.base_offset)

    def create(self, base_offset: int) -> None:
        """Start the empty index of a new segment."""
        try:
            self.put(TxnIndex.create(self.directory, base_offset))
        except OSError as exc:
            raise StorageError(f"cannot create {txn_index_path(self.directory, base_offset)}: {exc}") from exc

    def drop(self, base_offset: int, *, unlink: bool = True) -> None:
        """Delete a segment's index with the segment (whether or not it was loaded);
        ``unlink=False`` only forgets it, leaving the file to a caller that removes it later
        (off the log's thread)."""
        index = self._by_base.pop(base_offset, None)
        if index is not None:
            index.release()
        self._note_aborts(base_offset, False)
        self._unsynced.discard(base_offset)
        if not unlink:
            return
        try:
            txn_index_path(self.directory, base_offset).unlink(missing_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot delete {txn_index_path(self.directory, base_offset)}: {exc}") from exc

    def record_aborts(self, base_offset: int, aborted: Iterable[AbortedTxn]) -> None:
        """Add aborts whose markers were just appended to the segment at ``base_offset``."""
        index = self._by_base[base_offset]
        try:
            for entry in aborted:
                self._note_aborts(base_offset, True)
                index.append(entry)  # in memory even if the file write fails
        finally:
            self._unsynced.add(base_offset)

    def collect(self, from_base_offset: int, fetch_offset: int, upper_offset: int) -> list[tuple[int, int]]:
        """(producer_id, first_offset) of each abort overlapping [``fetch_offset``, ``upper_offset``).

        ``from_base_offset`` is the base of the segment holding ``fetch_offset``: an abort is
        indexed where its marker is, which may be that segment or any later one.
        """
        return [(entry.producer_id, entry.first_offset)
                for entry in self.overlapping(from_base_offset, fetch_offset, upper_offset)]

    def overlapping(self, from_base_offset: int, fetch_offset: int, upper_offset: int) -> list[AbortedTxn]:
        """The whole entries ``collect`` reports (the compactor needs their marker offsets)."""
        found: list[AbortedTxn] = []
        bases = self._bases_with_aborts
        for slot in range(bisect_left(bases, from_base_offset), len(bases)):
            if self._by_base[bases[slot]].collect(fetch_offset, upper_offset, found):
                break
        return found

    def fsync(self, *, except_base_offset: int | None = None) -> None:
        """fsync every index written since its last fsync, except the given one (the active's)."""
        for base_offset in sorted(self._unsynced):
            if base_offset == except_base_offset:
                continue
            index = self._by_base.get(base_offset)
            if index is not None:
                try:
                    index.fsync()
                except OSError as exc:
                    raise StorageError(f"fsync of {index.path} failed: {exc}") from exc
            self._unsynced.discard(base_offset)

    def take_flush_descriptors(self, *, except_base_offset: int | None = None) -> list[tuple[int, str]]:
        """For a FlushJob: what ``fsync`` would sync (except the given index), as duplicated
        descriptors; those indexes count as synced."""
        taken: list[tuple[int, str]] = []
        for base_offset in sorted(self._unsynced):
            if base_offset == except_base_offset:
                continue
            index = self._by_base.get(base_offset)
            if index is not None:
                fd = index.take_flush_descriptor()
                if fd is not None:
                    taken.append((fd, str(index.path)))
            self._unsynced.discard(base_offset)
        return taken

    def seal(self, base_offset: int) -> None:
        """The segment stops being active: close the descriptor. Unsynced entries stay marked
        so: the next flush (a job off the event loop) fsyncs them, before it writes the
        producer snapshot that recovery would trust them by."""
        index = self._by_base.get(base_offset)
        if index is not None:
            index.release()

    def release_all(self) -> None:
        """Close every descriptor (after a flush, or when the log is abandoned)."""
        for index in self._by_base.values():
            index.release()
