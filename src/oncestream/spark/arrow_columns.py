"""The Spark reader's column builders: the records of record batches into one Arrow batch.

Two builders with one interface and identical results (the unit tests compare them on random
logs): ``NativeColumns`` walks each records section in C (``oncestream._native.record_columns``)
and wraps the buffers it fills with ``pyarrow.Array.from_buffers``, so no Python code runs per
record; ``PythonColumns`` is the pure-Python fallback for an install without the extension (or
with ``ONCESTREAM_NATIVE=0`` in the environment), decoding into lists that ``pa.array`` converts.
Both decompress through ``protocol.compression`` and follow the record layout of
``protocol.records``; the batch-level rules (complete batches, the read_committed filter) stay in
``partition_reader.ColumnDecoder``.
"""

from __future__ import annotations

import os
from array import array
from types import ModuleType
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa

from oncestream.errors import CorruptRecordError
from oncestream.protocol import record_batch as rb
from oncestream.protocol.compression import COMPRESSION_NONE, decompress
from oncestream.protocol.varint import read_varint

if TYPE_CHECKING:
    from oncestream._native.record_columns import Block

_native: ModuleType | None
try:
    from oncestream._native import record_columns as _native
except ImportError:  # not built (no C compiler at install time): the Python builder takes over
    _native = None

HEADER_STRUCT_TYPE = pa.struct([("key", pa.string()), ("value", pa.binary())])
HEADER_TYPE = pa.list_(HEADER_STRUCT_TYPE)
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
ARROW_SCHEMA = pa.schema([
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp", TIMESTAMP_TYPE),
    ("timestampType", pa.int32()),
    ("headers", HEADER_TYPE),
])


class ColumnBuilder(Protocol):
    """What ``ColumnDecoder`` needs of a builder."""

    section_bytes: int  # decompressed records bytes appended since the last to_arrow

    def __len__(self) -> int: ...

    def append(self, header: rb.BatchHeader, batch: memoryview, position: int, end: int) -> None:
        """Add the records of one data batch (its bytes ``batch``) with offsets in [position, end)."""

    def to_arrow(self, topic: str, partition: int) -> pa.RecordBatch:
        """The rows gathered so far as one Arrow batch; the builder starts empty again."""


def native_available() -> bool:
    """The C builder is built and importable."""
    return _native is not None


def new_builder(native: bool | None = None) -> ColumnBuilder:
    """A column builder: the C one when built, unless ``native=False`` or, by default, the
    environment sets ``ONCESTREAM_NATIVE=0``. ``native=True`` without the extension raises
    ImportError."""
    if native is None:
        native = _native is not None and os.environ.get("ONCESTREAM_NATIVE", "1") != "0"
    if native:
        if _native is None:
            raise ImportError("oncestream._native.record_columns is not built (pip install -e . builds it)")
        return NativeColumns()
    return PythonColumns()


def _arrow_overflow(exc: Exception) -> CorruptRecordError:
    return CorruptRecordError(f"record field out of Arrow's range: {exc}")


