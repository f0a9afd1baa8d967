"""Share sessions' epoch rules, share-group membership with the simple assignor, and the
__share_group_state record layout (sans-io parts of KIP-932)."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from oncestream.coordinator.share.group import ShareGroupConfig, ShareGroupCoordinator, java_string_hash
from oncestream.coordinator.share.partition import StateBatch
from oncestream.coordinator.share.records import (
    SNAPSHOT_TYPE,
    UPDATE_TYPE,
    ShareStateKey,
    ShareStateValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from oncestream.coordinator.share.sessions import ShareSessionCache

TOPIC_ID = uuid.UUID(int=7)


def test_session_epochs() -> None:
    cache = ShareSessionCache(max_sessions=1)
    assert cache.lookup("g", "m", 1, may_open=True).error == ErrorCode.share_session_not_found
    assert cache.lookup("g", "m", 0, may_open=False).error == ErrorCode.invalid_share_session_epoch
    opened = cache.lookup("g", "m", 0, may_open=True)
    assert opened.error == ErrorCode.none
    assert opened.replaced is None
    assert cache.lookup("g", "m", 2, may_open=True).error == ErrorCode.invalid_share_session_epoch
    assert cache.lookup("g", "m", 1, may_open=True).error == ErrorCode.none
    assert cache.lookup("g", "m", 1, may_open=True).error == ErrorCode.invalid_share_session_epoch
    assert cache.lookup("g", "m", 2, may_open=True).error == ErrorCode.none
    assert cache.lookup("g", "other", 0, may_open=True).error == ErrorCode.share_session_limit_reached
    reopened = cache.lookup("g", "m", 0, may_open=True)
    assert reopened.replaced is opened.session
    final = cache.lookup("g", "m", -1, may_open=False)
    assert final.final
    assert cache.close("g", "m") is reopened.session
    assert cache.lookup("g", "m", -1, may_open=False).error == ErrorCode.share_session_not_found


def _coordinator(partitions: int = 1) -> ShareGroupCoordinator:
    topics = {"t": (TOPIC_ID, partitions)}
    return ShareGroupCoordinator(ShareGroupConfig(session_timeout_ms=100), topics.get)


def test_members_share_a_single_partition_and_epochs_fence() -> None:
    coord = _coordinator(partitions=1)
    a = coord.heartbeat("g", "a", 0, None, ["t"], 0)
    b = coord.heartbeat("g", "b", 0, None, ["t"], 0)
    assert a.error == b.error == ErrorCode.none
    assert b.assignment == {TOPIC_ID: frozenset({0})}
    # a is behind the group epoch now: its next heartbeat brings it up to date.
    again = coord.heartbeat("g", "a", a.member_epoch, None, None, 1)
    assert again.member_epoch == b.member_epoch
    assert again.assignment == {TOPIC_ID: frozenset({0})}
    assert coord.heartbeat("g", "a", again.member_epoch + 5, None, None, 2).error == ErrorCode.fenced_member_epoch
    assert coord.heartbeat("g", "zz", 3, None, None, 2).error == ErrorCode.unknown_member_id
    assert coord.heartbeat("g", "", 0, None, ["t"], 2).error == ErrorCode.invalid_request
    assert coord.heartbeat("g", "c", 0, None, None, 2).error == ErrorCode.invalid_request


def test_every_partition_assigned_and_members_expire() -> None:
    coord = _coordinator(partitions=4)
    for member in ("a", "b"):
        coord.heartbeat("g", member, 0, None, ["t"], 0)
    group = coord.group("g")
    assert group is not None
    coord.heartbeat("g", "a", group.members["a"].member_epoch, None, None, 50)
    held = set().union(*(m.assignment.get(TOPIC_ID, frozenset()) for m in group.members.values()))
    assert held == {0, 1, 2, 3}
    assert coord.expire(120) == [("g", "b")]
    assert group.members["a"].assignment == {TOPIC_ID: frozenset({0, 1, 2, 3})}
    left = coord.heartbeat("g", "a", -1, None, None, 130)
    assert left.member_epoch == -1
    assert left.left == "a"
    assert group.state == "Empty"


def test_java_string_hash_matches_java() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Hello World") == -862545276  # overflows int32
    assert java_string_hash("polygenelubricants") == -(2**31)


def test_state_records_round_trip() -> None:
    key = ShareStateKey(SNAPSHOT_TYPE, "group", TOPIC_ID, 3)
    assert decode_key(encode_key(key)) == key
    value = ShareStateValue(2, 10, (StateBatch(10, 12, 0, 1), StateBatch(13, 13, 2, 4)), 0, 0, 5, 6)
    assert decode_value(SNAPSHOT_TYPE, encode_value(SNAPSHOT_TYPE, value)) == value
    update = ShareStateValue(2, -1, (StateBatch(14, 15, 4, 5),))
    assert decode_value(UPDATE_TYPE, encode_value(UPDATE_TYPE, update)) == update


def test_idle_sessions_are_dropped() -> None:
    cache = ShareSessionCache()
    cache.lookup("g", "old", 0, may_open=True, now_ms=100)
    cache.lookup("g", "new", 0, may_open=True, now_ms=100)
    cache.lookup("g", "new", 1, may_open=True, now_ms=900)
    assert [s.member_id for s in cache.idle(1000, lambda group_id: 500)] == ["old"]
    assert cache.get("g", "old") is None
    assert cache.get("g", "new") is not None
