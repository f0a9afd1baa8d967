"""Encode and decode the records inside a record batch v2, including compression and control records.

The broker's produce and fetch paths never use this module (they move batches verbatim, see
``record_batch``); it serves the CLI, our client, the coordinators that write their own internal
records, and tests. kio ships a record reader, but it does not build batches with producer
ids/sequences/compression and it decodes through pure-Python readers; this module is small and
keeps batch building and parsing in one place.

It is the front of the one record codec: varints (``varint``), compression (``compression``),
batch walking (``batch_walk``), transaction markers (``markers``) and the read_committed filter
(``aborted_filter``) each live in their own module, and the names callers know are re-exported
here.

Record layout (varints are zig-zag)::

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint
    keyLength varint | key | valueLength varint | value | headerCount varint
    [headerKeyLength varint | headerKey | headerValueLength varint | headerValue]*
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from oncestream.errors import CorruptRecordError, InvalidRecordError
from oncestream.protocol import record_batch as rb
from oncestream.protocol.aborted_filter import AbortedFilter
from oncestream.protocol.batch_walk import complete_batches
from oncestream.protocol.compression import (  # noqa: F401 (re-exported: the codec's public names)
    COMPRESSION_BY_NAME,
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    compress,
    decompress,
)
from oncestream.protocol.markers import (  # noqa: F401 (re-exported)
    CONTROL_ABORT,
    CONTROL_COMMIT,
    encode_marker_key,
    encode_marker_value,
    marker_type,
)
from oncestream.protocol.varint import read_varint as _read_varint
from oncestream.protocol.varint import write_varint as _write_varint

Header = tuple[str, bytes | None]


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded record with its absolute offset and timestamp."""

    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    """A batch header plus its decoded records."""

    header: rb.BatchHeader
    records: list[Record] = field(default_factory=list)

    @property
    def timestamp_type(self) -> int:
        """0 = CreateTime, 1 = LogAppendTime."""
        return 1 if self.header.attributes & rb.ATTR_TIMESTAMP_TYPE_LOG_APPEND else 0


# --- fields ------------------------------------------------------------------------------------


def _write_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        _write_varint(out, -1)
    else:
        _write_varint(out, len(data))
        out += data


def _read_bytes(buf: memoryview | bytes, pos: int) -> tuple[bytes | None, int]:
    length, pos = _read_varint(buf, pos)
    if length < 0:
        return None, pos
    end = pos + length
    if end > len(buf):
        raise CorruptRecordError("record field runs past the batch")
    return bytes(buf[pos:end]), end


# --- building ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NewRecord:
    """A record to put into a batch. timestamp_ms None means 'now' as given to encode_batch."""

    value: bytes | None
    key: bytes | None = None
    headers: Sequence[Header] = ()
    timestamp_ms: int | None = None


def encode_records(records: Sequence[NewRecord], base_timestamp_ms: int,
                   offset_deltas: Sequence[int] | None = None) -> tuple[bytes, int]:
    """Encode records (uncompressed), the i-th at offset delta ``offset_deltas[i]`` (default i);
    return (bytes, max timestamp)."""
    out = bytearray()
    max_ts = base_timestamp_ms
    body = bytearray()
    deltas = range(len(records)) if offset_deltas is None else offset_deltas
    for delta, rec in zip(deltas, records, strict=True):
        ts = base_timestamp_ms if rec.timestamp_ms is None else rec.timestamp_ms
        max_ts = max(max_ts, ts)
        body.clear()
        body.append(0)  # record attributes: unused
        _write_varint(body, ts - base_timestamp_ms)
        _write_varint(body, delta)
        _write_bytes(body, rec.key)
        _write_bytes(body, rec.value)
        _write_varint(body, len(rec.headers))
        for hkey, hvalue in rec.headers:
            _write_bytes(body, hkey.encode())
            _write_bytes(body, hvalue)
        _write_varint(out, len(body))
        out += body
    return bytes(out), max_ts


def encode_batch(
    records: Sequence[NewRecord],
    *,
    now_ms: int,
    base_offset: int = 0,
    producer_id: int = rb.NO_PRODUCER_ID,
    producer_epoch: int = rb.NO_PRODUCER_EPOCH,
    base_sequence: int = rb.NO_SEQUENCE,
    transactional: bool = False,
    compression: int = COMPRESSION_NONE,
    control: bool = False,
    partition_leader_epoch: int = -1,
    offset_deltas: Sequence[int] | None = None,
    last_offset_delta: int | None = None,
) -> bytes:
    """Build one record batch v2 with a valid CRC32C.

    ``offset_deltas`` and ``last_offset_delta`` build a batch as compaction leaves it: records at
    increasing offset deltas with gaps, the batch ending at ``last_offset_delta`` (at or past the
    last record's), and with ``last_offset_delta`` even no record at all (the header-only batch
    readers skip by its offset range). By default the records are consecutive from the base."""
    deltas = list(range(len(records))) if offset_deltas is None else list(offset_deltas)
    last_delta = (deltas[-1] if deltas else -1) if last_offset_delta is None else last_offset_delta
    if not records and last_offset_delta is None:
        raise InvalidRecordError("a record batch holds at least one record")
    if len(deltas) != len(records) or any(b <= a for a, b in itertools.pairwise(deltas)) or (
            deltas and (deltas[0] < 0 or deltas[-1] > last_delta)) or last_delta < 0:
        raise InvalidRecordError(f"offset deltas {deltas[:5]}... do not fit a batch ending at delta {last_delta}")
    first_ts = records[0].timestamp_ms if records else None
    base_ts = first_ts if first_ts is not None else now_ms
    encoded, max_ts = encode_records(records, base_ts, deltas)
    payload = compress(compression, encoded)
    attributes = compression
    if transactional:
        attributes |= rb.ATTR_TRANSACTIONAL
    if control:
        attributes |= rb.ATTR_CONTROL
    batch_length = rb.HEADER_SIZE_BYTES - rb.LOG_OVERHEAD_BYTES + len(payload)
    buf = bytearray(rb.HEADER_SIZE_BYTES + len(payload))
    rb.HEADER_STRUCT.pack_into(
        buf,
        0,
        base_offset,
        batch_length,
        partition_leader_epoch,
        rb.CURRENT_MAGIC,
        0,
        attributes,
        last_delta,
        base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )
    buf[rb.HEADER_SIZE_BYTES :] = payload
    rb.write_crc(buf)
    return bytes(buf)