class NativeColumns:
    """Builder backed by the C extension: buffers filled in C, wrapped without copying (their
    memory goes back to the extension's pool once Arrow drops the batch)."""

    __slots__ = ("_builder", "section_bytes")

    def __init__(self) -> None:
        if _native is None:
            raise ImportError("oncestream._native.record_columns is not built")
        self._builder = _native.ColumnBuilder()
        self.section_bytes = 0

    def __len__(self) -> int:
        return len(self._builder)

    def append(self, header: rb.BatchHeader, batch: memoryview, position: int, end: int) -> None:
        """Add the records of one data batch with offsets in [position, end)."""
        records = batch[rb.HEADER_SIZE_BYTES:]
        # Uncompressed records are walked in place (no copy); others go through the one codec.
        section = records if header.compression == COMPRESSION_NONE else decompress(header.compression, records)
        self.section_bytes += len(section)
        try:
            self._builder.append(section, header.record_count, header.base_offset, header.base_timestamp,
                                 header.max_timestamp, bool(header.attributes & rb.ATTR_TIMESTAMP_TYPE_LOG_APPEND),
                                 position, end)
        except OverflowError as exc:  # a header field or bound beyond int64
            raise _arrow_overflow(exc) from exc

    def to_arrow(self, topic: str, partition: int) -> pa.RecordBatch:
        """The rows gathered so far as one Arrow batch; the builder starts empty again."""
        rows, offsets, stamps_us, stamp_types, keys, values, lists, hkeys, hvalues = self._builder.finish()
        self.section_bytes = 0
        items = len(hkeys[2]) // 4 - 1
        headers_struct = pa.StructArray.from_arrays(
            [_var_array(pa.string(), items, hkeys), _var_array(pa.binary(), items, hvalues)],
            fields=[HEADER_STRUCT_TYPE.field(0), HEADER_STRUCT_TYPE.field(1)])
        list_valid, list_nulls, list_offsets, _ = lists
        headers = pa.Array.from_buffers(HEADER_TYPE, rows, [_buffer(list_valid), pa.py_buffer(list_offsets)],
                                        null_count=list_nulls, children=[headers_struct])
        return pa.RecordBatch.from_arrays([
            _var_array(pa.binary(), rows, keys),
            _var_array(pa.binary(), rows, values),
            _constant_string(topic, rows),
            _constant_int32(partition, rows),
            pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(offsets)], null_count=0),
            pa.Array.from_buffers(TIMESTAMP_TYPE, rows, [None, pa.py_buffer(stamps_us)], null_count=0),
            pa.Array.from_buffers(pa.int32(), rows, [None, pa.py_buffer(stamp_types)], null_count=0),
            headers,
        ], schema=ARROW_SCHEMA)


def _constant_string(value: str, rows: int) -> pa.Array:
    """``rows`` times ``value``, built from buffers: ``pa.scalar`` would import pandas (pyarrow
    checks for pandas types), ~0.25 s of CPU in every fresh Spark Python worker, which does not
    import pandas by itself."""
    data = value.encode()
    width = len(data)
    offsets = array("i", range(0, width * rows + 1, width)) if width else array("i", [0]) * (rows + 1)
    return pa.Array.from_buffers(pa.string(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(data * rows)],
                                 null_count=0)


def _constant_int32(value: int, rows: int) -> pa.Array:
    """``rows`` times ``value`` as int32 (no ``pa.scalar``: see ``_constant_string``)."""
    return pa.Array.from_buffers(pa.int32(), rows, [None, pa.py_buffer(array("i", [value]) * rows)], null_count=0)


def _buffer(data: Block | None) -> pa.Buffer | None:
    return None if data is None else pa.py_buffer(data)


def _var_array(arrow_type: pa.DataType, length: int, column: tuple) -> pa.Array:
    valid, nulls, offsets, data = column
    return pa.Array.from_buffers(arrow_type, length, [_buffer(valid), pa.py_buffer(offsets), pa.py_buffer(data)],
                                 null_count=nulls)


