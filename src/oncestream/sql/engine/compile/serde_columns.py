"""The Spark column form of ``oncestream.sql.engine.serde``: the same formats as expressions over a
DataFrame's ``key``/``value`` binary columns (from_json / to_json / from_csv, DELIMITED written field by field, and binary
conversions), so that a compiled query reads and writes exactly the bytes ``serde`` does.

Everything stays in the JVM except KAFKA-format DOUBLE, which has no Spark SQL expression for its
IEEE-754 bits and goes through a vectorized (Arrow) UDF built on ``serde.kafka_encode``/``decode``.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from pyspark.sql import Column as SparkColumn
from pyspark.sql import functions as F
from pyspark.sql import types as T

from oncestream.spark.registry_formats import plain_value
from oncestream.sql.engine.delimited_quoting import quoting_pattern
from oncestream.sql.engine.processing_log import (
    current_processing_log,
    log_deserialization_error,
    log_serialization_error,
)
from oncestream.sql.engine.serde import RecordLayout, SerdeError, decode_columns, encode_columns
from oncestream.sql.language.catalog import Column, Format
from oncestream.sql.language.sql_ast import WindowKind
from oncestream.sql.language.types import BaseType, SqlType

# Internal column marking a record whose value is null (a table's tombstone).
TOMBSTONE = "__TOMBSTONE"
# Internal columns (``__UNREADABLE_KEY``, ``__UNREADABLE_VALUE``) marking a record that could not
# be read (it went to the processing log; the source drops it, as ksqlDB does).
UNREADABLE = "__UNREADABLE"
WINDOW_START = "WINDOWSTART"
WINDOW_END = "WINDOWEND"

_JSON_WRITE = {"ignoreNullFields": "false"}


def _csv_options(delimiter: str) -> dict[str, str]:
    # Reading: RFC 4180 quoting (doubled quotes); whitespace is data; an empty field is a null.
    # (Writing does not use to_csv: its quoting is not ksqlDB's, see ``_quoted``.)
    return {"sep": delimiter, "quote": '"', "escape": '"', "ignoreLeadingWhiteSpace": "false",
            "ignoreTrailingWhiteSpace": "false", "nullValue": ""}


def spark_type(t: SqlType) -> T.DataType:
    """The Spark type holding a ksqlDB type inside a compiled query."""
    b = t.base
    simple: dict[BaseType, T.DataType] = {
        BaseType.BOOLEAN: T.BooleanType(), BaseType.INTEGER: T.IntegerType(), BaseType.BIGINT: T.LongType(),
        BaseType.DOUBLE: T.DoubleType(), BaseType.STRING: T.StringType(), BaseType.BYTES: T.BinaryType(),
        BaseType.TIMESTAMP: T.TimestampType(), BaseType.DATE: T.DateType(), BaseType.TIME: T.IntegerType(),
    }
    if b in simple:
        return simple[b]
    if b is BaseType.DECIMAL:
        return T.DecimalType(t.precision or 10, t.scale or 0)
    if b is BaseType.ARRAY and t.element is not None:
        return T.ArrayType(spark_type(t.element))
    if b is BaseType.MAP and t.element is not None:
        return T.MapType(T.StringType(), spark_type(t.element))
    if b is BaseType.STRUCT:
        return T.StructType([T.StructField(f.name, spark_type(f.type)) for f in t.fields])
    raise SerdeError(f"type {t.ksql_name} has no Spark equivalent")


def _wire_type(t: SqlType, bytes_type: T.DataType | None = None) -> T.DataType:
    """The Spark type of a column as JSON/CSV hold it (TIMESTAMP epoch ms, DATE epoch days, BYTES
    base64 text), or with ``bytes_type=BinaryType()`` as the registry UDFs hold it (BYTES as is)."""
    b = t.base
    if b is BaseType.TIMESTAMP:
        return T.LongType()
    if b is BaseType.DATE:
        return T.IntegerType()
    if b is BaseType.BYTES:
        return bytes_type or T.StringType()
    if b is BaseType.ARRAY and t.element is not None:
        return T.ArrayType(_wire_type(t.element, bytes_type))
    if b is BaseType.MAP and t.element is not None:
        return T.MapType(T.StringType(), _wire_type(t.element, bytes_type))
    if b is BaseType.STRUCT:
        return T.StructType([T.StructField(f.name, _wire_type(f.type, bytes_type)) for f in t.fields])
    return spark_type(t)


# The leaf conversions between a Spark value and its JSON/CSV form, one table per direction; the
# walk through ARRAY/MAP/STRUCT that reaches them is shared (``_map_wire``).
_TO_WIRE: dict[BaseType, Callable[[SparkColumn], SparkColumn]] = {
    BaseType.TIMESTAMP: F.unix_millis, BaseType.DATE: F.unix_date, BaseType.BYTES: F.base64,
}
_FROM_WIRE: dict[BaseType, Callable[[SparkColumn], SparkColumn]] = {
    BaseType.TIMESTAMP: F.timestamp_millis, BaseType.DATE: F.date_from_unix_date, BaseType.BYTES: F.unbase64,
}


def _converts(t: SqlType) -> bool:
    b = t.base
    if b in _TO_WIRE:
        return True
    if b in (BaseType.ARRAY, BaseType.MAP) and t.element is not None:
        return _converts(t.element)
    if b is BaseType.STRUCT:
        return any(_converts(f.type) for f in t.fields)
    return False


def _map_wire(col: SparkColumn, t: SqlType, leaves: Mapping[BaseType, Callable[[SparkColumn], SparkColumn]]) -> SparkColumn:
    """``col`` with ``leaves`` applied to every TIMESTAMP/DATE/BYTES inside it, however nested."""
    if not _converts(t):
        return col
    b = t.base
    leaf = leaves.get(b)
    if leaf is not None:
        return leaf(col)
    element = t.element
    if b is BaseType.ARRAY and element is not None:
        return F.transform(col, lambda x: _map_wire(x, element, leaves))
    if b is BaseType.MAP and element is not None:
        return F.transform_values(col, lambda _k, v: _map_wire(v, element, leaves))
    fields = [_map_wire(col.getField(f.name), f.type, leaves).alias(f.name) for f in t.fields]
    return F.when(col.isNull(), F.lit(None)).otherwise(F.struct(*fields))


def to_wire(col: SparkColumn, t: SqlType) -> SparkColumn:
    """A Spark column as its JSON/CSV form (see ``serde.to_json_wire``)."""
    return _map_wire(col, t, _TO_WIRE)


def from_wire(col: SparkColumn, t: SqlType) -> SparkColumn:
    """The inverse of ``to_wire``."""
    return _map_wire(col, t, _FROM_WIRE)


# -- KAFKA format ------------------------------------------------------------------------------


def _long_bytes(col: SparkColumn) -> SparkColumn:
    """8-byte big-endian two's complement of a BIGINT (Spark's hex() of a negative long is its
    unsigned 64-bit form)."""
    return F.unhex(F.lpad(F.hex(col.cast("bigint")), 16, "0"))


def _int_bytes(col: SparkColumn) -> SparkColumn:
    return F.unhex(F.substring(F.lpad(F.hex(col.cast("bigint")), 16, "0"), 9, 8))


def _bytes_long(col: SparkColumn) -> SparkColumn:
    unsigned = F.conv(F.hex(col), 16, 10).cast("decimal(20,0)")
    signed = F.when(unsigned >= F.lit(Decimal(2 ** 63)), unsigned - F.lit(Decimal(2 ** 64))).otherwise(unsigned)
    return F.when(F.length(col) == 8, signed.cast("bigint"))


def _bytes_int(col: SparkColumn) -> SparkColumn:
    unsigned = F.conv(F.hex(col), 16, 10).cast("bigint")
    signed = F.when(unsigned >= F.lit(2 ** 31), unsigned - F.lit(2 ** 32)).otherwise(unsigned)
    return F.when(F.length(col) == 4, signed.cast("int"))


def _vectorized(fn: Any, result: T.DataType) -> Any:
    """An Arrow-vectorized UDF of ``fn`` (a Series -> Series function). The hints are set here,
    not written: with postponed annotations PySpark could not resolve ``pd.Series``."""
    import pandas as pd

    fn.__annotations__ = {"values": pd.Series, "return": pd.Series}
    return F.pandas_udf(fn, result)  # type: ignore[call-overload]


def _double_encoder() -> Any:
    def encode_double(values: Any) -> Any:
        return values.map(lambda v: None if v is None or v != v else struct.pack(">d", float(v)))

    return _vectorized(encode_double, T.BinaryType())


def _double_decoder() -> Any:
    def decode_double(values: Any) -> Any:
        return values.map(lambda v: None if v is None or len(v) != 8 else struct.unpack(">d", bytes(v))[0])

    return _vectorized(decode_double, T.DoubleType())


def _kafka_encode(col: SparkColumn, t: SqlType) -> SparkColumn:
    b = t.base
    if b is BaseType.INTEGER:
        return _int_bytes(col)
    if b is BaseType.BIGINT:
        return _long_bytes(col)
    if b is BaseType.DOUBLE:
        return _double_encoder()(col.cast("double"))
    if b is BaseType.STRING:
        return col.cast("binary")
    if b is BaseType.BYTES:
        return col
    raise SerdeError(f"The 'KAFKA' format does not support type '{b.value}'")


def _kafka_decode(col: SparkColumn, t: SqlType) -> SparkColumn:
    b = t.base
    if b is BaseType.INTEGER:
        return _bytes_int(col)
    if b is BaseType.BIGINT:
        return _bytes_long(col)
    if b is BaseType.DOUBLE:
        return _double_decoder()(col)
    if b is BaseType.STRING:
        return col.cast("string")
    if b is BaseType.BYTES:
        return col
    raise SerdeError(f"The 'KAFKA' format does not support type '{b.value}'")


# -- AVRO, JSON_SR, PROTOBUF(_NOSR) (the registry formats): Python UDFs over serde_registry --------

# Inside the UDFs a TIMESTAMP is epoch ms and a DATE epoch days (serde's Python values), converted
# in the JVM: a Python datetime from Spark is in the session's zone, epoch ms has none.
_TO_EPOCH: dict[BaseType, Callable[[SparkColumn], SparkColumn]] = {
    BaseType.TIMESTAMP: F.unix_millis, BaseType.DATE: F.unix_date, BaseType.BYTES: lambda c: c,
}
_FROM_EPOCH: dict[BaseType, Callable[[SparkColumn], SparkColumn]] = {
    BaseType.TIMESTAMP: F.timestamp_millis, BaseType.DATE: F.date_from_unix_date, BaseType.BYTES: lambda c: c,
}


def _registry_decode(layout: RecordLayout, columns: Sequence[Column], data: SparkColumn, *, key: bool) -> list[SparkColumn]:
    # The Python form decodes; a record it cannot read (unknown schema id, bad bytes) goes to the
    # processing log (the logger, and its topic when the server has one) and reads as nulls.
    topic = layout.topic
    target = "key" if key else "value"
    log_settings = current_processing_log()
    decoder = functools.partial(decode_columns, layout.key_format if key else layout.value_format, tuple(columns),
                                codec=layout.key_codec if key else layout.value_codec,
                                single_unwrapped=key or layout.value_unwrapped)
    schema = T.StructType([T.StructField(c.name, _wire_type(c.type, T.BinaryType())) for c in columns])

    def decode(raw: Any) -> Any:
        if raw is None:
            return None
        try:
            return decoder(bytes(raw))
        except SerdeError as e:
            log_deserialization_error(log_settings, logger=f"processing.{topic}.{target}.deserializer", topic=topic,
                                      target=target, error=str(e), record=bytes(raw))
            return None

    decode.__annotations__ = {}   # plain Python UDF: no hints for PySpark to read as pandas ones
    parsed = F.udf(decode, schema)(data)
    marker = (data.isNotNull() & parsed.isNull()).alias(f"{UNREADABLE}_{'KEY' if key else 'VALUE'}")
    return [*(_map_wire(parsed.getField(c.name), c.type, _FROM_EPOCH).alias(c.name) for c in columns), marker]


def _registry_encode(layout: RecordLayout, columns: Sequence[Column], values: Mapping[str, SparkColumn], *,
                     key: bool) -> SparkColumn:
    encoder = functools.partial(encode_columns, layout.key_format if key else layout.value_format, tuple(columns),
                                codec=layout.key_codec if key else layout.value_codec,
                                single_unwrapped=key or layout.value_unwrapped)
    target = "key" if key else "value"
    log_settings = current_processing_log()

    def encode(row: Any) -> Any:
        values = plain_value(row)
        try:
            return encoder(values)
        except Exception as e:
            # ksqlDB's LoggingSerializer logs the row, then Kafka Streams' default answer to a
            # serializer's exception fails the query: so does this one (the exception goes on).
            log_serialization_error(log_settings, logger=f"processing.{layout.topic}.{target}.serializer",
                                    topic=layout.topic, target=target, error=str(e), record=repr(values))
            raise

    encode.__annotations__ = {}
    fields = [_map_wire(values[c.name], c.type, _TO_EPOCH).alias(c.name) for c in columns]
    return F.udf(encode, T.BinaryType())(F.struct(*fields))


# -- one format over a binary column -------------------------------------------------------------


def _decode(fmt: Format, columns: Sequence[Column], data: SparkColumn, delimiter: str, *,
            single_unwrapped: bool) -> tuple[list[SparkColumn], SparkColumn | None]:
    """The columns read from ``data`` in the JVM, and a test true for every record that may not
    be readable (Spark's parsers read a bad record as nulls rather than fail: ``_unreadable``
    has the Python serde decide for these records only); None when no record can be bad
    (KAFKA STRING and BYTES)."""
    names = [c.name for c in columns]
    present = data.isNotNull()
    if fmt is Format.JSON:
        # ksqlDB's JSON reads JSON_SR records too: their framing (magic byte 0, 4-byte id) is cut off.
        data = _strip_frame(data)
        text = data.cast("string")
        if single_unwrapped and len(columns) == 1:
            t = columns[0].type
            if _has_struct(t):
                # a STRUCT's fields match case-insensitively here too (json.json "STRUCT - key");
                # a record read as null goes to the Python serde, which tells JSON null from bad
                value = _json_ci(text, t)
                return [from_wire(value, t).alias(names[0])], present & value.isNull()
            parsed = F.from_json(F.concat(F.lit("["), text, F.lit("]")), T.ArrayType(_wire_type(t)))
            return [from_wire(parsed.getItem(0), t).alias(names[0])], present & (parsed.isNull() | (F.size(parsed) != 1))
        schema = T.StructType([T.StructField(c.name, _wire_type(c.type)) for c in columns])
        exact = F.from_json(text, schema)
        # ksqlDB matches JSON fields case-insensitively. The exact parse serves ksqlDB's own
        # output; a field missing under its exact name is looked up in an upper-cased map of the
        # object (a second parse, evaluated only for such rows: coalesce is lazy).
        loose = F.transform_keys(F.from_json(text, T.MapType(T.StringType(), T.StringType())),
                                 lambda k, _v: F.upper(k))
        out = []
        suspect = loose.isNull()          # not JSON, or not an object
        for c in columns:
            wire = _wire_type(c.type)
            raw = loose.getItem(c.name.upper())
            if _has_struct(c.type):
                # Inside a STRUCT too (Spark's from_json matches names exactly): ksqlDB's
                # processing log, for one, writes "deserializationError" for DESERIALIZATIONERROR.
                value = _json_ci(raw, c.type)
            else:
                value = F.coalesce(exact.getField(c.name), _from_json_text(raw, wire))
            # a field the object has (not null) that reads as null: a value of another type
            suspect = suspect | (raw.isNotNull() & value.isNull())
            out.append(from_wire(value, c.type).alias(c.name))
        return out, present & suspect
    if fmt is Format.DELIMITED:
        for c in columns:
            if c.type.base in (BaseType.ARRAY, BaseType.MAP, BaseType.STRUCT):
                raise SerdeError(f"The 'DELIMITED' format does not support type '{c.type.base.value}'")
        # Spark puts the text of a line with the wrong number of fields, or a field of the wrong
        # type, in the corrupt-record column (its fields are nulls or partial).
        schema = T.StructType([*(T.StructField(c.name, _wire_type(c.type)) for c in columns),
                               T.StructField(_CORRUPT, T.StringType())])
        options = {**_csv_options(delimiter), "mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT}
        parsed = F.from_csv(data.cast("string"), F.lit(_ddl(schema)), options)
        return ([from_wire(parsed.getField(c.name), c.type).alias(c.name) for c in columns],
                present & parsed.getField(_CORRUPT).isNotNull())
    if fmt is Format.KAFKA:
        if len(columns) != 1:
            raise SerdeError(f"The 'KAFKA' format only supports a single field. Got: {names}")
        size = _KAFKA_SIZES.get(columns[0].type.base)
        wrong_width = present & (F.length(data) != size) if size is not None else None
        return [_kafka_decode(data, columns[0].type).alias(names[0])], wrong_width
    raise SerdeError(f"format {fmt.value} holds no columns")


# The corrupt-record column of a DELIMITED parse (a name no ksqlDB column has: ``__`` is internal).
_CORRUPT = "__CORRUPT"
# KAFKA's fixed widths: any other length is a bad record (Spark's conversions read it as null).
_KAFKA_SIZES = {BaseType.INTEGER: 4, BaseType.BIGINT: 8, BaseType.DOUBLE: 8}


def _unreadable(layout: RecordLayout, raw: SparkColumn, suspect: SparkColumn | None, *, key: bool) -> SparkColumn:
    """``__UNREADABLE_KEY``/``_VALUE``: true for a record the Python serde (the rules' one
    implementation) cannot read, which goes to the processing log here; the source then drops
    it, as ksqlDB does. Only records ``suspect`` marks are sent to Python (a vectorized UDF; the
    others pass as nulls), so a good record costs no Python decode."""
    target = "key" if key else "value"
    name = f"{UNREADABLE}_{target.upper()}"
    if suspect is None:
        return F.lit(False).alias(name)       # no Python worker for a format that cannot be bad
    log_settings = current_processing_log()
    read = layout.decode_key if key else layout.decode_value

    def bad(data: bytes | None) -> bool:
        if data is None:
            return False
        try:
            read(bytes(data))
        except SerdeError as e:
            log_deserialization_error(log_settings, logger=f"processing.{layout.topic}.{target}.deserializer",
                                      topic=layout.topic, target=target, error=str(e), record=bytes(data))
            return True
        return False

    def check_records(values: Any) -> Any:
        return values.map(bad).astype(bool)

    flagged = _vectorized(check_records, T.BooleanType())(F.when(suspect, raw))
    return F.coalesce(flagged, F.lit(False)).alias(name)


def _has_struct(t: SqlType) -> bool:
    if t.base is BaseType.STRUCT:
        return True
    return t.element is not None and _has_struct(t.element)


def _json_ci(text: SparkColumn, t: SqlType) -> SparkColumn:
    """The JSON/CSV wire value of the JSON text ``text`` as type ``t``, the fields of every STRUCT
    in it matched case-insensitively (as ``serde.from_json_wire``): each object is read as a map
    of upper-cased names to the JSON text of its values, then each field from its text."""
    text_map = T.MapType(T.StringType(), T.StringType())
    b, element = t.base, t.element
    if b is BaseType.STRUCT:
        fields_by_name = F.transform_keys(F.from_json(text, text_map), lambda k, _v: F.upper(k))
        fields = [_json_ci(fields_by_name.getItem(f.name.upper()), f.type).alias(f.name) for f in t.fields]
        return F.when(fields_by_name.isNull(), F.lit(None)).otherwise(F.struct(*fields))
    if b is BaseType.ARRAY and element is not None and _has_struct(element):
        return F.transform(F.from_json(text, T.ArrayType(T.StringType())), lambda x: _json_ci(x, element))
    if b is BaseType.MAP and element is not None and _has_struct(element):
        return F.transform_values(F.from_json(text, text_map), lambda _k, v: _json_ci(v, element))
    return _from_json_text(text, _wire_type(t))


# Spark's JSON reader takes only integer tokens for INT/BIGINT; ksqlDB's (JsonSerdeUtils) takes any
# number, truncated (Jackson's intValue / asLong: [1, 2.0] is an ARRAY<INT> [1, 2]). A collection's
# text is read with its integral leaves as decimals wide enough for any BIGINT, then cast.
_INTEGRAL_AS_READ = T.DecimalType(38, 18)


def _integral_leaves_as_decimals(wire: T.DataType) -> T.DataType:
    if isinstance(wire, (T.IntegerType, T.LongType)):
        return _INTEGRAL_AS_READ
    if isinstance(wire, T.ArrayType):
        return T.ArrayType(_integral_leaves_as_decimals(wire.elementType))
    if isinstance(wire, T.MapType):
        return T.MapType(wire.keyType, _integral_leaves_as_decimals(wire.valueType))
    if isinstance(wire, T.StructType):
        return T.StructType([T.StructField(f.name, _integral_leaves_as_decimals(f.dataType)) for f in wire.fields])
    return wire


def _from_json_text(text: SparkColumn, wire: T.DataType) -> SparkColumn:
    """The JSON text of one value (``text``) as the wire type: a scalar by Spark's cast (which
    truncates ``2.0`` to an INT 2), a collection by ``from_json`` (integral leaves as above)."""
    if not isinstance(wire, (T.StructType, T.ArrayType, T.MapType)):
        return text.cast(wire)
    read = _integral_leaves_as_decimals(wire)
    assert isinstance(read, (T.StructType, T.ArrayType, T.MapType))   # a collection stays one
    return F.from_json(text, read) if read == wire else F.from_json(text, read).cast(wire)


def _strip_frame(data: SparkColumn) -> SparkColumn:
    framed = (F.length(data) >= 5) & (F.substring(data, 1, 1) == F.lit(bytearray(b"\x00")))
    return F.when(framed, F.substring(data, 6, 1 << 30)).otherwise(data)


def _csv_text(col: SparkColumn, t: SqlType) -> SparkColumn:
    """A DELIMITED field's text before quoting, null for a null (``serde.csv_text``)."""
    text = to_wire(col, t).cast("string")
    if t.base is BaseType.DECIMAL and t.scale:
        return _plain_decimal(text, t.scale)
    return text


