"""Records inside a stored batch, for the two log features that must look at them.

The produce and fetch paths move batches verbatim; only two things in the log read records:

* the append check of compacted topics (every record needs a key), and
* the log cleaner, which drops records from a batch and writes the batch back.

Both work on *raw* records: the fields the cleaner needs (offset delta, timestamp delta, key,
whether the value is null) are parsed, and the rest of each record (key, value, headers) is kept
as the exact bytes it was stored as, so rewriting never changes a header or a value.

A rewritten batch keeps everything a reader or the producer state depends on, as Apache Kafka's
cleaner does: the base offset, the *original* last offset delta (so the batch still ends where it
ended and its last sequence, base sequence + last offset delta, is unchanged), the producer id,
epoch and base sequence, the partition leader epoch and the codec. Its record count may then be
smaller than last offset delta + 1; every Kafka client accepts that, since Kafka writes such
batches itself. The delete horizon (KIP-534) is stored the way Kafka stores it: attribute bit 6
set and the base timestamp holding the horizon, with the record timestamp deltas re-based so that
every record keeps its absolute timestamp.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from oncestream.errors import CorruptRecordError, InvalidRecordError
from oncestream.protocol import record_batch as rb
from oncestream.protocol.compression import COMPRESSION_NONE, compress, decompress
from oncestream.protocol.varint import read_varint, write_varint


@dataclass(frozen=True, slots=True)
class RawRecord:
    """One record of a batch: the fields compaction decides on, the rest as stored bytes."""

    attributes: int
    timestamp_delta: int
    offset_delta: int
    key: bytes | None
    has_value: bool  # False = tombstone (null value)
    fields: bytes  # keyLength | key | valueLength | value | headers, exactly as stored

    def absolute_offset(self, header: rb.BatchHeader) -> int:
        return header.base_offset + self.offset_delta

    def absolute_timestamp_ms(self, header: rb.BatchHeader) -> int:
        """The record's timestamp (for LogAppendTime batches every record has the batch's)."""
        if header.attributes & rb.ATTR_TIMESTAMP_TYPE_LOG_APPEND:
            return header.max_timestamp
        return header.base_timestamp + self.timestamp_delta


def _records_section(header: rb.BatchHeader, batch: bytes | memoryview) -> bytes:
    return decompress(header.compression, memoryview(batch)[rb.HEADER_SIZE_BYTES : header.size_bytes])


def iter_raw_records(header: rb.BatchHeader, batch: bytes | memoryview) -> list[RawRecord]:
    """Every record of ``batch`` (decompressed); CorruptRecordError if the records are malformed."""
    data = _records_section(header, batch)
    view = memoryview(data)
    records: list[RawRecord] = []
    position = 0
    for _ in range(header.record_count):
        length, position = read_varint(view, position)
        end = position + length
        if length < 1 or end > len(view):
            raise CorruptRecordError("record length out of bounds")
        attributes = view[position]
        timestamp_delta, cursor = read_varint(view, position + 1)
        offset_delta, cursor = read_varint(view, cursor)
        if not 0 <= offset_delta <= header.last_offset_delta:
            raise CorruptRecordError(f"record offset delta {offset_delta} outside the batch")
        fields_start = cursor
        key_length, cursor = read_varint(view, cursor)
        key = None
        if key_length >= 0:
            if cursor + key_length > end:
                raise CorruptRecordError("record key runs past the record")
            key = bytes(view[cursor : cursor + key_length])
            cursor += key_length
        value_length, cursor = read_varint(view, cursor)
        if cursor > end or cursor + max(value_length, 0) > end:
            raise CorruptRecordError("record value runs past the record")
        records.append(
            RawRecord(attributes, timestamp_delta, offset_delta, key, value_length >= 0, bytes(view[fields_start:end]))
        )
        position = end
    if position != len(view):
        raise CorruptRecordError("bytes left over after the last record of a batch")
    return records


def has_keyless_record(header: rb.BatchHeader, batch: bytes | memoryview) -> bool:
    """Whether any record of ``batch`` has a null key (refused by compacted topics)."""
    return any(record.key is None for record in iter_raw_records(header, batch))


def delete_horizon_ms(header: rb.BatchHeader) -> int | None:
    """The batch's delete horizon (KIP-534), or None if none was set."""
    if header.attributes & rb.ATTR_DELETE_HORIZON:
        return header.base_timestamp
    return None


def rebuild_batch(header: rb.BatchHeader, records: list[RawRecord], *, new_delete_horizon_ms: int | None) -> bytes:
    """A batch like the original holding only ``records`` (a subset, in order), with a fresh CRC.

    ``new_delete_horizon_ms`` sets a delete horizon on a batch that has none (ignored if it has
    one: a horizon, once set, never moves). With no records left this is the header-only batch
    Kafka keeps for a producer's last write (uncompressed, original timestamps).
    """
    # Typed errors, not asserts (python -O strips those): a wrong subset would be written to disk.
    if not all(0 <= r.offset_delta <= header.last_offset_delta for r in records):
        raise InvalidRecordError(f"rebuilding batch {header.base_offset}: a record lies outside the batch")
    if not all(a.offset_delta < b.offset_delta for a, b in itertools.pairwise(records)):
        raise InvalidRecordError(f"rebuilding batch {header.base_offset}: records must keep their order")
    log_append_time = bool(header.attributes & rb.ATTR_TIMESTAMP_TYPE_LOG_APPEND)
    attributes = header.attributes
    base_timestamp_ms = header.base_timestamp
    max_timestamp_ms = header.max_timestamp
    rebase_ms = 0  # added to every record's timestamp delta
    if records:
        if new_delete_horizon_ms is not None and delete_horizon_ms(header) is None:
            attributes |= rb.ATTR_DELETE_HORIZON
            base_timestamp_ms = new_delete_horizon_ms
            rebase_ms = header.base_timestamp - new_delete_horizon_ms
        if not log_append_time:
            max_timestamp_ms = max(header.base_timestamp + r.timestamp_delta for r in records)
        payload = bytearray()
        body = bytearray()
        for record in records:
            body.clear()
            body.append(record.attributes)
            write_varint(body, record.timestamp_delta + rebase_ms)
            write_varint(body, record.offset_delta)
            body += record.fields
            write_varint(payload, len(body))
            payload += body
        section = compress(header.compression, bytes(payload))
    else:
        attributes &= ~rb.ATTR_COMPRESSION_MASK
        attributes |= COMPRESSION_NONE
        section = b""
    batch_length = rb.HEADER_SIZE_BYTES - rb.LOG_OVERHEAD_BYTES + len(section)
    out = bytearray(rb.HEADER_SIZE_BYTES + len(section))
    rb.HEADER_STRUCT.pack_into(
        out,
        0,
        header.base_offset,
        batch_length,
        header.partition_leader_epoch,
        rb.CURRENT_MAGIC,
        0,
        attributes,
        header.last_offset_delta,
        base_timestamp_ms,
        max_timestamp_ms,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        len(records),
    )
    out[rb.HEADER_SIZE_BYTES :] = section
    rb.write_crc(out)
    return bytes(out)
