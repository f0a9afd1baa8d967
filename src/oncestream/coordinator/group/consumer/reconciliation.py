"""Per-member reconciliation of a consumer group (KIP-848; Kafka's CurrentAssignmentBuilder).

A member moves from its current assignment towards the group's target assignment in steps the
client acknowledges, so that no partition is ever owned by two members at once:

* partitions the target takes away are first *revoked*: the member keeps its epoch and stays in
  UNREVOKED_PARTITIONS until its heartbeat no longer lists them as owned;
* partitions the target gives it are only handed over once no other member holds them (their
  partition epoch is free); until then the member is in UNRELEASED_PARTITIONS at the target epoch
  and gets them on a later heartbeat.

States and the transitions a reconciliation step may make (``TRANSITIONS``):

=======================  =============================================  ===============================
from                     when                                           to
=======================  =============================================  ===============================
STABLE                   target epoch is the member's                   STABLE (nothing to do)
STABLE, UNRELEASED       the member owns partitions the target drops    UNREVOKED_PARTITIONS (epoch kept)
STABLE, UNRELEASED       some target partitions are still held          UNRELEASED_PARTITIONS (target epoch)
STABLE, UNRELEASED       otherwise                                      STABLE (target epoch)
UNREVOKED_PARTITIONS     still reports a revoked partition as owned     UNREVOKED_PARTITIONS (wait)
UNREVOKED_PARTITIONS     revoked all                                    next step from epoch + 1
UNKNOWN                  reports no owned partition                     next step from the target epoch
UNKNOWN                  otherwise                                      FENCED_MEMBER_EPOCH
=======================  =============================================  ===============================
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from oncestream.coordinator.group.consumer.records import Assignment, freeze
from oncestream.errors import CoordinatorInvariantError, FencedMemberEpochError


class MemberState(enum.IntEnum):
    """A member's reconciliation state; the values are Kafka's (persisted as int8)."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127

    @classmethod
    def of(cls, value: int) -> MemberState:
        """A persisted value; one this broker does not know reads as UNKNOWN (as in Kafka)."""
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


_M = MemberState
# Which states a reconciliation step may lead to from each state.
TRANSITIONS: Mapping[MemberState, frozenset[MemberState]] = {
    _M.STABLE: frozenset({_M.STABLE, _M.UNREVOKED_PARTITIONS, _M.UNRELEASED_PARTITIONS}),
    _M.UNREVOKED_PARTITIONS: frozenset({_M.STABLE, _M.UNREVOKED_PARTITIONS, _M.UNRELEASED_PARTITIONS}),
    _M.UNRELEASED_PARTITIONS: frozenset({_M.STABLE, _M.UNREVOKED_PARTITIONS, _M.UNRELEASED_PARTITIONS}),
    _M.UNKNOWN: frozenset({_M.STABLE, _M.UNREVOKED_PARTITIONS, _M.UNRELEASED_PARTITIONS}),
}

NO_OWNER_EPOCH = -1
# topic id, partition -> epoch of the member that holds it, or NO_OWNER_EPOCH.
PartitionEpochOf = Callable[[uuid.UUID, int], int]
# What a heartbeat reports as owned: None when it did not say (not a full request).
Owned = Mapping[uuid.UUID, frozenset[int]] | None


@dataclass(frozen=True)
class Reconciled:
    """A member's assignment state (what CurrentMemberAssignment persists)."""

    member_epoch: int
    previous_member_epoch: int
    state: MemberState
    assigned: Assignment
    pending_revocation: Assignment


def _owns_any(owned: Owned, partitions: Assignment) -> bool:
    if owned is None:
        return True  # nothing reported: assume it still holds them
    return any(owned.get(t, frozenset()) & ps for t, ps in partitions.items())


def reconcile(
    current: Reconciled,
    target_epoch: int,
    target: Assignment,
    partition_epoch: PartitionEpochOf,
    owned: Owned,
) -> Reconciled:
    """One reconciliation step of ``current`` towards ``target`` (see the module's table)."""
    state = current.state
    if state == _M.STABLE:
        if current.member_epoch == target_epoch:
            return current
        result = _next(current, current.member_epoch, target_epoch, target, partition_epoch, owned)
    elif state == _M.UNREVOKED_PARTITIONS:
        if _owns_any(owned, current.pending_revocation):
            return current
        result = _next(current, current.member_epoch + 1, target_epoch, target, partition_epoch, owned)
    elif state == _M.UNRELEASED_PARTITIONS:
        result = _next(current, current.member_epoch, target_epoch, target, partition_epoch, owned)
    else:
        if owned is None or any(owned.values()):
            raise FencedMemberEpochError(
                "the member is in an unknown state: it must abandon all its partitions and rejoin")
        result = _next(current, target_epoch, target_epoch, target, partition_epoch, owned)
    if result.state not in TRANSITIONS[state]:
        raise CoordinatorInvariantError(f"illegal member transition {state.name} -> {result.state.name}")
    return result


def _next(
    current: Reconciled,
    epoch: int,
    target_epoch: int,
    target: Assignment,
    partition_epoch: PartitionEpochOf,
    owned: Owned,
) -> Reconciled:
    assigned: dict[uuid.UUID, frozenset[int]] = {}
    revoking: dict[uuid.UUID, frozenset[int]] = {}
    adding: dict[uuid.UUID, frozenset[int]] = {}
    unreleased = False
    for topic_id in set(target) | set(current.assigned):
        wanted = target.get(topic_id, frozenset())
        have = current.assigned.get(topic_id, frozenset())
        keep = have & wanted
        assigned[topic_id] = keep
        revoking[topic_id] = have - keep
        free = frozenset(p for p in wanted - keep if partition_epoch(topic_id, p) == NO_OWNER_EPOCH)
        unreleased = unreleased or len(free) < len(wanted - keep)
        adding[topic_id] = free
    revoking_f = freeze(revoking)
    base = replace(current, previous_member_epoch=current.member_epoch)
    if revoking_f and _owns_any(owned, revoking_f):
        # Revoke first; the epoch stays until the client confirms.
        return replace(base, member_epoch=epoch, state=_M.UNREVOKED_PARTITIONS,
                       assigned=freeze(assigned), pending_revocation=revoking_f)
    for topic_id, ps in adding.items():
        assigned[topic_id] = assigned[topic_id] | ps
    state = _M.UNRELEASED_PARTITIONS if unreleased else _M.STABLE
    return replace(base, member_epoch=target_epoch, state=state, assigned=freeze(assigned),
                   pending_revocation={})


def union(assignments: Iterable[Assignment]) -> dict[uuid.UUID, frozenset[int]]:
    """All partitions of several assignments."""
    out: dict[uuid.UUID, frozenset[int]] = {}
    for a in assignments:
        for t, ps in a.items():
            out[t] = out.get(t, frozenset()) | ps
    return out
