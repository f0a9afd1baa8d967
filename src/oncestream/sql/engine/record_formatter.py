"""PRINT's text for a topic's raw records (sans-io), as ksqlDB's RecordFormatter writes it:
``rowtime: 2020/05/18 17:03:38.020 Z, key: 18, value: {"a":1}, partition: 0``.

ksqlDB does not know a topic's formats when it prints it: it keeps, for keys and for values, the
list of formats that have decoded every key (value) seen so far, drops a format at its first
failure, and shows each record in the first format still possible. The format lines PRINT writes
(``Key format: KAFKA_INT or KAFKA_STRING``) are those lists. Formats are tried in ksqlDB's order
(JSON, KAFKA_INT, KAFKA_BIGINT, KAFKA_DOUBLE, KAFKA_STRING), keys also as Kafka Streams' windowed
keys of each (SESSION(..), HOPPING(..), TUMBLING(..), tried before the plain format), so a string
key of more than 8 bytes shows as ``[abc@7162241151841559604/-]`` exactly as ksqlDB shows it.

Simplified: the Schema Registry formats (AVRO, PROTOBUF, JSON_SR) are never candidates, so a
registry-framed record falls to the formats above (ksqlDB would decode it through the registry).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

NO_TIMESTAMP = -1          # Kafka's ConsumerRecord.NO_TIMESTAMP
NO_DATA_YET = "¯\\_(ツ)_/¯ - no data processed"
UNRECOGNISED_BYTES = "UNRECOGNISED_BYTES"
_REPLACEMENT = "\ufffd"
_LONG = struct.Struct(">q")


class NotThisFormat(Exception):
    """Bytes that a candidate format cannot decode: the format is dropped."""


@dataclass(frozen=True)
class PrintedRecord:
    """One record as PRINT reads it: raw key and value, CreateTime/LogAppendTime in ms
    (``NO_TIMESTAMP`` when the record has none), partition."""

    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    partition: int


def java_double(value: float) -> str:
    """Java's ``Double.toString``: plain between 10^-3 and 10^7, else ``d.dddE±n``."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if str(value).startswith("-") else "0.0"
    magnitude = abs(value)
    sign = "-" if value < 0 else ""
    if 1e-3 <= magnitude < 1e7:
        text = repr(magnitude)
        return sign + (text if "." in text else text + ".0")
    digits_tuple = Decimal(repr(magnitude)).normalize().as_tuple()
    digits = "".join(map(str, digits_tuple.digits))
    exponent = len(digits) - 1 + int(digits_tuple.exponent)
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{exponent}"


def kafka_bytes_text(data: bytes) -> str:
    """Kafka's ``Bytes.toString``: printable ASCII as is (but ``\\``), the rest as ``\\xNN``."""
    return "".join(chr(b) if 0x20 <= b <= 0x7E and b != 0x5C else f"\\x{b:02X}" for b in data)


def _utf8_text(data: bytes) -> str:
    if not data:
        raise NotThisFormat("empty")
    text = data.decode("utf-8", errors="replace")
    if _REPLACEMENT in text:
        raise NotThisFormat("not UTF-8")
    return text


def _json(data: bytes) -> str:
    """The text itself, once a JSON value parses at its start: Jackson's readTree stops after the
    first value, but a number must be followed by whitespace (or the end) and true/false/null by
    a character that cannot continue a word (so ``8a9f`` is not JSON); no NaN/Infinity."""
    text = _utf8_text(data).lstrip(" \t\r\n")

    def refuse(constant: str) -> None:
        raise NotThisFormat(constant)

    try:
        value, end = json.JSONDecoder(parse_constant=refuse).raw_decode(text)
    except ValueError:
        raise NotThisFormat("not JSON") from None
    after = text[end:end + 1]
    if after and isinstance(value, int | float) and not isinstance(value, bool) and after not in " \t\r\n":
        raise NotThisFormat("no space after a root-level number")
    if after and (value is None or isinstance(value, bool)) and (after.isalnum() or after in "_$"):
        raise NotThisFormat("not a JSON literal")
    return _utf8_text(data)


def _fixed(size: int, layout: str, show: Callable[[object], str]) -> Callable[[bytes], str]:
    def decode(data: bytes) -> str:
        if len(data) != size:
            raise NotThisFormat(f"not {size} bytes")
        return show(struct.unpack(layout, data)[0])
    return decode


