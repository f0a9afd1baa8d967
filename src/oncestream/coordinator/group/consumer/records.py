"""__consumer_offsets records of consumer groups (KIP-848), in Apache Kafka's own layout.

Keys are non-flexible: ``int16 key version`` then the fields. Values are flexible (KIP-482):
``int16 value version`` (0), then compact strings/arrays and a tagged-field section per struct.
So Kafka's tooling reads these records and a Kafka log of them replays here.

==============================================  ==========  ==============================
record                                          key version value
==============================================  ==========  ==============================
ConsumerGroupMetadata (group epoch)             3           Epoch int32
ConsumerGroupPartitionMetadata (subscribed      4           [TopicId uuid, TopicName, NumPartitions,
topics' metadata)                                           [Partition, [Racks]]]
ConsumerGroupMemberMetadata (subscription)      5           InstanceId?, RackId?, ClientId, ClientHost,
                                                            [SubscribedTopicNames], SubscribedTopicRegex?,
                                                            RebalanceTimeoutMs, ServerAssignor?
ConsumerGroupTargetAssignmentMetadata           6           AssignmentEpoch int32
ConsumerGroupTargetAssignmentMember             7           [TopicId uuid, [Partitions int32]]
ConsumerGroupCurrentMemberAssignment            8           MemberEpoch, PreviousMemberEpoch, State int8,
                                                            AssignedPartitions, PartitionsPendingRevocation
==============================================  ==========  ==============================

A value of None is a tombstone. Each record is a dataclass; the manager applies the very records it
writes (group.py ``apply``), so a replay after a restart rebuilds exactly the state that was served.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from oncestream.errors import CorruptRecordError

GROUP_EPOCH_KEY_VERSION = 3
SUBSCRIPTION_METADATA_KEY_VERSION = 4
MEMBER_METADATA_KEY_VERSION = 5
TARGET_ASSIGNMENT_EPOCH_KEY_VERSION = 6
TARGET_ASSIGNMENT_MEMBER_KEY_VERSION = 7
CURRENT_ASSIGNMENT_KEY_VERSION = 8
CONSUMER_GROUP_KEY_VERSIONS = frozenset(range(3, 9))

_VALUE_VERSION = 0
_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

# topic id -> partitions; the shape of every assignment in this package.
Assignment = Mapping[uuid.UUID, frozenset[int]]


def freeze(assignment: Mapping[uuid.UUID, frozenset[int] | set[int]]) -> dict[uuid.UUID, frozenset[int]]:
    """A normalised copy: frozensets, no topic with an empty set."""
    return {t: frozenset(p) for t, p in assignment.items() if p}


@dataclass(frozen=True)
class TopicMetadata:
    """One subscribed topic as the group last saw it (ConsumerGroupPartitionMetadata)."""

    topic_id: uuid.UUID
    name: str
    num_partitions: int


@dataclass(frozen=True)
class ClassicMemberMetadata:
    """What a member speaking the classic protocol (JoinGroup/SyncGroup/Heartbeat) inside a
    consumer group told us: ConsumerGroupMemberMetadataValue's tagged field 0 (Kafka writes it
    for the members of a group converted online or joined with JoinGroup)."""

    session_timeout_ms: int
    # (protocol name, its ConsumerProtocolSubscription bytes), in the member's order of preference.
    supported_protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True)
class MemberSubscription:
    """The durable, client-given part of a member (ConsumerGroupMemberMetadataValue); ``classic``
    is None for a member of the consumer protocol."""

    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic: ClassicMemberMetadata | None = None


@dataclass(frozen=True)
class MemberAssignmentState:
    """The member's reconciliation state (ConsumerGroupCurrentMemberAssignmentValue)."""

    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: Assignment
    pending_revocation: Assignment


# --- records (key fields + value, None value = tombstone) ------------------------------------------


@dataclass(frozen=True)
class GroupEpochRecord:
    group_id: str
    epoch: int | None


@dataclass(frozen=True)
class SubscriptionMetadataRecord:
    group_id: str
    topics: tuple[TopicMetadata, ...] | None


