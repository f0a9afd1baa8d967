"""One transactional id's metadata: its durable snapshot, the transition in flight, and the pure
functions that compute each transition's target snapshot.

Kafka keeps a mutable TransactionMetadata plus a TxnTransitMetadata for the transition being
written. We keep an immutable :class:`TxnSnapshot` (exactly what one log value holds) and a
:class:`PendingTransition` (the target snapshot and the write carrying it). A transition is
*prepared* (table-checked, target computed, record handed out) and *completed* only when the record
is durable; until then the current snapshot is untouched, so a failed write simply drops the
pending transition and the next attempt computes the same target again.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from oncestream.coordinator.txn.messages import (
    MAX_PRODUCER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TopicPartition,
)
from oncestream.coordinator.txn.state import TxnState, check_transition
from oncestream.errors import CoordinatorInvariantError, ProducerFencedError

_S = TxnState
_PREPARED = frozenset({_S.PREPARE_COMMIT, _S.PREPARE_ABORT})
_IDLE = frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT})
_INT32_MAX = 2**31 - 1


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka keeps Short.MAX_VALUE for the coordinator, so that it can always fence the last client
    epoch: a client epoch of MAX-1 (or more) means the next bump needs a new producer id."""
    return epoch >= MAX_PRODUCER_EPOCH - 1


@dataclass(frozen=True)
class TxnSnapshot:
    """The durable state of one transactional id: exactly the content of one log value.

    ``producer_id``/``producer_epoch`` are the identity the *current client* must present.
    ``last_producer_id``/``last_producer_epoch`` are the identity a retry of the last successful
    InitProducerId (KIP-360) or EndTxn (KIP-890 transaction version 2) may still carry; -1 when
    no retry is acceptable (e.g. after a fence). ``next_producer_id`` is the id a version-2
    completion moves to when the epoch overflows. ``ongoing_txn_producer_*`` are set while a
    KIP-939 prepared transaction was kept by InitProducerId(keepPreparedTxn): the identity the
    open transaction's data was written with, which differs from the client's new identity.
    """

    producer_id: int
    producer_epoch: int
    last_producer_id: int
    last_producer_epoch: int
    next_producer_id: int
    ongoing_txn_producer_id: int
    ongoing_txn_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    start_timestamp_ms: int
    last_update_timestamp_ms: int
    two_phase_commit: bool
    client_transaction_version: int

    def __post_init__(self) -> None:
        problem = snapshot_problem(self)
        if problem is not None:
            raise ValueError(problem)

    @classmethod
    def fresh(cls, producer_id: int, timeout_ms: int, now_ms: int) -> TxnSnapshot:
        """A new transactional id before its first InitProducerId is durable (epoch -1, Empty)."""
        return cls(
            producer_id=producer_id,
            producer_epoch=NO_PRODUCER_EPOCH,
            last_producer_id=NO_PRODUCER_ID,
            last_producer_epoch=NO_PRODUCER_EPOCH,
            next_producer_id=NO_PRODUCER_ID,
            ongoing_txn_producer_id=NO_PRODUCER_ID,
            ongoing_txn_producer_epoch=NO_PRODUCER_EPOCH,
            timeout_ms=timeout_ms,
            state=_S.EMPTY,
            partitions=frozenset(),
            start_timestamp_ms=-1,
            last_update_timestamp_ms=now_ms,
            two_phase_commit=False,
            client_transaction_version=0,
        )

    @property
    def supports_epoch_bump(self) -> bool:
        """Transaction version 2 (KIP-890 part 2) bumps the epoch on every commit and abort."""
        return self.client_transaction_version >= 2

    @property
    def is_epoch_exhausted(self) -> bool:
        """True when the next epoch bump must move to a new producer id."""
        return is_epoch_exhausted(self.producer_epoch)

    @property
    def has_kept_transaction(self) -> bool:
        """True while a KIP-939 prepared transaction kept by keepPreparedTxn is still open."""
        return self.ongoing_txn_producer_id != NO_PRODUCER_ID

    @property
    def is_exempt_from_timeout(self) -> bool:
        """KIP-939: a two-phase-commit transaction is only ever ended by its client's decision,
        and so is a prepared transaction kept by keepPreparedTxn, whatever the new session asked."""
        return self.two_phase_commit or self.has_kept_transaction

    @property
    def last_identity(self) -> tuple[int, int] | None:
        """The (producer id, epoch) a retry may carry, or None when no retry is acceptable."""
        if self.last_producer_epoch == NO_PRODUCER_EPOCH:
            return None
        return (self.last_producer_id, self.last_producer_epoch)

    def marker_identity(self) -> tuple[int, int]:
        """The (producer id, epoch) the COMMIT/ABORT markers of the open transaction carry.

        The producer id is the one the transaction's data was written with. The epoch is the
        current (possibly bumped) epoch when that is still the client's id, which fences every
        older epoch on the partitions; when a kept KIP-939 transaction's client moved to a new
        producer id, the transaction's id is fenced with the reserved epoch Short.MAX_VALUE.
        """
        if not self.has_kept_transaction or self.ongoing_txn_producer_id == self.producer_id:
            return (self.producer_id, self.producer_epoch)
        return (self.ongoing_txn_producer_id, MAX_PRODUCER_EPOCH)