def _plain_decimal(text: SparkColumn, scale: int) -> SparkColumn:
    """A DECIMAL's string cast written plain (ksqlDB's ``BigDecimal.toPlainString``).

    Spark's cast writes a decimal held as a java.math.BigDecimal (precision above 18) with its
    ``toString``, which has an exponent when the value is below 1E-6 (``0E-16``, ``-1.5E-10``).
    Such a value (the scale is never negative) is ``0.`` then its unscaled digits (the mantissa's
    digits) left-padded with zeros to the scale."""
    digits = F.regexp_replace(F.regexp_extract(text, r"^-?([0-9.]+)E-", 1), r"\.", "")
    sign = F.when(text.startswith("-"), F.lit("-")).otherwise(F.lit(""))
    return F.when(text.contains("E-"), F.concat(sign, F.lit("0."), F.lpad(digits, scale, "0"))).otherwise(text)


def _quoted(text: SparkColumn, delimiter: str, *, first: bool) -> SparkColumn:
    """``text`` quoted by the commons-csv 1.4 rule of ``delimited_quoting`` (the same regex that
    the Python serde searches), a null as an empty field."""
    quoted = F.concat(F.lit('"'), F.regexp_replace(text, '"', '""'), F.lit('"'))
    return (F.when(text.isNull(), F.lit(""))
            .when(text.rlike(quoting_pattern(delimiter, first=first)), quoted)
            .otherwise(text))


