"""The classic group state machine: five states and ONE table of legal previous states.

Mirrors Apache Kafka's GroupState (validPreviousStates). Every transition of a group goes through
:func:`check_transition`, which raises :class:`IllegalGroupStateTransitionError` at the point of the
bug rather than letting a group drift into a state the protocol does not allow.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType

from kio.schema.errors import ErrorCode

from oncestream.errors import CoordinatorInvariantError, OnceStreamError


class GroupState(enum.Enum):
    """A classic group's state; ``value`` is the name DescribeGroups/ListGroups report."""

    # No members. A group may stay Empty forever if it only stores offsets ("simple" consumers).
    EMPTY = "Empty"
    # A rebalance was triggered; waiting for every known member to (re)send JoinGroup.
    PREPARING_REBALANCE = "PreparingRebalance"
    # The join phase is over; waiting for the leader's SyncGroup with the assignment.
    COMPLETING_REBALANCE = "CompletingRebalance"
    # The leader's assignment was stored and handed out; members heartbeat.
    STABLE = "Stable"
    # The group was deleted or unloaded; it must not be touched any more.
    DEAD = "Dead"


_S = GroupState

# state -> the states it may be entered from. The single source of truth for transitions.
VALID_PREVIOUS_STATES: Mapping[GroupState, frozenset[GroupState]] = MappingProxyType(
    {
        _S.PREPARING_REBALANCE: frozenset({_S.STABLE, _S.COMPLETING_REBALANCE, _S.EMPTY}),
        _S.COMPLETING_REBALANCE: frozenset({_S.PREPARING_REBALANCE}),
        _S.STABLE: frozenset({_S.COMPLETING_REBALANCE}),
        _S.DEAD: frozenset(
            {_S.STABLE, _S.PREPARING_REBALANCE, _S.COMPLETING_REBALANCE, _S.EMPTY, _S.DEAD}
        ),
        _S.EMPTY: frozenset({_S.PREPARING_REBALANCE}),
    }
)

if set(VALID_PREVIOUS_STATES) != set(GroupState):
    raise CoordinatorInvariantError("every state needs a row in the table")


class IllegalGroupStateTransitionError(OnceStreamError):
    """A coordinator bug tried a transition the table forbids; maps to UNKNOWN_SERVER_ERROR."""

    code = ErrorCode.unknown_server_error

    def __init__(self, group_id: str, current: GroupState, target: GroupState) -> None:
        super().__init__(
            f"group {group_id!r} cannot go from {current.value} to {target.value}; "
            f"{target.value} may only be entered from "
            f"{sorted(s.value for s in VALID_PREVIOUS_STATES[target])}"
        )
        self.group_id = group_id
        self.current = current
        self.target = target


def can_transition(current: GroupState, target: GroupState) -> bool:
    """True when ``target`` lists ``current`` among its legal previous states."""
    return current in VALID_PREVIOUS_STATES[target]


def check_transition(group_id: str, current: GroupState, target: GroupState) -> None:
    """Raise :class:`IllegalGroupStateTransitionError` unless ``current -> target`` is legal."""
    if not can_transition(current, target):
        raise IllegalGroupStateTransitionError(group_id, current, target)


def parse_state(name: str) -> GroupState | None:
    """The state named ``name`` (case-insensitive, as ListGroups filters are), or None."""
    lowered = name.lower()
    for state in GroupState:
        if state.value.lower() == lowered:
            return state
    return None
