"""The classic group state machine: one table of legal previous states, every transition checked."""

from __future__ import annotations

import itertools
from typing import ClassVar

import pytest
from kio.schema.errors import ErrorCode

from oncestream.coordinator.group import (
    VALID_PREVIOUS_STATES,
    GroupCoordinator,
    GroupCoordinatorConfig,
    GroupState,
    IllegalGroupStateTransitionError,
)
from oncestream.coordinator.group.group import GroupMetadata
from oncestream.coordinator.group.state import (
    can_transition,
    check_transition,
    parse_state,
)
from oncestream.errors import OnceStreamError
from tests.support.group_harness import GroupHarness

S = GroupState

# Kafka's GroupState.validPreviousStates, written out independently of the implementation.
EXPECTED_LEGAL = {
    (S.STABLE, S.PREPARING_REBALANCE),
    (S.COMPLETING_REBALANCE, S.PREPARING_REBALANCE),
    (S.EMPTY, S.PREPARING_REBALANCE),
    (S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE),
    (S.COMPLETING_REBALANCE, S.STABLE),
    (S.STABLE, S.DEAD),
    (S.PREPARING_REBALANCE, S.DEAD),
    (S.COMPLETING_REBALANCE, S.DEAD),
    (S.EMPTY, S.DEAD),
    (S.DEAD, S.DEAD),
    (S.PREPARING_REBALANCE, S.EMPTY),
}

ALL_PAIRS = list(itertools.product(GroupState, GroupState))


def test_table_matches_kafka_valid_previous_states() -> None:
    table_pairs = {
        (prev, state) for state, prevs in VALID_PREVIOUS_STATES.items() for prev in prevs
    }
    assert table_pairs == EXPECTED_LEGAL


@pytest.mark.parametrize(("current", "target"), sorted(EXPECTED_LEGAL, key=str))
def test_every_legal_transition_is_accepted(current: GroupState, target: GroupState) -> None:
    group = GroupMetadata("g", now_ms=0)
    group.state = current
    group.transition_to(target, now_ms=5)
    assert group.state is target
    assert group.state_timestamp_ms == 5


@pytest.mark.parametrize(
    ("current", "target"), [p for p in ALL_PAIRS if p not in EXPECTED_LEGAL], ids=str
)
def test_every_illegal_transition_is_rejected(current: GroupState, target: GroupState) -> None:
    group = GroupMetadata("g", now_ms=0)
    group.state = current
    with pytest.raises(IllegalGroupStateTransitionError) as info:
        group.transition_to(target, now_ms=5)
    # The group is untouched and the error names both ends of the bad edge.
    assert group.state is current
    assert info.value.current is current
    assert info.value.target is target
    assert current.value in str(info.value)
    assert target.value in str(info.value)
    assert isinstance(info.value, OnceStreamError)
    assert info.value.code == ErrorCode.unknown_server_error
    assert not can_transition(current, target)


def test_check_transition_names_the_group() -> None:
    with pytest.raises(IllegalGroupStateTransitionError, match="'orders'"):
        check_transition("orders", S.EMPTY, S.STABLE)


def test_state_names_are_the_ones_describe_groups_reports() -> None:
    assert [s.value for s in GroupState] == [
        "Empty",
        "PreparingRebalance",
        "CompletingRebalance",
        "Stable",
        "Dead",
    ]
    assert parse_state("stable") is S.STABLE
    assert parse_state("PREPARINGREBALANCE") is S.PREPARING_REBALANCE
    assert parse_state("bogus") is None


class _TracingGroup(GroupMetadata):
    """Records every transition the coordinator makes."""

    seen: ClassVar[list[tuple[GroupState, GroupState]]] = []

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        _TracingGroup.seen.append((self.state, target))
        super().transition_to(target, now_ms)


def test_coordinator_walks_every_legal_edge(monkeypatch: pytest.MonkeyPatch) -> None:
    """Drive real protocol flows until the coordinator has taken every edge of the table."""
    import oncestream.coordinator.group.coordinator as coordinator_module
    import oncestream.coordinator.group.membership as membership_module
    import oncestream.coordinator.group.offsets as offsets_module

    _TracingGroup.seen = []
    # Groups are created by membership (JoinGroup), offsets (commits) and replay (coordinator).
    for module in (coordinator_module, membership_module, offsets_module):
        monkeypatch.setattr(module, "GroupMetadata", _TracingGroup)
    coordinator = GroupCoordinator(GroupCoordinatorConfig(group_initial_rebalance_delay_ms=0))
    h = GroupHarness(coordinator)

    # Empty -> Preparing -> Completing -> Stable.
    a = h.join("g", now_ms=0, client_id="a").result
    h.sync("g", a.member_id, 1, now_ms=0, assignments={a.member_id: b"A"})
    # Stable -> Preparing (a new member) -> Completing.
    b = h.join("g", now_ms=1, client_id="b")
    a2 = h.join("g", a.member_id, now_ms=1).result
    assert b.result.generation_id == a2.generation_id == 2
    # Completing -> Preparing (a member leaves before the leader synced).
    h.leave("g", b.result.member_id, now_ms=2)
    # Preparing -> Empty (the remaining member leaves; join completes with nobody).
    h.leave("g", a.member_id, now_ms=3)
    assert coordinator.group_state("g") is S.EMPTY
    # Empty -> Dead (DeleteGroups).
    coordinator.delete_groups(["g"], now_ms=4)

    # Stable / Preparing / Completing -> Dead: unloading the partition.
    flows = (("s", S.STABLE), ("p", S.PREPARING_REBALANCE), ("c", S.COMPLETING_REBALANCE))
    for group_id, target in flows:
        m = h.join(group_id, now_ms=5, client_id="m").result
        if target is S.STABLE:
            h.sync(group_id, m.member_id, 1, now_ms=5, assignments={})
        elif target is S.PREPARING_REBALANCE:
            h.sync(group_id, m.member_id, 1, now_ms=5, assignments={})
            h.join(group_id, now_ms=5, client_id="n")  # a second member: rebalance pending
        assert coordinator.group_state(group_id) is target
        partition = coordinator.partition_for(group_id)
        coordinator.unload_partition(partition)
        assert coordinator.group_state(group_id) is None
        coordinator.load([], now_ms=5, partitions=[partition])

    # Dead -> Dead is taken by DeleteGroups (marked Dead, then removed as an offset-less group).
    assert set(_TracingGroup.seen) == EXPECTED_LEGAL