def _ddl(schema: T.StructType) -> str:
    return ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in schema.fields)


def _encode(fmt: Format, columns: Sequence[Column], values: Mapping[str, SparkColumn], delimiter: str, *,
            single_unwrapped: bool) -> SparkColumn:
    if fmt is Format.JSON:
        if single_unwrapped and len(columns) == 1:
            c = columns[0]
            col = values[c.name]
            text = F.to_json(F.array(to_wire(col, c.type)), _JSON_WRITE)
            # to_json of a one-element array, brackets cut off: the bare JSON value.
            return F.when(col.isNull(), F.lit(None)).otherwise(
                F.substring(text, F.lit(2), F.length(text) - 2)).cast("binary")
        fields = [to_wire(values[c.name], c.type).alias(c.name) for c in columns]
        return F.to_json(F.struct(*fields), _JSON_WRITE).cast("binary")
    if fmt is Format.DELIMITED:
        for c in columns:
            if c.type.base in (BaseType.ARRAY, BaseType.MAP, BaseType.STRUCT):
                raise SerdeError(f"The 'DELIMITED' format does not support type '{c.type.base.value}'")
        texts = [_csv_text(values[c.name], c.type) for c in columns]
        record = F.concat_ws(delimiter, *(_quoted(text, delimiter, first=i == 0) for i, text in enumerate(texts)))
        if single_unwrapped and len(columns) == 1:
            # a one-column key (or unwrapped value) that is null: a null record key/value
            record = F.when(texts[0].isNull(), F.lit(None)).otherwise(record)
        return record.cast("binary")
    if fmt is Format.KAFKA:
        if len(columns) != 1:
            raise SerdeError(f"The 'KAFKA' format only supports a single field. Got: {[c.name for c in columns]}")
        return _kafka_encode(values[columns[0].name], columns[0].type)
    raise SerdeError(f"format {fmt.value} holds no columns")


