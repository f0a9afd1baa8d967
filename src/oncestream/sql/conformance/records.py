"""QTT records as the bytes on the topics, and the comparison of what a query wrote with what
ksqlDB expects (sans-io).

Written independently of the engine's serde (``oncestream.sql.engine.serde``), so the runner does
not judge the engine with its own code: inputs are encoded and outputs decoded from the formats'
definitions, as ksqlDB and Kafka Streams write them:

- KAFKA: INT 4 bytes big-endian, BIGINT 8, DOUBLE IEEE-754 8, STRING UTF-8, BYTES raw;
- JSON: the record's JSON as given (an input is written as the test wrote it, odd field case and
  types included); an output is parsed with numbers as ``Decimal``;
- DELIMITED: the text as given;
- windowed keys (Kafka Streams' windowed serdes): the key's bytes, then the window start (TIME
  windows), or the window end then start (SESSION windows), each 8 bytes big-endian.

Values compare as ksqlDB's ``ExpectedRecordComparator`` does: objects field by field (as many
fields; an expected field found by its name, else by its upper-cased name), numbers by value
(``1.10`` equals ``1.1`` and ``1``), everything else exactly.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Protocol

from oncestream.sql.conformance.qtt_format import QttRecord, Window
from oncestream.sql.language.catalog import Format, SourceInfo
from oncestream.sql.language.sql_ast import WindowKind
from oncestream.sql.language.types import BaseType, SqlType


class RecordCodecError(ValueError):
    """A record that the declared format cannot carry, or bytes that are not in that format."""


def json_text(value: Any) -> str:
    """``value`` as JSON text, ``Decimal`` numbers written exactly."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, (int, float)):
        return json.dumps(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(str(k), ensure_ascii=False)}:{json_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(json_text(v) for v in value) + "]"
    raise RecordCodecError(f"not a JSON value: {value!r}")


def _single(value: Any, what: str) -> Any:
    """A KAFKA-format record's one column: the value itself, or an object's only field."""
    if isinstance(value, dict):
        if len(value) != 1:
            raise RecordCodecError(f"the KAFKA format carries one {what} column, the record has {sorted(value)}")
        return next(iter(value.values()))
    return value


def kafka_bytes(value: Any, sql_type: SqlType | None) -> bytes:
    """One value in the KAFKA format for ``sql_type`` (STRING when unknown)."""
    base = sql_type.base if sql_type is not None else BaseType.STRING
    try:
        if base is BaseType.INTEGER:
            return struct.pack(">i", int(value))
        if base is BaseType.BIGINT:
            return struct.pack(">q", int(value))
        if base is BaseType.DOUBLE:
            return struct.pack(">d", float(value))
        if base is BaseType.BYTES:
            return base64.b64decode(str(value))
    except (struct.error, ValueError, TypeError) as e:
        raise RecordCodecError(f"{value!r} is not a KAFKA {base.value}: {e}") from None
    return value.encode() if isinstance(value, str) else json_text(value).encode()


def kafka_value(data: bytes, sql_type: SqlType | None) -> Any:
    """One KAFKA-format value of ``sql_type`` read from ``data``."""
    base = sql_type.base if sql_type is not None else BaseType.STRING
    fixed = {BaseType.INTEGER: ">i", BaseType.BIGINT: ">q", BaseType.DOUBLE: ">d"}
    if base in fixed:
        fmt = fixed[base]
        if len(data) != struct.calcsize(fmt):
            raise RecordCodecError(f"{len(data)} bytes are not a KAFKA {base.value}: {data!r}")
        return struct.unpack(fmt, data)[0]
    if base is BaseType.BYTES:
        return base64.b64encode(data).decode()
    return data.decode("utf-8", errors="replace")


def _key_type(source: SourceInfo) -> SqlType | None:
    keys = source.key_columns
    return keys[0].type if len(keys) == 1 else None


def _value_type(source: SourceInfo) -> SqlType | None:
    values = source.value_columns
    return values[0].type if len(values) == 1 else None


def _encode(value: Any, fmt: Format, sql_type: SqlType | None, what: str) -> bytes:
    if fmt is Format.KAFKA:
        return kafka_bytes(_single(value, what), sql_type)
    if fmt is Format.DELIMITED and isinstance(value, str):
        return value.encode()
    return json_text(value).encode()


class SpecCodec(Protocol):
    """One side of a topic in a registry format (``registry_records.RegistrySide``): a QTT spec
    value to record bytes and back."""

    def encode(self, spec: Any) -> bytes: ...

    def decode(self, data: bytes) -> Any: ...


def encode_key(record: QttRecord, source: SourceInfo | None, codec: SpecCodec | None = None) -> bytes | None:
    """The key bytes of an input record for the source that reads its topic (None: no source,
    then JSON text); ``codec`` writes a registry format's key."""
    if not record.has_key or record.key is None:
        return None
    if source is None:
        return record.key.encode() if isinstance(record.key, str) else json_text(record.key).encode()
    if source.key_format is Format.NONE:
        return None
    if codec is not None:
        data = codec.encode(record.key)
    else:
        data = _encode(record.key, source.key_format, _key_type(source), "key")
    if record.window is not None:
        data += window_suffix(record.window)
    return data


def encode_value(record: QttRecord, source: SourceInfo | None, codec: SpecCodec | None = None) -> bytes | None:
    """The value bytes of an input record (None: a tombstone); ``codec`` writes a registry format's."""
    if record.value is None:
        return None
    if source is None:
        return record.value.encode() if isinstance(record.value, str) else json_text(record.value).encode()
    if codec is not None:
        return codec.encode(record.value)
    return _encode(record.value, source.value_format, _value_type(source), "value")


def window_suffix(window: Window) -> bytes:
    """Kafka Streams' windowed-key suffix: start (TIME) or end then start (SESSION)."""
    if window.type == "SESSION":
        return struct.pack(">qq", window.end_ms, window.start_ms)
    return struct.pack(">q", window.start_ms)


def decode_key(data: bytes | None, sink: SourceInfo | None,
               codec: SpecCodec | None = None) -> tuple[Any, Window | None]:
    """An output record's key (as ksqlDB's tests write it) and its window, if the sink is
    windowed; ``codec`` reads a registry format's key."""
    if data is None:
        return None, None
    if sink is None:
        return _json_or_text(data), None
    window = None
    if sink.window is not None:
        if sink.window.kind is WindowKind.SESSION:
            if len(data) < 16:
                raise RecordCodecError(f"a session-windowed key needs 16 window bytes: {data!r}")
            end_ms, start_ms = struct.unpack(">qq", data[-16:])
            data, window = data[:-16], Window(start_ms, end_ms, "SESSION")
        else:
            if len(data) < 8:
                raise RecordCodecError(f"a time-windowed key needs 8 window bytes: {data!r}")
            (start_ms,) = struct.unpack(">q", data[-8:])
            data, window = data[:-8], Window(start_ms, start_ms + sink.window.size_ms, "TIME")
    if codec is not None:
        return codec.decode(data), window
    return _decode(data, sink.key_format, _key_type(sink)), window


def decode_value(data: bytes | None, sink: SourceInfo | None, codec: SpecCodec | None = None) -> Any:
    """An output record's value (None for a tombstone); ``codec`` reads a registry format's."""
    if data is None:
        return None
    if sink is None:
        return _json_or_text(data)
    if codec is not None:
        return codec.decode(data)
    return _decode(data, sink.value_format, _value_type(sink))


def _decode(data: bytes, fmt: Format, sql_type: SqlType | None) -> Any:
    if fmt is Format.KAFKA:
        return kafka_value(data, sql_type)
    if fmt is Format.DELIMITED:
        return data.decode("utf-8", errors="replace")
    if fmt is Format.NONE:
        return None
    return _json_or_text(data)


def _json_or_text(data: bytes) -> Any:
    text = data.decode("utf-8", errors="replace")
    try:
        return json.loads(text, parse_float=Decimal)
    except json.JSONDecodeError:
        return text


def _number(value: Any) -> Decimal | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
        return None
    try:
        return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    except InvalidOperation:
        return None


def values_match(expected: Any, actual: Any) -> bool:
    """ksqlDB's comparison of an expected JSON value with an actual one (module docstring)."""
    if isinstance(expected, dict):
        # ksqlDB's compareStruct: as many fields; each expected field by its name, or upper-cased
        # when the actual object has none (or null) under that name
        if not isinstance(actual, dict) or len(expected) != len(actual):
            return False
        return all(values_match(v, actual.get(k) if actual.get(k) is not None else actual.get(str(k).upper()))
                   for k, v in expected.items())
    if isinstance(expected, list):
        return (isinstance(actual, list) and len(expected) == len(actual)
                and all(values_match(e, a) for e, a in zip(expected, actual, strict=True)))
    e_num, a_num = _number(expected), _number(actual)
    if e_num is not None and a_num is not None:
        return e_num == a_num
    if isinstance(expected, str) and isinstance(actual, Decimal):
        # A DECIMAL given as text: compared as Java's BigDecimal.equals, scale included
        try:
            return Decimal(expected).as_tuple() == actual.as_tuple()
        except InvalidOperation:
            return False
    return type(expected) is type(actual) and expected == actual


@dataclass(frozen=True)
class ActualRecord:
    """One record read back from an output topic, decoded."""

    key: Any
    value: Any
    timestamp_ms: int
    window: Window | None = None
    partition: int = 0


def in_expected_interleaving(expected: Sequence[QttRecord], actual: Sequence[ActualRecord]) -> list[ActualRecord]:
    """``actual`` (read partition after partition) interleaved to follow ``expected``'s order where
    the partitions allow it. ksqlDB's test driver records one sequence per topic; a topic of
    several partitions has no order across them (a consumer sees each partition's order only),
    so each expected record takes the first unused record of some partition whose key matches
    (its value too, when several do), each partition's records keeping their order; the rest
    follow in partition order."""
    queues: dict[int, list[ActualRecord]] = {}
    for record in actual:
        queues.setdefault(record.partition, []).append(record)
    out: list[ActualRecord] = []
    for exp in expected:
        heads = [q[0] for q in queues.values() if q]
        keyed = [h for h in heads if values_match(exp.key if exp.has_key else None, h.key)]
        chosen = next((h for h in keyed if values_match(exp.value, h.value)), keyed[0] if keyed else None)
        if chosen is None:
            break
        queues[chosen.partition].pop(0)
        out.append(chosen)
    return out + [r for p in sorted(queues) for r in queues[p]]


def describe(key: Any, value: Any, timestamp_ms: int | None, window: Window | None) -> str:
    """A record in one line, for the difference a FAIL reports."""
    text = f"<{json_text(key)}, {json_text(value)}>"
    if timestamp_ms is not None:
        text += f" ts={timestamp_ms}"
    if window is not None:
        text += f" window=[{window.start_ms},{window.end_ms}) {window.type}"
    return text


def compare_topic(topic: str, expected: Sequence[QttRecord], actual: Sequence[ActualRecord], *,
                  check_zero_timestamps: bool = True) -> str | None:
    """None when ``actual`` is ``expected`` in order (key, value, window when given, timestamp
    when given); else the first difference in words. ``check_zero_timestamps`` False: an
    expected timestamp 0 is not checked (ksqlDB's rule for cases with INSERT VALUES). Records of
    a topic of several partitions are compared in the interleaving that follows ``expected``
    (``in_expected_interleaving``)."""
    if len({a.partition for a in actual}) > 1:
        actual = in_expected_interleaving(expected, actual)
    for i, (exp, act) in enumerate(zip(expected, actual, strict=False)):
        problems = []
        if not values_match(exp.key if exp.has_key else None, act.key):
            problems.append("key")
        if not values_match(exp.value, act.value):
            problems.append("value")
        if exp.window is not None and exp.window != act.window:
            problems.append("window")
        if exp.timestamp_ms is not None and exp.timestamp_ms != act.timestamp_ms and (
                check_zero_timestamps or exp.timestamp_ms != 0):
            problems.append("timestamp")
        if problems:
            return (f"topic {topic}, record {i}: {'/'.join(problems)} differ: expected "
                    f"{describe(exp.key, exp.value, exp.timestamp_ms, exp.window)} but was "
                    f"{describe(act.key, act.value, act.timestamp_ms, act.window)}")
    if len(expected) != len(actual):
        extra = ""
        if len(actual) > len(expected):
            nxt = actual[len(expected)]
            extra = f"; first extra: {describe(nxt.key, nxt.value, nxt.timestamp_ms, nxt.window)}"
        else:
            nxt_e = expected[len(actual)]
            extra = f"; first missing: {describe(nxt_e.key, nxt_e.value, nxt_e.timestamp_ms, nxt_e.window)}"
        return f"topic {topic}: expected {len(expected)} records but was {len(actual)}{extra}"
    return None
