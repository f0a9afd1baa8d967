"""Record batch v2 pieces for the producer: records are encoded as they are produced (by the
accumulator, with the varint table of ``protocol.varint``), the header (producer id, epoch, sequence, CRC32C) is
written when the batch is sent.

Record layout (varints zig-zag)::

    length | attributes int8 | timestampDelta | offsetDelta | keyLength | key
    | valueLength | value | headerCount [| headerKeyLength | headerKey | headerValueLength | value]*

Small varints come from a precomputed table, so encoding a record without headers is a handful
of bytearray appends. The records section may be compressed once; re-stamping the header for a
retry under a new producer epoch (KIP-360) recomputes only the CRC, never re-encodes records.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import crc32c

from oncestream.errors import InvalidRecordError
from oncestream.protocol import record_batch as rb
from oncestream.protocol.compression import compress
from oncestream.protocol.varint import NULL_LENGTH, SMALL_VARINTS, SMALL_VARINTS_SIZE, encode_varint

# VARINT[n] is the zig-zag varint of n for 0 <= n < _TABLE_SIZE (the codec's table).
VARINT: list[bytes] = SMALL_VARINTS
VARINT_LEN: list[int] = [len(v) for v in VARINT]
_TABLE_SIZE = SMALL_VARINTS_SIZE
_NULL = NULL_LENGTH
_HEADER_TAIL = struct.Struct(">hiqqqhii")  # attributes .. recordCount (what the CRC covers first)
_HEADER_HEAD = struct.Struct(">qiibI")  # baseOffset, batchLength, leaderEpoch, magic, crc

Header = tuple[str, bytes | None]


varint = encode_varint  # zig-zag varint of any int64 (the accumulator calls it by this name)


def encode_headers(headers: Sequence[Header]) -> bytes:
    """The headerCount and headers of one record."""
    out = bytearray(varint(len(headers)))
    for hkey, hvalue in headers:
        raw = hkey.encode() if isinstance(hkey, str) else bytes(hkey)
        out += varint(len(raw))
        out += raw
        if hvalue is None:
            out += _NULL
        else:
            if isinstance(hvalue, str):
                hvalue = hvalue.encode()
            out += varint(len(hvalue))
            out += hvalue
    return bytes(out)


class SealedBatch:
    """The records section of a finished batch (possibly compressed) plus its header fields."""

    __slots__ = ("attributes", "base_timestamp_ms", "count", "max_timestamp_ms", "payload")

    def __init__(self, records: bytes, count: int, base_timestamp_ms: int, max_timestamp_ms: int,
                 compression: int) -> None:
        if count <= 0:  # a batch with last offset delta -1 would corrupt the partition
            raise InvalidRecordError("a record batch holds at least one record")
        self.payload = compress(compression, records) if compression else records
        self.attributes = compression
        self.count = count
        self.base_timestamp_ms = base_timestamp_ms
        self.max_timestamp_ms = max_timestamp_ms

    def header(self, producer_id: int, producer_epoch: int, base_sequence: int,
               transactional: bool) -> bytes:
        """The 61-byte batch header for this identity, with a valid CRC32C."""
        attributes = self.attributes | (rb.ATTR_TRANSACTIONAL if transactional else 0)
        tail = _HEADER_TAIL.pack(
            attributes,
            self.count - 1,
            self.base_timestamp_ms,
            self.max_timestamp_ms,
            producer_id,
            producer_epoch,
            base_sequence,
            self.count,
        )
        crc = crc32c.crc32c(self.payload, crc32c.crc32c(tail))
        batch_length = rb.HEADER_SIZE_BYTES - rb.LOG_OVERHEAD_BYTES + len(self.payload)
        return _HEADER_HEAD.pack(0, batch_length, -1, rb.CURRENT_MAGIC, crc) + tail

    @property
    def size_bytes(self) -> int:
        """Size of the whole batch on the wire."""
        return rb.HEADER_SIZE_BYTES + len(self.payload)
