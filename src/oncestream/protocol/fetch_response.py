"""Zero-copy encoder for Fetch responses (v4-v12).

Why hand-written: kio's writer copies every record blob into one ``BytesIO``, and profiling the
consume benchmark showed that copy plus its varint writer taking over a third of the broker's time.
This encoder returns a list of buffers (small header pieces plus the record chunks exactly as
read from the segment files, or ranges of those files), which the server hands to the transport
with ``writelines`` (the ranges with sendfile), so the records are never copied in Python. The
field order follows the protocol guide's FetchResponse schema; tests compare its output byte for
byte with kio's encoding of the same response.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence, Sized
from dataclasses import dataclass, field
from typing import Any

from oncestream.protocol.varint import encode_uvarint

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PART_HEAD = struct.Struct(">ihq")  # partition_index, error_code, high_watermark
_I64 = struct.Struct(">q")
_ABORTED = struct.Struct(">qq")

FLEXIBLE_FROM_VERSION = 12
MIN_VERSION, MAX_VERSION = 4, 12


@dataclass(slots=True)
class PartitionFetchResult:
    """What one partition contributes to a Fetch response."""

    partition_index: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: list[tuple[int, int]] | None  # (producer_id, first_offset); None = null
    # Record sections in wire order: bytes, or ranges of segment files (anything with the byte
    # length as len()) that the server sends with sendfile (broker/fetch_response_writer.py).
    chunks: Sequence[Sized] = field(default_factory=list)
    size_bytes: int = 0


def _string(name: str, flexible: bool) -> bytes:
    raw = name.encode()
    return (encode_uvarint(len(raw) + 1) if flexible else _I16.pack(len(raw))) + raw


def _array_len(n: int, flexible: bool) -> bytes:
    return encode_uvarint(n + 1) if flexible else _I32.pack(n)


def encode_fetch_response(
    version: int,
    correlation_id: int,
    topics: Sequence[tuple[str, Sequence[PartitionFetchResult]]],
    *,
    error_code: int = 0,
    session_id: int = 0,
    throttle_time_ms: int = 0,
) -> list[Any]:
    """Encode a whole Fetch response frame (size prefix and header included) as buffers: bytes,
    and each partition's chunks as given (bytes, or file ranges for the server to sendfile)."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"Fetch v{version} is not encoded here (v{MIN_VERSION}-v{MAX_VERSION})")
    flexible = version >= FLEXIBLE_FROM_VERSION
    out: list[Any] = []
    head = bytearray(_I32.pack(correlation_id))
    if flexible:
        head += b"\x00"  # response header v1: no tagged fields
    head += _I32.pack(throttle_time_ms)
    if version >= 7:
        head += _I16.pack(error_code) + _I32.pack(session_id)
    head += _array_len(len(topics), flexible)
    for name, partitions in topics:
        head += _string(name, flexible)
        head += _array_len(len(partitions), flexible)
        for p in partitions:
            head += _PART_HEAD.pack(p.partition_index, p.error_code, p.high_watermark)
            head += _I64.pack(p.last_stable_offset)
            if version >= 5:
                head += _I64.pack(p.log_start_offset)
            if p.aborted_transactions is None:
                head += b"\x00" if flexible else _I32.pack(-1)
            else:
                head += _array_len(len(p.aborted_transactions), flexible)
                for producer_id, first_offset in p.aborted_transactions:
                    head += _ABORTED.pack(producer_id, first_offset)
                    if flexible:
                        head += b"\x00"
            if version >= 11:
                head += _I32.pack(-1)  # preferred_read_replica: none
            head += encode_uvarint(p.size_bytes + 1) if flexible else _I32.pack(p.size_bytes)
            if p.size_bytes:
                out.append(bytes(head))
                head = bytearray()
                out.extend(p.chunks)
            if flexible:
                head += b"\x00"  # partition tagged fields
        if flexible:
            head += b"\x00"  # topic tagged fields
    if flexible:
        head += b"\x00"  # response tagged fields
    out.append(bytes(head))
    total = sum(len(b) for b in out)
    out.insert(0, _I32.pack(total))
    return out
