"""Decode the records of one partition's fetch response into ``Message`` objects, fast.

The hot loop reads varints inline (one- and two-byte cases without a call: a 1 KB value's length
is a two-byte varint), slices keys and values straight out of the response (or decompressed)
bytes, and builds each ``Message`` with ``__new__`` plus slot stores (half the cost of calling
its ``__init__``). Batch headers are read with one ``struct`` call.

read_committed (KIP-98): the fetch response lists aborted transactions (producer id, first
offset) for the range returned. Walking batches in offset order, a producer's aborted
transaction becomes active at its first offset; its transactional data batches are skipped until
its ABORT control batch. Control batches are never returned to the application.
"""

from __future__ import annotations

import heapq
import struct
from collections.abc import Iterable

from oncestream.client.message import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Message
from oncestream.errors import CorruptRecordError
from oncestream.protocol import record_batch as rb
from oncestream.protocol.records import decompress

_LENGTH = struct.Struct(">qi")
_HEADER_REST = struct.Struct(">bIhiqqqhii")  # magic, crc, attributes .. recordCount (from offset 16)
_CONTROL_KEY = struct.Struct(">hh")
_ATTR_LOG_APPEND = rb.ATTR_TIMESTAMP_TYPE_LOG_APPEND
_ATTR_TXN = rb.ATTR_TRANSACTIONAL
_ATTR_CONTROL = rb.ATTR_CONTROL
_new = Message.__new__


