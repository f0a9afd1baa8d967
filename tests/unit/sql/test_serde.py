"""ksqlDB's record formats in Python (``oncestream.sql.engine.serde``): the exact bytes ksqlDB and Kafka
Streams write (KAFKA widths, JSON objects, DELIMITED quoting, windowed keys, null keys,
tombstones) and the way they are read back."""

from __future__ import annotations

import datetime as dt
import struct
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oncestream.sql.engine.serde import RecordLayout, SerdeError, Window, split_csv_line
from oncestream.sql.language import types as t
from oncestream.sql.language.catalog import Column, Format, Namespace
from oncestream.sql.language.sql_ast import WindowKind


def _layout(key_format: Format, value_format: Format, keys=(), values=(), window=None, size_ms=None,
            delimiter=",") -> RecordLayout:
    return RecordLayout(key_format, value_format,
                        tuple(Column(n, ty, Namespace.KEY) for n, ty in keys),
                        tuple(Column(n, ty) for n, ty in values), delimiter, window, size_ms)


def test_kafka_format_widths_are_ksqldbs_big_endian():
    """INT 4 bytes, BIGINT and DOUBLE 8, big-endian; STRING UTF-8."""
    for ty, value, raw in ((t.INTEGER, -2, b"\xff\xff\xff\xfe"), (t.BIGINT, 1, b"\x00" * 7 + b"\x01"),
                           (t.DOUBLE, 1.5, struct.pack(">d", 1.5)), (t.STRING, "é", "é".encode())):
        layout = _layout(Format.KAFKA, Format.KAFKA, keys=[("K", ty)], values=[("V", ty)])
        assert layout.encode_key({"K": value}) == raw
        assert layout.encode_value({"V": value}) == raw
        assert layout.decode_key(raw) == ({"K": value}, None)
        assert layout.decode_value(raw) == {"V": value}


def test_kafka_format_refuses_wrong_sizes_and_several_columns():
    layout = _layout(Format.KAFKA, Format.KAFKA, keys=[("K", t.INTEGER)], values=[("V", t.BIGINT)])
    with pytest.raises(SerdeError, match="not 4"):
        layout.decode_key(b"\x00\x01")
    two = _layout(Format.NONE, Format.KAFKA, values=[("A", t.INTEGER), ("B", t.INTEGER)])
    with pytest.raises(SerdeError, match="single field"):
        two.encode_value({"A": 1, "B": 2})


def test_null_key_is_null_not_empty_bytes_and_none_key_format_writes_null():
    layout = _layout(Format.KAFKA, Format.JSON, keys=[("K", t.STRING)], values=[("V", t.INTEGER)])
    assert layout.encode_key({"K": None}) is None
    none = _layout(Format.NONE, Format.JSON, values=[("V", t.INTEGER)])
    assert none.encode_key({"V": 1}) is None
    assert none.decode_key(b"ignored") == ({}, None)


def test_json_value_is_an_object_with_nulls_and_is_read_case_insensitively():
    layout = _layout(Format.KAFKA, Format.JSON, values=[("ID", t.BIGINT), ("Name", t.STRING), ("TS", t.TIMESTAMP),
                                                        ("S", t.struct_of(("F", t.INTEGER))),
                                                        ("A", t.array_of(t.BYTES)), ("M", t.map_of(t.STRING, t.DOUBLE))])
    row = {"ID": 1, "Name": "é\"", "TS": dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=dt.UTC), "S": {"F": None},
           "A": [b"\x00"], "M": {"x": 1.0}}
    raw = layout.encode_value(row)
    assert raw == '{"ID":1,"Name":"é\\"","TS":1000,"S":{"F":null},"A":["AA=="],"M":{"x":1.0}}'.encode()
    assert layout.decode_value(raw) == {"ID": 1, "Name": "é\"", "TS": 1000, "S": {"F": None}, "A": [b"\x00"],
                                        "M": {"x": 1.0}}
    assert layout.decode_value(b'{"id":2,"NAME":"x","s":{"f":3}}') == {
        "ID": 2, "Name": "x", "TS": None, "S": {"F": 3}, "A": None, "M": None}


def test_single_json_key_is_the_bare_value_and_several_make_an_object():
    one = _layout(Format.JSON, Format.JSON, keys=[("K", t.STRING)], values=[("V", t.INTEGER)])
    assert one.encode_key({"K": "a"}) == b'"a"'
    assert one.decode_key(b'"a"') == ({"K": "a"}, None)
    two = _layout(Format.JSON, Format.JSON, keys=[("A", t.INTEGER), ("B", t.STRING)], values=[("V", t.INTEGER)])
    assert two.encode_key({"A": 1, "B": "x"}) == b'{"A":1,"B":"x"}'


