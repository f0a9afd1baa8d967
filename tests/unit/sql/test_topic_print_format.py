"""PRINT's lines (ksqlDB's RecordFormatter and TopicStreamWriter): format guessing that narrows
as records come, windowed keys, rowtime text, INTERVAL and LIMIT, the format lines of /query."""

from __future__ import annotations

import struct

import pytest

from oncestream.sql.engine.record_formatter import (
    NO_DATA_YET,
    NO_TIMESTAMP,
    PrintedRecord,
    RecordFormatter,
    java_double,
    kafka_bytes_text,
    rowtime_text,
)
from oncestream.sql.engine.topic_printer import TopicPrinter
from oncestream.sql.errors import StatementError

TS_MS = 1589821418020   # 2020/05/18 17:03:38.020 Z, as in ksqlDB's docs


def record(key: bytes | None, value: bytes | None, partition: int = 0, ts_ms: int = TS_MS) -> PrintedRecord:
    return PrintedRecord(timestamp_ms=ts_ms, key=key, value=value, partition=partition)


def test_line_for_a_string_key_and_json_value() -> None:
    formatter = RecordFormatter()
    assert formatter.format([record(b"k1", b'{"a":1}', 2)]) == [
        'rowtime: 2020/05/18 17:03:38.020 Z, key: k1, value: {"a":1}, partition: 2']
    assert formatter.keys.possible() == ["KAFKA_STRING"]
    assert formatter.values.possible() == ["JSON", "KAFKA_STRING"]


def test_int_key_shows_as_a_number_and_keeps_kafka_string_possible() -> None:
    formatter = RecordFormatter()
    (line,) = formatter.format([record(struct.pack(">i", 18), b'{"orderid":18}')])
    assert line.startswith("rowtime: 2020/05/18 17:03:38.020 Z, key: 18, value: ")
    assert formatter.keys.possible() == ["KAFKA_INT", "KAFKA_STRING"]


def test_a_string_key_over_8_bytes_reads_as_a_windowed_key_as_in_ksqldb() -> None:
    # ksqlDB's own docs show such keys as [8a9f5f18-f389-480e-9022-4fa0@7162241151841559604/-].
    key = b"8a9f5f18-f389-480e-9022-4fa0" + struct.pack(">q", 7162241151841559604)
    formatter = RecordFormatter()
    (line,) = formatter.format([record(key, b"{}")])
    assert "key: [8a9f5f18-f389-480e-9022-4fa0@7162241151841559604/-]," in line
    assert formatter.keys.possible() == ["HOPPING(KAFKA_STRING)", "TUMBLING(KAFKA_STRING)", "KAFKA_STRING"]


def test_session_key_shows_start_and_end() -> None:
    key = struct.pack(">i", 5) + struct.pack(">q", 2000) + struct.pack(">q", 1000)   # key, end, start
    formatter = RecordFormatter()
    (line,) = formatter.format([record(key, None)])
    assert "key: [5@1000/2000], value: <null>," in line
    assert formatter.keys.possible()[0] == "SESSION(KAFKA_INT)"
    assert formatter.values.possible() == [NO_DATA_YET]


def test_a_batch_that_drops_the_shown_format_is_shown_again_in_the_next_one() -> None:
    formatter = RecordFormatter()
    # "12" is JSON (a number), then "ab" is not: both lines in KAFKA_STRING, the first one again.
    lines = formatter.format([record(b"k", b"12"), record(b"k", b"ab")])
    assert [line.split("value: ")[1] for line in lines] == ["12, partition: 0", "ab, partition: 0"]
    assert formatter.values.possible() == ["KAFKA_STRING"]


def test_formats_only_narrow() -> None:
    formatter = RecordFormatter()
    formatter.format([record(b"k", b"ab")])
    formatter.format([record(b"k", b'{"a":1}')])
    assert formatter.values.possible() == ["KAFKA_STRING"]


def test_bytes_no_format_reads_show_as_kafka_bytes_text() -> None:
    formatter = RecordFormatter()
    (line,) = formatter.format([record(None, b"\xff\\a", ts_ms=NO_TIMESTAMP)])   # 3 bytes: no number either
    assert line == "rowtime: N/A, key: <null>, value: \\xFF\\x5Ca, partition: 0"
    assert formatter.values.possible() == []


