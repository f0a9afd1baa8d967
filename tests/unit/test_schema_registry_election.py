"""The group leader's choice of the primary, and the member metadata and assignment encodings."""

from __future__ import annotations

import pytest

from oncestream.schema_registry.election import Assignment, Identity, choose_primary

A, B, C = Identity("http://a:1"), Identity("http://b:1"), Identity("http://c:1")


def test_the_current_primary_stays_while_it_is_a_member() -> None:
    assert choose_primary([A, B, C], "http://b:1", A) == "http://b:1"


def test_a_gone_primary_is_replaced_by_the_leader() -> None:
    assert choose_primary([A, C], "http://b:1", C) == "http://c:1"
    assert choose_primary([A, C], None, A) == "http://a:1"


def test_ineligible_members_are_never_primary() -> None:
    a_no = Identity("http://a:1", eligible=False)
    assert choose_primary([a_no, C, B], None, a_no) == "http://b:1"
    assert choose_primary([a_no, B], "http://a:1", a_no) == "http://b:1"
    assert choose_primary([a_no], None, a_no) is None


def test_encodings_round_trip() -> None:
    assert Identity.decode(Identity("http://x:2", eligible=False).encode()) == Identity("http://x:2", False)
    assert Identity.decode(b"not json") is None
    assert Assignment.decode(Assignment(7, "http://x:2").encode()) == Assignment(7, "http://x:2")
    assert Assignment.decode(Assignment(3, None).encode()) == Assignment(3, None)
    with pytest.raises(ValueError, match="unreadable"):
        Assignment.decode(b"[")
