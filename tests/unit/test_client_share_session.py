"""Share sessions (client/consumer/share_session.py): every row of the epoch table, driven by
scripted broker answers."""

from __future__ import annotations

import pytest

from oncestream.client.consumer.share_session import (
    FINAL_EPOCH,
    INVALID_SHARE_SESSION_EPOCH,
    SHARE_SESSION_NOT_FOUND,
    SessionState,
    ShareSession,
    ShareSessionError,
)

A, B, C = ("t", 0), ("t", 1), ("u", 0)
GROUP_AUTHORIZATION_FAILED = 30


def _active(partitions: set[tuple[str, int]]) -> ShareSession:
    session = ShareSession()
    session.plan_fetch(partitions)
    session.on_response(0)
    return session


def test_first_fetch_opens_the_session_with_every_partition_and_no_acks() -> None:
    session = ShareSession()
    plan = session.plan_fetch({B, A})
    assert (plan.epoch, plan.added, plan.forgotten, plan.acks_allowed) == (0, [A, B], [], False)
    session.on_response(0)
    assert (session.state, session.epoch) == (SessionState.ACTIVE, 1)


def test_later_fetches_carry_only_changes_and_count_up() -> None:
    session = _active({A, B})
    plan = session.plan_fetch({B, C})
    assert (plan.epoch, plan.added, plan.forgotten, plan.acks_allowed) == (1, [C], [A], True)
    session.on_response(0)
    plan = session.plan_fetch({B, C})
    assert (plan.epoch, plan.added, plan.forgotten) == (2, [], [])


def test_one_request_in_flight_at_a_time() -> None:
    session = ShareSession()
    session.plan_fetch({A})
    assert not session.can_acknowledge()
    with pytest.raises(ShareSessionError, match="in flight"):
        session.plan_fetch({A})
    session.on_response(0)
    assert session.can_acknowledge()
    assert session.plan_acknowledge() == 1
    with pytest.raises(ShareSessionError):
        session.plan_fetch({A})
    session.on_response(0)
    assert session.plan_fetch({A}).epoch == 2


@pytest.mark.parametrize("code", [SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH])
def test_a_lost_session_is_opened_again(code: int) -> None:
    session = _active({A, B})
    session.plan_fetch({A, B})
    session.on_response(code)
    assert (session.state, session.epoch) == (SessionState.NEW, 0)
    plan = session.plan_fetch({A, B})
    assert (plan.epoch, plan.added, plan.acks_allowed) == (0, [A, B], False)


def test_a_transport_error_opens_a_new_session() -> None:
    session = _active({A})
    session.plan_acknowledge()
    session.on_transport_error()
    assert (session.state, session.epoch, session.partitions) == (SessionState.NEW, 0, set())


def test_other_errors_count_the_request() -> None:
    session = _active({A})
    session.plan_fetch({A})
    session.on_response(GROUP_AUTHORIZATION_FAILED)
    assert (session.state, session.epoch) == (SessionState.ACTIVE, 2)


def test_an_opening_request_answered_with_an_error_opens_nothing() -> None:
    session = ShareSession()
    session.plan_fetch({A})
    session.on_response(GROUP_AUTHORIZATION_FAILED)
    assert (session.state, session.epoch) == (SessionState.NEW, 0)
    assert session.plan_fetch({A}).added == [A]


def test_acknowledge_cannot_open_a_session() -> None:
    session = ShareSession()
    assert not session.can_acknowledge()
    with pytest.raises(ShareSessionError, match="cannot open"):
        session.plan_acknowledge()


def test_close_uses_the_final_epoch_then_nothing_more() -> None:
    session = _active({A})
    assert session.close()
    assert session.plan_acknowledge() == FINAL_EPOCH
    session.on_response(0)
    assert session.state is SessionState.CLOSED
    with pytest.raises(ShareSessionError, match="closed"):
        session.plan_fetch({A})


def test_closing_a_session_never_opened_sends_nothing() -> None:
    session = ShareSession()
    assert not session.close()
    assert session.state is SessionState.CLOSED


def test_closing_ends_even_when_the_answer_is_lost() -> None:
    session = _active({A})
    session.close()
    session.plan_acknowledge()
    session.on_transport_error()
    assert session.state is SessionState.CLOSED


def test_epoch_wraps_to_one() -> None:
    session = _active({A})
    session.epoch = 2**31 - 1
    session.plan_fetch({A})
    session.on_response(0)
    assert session.epoch == 1
