"""Transaction markers: the control records that end a transaction (KIP-98).

A marker is a control batch (attribute bit 5) whose one record has the key
``int16 version | int16 type`` (0 = ABORT, 1 = COMMIT) and the value
``int16 version | int32 coordinator epoch``. The broker writes markers uncompressed, but a reader
still decompresses a control batch that says it is compressed rather than misread it.
"""

from __future__ import annotations

import struct

from oncestream.errors import CorruptRecordError
from oncestream.protocol import record_batch as rb
from oncestream.protocol.compression import decompress
from oncestream.protocol.varint import read_varint

CONTROL_ABORT = 0
CONTROL_COMMIT = 1
NOT_A_MARKER = -1  # a control batch without records, or a key too short to hold a type

CONTROL_KEY = struct.Struct(">hh")  # version, type
CONTROL_VALUE = struct.Struct(">hi")  # version, coordinator epoch


def encode_marker_key(marker: int) -> bytes:
    """The key of a COMMIT or ABORT control record."""
    return CONTROL_KEY.pack(0, marker)


def encode_marker_value(coordinator_epoch: int) -> bytes:
    """The value of a COMMIT or ABORT control record."""
    return CONTROL_VALUE.pack(0, coordinator_epoch)


def marker_type(key: bytes | bytearray | memoryview | None) -> int:
    """CONTROL_ABORT or CONTROL_COMMIT (or another control type) from a control record's key;
    CorruptRecordError if the key cannot hold one."""
    if key is None or len(key) < CONTROL_KEY.size:
        raise CorruptRecordError("control record without a valid key")
    _version, control_type = CONTROL_KEY.unpack_from(key, 0)
    return int(control_type)


def first_marker_type(batch: bytes | bytearray | memoryview, start: int, end: int, attributes: int) -> int:
    """Type of the first control record of the control batch ``batch[start:end]`` (header
    included), read without decoding the rest; NOT_A_MARKER for a batch without one.

    Only the key is needed, so the record's other fields are stepped over. Raises
    CorruptRecordError for records that run past the batch.
    """
    codec = attributes & rb.ATTR_COMPRESSION_MASK
    pos = start + rb.HEADER_SIZE_BYTES
    if codec:
        batch = decompress(codec, memoryview(batch)[pos:end])
        pos, end = 0, len(batch)
    if pos >= end:
        return NOT_A_MARKER
    _length, pos = read_varint(batch, pos)
    pos += 1  # record attributes
    _timestamp_delta, pos = read_varint(batch, pos)
    _offset_delta, pos = read_varint(batch, pos)
    key_length, pos = read_varint(batch, pos)
    if key_length < CONTROL_KEY.size or pos + key_length > end:
        return NOT_A_MARKER
    _version, control_type = CONTROL_KEY.unpack_from(batch, pos)
    return int(control_type)