@dataclass(frozen=True)
class MemberMetadataRecord:
    group_id: str
    member_id: str
    subscription: MemberSubscription | None


@dataclass(frozen=True)
class TargetAssignmentEpochRecord:
    group_id: str
    epoch: int | None


@dataclass(frozen=True)
class TargetAssignmentMemberRecord:
    group_id: str
    member_id: str
    assignment: Assignment | None


@dataclass(frozen=True)
class CurrentAssignmentRecord:
    group_id: str
    member_id: str
    assignment: MemberAssignmentState | None


ConsumerGroupRecord = (
    GroupEpochRecord | SubscriptionMetadataRecord | MemberMetadataRecord | TargetAssignmentEpochRecord
    | TargetAssignmentMemberRecord | CurrentAssignmentRecord
)


# --- flexible value encoding ---------------------------------------------------------------------


class _Out:
    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def varint(self, value: int) -> None:
        out = bytearray()
        while value >= 0x80:
            out.append((value & 0x7F) | 0x80)
            value >>= 7
        out.append(value)
        self.parts.append(bytes(out))

    def int8(self, value: int) -> None:
        self.parts.append(_I8.pack(value))

    def int16(self, value: int) -> None:
        self.parts.append(_I16.pack(value))

    def int32(self, value: int) -> None:
        self.parts.append(_I32.pack(value))

    def uuid(self, value: uuid.UUID) -> None:
        self.parts.append(value.bytes)

    def string(self, value: str | None) -> None:
        """Compact (nullable) string: unsigned varint length + 1, 0 for null."""
        if value is None:
            self.varint(0)
            return
        raw = value.encode("utf-8")
        self.varint(len(raw) + 1)
        self.parts.append(raw)

    def array_len(self, n: int) -> None:
        self.varint(n + 1)

    def compact_bytes(self, value: bytes) -> None:
        self.varint(len(value) + 1)
        self.parts.append(value)

    def no_tags(self) -> None:
        self.varint(0)

    def bytes(self) -> bytes:
        return b"".join(self.parts)


class _In:
    def __init__(self, data: bytes, what: str) -> None:
        self.data = memoryview(data)
        self.pos = 0
        self.what = what

    def _take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise CorruptRecordError(f"{self.what}: truncated at byte {self.pos}")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def varint(self) -> int:
        shift = value = 0
        while True:
            byte = self._take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise CorruptRecordError(f"{self.what}: varint too long")

    def int8(self) -> int:
        return int(_I8.unpack(self._take(1))[0])

    def int16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def int32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=bytes(self._take(16)))

    def nullable_string(self) -> str | None:
        n = self.varint()
        if n == 0:
            return None
        try:
            return bytes(self._take(n - 1)).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(f"{self.what}: string is not UTF-8") from exc

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise CorruptRecordError(f"{self.what}: null where a string is required")
        return value

    def array_len(self) -> int:
        n = self.varint()
        if n == 0:
            raise CorruptRecordError(f"{self.what}: null array")
        return n - 1

    def compact_bytes(self) -> bytes:
        n = self.varint()
        if n == 0:
            raise CorruptRecordError(f"{self.what}: null where bytes are required")
        return bytes(self._take(n - 1))

    def skip_tags(self) -> None:
        self.tags()

    def tags(self) -> dict[int, bytes]:
        """The tagged fields (tag -> raw bytes); callers read the tags they know."""
        found: dict[int, bytes] = {}
        for _ in range(self.varint()):
            tag = self.varint()
            found[tag] = bytes(self._take(self.varint()))
        return found

    def done(self) -> None:
        if self.pos != len(self.data):
            raise CorruptRecordError(f"{self.what}: {len(self.data) - self.pos} trailing bytes")


def _key_string(out: list[bytes], value: str) -> None:
    raw = value.encode("utf-8")
    out.append(_I16.pack(len(raw)))
    out.append(raw)


def _encode_key(version: int, *fields: str) -> bytes:
    out = [_I16.pack(version)]
    for f in fields:
        _key_string(out, f)
    return b"".join(out)


