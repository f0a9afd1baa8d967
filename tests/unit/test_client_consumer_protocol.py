"""Kafka's embedded consumer protocol (ConsumerProtocolSubscription / Assignment): our encoding
round trips, and bytes laid out as Java and librdkafka write them decode (forward compatible:
fields of newer versions are skipped)."""

from __future__ import annotations

import struct

import pytest

from oncestream.protocol.consumer_protocol import (
    Assignment,
    ConsumerProtocolError,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)


def _s(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def test_subscription_round_trip_every_version() -> None:
    for version in range(4):
        sub = Subscription(topics=["a", "b"], user_data=b"ud", owned_partitions=[("a", [0, 2])],
                           generation_id=5, rack_id="r1", version=version)
        back = decode_subscription(encode_subscription(sub))
        assert back.version == version
        assert back.topics == ["a", "b"]
        assert back.user_data == b"ud"
        assert back.owned_partitions == ([("a", [0, 2])] if version >= 1 else [])
        assert back.generation_id == (5 if version >= 2 else -1)
        assert back.rack_id == ("r1" if version >= 3 else None)


def test_v0_subscription_as_librdkafka_writes_it() -> None:
    """version 0, topics ["orders"], null user data."""
    raw = struct.pack(">hi", 0, 1) + _s("orders") + struct.pack(">i", -1)
    sub = decode_subscription(raw)
    assert sub.topics == ["orders"]
    assert sub.user_data is None


def test_future_version_with_unknown_trailing_fields_parses() -> None:
    """A v9 subscription: the fields we know come first, the rest is ignored."""
    raw = (struct.pack(">hi", 9, 1) + _s("t") + struct.pack(">i", 0) + struct.pack(">i", 0)
           + struct.pack(">i", 3) + _s("rack") + b"\x01\x02\x03unknown")
    sub = decode_subscription(raw)
    assert sub.topics == ["t"]
    assert sub.generation_id == 3
    assert sub.rack_id == "rack"


def test_assignment_round_trip_and_java_layout() -> None:
    a = Assignment(partitions=[("t1", [0, 1]), ("t2", [3])], user_data=None)
    data = encode_assignment(a)
    expected = (struct.pack(">hi", 0, 2) + _s("t1") + struct.pack(">iii", 2, 0, 1) + _s("t2")
                + struct.pack(">ii", 1, 3) + struct.pack(">i", -1))
    assert data == expected
    back = decode_assignment(data)
    assert back.topic_partitions() == [("t1", 0), ("t1", 1), ("t2", 3)]


def test_empty_assignment_bytes_mean_nothing_assigned() -> None:
    assert decode_assignment(b"").partitions == []
    assert decode_assignment(None).partitions == []


@pytest.mark.parametrize("raw", [b"\x00", b"\x00\x00\x00\x00\x00\x05\x00", b"\xff\xff"])
def test_garbage_is_rejected(raw: bytes) -> None:
    with pytest.raises(ConsumerProtocolError):
        decode_subscription(raw)
