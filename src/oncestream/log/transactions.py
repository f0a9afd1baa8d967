"""Transactions in one partition's log (KIP-98): markers, open transactions, the LSO, recovery.

A transactional batch (attributes bit 4) from producer P opens a transaction at its base offset
unless P already has one open here; a COMMIT or ABORT marker (a control batch written by the
broker for the transaction coordinator) closes it. The partition's last stable offset (LSO) is the
first offset of the earliest open transaction, or the high watermark when none is open;
read_committed consumers never read at or beyond it. Each ABORT that closes a transaction is
recorded in the aborted-transaction index (``txn_index``) of the segment holding the marker.

Transitions of one producer's transaction in this partition (``ProducerEntry.current_txn_first_offset``):

==============  ==============================  ===========================================
state           event                           outcome
==============  ==============================  ===========================================
none            transactional batch at offset o open at o
none            non-transactional batch         none (idempotent or plain producer)
none            marker (COMMIT or ABORT)        none; written anyway (a retried marker), the
                                                epoch and coordinator epoch are updated
open at f       transactional batch             open at f
open at f       non-transactional batch         InvalidTxnStateError (nothing written)
open at f       COMMIT marker at m              none
open at f       ABORT marker at m               none; index entry (P, f, m, LSO after m)
any             batch or marker of an older     InvalidProducerEpochError (nothing written);
                producer epoch                  a stale marker cannot end a newer transaction
==============  ==============================  ===========================================

A marker with a newer epoch moves the producer to it (KIP-890 bumps the epoch on every
completion), which fences transactional batches of the older epoch still in flight.

Recovery (``recover_producer_and_txn_state``): producer state, open transactions included, comes
from the newest snapshot plus a replay of the batches after it, markers decoded. Segments whose
data may have been cut by crash recovery (``scanned``) and segments whose ``.txnindex`` is missing
or damaged get their index rebuilt by that replay. Index entries for markers below the snapshot
offset are trusted from the existing file of a scanned segment: the file was fsynced before the
snapshot was written. A segment whose file is unusable needs the replay to start at or before the
segment, from an older snapshot, or from the oldest segment when there is none.
"""

from __future__ import annotations

import heapq
import logging
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from oncestream.errors import (
    CorruptRecordError,
    InvalidRecordError,
    KafkaError,
    LogInvariantError,
)
from oncestream.log.txn_index import AbortedTxn, TxnIndex, TxnIndexes
from oncestream.protocol.record_batch import BatchHeader
from oncestream.protocol.records import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    control_marker_type,
    decode_batch,
)

if TYPE_CHECKING:
    from oncestream.log.producer_state import ProducerStateManager
    from oncestream.log.segment import Segment

log = logging.getLogger(__name__)

_CONTROL_VALUE = struct.Struct(">hi")  # version, coordinator epoch (EndTransactionMarker value)


@dataclass(frozen=True, slots=True)
class ControlMarker:
    """The content of a transaction marker's control record."""

    commit: bool
    coordinator_epoch: int


def read_control_marker(batch: bytes | memoryview) -> ControlMarker | None:
    """Decode the marker in a control batch; None for a batch without records.

    Raises InvalidRecordError / CorruptRecordError if the batch does not hold a COMMIT or ABORT
    marker.
    """
    decoded = decode_batch(batch, verify_crc=False)
    if not decoded.header.is_control:
        raise InvalidRecordError("not a control batch")
    if not decoded.records:
        return None  # Kafka: an empty control batch once closed a transaction the cleaner removed
    record = decoded.records[0]
    marker_type = control_marker_type(record)
    if marker_type not in (CONTROL_ABORT, CONTROL_COMMIT):
        raise InvalidRecordError(f"control record type {marker_type} is not a transaction marker")
    if record.value is None or len(record.value) < _CONTROL_VALUE.size:
        raise CorruptRecordError("transaction marker without a valid value")
    _version, coordinator_epoch = _CONTROL_VALUE.unpack_from(record.value, 0)
    return ControlMarker(marker_type == CONTROL_COMMIT, coordinator_epoch)


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker closed in this partition."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker
    aborted: bool
    last_stable_offset: int  # the partition's LSO right after the marker

    def aborted_entry(self, lso_cap: int | None = None) -> AbortedTxn:
        """The index entry for this (aborted) transaction; ``lso_cap`` lowers the recorded LSO
        when it is not known exactly (a lower LSO only makes searches look further)."""
        if not self.aborted:
            raise LogInvariantError("broken invariant: self.aborted")
        lso = self.last_stable_offset if lso_cap is None else min(self.last_stable_offset, lso_cap)
        return AbortedTxn(self.producer_id, self.first_offset, self.last_offset, lso)


class OngoingTransactions:
    """First offset of each producer's open transaction; the earliest in O(log n).

    A heap with lazy deletion: ends only drop the map entry, stale heap tops are discarded when
    the earliest is asked for.
    """

    def __init__(self) -> None:
        self._first_offset_by_pid: dict[int, int] = {}
        self._heap: list[tuple[int, int]] = []  # (first offset, producer id), may hold ended ones

    def __len__(self) -> int:
        return len(self._first_offset_by_pid)

    def reset(self, first_offset_by_pid: dict[int, int]) -> None:
        """Replace everything (a snapshot was loaded)."""
        self._first_offset_by_pid = dict(first_offset_by_pid)
        self._heap = [(offset, pid) for pid, offset in self._first_offset_by_pid.items()]
        heapq.heapify(self._heap)

    def begin(self, producer_id: int, first_offset: int) -> None:
        if not (producer_id not in self._first_offset_by_pid):
            raise LogInvariantError("a producer has one open transaction per partition")
        if not (first_offset >= 0):
            raise LogInvariantError("broken invariant: first_offset >= 0")
        self._first_offset_by_pid[producer_id] = first_offset
        heapq.heappush(self._heap, (first_offset, producer_id))

    def end(self, producer_id: int) -> None:
        del self._first_offset_by_pid[producer_id]

    def first_offset(self, producer_id: int) -> int | None:
        return self._first_offset_by_pid.get(producer_id)

    def earliest(self) -> int | None:
        """First offset of the earliest open transaction, None if none is open."""
        heap = self._heap
        while heap:
            offset, pid = heap[0]
            if self._first_offset_by_pid.get(pid) == offset:
                return offset
            heapq.heappop(heap)
        return None

    def items(self) -> list[tuple[int, int]]:
        """(producer id, first offset) of every open transaction, by producer id."""
        return sorted(self._first_offset_by_pid.items())


# --- recovery -----------------------------------------------------------------------------------


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
                except (KafkaError, ValueError, IndexError, struct.error) as exc:
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
