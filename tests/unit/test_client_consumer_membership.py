"""The KIP-848 member state machine (client/consumer/consumer_membership.py), driven by scripted
ConsumerGroupHeartbeat responses: no broker, no sockets, no clock but the numbers given."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode

from oncestream.client.consumer.consumer_membership import (
    LEAVE_EPOCH,
    LEAVE_STATIC_EPOCH,
    ConsumerMembership,
    HeartbeatResponse,
    IllegalMemberTransition,
    MemberState,
)

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)
NAMES = {T1: "orders", T2: "payments"}


def resolve(topic_id: uuid.UUID) -> str | None:
    return NAMES.get(topic_id)


def member(**kw: object) -> ConsumerMembership:
    m = ConsumerMembership(group_id="g", member_id="m-1", rebalance_timeout_ms=300_000, **kw)  # type: ignore[arg-type]
    return m


def ok(epoch: int, assignment: dict[uuid.UUID, set[int]] | None = None, interval_ms: int = 5000,
       member_id: str | None = None) -> HeartbeatResponse:
    return HeartbeatResponse(
        error_code=0, member_id=member_id, member_epoch=epoch, heartbeat_interval_ms=interval_ms,
        assignment=None if assignment is None else {t: frozenset(ps) for t, ps in assignment.items()})


def error(code: ErrorCode) -> HeartbeatResponse:
    return HeartbeatResponse(error_code=int(code))


def joined(m: ConsumerMembership, assignment: dict[uuid.UUID, set[int]], epoch: int = 1) -> None:
    """Subscribe, join, reconcile the first assignment and acknowledge it: STABLE."""
    m.subscribe(["orders", "payments"], None)
    m.build_heartbeat(0)
    m.on_heartbeat_response(ok(epoch, assignment), 0)
    step = m.reconciliation(resolve)
    assert step is not None
    assert m.reconciled(step)
    m.build_heartbeat(0)
    m.on_heartbeat_response(ok(epoch), 0)
    assert m.state is MemberState.STABLE


def test_join_sends_every_field_with_epoch_zero_then_reconciles_the_first_assignment() -> None:
    m = member(instance_id="i-1", rack_id="r1", server_assignor="uniform")
    assert m.state is MemberState.UNSUBSCRIBED
    assert m.heartbeat_delay_ms(0) is None  # not subscribed: nothing to send
    m.subscribe(["payments", "orders"], None)
    assert m.state is MemberState.JOINING
    assert m.heartbeat_delay_ms(0) == 0
    request = m.build_heartbeat(0)
    assert (request.member_id, request.member_epoch) == ("m-1", 0)
    assert request.instance_id == "i-1"
    assert request.rack_id == "r1"
    assert request.rebalance_timeout_ms == 300_000
    assert request.subscribed_topic_names == ("orders", "payments")
    assert request.subscribed_topic_regex is None
    assert request.server_assignor == "uniform"
    assert request.owned == ()  # a joining member owns nothing, and says so
    assert m.heartbeat_delay_ms(0) is None  # one heartbeat in flight at a time

    assert m.on_heartbeat_response(ok(3, {T1: {0, 1}, T2: {0}}), 10) is None
    assert m.state is MemberState.RECONCILING
    assert m.member_epoch == 3
    step = m.reconciliation(resolve)
    assert step is not None
    assert step.revoke == ()
    assert step.assign == (("orders", 0), ("orders", 1), ("payments", 0))
    assert step.first_since_join
    assert m.reconciliation(resolve) is None  # one step at a time
    assert m.reconciled(step)
    assert m.state is MemberState.ACKNOWLEDGING
    assert m.heartbeat_delay_ms(20) == 0  # the acknowledgement goes at once
    ack = m.build_heartbeat(20)
    assert ack.member_epoch == 3
    assert ack.owned == ((T1, (0, 1)), (T2, (0,)))
    assert m.state is MemberState.STABLE
    assert m.owned_partition_names() == [("orders", 0), ("orders", 1), ("payments", 0)]


def test_heartbeats_at_the_interval_the_broker_returns_and_send_only_changes() -> None:
    m = member()
    joined(m, {T1: {0}})
    # The last response (at 0) set the interval to 5000 ms.
    assert m.heartbeat_delay_ms(1000) == 4000
    request = m.build_heartbeat(5000)
    assert request.member_epoch == 1
    assert request.subscribed_topic_names is None
    assert request.owned is None
    assert request.rebalance_timeout_ms == -1
    m.on_heartbeat_response(ok(1, interval_ms=2000), 5010)
    assert m.heartbeat_delay_ms(5010) == 2000  # counted from the answer, as Kafka's member does
    m.subscribe(["orders"], None)
    assert m.heartbeat_delay_ms(5020) == 0  # a subscription change is told at once
    assert m.build_heartbeat(5020).subscribed_topic_names == ("orders",)


def test_a_failed_heartbeat_backs_off_and_resends_every_field() -> None:
    m = member(server_assignor="range")
    joined(m, {T1: {0}})
    m.build_heartbeat(5000)
    m.on_heartbeat_failure(5000)
    assert m.heartbeat_delay_ms(5000) == 100  # retried after retry.backoff.ms, not a whole interval
    request = m.build_heartbeat(5100)
    assert request.subscribed_topic_names == ("orders", "payments")
    assert request.owned == ((T1, (0,)),)
    assert request.server_assignor == "range"


def test_revocation_first_then_acknowledged_with_the_owned_partitions() -> None:
    m = member()
    joined(m, {T1: {0, 1}, T2: {0}})
    m.build_heartbeat(5000)
    # The coordinator takes orders-1 away (epoch unchanged until the member gives it up).
    m.on_heartbeat_response(ok(1, {T1: {0}, T2: {0}}), 5000)
    assert m.state is MemberState.RECONCILING
    step = m.reconciliation(resolve)
    assert step is not None
    assert step.revoke == (("orders", 1),)
    assert step.assign == ()
    assert not step.first_since_join
    assert m.reconciled(step)
    ack = m.build_heartbeat(5001)
    assert ack.owned == ((T1, (0,)), (T2, (0,)))
    m.on_heartbeat_response(ok(2, {T1: {0}, T2: {0, 1}}), 5002)
    step = m.reconciliation(resolve)
    assert step is not None
    assert step.revoke == ()
    assert step.assign == (("payments", 1),)
    assert step.member_epoch == 2


def test_an_unchanged_assignment_in_a_response_does_not_start_a_reconciliation() -> None:
    m = member()
    joined(m, {T1: {0}})
    m.build_heartbeat(5000)
    m.on_heartbeat_response(ok(1, {T1: {0}}), 5000)
    assert m.state is MemberState.STABLE
    assert not m.needs_poll()


@pytest.mark.parametrize("code", [ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id])
def test_fenced_member_releases_everything_and_rejoins_with_epoch_zero(code: ErrorCode) -> None:
    m = member()
    joined(m, {T1: {0, 1}}, epoch=7)
    m.build_heartbeat(5000)
    assert m.on_heartbeat_response(error(code), 5000) is None
    assert m.state is MemberState.FENCED
    assert m.needs_poll()
    assert m.heartbeat_delay_ms(5000) is None  # nothing is sent until the partitions are released
    assert m.owned_partition_names() == [("orders", 0), ("orders", 1)]  # what on_lost gets
    m.lost_handled()
    assert m.state is MemberState.JOINING
    request = m.build_heartbeat(5001)
    assert (request.member_id, request.member_epoch) == ("m-1", 0)
    assert request.owned == ()
    assert request.subscribed_topic_names == ("orders", "payments")


def test_fencing_during_a_reconciliation_voids_the_step() -> None:
    m = member()
    joined(m, {T1: {0}})
    m.build_heartbeat(5000)
    m.on_heartbeat_response(ok(2, {T1: {0, 1}}), 5000)
    step = m.reconciliation(resolve)
    assert step is not None
    m.build_heartbeat(10_000)  # heartbeats go on while the callbacks run
    m.on_heartbeat_response(error(ErrorCode.fenced_member_epoch), 10_000)
    assert not m.reconciled(step)
    assert m.state is MemberState.FENCED


def test_dynamic_member_leaves_with_epoch_minus_one_after_revoking() -> None:
    m = member()
    joined(m, {T1: {0}})
    assert m.prepare_leaving()
    assert m.state is MemberState.PREPARE_LEAVING
    # on_revoke runs before the leave is sent; heartbeats go on meanwhile at the interval.
    assert m.heartbeat_delay_ms(0) == 5000
    assert m.build_heartbeat(5000).member_epoch == 1
    m.on_heartbeat_response(ok(1), 5000)
    m.leave_ready()
    assert m.state is MemberState.LEAVING
    assert m.heartbeat_delay_ms(0) == 0
    request = m.build_heartbeat(0)
    assert request.member_epoch == LEAVE_EPOCH
    assert m.state is MemberState.UNSUBSCRIBED
    assert m.on_heartbeat_response(error(ErrorCode.unknown_member_id), 1) is None
    assert m.state is MemberState.UNSUBSCRIBED


def test_static_member_leaves_with_epoch_minus_two_and_its_instance_id() -> None:
    m = member(instance_id="worker-3")
    joined(m, {T1: {0}})
    m.prepare_leaving()
    m.leave_ready()
    request = m.build_heartbeat(0)
    assert request.member_epoch == LEAVE_STATIC_EPOCH
    assert request.instance_id == "worker-3"


def test_static_member_leaving_for_good_sends_minus_one() -> None:
    m = member(instance_id="worker-3")
    joined(m, {T1: {0}})
    m.prepare_leaving()
    m.leave_ready(static_leaves_for_good=True)
    assert m.build_heartbeat(0).member_epoch == LEAVE_EPOCH


def test_fenced_while_preparing_to_leave_sends_no_leave() -> None:
    m = member()
    joined(m, {T1: {0}})
    m.build_heartbeat(5000)
    m.prepare_leaving()
    m.on_heartbeat_response(error(ErrorCode.fenced_member_epoch), 5000)
    m.leave_ready()
    assert m.state is MemberState.UNSUBSCRIBED
    assert m.heartbeat_delay_ms(5000) is None


def test_a_regex_subscription_is_sent_as_subscribed_topic_regex() -> None:
    m = member()
    m.subscribe([], "^orders-.*")
    request = m.build_heartbeat(0)
    assert request.subscribed_topic_regex == "^orders-.*"
    assert request.subscribed_topic_names == ()


def test_dropping_the_regex_sends_an_empty_one() -> None:
    """Null means "unchanged" in a heartbeat: a subscription that no longer has a regex says so
    with an empty one."""
    m = member()
    m.subscribe(["orders"], "^pay-.*")
    m.build_heartbeat(0)
    m.on_heartbeat_response(ok(1), 0)
    m.subscribe(["orders"], None)
    assert m.build_heartbeat(1).subscribed_topic_regex == ""
    m.on_heartbeat_response(ok(1), 1)
    assert m.build_heartbeat(6000).subscribed_topic_regex is None


def test_topic_ids_without_names_wait_for_metadata_and_reconcile_the_rest() -> None:
    m = member()
    joined(m, {T1: {0}})
    unknown = uuid.UUID(int=99)
    m.build_heartbeat(5000)
    m.on_heartbeat_response(ok(2, {T1: {0}, unknown: {0}}), 5000)
    assert m.reconciliation(resolve) is None
    assert m.needs_metadata
    # What can be resolved is owned already: the new target's epoch is acknowledged at once
    # (owned partitions sent although none moved), then the member is STABLE and waits.
    assert m.state is MemberState.ACKNOWLEDGING
    ack = m.build_heartbeat(5001)
    assert ack.owned == ((T1, (0,)),)
    assert m.state is MemberState.STABLE
    assert m.reconciliation(resolve) is None
    assert m.state is MemberState.STABLE
    NAMES[unknown] = "created-later"
    try:
        step = m.reconciliation(resolve)
    finally:
        del NAMES[unknown]
    assert step is not None
    assert step.assign == (("created-later", 0),)
    assert not m.needs_metadata
    assert m.state is MemberState.RECONCILING


def test_a_partially_resolved_target_is_acknowledged_then_reconciled_again() -> None:
    m = member()
    unknown = uuid.UUID(int=98)
    m.subscribe(["orders"], None)
    m.build_heartbeat(0)
    m.on_heartbeat_response(ok(1, {T1: {0}, unknown: {0}}), 0)
    step = m.reconciliation(resolve)
    assert step is not None
    assert step.assign == (("orders", 0),)
    assert m.needs_metadata
    m.reconciled(step)
    assert m.build_heartbeat(1).owned == ((T1, (0,)),)
    assert m.state is MemberState.STABLE  # the target's epoch is acknowledged ...
    assert m.reconciliation(resolve) is None  # ... and the rest waits for metadata, no ack loop
    m.on_heartbeat_response(ok(1), 2)
    assert m.heartbeat_delay_ms(2) == 5000


def test_poll_timer_expiry_leaves_then_rejoins_on_the_next_poll() -> None:
    m = member()
    joined(m, {T1: {0}})
    assert m.poll_timer_expired()
    assert m.state is MemberState.STALE
    assert m.needs_poll()
    assert m.heartbeat_delay_ms(0) == 0
    assert m.build_heartbeat(0).member_epoch == LEAVE_EPOCH
    assert m.heartbeat_delay_ms(0) is None
    m.on_heartbeat_response(ok(1), 1)
    assert m.state is MemberState.STALE
    m.lost_handled()
    assert m.state is MemberState.JOINING
    assert m.build_heartbeat(2).member_epoch == 0


@pytest.mark.parametrize("code", [ErrorCode.fenced_instance_id, ErrorCode.unsupported_assignor,
                                  ErrorCode.unreleased_instance_id, ErrorCode.group_authorization_failed,
                                  ErrorCode.invalid_regular_expression, ErrorCode.unsupported_version])
def test_errors_no_retry_mends_are_fatal(code: ErrorCode) -> None:
    m = member()
    m.subscribe(["orders"], None)
    m.build_heartbeat(0)
    outcome = m.on_heartbeat_response(error(code), 0)
    assert outcome is not None
    assert outcome.fatal
    assert outcome.code == code
    assert m.state is MemberState.FATAL
    assert m.fatal_error == outcome
    assert m.heartbeat_delay_ms(0) is None


@pytest.mark.parametrize("code", [ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                                  ErrorCode.coordinator_load_in_progress])
def test_coordinator_errors_are_retried(code: ErrorCode) -> None:
    m = member(retry_backoff_ms=250)
    m.subscribe(["orders"], None)
    m.build_heartbeat(0)
    outcome = m.on_heartbeat_response(error(code), 100)
    assert outcome is not None
    assert not outcome.fatal
    assert outcome.coordinator_moved == (code != ErrorCode.coordinator_load_in_progress)
    assert m.state is MemberState.JOINING
    # A coordinator that moved is looked up again and the heartbeat sent at once (Kafka skips
    # the backoff there); one still loading is asked again after the backoff.
    assert m.heartbeat_delay_ms(100) == (250 if code == ErrorCode.coordinator_load_in_progress else 0)
    assert m.build_heartbeat(350).member_epoch == 0


def test_topic_authorization_failure_is_reported_and_the_member_carries_on() -> None:
    m = member()
    joined(m, {T1: {0}})
    m.build_heartbeat(5000)
    outcome = m.on_heartbeat_response(error(ErrorCode.topic_authorization_failed), 5000)
    assert outcome is not None
    assert not outcome.fatal
    assert m.state is MemberState.STABLE


def test_the_member_id_is_made_up_once_and_kept() -> None:
    m = ConsumerMembership(group_id="g", rebalance_timeout_ms=1000)
    first = m.member_id
    uuid.UUID(first)  # a UUID, as Kafka's and librdkafka's members make
    m.subscribe(["orders"], None)
    m.build_heartbeat(0)
    m.on_heartbeat_response(error(ErrorCode.unknown_member_id), 0)
    m.lost_handled()
    assert m.build_heartbeat(1).member_id == first


def test_illegal_transitions_raise() -> None:
    m = member()
    with pytest.raises(IllegalMemberTransition):
        m.build_heartbeat(0)  # not subscribed: no heartbeat
    m.subscribe(["orders"], None)
    with pytest.raises(IllegalMemberTransition):
        m._transition(MemberState.ACKNOWLEDGING)  # only a reconciliation leads there


def test_commits_count_as_in_group_only_with_an_epoch_from_the_coordinator() -> None:
    m = member()
    m.subscribe(["orders"], None)
    assert not m.in_group
    m.build_heartbeat(0)
    m.on_heartbeat_response(ok(4, {T1: {0}}), 0)
    assert m.in_group
    m.prepare_leaving()
    assert m.in_group  # on_revoke's commit still carries the epoch
    m.leave_ready()
    m.build_heartbeat(1)
    assert not m.in_group


def test_a_new_target_with_the_same_partitions_for_this_member_is_not_a_reconciliation() -> None:
    """A bumped member epoch with the same partitions needs no callbacks and no acknowledgement."""
    m = member()
    joined(m, {T1: {0}})
    m.build_heartbeat(5000)
    m.on_heartbeat_response(ok(9, {T1: {0}}), 5000)
    assert m.state is MemberState.STABLE
    assert m.member_epoch == 9
    assert m.build_heartbeat(10_000).owned is None


def test_a_static_member_sends_its_instance_id_in_every_heartbeat() -> None:
    m = member(instance_id="worker-3")
    joined(m, {T1: {0}})
    assert m.build_heartbeat(5000).instance_id == "worker-3"