def snapshot_problem(s: TxnSnapshot) -> str | None:
    """Why ``s`` breaks an invariant of the transaction model, or None if it is consistent."""
    if s.producer_id < 0:
        return f"producer id {s.producer_id} is negative"
    if not NO_PRODUCER_EPOCH <= s.producer_epoch <= MAX_PRODUCER_EPOCH:
        return f"producer epoch {s.producer_epoch} out of range"
    if s.producer_epoch == NO_PRODUCER_EPOCH and s.state is not _S.EMPTY:
        return f"no producer epoch in state {s.state.value}"
    if not NO_PRODUCER_EPOCH <= s.last_producer_epoch <= MAX_PRODUCER_EPOCH:
        return f"last producer epoch {s.last_producer_epoch} out of range"
    if (s.last_producer_id == NO_PRODUCER_ID) != (s.last_producer_epoch == NO_PRODUCER_EPOCH):
        return "last producer id and epoch must be set together"
    if s.next_producer_id < NO_PRODUCER_ID:
        return f"next producer id {s.next_producer_id} is invalid"
    if s.next_producer_id != NO_PRODUCER_ID and s.state not in _PREPARED:
        return f"next producer id outside a prepared state ({s.state.value})"
    if (s.ongoing_txn_producer_id == NO_PRODUCER_ID) != (
        s.ongoing_txn_producer_epoch == NO_PRODUCER_EPOCH
    ):
        return "ongoing transaction producer id and epoch must be set together"
    if s.ongoing_txn_producer_id != NO_PRODUCER_ID and s.state not in (_PREPARED | {_S.ONGOING}):
        return f"a kept transaction outside Ongoing/Prepare* ({s.state.value})"
    if not 0 < s.timeout_ms <= _INT32_MAX:
        return f"timeout {s.timeout_ms} ms out of range"
    if s.partitions and s.state not in (_PREPARED | {_S.ONGOING}):
        return f"partitions in state {s.state.value}"
    if s.state is _S.EMPTY and s.start_timestamp_ms != -1:
        return "an Empty transaction has a start time"
    if s.state is not _S.EMPTY and s.state is not _S.DEAD and s.start_timestamp_ms < 0:
        return f"no start time in state {s.state.value}"
    if not 0 <= s.client_transaction_version <= 2:
        return f"client transaction version {s.client_transaction_version} unknown"
    return None


# --- transition targets (pure; raise typed errors before anything changes) ------------------------