# -- public: keys and values -----------------------------------------------------------------------


def decode_value(layout: RecordLayout, value: SparkColumn) -> list[SparkColumn]:
    """The value columns of ``layout`` read from a binary ``value`` column (each aliased to its
    name), plus ``__TOMBSTONE`` (true when the value is null)."""
    if layout.value_codec is not None:
        cols = _registry_decode(layout, layout.value_columns, value, key=False)
    elif layout.value_columns:
        cols, suspect = _decode(layout.value_format, layout.value_columns, value, layout.value_delimiter,
                                single_unwrapped=layout.value_unwrapped)
        cols = [*cols, _unreadable(layout, value, suspect, key=False)]
    else:
        cols = []
    return [*cols, value.isNull().alias(TOMBSTONE)]


def decode_key(layout: RecordLayout, key: SparkColumn) -> list[SparkColumn]:
    """The key columns of ``layout`` read from a binary ``key`` column; a windowed layout adds
    WINDOWSTART and WINDOWEND (BIGINT ms)."""
    if layout.key_format is Format.NONE or not layout.key_columns:
        return []
    extra: list[SparkColumn] = []
    data = key
    short: SparkColumn | None = None
    if layout.window is WindowKind.SESSION:
        short = F.length(key) < 16
        size = F.length(key)
        data = F.substring(key, F.lit(1), size - 16)
        extra = [_bytes_long(F.substring(key, size - 7, F.lit(8))).alias(WINDOW_START),
                 _bytes_long(F.substring(key, size - 15, F.lit(8))).alias(WINDOW_END)]
    elif layout.window is not None:
        short = F.length(key) < 8
        size = F.length(key)
        data = F.substring(key, F.lit(1), size - 8)
        start = _bytes_long(F.substring(key, size - 7, F.lit(8)))
        extra = [start.alias(WINDOW_START), (start + F.lit(layout.window_size_ms or 0)).alias(WINDOW_END)]
    if layout.key_codec is not None:
        cols = _registry_decode(layout, layout.key_columns, data, key=True)
    else:
        cols, suspect = _decode(layout.key_format, layout.key_columns, data, layout.key_delimiter,
                                single_unwrapped=True)
        if short is not None:
            short = key.isNotNull() & short
            suspect = short if suspect is None else suspect | short
        cols = [*cols, _unreadable(layout, key, suspect, key=True)]
    return [*cols, *extra]


