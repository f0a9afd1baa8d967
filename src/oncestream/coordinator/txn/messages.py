"""Protocol-agnostic results and effects of the transaction coordinator (plain frozen dataclasses).

The wire layer turns kio requests into method calls on :class:`TransactionCoordinator` and turns
these results back into kio responses. Error fields carry ``kio.schema.errors.ErrorCode`` values.

Every coordinator call returns an :class:`Outcome`: the response to send now (or ``None`` when the
response waits for a transaction-log write), plus the effects the caller must perform:

* ``records_to_persist``: :class:`PendingWrite` records to append to ``__transaction_state``.
  When one is durable call ``on_persisted(write_id, now_ms)``; if the append fails call
  ``on_persist_failed(write_id, error)``. Nothing is acted on before its record is durable.
* ``markers_to_write``: :class:`MarkerJob` COMMIT/ABORT markers to append to data partitions.
  When every partition of a job has its marker call ``markers_written(...)``.

Effects are *returned*, never queued inside the coordinator, so an asyncio layer simply performs
what each call hands back and feeds the completions in again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from kio.schema.errors import ErrorCode

from oncestream.topic_partition import TopicPartition as TopicPartition  # part of the messages vocabulary

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
# Short.MAX_VALUE: the epoch only the coordinator may use, to fence the last client epoch.
MAX_PRODUCER_EPOCH = 32_767
# Kafka stores a KIP-939 two-phase-commit transaction's timeout as Integer.MAX_VALUE.
TWO_PHASE_COMMIT_TIMEOUT_MS = 2**31 - 1

CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"




@dataclass(frozen=True)
class PendingWrite:
    """One record for the transaction log; act on it only after ``on_persisted(write_id)``.

    ``value`` None is a tombstone (the transactional id expired).
    """

    write_id: int
    transactional_id: str
    key: bytes
    value: bytes | None


@dataclass(frozen=True)
class MarkerJob:
    """Write a COMMIT (``commit``) or ABORT control record to every partition, then report back.

    ``producer_id``/``producer_epoch`` are what the control batches must carry: the transaction's
    producer id and an epoch at least as high as any epoch its data was written with.
    ``transaction_version`` tells the partition how to check the marker epoch (KIP-1228: with
    version 2 it must be strictly greater than the data's).
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: tuple[TopicPartition, ...]
    coordinator_epoch: int
    transaction_version: int


R = TypeVar("R")


@dataclass(frozen=True)
class Outcome(Generic[R]):
    """What a coordinator call decided: a response (or None: it comes with a later callback) and
    the effects to perform, in order."""

    response: R | None = None
    records_to_persist: tuple[PendingWrite, ...] = ()
    markers_to_write: tuple[MarkerJob, ...] = ()


@dataclass(frozen=True)
class InitProducerIdResponse:
    """InitProducerId result; the ``ongoing_txn_*`` fields are KIP-939's (v6), -1 when unused."""

    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    ongoing_txn_producer_id: int = NO_PRODUCER_ID
    ongoing_txn_producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True)
class AddPartitionsResponse:
    """AddPartitionsToTxn / AddOffsetsToTxn result: one error for every partition of the request
    (Kafka answers all partitions of one transactional id with the same code)."""

    error: ErrorCode
    partitions: tuple[TopicPartition, ...] = ()


@dataclass(frozen=True)
class VerifyPartitionsResponse:
    """KIP-890 part 1 verification: per partition NONE (in the ongoing transaction) or an error."""

    errors: dict[TopicPartition, ErrorCode]


@dataclass(frozen=True)
class EndTxnResponse:
    """EndTxn result. With transaction version 2 the new producer id and epoch (KIP-890 bumps the
    epoch on every commit and abort); -1 with version 1 or on error."""

    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True)
class TransactionDescription:
    """DescribeTransactions entry (KIP-664) plus what ``oncestream transactions describe`` shows."""

    transactional_id: str
    error: ErrorCode
    state: str = ""
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    transaction_timeout_ms: int = 0
    transaction_start_time_ms: int = -1
    partitions: tuple[TopicPartition, ...] = ()
    last_update_time_ms: int = -1
    two_phase_commit: bool = False
    ongoing_txn_producer_id: int = NO_PRODUCER_ID
    ongoing_txn_producer_epoch: int = NO_PRODUCER_EPOCH
    client_transaction_version: int = 0
    # The state a not-yet-durable transition is heading for, if any ("" otherwise).
    pending_state: str = ""


@dataclass(frozen=True)
class TransactionListing:
    """ListTransactions entry (KIP-664)."""

    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True)
class ListTransactionsResponse:
    """ListTransactions result; ``unknown_state_filters`` echoes filter names that are no state."""

    error: ErrorCode
    transactions: tuple[TransactionListing, ...] = ()
    unknown_state_filters: tuple[str, ...] = ()