_FORMATS: tuple[tuple[str, Callable[[bytes], str]], ...] = (
    ("JSON", _json),
    ("KAFKA_INT", _fixed(4, ">i", str)),
    ("KAFKA_BIGINT", _fixed(8, ">q", str)),
    ("KAFKA_DOUBLE", _fixed(8, ">d", lambda v: java_double(float(v)))),  # type: ignore[arg-type]
    ("KAFKA_STRING", _utf8_text),
)


def _session(inner: Callable[[bytes], str]) -> Callable[[bytes], str]:
    """Kafka Streams' session key: key bytes, end ms, start ms (both 8-byte big-endian)."""
    def decode(data: bytes) -> str:
        if len(data) < 16:
            raise NotThisFormat("too short")
        end_ms = _LONG.unpack_from(data, len(data) - 16)[0]
        start_ms = _LONG.unpack_from(data, len(data) - 8)[0]
        if start_ms < 0 or end_ms < start_ms:
            raise NotThisFormat("not a session window")
        return f"[{inner(data[:-16])}@{start_ms}/{end_ms}]"
    return decode


def _time_window(inner: Callable[[bytes], str]) -> Callable[[bytes], str]:
    """Kafka Streams' hopping/tumbling key: key bytes then start ms (the end is not stored)."""
    def decode(data: bytes) -> str:
        if len(data) < 8:
            raise NotThisFormat("too short")
        start_ms = _LONG.unpack_from(data, len(data) - 8)[0]
        if start_ms < 0:
            raise NotThisFormat("not a time window")
        return f"[{inner(data[:-8])}@{start_ms}/-]"
    return decode


def _candidates(keys: bool) -> list[tuple[str, Callable[[bytes], str]]]:
    out: list[tuple[str, Callable[[bytes], str]]] = []
    for name, decode in _FORMATS:
        if keys:
            out.append((f"SESSION({name})", _session(decode)))
            out.append((f"HOPPING({name})", _time_window(decode)))
            out.append((f"TUMBLING({name})", _time_window(decode)))
        out.append((name, decode))
    out.append((UNRECOGNISED_BYTES, kafka_bytes_text))
    return out


class FormatGuess:
    """The formats still possible for one side (keys or values) of a topic (ksqlDB's
    RecordFormatter.Deserializers)."""

    def __init__(self, *, keys: bool) -> None:
        self._candidates = _candidates(keys)
        self._seen_data = False

    def possible(self) -> list[str]:
        """The formats that decoded every non-null datum so far (``NO_DATA_YET`` before one)."""
        if not self._seen_data:
            return [NO_DATA_YET]
        return [name for name, _ in self._candidates if name != UNRECOGNISED_BYTES]

    def format(self, data: bytes | None) -> str:
        """``data`` in the first format that decodes it; every format that cannot is dropped."""
        if data is None:
            return "<null>"
        self._seen_data = True
        first: str | None = None
        kept = []
        for name, decode in self._candidates:
            try:
                text = decode(data)
            except NotThisFormat:
                continue
            kept.append((name, decode))
            if first is None:
                first = text
        self._candidates = kept
        return "<Failed to deserialize>" if first is None else first


def rowtime_text(timestamp_ms: int) -> str:
    """``2020/05/18 17:03:38.020 Z`` (UTC), ``N/A`` for a record without a timestamp."""
    if timestamp_ms == NO_TIMESTAMP:
        return "N/A"
    when = datetime.fromtimestamp(timestamp_ms / 1000, tz=UTC)
    return when.strftime("%Y/%m/%d %H:%M:%S.") + f"{timestamp_ms % 1000:03d} Z"


class RecordFormatter:
    """A topic's records as PRINT's lines, guessing key and value formats as it goes."""

    def __init__(self) -> None:
        self.keys = FormatGuess(keys=True)
        self.values = FormatGuess(keys=False)

    def format(self, records: Sequence[PrintedRecord]) -> list[str]:
        """One line per record. When a batch drops the format its first records were shown in,
        the whole batch is shown again in the format now first (as ksqlDB does)."""
        key_format, value_format = self.keys.possible()[0], self.values.possible()[0]
        lines = [self._line(r) for r in records]
        if key_format in self.keys.possible() and value_format in self.values.possible():
            return lines
        return [self._line(r) for r in records]

    def _line(self, record: PrintedRecord) -> str:
        return (f"rowtime: {rowtime_text(record.timestamp_ms)}, key: {self.keys.format(record.key)}, "
                f"value: {self.values.format(record.value)}, partition: {record.partition}")
