"""Writing a whole sealed segment at once: the log cleaner's replacement segments.

Split from ``segment`` (which owns segments that grow by appends); the files follow the same
format and index rule, so ``Segment.open`` loads them once they are renamed into place.
"""

from __future__ import annotations

import os
from pathlib import Path

from oncestream.errors import LogInvariantError
from oncestream.log.index import OffsetIndex, TimeIndex
from oncestream.log.segment import CLOEXEC, INT32_MAX, index_batch
from oncestream.protocol.record_batch import BatchHeader


class SegmentWriter:
    """Writes a whole sealed segment (data and both indexes) to files the caller names.

    The log cleaner builds a replacement segment with it under temporary names; the files follow
    the same format and index rule as a segment grown by appends, so ``Segment.open`` loads them
    (validating the indexes) once they are renamed into place. Batches must come in offset order.
    """

    _BUFFER_BYTES = 1024 * 1024

    def __init__(
        self, log_path: Path, index_path: Path, time_index_path: Path, base_offset: int, index_interval_bytes: int
    ) -> None:
        self.paths = (log_path, index_path, time_index_path)
        self.base_offset = base_offset
        self._index_interval_bytes = index_interval_bytes
        self._fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | CLOEXEC, 0o644)
        self._offset_index = OffsetIndex.empty(index_path)
        self._time_index = TimeIndex.empty(time_index_path)
        self._buffer = bytearray()
        self._bytes_since_index_entry = 0
        self.size_bytes = 0
        self.next_offset = base_offset
        self.batch_count = 0

    def append(self, batch: bytes | memoryview, header: BatchHeader) -> None:
        """Add one batch at the end (its base offset must not precede the previous batch's end)."""
        if not (header.base_offset >= self.next_offset):
            raise LogInvariantError("batches must be written in offset order")
        if not (len(batch) == header.size_bytes):
            raise LogInvariantError("broken invariant: len(batch) == header.size_bytes")
        if not (header.last_offset - self.base_offset <= INT32_MAX):
            raise LogInvariantError("relative offsets are int32")
        if not (self.size_bytes + header.size_bytes <= INT32_MAX + 1 or self.size_bytes == 0):
            raise LogInvariantError(
                "broken invariant: self.size_bytes + header.size_bytes <= INT32_MAX + 1 or self.size_bytes == 0")
        self._bytes_since_index_entry = index_batch(
            self._offset_index,
            self._time_index,
            self.base_offset,
            self._bytes_since_index_entry,
            self.size_bytes,
            header.base_offset,
            header.size_bytes,
            header.max_timestamp,
            self._index_interval_bytes,
        )
        self._buffer += batch
        self.size_bytes += header.size_bytes
        self.next_offset = header.next_offset
        self.batch_count += 1
        if len(self._buffer) >= self._BUFFER_BYTES:
            self._write_buffer()

    def _write_buffer(self) -> None:
        view = memoryview(self._buffer)
        while view:
            view = view[os.write(self._fd, view) :]
        view.release()
        self._buffer.clear()

    def finish(self) -> None:
        """Write and fsync the data and both indexes, then release the files."""
        self._write_buffer()
        os.fsync(self._fd)
        os.close(self._fd)
        self._fd = -1
        self._offset_index.fsync()
        self._offset_index.close()
        self._time_index.fsync()
        self._time_index.close()

    def abandon(self) -> None:
        """Close whatever is open and delete the files (the build failed or was cancelled)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._offset_index.discard()
        self._time_index.discard()
        for path in self.paths:
            path.unlink(missing_ok=True)
