"""JoinGroup / SyncGroup / Heartbeat / LeaveGroup of the classic group protocol, sans-io."""

from __future__ import annotations

import itertools
from typing import Any

from kio.schema.errors import ErrorCode

from oncestream.coordinator.group import (
    GroupCoordinator,
    GroupCoordinatorConfig,
    GroupState,
    JoinProtocol,
    JoinRequest,
    JoinResult,
    LeavingMember,
    TopicPartition,
)
from tests.support.group_harness import GroupHarness

E = ErrorCode
S = GroupState
DELAY_MS = 100


def make(**overrides: int) -> tuple[GroupCoordinator, GroupHarness]:
    settings: dict[str, Any] = {"group_initial_rebalance_delay_ms": DELAY_MS, **overrides}
    counter = itertools.count(1)
    coordinator = GroupCoordinator(
        GroupCoordinatorConfig(**settings), member_id_suffix=lambda: str(next(counter))
    )
    return coordinator, GroupHarness(coordinator)


def form_group(h: GroupHarness, n: int, *, now_ms: int = 0, group: str = "g") -> list[str]:
    """n members join together, the leader assigns b"<member id>" to each; returns member ids."""
    joins = [h.join(group, now_ms=now_ms, client_id=f"c{i}") for i in range(n)]
    h.tick(now_ms + 10 * DELAY_MS)
    results = [j.result for j in joins]
    assert all(r.error == E.none for r in results)
    ids = [r.member_id for r in results]
    leader = results[0].leader_id
    generation = results[0].generation_id
    syncs = {
        m: h.sync(
            group,
            m,
            generation,
            now_ms=now_ms + 10 * DELAY_MS,
            assignments={x: x.encode() for x in ids} if m == leader else None,
        )
        for m in ids
    }
    assert all(s.result.assignment == m.encode() for m, s in syncs.items())
    return ids


# --- forming a group ------------------------------------------------------------------------------


def test_two_members_join_one_leader_generation_1_assignment_via_sync() -> None:
    coordinator, h = make()
    first = h.join("g", now_ms=0, client_id="c1", protocols=[("range", b"meta-1")])
    second = h.join("g", now_ms=10, client_id="c2", protocols=[("range", b"meta-2")])
    assert not first.done
    assert not second.done
    assert coordinator.group_state("g") is S.PREPARING_REBALANCE

    h.tick(1_000)
    a, b = first.result, second.result
    assert a.error == b.error == E.none
    assert a.generation_id == b.generation_id == 1
    assert a.protocol_type == "consumer"
    assert a.protocol_name == "range"
    assert a.leader_id == b.leader_id == a.member_id  # the first member leads
    assert {(m.member_id, m.metadata) for m in a.members} == {
        (a.member_id, b"meta-1"),
        (b.member_id, b"meta-2"),
    }
    assert b.members == ()  # followers get an empty member list
    assert coordinator.group_state("g") is S.COMPLETING_REBALANCE

    # The follower syncs first and waits for the leader's assignment.
    follower_sync = h.sync("g", b.member_id, 1, now_ms=1_001)
    assert not follower_sync.done
    leader_sync = h.sync(
        "g", a.member_id, 1, now_ms=1_002, assignments={a.member_id: b"A", b.member_id: b"B"}
    )
    assert leader_sync.result.error == E.none
    assert leader_sync.result.assignment == b"A"
    assert follower_sync.result.error == E.none
    assert follower_sync.result.assignment == b"B"
    assert follower_sync.result.protocol_name == "range"
    assert coordinator.group_state("g") is S.STABLE
    # The assignment was persisted before anyone was answered.
    assert len(h.log) == 1

    # Late syncs in Stable just get the stored assignment.
    again = h.sync("g", b.member_id, 1, now_ms=1_003)
    assert again.result.assignment == b"B"


