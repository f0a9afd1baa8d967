"""One log segment: a ``.log`` file of verbatim record batches plus its offset and time indexes.

Files are named by the segment's base offset, zero-padded to 20 digits
(``00000000000000000000.log``, ``.index``, ``.timeindex``). Batches are stored exactly as the
producer sent them except for the 8-byte base offset (and, for LogAppendTime topics, the patched
header). Its size and next offset are kept in memory so appends are a single ``pwritev`` at a
known position and reads are ``pread`` calls, never seeks on a shared position. With a
``SegmentDescriptors`` cache a segment opens its file on demand and lets the cache close it again
(see ``descriptors``); index files are opened only for each write.
"""

from __future__ import annotations

import errno
import logging
import os
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from oncestream.errors import LogInvariantError, StorageError
from oncestream.log.descriptors import SegmentDescriptors
from oncestream.log.file_range import FileRange
from oncestream.log.index import OffsetIndex, TimeIndex
from oncestream.protocol.record_batch import (
    CURRENT_MAGIC,
    HEADER_SIZE_BYTES,
    LOG_OVERHEAD_BYTES,
    MAGIC_OFFSET,
    BatchHeader,
    compute_crc,
    parse_header,
)

log = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
OFFSET_NAME_DIGITS = 20
INT32_MAX = 2**31 - 1
# Header walks read small windows (a few headers, or one header of a large batch); verifying
# scans read large windows because every byte has to pass through the CRC anyway.
HEADER_WINDOW_BYTES = 16 * 1024
SCAN_WINDOW_BYTES = 4 * 1024 * 1024
_IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024
CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_BASE_AND_LENGTH = struct.Struct(">qi")
_LAST_OFFSET_DELTA = struct.Struct(">i")
_LAST_OFFSET_DELTA_POSITION = 23
_SPAN_FIELDS_BYTES = _LAST_OFFSET_DELTA_POSITION + 4


def offset_file_name(base_offset: int, suffix: str) -> str:
    """``00000000000000000042.log`` style name for a file keyed by an offset."""
    if not (base_offset >= 0):
        raise LogInvariantError("broken invariant: base_offset >= 0")
    return f"{base_offset:0{OFFSET_NAME_DIGITS}d}{suffix}"


def parse_offset_file_name(name: str, suffix: str) -> int | None:
    """The offset in a ``<20 digits><suffix>`` name, or None if the name is not of that form."""
    if not name.endswith(suffix):
        return None
    stem = name[: -len(suffix)]
    if len(stem) != OFFSET_NAME_DIGITS or not stem.isdigit():
        return None
    return int(stem)


def pread_exact(fd: int, size_bytes: int, position: int) -> bytes:
    """Read exactly ``size_bytes`` at ``position``; StorageError if the file is shorter."""
    data = os.pread(fd, size_bytes, position)
    if len(data) == size_bytes:
        return data
    # Regular files return short reads only at EOF, but be exact about it.
    parts = [data]
    got = len(data)
    while got < size_bytes:
        more = os.pread(fd, size_bytes - got, position + got)
        if not more:
            raise StorageError(f"segment file shorter than expected: wanted {size_bytes} bytes at {position}")
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def pwritev_all(fd: int, buffers: Sequence[bytes | memoryview], position: int) -> int:
    """Write every buffer at ``position`` with as few ``pwritev`` calls as IOV_MAX allows."""
    pending = [memoryview(b).cast("B") if not isinstance(b, bytes) else memoryview(b) for b in buffers]
    pending = [b for b in pending if len(b)]
    total = 0
    while pending:
        chunk = pending[:_IOV_MAX]
        written = os.pwritev(fd, chunk, position)
        if written <= 0:
            raise StorageError("pwritev wrote nothing")
        position += written
        total += written
        # Drop the buffers written in full; keep the unwritten part of a partially written one.
        while written:
            head = pending[0]
            if written >= len(head):
                written -= len(head)
                pending.pop(0)
            else:
                pending[0] = head[written:]
                written = 0
    return total


