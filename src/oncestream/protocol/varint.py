"""The one varint codec: Kafka's zig-zag varint/varlong (records) and unsigned varint (compact
lengths and tagged fields of flexible versions).

Everyone reads and writes varints through this module: the record codec (``records``), the log's
compaction rewrite (``log.batch_records``), the producer's record builder, the fetch decoders of
the client and of the Spark reader, the request/response headers and the hand-framed Fetch
response and Produce request. The two per-record decoders inline the one- and two-byte cases of
``read_varint`` (see their docstrings for the measurement) and call it for everything longer, so
overlong and truncated varints are judged by this code alone. ``protocol.length_guard`` keeps its
own unsigned reader on purpose (it must walk lengths that ``read_uvarint`` refuses).

Encoding (zig-zag maps signed to unsigned so small negatives stay short)::

    zigzag(v) = (v << 1) ^ (v >> 63)      7 bits a byte, low group first, high bit = more follows
"""

from __future__ import annotations

from oncestream.errors import CorruptRecordError

# A varlong is at most 10 bytes (64 bits in 7-bit groups); an unsigned varint of the protocol's
# compact lengths and tags is at most 5 (32 bits), as Kafka's ByteUtils.readUnsignedVarint.
MAX_VARLONG_BYTES = 10
MAX_UVARINT_BYTES = 5
_SMALL_TABLE_SIZE = 1 << 14


class MalformedVarintError(ValueError):
    """An unsigned varint runs past its buffer or over five bytes (a malformed frame)."""


def _write_unsigned(out: bytearray, value: int) -> None:
    """7 bits a byte, low group first; the high bit says another byte follows."""
    while value & ~0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _read_unsigned(buf: bytes | bytearray | memoryview, pos: int, max_bytes: int) -> tuple[int, int]:
    """(value, position after it), or (-1, pos) when the buffer ends inside it or it runs over
    ``max_bytes`` (each caller raises its own error)."""
    shift = 0
    result = 0
    limit = 7 * max_bytes
    while True:
        if pos >= len(buf) or shift >= limit:
            return -1, pos
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _encode_zigzag(value: int) -> bytes:
    out = bytearray()
    _write_unsigned(out, (value << 1) ^ (value >> 63))
    return bytes(out)


# SMALL_VARINTS[n] is the zig-zag varint of n for 0 <= n < 16384: record lengths, key/value
# lengths and offset deltas of ordinary records come from this table without any arithmetic.
SMALL_VARINTS: list[bytes] = [_encode_zigzag(n) for n in range(_SMALL_TABLE_SIZE)]
SMALL_VARINTS_SIZE = _SMALL_TABLE_SIZE
NULL_LENGTH = _encode_zigzag(-1)  # a null key, value or header value


def encode_varint(value: int) -> bytes:
    """Zig-zag varint of any int64 (Kafka's varint and varlong share this encoding)."""
    if 0 <= value < _SMALL_TABLE_SIZE:
        return SMALL_VARINTS[value]
    return _encode_zigzag(value)


def write_varint(out: bytearray, value: int) -> None:
    """Append the zig-zag varint of ``value`` to ``out``."""
    if 0 <= value < _SMALL_TABLE_SIZE:
        out += SMALL_VARINTS[value]
    else:
        _write_unsigned(out, (value << 1) ^ (value >> 63))


def read_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Zig-zag varint at ``pos``: (value, position after it).

    Raises CorruptRecordError when the buffer ends inside it or it runs over ten bytes.
    """
    raw, pos = _read_unsigned(buf, pos, MAX_VARLONG_BYTES)
    if raw < 0:
        raise CorruptRecordError("truncated or overlong varint")
    return (raw >> 1) ^ -(raw & 1), pos


def encode_uvarint(value: int) -> bytes:
    """Unsigned varint of a non-negative int (compact lengths are length + 1)."""
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    _write_unsigned(out, value)
    return bytes(out)


def read_uvarint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Unsigned varint at ``pos``: (value, position after it).

    Raises MalformedVarintError when the buffer ends inside it or it runs over five bytes.
    """
    value, pos = _read_unsigned(buf, pos, MAX_UVARINT_BYTES)
    if value < 0:
        raise MalformedVarintError("bad unsigned varint")
    return value, pos
