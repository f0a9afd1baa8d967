"""The one implementation of ksqlDB's record formats, in two forms that agree byte for byte:

- Python, per row (``RecordLayout.encode_key`` / ``encode_value`` / ``decode_key`` /
  ``decode_value``): ``INSERT INTO ... VALUES``, ``/inserts-stream``, pull queries, tests.
- Spark columns (``oncestream.sql.engine.compile.serde_columns``: ``decode_key`` / ``decode_value`` /
  ``encode_key`` / ``encode_value``): the compiled persistent and push queries.

Formats, as ksqlDB writes them:

- ``JSON`` value: an object whose field names are the column names as written (``{"ID":1}``),
  nulls written as ``null``; read with case-insensitive field matching. A JSON key with one
  column is the bare JSON value (ksqlDB never wraps single keys); several key columns make an
  object.
- ``DELIMITED``: one CSV line (``VALUE_DELIMITER``, default ``,``), quoted as ksqlDB's
  commons-csv 1.4 quotes (``delimited_quoting``: e.g. a first field ``-10`` is ``"-10"``); a null
  is an empty field; a DECIMAL is plain at its scale; a one-column key that is null is a null key.
  On read both an empty field and ``""`` are null (Spark's CSV reader cannot tell them apart, so
  neither form does).
- ``KAFKA``: one primitive column: INT 4 bytes, BIGINT and DOUBLE 8 bytes, big-endian; STRING
  UTF-8; BYTES as is.
- ``NONE`` key: the record key is null (never empty bytes).
- Windowed keys as Kafka Streams writes them: TUMBLING/HOPPING ``key || start`` (8-byte
  big-endian ms, ``TimeWindowedSerializer``); SESSION ``key || end || start`` (Kafka Streams'
  ``SessionKeySchema`` order: the end comes first).
- A deleted table row (tombstone) is a record with a null value.

Python values of columns: BOOLEAN bool, INTEGER/BIGINT int, DOUBLE float, DECIMAL Decimal,
STRING str, BYTES bytes, TIMESTAMP int epoch ms, DATE int days since epoch, TIME int ms of day,
ARRAY list, MAP dict, STRUCT dict by field name. Encoding also accepts datetime/date/time.
In Spark the same columns are BooleanType, IntegerType, LongType, DoubleType, DecimalType,
StringType, BinaryType, TimestampType, DateType, IntegerType (TIME ms), ArrayType, MapType and
StructType.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from oncestream.sql.engine.delimited_quoting import write_record
from oncestream.sql.engine.serde_registry import FrameCodec, codec_for, get_ci, strip_frame
from oncestream.sql.errors import KsqlError
from oncestream.sql.language.catalog import Column, Format, SourceInfo
from oncestream.sql.language.sql_ast import WindowKind, WindowSpec
from oncestream.sql.language.types import BaseType, SqlType

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_EPOCH_DATE = dt.date(1970, 1, 1)


class SerdeError(KsqlError):
    """A record that cannot be written or read in its format (wrong type, bad bytes)."""


@dataclass(frozen=True)
class Window:
    """The window of a windowed key: start and end in epoch ms (end exclusive for time windows,
    the last event's time for sessions, as ksqlDB reports WINDOWEND)."""

    start_ms: int
    end_ms: int


@dataclass(frozen=True)
class RecordLayout:
    """How one source's records are laid out: key and value formats and columns."""

    key_format: Format
    value_format: Format
    key_columns: tuple[Column, ...]
    value_columns: tuple[Column, ...]
    value_delimiter: str = ","
    window: WindowKind | None = None
    window_size_ms: int | None = None
    # AVRO / JSON_SR / PROTOBUF / PROTOBUF_NOSR: the codec of each side (None for the other formats)
    key_codec: FrameCodec | None = field(default=None, compare=False)
    value_codec: FrameCodec | None = field(default=None, compare=False)
    # the topic the records are in (the processing log's entries name it)
    topic: str = field(default="", compare=False)
    # WRAP_SINGLE_VALUE=false: the single value column is the value itself (JSON, AVRO, JSON_SR,
    # PROTOBUF_NOSR), not an object/record with one field
    value_unwrapped: bool = False
    key_delimiter: str = ","      # DELIMITED keys (KEY_DELIMITER)

    # -- Python form ------------------------------------------------------------------------

    def encode_key(self, row: Mapping[str, Any], window: Window | None = None) -> bytes | None:
        """The record key of ``row`` (None for KEY_FORMAT NONE or a source without key)."""
        if self.key_format is Format.NONE or not self.key_columns:
            return None
        data = _encode(self.key_format, self.key_columns, row, self.key_delimiter, single_unwrapped=True,
                       codec=self.key_codec)
        if data is None:
            return None
        if self.window is None:
            return data
        if window is None:
            raise SerdeError("a windowed key needs its window")
        if self.window is WindowKind.SESSION:
            return data + struct.pack(">qq", window.end_ms, window.start_ms)
        return data + struct.pack(">q", window.start_ms)

    def encode_value(self, row: Mapping[str, Any] | None) -> bytes | None:
        """The record value of ``row``; None (a tombstone) when ``row`` is None."""
        if row is None:
            return None
        return _encode(self.value_format, self.value_columns, row, self.value_delimiter,
                       single_unwrapped=self.value_unwrapped, codec=self.value_codec)

    def decode_key(self, data: bytes | None) -> tuple[dict[str, Any], Window | None]:
        """Key columns (and the window of a windowed key) of a record key."""
        if self.key_format is Format.NONE or not self.key_columns:
            return {}, None
        window = None
        if data is not None and self.window is not None:
            if self.window is WindowKind.SESSION:
                if len(data) < 16:
                    raise SerdeError("a session-windowed key has fewer than 16 bytes")
                end, start = struct.unpack(">qq", data[-16:])
                data, window = data[:-16], Window(start, end)
            else:
                if len(data) < 8:
                    raise SerdeError("a time-windowed key has fewer than 8 bytes")
                (start,) = struct.unpack(">q", data[-8:])
                data, window = data[:-8], Window(start, start + (self.window_size_ms or 0))
        values = _decode(self.key_format, self.key_columns, data, self.key_delimiter, single_unwrapped=True,
                         codec=self.key_codec)
        return ({c.name: None for c in self.key_columns} if values is None else values), window

    def decode_value(self, data: bytes | None) -> dict[str, Any] | None:
        """Value columns of a record value; None for a tombstone."""
        return _decode(self.value_format, self.value_columns, data, self.value_delimiter,
                       single_unwrapped=self.value_unwrapped, codec=self.value_codec)


class _RegistryHolder:
    """The Schema Registry client of this process (``ksql.schema.registry.url``), set once by the
    server at start (``use_registry``); layouts of AVRO/JSON_SR sources capture it."""

    client: Any = None


def use_registry(client: Any) -> None:
    """Make ``client`` (a ``spark.schema_registry_client.RegistryClient`` or None) the registry of new layouts."""
    _RegistryHolder.client = client


def current_registry() -> Any:
    """The registry ``use_registry`` set (None when the server has none)."""
    return _RegistryHolder.client


def layout_of(source: SourceInfo, registry: Any = None) -> RecordLayout:
    """The record layout of a metastore source (``registry``: default the process's)."""
    window = source.window
    registry = registry if registry is not None else _RegistryHolder.client
    return RecordLayout(key_format=source.key_format, value_format=source.value_format,
                        key_columns=source.key_columns, value_columns=source.value_columns,
                        value_delimiter=source.value_delimiter or ",", key_delimiter=source.key_delimiter or ",",
                        window=window.kind if window else None,
                        window_size_ms=window.size_ms if window else None,
                        key_codec=codec_for(source.key_format.value, source.key_columns, source.topic, registry,
                                            key=True, schema_id=source.key_schema_id, schema_name=source.key_schema_name,
                                            protobuf_nullable=source.key_protobuf_nullable),
                        value_codec=codec_for(source.value_format.value, source.value_columns, source.topic, registry,
                                              key=False, schema_id=source.value_schema_id,
                                              schema_name=source.value_schema_name,
                                              value_unwrapped=source.value_unwrapped,
                                              protobuf_nullable=source.value_protobuf_nullable),
                        topic=source.topic, value_unwrapped=_value_unwrapped(source.value_columns, source.value_unwrapped))


def _value_unwrapped(values: Sequence[Column], unwrapped: bool) -> bool:
    return unwrapped and len(values) == 1


def layout_for(columns: Sequence[Column], sink: SourceInfo, *, window: WindowSpec | None = None,
               registry: Any = None) -> RecordLayout:
    """The layout of a query's output: ``columns`` as the analyzer computed them, written in
    ``sink``'s formats (and ``sink.topic``'s registry subjects) with ``window``; ``sink``'s
    ``*_schema_id`` name the schemas a C*AS writes with, its ``*_schema_name`` the PROTOBUF
    messages (or Avro records) its schemas are named."""
    registry = registry if registry is not None else _RegistryHolder.client
    keys = tuple(c for c in columns if c.is_key)
    values = tuple(c for c in columns if not c.is_key)
    topic = sink.topic
    return RecordLayout(key_format=sink.key_format, value_format=sink.value_format, key_columns=keys,
                        value_columns=values, value_delimiter=sink.value_delimiter or ",",
                        key_delimiter=sink.key_delimiter or ",",
                        window=window.kind if window else None, window_size_ms=window.size_ms if window else None,
                        key_codec=codec_for(sink.key_format.value, keys, topic, registry, key=True,
                                            schema_id=sink.key_schema_id, schema_name=sink.key_schema_name,
                                            protobuf_nullable=sink.key_protobuf_nullable),
                        value_codec=codec_for(sink.value_format.value, values, topic, registry, key=False,
                                              schema_id=sink.value_schema_id, schema_name=sink.value_schema_name,
                                              value_unwrapped=sink.value_unwrapped,
                                              protobuf_nullable=sink.value_protobuf_nullable),
                        topic=topic, value_unwrapped=_value_unwrapped(values, sink.value_unwrapped))


# -- Python: one format ----------------------------------------------------------------------


def _encode(fmt: Format, columns: Sequence[Column], row: Mapping[str, Any], delimiter: str, *,
            single_unwrapped: bool, codec: FrameCodec | None = None) -> bytes | None:
    if codec is not None and codec.unwrapped and row.get(columns[0].name) is None:
        return None    # a bare single column that is null: the record is null (ksqlDB's unwrapped serializer)
    if fmt is Format.AVRO and codec is not None:
        try:
            return codec.encode_avro(row)
        except (TypeError, ValueError, ArithmeticError) as e:
            raise SerdeError(f"cannot write the row as AVRO: {e}") from None
    if fmt in (Format.PROTOBUF, Format.PROTOBUF_NOSR) and codec is not None:
        try:
            return codec.encode_protobuf(row)
        except (TypeError, ValueError, ArithmeticError, KsqlError) as e:
            raise SerdeError(f"cannot write the row as {fmt.value}: {e}") from None
    if fmt is Format.JSON_SR and codec is not None:
        body = _encode(Format.JSON, columns, row, delimiter, single_unwrapped=codec.unwrapped)
        return None if body is None else codec.encode_json(body)
    if fmt is Format.JSON:
        if single_unwrapped and len(columns) == 1:
            value = row.get(columns[0].name)
            if value is None:
                return None
            return _json_dumps(to_json_wire(value, columns[0].type))
        return _json_dumps({c.name: to_json_wire(row.get(c.name), c.type) for c in columns})
    if fmt is Format.DELIMITED:
        if single_unwrapped and len(columns) == 1 and row.get(columns[0].name) is None:
            return None    # a one-column key (or unwrapped value) that is null: a null record key/value
        return write_record([csv_text(row.get(c.name), c.type) for c in columns], delimiter).encode()
    if fmt is Format.KAFKA:
        column = _single(columns, "KAFKA")
        return kafka_encode(row.get(column.name), column.type)
    raise SerdeError(f"format {fmt.value} holds no columns")


# What the Python decoders raise on bytes they cannot read, besides SerdeError: each is a bad
# record (a SerdeError, the processing log's entry), never a failure of the query reading it.
_BAD_BYTES = (ValueError, TypeError, ArithmeticError, LookupError, AttributeError, struct.error, RecursionError)


def _decode(fmt: Format, columns: Sequence[Column], data: bytes | None, delimiter: str, *,
            single_unwrapped: bool, codec: FrameCodec | None = None) -> dict[str, Any] | None:
    try:
        return _decode_format(fmt, columns, data, delimiter, single_unwrapped=single_unwrapped, codec=codec)
    except SerdeError:
        raise
    except _BAD_BYTES as e:
        raise SerdeError(f"Failed to deserialize {fmt.value} record: {type(e).__name__}: {e}") from None


def _decode_format(fmt: Format, columns: Sequence[Column], data: bytes | None, delimiter: str, *,
                   single_unwrapped: bool, codec: FrameCodec | None = None) -> dict[str, Any] | None:
    if data is None:
        return None
    if fmt in (Format.AVRO, Format.JSON_SR, Format.PROTOBUF, Format.PROTOBUF_NOSR) and codec is not None:
        try:
            if fmt is Format.AVRO:
                return codec.decode_avro(data)
            if fmt in (Format.PROTOBUF, Format.PROTOBUF_NOSR):
                return codec.decode_protobuf(data)
            data = codec.check_json_id(data)
        except KsqlError as e:     # an unknown schema id, no framing: the record is bad
            raise SerdeError(f"Failed to deserialize {fmt.value} record: {e}") from None
        except Exception as e:  # noqa: BLE001 - whatever fastavro/protobuf raise on bad bytes, the record is bad
            raise SerdeError(f"Failed to deserialize {fmt.value} record: {type(e).__name__}: {e}") from None
        fmt, single_unwrapped = Format.JSON, codec.unwrapped
    if fmt is Format.JSON:
        data = strip_frame(data)
        try:
            parsed = json.loads(data, parse_float=Decimal)
        except ValueError as e:
            raise SerdeError(f"invalid JSON: {e}") from None
        if single_unwrapped and len(columns) == 1:
            return {columns[0].name: from_json_wire(parsed, columns[0].type)}
        if not isinstance(parsed, dict):
            raise SerdeError("a JSON value must be an object")
        by_upper = {str(k).upper(): v for k, v in parsed.items()}
        out = {}
        for c in columns:
            raw = parsed[c.name] if c.name in parsed else by_upper.get(c.name.upper())
            out[c.name] = from_json_wire(raw, c.type)
        return out
    if fmt is Format.DELIMITED:
        # ksqlDB reads the text as Java's String(bytes, UTF_8) does: a bad byte is U+FFFD, as Spark's cast
        fields = split_csv_line(data.decode(errors="replace"), delimiter)
        if len(fields) != len(columns):
            raise SerdeError(f"expected {len(columns)} delimited fields, got {len(fields)}")
        return {c.name: _csv_value(f, c.type) for c, f in zip(columns, fields, strict=True)}
    if fmt is Format.KAFKA:
        column = _single(columns, "KAFKA")
        return {column.name: kafka_decode(data, column.type)}
    raise SerdeError(f"format {fmt.value} holds no columns")


def decode_columns(fmt: Format, columns: Sequence[Column], data: bytes | None, *, codec: FrameCodec | None,
                   single_unwrapped: bool, delimiter: str = ",") -> dict[str, Any] | None:
    """One side's columns read from ``data`` in ``fmt`` (the Spark UDFs of the registry formats)."""
    return _decode(fmt, columns, data, delimiter, single_unwrapped=single_unwrapped, codec=codec)


def encode_columns(fmt: Format, columns: Sequence[Column], row: Mapping[str, Any], *, codec: FrameCodec | None,
                   single_unwrapped: bool, delimiter: str = ",") -> bytes | None:
    """One side's bytes of ``row`` in ``fmt`` (the Spark UDFs of the registry formats)."""
    return _encode(fmt, columns, row, delimiter, single_unwrapped=single_unwrapped, codec=codec)


def _single(columns: Sequence[Column], fmt: str) -> Column:
    if len(columns) != 1:
        raise SerdeError(f"The '{fmt}' format only supports a single field. Got: {[c.name for c in columns]}")
    return columns[0]


def _json_dumps(value: Any) -> bytes:
    # Spark's to_json writes compact JSON without escaping non-ASCII; so do we (byte equality).
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _millis(value: Any) -> int:
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return (value - _EPOCH) // dt.timedelta(milliseconds=1)
    return int(value)


def _days(value: Any) -> int:
    if isinstance(value, dt.date):
        return (value - _EPOCH_DATE).days
    return int(value)


def _time_ms(value: Any) -> int:
    if isinstance(value, dt.time):
        return ((value.hour * 60 + value.minute) * 60 + value.second) * 1000 + value.microsecond // 1000
    return int(value)


# How each scalar type is written in JSON: TIMESTAMP as epoch ms, DATE as epoch days, TIME as ms of the day, BYTES as base64.
_TO_JSON_SCALAR: dict[BaseType, Callable[[Any], Any]] = {
    BaseType.BOOLEAN: bool, BaseType.INTEGER: int, BaseType.BIGINT: int, BaseType.DOUBLE: float,
    BaseType.DECIMAL: float, BaseType.STRING: str,
    BaseType.BYTES: lambda value: base64.b64encode(bytes(value)).decode(),
    BaseType.TIMESTAMP: _millis, BaseType.DATE: _days, BaseType.TIME: _time_ms,
}


def to_json_wire(value: Any, t: SqlType) -> Any:
    """A column value as ksqlDB's JSON holds it (TIMESTAMP epoch ms, BYTES base64...)."""
    if value is None:
        return None
    b = t.base
    scalar = _TO_JSON_SCALAR.get(b)
    if scalar is not None:
        return scalar(value)
    if b is BaseType.ARRAY and t.element is not None:
        return [to_json_wire(v, t.element) for v in value]
    if b is BaseType.MAP and t.element is not None:
        return {str(k): to_json_wire(v, t.element) for k, v in value.items()}
    if b is BaseType.STRUCT:
        return {f.name: to_json_wire(get_ci(value, f.name), f.type) for f in t.fields}
    raise SerdeError(f"cannot write {t.ksql_name} as JSON")


def from_json_wire(raw: Any, t: SqlType) -> Any:
    """A JSON value read back into the column's Python value."""
    if raw is None:
        return None
    b = t.base
    try:
        if b is BaseType.BOOLEAN:
            return raw if isinstance(raw, bool) else str(raw).lower() == "true"
        if b in (BaseType.INTEGER, BaseType.BIGINT, BaseType.TIMESTAMP, BaseType.DATE, BaseType.TIME):
            return int(raw)
        if b is BaseType.DOUBLE:
            return float(raw)
        if b is BaseType.DECIMAL:
            return Decimal(str(raw)).quantize(Decimal(1).scaleb(-(t.scale or 0)))
        if b is BaseType.STRING:
            return raw if isinstance(raw, str) else _json_dumps(raw).decode()
        if b is BaseType.BYTES:
            return base64.b64decode(raw)
        if b is BaseType.ARRAY and t.element is not None:
            return [from_json_wire(v, t.element) for v in raw]
        if b is BaseType.MAP and t.element is not None:
            return {k: from_json_wire(v, t.element) for k, v in raw.items()}
        if b is BaseType.STRUCT:
            return {f.name: from_json_wire(get_ci(raw, f.name), f.type) for f in t.fields}
    except (TypeError, ValueError, ArithmeticError, AttributeError) as e:
        raise SerdeError(f"cannot read {raw!r} as {t.ksql_name}: {e}") from None
    raise SerdeError(f"cannot read {t.ksql_name} from JSON")


def csv_text(value: Any, t: SqlType) -> str | None:
    """A DELIMITED field's text before quoting (None for a null): as ksqlDB's serializer writes
    it, a DECIMAL plain at its scale (``BigDecimal.toPlainString``, never an exponent)."""
    if value is None:
        return None
    if t.base in (BaseType.ARRAY, BaseType.MAP, BaseType.STRUCT):
        raise SerdeError(f"The 'DELIMITED' format does not support type '{t.base.value}'")
    if t.base is BaseType.DECIMAL:
        plain = Decimal(value)
        if t.scale is not None:
            plain = plain.quantize(Decimal(1).scaleb(-t.scale))
        return format(plain, "f")
    wire = to_json_wire(value, t)
    return ("true" if wire else "false") if isinstance(wire, bool) else str(wire)


def split_csv_line(line: str, delimiter: str) -> list[str | None]:
    """One CSV line's fields: a quoted field is its text (``""`` the empty string), an unquoted
    empty field is None (null)."""
    fields: list[str | None] = []
    i, n = 0, len(line)
    while True:
        if i < n and line[i] == '"':
            i += 1
            buf = []
            while True:
                j = line.find('"', i)
                if j < 0:
                    raise SerdeError("unterminated quote in a delimited record")
                buf.append(line[i:j])
                if j + 1 < n and line[j + 1] == '"':
                    buf.append('"')
                    i = j + 2
                    continue
                i = j + 1
                break
            fields.append("".join(buf))
        else:
            j = line.find(delimiter, i)
            end = n if j < 0 else j
            text = line[i:end]
            fields.append(text if text != "" else None)
            i = end
        if i >= n:
            return fields
        if not line.startswith(delimiter, i):
            raise SerdeError("unexpected text after a quoted delimited field")
        i += len(delimiter)
        if i == n:
            fields.append(None)
            return fields


def _csv_value(text: str | None, t: SqlType) -> Any:
    # An empty field reads as null, quoted ("") or not: Spark's CSV reader cannot tell them apart,
    # and both forms of serde must read the same value.
    if text is None or text == "":
        return None
    b = t.base
    try:
        if b is BaseType.STRING:
            return text
        if b is BaseType.BOOLEAN:
            return text.strip().lower() == "true"
        if b is BaseType.DOUBLE:
            return float(text)
        if b is BaseType.DECIMAL:
            return Decimal(text).quantize(Decimal(1).scaleb(-(t.scale or 0)))
        if b is BaseType.BYTES:
            return base64.b64decode(text)
        if b in (BaseType.INTEGER, BaseType.BIGINT, BaseType.TIMESTAMP, BaseType.DATE, BaseType.TIME):
            return int(text.strip())
    except (ValueError, ArithmeticError) as e:
        raise SerdeError(f"cannot read {text!r} as {t.ksql_name}: {e}") from None
    raise SerdeError(f"The 'DELIMITED' format does not support type '{b.value}'")


def kafka_encode(value: Any, t: SqlType) -> bytes | None:
    """KAFKA format: ksqlDB's widths, big-endian."""
    if value is None:
        return None
    b = t.base
    if b is BaseType.INTEGER:
        return struct.pack(">i", int(value))
    if b is BaseType.BIGINT:
        return struct.pack(">q", int(value))
    if b is BaseType.DOUBLE:
        return struct.pack(">d", float(value))
    if b is BaseType.STRING:
        return str(value).encode()
    if b is BaseType.BYTES:
        return bytes(value)
    raise SerdeError(f"The 'KAFKA' format does not support type '{b.value}'")


def kafka_decode(data: bytes, t: SqlType) -> Any:
    """Read a KAFKA-format field."""
    b = t.base
    widths = {BaseType.INTEGER: (">i", 4), BaseType.BIGINT: (">q", 8), BaseType.DOUBLE: (">d", 8)}
    if b in widths:
        fmt, size = widths[b]
        if len(data) != size:
            raise SerdeError(f"Size of data received by {b.value} deserializer is not {size}")
        return struct.unpack(fmt, data)[0]
    if b is BaseType.STRING:
        return data.decode(errors="replace")     # Kafka's StringDeserializer (and Spark's cast): U+FFFD
    if b is BaseType.BYTES:
        return bytes(data)
    raise SerdeError(f"The 'KAFKA' format does not support type '{b.value}'")


# The Spark column forms of these same rules are in ``oncestream.sql.engine.compile.serde_columns`` (kept
# out of this module so that INSERT VALUES and pull queries need no PySpark import); their
# agreement with this module is tested in tests/spark/sql/test_serde_agreement.py.