def index_batch(
    offset_index: OffsetIndex,
    time_index: TimeIndex,
    segment_base_offset: int,
    bytes_since_entry: int,
    position: int,
    base_offset: int,
    size_bytes: int,
    max_timestamp_ms: int,
    index_interval_bytes: int,
) -> int:
    """Add the index entries a batch written at ``position`` needs; returns the new byte count
    since the last offset-index entry.

    Kafka's rule: index a batch once more than index.interval.bytes were written since the last
    entry (the first batch, at position 0, needs none); the time index gets an entry whenever a
    batch raises the segment's max timestamp. One rule for appends, recovery and the cleaner.
    """
    if bytes_since_entry > index_interval_bytes:
        offset_index.append(base_offset - segment_base_offset, position)
        bytes_since_entry = 0
    bytes_since_entry += size_bytes
    if max_timestamp_ms > time_index.max_timestamp_ms:
        time_index.append(max_timestamp_ms, base_offset - segment_base_offset)
    return bytes_since_entry


def offsets_follow(expected_offset: int, base_offset: int, compacted_below: int) -> bool:
    """Whether a batch at ``base_offset`` may follow a batch ending before ``expected_offset``.

    Offsets are contiguous except where the log cleaner removed whole batches: such gaps lie below
    the partition's cleaned offset (``compacted_below``), so a gap above it is damage.
    """
    return base_offset == expected_offset or expected_offset < base_offset <= compacted_below


class BatchWalker:
    """Iterate (position, header) over consecutive well-formed batches of a file range.

    Stops at the first batch that is torn (extends past ``end``), has a wrong magic or an impossible
    length, negative counts, or (with ``verify_crc``) a CRC mismatch; ``stop_reason`` then says why
    and ``valid_end`` is the position after the last batch yielded.
    """

    def __init__(self, fd: int, start: int, end: int, *, verify_crc: bool, window_bytes: int) -> None:
        self._fd = fd
        self._start = start
        self._end = end
        self._verify_crc = verify_crc
        self._window_bytes = window_bytes
        self.valid_end = start
        self.stop_reason: str | None = None

    def __iter__(self) -> Iterator[tuple[int, BatchHeader]]:
        buffer = b""
        buffer_start = self._start
        position = self._start
        end = self._end
        while position < end:
            if end - position < HEADER_SIZE_BYTES:
                self.stop_reason = "torn batch header"
                return
            relative = position - buffer_start
            if relative < 0 or relative + HEADER_SIZE_BYTES > len(buffer):
                buffer = os.pread(self._fd, min(self._window_bytes, end - position), position)
                buffer_start, relative = position, 0
                if len(buffer) < HEADER_SIZE_BYTES:
                    self.stop_reason = "file shorter than expected"
                    return
            if buffer[relative + MAGIC_OFFSET] != CURRENT_MAGIC:
                self.stop_reason = f"magic {buffer[relative + MAGIC_OFFSET]}"
                return
            header = parse_header(buffer, relative)
            size = header.size_bytes
            if header.batch_length < HEADER_SIZE_BYTES - LOG_OVERHEAD_BYTES or position + size > end:
                self.stop_reason = "batch length out of bounds (torn write?)"
                return
            if header.record_count < 0 or header.last_offset_delta < 0:
                self.stop_reason = "negative record count or offset delta"
                return
            if self._verify_crc:
                if relative + size > len(buffer):
                    buffer = os.pread(self._fd, max(size, min(self._window_bytes, end - position)), position)
                    buffer_start, relative = position, 0
                    if len(buffer) < size:
                        self.stop_reason = "file shorter than expected"
                        return
                with memoryview(buffer) as view:
                    if compute_crc(view[relative : relative + size]) != header.crc:
                        self.stop_reason = "CRC32C mismatch"
                        return
            yield position, header
            position += size
            self.valid_end = position


@dataclass(frozen=True, slots=True)
class PreparedBatch:
    """A validated batch ready to be written: ``head`` (patched bytes) then ``tail`` (verbatim)."""

    head: bytes
    tail: memoryview
    base_offset: int
    last_offset: int
    max_timestamp_ms: int

    @property
    def size_bytes(self) -> int:
        return len(self.head) + len(self.tail)


@dataclass(frozen=True, slots=True)
class Extent:
    """A run of whole batches inside one segment: file range and the offsets it covers."""

    start_position: int
    end_position: int
    next_offset: int  # offset after the last batch in the range (== start offset if empty)
    segment_exhausted: bool  # True if the walk reached the end of the segment