def test_kafka_bytes_text_and_rowtime() -> None:
    assert kafka_bytes_text(b"a~ \x1f\x7f") == "a~ \\x1F\\x7F"
    assert rowtime_text(0) == "1970/01/01 00:00:00.000 Z"
    assert rowtime_text(NO_TIMESTAMP) == "N/A"


@pytest.mark.parametrize(("value", "text"), [
    (1.0, "1.0"), (100.0, "100.0"), (0.001, "0.001"), (1e-4, "1.0E-4"), (1e7, "1.0E7"),
    (123456.789, "123456.789"), (-2.5e-10, "-2.5E-10"), (1.5e300, "1.5E300"),
    (float("nan"), "NaN"), (float("-inf"), "-Infinity"), (-0.0, "-0.0"),
])
def test_double_values_print_as_java_does(value: float, text: str) -> None:
    assert java_double(value) == text


def test_double_value_format() -> None:
    formatter = RecordFormatter()
    data = struct.pack(">d", -2.5)     # 0xC0... is not UTF-8, so not KAFKA_STRING
    (line,) = formatter.format([record(None, data)])
    # 8 bytes: KAFKA_BIGINT comes before KAFKA_DOUBLE, so ksqlDB shows the long
    assert f"value: {struct.unpack('>q', data)[0]}," in line
    assert formatter.values.possible() == ["KAFKA_BIGINT", "KAFKA_DOUBLE"]


# -- TopicStreamWriter: format lines, INTERVAL, LIMIT ----------------------------------------------

def test_query_endpoint_states_formats_first_and_again_only_when_they_change() -> None:
    printer = TopicPrinter(interval=1, limit=None, format_lines=True)
    assert printer.take([record(b"k1", b'{"a":1}')]) == [
        "Key format: KAFKA_STRING", "Value format: JSON or KAFKA_STRING",
        'rowtime: 2020/05/18 17:03:38.020 Z, key: k1, value: {"a":1}, partition: 0']
    assert printer.take([record(b"k2", b'{"a":2}')]) == [
        'rowtime: 2020/05/18 17:03:38.020 Z, key: k2, value: {"a":2}, partition: 0']
    assert printer.take([record(b"k3", b"plain")])[0] == "Value format: KAFKA_STRING"


def test_no_format_matches_line_has_ksqldbs_two_spaces() -> None:
    printer = TopicPrinter(interval=1, limit=None, format_lines=True)
    lines = printer.take([record(b"k", b"\xff")])
    assert lines[1] == ("Value format:  does not match any supported format. "
                        "It may be a STRING with encoding other than UTF8, or some other format.")


def test_interval_prints_every_nth_record_across_polls_and_limit_stops() -> None:
    printer = TopicPrinter(interval=2, limit=3, format_lines=False)
    values = [f"v{i}".encode() for i in range(10)]
    out = printer.take([record(b"k", v) for v in values[:3]]) + printer.take([record(b"k", v) for v in values[3:]])
    assert [line.split("value: ")[1].split(",")[0] for line in out] == ["v0", "v2", "v4"]
    assert printer.done
    assert printer.take([record(b"k", b"more")]) == []


def test_limit_zero_is_done_at_once_and_interval_below_one_is_refused() -> None:
    assert TopicPrinter(interval=1, limit=0, format_lines=True).done
    with pytest.raises(StatementError, match="INTERVAL must be greater than one, but was: 0"):
        TopicPrinter(interval=0, limit=None, format_lines=True)


@pytest.mark.parametrize(("value", "is_json"), [
    (b'{"a":1} trailing', True), (b"1 2", True), (b" [1]", True), (b'"s"', True), (b"true,", True),
    (b"8a9f", False), (b"1,", False), (b"true1", False), (b"NaN", False), (b"{", False), (b"ab", False),
])
def test_json_is_jacksons_read_tree_of_the_first_value(value: bytes, is_json: bool) -> None:
    formatter = RecordFormatter()
    formatter.format([record(None, value)])
    assert ("JSON" in formatter.values.possible()) is is_json
