"""Binary encoding of the __consumer_offsets records (key and value) the group coordinator writes.

Every key and value starts with an int16 *version* that says what follows, so a reader never has to
guess. Integers are big-endian; ``string`` is int16 length + UTF-8 (-1 = null); ``bytes`` is int32
length + raw bytes (-1 = null). The first two key kinds are byte-for-byte Apache Kafka's own
(non-flexible) OffsetCommitKey and GroupMetadataKey schemas, and the values are Kafka's
OffsetCommitValue v1/v3 and GroupMetadataValue v3, so Kafka's tooling could read these records:

===============================  ========================================================================
key version 1 (offset commit)    group string, topic string, partition int32
key version 2 (group metadata)   group string
key version 1000 (pending txn)   group string, producer_id int64, topic string, partition int32
                                 (oncestream's own: a TxnOffsetCommit not yet committed or aborted)
offset value v3                  offset int64, leader_epoch int32, metadata string, commit_ts int64
offset value v1                  offset int64, metadata string, commit_ts int64, expire_ts int64
                                 (written only when OffsetCommit v2-v4 set a retention; those
                                 versions carry no leader epoch, so nothing is lost)
group value v3                   protocol_type string ("" = none), generation int32,
                                 protocol nullable string, leader nullable string,
                                 current_state_timestamp int64, members [member_id string,
                                 group_instance_id nullable string, client_id string,
                                 client_host string, rebalance_timeout int32, session_timeout int32,
                                 subscription bytes, assignment bytes]
===============================  ========================================================================

A value of None is a tombstone. Each key names exactly one piece of state (one group, one committed
partition, one pending partition of one producer), so log compaction by key keeps exactly the latest
state and a replay that lets the last value per key win rebuilds it.

Like Kafka, the group value keeps only each member's metadata for the *selected* protocol: after a
reload a member supports that one protocol until it rejoins.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from oncestream.coordinator.group.messages import OffsetAndMetadata
from oncestream.errors import CoordinatorInvariantError, CorruptRecordError
from oncestream.topic_partition import TopicPartition

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
PENDING_TXN_OFFSET_KEY_VERSION = 1000

OFFSET_VALUE_VERSION_WITH_EXPIRY = 1
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3

# Kafka also wrote offset key version 0 (same layout as 1); accept it when reading.
_OFFSET_COMMIT_KEY_VERSIONS = (0, OFFSET_COMMIT_KEY_VERSION)

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


# --- decoded forms --------------------------------------------------------------------------------


@dataclass(frozen=True)
class OffsetCommitKey:
    """Key of a committed offset of one partition for one group."""

    group_id: str
    topic_partition: TopicPartition


@dataclass(frozen=True)
class GroupMetadataKey:
    """Key of a group's membership/generation record."""

    group_id: str


@dataclass(frozen=True)
class PendingTxnOffsetKey:
    """Key of an offset a transactional producer committed but whose transaction is open."""

    group_id: str
    producer_id: int
    topic_partition: TopicPartition


RecordKey = OffsetCommitKey | GroupMetadataKey | PendingTxnOffsetKey


@dataclass(frozen=True)
class MemberSnapshot:
    """The durable part of one member."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupSnapshot:
    """The durable part of a group: what a reload brings back."""

    protocol_type: str | None
    generation_id: int
    protocol_name: str | None
    leader_id: str | None
    state_timestamp_ms: int
    members: tuple[MemberSnapshot, ...]


# --- writer / reader ------------------------------------------------------------------------------


class _Writer:
    """Appends big-endian fields to a buffer."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def int16(self, value: int) -> _Writer:
        self._parts.append(_I16.pack(value))
        return self

    def int32(self, value: int) -> _Writer:
        self._parts.append(_I32.pack(value))
        return self

    def int64(self, value: int) -> _Writer:
        self._parts.append(_I64.pack(value))
        return self

    def string(self, value: str | None) -> _Writer:
        if value is None:
            return self.int16(-1)
        raw = value.encode("utf-8")
        if len(raw) > 0x7FFF:
            raise ValueError(f"string of {len(raw)} bytes does not fit an int16 length")
        self._parts.append(_I16.pack(len(raw)))
        self._parts.append(raw)
        return self

    def bytes_(self, value: bytes | None) -> _Writer:
        if value is None:
            return self.int32(-1)
        self._parts.append(_I32.pack(len(value)))
        self._parts.append(bytes(value))
        return self

    def finish(self) -> bytes:
        return b"".join(self._parts)


