"""The statements a node answers from its own metastore, without the command topic: SHOW / LIST
(SHOW TYPES too),
DESCRIBE, EXPLAIN (ksqlDB's JSON entities come from ``entities``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from oncestream.sql.errors import StatementError
from oncestream.sql.language import sql_ast
from oncestream.sql.language.analyzer import analyze_query
from oncestream.sql.server import entities
from oncestream.sql.server.metastore import Metastore
from oncestream.sql.server.node_context import NodeContext
from oncestream.sql.server.placement import QueryPlacement


class LocalStatements:
    """Answers SHOW / DESCRIBE / EXPLAIN for one node. ``statistics(name)`` is the text
    DESCRIBE EXTENDED shows for a table's materialization (pull queries)."""

    def __init__(self, context: NodeContext, placement: QueryPlacement, statistics: Callable[[str], str]) -> None:
        self._context = context
        self._placement = placement
        self._statistics = statistics

    def answer(self, statement: sql_ast.Statement, properties: dict[str, Any]) -> dict[str, Any]:
        """The entity of one local statement (``properties``: the request's, for SHOW PROPERTIES)."""
        text = statement.text
        if isinstance(statement, sql_ast.Show):
            return self._show(statement, properties)
        if isinstance(statement, sql_ast.Describe):
            return self._describe(statement)
        if isinstance(statement, sql_ast.Explain):
            if statement.query_id is None:
                return self._explain_statement(statement)
            snapshot = self._context.snapshot()
            info = snapshot.query(statement.query_id)
            if info is None:
                raise StatementError(f"Query with id:{statement.query_id} does not exist, "
                                     "use SHOW QUERIES to view the full set of running queries.", statement_text=text)
            _state, error, _owner = self._placement.query_state(info.query_id)
            errors = [] if error is None else [entities.query_error(error, int(time.time() * 1000))]
            return entities.query_description_entity(
                snapshot, info, text, host_states=self._placement.host_statuses(info.query_id), errors=errors,
                overridden_properties=snapshot.query_properties(info.query_id))
        raise StatementError(f"Unsupported statement: {type(statement).__name__}", statement_text=text)

    def _describe(self, statement: sql_ast.Describe) -> dict[str, Any]:
        text = statement.text
        if statement.function:
            found = entities.describe_function(statement.name or "", text)
            if found is None:
                raise StatementError(f"Can't find any functions with the name '{statement.name}'", statement_text=text)
            return found
        snapshot = self._context.snapshot()
        states = self._query_states(snapshot)
        if statement.name is None:
            kind = (statement.what or sql_ast.ShowWhat.STREAMS).value.rstrip("S")
            return entities.source_descriptions(snapshot, text, kind=kind, extended=statement.extended, states=states)
        source = snapshot.source(statement.name)
        if source is None:
            raise StatementError(f"Could not find STREAM/TABLE '{statement.name}' in the Metastore", statement_text=text)
        description = entities.source_description(snapshot, source, extended=statement.extended, states=states,
                                                  error_stats=self._error_stats(snapshot, source.name)
                                                  if statement.extended else "",
                                                  statistics=self._statistics(source.name) if statement.extended else "")
        return {"@type": "sourceDescription", "statementText": text, "sourceDescription": description, "warnings": []}

    def _explain_statement(self, statement: sql_ast.Explain) -> dict[str, Any]:
        """``EXPLAIN <SELECT | CREATE ... AS SELECT | INSERT INTO ... SELECT>``: the query as the
        analyzer sees it, not running anywhere."""
        inner = statement.statement
        query = getattr(inner, "query", None)
        if inner is None or not isinstance(query, sql_ast.Query):
            raise StatementError("EXPLAIN takes a query id or a statement with a query", statement_text=statement.text)
        sink = getattr(inner, "name", None) or getattr(inner, "target", None)
        analyzed = analyze_query(query, self._context.sources(), sink=sink)
        names = list(dict.fromkeys(s.name for s in analyzed.sources.values()))
        return entities.transient_query_description(statement.text, inner.text, analyzed.columns, names)

    def _show(self, statement: sql_ast.Show, properties: dict[str, Any]) -> dict[str, Any]:
        text = statement.text
        snapshot = self._context.snapshot()
        what = statement.what
        if what is sql_ast.ShowWhat.STREAMS:
            if statement.extended:
                return entities.source_descriptions(snapshot, text, kind="STREAM", extended=True,
                                                    states=self._query_states(snapshot))
            return entities.streams(snapshot, text)
        if what is sql_ast.ShowWhat.TABLES:
            if statement.extended:
                return entities.source_descriptions(snapshot, text, kind="TABLE", extended=True,
                                                    states=self._query_states(snapshot))
            return entities.tables(snapshot, text)
        if what is sql_ast.ShowWhat.QUERIES:
            return entities.queries(snapshot, text, self._query_states(snapshot))
        if what is sql_ast.ShowWhat.TOPICS:
            return entities.kafka_topics(self._topics(), text)
        if what is sql_ast.ShowWhat.PROPERTIES:
            settings = self._context.settings
            server = {k: v for k, v in settings.properties.items() if not k.startswith(("ssl.", "sasl."))}
            server.setdefault("ksql.service.id", settings.service_id)
            server.setdefault("ksql.streams.bootstrap.servers", settings.bootstrap_servers)
            return entities.properties(server, properties, text)
        if what is sql_ast.ShowWhat.FUNCTIONS:
            return entities.function_names(text)
        if what is sql_ast.ShowWhat.TYPES:
            return entities.type_list(text, snapshot.custom_types())
        raise StatementError(f"Unsupported statement: SHOW {what}", statement_text=text)

    def _query_states(self, snapshot: Metastore) -> dict[str, str]:
        return {q.query_id: self._placement.query_state(q.query_id)[0] for q in snapshot.queries()}

    def _error_stats(self, snapshot: Metastore, name: str) -> str:
        lines = []
        for q in snapshot.queries():
            if q.sink == name or name in q.sources:
                state, error, _owner = self._placement.query_state(q.query_id)
                if state == "ERROR" and error:
                    lines.append(f"{q.query_id}: {error}")
        return "\n".join(lines)

    def _topics(self) -> dict[str, list[int]]:
        admin = self._context.admin
        names = [t for t in admin.list_topics(timeout=30) if not t.startswith("_")]
        described = admin.describe_topics(names, timeout=30)
        return {n: [len(p.replicas) for p in d.partitions] for n, d in described.items() if d.error is None}
