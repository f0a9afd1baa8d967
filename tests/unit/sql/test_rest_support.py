"""An in-memory SQL engine and a real hypercorn server around the REST app, for the REST-layer and
shell tests (no test of its own lives here).

``MemoryEngine`` implements ``oncestream.sql.engine.interface.SqlEngine`` with streams held in memory: it is
the REST layer's peer in these tests, not the thing under test, so its SQL is deliberately tiny
(``SELECT * FROM <stream> [EMIT CHANGES] [LIMIT n]``; /ksql statements are acknowledged with a
``currentStatus`` entity, ``SHOW STREAMS`` lists the streams, a ``SELECT`` is refused with
ksqlDB's 40002, ``FAIL ...`` raises a statement error). The real node (``oncestream.sql.server.node``)
replaces it in the e2e test.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from oncestream.sql.engine.interface import ColumnHeader
from oncestream.sql.errors import QUERY_ENDPOINT, KsqlError, NotFoundError, StatementError
from oncestream.sql.server.rest.app import KsqlRestApp, create_app
from oncestream.sql.server.rest.listener import TlsSettings
from oncestream.sql.server.rest.serve import serve

QUERY_ENDPOINT_MESSAGE = ("The following statement types should be issued to the websocket endpoint '/query':\n"
                          "\t* PRINT\n\t* SELECT")


@dataclass
class MemoryQuery:
    """A running query over one in-memory stream."""

    query_id: str
    columns: list[ColumnHeader]
    is_pull: bool
    limit: int | None
    queue: asyncio.Queue[list[Any] | None]
    limit_reached: bool = False
    closed: threading.Event = field(default_factory=threading.Event)

    async def rows(self) -> AsyncIterator[list[Any]]:
        sent = 0
        while not self.closed.is_set():
            if self.limit is not None and sent >= self.limit:
                self.limit_reached = True
                return
            row = await self.queue.get()
            if row is None:
                return
            sent += 1
            yield row

    async def close(self) -> None:
        if not self.closed.is_set():
            self.closed.set()
            self.queue.put_nowait(None)


@dataclass
class MemoryStream:
    columns: list[ColumnHeader]
    rows: list[list[Any]] = field(default_factory=list)


class MemoryEngine:
    """See the module docstring. Methods run on the server's event loop; the test thread reads
    ``queries`` and ``executed`` (filled before the answer is sent) and calls ``publish``."""

    def __init__(self) -> None:
        self.streams: dict[str, MemoryStream] = {
            "S": MemoryStream([ColumnHeader("ID", "INTEGER"), ColumnHeader("NAME", "STRING")]),
        }
        self.queries: dict[str, MemoryQuery] = {}
        self.executed: list[tuple[str, dict[str, Any], Any, Any]] = []
        self.query_properties: list[dict[str, Any]] = []
        self.close_requests: list[str] = []
        self.statuses: dict[str, dict[str, Any]] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self._next_id = 0

    @property
    def service_id(self) -> str:
        return "test_service_"

    def server_info(self) -> dict[str, Any]:
        return {"version": "0.29.0", "kafkaClusterId": "memory", "ksqlServiceId": self.service_id,
                "serverStatus": "RUNNING"}

    def health(self) -> dict[str, Any]:
        return {"isHealthy": True, "details": {"metastore": {"isHealthy": True}, "kafka": {"isHealthy": True},
                                               "commandRunner": {"isHealthy": True}}, "serverState": "READY"}

    def cluster_status(self) -> dict[str, Any]:
        return {"clusterStatus": {"localhost:0": {"hostAlive": True, "lastStatusUpdateMs": 0}}}

    def command_status(self, command_id: str) -> dict[str, Any] | None:
        return self.statuses.get(command_id)

    async def execute(self, ksql: str, streams_properties: Mapping[str, Any],
                      session_variables: Mapping[str, Any] | None = None,
                      command_sequence_number: int | None = None) -> list[dict[str, Any]]:
        self.executed.append((ksql, dict(streams_properties), session_variables, command_sequence_number))
        entities: list[dict[str, Any]] = []
        for text in (t.strip() for t in ksql.split(";")):
            if not text:
                continue
            statement = text + ";"
            words = text.split()
            verb = words[0].upper()
            if verb == "SELECT":
                raise KsqlError(QUERY_ENDPOINT_MESSAGE, error_code=QUERY_ENDPOINT, statement_text=statement,
                                entities=entities)
            if verb == "FAIL":
                raise StatementError(f"Cannot do {' '.join(words[1:])}", statement_text=statement, entities=entities)
            if verb == "SHOW" and words[1:2] and words[1].upper() == "STREAMS":
                entities.append({"@type": "streams", "statementText": statement, "streams": [
                    {"type": "STREAM", "name": name, "topic": name.lower(), "keyFormat": "KAFKA",
                     "valueFormat": "JSON", "isWindowed": False} for name in sorted(self.streams)],
                    "warnings": []})
                continue
            command_id = f"stream/`{words[-1].upper()}`/create"
            status = {"status": "SUCCESS", "message": f"Executed {verb}", "queryId": None}
            self.statuses[command_id] = status
            entities.append({"@type": "currentStatus", "statementText": statement, "commandId": command_id,
                             "commandStatus": status, "commandSequenceNumber": len(self.executed), "warnings": []})
        return entities

    async def start_query(self, sql: str, properties: Mapping[str, Any], *, query_stream: bool = False) -> MemoryQuery:
        self.query_properties.append(dict(properties))
        words = sql.replace(";", " ").split()
        upper = [w.upper() for w in words]
        if not upper or upper[0] != "SELECT" or "FROM" not in upper:
            raise StatementError("Only SELECT statements are supported here", statement_text=sql)
        name = upper[upper.index("FROM") + 1]
        stream = self.streams.get(name)
        if stream is None:
            raise StatementError(f"{name} does not exist.", statement_text=sql)
        limit = int(upper[upper.index("LIMIT") + 1]) if "LIMIT" in upper else None
        is_pull = "EMIT" not in upper
        self._next_id += 1
        query_id = f"transient_{name}_{self._next_id}"
        queue: asyncio.Queue[list[Any] | None] = asyncio.Queue()
        reset = properties.get("auto.offset.reset", properties.get("ksql.streams.auto.offset.reset", "latest"))
        if is_pull or reset == "earliest":
            for row in stream.rows:
                queue.put_nowait(list(row))
        if is_pull:
            queue.put_nowait(None)
        query = MemoryQuery(query_id, list(stream.columns), is_pull, limit, queue)
        self.queries[query_id] = query
        return query

    async def close_query(self, query_id: str) -> bool:
        self.close_requests.append(query_id)
        query = self.queries.get(query_id)
        if query is None or query.closed.is_set():
            return False
        await query.close()
        return True

    async def insert_row(self, target: str, row: Mapping[str, Any]) -> None:
        stream = self.streams.get(target.upper())
        if stream is None:
            raise NotFoundError(f"Cannot insert values into an unknown stream: {target}")
        unknown = set(row) - {c.name for c in stream.columns}
        if unknown:
            raise StatementError(f"Column name {sorted(unknown)[0]} does not exist.", statement_text="")
        self._append(target.upper(), [row.get(c.name) for c in stream.columns])

    def _append(self, name: str, values: list[Any]) -> None:
        self.streams[name].rows.append(values)
        for query in self.queries.values():
            if not query.is_pull and not query.closed.is_set():
                query.queue.put_nowait(list(values))

    def publish(self, name: str, values: list[Any]) -> None:
        """Append a row from another thread (pushed to the running queries)."""
        assert self.loop is not None
        done = threading.Event()

        def append() -> None:
            self._append(name, values)
            done.set()

        self.loop.call_soon_threadsafe(append)
        done.wait(10)


@dataclass
class RunningServer:
    engine: MemoryEngine
    app: KsqlRestApp
    port: int
    scheme: str = "http"

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"


@contextmanager
def running_server(engine: Any = None, *, max_body_bytes: int = 64 * 1024, heartbeat_ms: int = 1000,
                   wrap: Callable[[KsqlRestApp], Any] | None = None,
                   tls: TlsSettings | None = None) -> Iterator[RunningServer]:
    """The real hypercorn server on 127.0.0.1, port 0, in a thread with its own event loop; the app
    wrapped by ``wrap`` (a middleware), over HTTPS with ``tls``."""
    engine = engine if engine is not None else MemoryEngine()
    rest_app = create_app(engine, max_body_bytes=max_body_bytes, heartbeat_ms=heartbeat_ms)
    app = wrap(rest_app) if wrap is not None else rest_app
    loop = asyncio.new_event_loop()
    if isinstance(engine, MemoryEngine):
        engine.loop = loop
    port_ready = threading.Event()
    ports: list[int] = []
    shutdown = asyncio.Event()
    failure: list[BaseException] = []

    def ready(port: int) -> None:
        ports.append(port)
        port_ready.set()

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(serve(app, "127.0.0.1", 0, shutdown, ready, tls=tls))
        except BaseException as exc:  # noqa: BLE001 - reported to the test thread
            failure.append(exc)
            port_ready.set()
        finally:
            loop.close()

    thread = threading.Thread(target=run, name="sql-rest-server", daemon=True)
    thread.start()
    port_ready.wait(30)
    if failure or not ports:
        raise RuntimeError(f"server did not start: {failure}")
    try:
        yield RunningServer(engine, rest_app, ports[0], "https" if tls is not None else "http")
    finally:
        loop.call_soon_threadsafe(shutdown.set)
        thread.join(30)
        if thread.is_alive():
            raise RuntimeError("server did not stop")


def publish_when_running(server: RunningServer, rows: list[list[object]],
                         queries_before: int | None = None) -> threading.Thread:
    """Publish ``rows`` to stream ``S`` once a query beyond the first ``queries_before`` has started
    (default: those running now), so that a ``latest`` push query sees them."""
    before = len(server.engine.queries) if queries_before is None else queries_before

    def run() -> None:
        wait_until(lambda: len(server.engine.queries) > before)
        for row in rows:
            server.engine.publish("S", row)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def wait_until(predicate: Any, timeout_s: float = 20.0) -> bool:
    """Poll ``predicate`` until true (a liveness wait, not a timing assertion)."""
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return bool(predicate())