class _Reader:
    """Reads big-endian fields, raising CorruptRecordError on anything malformed."""

    def __init__(self, data: bytes, what: str) -> None:
        self._data = memoryview(data)
        self._pos = 0
        self._what = what

    def _take(self, size: int) -> memoryview:
        if size < 0 or self._pos + size > len(self._data):
            raise CorruptRecordError(f"{self._what}: truncated at byte {self._pos}")
        chunk = self._data[self._pos : self._pos + size]
        self._pos += size
        return chunk

    def int16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def int32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def int64(self) -> int:
        return int(_I64.unpack(self._take(8))[0])

    def nullable_string(self) -> str | None:
        length = self.int16()
        if length == -1:
            return None
        if length < -1:
            raise CorruptRecordError(f"{self._what}: negative string length {length}")
        try:
            return bytes(self._take(length)).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(f"{self._what}: string is not UTF-8") from exc

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise CorruptRecordError(f"{self._what}: null where a string is required")
        return value

    def bytes_(self) -> bytes:
        length = self.int32()
        if length == -1:
            # Kafka writes empty bytes, never null, for subscription/assignment; read null as empty.
            return b""
        if length < -1:
            raise CorruptRecordError(f"{self._what}: negative bytes length {length}")
        return bytes(self._take(length))

    def done(self) -> None:
        if self._pos != len(self._data):
            raise CorruptRecordError(
                f"{self._what}: {len(self._data) - self._pos} trailing bytes after the record"
            )


# --- keys -----------------------------------------------------------------------------------------


def encode_key(key: RecordKey) -> bytes:
    """The bytes of a record key."""
    writer = _Writer()
    if isinstance(key, OffsetCommitKey):
        writer.int16(OFFSET_COMMIT_KEY_VERSION).string(key.group_id)
        writer.string(key.topic_partition.topic).int32(key.topic_partition.partition)
    elif isinstance(key, GroupMetadataKey):
        writer.int16(GROUP_METADATA_KEY_VERSION).string(key.group_id)
    elif isinstance(key, PendingTxnOffsetKey):
        writer.int16(PENDING_TXN_OFFSET_KEY_VERSION).string(key.group_id).int64(key.producer_id)
        writer.string(key.topic_partition.topic).int32(key.topic_partition.partition)
    else:  # pragma: no cover - the union is closed
        raise TypeError(f"not a record key: {key!r}")
    return writer.finish()


def decode_key(data: bytes) -> RecordKey:
    """Parse a record key; raises CorruptRecordError on an unknown version or bad layout."""
    reader = _Reader(data, "__consumer_offsets key")
    version = reader.int16()
    key: RecordKey
    if version in _OFFSET_COMMIT_KEY_VERSIONS:
        group_id = reader.string()
        topic = reader.string()
        key = OffsetCommitKey(group_id, TopicPartition(topic, reader.int32()))
    elif version == GROUP_METADATA_KEY_VERSION:
        key = GroupMetadataKey(reader.string())
    elif version == PENDING_TXN_OFFSET_KEY_VERSION:
        group_id = reader.string()
        producer_id = reader.int64()
        topic = reader.string()
        key = PendingTxnOffsetKey(group_id, producer_id, TopicPartition(topic, reader.int32()))
    else:
        raise CorruptRecordError(f"__consumer_offsets key: unknown key version {version}")
    reader.done()
    return key


# --- offset values --------------------------------------------------------------------------------


def encode_offset_value(value: OffsetAndMetadata) -> bytes:
    """The bytes of a committed (or pending) offset."""
    writer = _Writer()
    if value.expire_timestamp_ms is None:
        writer.int16(OFFSET_VALUE_VERSION).int64(value.offset).int32(value.leader_epoch)
        writer.string(value.metadata).int64(value.commit_timestamp_ms)
    else:
        if value.leader_epoch != -1:
            raise CoordinatorInvariantError("offset value v1 cannot carry a leader epoch")
        writer.int16(OFFSET_VALUE_VERSION_WITH_EXPIRY).int64(value.offset)
        writer.string(value.metadata).int64(value.commit_timestamp_ms)
        writer.int64(value.expire_timestamp_ms)
    return writer.finish()