def test_leader_sync_fills_missing_members_with_empty_assignment() -> None:
    _, h = make()
    ids = [h.join("g", now_ms=0, client_id=f"c{i}") for i in range(2)]
    h.tick(1_000)
    leader, follower = ids[0].result.member_id, ids[1].result.member_id
    follower_sync = h.sync("g", follower, 1, now_ms=1_000)
    h.sync("g", leader, 1, now_ms=1_000, assignments={leader: b"all", "ghost": b"x"})
    assert follower_sync.result.error == E.none
    assert follower_sync.result.assignment == b""


def test_third_member_triggers_rebalance_and_heartbeats_say_rebalance_in_progress() -> None:
    coordinator, h = make()
    a, b = form_group(h, 2)
    assert h.heartbeat("g", a, 1, now_ms=2_000) == E.none

    c = h.join("g", now_ms=2_000, client_id="c3")
    assert not c.done
    assert coordinator.group_state("g") is S.PREPARING_REBALANCE
    assert h.heartbeat("g", a, 1, now_ms=2_001) == E.rebalance_in_progress
    assert h.heartbeat("g", b, 1, now_ms=2_001) == E.rebalance_in_progress

    # Existing members rejoin; the join phase completes as soon as all known members are in.
    ja = h.join("g", a, now_ms=2_002)
    assert not ja.done
    jb = h.join("g", b, now_ms=2_003)
    results = [ja.result, jb.result, c.result]
    assert {r.generation_id for r in results} == {2}
    assert [len(r.members) for r in results] == [3, 0, 0]
    assert coordinator.group_state("g") is S.COMPLETING_REBALANCE
    # Heartbeats with the new generation are fine again; the old generation is fenced.
    assert h.heartbeat("g", b, 2, now_ms=2_004) == E.none
    assert h.heartbeat("g", b, 1, now_ms=2_004) == E.illegal_generation


def test_sync_during_preparing_rebalance_is_rebalance_in_progress() -> None:
    _, h = make()
    a, _ = form_group(h, 2)
    h.join("g", now_ms=2_000, client_id="c3")
    assert h.sync("g", a, 1, now_ms=2_001).result.error == E.rebalance_in_progress


def test_rebalance_aborts_members_waiting_in_sync() -> None:
    """A new join during CompletingRebalance answers waiting syncs with REBALANCE_IN_PROGRESS."""
    _, h = make()
    joins = [h.join("g", now_ms=0, client_id=f"c{i}") for i in range(2)]
    h.tick(1_000)
    follower = joins[1].result.member_id
    waiting = h.sync("g", follower, 1, now_ms=1_000)
    h.join("g", now_ms=1_001, client_id="late")
    assert waiting.result.error == E.rebalance_in_progress


def test_leave_triggers_rebalance_and_remaining_member_rejoins() -> None:
    coordinator, h = make()
    a, b = form_group(h, 2)
    result = h.leave("g", b, now_ms=2_000)
    assert result.error == E.none
    assert [(m.member_id, m.error) for m in result.members] == [(b, E.none)]
    assert coordinator.group_state("g") is S.PREPARING_REBALANCE
    assert h.heartbeat("g", a, 1, now_ms=2_001) == E.rebalance_in_progress
    assert h.heartbeat("g", b, 1, now_ms=2_001) == E.unknown_member_id

    rejoin = h.join("g", a, now_ms=2_002).result
    assert rejoin.generation_id == 2
    assert [m.member_id for m in rejoin.members] == [a]


def test_leave_batch_per_member_errors_and_static_removal_by_instance_id() -> None:
    coordinator, h = make()
    s1 = h.join("g", now_ms=0, client_id="s", instance_id="inst-1")
    d1 = h.join("g", now_ms=0, client_id="d")
    h.tick(1_000)
    static_id, dynamic_id = s1.result.member_id, d1.result.member_id
    result = h.leave(
        "g",
        LeavingMember("", "inst-1"),  # admin removal by instance id
        LeavingMember(dynamic_id),
        LeavingMember("nobody"),
        LeavingMember("", "inst-unknown"),
        now_ms=1_001,
    )
    assert [m.error for m in result.members] == [
        E.none,
        E.none,
        E.unknown_member_id,
        E.unknown_member_id,
    ]
    assert coordinator.group_state("g") is S.EMPTY
    assert coordinator.group_snapshot("g").members == ()  # type: ignore[union-attr]
    assert static_id != dynamic_id


