"""The transaction state machine: eight states and ONE table of legal previous states.

Mirrors Apache Kafka's TransactionState (validPreviousStates). Every transition of a transactional
id goes through :func:`check_transition`, which raises :class:`IllegalTxnStateTransitionError` at
the point of the bug instead of letting a transaction drift into a state the protocol forbids.

The numeric ``id`` of each state is the one Kafka writes in its transaction log; ours reuses it so
a record dump reads the same. ``PrepareEpochFence`` and ``Dead`` are never written as a state:
a fence is persisted as the ``PrepareAbort`` record that carries the bumped epoch (exactly as
Kafka does), and ``Dead`` is persisted as a tombstone.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType

from kio.schema.errors import ErrorCode

from oncestream.errors import CoordinatorInvariantError, OnceStreamError


class TxnState(enum.Enum):
    """A transactional id's state; ``value`` is the name Describe/ListTransactions report."""

    # No transaction open (fresh id, or InitProducerId just bumped the epoch).
    EMPTY = "Empty"
    # Partitions were added; data may be in the partitions' logs.
    ONGOING = "Ongoing"
    # EndTxn(commit) is durable: the outcome is decided; COMMIT markers are being written.
    PREPARE_COMMIT = "PrepareCommit"
    # EndTxn(abort), a timeout or a fence is durable; ABORT markers are being written.
    PREPARE_ABORT = "PrepareAbort"
    # Every partition has its COMMIT marker.
    COMPLETE_COMMIT = "CompleteCommit"
    # Every partition has its ABORT marker.
    COMPLETE_ABORT = "CompleteAbort"
    # The transactional id expired and is being removed (tombstone in flight).
    DEAD = "Dead"
    # An ongoing transaction is being aborted by the coordinator with a bumped epoch that fences
    # the producer that opened it (InitProducerId from a new instance, or a timeout).
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"

    @property
    def id(self) -> int:
        """Kafka's numeric state id (TransactionLogValue.TransactionStatus)."""
        return _STATE_IDS[self]


_S = TxnState

_STATE_IDS: Mapping[TxnState, int] = MappingProxyType(
    {
        _S.EMPTY: 0,
        _S.ONGOING: 1,
        _S.PREPARE_COMMIT: 2,
        _S.PREPARE_ABORT: 3,
        _S.COMPLETE_COMMIT: 4,
        _S.COMPLETE_ABORT: 5,
        _S.DEAD: 6,
        _S.PREPARE_EPOCH_FENCE: 7,
    }
)
_STATES_BY_ID: Mapping[int, TxnState] = MappingProxyType({v: k for k, v in _STATE_IDS.items()})

# state -> the states it may be entered from. The single source of truth for transitions.
VALID_PREVIOUS_STATES: Mapping[TxnState, frozenset[TxnState]] = MappingProxyType(
    {
        # InitProducerId (epoch bump) from any state without an open transaction.
        _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
        # AddPartitionsToTxn / AddOffsetsToTxn; Ongoing -> Ongoing also for KIP-939
        # keepPreparedTxn, which re-homes the open transaction under a new client epoch.
        _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
        _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
        # From Ongoing (EndTxn abort), from PrepareEpochFence (coordinator abort with a bumped
        # epoch), and, with transaction version 2 only, from the idle states: a TV2 client that is
        # unsure of the server state may always send EndTxn(abort) (KIP-890).
        _S.PREPARE_ABORT: frozenset(
            {_S.ONGOING, _S.PREPARE_EPOCH_FENCE, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}
        ),
        _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
        _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
        # transactional.id.expiration.ms: only ids without an open transaction expire.
        _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
        _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
    }
)

if set(VALID_PREVIOUS_STATES) != set(TxnState):
    raise CoordinatorInvariantError("every state needs a row in the table")

# States in which a transactional id may expire (Kafka's isExpirationAllowed).
EXPIRATION_ALLOWED: frozenset[TxnState] = frozenset(
    {_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}
)

# States that can be the content of a transaction-log value.
PERSISTABLE_STATES: frozenset[TxnState] = frozenset(TxnState) - {_S.DEAD, _S.PREPARE_EPOCH_FENCE}


class IllegalTxnStateTransitionError(OnceStreamError):
    """A coordinator bug tried a transition the table forbids; maps to UNKNOWN_SERVER_ERROR."""

    code = ErrorCode.unknown_server_error

    def __init__(self, transactional_id: str, current: TxnState, target: TxnState) -> None:
        super().__init__(
            f"transactional id {transactional_id!r} cannot go from {current.value} to "
            f"{target.value}; {target.value} may only be entered from "
            f"{sorted(s.value for s in VALID_PREVIOUS_STATES[target])}"
        )
        self.transactional_id = transactional_id
        self.current = current
        self.target = target


def can_transition(current: TxnState, target: TxnState) -> bool:
    """True when ``target`` lists ``current`` among its legal previous states."""
    return current in VALID_PREVIOUS_STATES[target]


def check_transition(transactional_id: str, current: TxnState, target: TxnState) -> None:
    """Raise :class:`IllegalTxnStateTransitionError` unless ``current -> target`` is legal."""
    if not can_transition(current, target):
        raise IllegalTxnStateTransitionError(transactional_id, current, target)


def state_from_id(state_id: int) -> TxnState:
    """The state with Kafka's numeric id ``state_id``; ValueError if there is none."""
    try:
        return _STATES_BY_ID[state_id]
    except KeyError:
        raise ValueError(f"unknown transaction state id {state_id}") from None


def parse_state(name: str) -> TxnState | None:
    """The state named ``name`` exactly as Kafka spells it (ListTransactions filters), or None."""
    for state in TxnState:
        if state.value == name:
            return state
    return None
