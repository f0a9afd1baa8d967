"""Idempotent-producer state of one partition (Kafka's ProducerStateManager, KIP-98 + KIP-360).

For every producer id the partition remembers the epoch and the last five batches written (first
and last sequence, first and last offset, timestamp). That is enough to recognise a retried batch
(duplicate), to refuse gaps and zombies, and to survive restarts via snapshots plus a replay of
the batch headers written after the snapshot.

Rules applied to a batch of producer ``pid`` / epoch ``e`` / sequences ``[first, last]``, where
``entry`` is what the partition knows about ``pid`` (checked in this order):

====================================  ===================================================
state                                 outcome
====================================  ===================================================
entry.epoch == e and [first, last]    duplicate: nothing is written, the original offsets
equals one of the last 5 batches      are returned
no entry (never seen or expired)      first == 0: accepted; else UnknownProducerIdError
                                      (KIP-360: the client bumps its epoch and restarts)
e < entry.epoch                       InvalidProducerEpochError (a fenced zombie)
e > entry.epoch                       first == 0: accepted, the old batch window dropped;
                                      else OutOfOrderSequenceError
e == entry.epoch                      first == last_seq + 1 (wrapping at int32 max to 0):
                                      accepted; else OutOfOrderSequenceError
====================================  ===================================================

Control batches (transaction markers) skip the sequence rules but still may not carry an older
epoch, and they move the producer to their epoch. Batches without a producer id skip all of it.
While the producer has a transaction open in the partition, a non-transactional batch from it is
refused with InvalidTxnStateError (see ``transactions`` for the transaction rules).

State outlives the batches it describes: retention and DeleteRecords never remove producers
(KIP-360); only ``expire`` does, once a producer has been idle for producer.id.expiration.ms.

Transactions: each entry carries the first offset of the producer's open transaction here (-1 if
none) and the coordinator epoch of its last marker; the manager keeps the open transactions in an
``OngoingTransactions`` for the LSO. Both fields are in the snapshot, so a restart restores the LSO.

Snapshot file ``<20-digit offset>.snapshot`` (big-endian)::

    magic "OSPS" | version int16 (1) | crc32c uint32 of everything after this field
    offset int64 | producer_count int32 | producer_count * entry
    entry: producer_id int64 | epoch int16 | last_timestamp_ms int64 | last_append_ms int64
           | coordinator_epoch int32 | current_txn_first_offset int64 | batch_count int8
           | batch_count * (first_seq int32 | last_seq int32 | first_offset int64
                            | last_offset int64 | timestamp_ms int64)

It is written to ``.tmp``, fsynced and renamed into place; the two newest are kept.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import crc32c

from oncestream.durable_files import write_file_atomically
from oncestream.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    LogInvariantError,
    OutOfOrderSequenceError,
    StorageError,
    UnknownProducerIdError,
)
from oncestream.log.segment import offset_file_name, parse_offset_file_name
from oncestream.log.transactions import CompletedTxn, ControlMarker, OngoingTransactions
from oncestream.protocol.record_batch import (
    NO_SEQUENCE,
    BatchHeader,
    increment_sequence,
)

log = logging.getLogger(__name__)

MAX_BATCHES_PER_PRODUCER = 5  # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOTS_TO_KEEP = 2
NO_OFFSET = -1
NO_COORDINATOR_EPOCH = -1

_SNAPSHOT_MAGIC = b"OSPS"
_SNAPSHOT_VERSION = 1
_PREAMBLE = struct.Struct(">4shI")
_BODY_HEADER = struct.Struct(">qi")
_ENTRY = struct.Struct(">qhqqiqb")
_BATCH = struct.Struct(">iiqqq")


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """What the partition remembers of one idempotent batch it wrote."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp_ms: int


