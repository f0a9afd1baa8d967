"""ksqlDB's REST API as a plain ASGI app over a ``SqlEngine`` (``oncestream.sql.engine.interface``).

Routes (ksqlDB's ServerVerticle): ``POST /ksql``, ``POST /query`` (the old chunked API),
``POST /query-stream`` (JSON, ``application/vnd.ksql.v1+json`` or the delimited default),
``POST /close-query``, ``POST /inserts-stream``, ``GET /info``, ``GET /healthcheck``,
``GET /status/<commandId>``, ``GET /clusterStatus``, and ``GET /`` (a redirect to /info).

The app only moves bytes: it reads bounded bodies, calls the engine, and writes what the engine
returns in ksqlDB's framing (``oncestream.sql.server.rest.framing``). Errors raised by the engine as
``KsqlError`` are answered as ``to_entity()`` with ``http_status``; anything else is a 500 with
ksqlDB's generic message, the traceback going to the log only.

PRINT comes back from the engine as a ``TopicPrintStream`` and is written as ksqlDB writes it: text
lines (``framing.PrintLineWriter``) on /query, the same without format lines on /query-stream
(delimited only).

Streaming queries end at LIMIT, when the engine's stream ends (``/close-query``), when the client
goes away (ASGI ``http.disconnect``: the query is closed at once, freeing its Spark query), or when
the server shuts down (``close_streams``).

Plain ASGI, no web framework: ten fixed routes, bodies that must be read under a byte limit, and
two endpoints that stream while reading (/inserts-stream) or while watching for the client to
leave (/query, /query-stream) are all written against raw ``receive``/``send`` anyway; a router
and request object are not worth a dependency (starlette is not even installed). The HTTP
plumbing is ``oncestream.sql.server.rest.http``; hypercorn does HTTP/1.1, h2c and chunking.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from oncestream.sql.engine.interface import QueryStream, SqlEngine
from oncestream.sql.engine.topic_print_stream import TopicPrintStream
from oncestream.sql.errors import BAD_REQUEST, NOT_FOUND, SERVER_ERROR, KsqlError
from oncestream.sql.language.parser import substitute_variables
from oncestream.sql.language.parser.variables import VARIABLE_SUBSTITUTION_ENABLE, SessionVariables
from oncestream.sql.server.rest import framing
from oncestream.sql.server.rest.framing import DELIMITED, JSON, KSQL_V1_JSON, RowWriter
from oncestream.sql.server.rest.http import (
    BodyTooLargeError,
    ClientDisconnected,
    NotAcceptableError,
    Receive,
    RequestReader,
    Response,
    Scope,
    Send,
    body_lines,
    drain_body,
    header,
    negotiate,
    parse_json_object,
    read_body,
)

log = logging.getLogger(__name__)

DEFAULT_MAX_BODY_BYTES = 1024 * 1024
# ksqlDB's ``query.stream.disconnect.check`` default: /query writes a lone newline this often
# while no row comes.
DEFAULT_HEARTBEAT_MS = 1000
# Rows buffered between the engine's iterator and the socket; the engine waits when it is full.
ROW_QUEUE_SIZE = 64
# After answering a request early (body too large, a failed inserts-stream row), the rest of its
# body is read and discarded up to this many bytes before the response ends (see drain_body).
DRAIN_LIMIT_BYTES = 64 * 1024 * 1024

_JSON_TYPES = (KSQL_V1_JSON, JSON)
_INTERNAL_ERROR = ("The server encountered an internal error when processing the query. "
                   "Please consult the server logs for more information.")

Handler = Callable[[Scope, RequestReader, Response, str], Awaitable[None]]


class MethodNotAllowedError(KsqlError):
    """A known path with the wrong method (or /query's old API over HTTP/2). HTTP 405."""

    error_code = 40500


def create_app(engine: SqlEngine, *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
               heartbeat_ms: int = DEFAULT_HEARTBEAT_MS) -> KsqlRestApp:
    """The ASGI app serving ksqlDB's REST API for ``engine``. Request bodies (and each line of
    /inserts-stream) over ``max_body_bytes`` are refused with 413."""
    return KsqlRestApp(engine, max_body_bytes=max_body_bytes, heartbeat_ms=heartbeat_ms)


class KsqlRestApp:
    """The ASGI application (see the module docstring)."""

    def __init__(self, engine: SqlEngine, *, max_body_bytes: int, heartbeat_ms: int) -> None:
        if max_body_bytes <= 0:
            raise ValueError(f"max_body_bytes must be positive, got {max_body_bytes}")
        self.engine = engine
        self.max_body_bytes = max_body_bytes
        self.heartbeat_ms = heartbeat_ms
        # id() keys: a QueryStream need not be hashable.
        self._streams: dict[int, QueryStream] = {}
        self._closing = False
        # (method, path) -> (handler, media types produced, default media type without Accept)
        self._routes: dict[tuple[str, str], tuple[Handler, tuple[str, ...], str]] = {
            ("POST", "/ksql"): (self._ksql, _JSON_TYPES, JSON),
            ("POST", "/query"): (self._query, (KSQL_V1_JSON, JSON, DELIMITED), JSON),
            ("POST", "/query-stream"): (self._query_stream, (DELIMITED, JSON, KSQL_V1_JSON), DELIMITED),
            ("POST", "/close-query"): (self._close_query, _JSON_TYPES, JSON),
            ("POST", "/inserts-stream"): (self._inserts_stream, (DELIMITED, JSON), DELIMITED),
            ("GET", "/info"): (self._info, _JSON_TYPES, JSON),
            ("GET", "/healthcheck"): (self._healthcheck, _JSON_TYPES, JSON),
            ("GET", "/clusterStatus"): (self._cluster_status, _JSON_TYPES, JSON),
            ("GET", "/status"): (self._status, _JSON_TYPES, JSON),
        }

    @property
    def active_streams(self) -> int:
        """Streaming queries currently being written to a client."""
        return len(self._streams)

    async def close_streams(self) -> None:
        """Server shutdown: end every streaming response (their queries are closed) and refuse new
        ones, so that hypercorn's graceful shutdown does not wait on endless push queries."""
        self._closing = True
        for stream in list(self._streams.values()):
            with contextlib.suppress(Exception):
                await stream.close()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        response = Response(send)
        request = RequestReader(receive)
        path: str = scope["path"]
        method: str = scope["method"]
        if method == "GET" and path == "/":
            response.headers.append((b"location", b"/info"))
            await drain_body(request, DRAIN_LIMIT_BYTES)
            await response.whole(307, None, b"")
            return
        key = (method, "/status" if path.startswith("/status/") else path)
        route = self._routes.get(key)
        content_type = JSON
        try:
            if route is None:
                if any(p == key[1] for _, p in self._routes):
                    raise MethodNotAllowedError(f"Method {method} not allowed on {path}")
                await drain_body(request, DRAIN_LIMIT_BYTES)
                await response.whole(404, "text/plain", b"Not Found")
                return
            handler, produces, default = route
            content_type = negotiate(header(scope, b"accept"), produces, default=default)
            await handler(scope, request, response, content_type)
        except ClientDisconnected:
            return
        except KsqlError as exc:
            await self._answer_error(response, request, exc, content_type)
        except Exception:
            log.exception("%s %s failed", method, path)
            await self._answer_error(response, request, KsqlError(_INTERNAL_ERROR, error_code=SERVER_ERROR),
                                     content_type)

    async def _answer_error(self, response: Response, request: RequestReader, error: KsqlError,
                            content_type: str) -> None:
        """Write ``error`` as ksqlDB's entity. The entity goes out first, then whatever is left of
        the request body is read and discarded before the response ends (see drain_body)."""
        if response.started:
            # Headers are out: all we can do is end the body (the handlers write in-stream errors).
            with contextlib.suppress(Exception):
                await response.end()
            return
        if isinstance(error, NotAcceptableError) or content_type not in _JSON_TYPES:
            content_type = JSON
        if request.body_ended:
            await response.error(error, content_type)
            return
        await response.start(error.http_status, content_type)
        await response.write(framing.dumps(error.to_entity()))
        await drain_body(request, DRAIN_LIMIT_BYTES)
        await response.end()

    # --- statements -----------------------------------------------------------------------------

    async def _ksql(self, scope: Scope, receive: RequestReader, response: Response, content_type: str) -> None:
        request = parse_json_object(await read_body(scope, receive, self.max_body_bytes))
        ksql = _required_text(request, "ksql")
        entities = await self.engine.execute(
            ksql, _object_field(request, "streamsProperties"),
            _object_field(request, "sessionVariables") or None,
            _optional_int(request, "commandSequenceNumber"))
        await response.json(200, content_type, entities)

    # --- queries --------------------------------------------------------------------------------

    async def _query(self, scope: Scope, receive: RequestReader, response: Response, content_type: str) -> None:
        """The old API: ``{"ksql", "streamsProperties"}``; chunked over HTTP/1.1 (ksqlDB refuses its
        old format over HTTP/2 and so do we; the delimited form works on both)."""
        request = parse_json_object(await read_body(scope, receive, self.max_body_bytes))
        if content_type != DELIMITED and scope.get("http_version") == "2":
            raise MethodNotAllowedError("The /query endpoint is not available using HTTP2")
        properties = _object_field(request, "streamsProperties")
        sql = _with_variables(_required_text(request, "ksql"), properties, _object_field(request, "sessionVariables"))
        stream = await self._start(sql, properties)
        writer: RowWriter
        if isinstance(stream, TopicPrintStream):
            writer = framing.PrintLineWriter(media_type=content_type, heartbeat=b"\n")
        elif content_type == DELIMITED:
            writer = framing.DelimitedWriter()
        else:
            writer = framing.LegacyQueryWriter(is_pull=stream.is_pull, media_type=content_type)
        await self._stream(stream, writer, receive, response)

    async def _query_stream(self, scope: Scope, receive: RequestReader, response: Response, content_type: str) -> None:
        """``{"sql", "properties", "sessionVariables"}`` over HTTP/1.1 or HTTP/2."""
        request = parse_json_object(await read_body(scope, receive, self.max_body_bytes))
        properties = _object_field(request, "properties")
        sql = _with_variables(_required_text(request, "sql"), properties, _object_field(request, "sessionVariables"))
        stream = await self._start(sql, properties, query_stream=True)
        writer: RowWriter
        if isinstance(stream, TopicPrintStream):
            if content_type != DELIMITED:
                # ksqlDB's QueryStreamHandler: PRINT is written in the delimited format only.
                await stream.close()
                raise NotAcceptableError(f"PRINT is only written as {DELIMITED}")
            writer = framing.PrintLineWriter(media_type=DELIMITED)
        elif content_type == KSQL_V1_JSON:
            writer = framing.StreamedRowWriter(is_pull=stream.is_pull)
        elif content_type == JSON:
            writer = framing.JsonArrayWriter()
        else:
            writer = framing.DelimitedWriter()
        await self._stream(stream, writer, receive, response)

    async def _start(self, sql: str, properties: dict[str, Any], *, query_stream: bool = False) -> QueryStream:
        if self._closing:
            raise KsqlError("The server is shutting down", error_code=50302)
        return await self.engine.start_query(sql, properties, query_stream=query_stream)

    async def _stream(self, stream: QueryStream, writer: RowWriter, receive: RequestReader, response: Response) -> None:
        """Write ``stream`` until it ends or the client goes away; the query is closed either way."""
        self._streams[id(stream)] = stream
        rows: asyncio.Queue[tuple[str, Any]] = asyncio.Queue(maxsize=ROW_QUEUE_SIZE)
        pump = asyncio.ensure_future(_pump_rows(stream, rows))
        disconnected = asyncio.ensure_future(_wait_disconnect(receive))
        next_row: asyncio.Future[tuple[str, Any]] | None = None
        heartbeat_s = self.heartbeat_ms / 1000 if writer.heartbeat is not None else None
        lag = getattr(stream, "offset_lag", None)
        if lag is not None:
            # A pull query's answer says how far behind its changelog the store commit it read
            # was (ksqlDB reports lags only in /clusterStatus, which we also do).
            response.headers.append((PULL_OFFSET_LAG_HEADER, offset_lag_header(lag)))
        try:
            await response.start(200, writer.media_type)
            await response.write(writer.start(stream.query_id, list(stream.columns)))
            while True:
                if next_row is None:
                    next_row = asyncio.ensure_future(rows.get())
                waiting: set[asyncio.Future[Any]] = {next_row, disconnected}
                done, _ = await asyncio.wait(waiting, timeout=heartbeat_s,
                                             return_when=asyncio.FIRST_COMPLETED)
                if disconnected in done:
                    log.debug("client went away: closing query %s", stream.query_id)
                    return
                if next_row not in done:
                    await response.write(writer.heartbeat or b"")
                    continue
                kind, value = next_row.result()
                next_row = None
                if kind == "row":
                    await response.write(writer.row(value))
                elif kind == "error":
                    await response.end(writer.error(value))
                    return
                else:
                    await response.end(writer.end(limit_reached=stream.limit_reached, completed=True))
                    return
        finally:
            self._streams.pop(id(stream), None)
            for task in (pump, disconnected, next_row):
                if task is not None:
                    task.cancel()
            # Through the engine first, so it forgets the query (its close-query registry), then
            # the stream itself in case the engine did not know it; closing twice is harmless.
            with contextlib.suppress(Exception):
                await self.engine.close_query(stream.query_id)
            with contextlib.suppress(Exception):
                await stream.close()

    async def _close_query(self, scope: Scope, receive: RequestReader, response: Response, content_type: str) -> None:
        request = parse_json_object(await read_body(scope, receive, self.max_body_bytes))
        query_id = _required_text(request, "queryId")
        if not await self.engine.close_query(query_id):
            raise KsqlError(f"No query with id {query_id}", error_code=BAD_REQUEST)
        await response.whole(200, content_type, b"")

    # --- inserts --------------------------------------------------------------------------------

    async def _inserts_stream(self, scope: Scope, receive: RequestReader, response: Response, content_type: str) -> None:
        """First line ``{"target": "S"}``, then one JSON object per line; one ack per row, in order.
        The first failing row gets an error line and ends the response (as ksqlDB does)."""
        lines = body_lines(receive, self.max_body_bytes)
        try:
            first = await anext(lines)
        except StopAsyncIteration:
            raise KsqlError("Invalid JSON in request: No content", error_code=BAD_REQUEST) from None
        target = _required_text(parse_json_object(first), "target")
        acks = framing.InsertsAckWriter(delimited=content_type != JSON)
        await response.start(200, acks.media_type)
        seq = 0
        try:
            async for line in lines:
                try:
                    row = json.loads(line)
                    if not isinstance(row, dict):
                        raise ValueError("not an object")
                except ValueError:
                    await self._end_inserts(response, receive, acks,
                                            framing.insert_error(seq, BAD_REQUEST, "Invalid JSON in inserts stream"))
                    return
                try:
                    await self.engine.insert_row(target, row)
                except KsqlError as exc:
                    await self._end_inserts(response, receive, acks, framing.insert_error(seq, exc.error_code, exc.message))
                    return
                await response.write(acks.item(framing.insert_ack(seq)))
                seq += 1
        except BodyTooLargeError as exc:  # a line over the limit
            await self._end_inserts(response, receive, acks, framing.insert_error(seq, exc.error_code, exc.message))
            return
        await response.end(acks.end())

    @staticmethod
    async def _end_inserts(response: Response, receive: RequestReader, acks: framing.InsertsAckWriter,
                           error: dict[str, Any]) -> None:
        """The first failed row: its error line, the rest of the request discarded, the end."""
        await response.write(acks.item(error))
        await drain_body(receive, DRAIN_LIMIT_BYTES)
        await response.end(acks.end())

    # --- server state ---------------------------------------------------------------------------

    async def _info(self, scope: Scope, receive: RequestReader, response: Response, content_type: str) -> None:
        await response.json(200, content_type, {"KsqlServerInfo": self.engine.server_info()})

    async def _healthcheck(self, scope: Scope, receive: RequestReader, response: Response, content_type: str) -> None:
        # ksqlDB answers 200 whatever the body says (isHealthy false included: HealthCheckResource
        # always returns ok); a node replaying or shutting down raises NotReadyError (503).
        await response.json(200, content_type, self.engine.health())

    async def _cluster_status(self, scope: Scope, receive: RequestReader, response: Response, content_type: str) -> None:
        await response.json(200, content_type, self.engine.cluster_status())

    async def _status(self, scope: Scope, receive: RequestReader, response: Response, content_type: str) -> None:
        command_id = scope["path"][len("/status/"):]
        status = self.engine.command_status(command_id)
        if status is None:
            raise KsqlError("Command not found", error_code=NOT_FOUND)
        await response.json(200, content_type, status)


async def _pump_rows(stream: QueryStream, rows: asyncio.Queue[tuple[str, Any]]) -> None:
    """Move the engine's rows into the bounded queue; its end or failure as a last item."""
    try:
        async for row in stream.rows():
            await rows.put(("row", row))
        await rows.put(("end", None))
    except KsqlError as exc:
        await rows.put(("error", exc.to_entity()))
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("query %s failed", stream.query_id)
        await rows.put(("error", KsqlError(_INTERNAL_ERROR, error_code=SERVER_ERROR).to_entity()))


async def _wait_disconnect(receive: Receive) -> None:
    """Return when the client goes away (the request body has been read already)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


PULL_OFFSET_LAG_HEADER = b"x-oncestream-offset-lag"


def offset_lag_header(lag: dict[int, int]) -> bytes:
    """``partition=lag`` pairs, e.g. ``0=0, 1=12`` (records between the store commit a pull
    query read and its changelog's end, per partition)."""
    return ", ".join(f"{p}={n}" for p, n in sorted(lag.items())).encode("ascii")


def _required_text(request: dict[str, Any], name: str) -> str:
    value = request.get(name)
    if not isinstance(value, str) or not value.strip():
        raise KsqlError(f'"{name}" field must be populated', error_code=BAD_REQUEST)
    return value


def _object_field(request: dict[str, Any], name: str) -> dict[str, Any]:
    value = request.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise KsqlError(f"Invalid JSON in request: {name} must be an object", error_code=BAD_REQUEST)
    return value


def _with_variables(sql: str, properties: dict[str, Any], variables: dict[str, Any]) -> str:
    """A query's text with the request's ``sessionVariables`` substituted for ``${name}`` (as
    ksqlDB's query endpoints do), unless the request sets ``ksql.variable.substitution.enable``
    to false (the server's own setting is applied to /ksql only)."""
    enabled = properties.get(VARIABLE_SUBSTITUTION_ENABLE, True)
    if enabled is False or (isinstance(enabled, str) and enabled.strip().lower() == "false"):
        return sql
    return substitute_variables(sql, SessionVariables(variables))


def _optional_int(request: dict[str, Any], name: str) -> int | None:
    value = request.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise KsqlError(f"Invalid JSON in request: {name} must be an integer", error_code=BAD_REQUEST)
    return value