def test_leave_with_fenced_instance_id() -> None:
    _, h = make()
    h.join("g", now_ms=0, client_id="s", instance_id="inst-1")
    h.tick(1_000)
    result = h.leave("g", LeavingMember("stale-id", "inst-1"), now_ms=1_001)
    assert result.members[0].error == E.fenced_instance_id


def test_leave_unknown_group_reports_each_member_unknown() -> None:
    _, h = make()
    result = h.leave("nope", "m1", "m2", now_ms=0)
    assert result.error == E.none
    assert [m.error for m in result.members] == [E.unknown_member_id] * 2


# --- timeouts -------------------------------------------------------------------------------------


def test_session_expiry_removes_member_and_triggers_rebalance() -> None:
    coordinator, h = make()
    a, b = form_group(h, 2, now_ms=0)  # Stable at t=1_000, session 10 s
    # a keeps heartbeating, b goes silent.
    for t in range(3_000, 12_000, 3_000):
        assert h.heartbeat("g", a, 1, now_ms=t) == E.none
    h.tick(10_999)
    assert coordinator.group_state("g") is S.STABLE
    h.tick(11_000)  # b's session (reset by its sync at t=1_000) has expired
    assert coordinator.group_state("g") is S.PREPARING_REBALANCE
    assert h.heartbeat("g", b, 1, now_ms=11_001) == E.unknown_member_id
    assert h.heartbeat("g", a, 1, now_ms=11_001) == E.rebalance_in_progress
    rejoin = h.join("g", a, now_ms=11_002).result
    assert rejoin.generation_id == 2
    assert [m.member_id for m in rejoin.members] == [a]


def test_heartbeat_resets_the_session_timer() -> None:
    coordinator, h = make()
    (a,) = form_group(h, 1)
    for t in range(5_000, 60_000, 5_000):
        assert h.heartbeat("g", a, 1, now_ms=t) == E.none
        h.tick(t)
    assert coordinator.group_state("g") is S.STABLE
    assert coordinator.next_deadline_ms() is not None


def test_expired_member_is_gone_even_before_tick() -> None:
    """A request after the deadline sees the member expired, as Kafka's timer thread would."""
    _, h = make()
    (a,) = form_group(h, 1)
    assert h.heartbeat("g", a, 1, now_ms=50_000) == E.unknown_member_id


def test_rebalance_timeout_removes_members_that_did_not_rejoin() -> None:
    coordinator, h = make()
    a, b, c = form_group(h, 3)
    new = h.join("g", now_ms=2_000, client_id="new", rebalance_timeout_ms=5_000)
    ja = h.join("g", a, now_ms=2_100, rebalance_timeout_ms=5_000)
    # b and c stay alive (heartbeats) but never rejoin.
    for t in range(3_000, 32_000, 5_000):
        assert h.heartbeat("g", b, 1, now_ms=t) == E.rebalance_in_progress
        assert h.heartbeat("g", c, 1, now_ms=t) == E.rebalance_in_progress
    h.tick(31_999)  # the rebalance timeout is the largest among members: 30 s from t=2_000
    assert not ja.done
    h.tick(32_000)
    assert ja.result.generation_id == new.result.generation_id == 2
    assert {m.member_id for m in ja.result.members} == {a, new.result.member_id}
    assert h.heartbeat("g", b, 2, now_ms=32_001) == E.unknown_member_id
    assert h.heartbeat("g", c, 1, now_ms=32_001) == E.unknown_member_id
    assert coordinator.group_state("g") is S.COMPLETING_REBALANCE


def test_member_that_never_syncs_is_removed_after_rebalance_timeout() -> None:
    coordinator, h = make()
    joins = [
        h.join("g", now_ms=0, client_id=f"c{i}", rebalance_timeout_ms=5_000) for i in range(2)
    ]
    h.tick(1_000)
    leader, follower = (j.result.member_id for j in joins)
    h.sync("g", leader, 1, now_ms=1_500, assignments={leader: b"L", follower: b"F"})
    assert coordinator.group_state("g") is S.STABLE
    for t in (3_000, 5_000):  # alive, just never syncs
        assert h.heartbeat("g", follower, 1, now_ms=t) == E.none
    h.tick(6_000)  # 5 s after the join phase ended, the follower still has not synced
    assert coordinator.group_state("g") is S.PREPARING_REBALANCE
    assert h.heartbeat("g", follower, 1, now_ms=6_001) == E.unknown_member_id