def _varint_slow(buf: bytes, pos: int) -> tuple[int, int]:
    shift = 0
    raw = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise CorruptRecordError("truncated or overlong varint")
        byte = buf[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7


class DecodeResult:
    """Messages decoded from one partition's records plus where the next fetch starts."""

    __slots__ = ("messages", "next_offset", "bytes_seen")

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.next_offset = -1  # offset after the last complete batch seen (-1: none)
        self.bytes_seen = 0


def complete_batches_end(data: bytes | memoryview) -> tuple[int, int]:
    """(bytes in complete batches, offset after the last complete batch or -1) without decoding
    records: what the fetcher needs to pipeline the next fetch."""
    pos, n, next_offset = 0, len(data), -1
    while n - pos >= 12:
        base_offset, length = _LENGTH.unpack_from(data, pos)
        end = pos + 12 + length
        if end > n or length < 49:
            break
        last_delta = struct.unpack_from(">i", data, pos + 23)[0]
        next_offset = base_offset + last_delta + 1
        pos = end
    return pos, next_offset


def decode_partition(
    data: bytes,
    topic: str,
    partition: int,
    min_offset: int,
    *,
    read_committed: bool = False,
    aborted: Iterable[tuple[int, int]] = (),
    check_crcs: bool = False,
) -> DecodeResult:
    """Decode every complete batch in ``data``; records below ``min_offset`` are dropped."""
    result = DecodeResult()
    out = result.messages
    n = len(data)
    pos = 0
    # Aborted transactions ordered by first offset; 'active' producers are being skipped.
    pending_aborts: list[tuple[int, int]] = []
    active_aborted: set[int] = set()
    if read_committed:
        pending_aborts = sorted((first, pid) for pid, first in aborted)
        heapq.heapify(pending_aborts)
    while n - pos >= 12:
        base_offset, length = _LENGTH.unpack_from(data, pos)
        end = pos + 12 + length
        if end > n:
            break  # a truncated last batch (the broker returns whole batches up to a limit)
        if length < rb.HEADER_SIZE_BYTES - 12:
            raise CorruptRecordError("record batch length out of bounds")
        (magic, crc, attributes, last_delta, base_ts, max_ts, producer_id, _epoch, _seq,
         count) = _HEADER_REST.unpack_from(data, pos + 16)
        if magic != 2:
            raise CorruptRecordError(f"record batch magic {magic} is not supported")
        if check_crcs and rb.compute_crc(memoryview(data)[pos:end]) != crc:
            raise CorruptRecordError(f"CRC mismatch in batch at offset {base_offset}")
        batch_start, pos = pos, end
        next_offset = base_offset + last_delta + 1
        result.next_offset = next_offset
        result.bytes_seen = pos
        if next_offset <= min_offset:
            continue
        if read_committed:
            while pending_aborts and pending_aborts[0][0] <= base_offset + last_delta:
                active_aborted.add(heapq.heappop(pending_aborts)[1])
        if attributes & _ATTR_CONTROL:
            if read_committed and producer_id in active_aborted and count > 0:
                # The only control record type that ends an aborted range is ABORT (0).
                key_type = _control_type(data, batch_start + rb.HEADER_SIZE_BYTES, end)
                if key_type == 0:
                    active_aborted.discard(producer_id)
            continue
        if read_committed and attributes & _ATTR_TXN and producer_id in active_aborted:
            continue
        codec = attributes & 0x07
        if codec:
            buf = decompress(codec, memoryview(data)[batch_start + rb.HEADER_SIZE_BYTES : end])
            start, stop = 0, len(buf)
        else:
            buf, start, stop = data, batch_start + rb.HEADER_SIZE_BYTES, end
        if attributes & _ATTR_LOG_APPEND:
            ts_type, fixed_ts = TIMESTAMP_LOG_APPEND_TIME, max_ts
        else:
            ts_type, fixed_ts = TIMESTAMP_CREATE_TIME, -1
        _decode_records(buf, start, stop, count, base_offset, base_ts, (topic, partition, ts_type),
                        fixed_ts, min_offset, out)
    return result


def _control_type(data: bytes, pos: int, end: int) -> int:
    """Type of the first control record (its key is int16 version, int16 type)."""
    _length, pos = _varint_slow(data, pos)
    pos += 1  # attributes
    _ts, pos = _varint_slow(data, pos)
    _off, pos = _varint_slow(data, pos)
    klen, pos = _varint_slow(data, pos)
    if klen < 4 or pos + klen > end:
        return -1
    return _CONTROL_KEY.unpack_from(data, pos)[1]


def _decode_records(buf: bytes, p: int, stop: int, count: int, base_offset: int, base_ts: int,
                    info: tuple[str, int, int], fixed_ts: int, min_offset: int, out: list[Message]) -> None:
    """The hot loop. Each record's length is checked against where its fields actually end;
    the batch must end exactly after its last record."""
    new = _new
    cls = Message
    append = out.append
    skip_below = min_offset if min_offset > base_offset else -1
    for _ in range(count):
        # record length (a varint; 1 or 2 bytes for records up to 8 KB)
        b = buf[p]
        if b < 0x80:
            rec_end = p + 1 + (b >> 1)
            p += 1
        else:
            b2 = buf[p + 1]
            if b2 < 0x80:
                p += 2
                rec_end = p + (((b & 0x7F) | (b2 << 7)) >> 1)
            else:
                rec_len, p = _varint_slow(buf, p)
                rec_end = p + rec_len
        # attributes (unused) then timestamp delta
        b = buf[p + 1]
        if b < 0x80:
            p += 2
            ts_delta = (b >> 1) ^ -(b & 1)
        else:
            b2 = buf[p + 2]
            if b2 < 0x80:
                raw = (b & 0x7F) | (b2 << 7)
                p += 3
                ts_delta = (raw >> 1) ^ -(raw & 1)
            else:
                ts_delta, p = _varint_slow(buf, p + 1)
        # offset delta (never negative)
        b = buf[p]
        if b < 0x80:
            p += 1
            off_delta = b >> 1
        else:
            b2 = buf[p + 1]
            if b2 < 0x80:
                p += 2
                off_delta = ((b & 0x7F) | (b2 << 7)) >> 1
            else:
                off_delta, p = _varint_slow(buf, p)
        # key (usually null: zig-zag -1 is 0x01)
        b = buf[p]
        if b == 1:
            p += 1
            key = None
        elif b < 0x80:
            p += 1
            klen = b >> 1
            key = buf[p : p + klen]
            p += klen
        else:
            klen, p = _varint_slow(buf, p)
            if klen >= 0:
                key = buf[p : p + klen]
                p += klen
            else:
                key = None
        # value
        b = buf[p]
        if b < 0x80:
            p += 1
            if b == 1:
                value = None
            else:
                vlen = b >> 1
                value = buf[p : p + vlen]
                p += vlen
        else:
            b2 = buf[p + 1]
            if b2 < 0x80:
                p += 2
                vlen = ((b & 0x7F) | (b2 << 7)) >> 1
            else:
                vlen, p = _varint_slow(buf, p)
            if vlen >= 0:
                value = buf[p : p + vlen]
                p += vlen
            else:
                value = None
        # headers (usually none: count 0)
        if buf[p] == 0:
            p += 1
            headers = None
        else:
            headers, p = _read_headers(buf, p)
        if p != rec_end:
            raise CorruptRecordError("record length does not match its fields")
        offset = base_offset + off_delta
        if offset < skip_below:
            continue
        m = new(cls)
        m._info = info
        m._offset = offset
        m._timestamp = base_ts + ts_delta if fixed_ts < 0 else fixed_ts
        m._key = key
        m._value = value
        m._headers = headers
        m._error = None
        append(m)
    if p != stop:
        raise CorruptRecordError("record batch has trailing bytes")


def _read_headers(buf: bytes, p: int) -> tuple[list[tuple[str, bytes | None]] | None, int]:
    count, p = _varint_slow(buf, p)
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(count):
        hklen, p = _varint_slow(buf, p)
        hkey = bytes(buf[p : p + hklen]).decode("utf-8", "replace")
        p += hklen
        hvlen, p = _varint_slow(buf, p)
        if hvlen >= 0:
            hvalue: bytes | None = bytes(buf[p : p + hvlen])
            p += hvlen
        else:
            hvalue = None
        headers.append((hkey, hvalue))
    return headers, p
