"""Durable producer id allocation: ids never repeat across restarts, crashes included.

Kafka allocates producer ids in blocks recorded by the controller. We do the same on one node:
before handing out any id of a block, the end of the block is written to ``producer_id_block``
(``durable_files``: temp file, fsync, rename, fsync of the directory). After a crash, allocation resumes at the
recorded end, so ids handed out from a partially used block are skipped, never reused (KIP-98:
a producer id names one producer for good).

Sans-io like the coordinators: the write is a ``BlockReservation`` whose ``run`` may go to any
thread (the broker's disk threads, ``broker/producer_id_service``); the manager only hands out
ids below the end of the last reservation that finished (``finish_reserve``), and it asks for the
next block early (``reservation_due``, when a tenth of the block is left) so that a steady stream
of new producers rarely waits for a disk. One reservation is in flight at a time: two racing
writes could rename in the wrong order and leave a smaller end on disk than one already used.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from oncestream.durable_files import write_file_atomically
from oncestream.errors import CoordinatorInvariantError, StorageError

BLOCK_SIZE = 1000
_FILE_NAME = "producer_id_block"


@dataclass(eq=False)  # told apart by identity: the manager knows the one in flight
class BlockReservation:
    """The durable write of a new block end (any thread)."""

    path: Path
    new_end: int

    def run(self, fsync: Callable[[int], None] | None = None) -> None:
        """Write the new end durably; StorageError if the disk fails (then no id above the old
        end is handed out)."""
        try:
            write_file_atomically(self.path, f"{self.new_end}\n".encode(), fsync=fsync)
        except OSError as exc:
            raise StorageError(f"cannot reserve producer ids below {self.new_end}: {exc}") from exc


class ProducerIdManager:
    """Hands out strictly increasing producer ids, durable across restarts."""

    def __init__(self, data_dir: Path, block_size: int = BLOCK_SIZE) -> None:
        if block_size <= 0:
            raise CoordinatorInvariantError(f"the producer id block size must be positive, got {block_size}")
        self._path = data_dir / _FILE_NAME
        self.block_size = block_size  # public so a test can make blocks run out quickly
        reserved_end = self._read_reserved_end()
        self._next_id = reserved_end
        self._block_end = reserved_end  # durable: the first id needs a new block
        self._in_flight: BlockReservation | None = None

    def _read_reserved_end(self) -> int:
        try:
            text = self._path.read_text().strip()
        except FileNotFoundError:
            return 0
        value = int(text)
        if value < 0:
            raise CoordinatorInvariantError("producer id block file holds a negative id")
        return value

    @property
    def available(self) -> int:
        """Ids that may be handed out now (below the durable block end)."""
        return self._block_end - self._next_id

    @property
    def reserving(self) -> BlockReservation | None:
        """The reservation in flight, if any."""
        return self._in_flight

    def reservation_due(self) -> bool:
        """Whether to start the next block's reservation now: none is in flight and at most a
        tenth of the block (at least one id) is left."""
        return self._in_flight is None and self.available <= max(1, self.block_size // 10)

    def begin_reserve(self) -> BlockReservation:
        """Start reserving the block after the current one; ``run`` the result anywhere, then
        ``finish_reserve`` or ``fail_reserve`` it here."""
        if self._in_flight is not None:
            raise CoordinatorInvariantError("a producer id block is already being reserved")
        self._in_flight = BlockReservation(self._path, max(self._block_end, self._next_id) + self.block_size)
        return self._in_flight

    def finish_reserve(self, reservation: BlockReservation) -> None:
        """``reservation.run()`` returned: its ids may be handed out. Idempotent."""
        if self._in_flight is reservation:
            self._in_flight = None
            self._block_end = max(self._block_end, reservation.new_end)

    def fail_reserve(self, reservation: BlockReservation) -> None:
        """``reservation.run()`` failed: nothing above the old end is handed out; the next
        request tries again."""
        if self._in_flight is reservation:
            self._in_flight = None

    def take_id(self) -> int | None:
        """The next id if its block is durable, else None (reserve one first)."""
        if self._next_id >= self._block_end:
            return None
        producer_id = self._next_id
        self._next_id += 1
        return producer_id

    def next_id(self) -> int:
        """A producer id never handed out before by this data directory, reserving a block on
        the calling thread when needed (tools and tests; the broker reserves off its loop)."""
        if self.available == 0:
            if self._in_flight is not None:
                raise CoordinatorInvariantError("a producer id block is being reserved elsewhere")
            reservation = self.begin_reserve()
            try:
                reservation.run()
            except BaseException:
                self.fail_reserve(reservation)
                raise
            self.finish_reserve(reservation)
        producer_id = self.take_id()
        if producer_id is None:
            raise CoordinatorInvariantError(f"no producer id left after reserving a new block (block ends at {self._block_end})")
        return producer_id
