"""Encode and decode the records inside a record batch v2, including compression and control records.

The broker's produce and fetch paths never use this module (they move batches verbatim, see
``record_batch``); it serves the CLI, our client, the coordinators that write their own internal
records, and tests. kio ships a record reader, but it does not build batches with producer
ids/sequences/compression and it decodes through pure-Python readers; this module is small and
keeps batch building and parsing in one place. Codecs come from ``cramjam``.

Record layout (varints are zig-zag)::

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint
    keyLength varint | key | valueLength varint | value | headerCount varint
    [headerKeyLength varint | headerKey | headerValueLength varint | headerValue]*
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import cramjam

from oncestream.errors import CorruptRecordError
from oncestream.protocol import record_batch as rb

COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4
COMPRESSION_BY_NAME = {
    "none": COMPRESSION_NONE,
    "gzip": COMPRESSION_GZIP,
    "snappy": COMPRESSION_SNAPPY,
    "lz4": COMPRESSION_LZ4,
    "zstd": COMPRESSION_ZSTD,
}

CONTROL_ABORT = 0
CONTROL_COMMIT = 1

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_HEADER = struct.Struct(">qiibIhiqqqhii")
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")
_INT32 = struct.Struct(">i")

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


# --- varints -------------------------------------------------------------------------------------


def _write_varint(out: bytearray, value: int) -> None:
    """Zig-zag varint (Kafka's signed varint/varlong)."""
    value = (value << 1) ^ (value >> 63)
    while value & ~0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _read_varint(buf: memoryview | bytes, pos: int) -> tuple[int, int]:
    shift = 0
    result = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise CorruptRecordError("truncated or overlong varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
    return (result >> 1) ^ -(result & 1), pos


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


# --- compression ---------------------------------------------------------------------------------


def compress(codec: int, data: bytes) -> bytes:
    """Compress a records section with the batch codec id."""
    if codec == COMPRESSION_NONE:
        return data
    if codec == COMPRESSION_GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == COMPRESSION_SNAPPY:
        # Raw snappy, as librdkafka writes it; Java's reader accepts raw as well as xerial frames.
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == COMPRESSION_LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec == COMPRESSION_ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise CorruptRecordError(f"unknown compression codec {codec}")


def decompress(codec: int, data: bytes | memoryview) -> bytes:
    """Decompress a records section; raise CorruptRecordError on any codec failure."""
    try:
        if codec == COMPRESSION_NONE:
            return bytes(data)
        if codec == COMPRESSION_GZIP:
            return bytes(cramjam.gzip.decompress(bytes(data)))
        if codec == COMPRESSION_SNAPPY:
            raw = bytes(data)
            if raw.startswith(_XERIAL_MAGIC):
                return _decompress_xerial(raw)
            return bytes(cramjam.snappy.decompress_raw(raw))
        if codec == COMPRESSION_LZ4:
            return bytes(cramjam.lz4.decompress(bytes(data)))
        if codec == COMPRESSION_ZSTD:
            return bytes(cramjam.zstd.decompress(bytes(data)))
    except CorruptRecordError:
        raise
    except Exception as exc:  # cramjam raises its own DecompressionError types
        raise CorruptRecordError(f"cannot decompress batch: {exc}") from exc
    raise CorruptRecordError(f"unknown compression codec {codec}")


def _decompress_xerial(raw: bytes) -> bytes:
    """Java's snappy-java stream framing: 16-byte header, then (int32 length, raw block)*."""
    out = bytearray()
    pos = 16
    while pos < len(raw):
        (length,) = _INT32.unpack_from(raw, pos)
        pos += 4
        out += cramjam.snappy.decompress_raw(raw[pos : pos + length])
        pos += length
    return bytes(out)


# --- building ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NewRecord:
    """A record to put into a batch. timestamp_ms None means 'now' as given to encode_batch."""

    value: bytes | None
    key: bytes | None = None
    headers: Sequence[Header] = ()
    timestamp_ms: int | None = None


def encode_records(records: Sequence[NewRecord], base_timestamp_ms: int) -> tuple[bytes, int]:
    """Encode records (uncompressed); return (bytes, max timestamp)."""
    out = bytearray()
    max_ts = base_timestamp_ms
    body = bytearray()
    for delta, rec in enumerate(records):
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
) -> bytes:
    """Build one record batch v2 with a valid CRC32C."""
    assert records, "a record batch holds at least one record"
    base_ts = records[0].timestamp_ms if records[0].timestamp_ms is not None else now_ms
    encoded, max_ts = encode_records(records, base_ts)
    payload = compress(compression, encoded)
    attributes = compression
    if transactional:
        attributes |= rb.ATTR_TRANSACTIONAL
    if control:
        attributes |= rb.ATTR_CONTROL
    batch_length = rb.HEADER_SIZE_BYTES - rb.LOG_OVERHEAD_BYTES + len(payload)
    buf = bytearray(rb.HEADER_SIZE_BYTES + len(payload))
    _HEADER.pack_into(
        buf,
        0,
        base_offset,
        batch_length,
        partition_leader_epoch,
        rb.CURRENT_MAGIC,
        0,
        attributes,
        len(records) - 1,
        base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )
    buf[rb.HEADER_SIZE_BYTES :] = payload
    struct.pack_into(">I", buf, rb.CRC_OFFSET, rb.compute_crc(buf))
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
    key = _CONTROL_KEY.pack(0, marker)
    value = _CONTROL_VALUE.pack(0, coordinator_epoch)
    return encode_batch(
        [NewRecord(value=value, key=key, timestamp_ms=now_ms)],
        now_ms=now_ms,
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=True,
        control=True,
    )


def control_marker_type(record: Record) -> int:
    """CONTROL_ABORT or CONTROL_COMMIT from a control record's key."""
    if record.key is None or len(record.key) < 4:
        raise CorruptRecordError("control record without a valid key")
    _version, marker = _CONTROL_KEY.unpack_from(record.key, 0)
    return marker


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
    view = memoryview(blob)
    if allow_partial:
        end = 0
        while True:
            peek = rb.peek_size(view, end)
            if peek is None or end + peek[1] > len(view):
                break
            end += peek[1]
        view = view[:end]
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


def committed_records(
    blob: bytes | memoryview, aborted_transactions: Iterable[object] | None
) -> Iterable[tuple[DecodedBatch, Record | None]]:
    """Walk fetched data as a read_committed consumer must (KIP-98 consumer-side filtering).

    Yields ``(batch, record)`` for every visible data record and ``(batch, None)`` once for every
    batch that yields nothing (control batches, aborted transactional batches), so callers can
    advance their position past it. ``aborted_transactions`` is the fetch response's list (items
    with ``producer_id`` and ``first_offset``); None means read_uncommitted: everything but
    control records is visible.
    """
    pending = sorted(
        ((a.producer_id, a.first_offset) for a in aborted_transactions or ()), key=lambda a: a[1]
    )
    active: set[int] = set()
    next_aborted = 0
    for batch in decode_batches(blob, allow_partial=True):
        header = batch.header
        while next_aborted < len(pending) and pending[next_aborted][1] <= header.last_offset:
            active.add(pending[next_aborted][0])
            next_aborted += 1
        if header.is_control:
            if header.producer_id in active and batch.records and control_marker_type(batch.records[0]) == CONTROL_ABORT:
                active.discard(header.producer_id)
            yield batch, None
            continue
        if aborted_transactions is not None and header.is_transactional and header.producer_id in active:
            yield batch, None
            continue
        if not batch.records:
            yield batch, None
        for record in batch.records:
            yield batch, record
