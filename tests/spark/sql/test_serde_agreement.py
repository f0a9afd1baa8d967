"""The two forms of ``oncestream.sql.engine.serde`` agree: bytes written by the Python form are read by
the Spark column form (``compile.serde_columns``) into the same values, and the Spark form writes
those values back into exactly the Python form's bytes, for every format and key kind."""

from __future__ import annotations

import datetime as dt
import struct
from typing import Any

import pytest

from oncestream.sql.engine.serde import RecordLayout, Window
from oncestream.sql.language import types as t
from oncestream.sql.language.catalog import Column, Format, Namespace
from oncestream.sql.language.sql_ast import WindowKind

pytestmark = [pytest.mark.spark]


def _layout(key_format, value_format, keys=(), values=(), window=None, size_ms=None, delimiter=",") -> RecordLayout:
    return RecordLayout(key_format, value_format, tuple(Column(n, ty, Namespace.KEY) for n, ty in keys),
                        tuple(Column(n, ty) for n, ty in values), delimiter, window, size_ms)


def _plain(value: Any) -> Any:
    if hasattr(value, "asDict"):
        return {k: _plain(v) for k, v in value.asDict().items()}
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _round_trip(spark, layout: RecordLayout, rows: list[dict[str, Any]], windows: list[Window | None]):
    """Python-encode the rows, decode them in Spark, encode them again in Spark; returns the
    Python records, the Spark-decoded rows and the Spark-encoded records."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from oncestream.sql.engine.compile import serde_columns

    records = [(layout.encode_key(r, w), layout.encode_value(r)) for r, w in zip(rows, windows, strict=True)]
    frame = spark.createDataFrame(records, T.StructType([T.StructField("key", T.BinaryType()),
                                                         T.StructField("value", T.BinaryType())]))
    decoded = frame.select(*serde_columns.decode_key(layout, F.col("key")),
                           *serde_columns.decode_value(layout, F.col("value")))
    columns = [*layout.key_columns, *layout.value_columns]
    values = {c.name: F.col(f"`{c.name}`") for c in columns}
    start = F.col("WINDOWSTART") if layout.window else None
    end = F.col("WINDOWEND") if layout.window else None
    encoded = decoded.select(serde_columns.encode_key(layout, values, start, end).alias("key"),
                             serde_columns.encode_value(layout, values).alias("value"))
    shown = []
    for c in columns:
        col = F.col(f"`{c.name}`")
        if c.type.base is t.BaseType.TIMESTAMP:
            col = F.unix_millis(col)
        if c.type.base is t.BaseType.DATE:
            col = F.unix_date(col)
        shown.append(col.alias(c.name))
    if layout.window:
        shown += [F.col("WINDOWSTART"), F.col("WINDOWEND")]
    got_rows = [{k: _plain(v) for k, v in r.asDict().items()} for r in decoded.select(*shown).collect()]
    got_records = [(_plain(r["key"]), _plain(r["value"])) for r in encoded.collect()]
    return records, got_rows, got_records


def test_json_value_with_nested_types_and_kafka_key(sql_spark):
    layout = _layout(Format.KAFKA, Format.JSON, keys=[("ID", t.INTEGER)],
                     values=[("B", t.BIGINT), ("S", t.STRING), ("D", t.DOUBLE), ("OK", t.BOOLEAN), ("TS", t.TIMESTAMP),
                             ("A", t.array_of(t.INTEGER)), ("ST", t.struct_of(("F", t.STRING), ("G", t.BYTES))),
                             ("M", t.map_of(t.STRING, t.BIGINT)), ("BY", t.BYTES)])
    rows: list[dict[str, Any]] = [
        {"ID": -7, "B": 2 ** 40, "S": 'é "q"', "D": 1.5, "OK": True, "TS": 1_700_000_000_123, "A": [1, None, 3],
         "ST": {"F": "x", "G": b"\x01\x02"}, "M": {"k": 1}, "BY": b"\xff"},
        {"ID": None, "B": None, "S": None, "D": None, "OK": None, "TS": None, "A": None, "ST": None, "M": None, "BY": None},
    ]
    records, got_rows, got_records = _round_trip(sql_spark, layout, rows, [None, None])
    assert got_rows == rows
    assert got_records == records


def test_json_fields_are_matched_case_insensitively_in_spark(sql_spark):
    from pyspark.sql import functions as F

    from oncestream.sql.engine.compile import serde_columns

    layout = _layout(Format.NONE, Format.JSON,
                     values=[("ID", t.INTEGER), ("NAME", t.STRING), ("ST", t.struct_of(("F", t.INTEGER)))])
    frame = sql_spark.createDataFrame([(b'{"id":1,"Name":"x","st":{"F":2}}',), (b'{"ID":3,"NAME":null}',)], "value binary")
    got = [_plain(r.asDict()) for r in frame.select(*serde_columns.decode_value(layout, F.col("value"))).collect()]
    assert got == [{"ID": 1, "NAME": "x", "ST": {"F": 2}, "__UNREADABLE_VALUE": False, "__TOMBSTONE": False},
                   {"ID": 3, "NAME": None, "ST": None, "__UNREADABLE_VALUE": False, "__TOMBSTONE": False}]
    assert [layout.decode_value(b'{"id":1,"Name":"x","st":{"F":2}}')] == [{"ID": 1, "NAME": "x", "ST": {"F": 2}}]
    # a single STRUCT key (unwrapped) too (json.json "STRUCT - key"); JSON null is a null key
    keyed = _layout(Format.JSON, Format.JSON, keys=[("K", t.struct_of(("F", t.DOUBLE)))], values=[("V", t.INTEGER)])
    keys = sql_spark.createDataFrame([(b'{"f":45.67}',), (b"null",), (None,)], "key binary")
    got = [_plain(r.asDict()) for r in keys.select(*serde_columns.decode_key(keyed, F.col("key"))).collect()]
    assert [g["K"] for g in got] == [{"F": 45.67}, None, None]
    assert keyed.decode_key(b'{"f":45.67}')[0] == {"K": {"F": 45.67}}


def test_json_integers_are_read_from_any_number_in_spark(sql_spark):
    """binary-comparison.json "array equality" / "map equality": ksqlDB reads a JSON number with a
    fraction into an INT (Jackson's intValue: 2.0 is 2), inside collections too."""
    from pyspark.sql import functions as F

    from oncestream.sql.engine.compile import serde_columns

    layout = _layout(Format.NONE, Format.JSON, values=[("A", t.array_of(t.INTEGER)), ("M", t.map_of(t.STRING, t.BIGINT)),
                                                       ("I", t.INTEGER)])
    frame = sql_spark.createDataFrame([(b'{"A":[1,2.0],"M":{"a":1.0},"I":3.0}',)], "value binary")
    got = [_plain(r.asDict()) for r in frame.select(*serde_columns.decode_value(layout, F.col("value"))).collect()]
    assert got == [{"A": [1, 2], "M": {"a": 1}, "I": 3, "__UNREADABLE_VALUE": False, "__TOMBSTONE": False}]


def test_unreadable_records_are_marked_in_spark_as_the_python_serde_calls_them(sql_spark):
    """``__UNREADABLE_KEY``/``_VALUE`` are true exactly for the records the Python serde refuses
    (a wrong KAFKA width, text that is not JSON, a field of another type, a DELIMITED line with
    another number of fields); a number in a JSON string and a tombstone are not bad."""
    from pyspark.sql import functions as F

    from oncestream.sql.engine.compile import serde_columns

    def marks(layout: RecordLayout, records: list[tuple[bytes | None, bytes | None]]) -> list[tuple[bool, bool]]:
        frame = sql_spark.createDataFrame(records, "key binary, value binary")
        rows = frame.select(*serde_columns.decode_key(layout, F.col("key")),
                            *serde_columns.decode_value(layout, F.col("value"))).collect()
        return [(r["__UNREADABLE_KEY"], r["__UNREADABLE_VALUE"]) for r in rows]

    k = struct.pack(">i", 1)
    json_layout = _layout(Format.KAFKA, Format.JSON, keys=[("K", t.INTEGER)], values=[("ID", t.INTEGER), ("N", t.STRING)])
    assert marks(json_layout, [(k, b'{"ID":1,"N":"a"}'), (b"\x00\x01", b'{"ID":1}'), (k, b"not json"), (k, b"[1]"),
                               (k, b'{"ID":"x"}'), (k, b'{"id":"3","n":null}'), (k, None)]) == [
        (False, False), (True, False), (False, True), (False, True), (False, True), (False, False), (False, False)]
    csv = _layout(Format.DELIMITED, Format.DELIMITED, keys=[("K", t.INTEGER)], values=[("ID", t.INTEGER), ("N", t.STRING)])
    assert marks(csv, [(b"1", b"1,a"), (b"x", b"1,a"), (b"1", b"1,a,b"), (b"1", b"1"), (b"1", b"y,a"), (b"1", b',""')]) == [
        (False, False), (True, False), (False, True), (False, True), (False, True), (False, False)]


def test_delimited_key_and_value(sql_spark):
    layout = _layout(Format.DELIMITED, Format.DELIMITED, keys=[("K", t.STRING), ("N", t.INTEGER)],
                     values=[("S", t.STRING), ("I", t.INTEGER), ("D", t.DOUBLE), ("OK", t.BOOLEAN), ("TS", t.TIMESTAMP)])
    rows: list[dict[str, Any]] = [{"K": "a,b", "N": 1, "S": 'say "hi", bye', "I": -3, "D": 2.25, "OK": False, "TS": 5},
            {"K": "k", "N": None, "S": None, "I": None, "D": None, "OK": None, "TS": None},
            {"K": " sp ", "N": 0, "S": "", "I": 0, "D": -0.5, "OK": True, "TS": -1}]
    records, got_rows, got_records = _round_trip(sql_spark, layout, rows, [None, None, None])
    assert records[2][1] == b'"",0,-0.5,true,-1'
    # An empty string reads back as null in both forms (Spark's CSV reader cannot tell them apart).
    assert got_rows == [*rows[:2], {**rows[2], "S": None}]
    assert layout.decode_value(records[2][1]) == {"S": None, "I": 0, "D": -0.5, "OK": True, "TS": -1}
    assert got_records[:2] == records[:2]


def test_delimited_quoting_is_commons_csv_1_4_in_both_forms(sql_spark):
    """Spark writes DELIMITED fields with the same quoting rule (``delimited_quoting``) as the
    Python serde: a first-field ``-10`` and a later ``!`` quoted, white space at either end quoted, a DECIMAL
    plain at its scale, a null one-column key a null key."""
    from decimal import Decimal

    layout = _layout(Format.DELIMITED, Format.DELIMITED, keys=[("K", t.STRING)],
                     values=[("I", t.INTEGER), ("S", t.STRING), ("M", t.decimal(33, 16)), ("B", t.BYTES),
                             ("DT", t.DATE), ("T", t.STRING)])
    rows: list[dict[str, Any]] = [
        {"K": "-1", "I": -10, "S": "!", "M": Decimal("-12345.12"), "B": b"!", "DT": -5, "T": "#x"},
        {"K": None, "I": 7, "S": " \t lead", "M": Decimal(0), "B": None, "DT": None, "T": "trail\t"},
        {"K": "é", "I": None, "S": "a|b", "M": Decimal("-1.5E-10"), "B": b"", "DT": 0, "T": '"q"'},
    ]
    records, got_rows, got_records = _round_trip(sql_spark, layout, rows, [None, None, None])
    assert records[0] == (b'"-1"', b'"-10","!",-12345.1200000000000000,IQ==,-5,"#x"')
    assert records[1] == (None, b'7," \t lead",0.0000000000000000,,,"trail\t"')
    assert records[2] == (b'"\xc3\xa9"', b',a|b,-0.0000000001500000,,0,"""q"""')
    # Spark's own decimal-to-string cast would write 0E-16 and -1.5E-10 for these
    assert got_records == records
    assert [r["S"] for r in got_rows] == [r["S"] for r in rows]


def test_delimited_with_another_delimiter(sql_spark):
    layout = _layout(Format.NONE, Format.DELIMITED, values=[("S", t.STRING), ("I", t.BIGINT)], delimiter="|")
    rows: list[dict[str, Any]] = [{"S": "a,b", "I": 10}, {"S": "x|y", "I": None}]
    records, got_rows, got_records = _round_trip(sql_spark, layout, rows, [None, None])
    assert got_rows == rows
    assert got_records == records


@pytest.mark.parametrize(("ty", "values"), [
    (t.INTEGER, [0, -1, 2 ** 31 - 1, -(2 ** 31), None]),
    (t.BIGINT, [0, -1, 2 ** 63 - 1, -(2 ** 63), None]),
    (t.DOUBLE, [0.0, -2.5, 1e300, None]),
    (t.STRING, ["", "é", None]),
])
def test_kafka_format_key_and_value(sql_spark, ty, values):
    layout = _layout(Format.KAFKA, Format.KAFKA, keys=[("K", ty)], values=[("V", ty)])
    rows: list[dict[str, Any]] = [{"K": v, "V": v} for v in values if v is not None] + [{"K": None, "V": values[-1]}]
    records, got_rows, got_records = _round_trip(sql_spark, layout, rows, [None] * len(rows))
    assert got_rows == rows
    assert got_records == records


def test_json_keys_single_and_several(sql_spark):
    single = _layout(Format.JSON, Format.JSON, keys=[("K", t.STRING)], values=[("V", t.INTEGER)])
    rows: list[dict[str, Any]] = [{"K": 'q"uote', "V": 1}, {"K": None, "V": 2}]
    records, got_rows, got_records = _round_trip(sql_spark, single, rows, [None, None])
    assert records[0][0] == b'"q\\"uote"'
    assert records[1][0] is None
    assert got_rows == rows
    assert got_records == records
    several = _layout(Format.JSON, Format.JSON, keys=[("A", t.INTEGER), ("B", t.STRING)], values=[("V", t.INTEGER)])
    rows = [{"A": 1, "B": "x", "V": 3}]
    records, got_rows, got_records = _round_trip(sql_spark, several, rows, [None])
    assert got_rows == rows
    assert got_records == records


def test_windowed_keys(sql_spark):
    tumbling = _layout(Format.KAFKA, Format.JSON, keys=[("K", t.STRING)], values=[("C", t.BIGINT)],
                       window=WindowKind.TUMBLING, size_ms=10_000)
    rows: list[dict[str, Any]] = [{"K": "a", "C": 1}]
    records, got_rows, got_records = _round_trip(sql_spark, tumbling, rows, [Window(20_000, 30_000)])
    assert records[0][0] == b"a" + struct.pack(">q", 20_000)
    assert got_rows == [{"K": "a", "C": 1, "WINDOWSTART": 20_000, "WINDOWEND": 30_000}]
    assert got_records == records
    session = _layout(Format.KAFKA, Format.JSON, keys=[("K", t.INTEGER)], values=[("C", t.BIGINT)],
                      window=WindowKind.SESSION)
    rows = [{"K": 5, "C": 2}]
    records, got_rows, got_records = _round_trip(sql_spark, session, rows, [Window(1_000, 4_000)])
    assert records[0][0] == struct.pack(">iqq", 5, 4_000, 1_000)
    assert got_rows == [{"K": 5, "C": 2, "WINDOWSTART": 1_000, "WINDOWEND": 4_000}]
    assert got_records == records


@pytest.mark.parametrize("fmt", [Format.AVRO, Format.JSON_SR])
def test_registry_formats_key_and_value(sql_spark, fmt):
    """AVRO / JSON_SR: the Spark form (Python UDFs over the same codec) reads the Python form's
    framed records and writes the same bytes back, logical and nested types included."""
    from decimal import Decimal

    from oncestream.sql.engine.serde import layout_of
    from oncestream.sql.language.catalog import SourceInfo
    from oncestream.sql.language.sql_ast import SourceKind
    from tests.support.memory_schema_registry import MemoryRegistry

    values = [("DEC", t.decimal(6, 2)), ("TS", t.TIMESTAMP), ("DT", t.DATE), ("TM", t.TIME), ("BY", t.BYTES),
              ("A", t.array_of(t.STRING)), ("M", t.map_of(t.STRING, t.DOUBLE)), ("ST", t.struct_of(("X", t.INTEGER)))]
    columns = (Column("K", t.BIGINT, Namespace.KEY), *(Column(n, ty) for n, ty in values))
    source = SourceInfo(name="S", kind=SourceKind.STREAM, topic="t", key_format=fmt, value_format=fmt,
                        columns=columns, statement="")
    registry = MemoryRegistry.empty()
    layout = layout_of(source, registry)
    for codec in (layout.key_codec, layout.value_codec):
        assert codec is not None
        codec.writer_id()      # registered on the driver, as the runtime does at query start
    rows: list[dict[str, Any]] = [
        {"K": 5, "DEC": Decimal("-1.25"), "TS": 1_700_000_000_123, "DT": 19_000, "TM": 61_000, "BY": b"\x00",
         "A": ["a", None], "M": {"x": 0.5}, "ST": {"X": 3}},
        {"K": 6, **{n: None for n, _ in values}},
    ]
    records, got_rows, got_records = _round_trip(sql_spark, layout, rows, [None, None])
    assert got_rows == rows
    assert got_records == records


def test_timestamp_helpers_agree():
    assert dt.datetime(1970, 1, 1, tzinfo=dt.UTC).timestamp() == 0


@pytest.mark.parametrize("fmt", [Format.PROTOBUF, Format.PROTOBUF_NOSR])
def test_protobuf_formats_key_and_value(sql_spark, fmt):
    """PROTOBUF / PROTOBUF_NOSR: the Spark form reads the Python form's records and writes the
    same bytes back; proto3's nulls read back as the defaults in both forms."""
    from decimal import Decimal

    from oncestream.sql.engine.serde import layout_of
    from oncestream.sql.language.catalog import SourceInfo
    from oncestream.sql.language.sql_ast import SourceKind
    from tests.support.memory_schema_registry import MemoryRegistry

    values = [("DEC", t.decimal(6, 2)), ("TS", t.TIMESTAMP), ("DT", t.DATE), ("TM", t.TIME), ("BY", t.BYTES),
              ("A", t.array_of(t.STRING)), ("M", t.map_of(t.STRING, t.DOUBLE)), ("ST", t.struct_of(("X", t.INTEGER))),
              ("S", t.STRING)]
    columns = (Column("K", t.BIGINT, Namespace.KEY), *(Column(n, ty) for n, ty in values))
    source = SourceInfo(name="S", kind=SourceKind.STREAM, topic="t", key_format=fmt, value_format=fmt,
                        columns=columns, statement="")
    layout = layout_of(source, MemoryRegistry.empty())
    for codec in (layout.key_codec, layout.value_codec):
        assert codec is not None
        codec.register_sink_schema()      # on the driver, as the runtime does at query start
    full = {"K": 5, "DEC": Decimal("-1.25"), "TS": 1_700_000_000_123, "DT": 19_000, "TM": 61_000, "BY": b"\x00",
            "A": ["a", "b"], "M": {"x": 0.5}, "ST": {"X": 3}, "S": "s"}
    nulls = {"K": 6, **{n: None for n, _ in values}}
    records, got_rows, got_records = _round_trip(sql_spark, layout, [full, nulls], [None, None])
    defaults: dict[str, Any] = {**nulls, "BY": b"", "A": [], "M": {}, "S": ""}   # proto3 scalars/repeated: no null
    assert got_rows == [full, defaults]
    assert [layout.decode_value(v) for _k, v in records] == [{k: v for k, v in r.items() if k != "K"}
                                                             for r in (full, defaults)]
    assert got_records == records


@pytest.mark.parametrize(("fmt", "ty", "value"), [
    (Format.JSON, t.array_of(t.DOUBLE), [1.5, None]),
    (Format.AVRO, t.map_of(t.STRING, t.decimal(6, 2)), {"x": None}),
    (Format.AVRO, t.struct_of(("X", t.INTEGER), ("Y", t.BOOLEAN)), {"X": 3, "Y": None}),
    (Format.JSON_SR, t.BYTES, b"\x00\xff"),
    (Format.PROTOBUF_NOSR, t.BIGINT, -5),
    (Format.PROTOBUF_NOSR, t.struct_of(("S", t.STRING),), {"S": "s"}),
])
def test_unwrapped_single_values(sql_spark, fmt, ty, value):
    """WRAP_SINGLE_VALUE=false: the Spark form reads the Python form's bare values and writes the
    same bytes back; a null column is a null record in both."""
    from oncestream.sql.engine.serde import layout_of
    from oncestream.sql.language.catalog import SourceInfo
    from oncestream.sql.language.sql_ast import SourceKind
    from tests.support.memory_schema_registry import MemoryRegistry

    source = SourceInfo(name="S", kind=SourceKind.STREAM, topic="t", key_format=Format.KAFKA, value_format=fmt,
                        columns=(Column("K", t.INTEGER, Namespace.KEY), Column("V", ty)), statement="",
                        value_unwrapped=True)
    layout = layout_of(source, MemoryRegistry.empty())
    assert layout.value_unwrapped
    if layout.value_codec is not None:
        layout.value_codec.register_sink_schema()      # on the driver, as the runtime does at query start
    rows: list[dict[str, Any]] = [{"K": 1, "V": value}, {"K": 2, "V": None}]
    records, got_rows, got_records = _round_trip(sql_spark, layout, rows, [None, None])
    assert records[1][1] is None
    assert got_rows == rows
    assert got_records == records
