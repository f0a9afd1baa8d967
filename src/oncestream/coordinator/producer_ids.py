"""Durable producer id allocation: ids never repeat across restarts, crashes included.

Kafka allocates producer ids in blocks recorded by the controller. We do the same on one node:
before handing out any id of a block, the end of the block is written to ``producer_id_block``
(``log/durable_files``: temp file, fsync, rename, fsync of the directory). After a crash, allocation resumes at the
recorded end, so ids handed out from a partially used block are skipped, never reused.
"""

from __future__ import annotations

from pathlib import Path

from oncestream.errors import CoordinatorInvariantError
from oncestream.log.durable_files import write_file_atomically

BLOCK_SIZE = 1000
_FILE_NAME = "producer_id_block"


class ProducerIdManager:
    """Hands out strictly increasing producer ids, durable across restarts."""

    def __init__(self, data_dir: Path, block_size: int = BLOCK_SIZE) -> None:
        if block_size <= 0:
            raise CoordinatorInvariantError('invariant violated: block_size > 0')
        self._path = data_dir / _FILE_NAME
        self._block_size = block_size
        reserved_end = self._read_reserved_end()
        self._next_id = reserved_end
        self._block_end = reserved_end  # empty block: the first call reserves a new one

    def _read_reserved_end(self) -> int:
        try:
            text = self._path.read_text().strip()
        except FileNotFoundError:
            return 0
        value = int(text)
        if value < 0:
            raise CoordinatorInvariantError("producer id block file holds a negative id")
        return value

    def _reserve(self, new_end: int) -> None:
        write_file_atomically(self._path, f"{new_end}\n".encode())

    def next_id(self) -> int:
        """A producer id never handed out before by this data directory."""
        if self._next_id >= self._block_end:
            new_end = self._next_id + self._block_size
            self._reserve(new_end)
            self._block_end = new_end
        producer_id = self._next_id
        self._next_id += 1
        if producer_id >= self._block_end:
            raise CoordinatorInvariantError('invariant violated: producer_id < self._block_end')
        return producer_id
