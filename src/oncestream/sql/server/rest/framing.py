"""The bytes ksqlDB writes on its streaming endpoints, as pure functions and small writer objects.

Sans-io: nothing here touches a socket. The ASGI handlers (``oncestream.sql.server.rest.app``) ask a writer
for the bytes of the header, of each row and of the end, and send them as response chunks; the
unit tests check the framing byte for byte against what ksqlDB's writers produce (read from
ksqlDB's rest-app: ``QueryStreamWriter``, ``JsonStreamedRowResponseWriter``,
``JsonQueryStreamResponseWriter``, ``DelimitedQueryStreamResponseWriter`` and the inserts-stream
writers).

JSON is written compactly (no spaces), as Jackson writes it.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # annotations only: the schema registry and the console use this module without the SQL engine
    from oncestream.sql.engine.interface import ColumnHeader

# Media types (ksqlDB's KsqlMediaType and QueryStreamHandler constants).
KSQL_V1_JSON = "application/vnd.ksql.v1+json"
JSON = "application/json"
DELIMITED = "application/vnd.ksqlapi.delimited.v1"

# The final messages ksqlDB writes on /query (StreamedRow.finalMessage).
LIMIT_REACHED = "Limit Reached"
QUERY_COMPLETED = "Query Completed"


def _json_default(value: Any) -> Any:
    """Values the engine may hand over that JSON has no type for, written as ksqlDB writes them:
    DECIMAL as a number, BYTES as base64, DATE/TIME/TIMESTAMP as ISO-8601 text."""
    if isinstance(value, decimal.Decimal):
        exponent = value.as_tuple().exponent  # an int, or "n"/"N"/"F" for NaN and infinity
        return int(value) if isinstance(exponent, int) and exponent >= 0 else float(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def dumps(value: Any) -> bytes:
    """One JSON value, compact, UTF-8 (Jackson's default output)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=_json_default).encode("utf-8")


def schema_string(columns: list[ColumnHeader]) -> str:
    """A /query header's ``schema`` as ksqlDB's LogicalSchema prints a push projection:
    ```ID` INTEGER, `NAME` STRING``."""
    return ", ".join(f"`{c.name}` {c.type}" for c in columns)


def query_stream_metadata(query_id: str, columns: list[ColumnHeader]) -> dict[str, Any]:
    """The first value of a /query-stream response (ksqlDB's QueryResponseMetadata)."""
    return {"queryId": query_id, "columnNames": [c.name for c in columns],
            "columnTypes": [c.type for c in columns]}


def streamed_header(query_id: str, columns: list[ColumnHeader]) -> dict[str, Any]:
    """StreamedRow.header as /query writes it."""
    return {"header": {"queryId": query_id, "schema": schema_string(columns)}}


class RowWriter(Protocol):
    """Bytes of one streaming query response: ``start()`` once, ``row()`` per row, ``error()`` for a
    failure after the header, ``end()`` once (``limit_reached`` says why the stream ended).
    ``heartbeat`` is what to write while no row comes (None: write nothing)."""

    media_type: str
    heartbeat: bytes | None

    def start(self, query_id: str, columns: list[ColumnHeader]) -> bytes: ...

    def row(self, values: list[Any]) -> bytes: ...

    def error(self, entity: dict[str, Any]) -> bytes: ...

    def end(self, *, limit_reached: bool, completed: bool) -> bytes: ...


@dataclass
class _StreamedRowArray:
    """The header and rows shared by the two StreamedRow writers (``/query`` and ``/query-stream``
    as ``application/vnd.ksql.v1+json``): ``[`` + header, each row as ``{"row":{"columns":...}}``;
    a push query ends each with ``,\\n``, a pull query puts ``,\\n`` before each row."""

    is_pull: bool = False

    def start(self, query_id: str, columns: list[ColumnHeader]) -> bytes:
        head = b"[" + dumps(streamed_header(query_id, columns))
        return head if self.is_pull else head + b",\n"

    def row(self, values: list[Any]) -> bytes:
        body = dumps({"row": {"columns": values}})
        return b",\n" + body if self.is_pull else body + b",\n"


@dataclass
class LegacyQueryWriter(_StreamedRowArray):
    """``POST /query`` push queries (ksqlDB's QueryStreamWriter): ``[`` then the header and every row
    each followed by ``,\\n``; a lone ``\\n`` while idle (ksqlDB probes for a closed connection
    that way); at the end ``{"finalMessage":"Limit Reached"}`` (or ``"Query Completed"``) and ``]\\n``.

    Pull queries (``is_pull``, PullQueryStreamWriter) have no final message: ``[header,\\nrow,\\nrow]``.
    Because the separator before a pull row depends on whether another row follows, pull rows are
    written as ``,\\n`` + row (same bytes on the wire once the stream is joined)."""

    media_type: str = JSON
    heartbeat: bytes | None = b"\n"

    def __post_init__(self) -> None:
        if self.is_pull:
            self.heartbeat = None

    def error(self, entity: dict[str, Any]) -> bytes:
        # QueryStreamWriter.outputException: a newline, the error row, ",\n"; the stream stays open
        # (no "]"), which is how ksqlDB's own clients see a failed push query.
        body = dumps({"errorMessage": entity})
        return b",\n" + body + b"]\n" if self.is_pull else b"\n" + body + b",\n"

    def end(self, *, limit_reached: bool, completed: bool) -> bytes:
        if self.is_pull:
            return b"]"
        if limit_reached:
            return dumps({"finalMessage": LIMIT_REACHED}) + b"]\n"
        if completed:
            return dumps({"finalMessage": QUERY_COMPLETED}) + b"]\n"
        return b"]\n"


@dataclass
class StreamedRowWriter(_StreamedRowArray):
    """``/query-stream`` with ``Accept: application/vnd.ksql.v1+json`` (ksqlDB's
    JsonStreamedRowResponseWriter, unbuffered push form): ``[`` + header + ``,\\n``, each row +
    ``,\\n``, then the final message and ``]``. For a pull query (buffered form) the rows are joined
    with ``,\\n`` and no final message is written."""

    media_type: str = KSQL_V1_JSON
    heartbeat: bytes | None = None

    def error(self, entity: dict[str, Any]) -> bytes:
        body = dumps({"errorMessage": entity})
        return b",\n" + body if self.is_pull else body + b",\n"

    def end(self, *, limit_reached: bool, completed: bool) -> bytes:
        if self.is_pull:
            return b"]"
        if limit_reached:
            return dumps({"finalMessage": LIMIT_REACHED}) + b"]"
        if completed:
            return dumps({"finalMessage": QUERY_COMPLETED}) + b"]"
        # Closed (close-query or shutdown): ksqlDB's writer would leave a trailing ",\n" before
        # "]"; we end with a final message so the array stays valid JSON.
        return dumps({"finalMessage": QUERY_COMPLETED}) + b"]"


@dataclass
class JsonArrayWriter:
    """``/query-stream`` with ``Accept: application/json`` (JsonQueryStreamResponseWriter):
    ``[`` + metadata, then ``,`` + row array per row, then ``]``; no newlines, no final message."""

    media_type: str = JSON
    heartbeat: bytes | None = None

    def start(self, query_id: str, columns: list[ColumnHeader]) -> bytes:
        return b"[" + dumps(query_stream_metadata(query_id, columns))

    def row(self, values: list[Any]) -> bytes:
        return b"," + dumps(values)

    def error(self, entity: dict[str, Any]) -> bytes:
        return b"," + dumps(entity)

    def end(self, *, limit_reached: bool, completed: bool) -> bytes:
        return b"]"


@dataclass
class DelimitedWriter:
    """``/query-stream`` with ``Accept: application/vnd.ksqlapi.delimited.v1`` (the default,
    DelimitedQueryStreamResponseWriter): one JSON value per line, metadata first; nothing at the
    end."""

    media_type: str = DELIMITED
    heartbeat: bytes | None = None

    def start(self, query_id: str, columns: list[ColumnHeader]) -> bytes:
        return dumps(query_stream_metadata(query_id, columns)) + b"\n"

    def row(self, values: list[Any]) -> bytes:
        return dumps(values) + b"\n"

    def error(self, entity: dict[str, Any]) -> bytes:
        return dumps(entity) + b"\n"

    def end(self, *, limit_reached: bool, completed: bool) -> bytes:
        return b""


@dataclass
class PrintLineWriter:
    """PRINT's output on /query (TopicStreamWriter) and /query-stream (PrintSubscriber): each row
    is one text line (``[line]``), no header or trailer. On /query a lone newline goes out while
    no record comes (ksqlDB writes one at each empty poll) and a failure is its message on a line
    of its own; /query-stream writes neither."""

    media_type: str
    heartbeat: bytes | None = None

    def start(self, query_id: str, columns: list[ColumnHeader]) -> bytes:
        return b""

    def row(self, values: list[Any]) -> bytes:
        return str(values[0]).encode("utf-8") + b"\n"

    def error(self, entity: dict[str, Any]) -> bytes:
        return str(entity.get("message", "")).encode("utf-8") + b"\n"

    def end(self, *, limit_reached: bool, completed: bool) -> bytes:
        return b""


# --- /inserts-stream --------------------------------------------------------------------------------


def insert_ack(seq: int) -> dict[str, Any]:
    """ksqlDB's InsertAck."""
    return {"status": "ok", "seq": seq}


def insert_error(seq: int, error_code: int, message: str) -> dict[str, Any]:
    """ksqlDB's InsertError (a KsqlErrorMessage plus ``status`` and ``seq``)."""
    return {"@type": "generic_error", "error_code": error_code, "message": message, "status": "error", "seq": seq}


@dataclass
class InsertsAckWriter:
    """The acks of /inserts-stream: delimited (one JSON object per line; the default) or, with
    ``Accept: application/json``, one JSON array (``[`` + first, ``,`` + next..., ``]``; ``[]`` when
    nothing was written)."""

    delimited: bool = True
    _written: bool = False

    @property
    def media_type(self) -> str:
        return DELIMITED if self.delimited else JSON

    def item(self, value: dict[str, Any]) -> bytes:
        if self.delimited:
            return dumps(value) + b"\n"
        prefix = b"," if self._written else b"["
        self._written = True
        return prefix + dumps(value)

    def end(self) -> bytes:
        if self.delimited:
            return b""
        return b"]" if self._written else b"[]"
