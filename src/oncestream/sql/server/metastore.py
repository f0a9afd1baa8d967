"""The sans-io metastore: streams, tables, persistent queries and the types of CREATE TYPE, built by
applying command-topic
records in order. It holds the state; the rules of each statement are
``oncestream.sql.language.statement_plan``'s, which both ``validate`` and ``apply`` use.

``validate(stmt, properties, topics)`` checks a statement against the current state and the
snapshot of existing Kafka topics it is given (``topics``: name -> partition count) and returns
the ``Command`` to write to the command topic; it never mutates. ``apply(command, offset)`` applies
a command read back from the command topic and returns the effects the node must run (create or
delete a topic, start or stop a persistent query) and a ``CommandResult`` for the command status.
``apply`` never raises for a statement that became invalid (a conflicting statement that lost the
race): it answers an ERROR result, so every node reaches the same state from the same commands.

Nothing here reads a clock, a host name or Kafka: query ids come from the command's offset
(``CSAS_<SINK>_<offset>``, ``CTAS_<SINK>_<offset>``, ``INSERTQUERY_<offset>``), partition counts of
existing topics from the command's ``plan``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from oncestream.sql.errors import StatementError
from oncestream.sql.language import sql_ast
from oncestream.sql.language.analyzer import AnalyzedQuery
from oncestream.sql.language.catalog import QueryInfo, SourceInfo
from oncestream.sql.language.parser import parse
from oncestream.sql.language.sql_ast import SourceKind
from oncestream.sql.language.statement_plan import SchemaLookup, StatementPlan, StatementPlanner
from oncestream.sql.language.types import SqlType
from oncestream.sql.server.commands import Command, command_id, goes_to_command_topic

# ---------------------------------------------------------------------------------------------
# what a persistent query is asked to do (PAUSE / RESUME), one table checked on every change


class QueryRunState(Enum):
    """Whether a persistent query of the metastore should run (the shared, replayed intent; which
    node runs it and how far it got is the node's business, ``local_queries``)."""

    RUNNING = "RUNNING"
    PAUSED = "PAUSED"


# state -> the states it may be entered from (None: the query is new). PAUSE of a paused query
# and RESUME of a running one are no-ops that succeed, as in ksqlDB (KafkaStreams.pause/resume).
_RUN_STATE_FROM: dict[QueryRunState, tuple[QueryRunState | None, ...]] = {
    QueryRunState.RUNNING: (None, QueryRunState.RUNNING, QueryRunState.PAUSED),
    QueryRunState.PAUSED: (QueryRunState.RUNNING, QueryRunState.PAUSED),
}


class IllegalRunStateTransition(RuntimeError):
    """A run-state change ``_RUN_STATE_FROM`` does not allow (a bug)."""


# ---------------------------------------------------------------------------------------------
# effects


@dataclass(frozen=True)
class CreateTopic:
    """Create this topic if it does not exist (idempotent on every node)."""

    topic: str
    partitions: int
    replicas: int
    compacted: bool


@dataclass(frozen=True)
class DeleteTopic:
    topic: str


@dataclass(frozen=True)
class StartQuery:
    """Start (on whichever node the assignment gives it) a persistent query writing ``sink``."""

    query: QueryInfo
    sink: SourceInfo
    analyzed: AnalyzedQuery = field(compare=False, repr=False)
    properties: dict[str, Any] = field(default_factory=dict, compare=False)   # the command's streamsProperties


@dataclass(frozen=True)
class StopQuery:
    query_id: str


@dataclass(frozen=True)
class ChangeRunState:
    """PAUSE / RESUME: ``state`` PAUSED stops running ``query_id`` but keeps its checkpoint and
    sink state; RUNNING runs it again from where it stopped."""

    query_id: str
    state: QueryRunState


@dataclass(frozen=True)
class CommandResult:
    """The command status ksqlDB reports (``commandStatus``): SUCCESS or ERROR, its message, and
    the id of the query it started, if any."""

    status: str
    message: str
    query_id: str | None = None


Effect = CreateTopic | DeleteTopic | StartQuery | StopQuery | ChangeRunState | CommandResult



class Metastore:
    """Streams, tables and persistent queries (see the module docstring)."""

    def __init__(self) -> None:
        self._sources: dict[str, SourceInfo] = {}
        self._queries: dict[str, QueryInfo] = {}
        self._analyzed: dict[str, AnalyzedQuery] = {}
        # source -> the sources its CREATE ... AS SELECT read (ksqlDB's drop constraints)
        self._references: dict[str, tuple[str, ...]] = {}
        # query id -> the streamsProperties of the command that started it (auto.offset.reset...)
        self._query_properties: dict[str, dict[str, Any]] = {}
        # CREATE TYPE: upper-cased name -> type, in registration order
        self._types: dict[str, SqlType] = {}
        # query id -> RUNNING or PAUSED (PAUSE / RESUME), one entry per query of _queries
        self._run_states: dict[str, QueryRunState] = {}
        self._last_offset: int = -1

    # -- lookups -------------------------------------------------------------------------------

    def source(self, name: str) -> SourceInfo | None:
        return self._sources.get(name)

    def sources(self) -> list[SourceInfo]:
        """Every source, by name."""
        return [self._sources[n] for n in sorted(self._sources)]

    def query(self, query_id: str) -> QueryInfo | None:
        return self._queries.get(query_id)

    def queries(self) -> list[QueryInfo]:
        """Every persistent query, in the order they were created."""
        return sorted(self._queries.values(), key=lambda q: (q.command_offset, q.query_id))

    def analyzed(self, query_id: str) -> AnalyzedQuery | None:
        """The analysis of a persistent query (what the compiler needs to start it)."""
        return self._analyzed.get(query_id)

    def run_state(self, query_id: str) -> QueryRunState | None:
        """RUNNING or PAUSED (PAUSE / RESUME) for a query of the metastore; None for others."""
        return self._run_states.get(query_id)

    def query_properties(self, query_id: str) -> dict[str, Any]:
        """The property overrides (the command's streamsProperties) a persistent query runs with."""
        return dict(self._query_properties.get(query_id, {}))

    def source_map(self) -> dict[str, SourceInfo]:
        return dict(self._sources)

    @property
    def last_offset(self) -> int:
        """The offset of the last command applied (-1 before any)."""
        return self._last_offset

    def readers_of(self, name: str) -> list[str]:
        return sorted(q.query_id for q in self._queries.values() if name in q.sources)

    def writers_of(self, name: str) -> list[str]:
        return sorted(q.query_id for q in self._queries.values() if q.sink == name)

    def custom_type(self, name: str) -> SqlType | None:
        """The type CREATE TYPE registered as ``name``."""
        return self._types.get(name)

    def custom_types(self) -> dict[str, SqlType]:
        """Every registered type, by name (what the parser resolves type names with)."""
        return dict(self._types)

    def created_as_select(self, name: str) -> bool:
        """Whether ``name`` was created by CREATE ... AS SELECT (ksqlDB's ``isCasTarget``)."""
        return name in self._references

    def referenced_by(self, name: str) -> list[str]:
        """The sources created (CREATE ... AS SELECT) from ``name``: they block its DROP."""
        return sorted(n for n, refs in self._references.items() if name in refs)

    def snapshot(self) -> Metastore:
        """An independent copy (validate against it while the live one keeps applying)."""
        return self.copy()

    def copy(self) -> Metastore:
        other = Metastore()
        other._sources = dict(self._sources)
        other._queries = dict(self._queries)
        other._analyzed = dict(self._analyzed)
        other._references = dict(self._references)
        other._query_properties = dict(self._query_properties)
        other._types = dict(self._types)
        other._run_states = dict(self._run_states)
        other._last_offset = self._last_offset
        return other

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Metastore):
            return NotImplemented
        return self.describe_all() == other.describe_all()

    __hash__ = None  # type: ignore[assignment]

    def describe_all(self) -> dict[str, Any]:
        """Everything, as plain JSON-ready data (compared across nodes in the cluster tests)."""
        return {
            "sources": [
                {"name": s.name, "type": s.kind.value, "topic": s.topic, "keyFormat": s.key_format.value,
                 "valueFormat": s.value_format.value, "partitions": s.partitions, "replicas": s.replicas,
                 "columns": [[c.name, c.type.ksql_name, c.namespace.value, *([c.header_key] if c.is_header else [])]
                             for c in s.columns],
                 "timestamp": s.timestamp_column, "timestampFormat": s.timestamp_format,
                 "window": None if s.window is None else [s.window.kind.value, s.window.size_ms, s.window.advance_ms],
                 "readOnly": s.read_only, "createdBy": s.created_by, "statement": s.statement,
                 "valueUnwrapped": s.value_unwrapped, "keyProtobufNullable": s.key_protobuf_nullable,
                 "valueProtobufNullable": s.value_protobuf_nullable,
                 "references": list(self._references.get(s.name, ()))}
                for s in self.sources()],
            "queries": [
                {"id": q.query_id, "statement": q.statement, "sink": q.sink, "sources": list(q.sources),
                 "columns": [[c.name, c.type.ksql_name, c.namespace.value] for c in q.output_columns],
                 "offset": q.command_offset, "properties": self._query_properties.get(q.query_id, {}),
                 "runState": self._run_states[q.query_id].value}
                for q in self.queries()],
            "types": {name: ty.ksql_name for name, ty in self._types.items()},
        }

    # -- validate ------------------------------------------------------------------------------

    def validate(self, stmt: sql_ast.Statement, properties: Mapping[str, Any] | None = None,
                 topics: Mapping[str, int] | None = None, schemas: SchemaLookup | None = None) -> Command:
        """The command for ``stmt`` (raises ``StatementError``; never mutates). ``properties``
        are the request's streamsProperties; ``topics`` the existing Kafka topics with their
        partition counts (None: do not check topic existence); ``schemas`` the Schema Registry that
        CREATE without columns reads AVRO/JSON_SR columns from (recorded in the command's plan)."""
        if not goes_to_command_topic(stmt):
            raise StatementError(f"{type(stmt).__name__} statements are answered locally, not through the command topic.",
                                 statement_text=stmt.text)
        props = dict(properties or {})
        try:
            planned = StatementPlanner(self, schemas, props).plan(stmt, topics, None)
        except StatementError as e:
            if e.statement_text is None:
                e.statement_text = stmt.text
            raise
        return Command(command_id=command_id(stmt), statement=stmt.text, streams_properties=props,
                       original_properties=dict(props), plan=planned.plan, statement_ast=stmt)

    # -- apply ---------------------------------------------------------------------------------

    def apply(self, command: Command, offset: int) -> list[Effect]:
        """Apply one command read at ``offset`` of the command topic; returns its effects, the
        last being the ``CommandResult``."""
        self._last_offset = max(self._last_offset, offset)
        stmt = command.statement_ast
        if stmt is None:
            try:
                stmt = _parse_one(command.statement, self._types)
            except StatementError as e:
                return [CommandResult("ERROR", e.message)]
        try:
            planned = StatementPlanner(self, None, command.streams_properties).plan(stmt, None, command.plan)
            return self._execute(planned, command, offset)
        except StatementError as e:
            return [CommandResult("ERROR", e.message)]

    # -- execution -----------------------------------------------------------------------------

    def _execute(self, p: StatementPlan, command: Command, offset: int) -> list[Effect]:
        stmt = p.stmt
        if p.noop_message is not None:
            return [CommandResult("SUCCESS", p.noop_message)]
        effects: list[Effect] = []
        if isinstance(stmt, sql_ast.CreateSource):
            assert p.source is not None
            if p.plan.get("createTopic"):
                effects.append(CreateTopic(p.source.topic, p.source.partitions, p.source.replicas,
                                           compacted=p.source.kind is SourceKind.TABLE))
            self._sources[stmt.name] = p.source
            self._references.pop(stmt.name, None)
            kind = "Stream" if stmt.kind is SourceKind.STREAM else "Table"
            effects.append(CommandResult("SUCCESS", f"{kind} created"))
            return effects
        if isinstance(stmt, sql_ast.CreateAsSelect):
            assert p.source is not None
            assert p.analyzed is not None
            prefix = "CSAS" if stmt.kind is SourceKind.STREAM else "CTAS"
            old_query = p.replace.created_by if p.replace is not None else None
            query_id = old_query or f"{prefix}_{stmt.name}_{offset}"
            if old_query is not None and old_query in self._queries:
                effects.append(StopQuery(old_query))
            if p.plan.get("createTopic"):
                effects.append(CreateTopic(p.source.topic, p.source.partitions, p.source.replicas,
                                           compacted=p.source.kind is SourceKind.TABLE))
            sink = replace(p.source, created_by=query_id)
            self._sources[stmt.name] = sink
            self._references[stmt.name] = tuple(sorted({s.name for s in p.analyzed.sources.values()}))
            info = self._register_query(query_id, stmt.text, sink, stmt.query, p.analyzed, offset, command)
            effects.append(StartQuery(info, sink, p.analyzed, dict(command.streams_properties)))
            effects.append(CommandResult("SUCCESS", f"Created query with ID {query_id}", query_id))
            return effects
        if isinstance(stmt, sql_ast.InsertInto):
            assert p.source is not None
            assert p.analyzed is not None
            query_id = p.plan.get("queryId") or f"INSERTQUERY_{offset}"
            info = self._register_query(query_id, stmt.text, p.source, stmt.query, p.analyzed, offset, command)
            effects.append(StartQuery(info, p.source, p.analyzed, dict(command.streams_properties)))
            effects.append(CommandResult("SUCCESS", f"Created query with ID {query_id}", query_id))
            return effects
        if isinstance(stmt, sql_ast.DropSource):
            assert p.source is not None
            if p.source.created_by is not None and p.source.created_by in self._queries:
                effects.append(StopQuery(p.source.created_by))
                self._drop_query(p.source.created_by)
            del self._sources[stmt.name]
            self._references.pop(stmt.name, None)
            if stmt.delete_topic:
                effects.append(DeleteTopic(p.source.topic))
            effects.append(CommandResult("SUCCESS", f"Source `{stmt.name}` (topic: {p.source.topic}) was dropped."))
            return effects
        if isinstance(stmt, sql_ast.CreateType):
            self._types[stmt.name] = stmt.type
            return [CommandResult("SUCCESS", f"Registered custom type with name '{stmt.name}' and SQL type "
                                             f"{stmt.type.ksql_name}")]
        if isinstance(stmt, sql_ast.DropType):
            if self._types.pop(stmt.name, None) is None:
                return [CommandResult("SUCCESS", f"Type '{stmt.name}' does not exist")]
            return [CommandResult("SUCCESS", f"Dropped type '{stmt.name}'")]
        if isinstance(stmt, sql_ast.AlterSource):
            assert p.source is not None
            self._sources[stmt.name] = p.source
            kind = "Stream" if stmt.kind is SourceKind.STREAM else "Table"
            return [CommandResult("SUCCESS", f"{kind} {stmt.name} altered.")]
        if isinstance(stmt, sql_ast.Terminate):
            ids = [stmt.query_id] if stmt.query_id is not None else [q.query_id for q in self.queries()]
            for qid in ids:
                effects.append(StopQuery(qid))
                self._drop_query(qid)
            effects.append(CommandResult("SUCCESS", "Query terminated." if stmt.query_id else "All queries terminated."))
            return effects
        if isinstance(stmt, sql_ast.PauseQuery | sql_ast.ResumeQuery):
            # ksqlDB's InteractiveStatementExecutor: "Query paused." / "Query resumed." for one
            # query and for ALL alike.
            pausing = isinstance(stmt, sql_ast.PauseQuery)
            target = QueryRunState.PAUSED if pausing else QueryRunState.RUNNING
            ids = [stmt.query_id] if stmt.query_id is not None else [q.query_id for q in self.queries()]
            for qid in ids:
                if self._run_states[qid] is not target:
                    effects.append(ChangeRunState(qid, target))
                self._set_run_state(qid, target)
            effects.append(CommandResult("SUCCESS", "Query paused." if pausing else "Query resumed."))
            return effects
        raise StatementError(f"Unsupported statement: {type(stmt).__name__}")

    def _register_query(self, query_id: str, text: str, sink: SourceInfo, query: sql_ast.Query, analyzed: AnalyzedQuery,
                        offset: int, command: Command) -> QueryInfo:
        source_names = tuple(dict.fromkeys(s.name for s in analyzed.sources.values()))
        info = QueryInfo(query_id=query_id, statement=text, sink=sink.name, sources=source_names, query=query,
                         output_columns=analyzed.columns, command_offset=offset)
        self._queries[query_id] = info
        self._analyzed[query_id] = analyzed
        self._query_properties[query_id] = dict(command.streams_properties)
        # A new query runs, and so does a paused one that CREATE OR REPLACE redefines (ksqlDB
        # starts the replacing query whatever the replaced one's state was).
        self._set_run_state(query_id, QueryRunState.RUNNING)
        return info

    def _set_run_state(self, query_id: str, state: QueryRunState) -> None:
        current = self._run_states.get(query_id)
        if current not in _RUN_STATE_FROM[state]:
            raise IllegalRunStateTransition(f"{query_id}: {current} -> {state}")
        self._run_states[query_id] = state

    def _drop_query(self, query_id: str) -> None:
        info = self._queries.pop(query_id, None)
        self._analyzed.pop(query_id, None)
        self._query_properties.pop(query_id, None)
        self._run_states.pop(query_id, None)
        if info is None:
            return
        sink = self._sources.get(info.sink)
        if sink is not None and sink.created_by == query_id:
            # the sink stays (as in ksqlDB) but is no longer written by a query
            self._sources[info.sink] = replace(sink, created_by=None)


def _parse_one(text: str, custom_types: Mapping[str, SqlType]) -> sql_ast.Statement:
    """Parse a command's statement text (a decoded command has no AST), its type names resolved
    with the types registered by the commands before it."""
    stmts = parse(text, custom_types)
    if len(stmts) != 1:
        raise StatementError(f"expected one statement in a command, got {len(stmts)}")
    return stmts[0]
