"""Transactions in one partition's log (KIP-98): markers, open transactions, the LSO.

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

Recovery of all this after a restart lives in ``recovery``.
"""

from __future__ import annotations

import heapq
import logging
import struct
from dataclasses import dataclass

from oncestream.errors import (
    CorruptRecordError,
    InvalidRecordError,
    LogInvariantError,
)
from oncestream.log.txn_index import AbortedTxn
from oncestream.protocol.markers import CONTROL_ABORT, CONTROL_COMMIT
from oncestream.protocol.records import (
    control_marker_type,
    decode_batch,
)

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