def bump_epoch_for_init(
    s: TxnSnapshot,
    *,
    timeout_ms: int,
    two_phase_commit: bool,
    expected: tuple[int, int] | None,
    now_ms: int,
) -> TxnSnapshot:
    """InitProducerId on an idle id: the next epoch of the same producer id (KIP-360 rules).

    Without ``expected`` (a new producer instance) the epoch is bumped and no retry identity is
    kept. With ``expected`` equal to the current identity (or on a fresh id) the producer is
    bumping its own epoch, and a retry with that identity is remembered. ``expected`` equal to
    the remembered retry identity is a retry of a bump that succeeded: same epoch again. Anything
    else is an older producer: PRODUCER_FENCED.
    """
    if s.state not in _IDLE:
        raise CoordinatorInvariantError(str(s.state))
    bumped = s.producer_epoch + 1
    if expected is None:
        epoch, last = bumped, None
    elif s.producer_epoch == NO_PRODUCER_EPOCH or expected[1] == s.producer_epoch:
        epoch = bumped
        last = None if s.producer_epoch == NO_PRODUCER_EPOCH else (s.producer_id, s.producer_epoch)
    elif s.last_identity is not None and expected == s.last_identity:
        # A retry needs no new epoch, so it succeeds even when the epoch is now exhausted.
        epoch, last = s.producer_epoch, s.last_identity
    else:
        raise ProducerFencedError(
            f"epoch {expected[1]} is neither the current epoch {s.producer_epoch} nor a retry"
        )
    if not (epoch == s.producer_epoch or not s.is_epoch_exhausted):
        raise CoordinatorInvariantError("exhausted: rotate the id")
    return _idle_after_init(s, s.producer_id, epoch, last, timeout_ms, two_phase_commit, now_ms)


def rotate_producer_id(
    s: TxnSnapshot,
    new_producer_id: int,
    *,
    timeout_ms: int,
    two_phase_commit: bool,
    remember_last: bool,
    now_ms: int,
) -> TxnSnapshot:
    """InitProducerId when the epoch is exhausted: a new producer id at epoch 0."""
    if s.state not in _IDLE:
        raise CoordinatorInvariantError(str(s.state))
    if new_producer_id == s.producer_id:
        raise CoordinatorInvariantError(f"a new producer id must differ from the exhausted one, both are {new_producer_id}")
    last = (s.producer_id, s.producer_epoch) if remember_last else None
    return _idle_after_init(s, new_producer_id, 0, last, timeout_ms, two_phase_commit, now_ms)