def encode_control_batch(
    *,
    marker: int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    now_ms: int,
    base_offset: int = 0,
) -> bytes:
    """A transaction marker (COMMIT or ABORT) control batch with one record (KIP-98)."""
    return encode_batch(
        [NewRecord(value=encode_marker_value(coordinator_epoch), key=encode_marker_key(marker), timestamp_ms=now_ms)],
        now_ms=now_ms,
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=True,
        control=True,
    )


def control_marker_type(record: Record) -> int:
    """CONTROL_ABORT or CONTROL_COMMIT from a control record's key."""
    return marker_type(record.key)


# --- decoding ------------------------------------------------------------------------------------


def decode_batch(batch: bytes | memoryview, *, verify_crc: bool = True) -> DecodedBatch:
    """Decode one batch (header + records). Raises CorruptRecordError on malformed input."""
    (decoded,) = list(decode_batches(batch, verify_crc=verify_crc))
    return decoded


def decode_batches(
    blob: bytes | memoryview, *, verify_crc: bool = True, allow_partial: bool = False
) -> Iterable[DecodedBatch]:
    """Decode every batch in a records blob.

    With ``allow_partial`` a truncated last batch (as a fetch response may carry) is skipped.
    """
    view = complete_batches(blob) if allow_partial else memoryview(blob)
    for header, batch in rb.iter_batches(view, verify_crc=verify_crc):
        yield DecodedBatch(header, _decode_records(header, batch))


def _decode_records(header: rb.BatchHeader, batch: memoryview) -> list[Record]:
    data = decompress(header.compression, batch[rb.HEADER_SIZE_BYTES :])
    buf = memoryview(data)
    pos = 0
    out: list[Record] = []
    log_append = bool(header.attributes & rb.ATTR_TIMESTAMP_TYPE_LOG_APPEND)
    for _ in range(header.record_count):
        length, pos = _read_varint(buf, pos)
        end = pos + length
        if length < 0 or end > len(buf):
            raise CorruptRecordError("record length out of bounds")
        pos += 1  # attributes
        ts_delta, pos = _read_varint(buf, pos)
        offset_delta, pos = _read_varint(buf, pos)
        key, pos = _read_bytes(buf, pos)
        value, pos = _read_bytes(buf, pos)
        count, pos = _read_varint(buf, pos)
        headers: list[Header] = []
        for _h in range(max(count, 0)):
            hkey, pos = _read_bytes(buf, pos)
            hval, pos = _read_bytes(buf, pos)
            headers.append(((hkey or b"").decode("utf-8", "replace"), hval))
        if pos != end:
            raise CorruptRecordError("record length does not match its fields")
        ts = header.max_timestamp if log_append else header.base_timestamp + ts_delta
        out.append(Record(header.base_offset + offset_delta, ts, key, value, tuple(headers)))
    return out


class AbortedTransaction(Protocol):
    """An entry of a Fetch response's aborted_transactions (kio's dataclass has these fields)."""

    producer_id: int
    first_offset: int


def committed_records(
    blob: bytes | memoryview, aborted_transactions: Iterable[AbortedTransaction] | None
) -> Iterable[tuple[DecodedBatch, Record | None]]:
    """Walk fetched data as a read_committed consumer must (KIP-98 consumer-side filtering).

    Yields ``(batch, record)`` for every visible data record and ``(batch, None)`` once for every
    batch that yields nothing (control batches, aborted transactional batches, emptied batches),
    so callers can advance their position past it. ``aborted_transactions`` is the fetch
    response's list (items with ``producer_id`` and ``first_offset``); None means
    read_uncommitted: everything but control records is visible. The decision is
    ``AbortedFilter``'s.
    """
    read_committed = aborted_transactions is not None
    filt = AbortedFilter(read_committed, ((a.producer_id, a.first_offset) for a in aborted_transactions or ()))
    for header, batch in rb.iter_batches(complete_batches(blob)):
        if filt.hides_header(header, batch):
            yield DecodedBatch(header), None
            continue
        decoded = DecodedBatch(header, _decode_records(header, batch))
        if not decoded.records:
            yield decoded, None
        for record in decoded.records:
            yield decoded, record