class PythonColumns:
    """The pure-Python builder: column lists, converted by ``pa.array``."""

    def __init__(self) -> None:
        self._clear()

    def _clear(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.timestamps_us: list[int] = []
        self.timestamp_types: list[int] = []
        self.headers: list[list[dict] | None] = []
        self.section_bytes = 0

    def __len__(self) -> int:
        return len(self.offsets)

    def append(self, header: rb.BatchHeader, batch: memoryview, position: int, end: int) -> None:
        """Add the records of one data batch with offsets in [position, end)."""
        append_records(header, batch, self, position, end)

    def to_arrow(self, topic: str, partition: int) -> pa.RecordBatch:
        """The rows gathered so far as one Arrow batch; the builder starts empty again."""
        n = len(self.offsets)
        try:
            batch = pa.RecordBatch.from_arrays([
                pa.array(self.keys, pa.binary()),
                pa.array(self.values, pa.binary()),
                pa.array([topic] * n, pa.string()),
                pa.array([partition] * n, pa.int32()),
                pa.array(self.offsets, pa.int64()),
                pa.array(self.timestamps_us, TIMESTAMP_TYPE),
                pa.array(self.timestamp_types, pa.int32()),
                pa.array(self.headers, HEADER_TYPE),
            ], schema=ARROW_SCHEMA)
        except (OverflowError, pa.ArrowInvalid) as exc:  # e.g. a timestamp past int64 microseconds
            raise _arrow_overflow(exc) from exc
        self._clear()
        return batch


_varint = read_varint


def append_records(header: rb.BatchHeader, batch: memoryview, cols: PythonColumns, position: int, end: int) -> None:
    """Decode a data batch's records straight into the column lists, keeping offsets in
    [position, end).

    The same record layout as ``protocol.records`` (the codec property test checks they agree),
    but columnar, with one- and two-byte varints read inline and ``varint.read_varint`` called
    for longer ones: this runs once per record, where a call per varint (and the generic
    decoder's per-record objects) costs more than the bytes. The C builder follows the same
    rules (see record_columns.c).
    """
    buf = decompress(header.compression, batch[rb.HEADER_SIZE_BYTES:])
    cols.section_bytes += len(buf)
    keys, values, offsets, stamps, types, headers = (
        cols.keys, cols.values, cols.offsets, cols.timestamps_us, cols.timestamp_types, cols.headers)
    log_append = bool(header.attributes & rb.ATTR_TIMESTAMP_TYPE_LOG_APPEND)
    ts_type = 1 if log_append else 0
    base_offset, base_ts, max_ts = header.base_offset, header.base_timestamp, header.max_timestamp
    pos = 0
    size = len(buf)
    for _ in range(header.record_count):
        b = buf[pos]
        if b < 0x80:
            length, pos = (b >> 1) ^ -(b & 1), pos + 1
        elif buf[pos + 1] < 0x80:  # two bytes: a length from 64 to 8191 (a 1 KiB value)
            raw = (b & 0x7F) | (buf[pos + 1] << 7)
            length, pos = (raw >> 1) ^ -(raw & 1), pos + 2
        else:
            length, pos = _varint(buf, pos)
        record_end = pos + length
        if length < 0 or record_end > size:
            raise CorruptRecordError("record length out of bounds")
        pos += 1  # record attributes
        b = buf[pos]
        if b < 0x80:
            ts_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            ts_delta, pos = _varint(buf, pos)
        b = buf[pos]
        if b < 0x80:
            offset_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            offset_delta, pos = _varint(buf, pos)
        offset = base_offset + offset_delta
        if offset < position or offset >= end:
            pos = record_end
            continue
        b = buf[pos]
        if b < 0x80:
            klen, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            klen, pos = _varint(buf, pos)
        if klen >= 0:
            key, pos = buf[pos:pos + klen], pos + klen
        else:
            key = None
        b = buf[pos]
        if b < 0x80:
            vlen, pos = (b >> 1) ^ -(b & 1), pos + 1
        elif buf[pos + 1] < 0x80:  # two bytes: a length from 64 to 8191 (a 1 KiB value)
            raw = (b & 0x7F) | (buf[pos + 1] << 7)
            vlen, pos = (raw >> 1) ^ -(raw & 1), pos + 2
        else:
            vlen, pos = _varint(buf, pos)
        if vlen >= 0:
            value, pos = buf[pos:pos + vlen], pos + vlen
        else:
            value = None
        count, pos = _varint(buf, pos) if buf[pos] >= 0x80 else ((buf[pos] >> 1) ^ -(buf[pos] & 1), pos + 1)
        hdrs = None
        if count > 0:
            hdrs = []
            for _h in range(count):
                hk_len, pos = _varint(buf, pos)
                hkey = buf[pos:pos + hk_len].decode("utf-8", "replace") if hk_len >= 0 else ""
                pos += max(hk_len, 0)
                hv_len, pos = _varint(buf, pos)
                hval = buf[pos:pos + hv_len] if hv_len >= 0 else None
                pos += max(hv_len, 0)
                hdrs.append({"key": hkey, "value": hval})
        if pos != record_end:
            raise CorruptRecordError("record length does not match its fields")
        keys.append(key)
        values.append(value)
        offsets.append(offset)
        stamps.append((max_ts if log_append else base_ts + ts_delta) * 1000)
        types.append(ts_type)
        headers.append(hdrs)