def _write_assignment(out: _Out, assignment: Assignment) -> None:
    out.array_len(len(assignment))
    for topic_id in sorted(assignment):
        out.uuid(topic_id)
        parts = sorted(assignment[topic_id])
        out.array_len(len(parts))
        for p in parts:
            out.int32(p)
        out.no_tags()


def _read_assignment(inp: _In) -> dict[uuid.UUID, frozenset[int]]:
    result: dict[uuid.UUID, frozenset[int]] = {}
    for _ in range(inp.array_len()):
        topic_id = inp.uuid()
        result[topic_id] = frozenset(inp.int32() for _ in range(inp.array_len()))
        inp.skip_tags()
    return freeze(result)


_CLASSIC_MEMBER_METADATA_TAG = 0


def _encode_classic(classic: ClassicMemberMetadata) -> bytes:
    out = _Out()
    out.int32(classic.session_timeout_ms)
    out.array_len(len(classic.supported_protocols))
    for name, metadata in classic.supported_protocols:
        out.string(name)
        out.compact_bytes(metadata)
        out.no_tags()
    out.no_tags()
    return out.bytes()


def _decode_classic(data: bytes) -> ClassicMemberMetadata:
    inp = _In(data, "ClassicMemberMetadata")
    session_timeout_ms = inp.int32()
    protocols = []
    for _ in range(inp.array_len()):
        name, metadata = inp.string(), inp.compact_bytes()
        inp.skip_tags()
        protocols.append((name, metadata))
    inp.skip_tags()
    inp.done()
    return ClassicMemberMetadata(session_timeout_ms, tuple(protocols))


def encode_record(record: ConsumerGroupRecord) -> tuple[bytes, bytes | None]:
    """The (key, value) bytes of a record (value None for a tombstone)."""
    out = _Out()
    out.int16(_VALUE_VERSION)
    g = record.group_id
    if isinstance(record, GroupEpochRecord):
        key = _encode_key(GROUP_EPOCH_KEY_VERSION, g)
        if record.epoch is None:
            return key, None
        out.int32(record.epoch)
    elif isinstance(record, SubscriptionMetadataRecord):
        key = _encode_key(SUBSCRIPTION_METADATA_KEY_VERSION, g)
        if record.topics is None:
            return key, None
        out.array_len(len(record.topics))
        for t in record.topics:
            out.uuid(t.topic_id)
            out.string(t.name)
            out.int32(t.num_partitions)
            out.array_len(0)  # no rack information on this broker
            out.no_tags()
    elif isinstance(record, MemberMetadataRecord):
        key = _encode_key(MEMBER_METADATA_KEY_VERSION, g, record.member_id)
        s = record.subscription
        if s is None:
            return key, None
        out.string(s.instance_id)
        out.string(s.rack_id)
        out.string(s.client_id)
        out.string(s.client_host)
        out.array_len(len(s.subscribed_topic_names))
        for name in s.subscribed_topic_names:
            out.string(name)
        out.string(s.subscribed_topic_regex)
        out.int32(s.rebalance_timeout_ms)
        out.string(s.server_assignor)
        if s.classic is not None:
            classic = _encode_classic(s.classic)
            out.varint(1)  # one tagged field: ClassicMemberMetadata, tag 0
            out.varint(_CLASSIC_MEMBER_METADATA_TAG)
            out.varint(len(classic))
            out.parts.append(classic)
            return key, out.bytes()
    elif isinstance(record, TargetAssignmentEpochRecord):
        key = _encode_key(TARGET_ASSIGNMENT_EPOCH_KEY_VERSION, g)
        if record.epoch is None:
            return key, None
        out.int32(record.epoch)
    elif isinstance(record, TargetAssignmentMemberRecord):
        key = _encode_key(TARGET_ASSIGNMENT_MEMBER_KEY_VERSION, g, record.member_id)
        if record.assignment is None:
            return key, None
        _write_assignment(out, record.assignment)
    elif isinstance(record, CurrentAssignmentRecord):
        key = _encode_key(CURRENT_ASSIGNMENT_KEY_VERSION, g, record.member_id)
        a = record.assignment
        if a is None:
            return key, None
        out.int32(a.member_epoch)
        out.int32(a.previous_member_epoch)
        out.int8(a.state)
        _write_assignment(out, a.assigned)
        _write_assignment(out, a.pending_revocation)
    else:  # pragma: no cover - the union is closed
        raise TypeError(f"not a consumer group record: {record!r}")
    out.no_tags()
    return key, out.bytes()


