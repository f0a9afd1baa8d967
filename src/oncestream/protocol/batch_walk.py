"""Walking the record batches of a buffer without decoding records: where the complete batches
of a fetch response end, and the offset after the last of them.

A fetch response may end inside a batch (the broker cuts its answer at the byte limit; the
consumer fetches the rest next time), so every reader of fetched data first takes the prefix of
complete batches: the client's fetcher (to pipeline its next fetch from the headers alone), the
client's fetch decoder, the Spark partition reader and ``records.decode_batches(allow_partial=True)``
(internal-topic replay, the commit journal, the CLI). This module is that one rule; each batch's
header is then read with ``record_batch``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from oncestream.errors import CorruptRecordError
from oncestream.protocol import record_batch as rb

_LENGTH = struct.Struct(">qi")  # baseOffset, batchLength
_LAST_OFFSET_DELTA = struct.Struct(">i")
_LAST_OFFSET_DELTA_AT = 23
_MIN_BATCH_LENGTH = rb.HEADER_SIZE_BYTES - rb.LOG_OVERHEAD_BYTES


def complete_batches_end(data: bytes | bytearray | memoryview) -> tuple[int, int]:
    """(bytes taken by the complete batches at the start of ``data``, offset after the last of
    them or -1 if there is none).

    A batch cut off by the end of ``data`` ends the walk (a fetch response's normal cut-off); a
    batch whose length field is shorter than a batch header is corruption, never a cut-off, and
    raises CorruptRecordError (the walk could not step over it).
    """
    pos, size, next_offset = 0, len(data), -1
    while size - pos >= rb.LOG_OVERHEAD_BYTES:
        base_offset, length = _LENGTH.unpack_from(data, pos)
        if length < _MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"record batch length {length} at byte {pos} is below the header size")
        end = pos + rb.LOG_OVERHEAD_BYTES + length
        if end > size:
            break
        next_offset = base_offset + _LAST_OFFSET_DELTA.unpack_from(data, pos + _LAST_OFFSET_DELTA_AT)[0] + 1
        pos = end
    return pos, next_offset


def complete_batches(data: bytes | bytearray | memoryview) -> memoryview:
    """The prefix of ``data`` that holds whole batches (without copying)."""
    view = memoryview(data)
    return view[: complete_batches_end(view)[0]]


def iter_complete_batches(
    data: bytes | bytearray | memoryview, *, verify_crc: bool = True
) -> Iterator[tuple[rb.BatchHeader, memoryview]]:
    """(header, batch view) of every complete batch, validated by ``record_batch.iter_batches``;
    a cut-off last batch is left out."""
    return rb.iter_batches(complete_batches(data), verify_crc=verify_crc)