def decode_offset_value(data: bytes) -> OffsetAndMetadata:
    """Parse an offset value (versions 0-3 of Kafka's OffsetCommitValue)."""
    reader = _Reader(data, "offset commit value")
    version = reader.int16()
    if version in (0, 1):
        offset = reader.int64()
        metadata = reader.string()
        commit_ts = reader.int64()
        expire_ts = reader.int64() if version == 1 else None
        value = OffsetAndMetadata(offset, -1, metadata, commit_ts, expire_ts)
    elif version in (2, 3):
        offset = reader.int64()
        leader_epoch = reader.int32() if version == 3 else -1
        metadata = reader.string()
        value = OffsetAndMetadata(offset, leader_epoch, metadata, reader.int64(), None)
    else:
        raise CorruptRecordError(f"offset commit value: unknown version {version}")
    reader.done()
    return value


# --- group values ---------------------------------------------------------------------------------


def encode_group_value(snapshot: GroupSnapshot) -> bytes:
    """The bytes of a group metadata record."""
    writer = _Writer()
    writer.int16(GROUP_VALUE_VERSION)
    writer.string(snapshot.protocol_type or "")
    writer.int32(snapshot.generation_id)
    writer.string(snapshot.protocol_name)
    writer.string(snapshot.leader_id)
    writer.int64(snapshot.state_timestamp_ms)
    writer.int32(len(snapshot.members))
    for member in snapshot.members:
        writer.string(member.member_id).string(member.group_instance_id)
        writer.string(member.client_id).string(member.client_host)
        writer.int32(member.rebalance_timeout_ms).int32(member.session_timeout_ms)
        writer.bytes_(member.subscription).bytes_(member.assignment)
    return writer.finish()


def decode_group_value(data: bytes) -> GroupSnapshot:
    """Parse a group metadata record (version 3 only: the one we write)."""
    reader = _Reader(data, "group metadata value")
    version = reader.int16()
    if version != GROUP_VALUE_VERSION:
        raise CorruptRecordError(f"group metadata value: unsupported version {version}")
    protocol_type = reader.string() or None
    generation_id = reader.int32()
    protocol_name = reader.nullable_string()
    leader_id = reader.nullable_string()
    state_timestamp_ms = reader.int64()
    count = reader.int32()
    if count < 0:
        raise CorruptRecordError(f"group metadata value: negative member count {count}")
    members = []
    for _ in range(count):
        member_id = reader.string()
        instance_id = reader.nullable_string()
        client_id = reader.string()
        client_host = reader.string()
        rebalance_timeout_ms = reader.int32()
        session_timeout_ms = reader.int32()
        subscription = reader.bytes_()
        assignment = reader.bytes_()
        members.append(
            MemberSnapshot(
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance_timeout_ms,
                session_timeout_ms,
                subscription,
                assignment,
            )
        )
    reader.done()
    return GroupSnapshot(
        protocol_type, generation_id, protocol_name, leader_id, state_timestamp_ms, tuple(members)
    )


# --- whole records --------------------------------------------------------------------------------

Record = tuple[bytes, bytes | None]


def offset_commit_record(
    group_id: str, tp: TopicPartition, value: OffsetAndMetadata | None
) -> Record:
    """A committed-offset record (None = tombstone)."""
    key = encode_key(OffsetCommitKey(group_id, tp))
    return key, None if value is None else encode_offset_value(value)


def pending_txn_offset_record(
    group_id: str, producer_id: int, tp: TopicPartition, value: OffsetAndMetadata | None
) -> Record:
    """A pending transactional offset record (None = tombstone: completed or discarded)."""
    key = encode_key(PendingTxnOffsetKey(group_id, producer_id, tp))
    return key, None if value is None else encode_offset_value(value)


def group_metadata_record(group_id: str, snapshot: GroupSnapshot | None) -> Record:
    """A group metadata record (None = tombstone: the group was deleted)."""
    key = encode_key(GroupMetadataKey(group_id))
    return key, None if snapshot is None else encode_group_value(snapshot)
