"""The one varint codec (protocol/varint.py): Kafka's zig-zag varint/varlong of records and the
unsigned varint of flexible versions' compact lengths and tagged fields (KIP-482)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oncestream.errors import CorruptRecordError
from oncestream.protocol.codec import MalformedRequestError, parse_request_header
from oncestream.protocol.varint import (
    MalformedVarintError,
    encode_uvarint,
    encode_varint,
    read_uvarint,
    read_varint,
    write_varint,
)

# Zig-zag encodings as Kafka's ByteUtils writes them.
KNOWN_VARINTS = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (63, "7e"),
    (-64, "7f"),
    (64, "8001"),
    (8191, "fe7f"),
    (8192, "808001"),
    (2**31 - 1, "feffffff0f"),
    (-(2**31), "ffffffff0f"),
    (2**63 - 1, "feffffffffffffffff01"),
    (-(2**63), "ffffffffffffffffff01"),
]


@pytest.mark.parametrize(("value", "encoded"), KNOWN_VARINTS)
def test_zigzag_varints_match_kafkas_encoding(value: int, encoded: str) -> None:
    raw = bytes.fromhex(encoded)
    assert encode_varint(value) == raw
    out = bytearray(b"x")
    write_varint(out, value)
    assert bytes(out) == b"x" + raw
    assert read_varint(b"y" + raw + b"z", 1) == (value, 1 + len(raw))


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_every_int64_round_trips(value: int) -> None:
    raw = encode_varint(value)
    assert read_varint(raw, 0) == (value, len(raw))


def test_truncated_and_overlong_varints_are_corrupt_records() -> None:
    """A varlong has at most ten bytes; an eleventh is corruption, not a bigger number."""
    with pytest.raises(CorruptRecordError):
        read_varint(b"\x80\x80", 0)
    with pytest.raises(CorruptRecordError):
        read_varint(b"\x80" * 10 + b"\x01", 0)
    assert read_varint(b"\x80" * 9 + b"\x01", 0)[1] == 10


@pytest.mark.parametrize(("value", "encoded"), [(0, "00"), (1, "01"), (127, "7f"), (128, "8001"), (300, "ac02"),
                                                (2**32 - 1, "ffffffff0f")])
def test_unsigned_varints(value: int, encoded: str) -> None:
    assert encode_uvarint(value) == bytes.fromhex(encoded)
    assert read_uvarint(bytes.fromhex(encoded), 0) == (value, len(encoded) // 2)


def test_unsigned_varints_stop_at_five_bytes() -> None:
    """Kafka's readUnsignedVarint refuses a sixth byte (compact lengths are 32-bit)."""
    with pytest.raises(MalformedVarintError):
        read_uvarint(b"\x80" * 5 + b"\x01", 0)
    with pytest.raises(MalformedVarintError):
        read_uvarint(b"\x80", 0)


def test_a_bad_varint_in_a_request_header_is_a_malformed_request() -> None:
    """KIP-482 header v2: an overlong tagged-field count is a malformed request (the dispatcher
    closes the connection), never a stray ValueError out of the varint codec."""
    api_versions_v3 = struct.pack(">hhih", 18, 3, 7, 0)
    with pytest.raises(MalformedRequestError):
        parse_request_header(api_versions_v3 + b"\x80" * 6)
    assert parse_request_header(api_versions_v3 + b"\x00").body_offset == len(api_versions_v3) + 1