@dataclass(slots=True)
class ProducerEntry:
    """Everything the partition knows about one producer id."""

    producer_id: int
    epoch: int
    batches: list[BatchMetadata] = field(default_factory=list)  # oldest first, at most 5
    last_timestamp_ms: int = -1  # max timestamp of the last batch (DescribeProducers)
    last_append_ms: int = -1  # broker time of the last write: the clock producer expiry uses
    coordinator_epoch: int = NO_COORDINATOR_EPOCH  # of the last transaction marker
    current_txn_first_offset: int = NO_OFFSET  # first offset of the open transaction, -1 if none

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else NO_OFFSET

    def copy(self) -> ProducerEntry:
        """An independent copy (staged changes must not touch the committed entry)."""
        return ProducerEntry(
            self.producer_id,
            self.epoch,
            list(self.batches),
            self.last_timestamp_ms,
            self.last_append_ms,
            self.coordinator_epoch,
            self.current_txn_first_offset,
        )

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """The remembered batch with exactly these sequences in this epoch, if any."""
        if epoch != self.epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def add_batch(self, batch: BatchMetadata) -> None:
        self.batches.append(batch)
        if len(self.batches) > MAX_BATCHES_PER_PRODUCER:
            del self.batches[0]


@dataclass(frozen=True, slots=True)
class ProducerStateInfo:
    """One producer as DescribeProducers reports it."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp_ms: int
    coordinator_epoch: int
    current_txn_start_offset: int


def check_batch(entry: ProducerEntry | None, header: BatchHeader) -> None:
    """Raise the Kafka error for a batch that breaks the producer rules (see the module table).

    Duplicates are found before this is called; this decides only accept or reject.
    """
    epoch, first_seq = header.producer_epoch, header.base_sequence
    if entry is None:
        if header.is_control or first_seq == 0:
            return
        raise UnknownProducerIdError(
            f"no state for producer {header.producer_id} and sequence {first_seq} is not 0"
        )
    if epoch < entry.epoch:
        raise InvalidProducerEpochError(
            f"producer {header.producer_id} epoch {epoch} is older than current epoch {entry.epoch}"
        )
    if header.is_control:
        return
    if entry.current_txn_first_offset != NO_OFFSET and not header.is_transactional:
        raise InvalidTxnStateError(
            f"producer {header.producer_id} has a transaction open since offset "
            f"{entry.current_txn_first_offset}; expected a transactional batch"
        )
    if epoch > entry.epoch:
        if first_seq != 0:
            raise OutOfOrderSequenceError(
                f"producer {header.producer_id} new epoch {epoch} must start at sequence 0, not {first_seq}"
            )
        return
    expected = increment_sequence(entry.last_seq, 1)  # -1 (empty window) -> 0; int32 max -> 0
    if first_seq != expected:
        raise OutOfOrderSequenceError(
            f"producer {header.producer_id} epoch {epoch}: sequence {first_seq}, expected {expected}"
        )


def apply_batch(
    entry: ProducerEntry | None,
    header: BatchHeader,
    first_offset: int,
    last_offset: int,
    max_timestamp_ms: int,
    append_time_ms: int,
    marker: ControlMarker | None = None,
) -> ProducerEntry:
    """The entry after writing this batch (mutates and returns ``entry``, or a new one).

    A transactional batch opens the producer's transaction if none is open; a control batch (its
    decoded ``marker``) closes it.
    """
    if entry is None:
        entry = ProducerEntry(header.producer_id, header.producer_epoch)
    if header.producer_epoch != entry.epoch:
        # A new epoch starts a new sequence space: the old window cannot match anything any more.
        entry.epoch = header.producer_epoch
        entry.batches.clear()
    if header.is_control:
        entry.current_txn_first_offset = NO_OFFSET
        if marker is not None:
            entry.coordinator_epoch = marker.coordinator_epoch
    else:
        entry.add_batch(
            BatchMetadata(header.base_sequence, header.last_sequence, first_offset, last_offset, max_timestamp_ms)
        )
        if header.is_transactional and entry.current_txn_first_offset == NO_OFFSET:
            entry.current_txn_first_offset = first_offset
    entry.last_timestamp_ms = max_timestamp_ms
    entry.last_append_ms = append_time_ms
    return entry


class ProducerAppend:
    """Producer-state changes staged by one append call; committed only once the write succeeded.

    Batches later in the same call are checked against the staged state of earlier ones, so a call
    carrying sequences 0-4 and 5-9 is accepted and one carrying 0-4 and 7-9 is refused as a whole.
    """

    def __init__(self, manager: ProducerStateManager) -> None:
        self._manager = manager
        self._staged: dict[int, ProducerEntry] = {}
        # (producer id, txn first offset before, after, marker) per staged batch that opened or
        # closed a transaction, in offset order: commit() applies them to the open-txn set.
        self._txn_changes: list[tuple[int, int, int, int, ControlMarker | None]] = []

    def check(
        self,
        header: BatchHeader,
        first_offset: int,
        last_offset: int,
        max_timestamp_ms: int,
        now_ms: int,
        marker: ControlMarker | None = None,
    ) -> BatchMetadata | None:
        """Stage the batch; return the original batch if it is a duplicate (then nothing is staged).

        ``marker`` is the decoded content of a control batch (required for those).
        """
        if not header.has_producer_id:
            return None
        pid = header.producer_id
        committed = self._manager.entries.get(pid)
        if committed is not None and not header.is_control and pid not in self._staged:
            # Like Kafka, only what is already in the log can be duplicated.
            duplicate = committed.find_duplicate(header.producer_epoch, header.base_sequence, header.last_sequence)
            if duplicate is not None:
                return duplicate
        entry = self._staged.get(pid)
        if entry is None and committed is not None:
            entry = committed.copy()
        if not (marker is not None or not header.is_control):
            raise LogInvariantError("a control batch needs its decoded marker")
        check_batch(entry, header)
        txn_before = entry.current_txn_first_offset if entry is not None else NO_OFFSET
        updated = apply_batch(entry, header, first_offset, last_offset, max_timestamp_ms, now_ms, marker)
        self._staged[pid] = updated
        if updated.current_txn_first_offset != txn_before:
            self._txn_changes.append((pid, txn_before, updated.current_txn_first_offset, first_offset, marker))
        return None

    def commit(self) -> list[CompletedTxn]:
        """Make the staged entries the partition's state (after the batches are in the log).

        Returns the transactions the staged markers closed, in offset order.
        """
        self._manager.entries.update(self._staged)
        completed = []
        for pid, txn_before, txn_after, offset, marker in self._txn_changes:
            done = self._manager.track_txn(pid, txn_before, txn_after, offset, marker)
            if done is not None:
                completed.append(done)
        self._staged = {}
        self._txn_changes = []
        return completed


class ProducerStateManager:
    """The producer table of one partition, its snapshots and its expiry."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.entries: dict[int, ProducerEntry] = {}
        self.ongoing = OngoingTransactions()  # mirrors current_txn_first_offset of the entries

    def _set_entries(self, entries: dict[int, ProducerEntry]) -> None:
        self.entries = entries
        self.ongoing.reset(
            {
                pid: entry.current_txn_first_offset
                for pid, entry in entries.items()
                if entry.current_txn_first_offset != NO_OFFSET
            }
        )

    # --- append path ----------------------------------------------------------------------------

    def begin_append(self) -> ProducerAppend:
        """Start staging the producer-state effects of one append call."""
        return ProducerAppend(self)

    def replay(
        self, header: BatchHeader, append_time_ms: int, marker: ControlMarker | None = None
    ) -> CompletedTxn | None:
        """Rebuild state from a batch already in the log (no checks: it was checked when written).

        ``marker`` is the decoded control record of a control batch; a control batch without one
        (no records left) changes nothing. Returns the transaction a marker closed, if any.
        """
        if not header.has_producer_id or (header.is_control and marker is None):
            return None
        pid = header.producer_id
        entry = self.entries.get(pid)
        txn_before = entry.current_txn_first_offset if entry is not None else NO_OFFSET
        updated = apply_batch(
            entry, header, header.base_offset, header.last_offset, header.max_timestamp, append_time_ms, marker
        )
        self.entries[pid] = updated
        return self.track_txn(pid, txn_before, updated.current_txn_first_offset, header.base_offset, marker)

    def track_txn(
        self, producer_id: int, txn_before: int, txn_after: int, offset: int, marker: ControlMarker | None
    ) -> CompletedTxn | None:
        """Apply one written batch's effect on the open transactions (``offset``: its base offset).

        Returns the transaction a marker closed, with the LSO right after the marker.
        """
        if txn_before == txn_after:
            return None
        if txn_before == NO_OFFSET:
            if not (txn_after == offset):
                raise LogInvariantError("a transaction opens at the batch that starts it")
            self.ongoing.begin(producer_id, txn_after)
            return None
        if not (txn_after == NO_OFFSET and marker is not None):
            raise LogInvariantError("only a marker closes a transaction")
        self.ongoing.end(producer_id)
        earliest = self.ongoing.earliest()
        return CompletedTxn(
            producer_id,
            txn_before,
            offset,
            aborted=not marker.commit,
            last_stable_offset=offset + 1 if earliest is None else earliest,
        )

    def first_unstable_offset(self) -> int | None:
        """First offset of the earliest open transaction, None if none is open."""
        return self.ongoing.earliest()

    # --- queries and expiry ---------------------------------------------------------------------

    def states(self) -> list[ProducerStateInfo]:
        """Every producer, ordered by id (DescribeProducers)."""
        return [
            ProducerStateInfo(
                entry.producer_id,
                entry.epoch,
                entry.last_seq,
                entry.last_timestamp_ms,
                entry.coordinator_epoch,
                entry.current_txn_first_offset,
            )
            for _, entry in sorted(self.entries.items())
        ]

    def expire(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for at least ``expiration_ms`` (none with an open transaction)."""
        expired = [
            pid
            for pid, entry in self.entries.items()
            if entry.current_txn_first_offset == NO_OFFSET and now_ms - entry.last_append_ms >= expiration_ms
        ]
        for pid in expired:
            del self.entries[pid]
        return len(expired)

    # --- snapshots ------------------------------------------------------------------------------

    def snapshot_offsets(self) -> list[int]:
        """Offsets of the snapshot files present, ascending."""
        offsets = []
        for path in self.directory.iterdir():
            offset = parse_offset_file_name(path.name, SNAPSHOT_SUFFIX)
            if offset is not None:
                offsets.append(offset)
        return sorted(offsets)

    def snapshot_path(self, offset: int) -> Path:
        return self.directory / offset_file_name(offset, SNAPSHOT_SUFFIX)

    def encode_snapshot(self, offset: int) -> bytes:
        """The snapshot file contents for the current table, taken at log end ``offset``."""
        body = bytearray(_BODY_HEADER.pack(offset, len(self.entries)))
        for pid, entry in sorted(self.entries.items()):
            body += _ENTRY.pack(
                pid,
                entry.epoch,
                entry.last_timestamp_ms,
                entry.last_append_ms,
                entry.coordinator_epoch,
                entry.current_txn_first_offset,
                len(entry.batches),
            )
            for batch in entry.batches:
                body += _BATCH.pack(batch.first_seq, batch.last_seq, batch.first_offset, batch.last_offset, batch.timestamp_ms)
        return _PREAMBLE.pack(_SNAPSHOT_MAGIC, _SNAPSHOT_VERSION, crc32c.crc32c(body)) + bytes(body)

    @staticmethod
    def decode_snapshot(data: bytes) -> tuple[int, dict[int, ProducerEntry]] | None:
        """(offset, table) from snapshot bytes, or None if the snapshot is corrupt."""
        if len(data) < _PREAMBLE.size + _BODY_HEADER.size:
            return None
        magic, version, crc = _PREAMBLE.unpack_from(data, 0)
        if magic != _SNAPSHOT_MAGIC or version != _SNAPSHOT_VERSION:
            return None
        body = memoryview(data)[_PREAMBLE.size :]
        if crc32c.crc32c(body) != crc:
            return None
        offset, count = _BODY_HEADER.unpack_from(body, 0)
        position = _BODY_HEADER.size
        entries: dict[int, ProducerEntry] = {}
        try:
            for _ in range(count):
                pid, epoch, last_ts, last_append, coordinator_epoch, txn_first, batch_count = _ENTRY.unpack_from(body, position)
                position += _ENTRY.size
                if not 0 <= batch_count <= MAX_BATCHES_PER_PRODUCER or pid < 0:
                    return None
                batches = []
                for _ in range(batch_count):
                    batches.append(BatchMetadata(*_BATCH.unpack_from(body, position)))
                    position += _BATCH.size
                entries[pid] = ProducerEntry(pid, epoch, batches, last_ts, last_append, coordinator_epoch, txn_first)
        except struct.error:
            return None
        if position != len(body) or len(entries) != count:
            return None
        return offset, entries

    def write_snapshot(self, offset: int, *, keep_all: bool = False) -> None:
        """Persist the table as of log end ``offset`` (temp file, fsync, rename); keep the newest
        two, or with ``keep_all`` every one (see ``PendingSnapshot``)."""
        self.take_snapshot(offset, keep_all=keep_all).write()

    def take_snapshot(self, offset: int, *, keep_all: bool = False) -> PendingSnapshot:
        """The table as of log end ``offset``, encoded now, to be written later on any thread
        (a flush job writes it off the event loop)."""
        return PendingSnapshot(self.directory, offset, self.encode_snapshot(offset), keep_all)

    def snapshot_paths_below(self, offset: int) -> list[Path]:
        """The snapshot files taken below ``offset`` (a tiered log drops them with the local
        segments they followed, as Kafka deletes a segment's snapshot with the segment)."""
        return [self.snapshot_path(snapshot_offset) for snapshot_offset in self.snapshot_offsets() if snapshot_offset < offset]

    def load_latest_snapshot(self, log_end_offset: int) -> int | None:
        """Load the newest valid snapshot at or below ``log_end_offset``; return its offset.

        Snapshots above the log end (the log was truncated by recovery) and corrupt ones are
        deleted. None means no usable snapshot: the caller replays the whole log.
        """
        self._set_entries({})
        for offset in reversed(self.snapshot_offsets()):
            path = self.snapshot_path(offset)
            if offset > log_end_offset:
                log.warning("deleting producer snapshot %s beyond log end %d", path, log_end_offset)
                path.unlink(missing_ok=True)
                continue
            try:
                decoded = self.decode_snapshot(path.read_bytes())
            except OSError:
                decoded = None
            if decoded is None or decoded[0] != offset:
                log.warning("ignoring corrupt producer snapshot %s", path)
                path.unlink(missing_ok=True)
                continue
            self._set_entries(decoded[1])
            return offset
        return None

    def load_snapshot_at_or_below(self, offset: int) -> int | None:
        """Load the newest valid snapshot taken at or below ``offset``; return its offset.

        For recovery that must replay from an older point (rebuilding an aborted-transaction
        index); newer snapshots are left in place. None (and an empty table) if there is none.
        """
        self._set_entries({})
        for snapshot_offset in reversed(self.snapshot_offsets()):
            if snapshot_offset > offset:
                continue
            try:
                decoded = self.decode_snapshot(self.snapshot_path(snapshot_offset).read_bytes())
            except OSError:
                decoded = None
            if decoded is not None and decoded[0] == snapshot_offset:
                self._set_entries(decoded[1])
                return snapshot_offset
        return None

    def delete_snapshots_above(self, offset: int) -> None:
        """Drop snapshots that describe a log longer than it now is."""
        for snapshot_offset in self.snapshot_offsets():
            if snapshot_offset > offset:
                self.snapshot_path(snapshot_offset).unlink(missing_ok=True)


@dataclass(frozen=True, slots=True)
class PendingSnapshot:
    """An encoded producer snapshot not written yet; ``write`` touches only files, no state."""

    directory: Path
    offset: int
    data: bytes
    # A tiered log keeps the snapshot taken at every roll: the one at a segment's next base
    # offset is copied to remote storage with the segment (Kafka writes one at each roll and
    # deletes it only with its segment). Other logs keep the newest two.
    keep_all: bool = False

    def write(self, fsync: Callable[[int], None] | None = None) -> None:
        """Write it durably (temp file, fsync, rename, directory fsync) and keep the newest two
        snapshot files (all with ``keep_all``); StorageError on failure."""
        path = self.directory / offset_file_name(self.offset, SNAPSHOT_SUFFIX)
        try:
            write_file_atomically(path, self.data, fsync=fsync)
        except OSError as exc:
            raise StorageError(f"cannot write producer snapshot {path}: {exc}") from exc
        if self.keep_all:
            return
        offsets = sorted(
            offset for entry in self.directory.iterdir()
            if (offset := parse_offset_file_name(entry.name, SNAPSHOT_SUFFIX)) is not None
        )
        for old in offsets[:-SNAPSHOTS_TO_KEEP]:
            (self.directory / offset_file_name(old, SNAPSHOT_SUFFIX)).unlink(missing_ok=True)