def decode_record(key_version: int, key: bytes, value: bytes | None) -> ConsumerGroupRecord:
    """Parse a record whose key version is one of CONSUMER_GROUP_KEY_VERSIONS."""
    k = _In(key, "consumer group record key")
    if k.int16() != key_version:
        raise CorruptRecordError("consumer group record key: version mismatch")
    group_id = _key_str(k)
    member_id = _key_str(k) if key_version in (5, 7, 8) else ""
    k.done()
    v: _In | None = None
    if value is not None:
        v = _In(value, f"consumer group record value (key version {key_version})")
        version = v.int16()
        if version != _VALUE_VERSION:
            raise CorruptRecordError(f"consumer group record value: unknown version {version}")
    record: ConsumerGroupRecord
    if key_version == GROUP_EPOCH_KEY_VERSION:
        record = GroupEpochRecord(group_id, None if v is None else v.int32())
    elif key_version == SUBSCRIPTION_METADATA_KEY_VERSION:
        topics: tuple[TopicMetadata, ...] | None = None
        if v is not None:
            items = []
            for _ in range(v.array_len()):
                topic_id, name, num = v.uuid(), v.string(), v.int32()
                for _ in range(v.array_len()):
                    v.int32()
                    for _ in range(v.array_len()):
                        v.string()
                    v.skip_tags()
                v.skip_tags()
                items.append(TopicMetadata(topic_id, name, num))
            topics = tuple(items)
        record = SubscriptionMetadataRecord(group_id, topics)
    elif key_version == MEMBER_METADATA_KEY_VERSION:
        sub = None
        if v is not None:
            instance_id, rack_id, client_id, client_host = (
                v.nullable_string(), v.nullable_string(), v.string(), v.string())
            names = tuple(v.string() for _ in range(v.array_len()))
            regex, rebalance_timeout_ms, assignor = v.nullable_string(), v.int32(), v.nullable_string()
            tags = v.tags()
            classic = tags.get(_CLASSIC_MEMBER_METADATA_TAG)
            sub = MemberSubscription(instance_id, rack_id, client_id, client_host, names, regex,
                                     rebalance_timeout_ms, assignor,
                                     None if classic is None else _decode_classic(classic))
            v.done()  # its tagged fields are read: the common trailer below does not apply
            return MemberMetadataRecord(group_id, member_id, sub)
        record = MemberMetadataRecord(group_id, member_id, sub)
    elif key_version == TARGET_ASSIGNMENT_EPOCH_KEY_VERSION:
        record = TargetAssignmentEpochRecord(group_id, None if v is None else v.int32())
    elif key_version == TARGET_ASSIGNMENT_MEMBER_KEY_VERSION:
        record = TargetAssignmentMemberRecord(group_id, member_id, None if v is None else _read_assignment(v))
    elif key_version == CURRENT_ASSIGNMENT_KEY_VERSION:
        state = None
        if v is not None:
            epoch, previous, member_state = v.int32(), v.int32(), v.int8()
            assigned = _read_assignment(v)
            state = MemberAssignmentState(epoch, previous, member_state, assigned, _read_assignment(v))
        record = CurrentAssignmentRecord(group_id, member_id, state)
    else:
        raise CorruptRecordError(f"not a consumer group key version: {key_version}")
    if v is not None:
        v.skip_tags()
        v.done()
    return record


def _key_str(k: _In) -> str:
    n = k.int16()
    try:
        return bytes(k._take(n)).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptRecordError("consumer group record key: string is not UTF-8") from exc


def record_group_id(key: bytes) -> str:
    """The group id of a consumer group record key (to route it to its partition)."""
    k = _In(key, "consumer group record key")
    k.int16()
    return _key_str(k)