def _idle_after_init(
    s: TxnSnapshot,
    producer_id: int,
    epoch: int,
    last: tuple[int, int] | None,
    timeout_ms: int,
    two_phase_commit: bool,
    now_ms: int,
) -> TxnSnapshot:
    last_id, last_epoch = last if last is not None else (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
    return dataclasses.replace(
        s,
        producer_id=producer_id,
        producer_epoch=epoch,
        last_producer_id=last_id,
        last_producer_epoch=last_epoch,
        next_producer_id=NO_PRODUCER_ID,
        timeout_ms=timeout_ms,
        state=_S.EMPTY,
        partitions=frozenset(),
        start_timestamp_ms=-1,
        last_update_timestamp_ms=now_ms,
        two_phase_commit=two_phase_commit,
    )


def keep_prepared(
    s: TxnSnapshot,
    client_producer_id: int,
    client_epoch: int,
    *,
    timeout_ms: int,
    two_phase_commit: bool,
    now_ms: int,
) -> TxnSnapshot:
    """KIP-939 InitProducerId(keepPreparedTxn) on an Ongoing transaction: leave it open, move the
    client to a new identity (fencing the old instance), remember the transaction's identity."""
    if s.state is not _S.ONGOING:
        raise CoordinatorInvariantError(f"keeping a prepared transaction needs an Ongoing one, not {s.state.name}")
    if s.has_kept_transaction:
        txn_id, txn_epoch = s.ongoing_txn_producer_id, s.ongoing_txn_producer_epoch
    else:
        txn_id, txn_epoch = s.producer_id, s.producer_epoch
    return dataclasses.replace(
        s,
        producer_id=client_producer_id,
        producer_epoch=client_epoch,
        last_producer_id=NO_PRODUCER_ID,
        last_producer_epoch=NO_PRODUCER_EPOCH,
        ongoing_txn_producer_id=txn_id,
        ongoing_txn_producer_epoch=txn_epoch,
        timeout_ms=timeout_ms,
        last_update_timestamp_ms=now_ms,
        two_phase_commit=two_phase_commit,
    )


def add_partitions(
    s: TxnSnapshot, partitions: Iterable[TopicPartition], *, transaction_version: int, now_ms: int
) -> TxnSnapshot:
    """AddPartitionsToTxn: the transaction is (or stays) Ongoing with the union of partitions."""
    starts_now = s.state in _IDLE
    return dataclasses.replace(
        s,
        state=_S.ONGOING,
        partitions=s.partitions | frozenset(partitions),
        start_timestamp_ms=now_ms if starts_now else s.start_timestamp_ms,
        last_update_timestamp_ms=now_ms,
        client_transaction_version=transaction_version,
    )


def prepare_end(
    s: TxnSnapshot,
    *,
    commit: bool,
    transaction_version: int,
    next_producer_id: int,
    now_ms: int,
) -> TxnSnapshot:
    """EndTxn: PrepareCommit or PrepareAbort. With transaction version 2 the epoch is bumped (and
    the old identity remembered for retries); ``next_producer_id`` is set when that bump overflows.
    """
    target_state = _S.PREPARE_COMMIT if commit else _S.PREPARE_ABORT
    epoch, last_id, last_epoch = s.producer_epoch, s.last_producer_id, s.last_producer_epoch
    if transaction_version >= 2:
        if s.producer_epoch < MAX_PRODUCER_EPOCH:
            epoch = s.producer_epoch + 1
        else:
            # Only an abort can get here (a client never holds epoch MAX); let it through
            # without overflowing so the transaction can still be finished.
            if commit:
                raise CoordinatorInvariantError("commit with the reserved epoch")
        last_id, last_epoch = s.producer_id, s.producer_epoch
        if not ((next_producer_id != NO_PRODUCER_ID) == s.is_epoch_exhausted):
            raise CoordinatorInvariantError(
                f"a next producer id ({next_producer_id}) must be given exactly when the epoch is exhausted "
                f"(epoch {s.producer_epoch}, exhausted: {s.is_epoch_exhausted})")
    else:
        if next_producer_id != NO_PRODUCER_ID:
            raise CoordinatorInvariantError(
                f"a next producer id ({next_producer_id}) is only for transaction version 2 ends, "
                f"not version {transaction_version}")
    # A version-2 abort of an idle id has no start time yet; the abort itself starts it.
    no_partitions_added = s.state in _IDLE
    return dataclasses.replace(
        s,
        producer_epoch=epoch,
        last_producer_id=last_id,
        last_producer_epoch=last_epoch,
        next_producer_id=next_producer_id,
        state=target_state,
        start_timestamp_ms=now_ms if no_partitions_added else s.start_timestamp_ms,
        last_update_timestamp_ms=now_ms,
        client_transaction_version=transaction_version,
    )


def fence_and_abort(s: TxnSnapshot, *, now_ms: int) -> TxnSnapshot:
    """The coordinator aborts an Ongoing transaction with a bumped epoch that fences the producer
    that opened it (Kafka's prepareFenceProducerEpoch followed by PrepareAbort). No retry identity
    survives: the fenced producer's requests must all fail."""
    if s.state is not _S.ONGOING:
        raise CoordinatorInvariantError(f"only an Ongoing transaction can be fenced and aborted, not {s.state.name}")
    # The epoch only stays put when already at the reserved maximum, to avoid an overflow.
    epoch = s.producer_epoch + 1 if s.producer_epoch < MAX_PRODUCER_EPOCH else s.producer_epoch
    return dataclasses.replace(
        s,
        producer_epoch=epoch,
        last_producer_id=NO_PRODUCER_ID,
        last_producer_epoch=NO_PRODUCER_EPOCH,
        state=_S.PREPARE_ABORT,
        last_update_timestamp_ms=now_ms,
    )


def complete(s: TxnSnapshot, *, now_ms: int) -> TxnSnapshot:
    """Every marker is written: CompleteCommit/CompleteAbort, partitions cleared. A version-2
    overflow moves to the next producer id at epoch 0; a retry may still carry the old identity."""
    if s.state not in _PREPARED:
        raise CoordinatorInvariantError(f"a transaction completes only from a Prepare state, not {s.state.name}")
    producer_id, epoch = s.producer_id, s.producer_epoch
    last_id, last_epoch = s.last_producer_id, s.last_producer_epoch
    if s.next_producer_id != NO_PRODUCER_ID:
        producer_id, epoch = s.next_producer_id, 0
    return dataclasses.replace(
        s,
        producer_id=producer_id,
        producer_epoch=epoch,
        last_producer_id=last_id,
        last_producer_epoch=last_epoch,
        next_producer_id=NO_PRODUCER_ID,
        ongoing_txn_producer_id=NO_PRODUCER_ID,
        ongoing_txn_producer_epoch=NO_PRODUCER_EPOCH,
        state=_S.COMPLETE_COMMIT if s.state is _S.PREPARE_COMMIT else _S.COMPLETE_ABORT,
        partitions=frozenset(),
        last_update_timestamp_ms=now_ms,
    )


# --- the holder ---------------------------------------------------------------------------------


class WriteKind(enum.Enum):
    """Why a transaction-log write was made; decides what its completion and failure do."""

    INIT_PRODUCER_ID = "init_producer_id"
    KEEP_PREPARED = "keep_prepared"
    ADD_PARTITIONS = "add_partitions"
    END_TXN = "end_txn"
    FENCE = "fence"
    COMPLETE = "complete"
    EXPIRE = "expire"


@dataclass(frozen=True)
class PendingTransition:
    """A prepared transition: the target and the write that must be durable before it applies."""

    write_id: int
    kind: WriteKind
    target: TxnSnapshot
    # The state shown while pending (PrepareEpochFence for a fence, else the target's state).
    pending_state: TxnState
    # Builds the deferred response from the durable snapshot; None when nobody waits.
    respond: Callable[[TxnSnapshot], object] | None = None
    # Builds the error response if the write fails; None when nobody waits.
    respond_error: Callable[[ErrorCode], object] | None = None


class TransactionMetadata:
    """One transactional id: the durable snapshot and at most one transition in flight."""

    def __init__(self, transactional_id: str, current: TxnSnapshot) -> None:
        if not transactional_id:
            raise CoordinatorInvariantError("transactional ids are never empty")
        self.transactional_id = transactional_id
        self.current = current
        self.pending: PendingTransition | None = None

    def prepare(self, pending: PendingTransition, *, via: TxnState | None = None) -> None:
        """Check ``current -> target`` (through ``via`` when given) against the transition table
        and the epoch rules, then record the transition as pending."""
        # One transition at a time: callers answer CONCURRENT_TRANSACTIONS before getting here.
        if self.pending is not None:
            raise CoordinatorInvariantError("a transition is already pending")
        current, target = self.current, pending.target
        if via is None:
            check_transition(self.transactional_id, current.state, target.state)
        else:
            check_transition(self.transactional_id, current.state, via)
            check_transition(self.transactional_id, via, target.state)
        _check_identity_move(current, target)
        if target.state is _S.ONGOING and not target.partitions >= current.partitions:
            raise CoordinatorInvariantError("partitions are only ever added")
        self.pending = pending

    def complete(self, write_id: int) -> PendingTransition:
        """The pending write is durable: the target becomes the current snapshot."""
        pending = self.pending
        if not (pending is not None and pending.write_id == write_id):
            raise CoordinatorInvariantError("unknown write completed")
        if pending.target.state is not _S.DEAD:
            self.current = pending.target
        self.pending = None
        return pending

    def abort_pending(self, write_id: int) -> PendingTransition:
        """The pending write failed: forget the transition, the current snapshot stays."""
        pending = self.pending
        if not (pending is not None and pending.write_id == write_id):
            raise CoordinatorInvariantError("failure of an unknown write")
        self.pending = None
        return pending


def _check_identity_move(current: TxnSnapshot, target: TxnSnapshot) -> None:
    """Epochs only grow for one producer id; a new producer id starts at epoch 0."""
    if target.state is _S.DEAD:
        return
    if target.producer_id == current.producer_id:
        if target.producer_epoch < current.producer_epoch:
            raise CoordinatorInvariantError(f"epoch would go back from {current.producer_epoch} to {target.producer_epoch}")
    else:
        if target.producer_epoch != 0:
            raise CoordinatorInvariantError("a new producer id starts at epoch 0")
