"""The transactional producer's state machine (Kafka's TransactionManager.State), as one table.

Every state lists the states it may be entered from; ``TxnStateMachine.transition`` refuses
anything else with a ``_STATE`` error naming both states, at the point the illegal call happens.
KIP-939 adds PREPARED_TRANSACTION: entered by ``prepare_transaction()`` (from IN_TRANSACTION) or by
``init_transactions(keep_prepared_txn=True)`` when the broker kept an ongoing transaction (from
INITIALIZING); it may only be left by committing or aborting.
"""

from __future__ import annotations

import enum
import threading

from oncestream.client.common.errors import _STATE, KafkaError, KafkaException


class TxnState(enum.Enum):
    """States of a transactional producer."""

    UNINITIALIZED = "Uninitialized"
    INITIALIZING = "Initializing"
    READY = "Ready"
    IN_TRANSACTION = "InTransaction"
    PREPARED_TRANSACTION = "PreparedTransaction"
    COMMITTING_TRANSACTION = "CommittingTransaction"
    ABORTING_TRANSACTION = "AbortingTransaction"
    ABORTABLE_ERROR = "AbortableError"
    FATAL_ERROR = "FatalError"


_S = TxnState

# target state -> states it may be entered from
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    _S.UNINITIALIZED: frozenset(),
    # Re-entering INITIALIZING lets init_transactions be retried after a timeout; after an abortable
    # error the epoch is bumped by re-initializing (KIP-360).
    _S.INITIALIZING: frozenset({_S.UNINITIALIZED, _S.INITIALIZING, _S.ABORTING_TRANSACTION}),
    _S.READY: frozenset({_S.INITIALIZING, _S.COMMITTING_TRANSACTION, _S.ABORTING_TRANSACTION}),
    _S.IN_TRANSACTION: frozenset({_S.READY}),
    _S.PREPARED_TRANSACTION: frozenset({_S.IN_TRANSACTION, _S.INITIALIZING}),
    _S.COMMITTING_TRANSACTION: frozenset({_S.IN_TRANSACTION, _S.PREPARED_TRANSACTION}),
    _S.ABORTING_TRANSACTION: frozenset(
        {_S.IN_TRANSACTION, _S.PREPARED_TRANSACTION, _S.ABORTABLE_ERROR}
    ),
    _S.ABORTABLE_ERROR: frozenset(
        {_S.IN_TRANSACTION, _S.COMMITTING_TRANSACTION, _S.PREPARED_TRANSACTION, _S.ABORTABLE_ERROR,
         _S.ABORTING_TRANSACTION}
    ),
    _S.FATAL_ERROR: frozenset(set(TxnState) - {_S.FATAL_ERROR}),
}


class TxnStateMachine:
    """Current state plus the error that put the producer into ABORTABLE/FATAL; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.state = _S.UNINITIALIZED
        self.last_error: KafkaError | None = None

    def transition(self, target: TxnState, error: KafkaError | None = None) -> None:
        """Move to ``target`` or raise KafkaException(_STATE)."""
        with self._lock:
            self._transition_locked(target, error)

    def _transition_locked(self, target: TxnState, error: KafkaError | None) -> None:
        current = self.state
        if current not in VALID_PREVIOUS[target]:
            if current is _S.FATAL_ERROR and self.last_error is not None:
                raise KafkaException(self.last_error)
            if current is _S.ABORTABLE_ERROR and self.last_error is not None:
                raise KafkaException(self.last_error)
            raise KafkaException(KafkaError(
                _STATE, f"invalid transaction state transition {current.value} -> {target.value}"))
        self.state = target
        if target in (_S.ABORTABLE_ERROR, _S.FATAL_ERROR):
            self.last_error = error
        elif target is _S.READY or target is _S.IN_TRANSACTION:
            self.last_error = None

    def fail(self, error: KafkaError) -> None:
        """Record an error from the background: fatal errors always win; abortable ones only
        matter while a transaction is open."""
        with self._lock:
            if self.state is _S.FATAL_ERROR:
                return
            if error.fatal():
                self.state = _S.FATAL_ERROR
                self.last_error = error
            elif self.state in (_S.IN_TRANSACTION, _S.COMMITTING_TRANSACTION,
                                _S.PREPARED_TRANSACTION, _S.ABORTABLE_ERROR):
                self.state = _S.ABORTABLE_ERROR
                self.last_error = error

    def require(self, *allowed: TxnState, action: str) -> None:
        """Raise unless the state is one of ``allowed`` (the stored error if there is one)."""
        state = self.state
        if state in allowed:
            return
        if state in (_S.FATAL_ERROR, _S.ABORTABLE_ERROR) and self.last_error is not None:
            raise KafkaException(self.last_error)
        raise KafkaException(KafkaError(_STATE, f"{action} not allowed in state {state.value}"))
