"""Share-group membership (client/consumer/share_membership.py): member ids, what each
heartbeat carries, and the answers that move the member between states."""

from __future__ import annotations

import base64
import uuid

from kio.schema.errors import ErrorCode

from oncestream.client.consumer.share_membership import LEAVE_EPOCH, MemberState, ShareMembership, new_member_id

T1 = uuid.uuid4()


def test_member_ids_are_kafka_uuid_strings() -> None:
    ids = {new_member_id() for _ in range(200)}
    assert len(ids) == 200
    for member_id in ids:
        assert len(member_id) == 22
        assert not member_id.startswith("-")
        assert len(base64.urlsafe_b64decode(member_id + "==")) == 16


def test_join_then_heartbeats_carry_the_subscription_only_when_it_changed() -> None:
    m = ShareMembership("g", rack_id="r1")
    m.subscribe(["b", "a", "a"])
    first = m.next_heartbeat()
    assert (first.member_epoch, first.subscribed_topic_names, first.rack_id) == (0, ("a", "b"), "r1")
    assert not m.on_response(0, 3, 2000, {T1: [0, 1]})
    assert (m.state, m.epoch, m.heartbeat_interval_ms, m.assignment) == (MemberState.STABLE, 3, 2000, {T1: [0, 1]})
    later = m.next_heartbeat()
    assert (later.member_epoch, later.subscribed_topic_names, later.rack_id) == (3, None, None)
    assert later.member_id == first.member_id
    m.subscribe(["c"])
    assert m.next_heartbeat().subscribed_topic_names == ("c",)


def test_assignment_version_moves_only_on_change() -> None:
    m = ShareMembership("g")
    m.subscribe(["a"])
    m.next_heartbeat()
    m.on_response(0, 1, 1000, {T1: [0]})
    version = m.assignment_version
    m.on_response(0, 1, 1000, None)  # null: unchanged
    m.on_response(0, 2, 1000, {T1: [0]})
    assert m.assignment_version == version
    m.on_response(0, 3, 1000, {T1: [0, 1]})
    assert m.assignment_version == version + 1


def test_fenced_member_rejoins_with_epoch_zero_and_its_subscription() -> None:
    m = ShareMembership("g")
    m.subscribe(["a"])
    m.next_heartbeat()
    m.on_response(0, 5, 1000, {T1: [0]})
    for code in (ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id):
        assert m.on_response(int(code), 0, 0, None)
        assert (m.state, m.epoch, m.assignment) == (MemberState.JOINING, 0, {})
        again = m.next_heartbeat()
        assert (again.member_epoch, again.subscribed_topic_names) == (0, ("a",))


def test_coordinator_errors_are_retried_without_losing_the_membership() -> None:
    m = ShareMembership("g")
    m.subscribe(["a"])
    m.next_heartbeat()
    m.on_response(0, 5, 1000, {T1: [0]})
    assert m.on_response(int(ErrorCode.not_coordinator), 0, 0, None)
    assert (m.state, m.epoch) == (MemberState.STABLE, 5)


def test_other_errors_are_fatal() -> None:
    m = ShareMembership("g")
    m.subscribe(["a"])
    m.next_heartbeat()
    assert not m.on_response(int(ErrorCode.group_authorization_failed), 0, 0, None, "no")
    assert m.state is MemberState.FAILED
    assert m.fatal_error == (int(ErrorCode.group_authorization_failed), "no")


def test_leave_sends_epoch_minus_one_once() -> None:
    m = ShareMembership("g")
    assert not m.leave()  # never joined: nothing to send
    m = ShareMembership("g")
    m.subscribe(["a"])
    m.next_heartbeat()
    m.on_response(0, 5, 1000, {T1: [0]})
    assert m.leave()
    assert m.next_heartbeat().member_epoch == LEAVE_EPOCH
    m.on_response(0, -1, 0, None)
    assert m.state is MemberState.LEFT
    m.subscribe(["a"])  # subscribing again joins again, same member id
    assert (m.state, m.next_heartbeat().member_epoch) == (MemberState.JOINING, 0)
