"""The queries a node serves itself, outside the command topic: push queries (``SELECT ... EMIT
CHANGES``, run on the runtime), pull queries (answered from this node's materialized tables),
PRINT (the topic read by this node: ``topic_print``) and
inserts (``INSERT INTO ... VALUES``, ``/inserts-stream``: written directly, as ksqlDB does)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from oncestream.sql.engine.insert_values import insert_target, json_row, values_row
from oncestream.sql.engine.interface import QueryRunner, QueryStream
from oncestream.sql.engine.pull.node_hooks import PullQueries
from oncestream.sql.errors import KsqlError, NotFoundError, StatementError
from oncestream.sql.language import sql_ast
from oncestream.sql.language.analyzer import analyze_query
from oncestream.sql.language.parser import parse
from oncestream.sql.server.node_context import NodeContext
from oncestream.sql.server.placement import host_port
from oncestream.sql.server.topic_print import start_print

MAX_OFFSET_LAG_CONFIG = "ksql.query.pull.max.allowed.offset.lag"


class QueryService:
    """Push and pull queries and inserts of one node (see the module docstring)."""

    def __init__(self, context: NodeContext, runtime: QueryRunner, pull: PullQueries,
                 url: Callable[[], str | None] = lambda: None,
                 on_pull_done: Callable[[float], None] = lambda seconds: None) -> None:
        """``url()``: this node's advertised URL once it listens (named in pull-query routing errors);
        ``on_pull_done(seconds)`` is told each pull query's latency (the node's metrics)."""
        self._on_pull_done = on_pull_done
        self._context = context
        self._url = url
        self._runtime = runtime
        self._pull = pull
        self._push: dict[str, QueryStream] = {}
        self._push_lock = threading.Lock()

    async def start_query(self, sql: str, properties: Mapping[str, Any], *, query_stream: bool = False) -> QueryStream:
        """Run a pull query, start a push query or a PRINT (``SqlEngine.start_query``)."""
        self._context.check_ready()
        statements = parse(sql, self._context.snapshot().custom_types())   # CAST(x AS <CREATE TYPE name>)
        if len(statements) == 1 and isinstance(statements[0], sql_ast.PrintTopic):
            return await self._print(statements[0], query_stream=query_stream)
        if len(statements) != 1 or not isinstance(statements[0], sql_ast.QueryStatement):
            raise StatementError("The /query endpoint only runs a single SELECT statement",
                                 statement_text=statements[0].text if statements else sql)
        statement = statements[0]
        try:
            analyzed = analyze_query(statement.query, self._context.sources())
        except KsqlError as exc:
            if exc.statement_text is None:
                exc.statement_text = statement.text
            raise
        if PullQueries.is_pull(statement):
            # Answered from this node's materialized copy; not a push query, so not registered.
            began_s = time.perf_counter()
            try:
                return await self._pull.start_query(analyzed, max_offset_lag=self._max_offset_lag(properties),
                                                    host=self._host())
            finally:
                self._on_pull_done(time.perf_counter() - began_s)
        stream = await asyncio.to_thread(self._runtime.start_push, analyzed, dict(properties), query=statement.query)
        with self._push_lock:
            # The REST layer closes streams itself when they end: forget the finished ones.
            for finished in [q for q, s in self._push.items() if getattr(s, "done", False)]:
                del self._push[finished]
            self._push[stream.query_id] = stream
        return stream

    async def _print(self, statement: sql_ast.PrintTopic, *, query_stream: bool) -> QueryStream:
        """PRINT: not registered with the push queries (nothing runs on Spark; the REST layer
        closes it when the client goes)."""
        try:
            return await asyncio.to_thread(start_print, statement, self._context.admin, self._context.settings.client_conf,
                                           query_stream=query_stream)
        except KsqlError as exc:
            if exc.statement_text is None:
                exc.statement_text = statement.text
            raise

    def _max_offset_lag(self, properties: Mapping[str, Any]) -> int | None:
        """``ksql.query.pull.max.allowed.offset.lag``: the request's, else the node's ``--config``;
        None (any lag, ksqlDB's default Long.MAX_VALUE) when neither sets it."""
        value = properties.get(MAX_OFFSET_LAG_CONFIG, self._context.settings.properties.get(MAX_OFFSET_LAG_CONFIG))
        if value is None:
            return None
        try:
            return int(value)
        except (TypeError, ValueError):
            raise StatementError(f"Invalid value {value} for configuration {MAX_OFFSET_LAG_CONFIG}: "
                                 "Not a number of type LONG") from None

    def _host(self) -> str:
        """This node as ksqlDB's KsqlHostInfo prints it (``host:port``) in routing errors."""
        url = self._url()
        return host_port(url) if url else "this node"

    async def close_query(self, query_id: str) -> bool:
        """Stop a push query started here; False if unknown."""
        with self._push_lock:
            stream = self._push.pop(query_id, None)
        if stream is None:
            return False
        await stream.close()
        return True

    def close_all(self) -> None:
        """Stop every push query (node shutdown)."""
        with self._push_lock:
            pushes = list(self._push.values())
            self._push.clear()
        for push in pushes:
            close = getattr(push, "close_sync", None)
            if close is not None:
                close()

    async def insert_row(self, target: str, row: Mapping[str, Any]) -> None:
        """One ``/inserts-stream`` row."""
        self._context.check_ready()
        sink = self._context.source(target)
        if sink is None:
            raise NotFoundError(f"Cannot insert values into an unknown stream/table: {target}")
        await asyncio.to_thread(self._runtime.insert_values, sink, json_row(sink, row))

    def insert_values(self, statement: sql_ast.InsertValues) -> None:
        """``INSERT INTO ... VALUES`` (blocking: called from a worker thread)."""
        sink = insert_target(statement, self._context.source(statement.target), self._context.sources().values())
        self._runtime.insert_values(sink, values_row(statement, sink))