class Segment:
    """A segment's files and in-memory counters. Only the newest segment of a log is appended to."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        fd: int,
        *,
        size_bytes: int,
        next_offset: int,
        offset_index: OffsetIndex,
        time_index: TimeIndex,
        bytes_since_index_entry: int,
        rolling_base_ms: int | None,
        last_append_ms: int,
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self._open_fd: int | None = fd  # None: closed by the descriptor cache, reopened on use
        self._descriptors: SegmentDescriptors | None = None  # the cache that may close the file
        self._pins = 0  # walks in progress over the file: its descriptor must stay open
        self.size_bytes = size_bytes
        self.next_offset = next_offset
        self.offset_index = offset_index
        self.time_index = time_index
        self._bytes_since_index_entry = bytes_since_index_entry
        # When the first batch arrived (broker time), for segment.ms rolling.
        self.rolling_base_ms = rolling_base_ms
        # Broker time of the last write; retention's fallback for segments without timestamps.
        self.last_append_ms = last_append_ms
        self.log_dirty = False  # data written since the last fsync
        self.closed = False

    # --- descriptor ---------------------------------------------------------------------------

    @property
    def _fd(self) -> int:
        """The open descriptor of the ``.log`` file, reopened if the cache closed it."""
        fd = self._open_fd
        if fd is None:
            if self.closed:
                raise LogInvariantError(f"{self.log_path} is used after close")
            try:
                fd = os.open(self.log_path, os.O_RDWR | CLOEXEC)  # the active segment appends
            except OSError as exc:
                raise StorageError(f"cannot reopen segment {self.log_path}: {exc}") from exc
            self._open_fd = fd
            if self._descriptors is not None:
                self._descriptors.opened(self)
        elif self._descriptors is not None:
            self._descriptors.used(self)
        return fd

    def use_descriptor_cache(self, descriptors: SegmentDescriptors | None) -> None:
        """Let ``descriptors`` close this segment's file while it is not used (reopened on the
        next use, active segment included); None: keep it open for good."""
        if self._descriptors is not None and descriptors is not self._descriptors:
            self._descriptors.forget(self)
        self._descriptors = descriptors
        if descriptors is not None and self._open_fd is not None:
            descriptors.opened(self)

    def evict_descriptor(self) -> bool:
        """For the cache: close the descriptor unless a walk over the file is in progress."""
        if self._pins or self._open_fd is None:
            return self._open_fd is None
        os.close(self._open_fd)
        self._open_fd = None
        return True

    def _close_descriptor(self) -> None:
        if self._descriptors is not None:
            self._descriptors.forget(self)
            self._descriptors = None
        fd, self._open_fd = self._open_fd, None
        if fd is not None:
            os.close(fd)

    # --- paths ----------------------------------------------------------------------------------

    @staticmethod
    def paths(directory: Path, base_offset: int) -> tuple[Path, Path, Path]:
        """(.log, .index, .timeindex) paths of the segment starting at ``base_offset``."""
        return (
            directory / offset_file_name(base_offset, LOG_SUFFIX),
            directory / offset_file_name(base_offset, INDEX_SUFFIX),
            directory / offset_file_name(base_offset, TIME_INDEX_SUFFIX),
        )

    @property
    def log_path(self) -> Path:
        return self.paths(self.directory, self.base_offset)[0]

    # --- creation and recovery ------------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, base_offset: int, now_ms: int) -> Segment:
        """A new, empty segment (any leftover files of the same name are truncated)."""
        log_path, index_path, time_index_path = cls.paths(directory, base_offset)
        try:
            fd = os.open(log_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | CLOEXEC, 0o644)
            offset_index = OffsetIndex.empty(index_path)
            time_index = TimeIndex.empty(time_index_path)
        except OSError as exc:
            raise StorageError(f"cannot create segment {log_path}: {exc}") from exc
        return cls(
            directory,
            base_offset,
            fd,
            size_bytes=0,
            next_offset=base_offset,
            offset_index=offset_index,
            time_index=time_index,
            bytes_since_index_entry=0,
            rolling_base_ms=None,
            last_append_ms=now_ms,
        )

    @classmethod
    def open(
        cls,
        directory: Path,
        base_offset: int,
        now_ms: int,
        *,
        recover: bool,
        index_interval_bytes: int,
        compacted_below: int = 0,
    ) -> tuple[Segment, int]:
        """Open an existing segment; returns it and the number of bytes truncated from its tail.

        With ``recover`` every batch is verified (length, magic, CRC, contiguous offsets), the file
        is truncated at the first bad one and both indexes are rebuilt. Without it the indexes are
        validated and only the tail after the last index entry is walked; an invalid or missing
        index falls back to the full recovery scan. Offsets up to ``compacted_below`` may have gaps
        (batches the log cleaner removed); anywhere else a gap counts as damage.
        """
        log_path = cls.paths(directory, base_offset)[0]
        try:
            fd = os.open(log_path, os.O_RDWR | CLOEXEC)
        except OSError as exc:
            raise StorageError(f"cannot open segment {log_path}: {exc}") from exc
        try:
            size_bytes = os.fstat(fd).st_size
            segment = None
            truncated_bytes = 0
            if not recover:
                segment = cls._open_with_indexes(directory, base_offset, fd, size_bytes, now_ms, compacted_below)
                if segment is None:
                    log.warning("rebuilding indexes of %s", log_path)
            if segment is None:
                segment, truncated_bytes = cls._open_by_scan(
                    directory, base_offset, fd, size_bytes, now_ms, index_interval_bytes, compacted_below
                )
            segment.rolling_base_ms = segment._first_batch_time_ms(now_ms)
            return segment, truncated_bytes
        except BaseException:
            os.close(fd)
            raise

    @classmethod
    def _open_with_indexes(
        cls, directory: Path, base_offset: int, fd: int, size_bytes: int, now_ms: int, compacted_below: int
    ) -> Segment | None:
        _, index_path, time_index_path = cls.paths(directory, base_offset)
        offset_index = OffsetIndex.load(index_path, size_bytes)
        if offset_index is None:
            return None
        last_entry = offset_index.last_entry
        start_position, expected_offset = 0, base_offset
        if last_entry is not None:
            start_position, expected_offset = last_entry[1], base_offset + last_entry[0]
        # Walk the unindexed tail: it must consist of whole, contiguous batches up to EOF, and the
        # last index entry must point at a batch with the offset it claims.
        walker = BatchWalker(fd, start_position, size_bytes, verify_crc=False, window_bytes=SCAN_WINDOW_BYTES)
        next_offset = expected_offset
        tail_max_timestamp_ms = -1
        for _, header in walker:
            if not offsets_follow(next_offset, header.base_offset, compacted_below):
                return None
            next_offset = header.next_offset
            tail_max_timestamp_ms = max(tail_max_timestamp_ms, header.max_timestamp)
        if walker.stop_reason is not None:
            return None
        time_index = TimeIndex.load(time_index_path, next_offset - 1 - base_offset)
        if time_index is None or tail_max_timestamp_ms > time_index.max_timestamp_ms:
            return None
        return cls(
            directory,
            base_offset,
            fd,
            size_bytes=size_bytes,
            next_offset=next_offset,
            offset_index=offset_index,
            time_index=time_index,
            bytes_since_index_entry=size_bytes - start_position,
            rolling_base_ms=None,
            last_append_ms=now_ms,
        )

    @classmethod
    def _open_by_scan(
        cls,
        directory: Path,
        base_offset: int,
        fd: int,
        size_bytes: int,
        now_ms: int,
        index_interval_bytes: int,
        compacted_below: int,
    ) -> tuple[Segment, int]:
        _, index_path, time_index_path = cls.paths(directory, base_offset)
        segment = cls(
            directory,
            base_offset,
            fd,
            size_bytes=0,
            next_offset=base_offset,
            offset_index=OffsetIndex.empty(index_path),
            time_index=TimeIndex.empty(time_index_path),
            bytes_since_index_entry=0,
            rolling_base_ms=None,
            last_append_ms=now_ms,
        )
        walker = BatchWalker(fd, 0, size_bytes, verify_crc=True, window_bytes=SCAN_WINDOW_BYTES)
        valid_end = 0
        stop_reason = None
        for position, header in walker:
            if not offsets_follow(segment.next_offset, header.base_offset, compacted_below):
                stop_reason = f"offset {header.base_offset} where {segment.next_offset} was expected"
                break
            if header.last_offset - base_offset > INT32_MAX:
                stop_reason = "relative offset overflow"
                break
            segment._index_batch(position, header.base_offset, header.size_bytes, header.max_timestamp, index_interval_bytes)
            segment.next_offset = header.next_offset
            valid_end = position + header.size_bytes
        else:
            stop_reason = walker.stop_reason
        truncated_bytes = size_bytes - valid_end
        if truncated_bytes:
            log.warning(
                "truncating %s at byte %d (%d bytes dropped): %s",
                cls.paths(directory, base_offset)[0],
                valid_end,
                truncated_bytes,
                stop_reason,
            )
            os.ftruncate(fd, valid_end)
            os.fdatasync(fd)
        segment.size_bytes = valid_end
        segment.offset_index.write_pending()
        segment.time_index.write_pending()
        return segment, truncated_bytes

    def _first_batch_time_ms(self, now_ms: int) -> int | None:
        """Rolling base after a restart: the first batch's max timestamp (Kafka), capped at now."""
        if self.size_bytes < HEADER_SIZE_BYTES:
            return None
        header = parse_header(pread_exact(self._fd, HEADER_SIZE_BYTES, 0))
        if header.max_timestamp < 0:
            return now_ms
        return min(header.max_timestamp, now_ms)

    # --- append ---------------------------------------------------------------------------------

    def _index_batch(
        self, position: int, base_offset: int, size_bytes: int, max_timestamp_ms: int, index_interval_bytes: int
    ) -> None:
        self._bytes_since_index_entry = index_batch(
            self.offset_index,
            self.time_index,
            self.base_offset,
            self._bytes_since_index_entry,
            position,
            base_offset,
            size_bytes,
            max_timestamp_ms,
            index_interval_bytes,
        )

    def append(self, batches: Sequence[PreparedBatch], index_interval_bytes: int, now_ms: int) -> None:
        """Write ``batches`` at the end of the segment in one ``pwritev``; then index them.

        On a write error the file is cut back to its previous size and StorageError is raised, so
        the segment never holds a partial append.
        """
        if self.closed:
            raise LogInvariantError("broken invariant: not self.closed")
        if not (batches and batches[0].base_offset == self.next_offset):
            raise LogInvariantError("offsets must be contiguous")
        buffers: list[bytes | memoryview] = []
        for batch in batches:
            buffers.append(batch.head)
            buffers.append(batch.tail)
        total_bytes = sum(batch.size_bytes for batch in batches)
        if not (self.size_bytes + total_bytes <= INT32_MAX + 1 or self.size_bytes == 0):
            raise LogInvariantError("broken invariant: self.size_bytes + total_bytes <= INT32_MAX + 1 or self.size_bytes == 0")
        try:
            written = pwritev_all(self._fd, buffers, self.size_bytes)
            if not (written == total_bytes):
                raise LogInvariantError("broken invariant: written == total_bytes")
        except OSError as exc:
            try:
                os.ftruncate(self._fd, self.size_bytes)
            except OSError:
                log.exception("cannot cut %s back after a failed write", self.log_path)
            raise StorageError(f"write to {self.log_path} failed: {exc}") from exc
        position = self.size_bytes
        for batch in batches:
            if not (batch.base_offset == self.next_offset):
                raise LogInvariantError("broken invariant: batch.base_offset == self.next_offset")
            self._index_batch(position, batch.base_offset, batch.size_bytes, batch.max_timestamp_ms, index_interval_bytes)
            position += batch.size_bytes
            self.next_offset = batch.last_offset + 1
        self.size_bytes = position
        self.log_dirty = True
        if self.rolling_base_ms is None:
            self.rolling_base_ms = now_ms
        self.last_append_ms = now_ms

    # --- read -----------------------------------------------------------------------------------

    def batches(self, start_position: int = 0, *, window_bytes: int = SCAN_WINDOW_BYTES) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of every batch from ``start_position`` (already verified on open)."""
        self._pins += 1  # the walker holds the descriptor number: no eviction under it
        try:
            walker = BatchWalker(self._fd, start_position, self.size_bytes, verify_crc=False, window_bytes=window_bytes)
            yield from walker
            if walker.stop_reason is not None:
                raise StorageError(f"{self.log_path} is corrupt at byte {walker.valid_end}: {walker.stop_reason}")
        finally:
            self._pins -= 1

    def _spans(self, start_position: int) -> Iterator[tuple[int, int, int, int]]:
        """(position, size, base offset, next offset) of each batch from ``start_position``.

        The fetch path's walk: only the three fields it needs, no validation (every batch was
        checked when appended or recovered), windows of HEADER_WINDOW_BYTES.
        """
        buffer = b""
        buffer_start = position = start_position
        end = self.size_bytes
        while position < end:
            relative = position - buffer_start
            if relative + _SPAN_FIELDS_BYTES > len(buffer):
                try:
                    buffer = os.pread(self._fd, min(HEADER_WINDOW_BYTES, end - position), position)
                except OSError as exc:
                    raise StorageError(f"read from {self.log_path} failed: {exc}") from exc
                buffer_start, relative = position, 0
                if len(buffer) < _SPAN_FIELDS_BYTES:
                    raise StorageError(f"{self.log_path} is shorter than its recorded size")
            base_offset, batch_length = _BASE_AND_LENGTH.unpack_from(buffer, relative)
            (last_offset_delta,) = _LAST_OFFSET_DELTA.unpack_from(buffer, relative + _LAST_OFFSET_DELTA_POSITION)
            size = batch_length + LOG_OVERHEAD_BYTES
            yield position, size, base_offset, base_offset + last_offset_delta + 1
            position += size

    def extent(self, offset: int, max_bytes: int, upper_offset: int, *, allow_oversize_first: bool) -> Extent:
        """Whole batches from the one containing ``offset``, within ``max_bytes`` and below ``upper_offset``.

        Headers are read only near the two ends: the sparse index gives a position at most about
        ``index.interval.bytes`` before the first batch, and the furthest index entry that still
        fits lets the walk skip the middle. The caller then reads the data in one pread.
        """
        if not (self.base_offset <= offset < self.next_offset):
            raise LogInvariantError("broken invariant: self.base_offset <= offset < self.next_offset")
        spans = self._spans(self.offset_index.lookup(offset - self.base_offset))
        for position, size, _, next_offset in spans:  # noqa: B007 (the match is read after the break)
            if next_offset > offset:
                break
        else:
            raise LogInvariantError("offset below next_offset must be inside a batch")
        begin = position
        # base offset <= offset < upper_offset, so only the size can stop the first batch.
        if size > max_bytes and not allow_oversize_first:
            return Extent(begin, begin, offset, False)
        end = begin + size
        jump = self.offset_index.furthest_entry(begin + max_bytes, upper_offset - self.base_offset)
        if jump is not None and jump[1] > end:
            end, next_offset = jump[1], self.base_offset + jump[0]
            spans = self._spans(end)
        for position, size, base_offset, batch_next_offset in spans:
            if not (position == end):
                raise LogInvariantError("broken invariant: position == end")
            if base_offset >= upper_offset or position + size - begin > max_bytes:
                return Extent(begin, end, next_offset, False)
            end = position + size
            next_offset = batch_next_offset
            if max_bytes - (end - begin) < HEADER_SIZE_BYTES:
                # No further batch can fit: stop without reading another header.
                return Extent(begin, end, next_offset, end >= self.size_bytes)
        return Extent(begin, end, next_offset, True)

    def read(self, start_position: int, end_position: int) -> bytes:
        """The bytes of ``[start_position, end_position)`` in one ``pread``."""
        if not (0 <= start_position <= end_position <= self.size_bytes):
            raise LogInvariantError("broken invariant: 0 <= start_position <= end_position <= self.size_bytes")
        try:
            return pread_exact(self._fd, end_position - start_position, start_position)
        except OSError as exc:
            raise StorageError(f"read from {self.log_path} failed: {exc}") from exc

    def file_range(self, start_position: int, end_position: int) -> FileRange | bytes:
        """``[start_position, end_position)`` as a range over its own duplicate descriptor, for
        zero-copy Fetch: it stays readable whatever happens to this segment until it is closed."""
        if not (0 <= start_position <= end_position <= self.size_bytes):
            raise LogInvariantError("broken invariant: 0 <= start_position <= end_position <= self.size_bytes")
        try:
            return FileRange(os.dup(self._fd), start_position, end_position - start_position, str(self.log_path))
        except OSError as exc:
            if exc.errno not in (errno.EMFILE, errno.ENFILE):
                raise StorageError(f"cannot hold {self.log_path} open for a fetch: {exc}") from exc
        # Out of descriptors (a fetch over very many partitions): these bytes are copied instead.
        return self.read(start_position, end_position)

    def find_by_timestamp(self, timestamp_ms: int, from_offset: int) -> tuple[int, int] | None:
        """(position, size) of the first batch at/after ``from_offset`` with max timestamp >= ``timestamp_ms``."""
        if self.max_timestamp_ms < timestamp_ms or from_offset >= self.next_offset:
            return None
        found = self.time_index.lookup(timestamp_ms)
        if found is None:
            raise LogInvariantError("broken invariant: found is not None")
        relative_offset = found[0]
        target_offset = self.base_offset + relative_offset
        if target_offset >= from_offset:
            for position, size, base_offset, _ in self._spans(self.offset_index.lookup(relative_offset)):
                if base_offset == target_offset:
                    return position, size
                if base_offset > target_offset:
                    break
            raise StorageError(f"{self.log_path}: time index names offset {target_offset}, which starts no batch")
        # The indexed batch starts before ``from_offset`` (the log start moved into this segment):
        # a later batch that never raised the running maximum may be the answer, so walk headers.
        start_position = self.offset_index.lookup(from_offset - self.base_offset)
        for position, header in self.batches(start_position, window_bytes=HEADER_WINDOW_BYTES):
            if header.next_offset > from_offset and header.max_timestamp >= timestamp_ms:
                return position, header.size_bytes
        return None

    @property
    def max_timestamp_ms(self) -> int:
        """Largest batch max timestamp in the segment (-1 if none carried a timestamp)."""
        return self.time_index.max_timestamp_ms

    @property
    def retention_timestamp_ms(self) -> int:
        """What retention.ms compares: the max timestamp, else the last write's broker time."""
        return self.max_timestamp_ms if self.max_timestamp_ms >= 0 else self.last_append_ms

    # --- durability and lifecycle ---------------------------------------------------------------

    def seal(self, descriptors: SegmentDescriptors | None = None) -> None:
        """The segment stops being active: hand its buffered index entries to the OS and close
        the index files (they are in memory; the next flush reopens them to fsync). With
        ``descriptors`` the ``.log`` file joins the cache of closable descriptors."""
        self.offset_index.close_descriptor()
        self.time_index.close_descriptor()
        if descriptors is not None:
            self.use_descriptor_cache(descriptors)

    def flush(self, *, include_indexes: bool) -> None:
        """fsync the data (and, for sealed segments, the indexes)."""
        try:
            if self.log_dirty:
                os.fdatasync(self._fd)
                self.log_dirty = False
            if include_indexes:
                self.offset_index.fsync()
                self.time_index.fsync()
        except OSError as exc:
            raise StorageError(f"fsync of {self.log_path} failed: {exc}") from exc

    def take_flush_descriptors(self, *, include_indexes: bool) -> list[tuple[int, str]]:
        """For a FlushJob: duplicates of the descriptors whose files need an fsync (the data;
        for sealed segments also the indexes), marked clean. The caller closes them."""
        taken: list[tuple[int, str]] = []
        if self.log_dirty:
            taken.append((os.dup(self._fd), str(self.log_path)))
            self.log_dirty = False
        if include_indexes:
            for index in (self.offset_index, self.time_index):
                fd = index.take_flush_descriptor()
                if fd is not None:
                    taken.append((fd, str(index.path)))
        return taken

    @property
    def needs_flush(self) -> bool:
        return self.log_dirty or self.offset_index.dirty or self.time_index.dirty

    def close(self) -> None:
        """Write buffered index entries and release the file descriptors."""
        if self.closed:
            return
        self.closed = True
        try:
            self.offset_index.close()
            self.time_index.close()
        finally:
            self._close_descriptor()

    def release(self) -> None:
        """Drop buffered index entries and close the descriptors without writing anything."""
        if not self.closed:
            self.closed = True
            self.offset_index.discard()
            self.time_index.discard()
            self._close_descriptor()

    def delete(self) -> None:
        """Close and remove the segment's files (log first, so a crash leaves only orphan indexes)."""
        self.release()
        for path in self.paths(self.directory, self.base_offset):
            path.unlink(missing_ok=True)