def test_new_member_that_joined_and_vanished_is_dropped_after_join_timeout() -> None:
    coordinator, h = make(new_member_join_timeout_ms=60_000)
    (a,) = form_group(h, 1)
    pending = h.join("g", now_ms=2_000, client_id="new", rebalance_timeout_ms=600_000)
    # a stays alive but never rejoins, so the rebalance would last 10 minutes; the new member's
    # JoinGroup is bounded by the new-member timeout instead.
    for t in range(5_000, 62_000, 5_000):
        assert h.heartbeat("g", a, 1, now_ms=t) == E.rebalance_in_progress
    assert not pending.done
    h.tick(62_000)
    assert pending.result.error == E.unknown_member_id
    assert coordinator.group_state("g") is S.PREPARING_REBALANCE


# --- KIP-394 --------------------------------------------------------------------------------------


def test_member_id_required_then_rejoin_with_the_given_id() -> None:
    coordinator, h = make()
    first = h.join("g", now_ms=0, client_id="cli", api_version=4).result
    assert first.error == E.member_id_required
    assert first.member_id.startswith("cli-")
    assert first.generation_id == -1
    assert coordinator.group_state("g") is S.EMPTY  # a pending member does not rebalance

    second = h.join("g", first.member_id, now_ms=10, api_version=4)
    h.tick(1_000)
    assert second.result.error == E.none
    assert second.result.member_id == first.member_id
    assert second.result.leader_id == first.member_id


def test_old_join_versions_get_a_member_id_directly() -> None:
    _, h = make()
    join = h.join("g", now_ms=0, client_id="old", api_version=3)
    h.tick(1_000)
    assert join.result.error == E.none
    assert join.result.member_id.startswith("old-")


def test_pending_member_blocks_join_completion_until_its_session_expires() -> None:
    coordinator, h = make()
    (a,) = form_group(h, 1)
    pending = h.join("g", now_ms=2_000, client_id="p", api_version=4).result
    assert pending.error == E.member_id_required
    # A second newcomer completes its KIP-394 handshake and starts a rebalance.
    got = h.join("g", now_ms=2_000, client_id="q", api_version=4).result
    q = h.join("g", got.member_id, now_ms=2_001, api_version=4)
    ja = h.join("g", a, now_ms=2_002, api_version=4)
    assert not ja.done  # everyone known rejoined, but the pending member has not come back
    h.tick(11_999)
    assert not ja.done
    h.tick(12_000)  # the pending member's session (10 s) expired: join completes
    assert ja.result.generation_id == q.result.generation_id == 2
    # The expired pending id is unknown now.
    late = h.join("g", pending.member_id, now_ms=12_001, api_version=4).result
    assert late.error == E.unknown_member_id
    assert coordinator.group_state("g") is S.COMPLETING_REBALANCE


def test_unknown_member_id_on_join() -> None:
    _, h = make()
    assert h.join("nope", "m-1", now_ms=0).result.error == E.unknown_member_id
    form_group(h, 1)
    assert h.join("g", "m-unknown", now_ms=2_000).result.error == E.unknown_member_id


# --- KIP-345 static membership --------------------------------------------------------------------


