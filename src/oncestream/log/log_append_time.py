"""message.timestamp.type=LogAppendTime: stamp a producer's batch with the broker's time.

Used by :meth:`~oncestream.log.partition_log.PartitionLog.append` when the topic's timestamps are
the broker's: the batch header is rewritten (timestamp type, maxTimestamp, base offset, CRC)
while the records after it are kept as they arrived, uncopied.
"""

from __future__ import annotations

import struct

import crc32c

from oncestream.log.segment import PreparedBatch
from oncestream.protocol.record_batch import (
    ATTR_TIMESTAMP_TYPE_LOG_APPEND,
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER_SIZE_BYTES,
    patch_base_offset,
)

_INT16 = struct.Struct(">h")
_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")
_INT32 = struct.Struct(">i")
_LAST_OFFSET_DELTA_OFFSET = 23
_MAX_TIMESTAMP_OFFSET = 35


def prepare_log_append_time(batch: memoryview, base_offset: int, now_ms: int) -> PreparedBatch:
    """Stamp a batch with the broker's time without copying its records.

    Sets the timestamp-type bit and maxTimestamp (as Kafka does for LogAppendTime) in a copy of the
    61-byte header and computes the new CRC over that header part followed by the untouched records.
    """
    head = bytearray(batch[:HEADER_SIZE_BYTES])
    attributes = _INT16.unpack_from(head, ATTRIBUTES_OFFSET)[0] | ATTR_TIMESTAMP_TYPE_LOG_APPEND
    _INT16.pack_into(head, ATTRIBUTES_OFFSET, attributes)
    _INT64.pack_into(head, _MAX_TIMESTAMP_OFFSET, now_ms)
    tail = batch[HEADER_SIZE_BYTES:]
    crc = crc32c.crc32c(tail, crc32c.crc32c(memoryview(head)[ATTRIBUTES_OFFSET:]))
    _UINT32.pack_into(head, CRC_OFFSET, crc)
    patch_base_offset(head, base_offset)
    last_offset_delta = _INT32.unpack_from(head, _LAST_OFFSET_DELTA_OFFSET)[0]
    return PreparedBatch(bytes(head), tail, base_offset, base_offset + last_offset_delta, now_ms)
