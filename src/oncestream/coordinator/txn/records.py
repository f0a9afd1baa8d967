"""Binary encoding of the __transaction_state records (key and value) the coordinator writes.

Every key and value starts with an int16 *version* that says what follows, so a reader never has to
guess. Integers are big-endian; ``string`` is int16 length + UTF-8. The key is byte-for-byte
Apache Kafka's TransactionLogKey v0; the value is oncestream's own layout (version 1000, so it is
never mistaken for Kafka's TransactionLogValue v0/v1) because it carries fields Kafka keeps in
tagged fields or not at all:

===========================  ====================================================================
key version 0                transactional_id string
value version 1000           producer_id int64, producer_epoch int16,
                             last_producer_id int64, last_producer_epoch int16,
                             next_producer_id int64,
                             ongoing_txn_producer_id int64, ongoing_txn_producer_epoch int16,
                             timeout_ms int32, state int8 (Kafka's state ids),
                             flags int8 (bit 0: KIP-939 two-phase commit),
                             client_transaction_version int16,
                             start_timestamp_ms int64, last_update_timestamp_ms int64,
                             partitions: int32 topic count, then per topic (sorted):
                             topic string, int32 count, int32 partition ... (sorted)
===========================  ====================================================================

A value of None is a tombstone: the transactional id expired. One key per transactional id, so log
compaction keeps exactly the latest state and a replay in which the last value per key wins
rebuilds the coordinator.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from itertools import groupby
from typing import Any

from oncestream.coordinator.txn.metadata import TxnSnapshot
from oncestream.coordinator.txn.state import PERSISTABLE_STATES, state_from_id
from oncestream.errors import CoordinatorInvariantError, CorruptRecordError
from oncestream.topic_partition import TopicPartition

KEY_VERSION = 0
VALUE_VERSION = 1000

_FLAG_TWO_PHASE_COMMIT = 0x01
_KNOWN_FLAGS = _FLAG_TWO_PHASE_COMMIT

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
# Fixed-size head of a value, after the version.
_VALUE_HEAD = struct.Struct(">qhqhqqhibbhqq")


class _Reader:
    """Reads big-endian fields, raising CorruptRecordError instead of running off the end."""

    def __init__(self, data: bytes, what: str) -> None:
        self._data = data
        self._pos = 0
        self._what = what

    def take(self, fmt: struct.Struct) -> tuple[Any, ...]:
        end = self._pos + fmt.size
        if end > len(self._data):
            raise CorruptRecordError(f"{self._what} truncated at byte {self._pos}")
        fields = fmt.unpack_from(self._data, self._pos)
        self._pos = end
        return fields

    def int16(self) -> int:
        value: int = self.take(_I16)[0]
        return value

    def int32(self) -> int:
        value: int = self.take(_I32)[0]
        return value

    def string(self) -> str:
        length = self.int16()
        if length < 0:
            raise CorruptRecordError(f"{self._what} has a null string where one is required")
        end = self._pos + length
        if end > len(self._data):
            raise CorruptRecordError(f"{self._what} string runs past the end")
        raw = self._data[self._pos : end]
        self._pos = end
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptRecordError(f"{self._what} string is not UTF-8") from None

    def finish(self) -> None:
        if self._pos != len(self._data):
            raise CorruptRecordError(
                f"{self._what} has {len(self._data) - self._pos} trailing bytes"
            )


def _string(text: str) -> bytes:
    raw = text.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise CoordinatorInvariantError("string longer than an int16 length allows")
    return _I16.pack(len(raw)) + raw


def encode_key(transactional_id: str) -> bytes:
    """The log key of ``transactional_id`` (Kafka's TransactionLogKey v0)."""
    if not transactional_id:
        raise CoordinatorInvariantError("transactional ids are never empty")
    return _I16.pack(KEY_VERSION) + _string(transactional_id)


def decode_key(data: bytes) -> str:
    """The transactional id in a key; CorruptRecordError for an unknown version or bad bytes."""
    reader = _Reader(data, "transaction log key")
    version = reader.int16()
    if version != KEY_VERSION:
        raise CorruptRecordError(f"unknown transaction log key version {version}")
    transactional_id = reader.string()
    reader.finish()
    if not transactional_id:
        raise CorruptRecordError("transaction log key with an empty transactional id")
    return transactional_id


def encode_value(snapshot: TxnSnapshot) -> bytes:
    """The log value holding ``snapshot`` (which must be a persistable state)."""
    if snapshot.state not in PERSISTABLE_STATES:
        raise CoordinatorInvariantError(f"{snapshot.state.value} is never persisted")
    flags = _FLAG_TWO_PHASE_COMMIT if snapshot.two_phase_commit else 0
    parts = [
        _I16.pack(VALUE_VERSION),
        _VALUE_HEAD.pack(
            snapshot.producer_id,
            snapshot.producer_epoch,
            snapshot.last_producer_id,
            snapshot.last_producer_epoch,
            snapshot.next_producer_id,
            snapshot.ongoing_txn_producer_id,
            snapshot.ongoing_txn_producer_epoch,
            snapshot.timeout_ms,
            snapshot.state.id,
            flags,
            snapshot.client_transaction_version,
            snapshot.start_timestamp_ms,
            snapshot.last_update_timestamp_ms,
        ),
    ]
    ordered = sorted(snapshot.partitions)
    topics = [
        (topic, [tp.partition for tp in group])
        for topic, group in groupby(ordered, key=lambda tp: tp.topic)
    ]
    parts.append(_I32.pack(len(topics)))
    for topic, partitions in topics:
        parts.append(_string(topic))
        parts.append(_I32.pack(len(partitions)))
        parts.extend(_I32.pack(p) for p in partitions)
    return b"".join(parts)


def decode_value(data: bytes) -> TxnSnapshot:
    """The snapshot in a value; CorruptRecordError for an unknown version or bad bytes."""
    reader = _Reader(data, "transaction log value")
    version = reader.int16()
    if version != VALUE_VERSION:
        raise CorruptRecordError(f"unknown transaction log value version {version}")
    (
        producer_id,
        producer_epoch,
        last_producer_id,
        last_producer_epoch,
        next_producer_id,
        ongoing_txn_producer_id,
        ongoing_txn_producer_epoch,
        timeout_ms,
        state_id,
        flags,
        client_transaction_version,
        start_timestamp_ms,
        last_update_timestamp_ms,
    ) = reader.take(_VALUE_HEAD)
    try:
        state = state_from_id(state_id)
    except ValueError as exc:
        raise CorruptRecordError(str(exc)) from None
    if state not in PERSISTABLE_STATES:
        raise CorruptRecordError(f"transaction log value holds non-persistable state {state.value}")
    if flags & ~_KNOWN_FLAGS:
        raise CorruptRecordError(f"transaction log value has unknown flags {flags:#x}")
    topic_count = reader.int32()
    if topic_count < 0:
        raise CorruptRecordError("transaction log value has a negative topic count")
    partitions: list[TopicPartition] = []
    for _ in range(topic_count):
        topic = reader.string()
        count = reader.int32()
        if count < 0:
            raise CorruptRecordError("transaction log value has a negative partition count")
        partitions.extend(TopicPartition(topic, reader.int32()) for _ in range(count))
    reader.finish()
    try:
        return TxnSnapshot(
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            last_producer_id=last_producer_id,
            last_producer_epoch=last_producer_epoch,
            next_producer_id=next_producer_id,
            ongoing_txn_producer_id=ongoing_txn_producer_id,
            ongoing_txn_producer_epoch=ongoing_txn_producer_epoch,
            timeout_ms=timeout_ms,
            state=state,
            partitions=frozenset(partitions),
            start_timestamp_ms=start_timestamp_ms,
            last_update_timestamp_ms=last_update_timestamp_ms,
            two_phase_commit=bool(flags & _FLAG_TWO_PHASE_COMMIT),
            client_transaction_version=client_transaction_version,
        )
    except ValueError as exc:
        raise CorruptRecordError(f"transaction log value is inconsistent: {exc}") from None


def replay(records: Iterable[tuple[bytes, bytes | None]]) -> dict[str, TxnSnapshot]:
    """The latest snapshot per transactional id in ``records`` (log order); tombstones delete."""
    latest: dict[str, TxnSnapshot] = {}
    for key, value in records:
        transactional_id = decode_key(key)
        if value is None:
            latest.pop(transactional_id, None)
        else:
            latest[transactional_id] = decode_value(value)
    return latest