def test_static_member_restart_keeps_assignment_without_rebalance() -> None:
    coordinator, h = make()
    s = h.join("g", now_ms=0, client_id="s", instance_id="inst-s")
    d = h.join("g", now_ms=0, client_id="d")
    h.tick(1_000)
    old_static, dynamic = s.result.member_id, d.result.member_id
    leader = s.result.leader_id
    h.sync("g", dynamic, 1, now_ms=1_000)
    h.sync("g", leader, 1, now_ms=1_000, assignments={old_static: b"S", dynamic: b"D"})
    assert coordinator.group_state("g") is S.STABLE
    writes_before = len(h.log)

    # The static member restarts: it comes back with no member id but the same instance id.
    restarted = h.join("g", now_ms=5_000, client_id="s", instance_id="inst-s").result
    assert restarted.error == E.none
    assert restarted.member_id != old_static
    assert restarted.generation_id == 1  # no new generation
    assert coordinator.group_state("g") is S.STABLE  # no rebalance
    # Pre-KIP-814 clients are told the *old* leader id, so they never act as leader here.
    assert restarted.leader_id == old_static
    assert restarted.members == ()
    # The replacement was persisted (the new member id must survive a coordinator failover).
    assert len(h.log) == writes_before + 1

    sync = h.sync("g", restarted.member_id, 1, now_ms=5_001, instance_id="inst-s").result
    assert sync.error == E.none
    assert sync.assignment == b"S"
    assert h.heartbeat("g", dynamic, 1, now_ms=5_002) == E.none
    # The previous incarnation is fenced everywhere.
    fenced = h.heartbeat("g", old_static, 1, now_ms=5_003, instance_id="inst-s")
    assert fenced == E.fenced_instance_id
    assert h.join("g", old_static, now_ms=5_004, instance_id="inst-s").result.error == (
        E.fenced_instance_id
    )
    assert h.sync("g", old_static, 1, now_ms=5_005, instance_id="inst-s").result.error == (
        E.fenced_instance_id
    )
    assert coordinator.group_state("g") is S.STABLE


def test_static_leader_restart_with_kip_814_skips_assignment() -> None:
    _, h = make()
    lead = h.join("g", now_ms=0, client_id="s", instance_id="inst-s")
    h.tick(1_000)
    old = lead.result.member_id
    h.sync("g", old, 1, now_ms=1_000, assignments={old: b"S"})
    restarted = h.join("g", now_ms=2_000, client_id="s", instance_id="inst-s", api_version=9).result
    assert restarted.skip_assignment is True
    assert restarted.leader_id == restarted.member_id
    assert [m.member_id for m in restarted.members] == [restarted.member_id]
    assert restarted.generation_id == 1


def test_static_member_waiting_in_join_is_fenced_by_its_replacement() -> None:
    _, h = make()
    (a,) = form_group(h, 1)
    s = h.join("g", now_ms=2_000, client_id="s", instance_id="inst-s")
    assert not s.done
    replacement = h.join("g", now_ms=2_001, client_id="s", instance_id="inst-s")
    assert s.result.error == E.fenced_instance_id
    h.join("g", a, now_ms=2_002)
    assert replacement.result.error == E.none
    assert replacement.result.generation_id == 2


def test_static_member_is_not_removed_by_rebalance_timeout() -> None:
    coordinator, h = make()
    s = h.join("g", now_ms=0, client_id="s", instance_id="inst-s", session_timeout_ms=60_000)
    d = h.join("g", now_ms=0, client_id="d", session_timeout_ms=60_000)
    h.tick(1_000)
    static_id, dyn = s.result.member_id, d.result.member_id
    h.sync("g", s.result.leader_id, 1, now_ms=1_000, assignments={static_id: b"S", dyn: b"D"})
    h.sync("g", dyn if s.result.leader_id != dyn else static_id, 1, now_ms=1_000)
    h.join("g", now_ms=2_000, client_id="x", rebalance_timeout_ms=5_000, session_timeout_ms=60_000)
    j = h.join("g", dyn, now_ms=2_001, rebalance_timeout_ms=5_000, session_timeout_ms=60_000)
    h.tick(32_000)  # rebalance timeout (30 s of the static member) passed
    assert j.result.generation_id == 2
    snapshot = coordinator.group_snapshot("g")
    assert snapshot is not None
    assert static_id in {m.member_id for m in snapshot.members}


# --- protocol checks ------------------------------------------------------------------------------


