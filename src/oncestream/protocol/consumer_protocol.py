"""Kafka's embedded consumer protocol (protocol type "consumer"): the member metadata
(ConsumerProtocolSubscription) a member sends in JoinGroup and the assignment
(ConsumerProtocolAssignment) the leader hands out in SyncGroup.

Both use the non-flexible encoding of Kafka's ConsumerProtocol{Subscription,Assignment}.json:
an int16 version, then the fields of that version. Readers accept any version: fields they do not
know are after the ones they do (Kafka's forward-compatibility rule), so a librdkafka or Java
member's metadata parses whatever version it sends.

Subscription v0: topics [string], user_data nullable bytes; v1: + owned_partitions
[topic, [int32]]; v2: + generation_id int32; v3: + rack_id nullable string.
Assignment v0: assigned_partitions [topic, [int32]], user_data nullable bytes (v1..v3 same).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

SUBSCRIPTION_VERSION = 1  # what we send: owned partitions let cooperative leaders be sticky


class ConsumerProtocolError(ValueError):
    """Member metadata or an assignment that does not parse."""


@dataclass
class Subscription:
    """One member's subscription."""

    topics: list[str]
    user_data: bytes | None = None
    owned_partitions: list[tuple[str, list[int]]] = field(default_factory=list)
    generation_id: int = -1
    rack_id: str | None = None
    version: int = SUBSCRIPTION_VERSION


@dataclass
class Assignment:
    """The partitions assigned to one member."""

    partitions: list[tuple[str, list[int]]]
    user_data: bytes | None = None
    version: int = 0

    def topic_partitions(self) -> list[tuple[str, int]]:
        """Flattened (topic, partition) pairs."""
        return [(t, p) for t, ps in self.partitions for p in ps]


class _Writer:
    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def i16(self, value: int) -> None:
        self.parts.append(_I16.pack(value))

    def i32(self, value: int) -> None:
        self.parts.append(_I32.pack(value))

    def string(self, value: str | None) -> None:
        if value is None:
            self.i16(-1)
            return
        raw = value.encode()
        self.i16(len(raw))
        self.parts.append(raw)

    def bytes_(self, value: bytes | None) -> None:
        if value is None:
            self.i32(-1)
            return
        self.i32(len(value))
        self.parts.append(value)

    def topic_partitions(self, items: list[tuple[str, list[int]]]) -> None:
        self.i32(len(items))
        for topic, partitions in items:
            self.string(topic)
            self.i32(len(partitions))
            for p in partitions:
                self.i32(p)

    def value(self) -> bytes:
        return b"".join(self.parts)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ConsumerProtocolError("truncated consumer protocol data")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def at_end(self) -> bool:
        return self.pos >= len(self.data)

    def i16(self) -> int:
        (value,) = _I16.unpack(self._take(2))
        return int(value)

    def i32(self) -> int:
        (value,) = _I32.unpack(self._take(4))
        return int(value)

    def string(self) -> str | None:
        n = self.i16()
        if n < 0:
            return None
        try:
            return self._take(n).decode()
        except UnicodeDecodeError as exc:
            raise ConsumerProtocolError("invalid UTF-8 in consumer protocol string") from exc

    def bytes_(self) -> bytes | None:
        n = self.i32()
        return None if n < 0 else self._take(n)

    def array_count(self) -> int:
        n = self.i32()
        if n > len(self.data):
            raise ConsumerProtocolError("array count larger than the data")
        return max(n, 0)

    def topic_partitions(self) -> list[tuple[str, list[int]]]:
        out = []
        for _ in range(self.array_count()):
            topic = self.string() or ""
            out.append((topic, [self.i32() for _ in range(self.array_count())]))
        return out


def encode_subscription(sub: Subscription) -> bytes:
    """Member metadata for JoinGroup."""
    w = _Writer()
    w.i16(sub.version)
    w.i32(len(sub.topics))
    for topic in sub.topics:
        w.string(topic)
    w.bytes_(sub.user_data)
    if sub.version >= 1:
        w.topic_partitions(sub.owned_partitions)
    if sub.version >= 2:
        w.i32(sub.generation_id)
    if sub.version >= 3:
        w.string(sub.rack_id)
    return w.value()


def decode_subscription(data: bytes) -> Subscription:
    """Parse member metadata of any version (unknown trailing fields are ignored)."""
    r = _Reader(data)
    version = r.i16()
    if version < 0:
        raise ConsumerProtocolError(f"negative subscription version {version}")
    topics = [r.string() or "" for _ in range(r.array_count())]
    sub = Subscription(topics=topics, version=version)
    if r.at_end():
        return sub
    sub.user_data = r.bytes_()
    if version >= 1 and not r.at_end():
        sub.owned_partitions = r.topic_partitions()
    if version >= 2 and not r.at_end():
        sub.generation_id = r.i32()
    if version >= 3 and not r.at_end():
        sub.rack_id = r.string()
    return sub


def encode_assignment(assignment: Assignment) -> bytes:
    """Assignment bytes for SyncGroup."""
    w = _Writer()
    w.i16(assignment.version)
    w.topic_partitions(assignment.partitions)
    w.bytes_(assignment.user_data)
    return w.value()


def decode_assignment(data: bytes | None) -> Assignment:
    """Parse an assignment; empty bytes (a member that got nothing) is the empty assignment."""
    if not data:
        return Assignment(partitions=[])
    r = _Reader(data)
    version = r.i16()
    if version < 0:
        raise ConsumerProtocolError(f"negative assignment version {version}")
    partitions = r.topic_partitions()
    user_data = None if r.at_end() else r.bytes_()
    return Assignment(partitions=partitions, user_data=user_data, version=version)
