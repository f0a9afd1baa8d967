"""The records of ``__share_group_state``, laid out as Kafka 4.x's share coordinator writes them
(share-coordinator/src/main/resources/common/message/Share{Snapshot,Update}{Key,Value}.json):

    key   = int16 record type (0 ShareSnapshot, 1 ShareUpdate), then GroupId (string),
            TopicId (uuid), Partition (int32)                                   [not flexible]
    ShareSnapshotValue v0 = SnapshotEpoch i32, StateEpoch i32, LeaderEpoch i32, StartOffset i64,
            CreateTimestamp i64, WriteTimestamp i64, StateBatches[]              [flexible]
    ShareUpdateValue v0   = SnapshotEpoch i32, LeaderEpoch i32, StartOffset i64, StateBatches[]
    StateBatch = FirstOffset i64, LastOffset i64, DeliveryState i8, DeliveryCount i16

A share-partition's state is its latest snapshot with every later update applied in log order.
Snapshot and update keys differ, so the topic must not be compacted (Kafka uses the delete
policy and prunes below the latest snapshot; we keep everything: see docs).
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from oncestream.coordinator.share.partition import StateBatch
from oncestream.protocol.varint import encode_uvarint, read_uvarint

SNAPSHOT_TYPE = 0
UPDATE_TYPE = 1
_VALUE_VERSION = 0
_BATCH = struct.Struct(">qqbh")


class ShareRecordError(ValueError):
    """A __share_group_state record this version cannot read."""


@dataclass(frozen=True)
class ShareStateKey:
    record_type: int
    group_id: str
    topic_id: uuid.UUID
    partition: int


@dataclass(frozen=True)
class ShareStateValue:
    snapshot_epoch: int
    start_offset: int
    batches: tuple[StateBatch, ...]
    state_epoch: int = 0
    leader_epoch: int = 0
    create_timestamp_ms: int = -1
    write_timestamp_ms: int = -1


def encode_key(key: ShareStateKey) -> bytes:
    group = key.group_id.encode()
    return (struct.pack(">hh", key.record_type, len(group)) + group + key.topic_id.bytes
            + struct.pack(">i", key.partition))


def decode_key(data: bytes) -> ShareStateKey:
    try:
        record_type, length = struct.unpack_from(">hh", data, 0)
        if record_type not in (SNAPSHOT_TYPE, UPDATE_TYPE):
            raise ShareRecordError(f"unknown __share_group_state record type {record_type}")
        group = data[4 : 4 + length].decode()
        pos = 4 + length
        topic_id = uuid.UUID(bytes=bytes(data[pos : pos + 16]))
        (partition,) = struct.unpack_from(">i", data, pos + 16)
    except (struct.error, UnicodeDecodeError) as exc:
        raise ShareRecordError(f"malformed __share_group_state key: {exc}") from exc
    return ShareStateKey(record_type, group, topic_id, partition)


def _encode_batches(batches: tuple[StateBatch, ...]) -> bytes:
    out = bytearray(encode_uvarint(len(batches) + 1))
    for b in batches:
        out += _BATCH.pack(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
        out += b"\x00"  # no tagged fields
    return bytes(out)


def _decode_batches(data: bytes, pos: int) -> tuple[tuple[StateBatch, ...], int]:
    count, pos = read_uvarint(data, pos)
    batches = []
    for _ in range(max(count - 1, 0)):
        first, last, state, delivered = _BATCH.unpack_from(data, pos)
        pos += _BATCH.size
        pos = _skip_tags(data, pos)
        batches.append(StateBatch(first, last, state, delivered))
    return tuple(batches), pos


def _skip_tags(data: bytes, pos: int) -> int:
    count, pos = read_uvarint(data, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(data, pos)
        size, pos = read_uvarint(data, pos)
        pos += size
    return pos


def encode_value(record_type: int, value: ShareStateValue) -> bytes:
    if record_type == SNAPSHOT_TYPE:
        head = struct.pack(">hiiiqqq", _VALUE_VERSION, value.snapshot_epoch, value.state_epoch, value.leader_epoch,
                           value.start_offset, value.create_timestamp_ms, value.write_timestamp_ms)
    else:
        head = struct.pack(">hiiq", _VALUE_VERSION, value.snapshot_epoch, value.leader_epoch, value.start_offset)
    return head + _encode_batches(value.batches) + b"\x00"


def decode_value(record_type: int, data: bytes) -> ShareStateValue:
    try:
        if record_type == SNAPSHOT_TYPE:
            version, snap, state_epoch, leader, start, created, written = struct.unpack_from(">hiiiqqq", data, 0)
            pos = struct.calcsize(">hiiiqqq")
        else:
            version, snap, leader, start = struct.unpack_from(">hiiq", data, 0)
            state_epoch, created, written = 0, -1, -1
            pos = struct.calcsize(">hiiq")
        if version != _VALUE_VERSION:
            raise ShareRecordError(f"__share_group_state value version {version} is not supported")
        batches, pos = _decode_batches(data, pos)
    except (struct.error, IndexError) as exc:
        raise ShareRecordError(f"malformed __share_group_state value: {exc}") from exc
    return ShareStateValue(snap, start, batches, state_epoch, leader, created, written)
