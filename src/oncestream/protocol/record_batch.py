"""Record batch v2 (magic 2) header view: parse, validate, patch the base offset.

The broker never decodes the records inside a batch on the produce or fetch path: it reads the
fixed 61-byte header, checks the CRC32C (which covers ``attributes`` to the end of the batch and
therefore not the base offset), assigns offsets by rewriting the first 8 bytes, and stores the
batch verbatim. This module is that header view. It is hand-written because it is a dozen fixed
fields read with ``struct``; kio covers the request/response schemas, not the batch layout, and
its ``records`` package decodes whole records, which this hot path must not do.

Layout (all big-endian)::

    0  baseOffset            int64
    8  batchLength           int32   bytes after this field
    12 partitionLeaderEpoch  int32
    16 magic                 int8    (2)
    17 crc                   uint32  CRC32C of bytes [21, end)
    21 attributes            int16   bits 0-2 codec, 3 timestampType, 4 transactional, 5 control
    23 lastOffsetDelta       int32
    27 baseTimestamp         int64
    35 maxTimestamp          int64
    43 producerId            int64
    51 producerEpoch         int16
    53 baseSequence          int32
    57 recordCount           int32
    61 records...
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from oncestream.errors import CorruptRecordError, UnsupportedMagicError

HEADER_SIZE_BYTES = 61
# Everything up to and including ``magic``: enough to learn the size and format of a batch.
LOG_OVERHEAD_BYTES = 12  # baseOffset + batchLength
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
CURRENT_MAGIC = 2

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1

ATTR_COMPRESSION_MASK = 0x07
ATTR_TIMESTAMP_TYPE_LOG_APPEND = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40

HEADER_STRUCT = struct.Struct(">qiibIhiqqqhii")  # the 61 header bytes, in the order above
_HEADER = HEADER_STRUCT
_CRC = struct.Struct(">I")
_BASE_OFFSET = struct.Struct(">q")
_LENGTH = struct.Struct(">qi")
_INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The fixed fields of one record batch, as stored on the wire and on disk."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size_bytes(self) -> int:
        """Total size of the batch including the 12 bytes of offset and length."""
        return self.batch_length + LOG_OVERHEAD_BYTES

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record; sequences wrap from int32 max to 0."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.last_offset_delta)


def increment_sequence(sequence: int, delta: int) -> int:
    """Kafka sequences wrap at int32 max back to 0 (DefaultRecordBatch.incrementSequence)."""
    if sequence > _INT32_MAX - delta:
        return delta - (_INT32_MAX - sequence) - 1
    return sequence + delta


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Read the header of the batch starting at ``pos``. Raises CorruptRecordError if too short."""
    if len(buf) - pos < HEADER_SIZE_BYTES:
        raise CorruptRecordError("record batch shorter than its header")
    return BatchHeader(*_HEADER.unpack_from(buf, pos))


def compute_crc(batch: bytes | bytearray | memoryview) -> int:
    """CRC32C over attributes..end, as stored in the crc field."""
    # Imported on first use: the crc32c package calls importlib.metadata when imported (12 ms of
    # a client's start-up), and a consumer without check.crcs never computes a CRC.
    import crc32c

    return crc32c.crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:])


def write_crc(batch: bytearray | memoryview) -> None:
    """Store the CRC32C of a batch built in place (the last step of building one)."""
    _CRC.pack_into(batch, CRC_OFFSET, compute_crc(batch))


def iter_batches(
    records: bytes | bytearray | memoryview, *, verify_crc: bool = True
) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Split a records blob into (header, batch view) pairs, validating each.

    Raises UnsupportedMagicError for magic 0/1 and CorruptRecordError for a bad length, a
    truncated batch, a CRC mismatch or a batch whose header fields contradict each other.
    """
    view = memoryview(records)
    total = len(view)
    pos = 0
    while pos < total:
        if total - pos < LOG_OVERHEAD_BYTES + 5:
            raise CorruptRecordError("truncated record batch")
        magic = view[pos + MAGIC_OFFSET]
        if magic != CURRENT_MAGIC:
            raise UnsupportedMagicError(f"record batch magic {magic} is not supported")
        header = parse_header(view, pos)
        size = header.size_bytes
        if header.batch_length < HEADER_SIZE_BYTES - LOG_OVERHEAD_BYTES or pos + size > total:
            raise CorruptRecordError("record batch length out of bounds")
        batch = view[pos : pos + size]
        if verify_crc:
            check_crc(header, batch)
        if header.record_count < 0 or header.last_offset_delta < 0:
            raise CorruptRecordError("negative record count or offset delta")
        yield header, batch
        pos += size


def check_crc(header: BatchHeader, batch: bytes | bytearray | memoryview) -> None:
    """CorruptRecordError unless ``batch`` (as split by ``iter_batches``) matches its header's CRC32C."""
    if compute_crc(batch) != header.crc:
        raise CorruptRecordError("record batch CRC32C mismatch")


def patch_base_offset(batch: bytearray | memoryview, base_offset: int) -> None:
    """Assign offsets to a batch in place. The CRC does not cover these bytes."""
    _BASE_OFFSET.pack_into(batch, 0, base_offset)


def peek_size(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int] | None:
    """(base_offset, total size) of the batch at ``pos``, or None if fewer than 12 bytes remain."""
    if len(buf) - pos < LOG_OVERHEAD_BYTES:
        return None
    base_offset, length = _LENGTH.unpack_from(buf, pos)
    return base_offset, length + LOG_OVERHEAD_BYTES
