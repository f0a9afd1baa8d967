"""The engine's interfaces: what a SQL-server node offers the REST layer (``SqlEngine``, which
``oncestream.sql.server.node.Node`` implements, and the ``QueryStream`` it hands back), and what a
node needs of the runtime that runs its queries (``QueryRunner``, which
``oncestream.sql.engine.runtime.QueryRuntime`` implements on Spark).

The REST layer only moves bytes: it parses HTTP, calls these methods, and writes what they return
as ksqlDB writes it. Every method that may wait (command-topic round trips, Spark) is a coroutine;
implementations run blocking work in threads so the event loop keeps serving other requests.
Errors are raised as ``oncestream.sql.errors.KsqlError`` (the REST layer writes ``to_entity()``
with ``http_status``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from oncestream.sql.language.analyzer import AnalyzedQuery
from oncestream.sql.language.catalog import QueryInfo, SourceInfo
from oncestream.sql.language.sql_ast import Query


@dataclass(frozen=True)
class ColumnHeader:
    """One column of a query's result: name and ksqlDB type name (``INTEGER``, ``STRING``...)."""

    name: str
    type: str


class QueryStream(Protocol):
    """A running push query (``EMIT CHANGES``) or a pull query's result.

    ``rows()`` yields rows as lists of JSON-ready values in column order; it ends when ``LIMIT``
    is reached (``limit_reached`` then True), when a pull query has no more rows, or after
    ``close()``. A push query's Spark query is stopped on ``close()`` and at the end."""

    query_id: str
    columns: list[ColumnHeader]
    is_pull: bool
    limit_reached: bool

    def rows(self) -> AsyncIterator[list[Any]]: ...

    async def close(self) -> None: ...


class InsertAck(Protocol):
    """Result of one row of ``/inserts-stream``: ``{"status":"ok","seq":n}`` or an error."""


class SqlEngine(Protocol):
    """What one node offers its REST API."""

    @property
    def service_id(self) -> str: ...

    def server_info(self) -> dict[str, Any]:
        """``KsqlServerInfo``: ``{"version", "kafkaClusterId", "ksqlServiceId", "serverStatus"}``
        (``serverStatus`` RUNNING, ERROR (degraded) or TERMINATING)."""
        ...

    def health(self) -> dict[str, Any]:
        """``{"isHealthy": bool, "details": {"metastore": {"isHealthy": ..}, "kafka": {..},
        "commandRunner": {..}}, "serverState": "READY"}`` (answered with 200 even when not
        healthy, as ksqlDB does); raises ``NotReadyError`` (503) while the node replays its command
        topic or shuts down."""
        ...

    def cluster_status(self) -> dict[str, Any]:
        """``{"clusterStatus": {"host:port": {"hostAlive": .., "lastStatusUpdateMs": .., ...}}}``."""
        ...

    def command_status(self, command_id: str) -> dict[str, Any] | None:
        """``{"status": "SUCCESS"|"EXECUTING"|"QUEUED"|"ERROR", "message": .., "queryId": ..}`` or
        None for an unknown command id."""
        ...

    async def execute(self, ksql: str, streams_properties: Mapping[str, Any],
                      session_variables: Mapping[str, Any] | None = None,
                      command_sequence_number: int | None = None) -> list[dict[str, Any]]:
        """Run the statements of a ``/ksql`` request in order and return ksqlDB's entities, one per
        statement (``currentStatus``, ``streams``, ``tables``, ``queries``, ``sourceDescription``,
        ``properties``, ``kafka_topics``, ``queryDescription``...). A failing statement raises
        ``KsqlError`` with the entities of the statements before it in ``entities``."""
        ...

    async def start_query(self, sql: str, properties: Mapping[str, Any], *, query_stream: bool = False) -> QueryStream:
        """Start a push query (``SELECT ... EMIT CHANGES``), run a pull query, or start a PRINT
        (a ``topic_print_stream.TopicPrintStream``, whose rows are text lines). ``properties`` are
        the request's ``streamsProperties`` / ``properties`` (``auto.offset.reset`` honoured);
        ``query_stream``: asked on /query-stream, whose PRINT differs from /query's (no format
        lines, its own missing-topic error), as ksqlDB's two endpoints do."""
        ...

    async def close_query(self, query_id: str) -> bool:
        """Stop a push query started by ``start_query``; False if unknown."""
        ...

    async def insert_row(self, target: str, row: Mapping[str, Any]) -> None:
        """Insert one row (``/inserts-stream``) into stream ``target`` as ``INSERT INTO ...
        VALUES`` would; raises ``KsqlError`` on a bad row or unknown target."""
        ...


class RunStatus(Protocol):
    """A persistent query's state in the runtime (RUNNING, ERROR, PENDING, NOT_RUNNING) and, for
    ERROR, why."""

    @property
    def state(self) -> str: ...

    @property
    def error(self) -> str | None: ...


class PersistentQueryRunner(Protocol):
    """What a node's placement needs to run its share of the persistent queries."""

    def start_persistent(self, info: QueryInfo, analyzed: AnalyzedQuery, sink: SourceInfo,
                         properties: Mapping[str, Any] | None = None) -> None:
        """Start ``info``'s query writing to ``sink``; a failure is recorded (``status`` ERROR),
        not raised."""
        ...

    def stop_persistent(self, query_id: str) -> None:
        """Stop a query at a micro-batch boundary."""
        ...

    def status(self, query_id: str) -> RunStatus:
        """The query's state here (NOT_RUNNING for unknown ids)."""
        ...


class QueryRunner(PersistentQueryRunner, Protocol):
    """Everything a node asks of its query runtime: persistent queries, push queries, inserts."""

    def start_push(self, analyzed: AnalyzedQuery, properties: Mapping[str, Any] | None = None, *,
                   query: Query | None = None) -> QueryStream:
        """Start a push query (``SELECT ... EMIT CHANGES``)."""
        ...

    def insert_values(self, sink: SourceInfo, row: Mapping[str, Any]) -> None:
        """Write one row to ``sink``'s topic in its formats."""
        ...
