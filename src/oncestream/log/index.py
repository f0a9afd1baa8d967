"""Sparse offset index and time index of one log segment.

Both are append-only files of fixed-size big-endian entries, mirrored in memory as ``array``
columns so lookups are a bisect without touching the disk:

* ``.index``: ``relative_offset int32 | position int32`` for a batch every ``index.interval.bytes``.
  Relative offset = batch base offset - segment base offset; position = byte offset of the batch
  in the ``.log`` file.
* ``.timeindex``: ``timestamp int64 | relative_offset int32`` for every batch whose max timestamp
  exceeds every earlier one in the segment, so the first entry with timestamp >= T names the first
  batch of the segment that has a timestamp >= T.

New entries are buffered and written in one ``os.write`` when the buffer grows, the segment is
sealed, flushed or closed. Losing buffered entries in a crash is harmless: the active segment's
indexes are rebuilt by recovery after an unclean shutdown, and a sealed segment's were written
when it was sealed.

Loading validates the file (whole entries, strictly increasing columns, positions inside the
segment); an index that fails is rebuilt from the log by the caller.
"""

from __future__ import annotations

import os
import struct
import sys
from array import array
from bisect import bisect_left, bisect_right
from itertools import pairwise
from pathlib import Path

from oncestream.errors import LogInvariantError

OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")
# Kafka's segment.index.bytes default (10 MiB) bounds each index file; a full index rolls the segment.
MAX_INDEX_BYTES = 10 * 1024 * 1024
MAX_OFFSET_ENTRIES = MAX_INDEX_BYTES // OFFSET_ENTRY.size
MAX_TIME_ENTRIES = MAX_INDEX_BYTES // TIME_ENTRY.size
_PENDING_FLUSH_BYTES = 64 * 1024
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_INDEX_OPEN_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND | _CLOEXEC


def _big_endian_column(raw: bytes, typecode: str) -> array[int]:
    column = array(typecode)
    column.frombytes(raw)
    if sys.byteorder == "little":
        column.byteswap()
    return column


def _strictly_increasing(column: array[int]) -> bool:
    return all(a < b for a, b in pairwise(column))