def test_decimal_is_read_at_its_scale():
    layout = _layout(Format.NONE, Format.JSON, values=[("D", t.decimal(4, 2))])
    assert layout.decode_value(b'{"D":1.5}') == {"D": Decimal("1.50")}


def test_delimited_quotes_as_commons_csv_1_4_and_writes_a_later_empty_string_as_null():
    """ksqlDB's commons-csv 1.4 (QuoteMode.MINIMAL): a later empty field is not quoted, so an
    empty string there is written as a null is; a first empty string is ``""``."""
    layout = _layout(Format.DELIMITED, Format.DELIMITED, keys=[("K", t.STRING)],
                     values=[("A", t.STRING), ("B", t.INTEGER), ("C", t.STRING), ("D", t.BOOLEAN)])
    raw = layout.encode_value({"A": 'x,"y"', "B": None, "C": "", "D": True})
    assert raw == b'"x,""y""",,,true'
    assert layout.encode_value({"A": "", "B": -1, "C": "-1", "D": None}) == b'"",-1,-1,'
    # ...and reads both as null, as Spark's CSV reader does (the two forms must agree).
    assert layout.decode_value(raw) == {"A": 'x,"y"', "B": None, "C": None, "D": True}
    pipe = _layout(Format.NONE, Format.DELIMITED, values=[("A", t.STRING), ("B", t.BIGINT)], delimiter="|")
    assert pipe.encode_value({"A": "a,b", "B": 3}) == b"a,b|3"
    assert pipe.encode_value({"A": "a|b", "B": 3}) == b'"a|b"|3'
    with pytest.raises(SerdeError, match="expected 2"):
        pipe.decode_value(b"1|2|3")


def test_delimited_first_field_quoted_unless_it_starts_with_a_letter_or_digit():
    """QTT date.json / datesub.json / bytes-and-strings.json: ``-10`` and ``!`` first are quoted."""
    layout = _layout(Format.NONE, Format.DELIMITED, values=[("A", t.INTEGER)])
    assert layout.encode_value({"A": -10}) == b'"-10"'
    assert layout.encode_value({"A": 10}) == b"10"
    text = _layout(Format.NONE, Format.DELIMITED, values=[("A", t.STRING), ("B", t.BYTES), ("C", t.STRING)])
    assert text.encode_value({"A": "!", "B": b"!", "C": "!"}) == b'"!",IQ==,"!"'
    assert text.encode_value({"A": " \t x \t", "B": None, "C": "\t x"}) == b'" \t x \t",,"\t x"'


def test_delimited_decimal_is_plain_at_its_scale():
    """ksqlDB writes BigDecimal.toPlainString: never an exponent (delimited.json 'read written decimals')."""
    layout = _layout(Format.NONE, Format.DELIMITED, values=[("D", t.decimal(33, 16)), ("E", t.decimal(6, 4))])
    assert layout.encode_value({"D": Decimal(0), "E": Decimal("12.0")}) == b"0.0000000000000000,12.0000"
    assert layout.encode_value({"D": Decimal("-12345.12"), "E": Decimal("1E-4")}) == b'"-12345.1200000000000000",0.0001'
    assert layout.encode_value({"D": Decimal("1E+3"), "E": None}) == b"1000.0000000000000000,"


def test_a_delimited_key_is_split_by_the_key_delimiter():
    """KEY_DELIMITER is the key's (delimited.json 'multi-column key with different kv delimiters')."""
    layout = RecordLayout(Format.DELIMITED, Format.DELIMITED, (Column("K1", t.STRING, Namespace.KEY),
                          Column("K2", t.STRING, Namespace.KEY)), (Column("V", t.INTEGER), Column("W", t.INTEGER)),
                          "-", key_delimiter=";")
    assert layout.decode_key(b"foo,bar;baz") == ({"K1": "foo,bar", "K2": "baz"}, None)
    assert layout.encode_key({"K1": "a;b", "K2": "c"}) == b'"a;b";c'
    assert layout.decode_value(b"0-1") == {"V": 0, "W": 1}


def test_delimited_one_column_key_that_is_null_is_a_null_key():
    """delimited.json '<type> - key': a null single key column is a null record key, not empty bytes."""
    layout = _layout(Format.DELIMITED, Format.DELIMITED, keys=[("K", t.STRING)], values=[("V", t.INTEGER)])
    assert layout.encode_key({"K": None}) is None
    assert layout.encode_key({"K": ""}) == b'""'
    assert layout.encode_key({"K": "Hey"}) == b"Hey"
    assert layout.decode_key(None) == ({"K": None}, None)
    both = _layout(Format.DELIMITED, Format.DELIMITED, keys=[("K1", t.STRING), ("K2", t.INTEGER)],
                   values=[("V", t.INTEGER)])
    assert both.encode_key({"K1": None, "K2": None}) == b","


