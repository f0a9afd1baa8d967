"""Just enough of the consumer embedded protocol to know which topics a consumer group reads.

OffsetDelete answers GROUP_SUBSCRIBED_TO_TOPIC for topics the group still subscribes to, and offset
expiry spares them. The member metadata of protocol type "consumer" is a
ConsumerProtocolSubscription:
``int16 version`` then, in every version, ``topics: [string]`` first (non-flexible encoding:
int32 count, then int16 length + UTF-8 per topic). Like Kafka we read only that v0 prefix, so any
future version still parses; anything malformed gives None ("unknown", treated as subscribed).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

CONSUMER_PROTOCOL_TYPE = "consumer"

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


def subscription_topics(metadata: bytes) -> frozenset[str] | None:
    """The topics of one member's consumer subscription, or None if it does not parse."""
    try:
        pos = 0
        (version,) = _INT16.unpack_from(metadata, pos)
        pos += 2
        if version < 0:
            return None
        (count,) = _INT32.unpack_from(metadata, pos)
        pos += 4
        if count < 0:
            return None
        topics: set[str] = set()
        for _ in range(count):
            (length,) = _INT16.unpack_from(metadata, pos)
            pos += 2
            if length < 0 or pos + length > len(metadata):
                return None
            topics.add(metadata[pos : pos + length].decode("utf-8"))
            pos += length
        return frozenset(topics)
    except (struct.error, UnicodeDecodeError):
        return None


def union_of_subscriptions(metadatas: Iterable[bytes]) -> frozenset[str] | None:
    """Union of every member's subscribed topics; None as soon as one of them does not parse."""
    union: set[str] = set()
    for metadata in metadatas:
        topics = subscription_topics(metadata)
        if topics is None:
            return None
        union |= topics
    return frozenset(union)


def encode_subscription(topics: Iterable[str], user_data: bytes | None = None) -> bytes:
    """A v0 ConsumerProtocolSubscription (used by tests and tools that need real metadata)."""
    parts = [_INT16.pack(0)]
    topic_list = list(topics)
    parts.append(_INT32.pack(len(topic_list)))
    for topic in topic_list:
        raw = topic.encode("utf-8")
        parts.append(_INT16.pack(len(raw)))
        parts.append(raw)
    if user_data is None:
        parts.append(_INT32.pack(-1))
    else:
        parts.append(_INT32.pack(len(user_data)))
        parts.append(user_data)
    return b"".join(parts)