class _IndexFile:
    """The append-only file behind an index: buffered appends, fsync, close."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._pending = bytearray()
        self.dirty = False  # written since the last fsync

    def _append_bytes(self, entry: bytes) -> None:
        self._pending += entry
        if len(self._pending) >= _PENDING_FLUSH_BYTES:
            self.write_pending()

    def write_pending(self) -> None:
        """Hand buffered entries to the OS (page cache). The file is opened for the write and
        closed again: an index keeps no descriptor (open files stay bounded however many
        segments there are), and writes come once per 64 KiB of entries."""
        if not self._pending:
            return
        fd = os.open(self.path, _INDEX_OPEN_FLAGS, 0o644)
        try:
            view = memoryview(self._pending)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            view.release()
        finally:
            os.close(fd)
        self._pending.clear()
        self.dirty = True

    def take_flush_descriptor(self) -> int | None:
        """For a FlushJob: hand buffered entries to the OS and return a descriptor of the file
        (the caller's to close) if anything is unsynced (None otherwise); the entries count as
        synced. fsync works on the inode, whichever descriptor it is given."""
        self.write_pending()
        if not self.dirty:
            return None
        fd = os.open(self.path, os.O_RDONLY | _CLOEXEC)
        self.dirty = False
        return fd

    def fsync(self) -> None:
        """Make every entry so far durable."""
        self.write_pending()
        if self.dirty:
            fd = os.open(self.path, os.O_RDONLY | _CLOEXEC)
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)
        self.dirty = False

    def close_descriptor(self) -> None:
        """Hand buffered entries to the OS, keeping the dirty mark (a sealed segment's index:
        nothing more is appended, the next flush fsyncs it)."""
        self.write_pending()

    def reset_file(self) -> None:
        """Start the file over (rebuild): an empty file, nothing buffered; the next fsync covers
        the truncation too."""
        self._pending.clear()
        os.close(os.open(self.path, _INDEX_OPEN_FLAGS | os.O_TRUNC, 0o644))
        self.dirty = True

    def discard(self) -> None:
        """Drop buffered entries (the file is about to be deleted)."""
        self._pending.clear()

    def close(self) -> None:
        """Write what is buffered."""
        self.write_pending()


class OffsetIndex(_IndexFile):
    """Sparse map from relative offset to file position (Kafka's ``.index``)."""

    def __init__(self, path: Path, relative_offsets: array[int] | None = None, positions: array[int] | None = None) -> None:
        super().__init__(path)
        self._relative_offsets = relative_offsets if relative_offsets is not None else array("i")
        self._positions = positions if positions is not None else array("i")
        if not (len(self._relative_offsets) == len(self._positions)):
            raise LogInvariantError("broken invariant: len(self._relative_offsets) == len(self._positions)")

    @classmethod
    def load(cls, path: Path, segment_size_bytes: int) -> OffsetIndex | None:
        """Read and validate ``path``; None if missing or not a valid index for this segment."""
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        if len(raw) % OFFSET_ENTRY.size or len(raw) > MAX_INDEX_BYTES:
            return None
        both = _big_endian_column(raw, "i")
        relative_offsets, positions = both[0::2], both[1::2]
        if relative_offsets and (relative_offsets[0] < 0 or positions[0] < 0):
            return None
        if not (_strictly_increasing(relative_offsets) and _strictly_increasing(positions)):
            return None
        if positions and positions[-1] >= segment_size_bytes:
            return None
        return cls(path, relative_offsets, positions)

    @classmethod
    def empty(cls, path: Path) -> OffsetIndex:
        """A new index whose file is (re)created empty."""
        index = cls(path)
        index.reset_file()
        return index

    @property
    def entry_count(self) -> int:
        return len(self._positions)

    @property
    def last_entry(self) -> tuple[int, int] | None:
        """(relative offset, position) of the newest entry."""
        if not self._positions:
            return None
        return self._relative_offsets[-1], self._positions[-1]

    def append(self, relative_offset: int, position: int) -> None:
        """Index the batch at ``position``; both must exceed the previous entry's."""
        if self._positions:
            if not (relative_offset > self._relative_offsets[-1]):
                raise LogInvariantError("offset index must grow")
            if not (position > self._positions[-1]):
                raise LogInvariantError("offset index positions must grow")
        if not (0 <= relative_offset <= 2**31 - 1 and 0 <= position <= 2**31 - 1):
            raise LogInvariantError("broken invariant: 0 <= relative_offset <= 2**31 - 1 and 0 <= position <= 2**31 - 1")
        self._relative_offsets.append(relative_offset)
        self._positions.append(position)
        self._append_bytes(OFFSET_ENTRY.pack(relative_offset, position))

    def lookup(self, relative_offset: int) -> int:
        """Position of the last indexed batch whose base offset <= ``relative_offset`` (or 0)."""
        slot = bisect_right(self._relative_offsets, relative_offset) - 1
        return self._positions[slot] if slot >= 0 else 0

    def furthest_entry(self, max_position: int, below_relative_offset: int) -> tuple[int, int] | None:
        """The last entry with position <= ``max_position`` and relative offset < the bound.

        Every batch before an entry's position is whole, so a fetch can jump to it without reading
        the headers in between.
        """
        slot = min(
            bisect_right(self._positions, max_position),
            bisect_left(self._relative_offsets, below_relative_offset),
        ) - 1
        if slot < 0:
            return None
        return self._relative_offsets[slot], self._positions[slot]

    def is_full(self, extra_entries: int) -> bool:
        """Whether ``extra_entries`` more entries would exceed the index size limit."""
        return self.entry_count + extra_entries > MAX_OFFSET_ENTRIES


class TimeIndex(_IndexFile):
    """Map from a segment's rising max timestamps to the batch that reached them (``.timeindex``)."""

    def __init__(self, path: Path, timestamps: array[int] | None = None, relative_offsets: array[int] | None = None) -> None:
        super().__init__(path)
        self._timestamps = timestamps if timestamps is not None else array("q")
        self._relative_offsets = relative_offsets if relative_offsets is not None else array("i")
        if not (len(self._timestamps) == len(self._relative_offsets)):
            raise LogInvariantError("broken invariant: len(self._timestamps) == len(self._relative_offsets)")

    @classmethod
    def load(cls, path: Path, max_relative_offset: int) -> TimeIndex | None:
        """Read and validate ``path``; None if missing or inconsistent with the segment."""
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        if len(raw) % TIME_ENTRY.size or len(raw) > MAX_INDEX_BYTES:
            return None
        timestamps = array("q")
        relative_offsets = array("i")
        for timestamp_ms, relative_offset in TIME_ENTRY.iter_unpack(raw):
            timestamps.append(timestamp_ms)
            relative_offsets.append(relative_offset)
        if relative_offsets and (relative_offsets[0] < 0 or relative_offsets[-1] > max_relative_offset):
            return None
        if not (_strictly_increasing(timestamps) and _strictly_increasing(relative_offsets)):
            return None
        return cls(path, timestamps, relative_offsets)

    @classmethod
    def empty(cls, path: Path) -> TimeIndex:
        """A new index whose file is (re)created empty."""
        index = cls(path)
        index.reset_file()
        return index

    @property
    def entry_count(self) -> int:
        return len(self._timestamps)

    @property
    def max_timestamp_ms(self) -> int:
        """Largest timestamp in the segment as far as this index knows (-1 if none)."""
        return self._timestamps[-1] if self._timestamps else -1

    @property
    def last_relative_offset(self) -> int | None:
        return self._relative_offsets[-1] if self._relative_offsets else None

    def append(self, timestamp_ms: int, relative_offset: int) -> None:
        """Record that the batch at ``relative_offset`` raised the segment's max timestamp."""
        if self._timestamps:
            if not (timestamp_ms > self._timestamps[-1]):
                raise LogInvariantError("time index timestamps must grow")
            if not (relative_offset > self._relative_offsets[-1]):
                raise LogInvariantError("time index offsets must grow")
        self._timestamps.append(timestamp_ms)
        self._relative_offsets.append(relative_offset)
        self._append_bytes(TIME_ENTRY.pack(timestamp_ms, relative_offset))

    def lookup(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(relative offset, max timestamp) of the first batch with max timestamp >= ``timestamp_ms``."""
        slot = bisect_left(self._timestamps, timestamp_ms)
        if slot == len(self._timestamps):
            return None
        return self._relative_offsets[slot], self._timestamps[slot]

    def is_full(self, extra_entries: int) -> bool:
        """Whether ``extra_entries`` more entries would exceed the index size limit."""
        return self.entry_count + extra_entries > MAX_TIME_ENTRIES