def test_protocol_selection_prefers_protocol_common_to_all_by_vote() -> None:
    _, h = make()
    j1 = h.join("g", now_ms=0, client_id="a", protocols=[("roundrobin", b"1"), ("range", b"1")])
    h.join("g", now_ms=0, client_id="b", protocols=[("roundrobin", b"2"), ("range", b"2")])
    h.join("g", now_ms=0, client_id="c", protocols=[("range", b"3"), ("roundrobin", b"3")])
    h.tick(1_000)
    assert j1.result.protocol_name == "roundrobin"  # 2 votes to 1


def test_protocol_selection_only_considers_protocols_all_members_support() -> None:
    _, h = make()
    j1 = h.join("g", now_ms=0, client_id="a", protocols=[("sticky", b""), ("range", b"")])
    h.join("g", now_ms=0, client_id="b", protocols=[("sticky", b""), ("range", b"")])
    h.join("g", now_ms=0, client_id="c", protocols=[("range", b""), ("cooperative", b"")])
    h.tick(1_000)
    assert j1.result.protocol_name == "range"


def test_inconsistent_group_protocol() -> None:
    coordinator, h = make()
    h.join("g", now_ms=0, client_id="a", protocols=[("range", b"")])
    bad = h.join("g", now_ms=1, client_id="b", protocols=[("roundrobin", b"")]).result
    assert bad.error == E.inconsistent_group_protocol
    wrong_type = h.join("g", now_ms=2, client_id="c", protocol_type="connect").result
    assert wrong_type.error == E.inconsistent_group_protocol
    empty = h.join("fresh", now_ms=3, protocols=[]).result
    assert empty.error == E.inconsistent_group_protocol
    h.tick(1_000)
    snapshot = coordinator.group_snapshot("g")
    assert snapshot is not None
    assert snapshot.members[0].subscription == b""


def test_sync_with_wrong_protocol_name_is_inconsistent() -> None:
    _, h = make()
    (a,) = form_group(h, 1)
    result = h.sync("g", a, 1, now_ms=2_000, protocol_type="consumer", protocol_name="other")
    assert result.result.error == E.inconsistent_group_protocol


def test_invalid_session_timeout() -> None:
    _, h = make()
    assert h.join("g", now_ms=0, session_timeout_ms=10).result.error == E.invalid_session_timeout
    assert (
        h.join("g", now_ms=0, session_timeout_ms=10**8).result.error == E.invalid_session_timeout
    )


def test_invalid_group_id() -> None:
    _, h = make()
    assert h.join("", now_ms=0).result.error == E.invalid_group_id
    assert h.heartbeat("", "m", 1, now_ms=0) == E.invalid_group_id


def test_group_max_size_reached() -> None:
    _, h = make(group_max_size=2)
    form_group(h, 2)
    third = h.join("g", now_ms=2_000, client_id="c3").result
    assert third.error == E.group_max_size_reached


# --- generation fencing ---------------------------------------------------------------------------


def test_illegal_generation_and_unknown_member_id() -> None:
    _, h = make()
    a, _ = form_group(h, 2)
    assert h.heartbeat("g", a, 0, now_ms=2_000) == E.illegal_generation
    assert h.heartbeat("g", a, 2, now_ms=2_000) == E.illegal_generation
    assert h.heartbeat("g", "ghost", 1, now_ms=2_000) == E.unknown_member_id
    assert h.heartbeat("nope", a, 1, now_ms=2_000) == E.unknown_member_id
    assert h.sync("g", a, 7, now_ms=2_000).result.error == E.illegal_generation
    assert h.sync("g", "ghost", 1, now_ms=2_000).result.error == E.unknown_member_id
    assert h.sync("nope", a, 1, now_ms=2_000).result.error == E.unknown_member_id


