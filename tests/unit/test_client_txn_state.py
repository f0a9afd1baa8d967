"""The transactional producer's state table (Kafka's TransactionManager states + KIP-939's
PREPARED_TRANSACTION): legal paths, illegal transitions raise _STATE, and errors recorded from
the background put the producer into ABORTABLE_ERROR or FATAL_ERROR."""

from __future__ import annotations

import pytest

from oncestream.client import KafkaError, KafkaException
from oncestream.client.common.errors import _STATE
from oncestream.client.producer.txn_state import VALID_PREVIOUS, TxnState, TxnStateMachine

S = TxnState


def _machine(*path: TxnState) -> TxnStateMachine:
    sm = TxnStateMachine()
    for state in path:
        sm.transition(state)
    return sm


def test_commit_abort_and_two_phase_paths() -> None:
    sm = _machine(S.INITIALIZING, S.READY, S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.READY,
                  S.IN_TRANSACTION, S.ABORTING_TRANSACTION, S.READY,
                  S.IN_TRANSACTION, S.PREPARED_TRANSACTION, S.COMMITTING_TRANSACTION, S.READY)
    assert sm.state is S.READY
    # KIP-939 recovery: InitProducerId(keepPreparedTxn) lands directly in PREPARED_TRANSACTION.
    sm = _machine(S.INITIALIZING, S.PREPARED_TRANSACTION, S.ABORTING_TRANSACTION, S.READY)
    assert sm.state is S.READY


@pytest.mark.parametrize(
    ("path", "target"),
    [
        ((), S.IN_TRANSACTION),  # begin before init_transactions
        ((S.INITIALIZING, S.READY), S.COMMITTING_TRANSACTION),  # commit without begin
        ((S.INITIALIZING, S.READY, S.IN_TRANSACTION), S.IN_TRANSACTION),  # begin twice
        ((S.INITIALIZING, S.READY), S.PREPARED_TRANSACTION),  # prepare without a transaction
        ((S.INITIALIZING, S.READY, S.IN_TRANSACTION, S.PREPARED_TRANSACTION), S.IN_TRANSACTION),
    ],
)
def test_illegal_transitions_raise_state_errors(path: tuple[TxnState, ...], target: TxnState) -> None:
    sm = _machine(*path)
    with pytest.raises(KafkaException) as info:
        sm.transition(target)
    assert info.value.args[0].code() == _STATE


def test_prepared_transaction_may_only_be_committed_or_aborted() -> None:
    """After prepare_transaction only commit/abort/complete are allowed (KIP-939)."""
    allowed_from_prepared = {t for t, prev in VALID_PREVIOUS.items() if S.PREPARED_TRANSACTION in prev}
    assert allowed_from_prepared == {S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION, S.ABORTABLE_ERROR,
                                     S.FATAL_ERROR}


def test_background_errors_make_the_transaction_abortable_or_fatal() -> None:
    sm = _machine(S.INITIALIZING, S.READY, S.IN_TRANSACTION)
    abortable = KafkaError(10, "too large", txn_requires_abort=True)
    sm.fail(abortable)
    assert sm.state is S.ABORTABLE_ERROR
    with pytest.raises(KafkaException) as info:
        sm.require(S.IN_TRANSACTION, action="produce")
    assert info.value.args[0] is abortable
    with pytest.raises(KafkaException):
        sm.transition(S.COMMITTING_TRANSACTION)
    sm.transition(S.ABORTING_TRANSACTION)
    sm.transition(S.READY)
    fatal = KafkaError(90, "fenced", fatal=True)
    sm.fail(fatal)
    assert sm.state is S.FATAL_ERROR
    with pytest.raises(KafkaException) as info:
        sm.transition(S.IN_TRANSACTION)
    assert info.value.args[0] is fatal


def test_abortable_errors_outside_a_transaction_are_ignored() -> None:
    sm = _machine(S.INITIALIZING, S.READY)
    sm.fail(KafkaError(10, "late failure", txn_requires_abort=True))
    assert sm.state is S.READY
