"""The transaction state table (Kafka's TransactionState.validPreviousStates), exhaustively."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from kio.schema.errors import ErrorCode

from oncestream.coordinator.txn.metadata import (
    PendingTransition,
    TransactionMetadata,
    TxnSnapshot,
    WriteKind,
)
from oncestream.coordinator.txn.state import (
    EXPIRATION_ALLOWED,
    PERSISTABLE_STATES,
    VALID_PREVIOUS_STATES,
    IllegalTxnStateTransitionError,
    TxnState,
    can_transition,
    check_transition,
    parse_state,
    state_from_id,
)
from oncestream.errors import CoordinatorInvariantError

S = TxnState

# Written out independently of the implementation, from KIP-98/KIP-890 and Kafka's TransactionState:
# (from, to) pairs that are legal; every other pair must be rejected.
LEGAL = {
    (S.EMPTY, S.EMPTY),
    (S.COMPLETE_COMMIT, S.EMPTY),
    (S.COMPLETE_ABORT, S.EMPTY),
    (S.EMPTY, S.ONGOING),
    (S.ONGOING, S.ONGOING),
    (S.COMPLETE_COMMIT, S.ONGOING),
    (S.COMPLETE_ABORT, S.ONGOING),
    (S.ONGOING, S.PREPARE_COMMIT),
    (S.ONGOING, S.PREPARE_ABORT),
    (S.PREPARE_EPOCH_FENCE, S.PREPARE_ABORT),
    (S.EMPTY, S.PREPARE_ABORT),
    (S.COMPLETE_COMMIT, S.PREPARE_ABORT),
    (S.COMPLETE_ABORT, S.PREPARE_ABORT),
    (S.PREPARE_COMMIT, S.COMPLETE_COMMIT),
    (S.PREPARE_ABORT, S.COMPLETE_ABORT),
    (S.EMPTY, S.DEAD),
    (S.COMPLETE_COMMIT, S.DEAD),
    (S.COMPLETE_ABORT, S.DEAD),
    (S.ONGOING, S.PREPARE_EPOCH_FENCE),
}
LEGAL_SORTED = sorted(LEGAL, key=lambda p: (p[0].value, p[1].value))
ILLEGAL = sorted(
    set(itertools.product(TxnState, TxnState)) - LEGAL, key=lambda p: (p[0].value, p[1].value)
)


@pytest.mark.parametrize(("current", "target"), LEGAL_SORTED)
def test_every_legal_transition_is_accepted(current: TxnState, target: TxnState) -> None:
    assert can_transition(current, target)
    check_transition("tid", current, target)


@pytest.mark.parametrize(("current", "target"), ILLEGAL)
def test_every_other_transition_is_rejected(current: TxnState, target: TxnState) -> None:
    assert not can_transition(current, target)
    with pytest.raises(IllegalTxnStateTransitionError) as info:
        check_transition("tid", current, target)
    assert info.value.code == ErrorCode.unknown_server_error
    assert info.value.current is current
    assert info.value.target is target


def test_table_has_one_row_per_state_and_nothing_leaves_dead() -> None:
    assert set(VALID_PREVIOUS_STATES) == set(TxnState)
    assert not any(S.DEAD in previous for previous in VALID_PREVIOUS_STATES.values())


def test_state_ids_and_names_are_kafkas() -> None:
    assert [state_from_id(i) for i in range(8)] == [
        S.EMPTY, S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT,
        S.COMPLETE_COMMIT, S.COMPLETE_ABORT, S.DEAD, S.PREPARE_EPOCH_FENCE,
    ]  # fmt: skip
    assert all(state_from_id(s.id) is s for s in TxnState)
    with pytest.raises(ValueError, match=r"unknown transaction state id 8"):
        state_from_id(8)
    assert parse_state("PrepareCommit") is S.PREPARE_COMMIT
    assert parse_state("preparecommit") is None
    assert S.DEAD not in PERSISTABLE_STATES
    assert S.PREPARE_EPOCH_FENCE not in PERSISTABLE_STATES
    assert EXPIRATION_ALLOWED == {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}


def _snapshot(state: TxnState, epoch: int = 3) -> TxnSnapshot:
    return dataclasses.replace(
        TxnSnapshot.fresh(7, 60_000, 0),
        producer_epoch=epoch,
        state=state,
        start_timestamp_ms=-1 if state is S.EMPTY else 5,
    )


def test_metadata_rejects_an_illegal_transition_and_keeps_its_state() -> None:
    meta = TransactionMetadata("tid", _snapshot(S.EMPTY))
    target = _snapshot(S.COMPLETE_COMMIT)
    with pytest.raises(IllegalTxnStateTransitionError):
        meta.prepare(PendingTransition(1, WriteKind.COMPLETE, target, target.state))
    assert meta.pending is None
    assert meta.current.state is S.EMPTY


def test_metadata_applies_a_transition_only_when_its_write_completes() -> None:
    meta = TransactionMetadata("tid", _snapshot(S.ONGOING))
    target = _snapshot(S.PREPARE_COMMIT)
    meta.prepare(PendingTransition(9, WriteKind.END_TXN, target, target.state))
    assert meta.current.state is S.ONGOING
    with pytest.raises(CoordinatorInvariantError):
        meta.complete(8)
    meta.complete(9)
    assert meta.current is target
    assert meta.pending is None


def test_metadata_forgets_a_failed_write() -> None:
    meta = TransactionMetadata("tid", _snapshot(S.ONGOING))
    target = _snapshot(S.PREPARE_ABORT)
    meta.prepare(PendingTransition(4, WriteKind.END_TXN, target, target.state))
    meta.abort_pending(4)
    assert meta.current.state is S.ONGOING
    assert meta.pending is None


def test_metadata_refuses_an_epoch_going_back() -> None:
    meta = TransactionMetadata("tid", _snapshot(S.EMPTY, epoch=5))
    target = _snapshot(S.EMPTY, epoch=4)
    with pytest.raises(CoordinatorInvariantError):
        meta.prepare(PendingTransition(1, WriteKind.INIT_PRODUCER_ID, target, target.state))


def test_fence_goes_through_prepare_epoch_fence() -> None:
    meta = TransactionMetadata("tid", _snapshot(S.ONGOING))
    target = _snapshot(S.PREPARE_ABORT, epoch=4)
    meta.prepare(
        PendingTransition(1, WriteKind.FENCE, target, S.PREPARE_EPOCH_FENCE),
        via=S.PREPARE_EPOCH_FENCE,
    )
    assert meta.pending is not None
    assert meta.pending.pending_state is S.PREPARE_EPOCH_FENCE
    idle = TransactionMetadata("tid2", _snapshot(S.COMPLETE_COMMIT))
    with pytest.raises(IllegalTxnStateTransitionError):
        idle.prepare(
            PendingTransition(2, WriteKind.FENCE, target, S.PREPARE_EPOCH_FENCE),
            via=S.PREPARE_EPOCH_FENCE,
        )