def test_time_windowed_key_is_key_then_8_byte_start():
    """TimeWindowedSerializer: key bytes then the window start, big-endian."""
    layout = _layout(Format.KAFKA, Format.JSON, keys=[("K", t.STRING)], values=[("C", t.BIGINT)],
                     window=WindowKind.TUMBLING, size_ms=10_000)
    raw = layout.encode_key({"K": "a"}, Window(20_000, 30_000))
    assert raw == b"a" + struct.pack(">q", 20_000)
    assert layout.decode_key(raw) == ({"K": "a"}, Window(20_000, 30_000))


def test_session_windowed_key_is_key_then_end_then_start():
    """Kafka Streams' SessionKeySchema: key bytes, end, start (8 bytes each, big-endian)."""
    layout = _layout(Format.KAFKA, Format.JSON, keys=[("K", t.INTEGER)], values=[("C", t.BIGINT)],
                     window=WindowKind.SESSION)
    raw = layout.encode_key({"K": 7}, Window(1_000, 5_000))
    assert raw == struct.pack(">iqq", 7, 5_000, 1_000)
    assert layout.decode_key(raw) == ({"K": 7}, Window(1_000, 5_000))
    with pytest.raises(SerdeError, match="fewer than 16"):
        layout.decode_key(b"\x00" * 10)


def test_tombstone_is_a_null_value():
    layout = _layout(Format.KAFKA, Format.JSON, keys=[("K", t.INTEGER)], values=[("V", t.STRING)])
    assert layout.encode_value(None) is None
    assert layout.decode_value(None) is None


def test_split_csv_line_edges():
    assert split_csv_line("", ",") == [None]
    assert split_csv_line("a,", ",") == ["a", None]
    assert split_csv_line('"",x', ",") == ["", "x"]
    with pytest.raises(SerdeError):
        split_csv_line('"open', ",")


@given(st.lists(st.one_of(st.none(), st.text(alphabet=st.characters(exclude_categories=["Cs"]))), min_size=1,
                max_size=5))
def test_delimited_round_trips_any_strings(values):
    layout = _layout(Format.NONE, Format.DELIMITED, values=[(f"C{i}", t.STRING) for i in range(len(values))])
    row = {f"C{i}": v for i, v in enumerate(values)}
    assert layout.decode_value(layout.encode_value(row)) == {k: (v or None) for k, v in row.items()}


@given(st.integers(-(2 ** 63), 2 ** 63 - 1), st.one_of(st.none(), st.text()), st.floats(allow_nan=False))
def test_json_round_trips(big, text, number):
    layout = _layout(Format.KAFKA, Format.JSON, keys=[("K", t.BIGINT)], values=[("S", t.STRING), ("D", t.DOUBLE)])
    key, _ = layout.decode_key(layout.encode_key({"K": big}))
    assert key == {"K": big}
    assert layout.decode_value(layout.encode_value({"S": text, "D": number})) == {"S": text, "D": number}


def test_any_failure_on_bad_bytes_is_a_serde_error_and_text_reads_as_java_does():
    """Whatever a decoder meets in a bad record is a SerdeError (the processing log's entry),
    never another exception that would fail the query reading it; undecodable UTF-8 in KAFKA
    STRING and DELIMITED text is U+FFFD, as Java's String(bytes, UTF_8) (and Spark's cast) reads it."""
    delimited = _layout(Format.KAFKA, Format.DELIMITED, keys=[("K", t.STRING)], values=[("A", t.STRING), ("B", t.INTEGER)])
    assert delimited.decode_key(b"k\xff") == ({"K": "k\ufffd"}, None)
    assert delimited.decode_value(b"\xff,1") == {"A": "\ufffd", "B": 1}
    for bad in (b"a", b"a,b,c", b"a,x", b'"a,1'):
        with pytest.raises(SerdeError):
            delimited.decode_value(bad)
    json_layout = _layout(Format.JSON, Format.JSON, keys=[("K", t.INTEGER)],
                          values=[("A", t.array_of(t.INTEGER)), ("M", t.map_of(t.STRING, t.INTEGER))])
    for bad in (b"not json", b"[1]", b'{"A": 1}', b'{"M": [1]}', b'{"A": ["x"]}', b"\xff"):
        with pytest.raises(SerdeError):
            json_layout.decode_value(bad)
    for bad_key in (b"{", b'"x"', b"1,2"):
        with pytest.raises(SerdeError):
            json_layout.decode_key(bad_key)
    windowed = _layout(Format.KAFKA, Format.JSON, keys=[("K", t.INTEGER)], values=[("V", t.INTEGER)],
                       window=WindowKind.TUMBLING, size_ms=10)
    with pytest.raises(SerdeError):
        windowed.decode_key(b"\x00\x00\x00\x01\x00")
