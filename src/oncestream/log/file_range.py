"""A byte range of a segment file, held by its own descriptor until it is sent.

Zero-copy Fetch (broker/fetch_response_writer.py) answers with these in place of the record bytes:
the server hands them to ``os.sendfile``, so the bytes go from the page cache to the socket and
never enter the process. The range owns a duplicate of the segment's descriptor, taken when the
fetch is read, so what happens to the segment before the send ends cannot change what is sent:
retention or compaction deleting the file (an unlinked file stays readable through an open
descriptor), the descriptor cache closing the segment's own descriptor, a roll. Segment files are
append-only below their size at read time (a failed append truncates back to that size, never
below), so the range's bytes are those the read saw.

The descriptor is closed by :meth:`FileRange.close` once the range is sent, or when the range is
dropped unsent (a long poll that reads again, a throttled fetch answered empty): CPython frees it
at once then, so no descriptor outlives its response.
"""

from __future__ import annotations

import os

from oncestream.errors import StorageError


class FileRange:
    """``size_bytes`` bytes at ``position`` of an open file (``fd`` is this range's own)."""

    __slots__ = ("fd", "path", "position", "size_bytes")

    def __init__(self, fd: int, position: int, size_bytes: int, path: str) -> None:
        self.fd: int | None = fd
        self.position = position
        self.size_bytes = size_bytes
        self.path = path  # for error messages only

    def __len__(self) -> int:
        return self.size_bytes

    def read(self) -> bytes:
        """The range's bytes, copied into the process (TLS listeners: nothing to sendfile to)."""
        fd = self._open_fd()
        data = os.pread(fd, self.size_bytes, self.position)
        while len(data) < self.size_bytes:
            more = os.pread(fd, self.size_bytes - len(data), self.position + len(data))
            if not more:
                raise StorageError(f"{self.path} ended {self.size_bytes - len(data)} bytes short of a fetched range")
            data += more
        return data

    def _open_fd(self) -> int:
        if self.fd is None:
            raise StorageError(f"the fetched range of {self.path} was used after it was closed")
        return self.fd

    def close(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)

    def __del__(self) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"FileRange({self.path}, position={self.position}, size_bytes={self.size_bytes})"
