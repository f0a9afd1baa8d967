"""Build record batch v2 bytes for log tests (uncompressed, varint records, CRC32C).

Kept independent of ``oncestream.protocol.records`` on purpose: the log tests then check the log
against an encoding written from the protocol guide, not against the code under test's siblings.
"""

from __future__ import annotations

import struct

import crc32c

_HEADER = struct.Struct(">qiibIhiqqqhii")
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20


def _varint(value: int) -> bytes:
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = zigzag & 0x7F
        zigzag >>= 7
        if zigzag:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _record(offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None) -> bytes:
    body = bytearray(b"\x00")  # attributes
    body += _varint(timestamp_delta) + _varint(offset_delta)
    for field in (key, value):
        if field is None:
            body += _varint(-1)
        else:
            body += _varint(len(field)) + field
    body += _varint(0)  # no headers
    return _varint(len(body)) + bytes(body)


def make_batch(
    count: int = 1,
    *,
    values: list[bytes] | None = None,
    value_size: int = 10,
    timestamp_ms: int = 1_000,
    timestamps_ms: list[int] | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    attributes: int = 0,
    base_offset: int = 0,
    magic: int = 2,
    partition_leader_epoch: int = -1,
) -> bytes:
    """One valid batch of ``count`` records (or ``values``)."""
    if values is None:
        values = [bytes([65 + i % 26]) * value_size for i in range(count)]
    count = len(values)
    if timestamps_ms is None:
        timestamps_ms = [timestamp_ms] * count
    assert len(timestamps_ms) == count
    base_timestamp = timestamps_ms[0]
    records = b"".join(
        _record(i, ts - base_timestamp, None, value) for i, (ts, value) in enumerate(zip(timestamps_ms, values))
    )
    after_crc = struct.pack(
        ">hiqqqhii",
        attributes,
        count - 1,
        base_timestamp,
        max(timestamps_ms),
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    ) + records
    crc = crc32c.crc32c(after_crc)
    batch_length = 4 + 1 + 4 + len(after_crc)  # leader epoch + magic + crc + rest
    return struct.pack(">qiibI", base_offset, batch_length, partition_leader_epoch, magic, crc) + after_crc


def idempotent_batch(producer_id: int, epoch: int, sequence: int, count: int = 1, **kwargs) -> bytes:
    """A batch from an idempotent producer."""
    return make_batch(count, producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence, **kwargs)


def control_batch(producer_id: int, epoch: int, *, commit: bool = True, timestamp_ms: int = 1_000) -> bytes:
    """A transaction marker batch (control + transactional, one control record)."""
    key = struct.pack(">hh", 0, 1 if commit else 0)
    value = struct.pack(">hi", 0, 0)
    records = _record(0, 0, key, value)
    after_crc = struct.pack(
        ">hiqqqhii", ATTR_CONTROL | ATTR_TRANSACTIONAL, 0, timestamp_ms, timestamp_ms, producer_id, epoch, -1, 1
    ) + records
    crc = crc32c.crc32c(after_crc)
    return struct.pack(">qiibI", 0, 9 + len(after_crc), -1, 2, crc) + after_crc


def header_fields(batch: bytes) -> dict[str, int]:
    """The header of a stored batch as a dict (for assertions)."""
    names = (
        "base_offset batch_length partition_leader_epoch magic crc attributes last_offset_delta "
        "base_timestamp max_timestamp producer_id producer_epoch base_sequence record_count"
    ).split()
    return dict(zip(names, _HEADER.unpack_from(batch, 0)))


def split_batches(data: bytes) -> list[bytes]:
    """Cut concatenated batches apart using their length fields."""
    out = []
    position = 0
    while position < len(data):
        (length,) = struct.unpack_from(">i", data, position + 8)
        out.append(data[position : position + 12 + length])
        position += 12 + length
    return out


def with_bad_crc(batch: bytes) -> bytes:
    """The same batch with one payload byte flipped (CRC no longer matches)."""
    damaged = bytearray(batch)
    damaged[-1] ^= 0xFF
    return bytes(damaged)