def encode_value(layout: RecordLayout, values: Mapping[str, SparkColumn]) -> SparkColumn:
    """The binary record value of the value columns (``values`` by column name)."""
    if layout.value_codec is not None:
        return _registry_encode(layout, layout.value_columns, values, key=False)
    return _encode(layout.value_format, layout.value_columns, values, layout.value_delimiter,
                   single_unwrapped=layout.value_unwrapped)


def encode_key(layout: RecordLayout, values: Mapping[str, SparkColumn], window_start: SparkColumn | None = None,
               window_end: SparkColumn | None = None) -> SparkColumn:
    """The binary record key: null for KEY_FORMAT NONE; windowed layouts append the window as
    Kafka Streams does (``start``; sessions ``end`` then ``start``)."""
    if layout.key_format is Format.NONE or not layout.key_columns:
        return F.lit(None).cast("binary")
    if layout.key_codec is not None:
        data = _registry_encode(layout, layout.key_columns, values, key=True)
    else:
        data = _encode(layout.key_format, layout.key_columns, values, layout.key_delimiter, single_unwrapped=True)
    if layout.window is None:
        return data
    if window_start is None:
        raise SerdeError("a windowed key needs its window start")
    if layout.window is WindowKind.SESSION:
        if window_end is None:
            raise SerdeError("a session-windowed key needs its window end")
        return F.concat(data, _long_bytes(window_end), _long_bytes(window_start))
    return F.concat(data, _long_bytes(window_start))