def test_kip345_heartbeat_and_sync_naming_an_instance_id_nobody_owns_are_unknown_member_id() -> None:
    """Kafka's validateCurrentMember: a group.instance.id must be owned, and by the sender; a
    live dynamic member that names an instance id nobody owns is not trusted (UNKNOWN_MEMBER_ID).
    (Another member's instance id is FENCED_INSTANCE_ID: test_duplicate_static_instance_...)"""
    _, h = make()
    a, b = form_group(h, 2)
    assert h.heartbeat("g", a, 1, now_ms=2_000) == E.none
    assert h.heartbeat("g", a, 1, now_ms=2_000, instance_id="nobody") == E.unknown_member_id
    assert h.sync("g", a, 1, now_ms=2_000, instance_id="nobody").result.error == E.unknown_member_id
    assert h.heartbeat("g", b, 1, now_ms=2_000) == E.none  # nothing changed for the group


def test_repeated_join_in_completing_rebalance_returns_current_generation() -> None:
    _, h = make()
    joins = [h.join("g", now_ms=0, client_id=f"c{i}") for i in range(2)]
    h.tick(1_000)
    leader = joins[0].result.member_id
    again = h.join("g", leader, now_ms=1_001).result  # same metadata: lost response replayed
    assert again.generation_id == 1
    assert len(again.members) == 2


def test_stable_follower_rejoin_without_change_gets_current_generation() -> None:
    coordinator, h = make()
    a, b = form_group(h, 2)
    again = h.join("g", b, now_ms=2_000).result
    assert again.error == E.none
    assert again.generation_id == 1
    assert again.members == ()
    assert coordinator.group_state("g") is S.STABLE
    # The leader rejoining forces a rebalance (topic metadata may have changed).
    h.join("g", a, now_ms=2_001)
    assert coordinator.group_state("g") is S.PREPARING_REBALANCE


# --- group.initial.rebalance.delay.ms -----------------------------------------------------------


def test_initial_rebalance_delay_waits_then_completes() -> None:
    coordinator, h = make(group_initial_rebalance_delay_ms=3_000)
    join = h.join("g", now_ms=0, rebalance_timeout_ms=10_000)
    h.tick(2_999)
    assert not join.done
    assert coordinator.next_deadline_ms() == 3_000
    h.tick(3_000)
    assert join.result.generation_id == 1


def test_initial_rebalance_delay_extends_for_new_members_up_to_rebalance_timeout() -> None:
    coordinator, h = make(group_initial_rebalance_delay_ms=3_000)
    joins = [h.join("g", now_ms=0, client_id="c0", rebalance_timeout_ms=10_000)]
    # A new member arrives during every delay window.
    for i, t in enumerate((1_000, 4_000, 7_000, 9_500), start=1):
        h.tick(t)
        assert not any(j.done for j in joins)
        joins.append(h.join("g", now_ms=t, client_id=f"c{i}", rebalance_timeout_ms=10_000))
    h.tick(9_999)
    assert not any(j.done for j in joins)
    h.tick(10_000)  # the delay can never exceed the rebalance timeout
    assert {j.result.generation_id for j in joins} == {1}
    assert len(joins[0].result.members) == 5
    assert coordinator.group_state("g") is S.COMPLETING_REBALANCE


def test_initial_delay_ends_after_one_quiet_window() -> None:
    _, h = make(group_initial_rebalance_delay_ms=3_000)
    a = h.join("g", now_ms=0, client_id="a", rebalance_timeout_ms=60_000)
    h.join("g", now_ms=1_000, client_id="b", rebalance_timeout_ms=60_000)
    h.tick(3_000)  # b arrived during the first window: extend by one more delay
    assert not a.done
    h.tick(5_999)
    assert not a.done
    h.tick(6_000)
    assert a.result.generation_id == 1
    assert len(a.result.members) == 2


# --- callbacks ------------------------------------------------------------------------------------


def test_callback_may_reenter_the_coordinator() -> None:
    coordinator, h = make()
    answers: list[object] = []

    def on_join(result: JoinResult) -> None:
        answers.append(result)
        # A client answering its JoinGroup with a SyncGroup from inside the callback.
        sync = h.sync(
            "g",
            result.member_id,
            result.generation_id,
            now_ms=1_000,
            assignments={result.member_id: b"x"},
        )
        answers.append(sync.result)

    request = JoinRequest("g", "", "consumer", (JoinProtocol("range", b""),), 10_000, 10_000, 3)
    h.log.append(coordinator.join_group(request, 0, on_join))
    h.tick(1_000)
    assert len(answers) == 2
    assert coordinator.group_state("g") is S.STABLE


def test_static_member_restart_into_a_full_group_is_accepted() -> None:
    coordinator, h = make(group_max_size=1)
    s = h.join("g", now_ms=0, client_id="s", instance_id="inst-s")
    h.tick(1_000)
    h.sync("g", s.result.member_id, 1, now_ms=1_000, assignments={s.result.member_id: b"S"})
    again = h.join("g", now_ms=2_000, client_id="s", instance_id="inst-s").result
    assert again.error == E.none
    assert again.generation_id == 1
    assert h.join("g", now_ms=2_001, client_id="x").result.error == E.group_max_size_reached
    assert coordinator.group_state("g") is S.STABLE


def test_duplicate_static_instance_fences_the_older_process() -> None:
    """Two processes configured with the same group.instance.id: the newer one wins (KIP-345)."""
    _, h = make()
    first = h.join("g", now_ms=0, client_id="p1", instance_id="dup")
    h.tick(1_000)
    first_id = first.result.member_id
    h.sync("g", first_id, 1, now_ms=1_000, assignments={first_id: b"P"})
    second = h.join("g", now_ms=2_000, client_id="p2", instance_id="dup").result
    assert second.error == E.none
    assert second.member_id != first_id
    # The older process is fenced on every API that names the instance id.
    assert h.heartbeat("g", first_id, 1, now_ms=2_001, instance_id="dup") == E.fenced_instance_id
    assert h.sync("g", first_id, 1, now_ms=2_002, instance_id="dup").result.error == (
        E.fenced_instance_id
    )
    assert h.join("g", first_id, now_ms=2_003, instance_id="dup").result.error == (
        E.fenced_instance_id
    )
    committed = h.commit(
        "g",
        {TopicPartition("t", 0): 1},
        now_ms=2_004,
        member_id=first_id,
        generation_id=1,
        instance_id="dup",
    )
    assert set(committed.partitions.values()) == {E.fenced_instance_id}
    assert h.heartbeat("g", second.member_id, 1, now_ms=2_005, instance_id="dup") == E.none


def test_leave_by_member_id_removes_a_static_member_too() -> None:
    """Kafka removes whichever member the LeaveGroup names, static or not; static consumers
    simply do not send LeaveGroup when they shut down (KIP-345)."""
    coordinator, h = make()
    s = h.join("g", now_ms=0, client_id="s", instance_id="inst-s")
    h.tick(1_000)
    member_id = s.result.member_id
    h.sync("g", member_id, 1, now_ms=1_000, assignments={member_id: b"S"})
    result = h.leave("g", LeavingMember(member_id), now_ms=2_000)
    assert result.members[0].error == E.none
    assert coordinator.group_state("g") is S.EMPTY
    # The instance id is free again: a new process with it starts a fresh generation.
    again = h.join("g", now_ms=3_000, client_id="s", instance_id="inst-s")
    h.tick(4_000)
    assert again.result.generation_id == 3


def test_newcomer_without_the_current_protocol_joins_and_protocol_changes() -> None:
    """A member may join if it shares a protocol with everyone, even if not the selected one."""
    coordinator, h = make()
    a = h.join("g", now_ms=0, client_id="a", protocols=[("range", b"ra"), ("rr", b"rra")])
    h.tick(1_000)
    a_id = a.result.member_id
    assert a.result.protocol_name == "range"
    h.sync("g", a_id, 1, now_ms=1_000, assignments={a_id: b"x"})
    b = h.join("g", now_ms=2_000, client_id="b", protocols=[("rr", b"rrb")])
    snapshot = coordinator.group_snapshot("g")  # mid-rebalance view stays readable
    assert snapshot is not None
    assert snapshot.members[1].subscription == b""
    a2 = h.join("g", a_id, now_ms=2_001, protocols=[("range", b"ra"), ("rr", b"rra")])
    assert a2.result.protocol_name == b.result.protocol_name == "rr"
    assert {m.metadata for m in a2.result.members} == {b"rra", b"rrb"}
