"""The sans-io metastore: streams, tables and persistent queries, built by applying command-topic
records in order.

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

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from sqlglot import exp

from oncestream.sql import ast, catalog
from oncestream.sql.analyzer import AnalyzedQuery, analyze_query
from oncestream.sql.analyzer_aggregates import no_map_key
from oncestream.sql.analyzer_expr import column_ref
from oncestream.sql.ast import SourceKind, WindowKind, WindowSpec
from oncestream.sql.catalog import Column, Format, Namespace, QueryInfo, SourceInfo
from oncestream.sql.commands import Command, command_id, goes_to_command_topic
from oncestream.sql.errors import StatementError
from oncestream.sql.types import BaseType, SqlType

RESERVED_COLUMNS = (catalog.ROWTIME, catalog.ROWPARTITION, catalog.ROWOFFSET, catalog.WINDOWSTART, catalog.WINDOWEND)
SUPPORTED_FORMATS = {f.value: f for f in Format}


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
class CommandResult:
    """The command status ksqlDB reports (``commandStatus``): SUCCESS or ERROR, its message, and
    the id of the query it started, if any."""

    status: str
    message: str
    query_id: str | None = None


Effect = CreateTopic | DeleteTopic | StartQuery | StopQuery | CommandResult


# ---------------------------------------------------------------------------------------------
# helpers


def _prop(props: Mapping[str, Any], name: str) -> Any:
    for k, v in props.items():
        if k.upper() == name:
            return v
    return None


def _fmt(value: Any, which: str) -> Format:
    text = str(value).upper()
    fmt = SUPPORTED_FORMATS.get(text)
    if fmt is None:
        raise StatementError(f"{which} '{text}' is not supported: supported formats are JSON, DELIMITED, KAFKA and NONE.")
    return fmt


def _int_prop(props: Mapping[str, Any], name: str) -> int | None:
    v = _prop(props, name)
    if v is None:
        return None
    try:
        n = int(v)
    except (TypeError, ValueError) as e:
        raise StatementError(f"Invalid value for {name}: {v!r}") from e
    if n <= 0:
        raise StatementError(f"Invalid value for {name}: {v!r} (must be positive)")
    return n


def _lower_kind(kind: SourceKind) -> str:
    return kind.value.lower()


def _check_kafka_format(fmt: Format, columns: tuple[Column, ...], which: str) -> None:
    """ksqlDB's format/schema compatibility check (KAFKA: one primitive column; DELIMITED: no
    ARRAY/MAP/STRUCT; NONE: no columns), worded as ksqlDB's 'Key/Value format does not support schema'."""
    reason: str | None = None
    if fmt is Format.KAFKA and len(columns) > 1:
        listed = "[" + ", ".join(_persistence_column(c) for c in columns) + "]"
        reason = f"The 'KAFKA' format only supports a single field. Got: {listed}"
    elif fmt is Format.KAFKA:
        for c in columns:
            if c.type.base not in (BaseType.INTEGER, BaseType.BIGINT, BaseType.DOUBLE, BaseType.STRING, BaseType.BYTES):
                reason = f"The 'KAFKA' format does not support type '{c.type.base.value}'"
                break
    elif fmt is Format.DELIMITED:
        for c in columns:
            if c.type.base in (BaseType.ARRAY, BaseType.MAP, BaseType.STRUCT):
                reason = f"The 'DELIMITED' format does not support type '{c.type.base.value}', column: `{c.name}`"
                break
    elif fmt is Format.JSON and any(_has_non_string_map_key(c.type) for c in columns):
        raise StatementError("JSON only supports MAP types with STRING keys")
    elif fmt is Format.NONE and columns:
        reason = "The 'NONE' format can only be used when no columns are defined. Got: " + \
            "[" + ", ".join(_persistence_column(c) for c in columns) + "]"
    if reason is not None:
        side = "Key" if which == "KEY_FORMAT" else "Value"
        schema = "Persistence{columns=[" + ", ".join(_persistence_column(c) for c in columns) + "], features=[]}"
        raise StatementError(f"{side} format does not support schema.\nformat: {fmt.value}\nschema: {schema}\nreason: {reason}")


def _timestamp_column(props: Mapping[str, Any], columns: tuple[Column, ...]) -> tuple[str | None, str | None]:
    """``WITH (TIMESTAMP='col' [, TIMESTAMP_FORMAT='...'])``, checked as ksqlDB does."""
    raw, raw_fmt = _prop(props, "TIMESTAMP"), _prop(props, "TIMESTAMP_FORMAT")
    fmt = None if raw_fmt is None else str(raw_fmt)
    if raw is None:
        return None, fmt
    name = str(raw).strip("`") if str(raw).startswith("`") else str(raw).upper()
    col = next((c for c in columns if c.name == name), None)
    if col is None:
        raise StatementError(f"The TIMESTAMP column set in the WITH clause does not exist in the schema: '{name}'")
    if not (col.type.base in (BaseType.BIGINT, BaseType.TIMESTAMP) or (col.type.base is BaseType.STRING and fmt)):
        raise StatementError(f"Timestamp column, `{name}`, should be LONG(INT64), TIMESTAMP, or a String with a "
                             "timestamp_format specified.")
    return name, fmt


def _check_wrap_single_value(props: Mapping[str, Any], value_format: Format, value_columns: tuple[Column, ...]) -> None:
    """``WRAP_SINGLE_VALUE``: ksqlDB's rules; we serialize single values wrapped (JSON object) only."""
    raw = _prop(props, "WRAP_SINGLE_VALUE")
    if raw is None:
        return
    wrap = str(raw).lower()
    if value_format in (Format.KAFKA, Format.DELIMITED):
        if wrap == "false":   # these formats never wrap: 'false' only says so
            return
        raise StatementError(f"Format '{value_format.value}' does not support 'WRAP_SINGLE_VALUE' set to '{wrap}'.")
    if len(value_columns) != 1:
        raise StatementError("'WRAP_SINGLE_VALUE' is only valid for single-field value schemas")
    if wrap != "true":
        raise StatementError("'WRAP_SINGLE_VALUE'='false' is not supported: single values are written wrapped in a JSON object.")


def _delimiter(props: Mapping[str, Any], value_format: Format) -> str:
    """``VALUE_DELIMITER``: one character, or TAB / SPACE; only for DELIMITED (ksqlDB's rules)."""
    raw = _prop(props, "VALUE_DELIMITER")
    if raw is None:
        return ","
    if value_format is not Format.DELIMITED:
        raise StatementError(f"{value_format.value} does not support the following configs: [delimiter]")
    text = str(raw)
    named = {"TAB": "\t", "SPACE": " "}
    if text.upper() in named:
        return named[text.upper()]
    if text == "":
        raise StatementError("Configuration VALUE_DELIMITER is invalid: Delimiter cannot be empty, if you meant to have a tab "
                             "or space for delimiter, please use the special values 'TAB' or 'SPACE'")
    if len(text) != 1:
        raise StatementError(f"Configuration VALUE_DELIMITER is invalid: Invalid delimiter value: '{text}'. Delimiter must be "
                             "a single character or TAB,SPACE")
    return text


_UNIT_MS = {"MILLISECOND": 1, "SECOND": 1000, "MINUTE": 60_000, "HOUR": 3_600_000, "DAY": 86_400_000}


def _window_of(props: Mapping[str, Any]) -> WindowSpec | None:
    """``WITH (WINDOW_TYPE='TUMBLING', WINDOW_SIZE='10 SECONDS')``: a source over a windowed topic."""
    raw_type = _prop(props, "WINDOW_TYPE")
    raw_size = _prop(props, "WINDOW_SIZE")
    if raw_type is None:
        if raw_size is not None:
            raise StatementError("'WINDOW_SIZE' requires 'WINDOW_TYPE' to be provided in the WITH clause.")
        return None
    try:
        kind = WindowKind(str(raw_type).upper())
    except ValueError as e:
        raise StatementError(f"Invalid value for WINDOW_TYPE: {raw_type!r} (SESSION, HOPPING or TUMBLING)") from e
    if kind is WindowKind.SESSION:
        if raw_size is not None:
            raise StatementError("'WINDOW_SIZE' should not be set for SESSION windows.")
        return WindowSpec(kind, size_ms=0)
    if raw_size is None:
        raise StatementError(f"{kind.value} windows require 'WINDOW_SIZE' to be provided in the WITH clause. "
                             "For example: 'WINDOW_SIZE'='10 SECONDS'")
    parts = str(raw_size).split()
    unit = parts[1].upper() if len(parts) == 2 else ""
    if len(parts) != 2 or not parts[0].isdigit():
        raise StatementError(f"Configuration WINDOW_SIZE is invalid: Invalid duration: '{raw_size}'. "
                             "Expected a number and a time unit, e.g. '10 SECONDS'")
    if unit.rstrip("S") not in _UNIT_MS:
        raise StatementError(f"Configuration WINDOW_SIZE is invalid: Invalid duration: '{raw_size}'. Unknown time unit: '{unit}'")
    unit = unit.rstrip("S")
    size_ms = int(parts[0]) * _UNIT_MS[unit]
    return WindowSpec(kind, size_ms=size_ms, advance_ms=size_ms if kind is WindowKind.HOPPING else None)


def _has_non_string_map_key(ty: SqlType) -> bool:
    if ty.base is BaseType.MAP and ty.key is not None and ty.key.base is not BaseType.STRING:
        return True
    return any(_has_non_string_map_key(x) for x in (ty.element, ty.key) if x is not None) or \
        any(_has_non_string_map_key(f.type) for f in ty.fields)


def _persistence_column(c: Column) -> str:
    return f"`{c.name}` {c.type.ksql_name}{' KEY' if c.is_key else ''}"


@dataclass
class _Plan:
    """What a statement does, computed from the current state (validate and apply share it)."""

    stmt: ast.Statement
    plan: dict[str, Any]
    source: SourceInfo | None = None
    analyzed: AnalyzedQuery | None = None
    replace: SourceInfo | None = None
    noop_message: str | None = None


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
                 "columns": [[c.name, c.type.ksql_name, c.namespace.value] for c in s.columns],
                 "timestamp": s.timestamp_column, "timestampFormat": s.timestamp_format,
                 "window": None if s.window is None else [s.window.kind.value, s.window.size_ms, s.window.advance_ms],
                 "readOnly": s.read_only, "createdBy": s.created_by, "statement": s.statement,
                 "references": list(self._references.get(s.name, ()))}
                for s in self.sources()],
            "queries": [
                {"id": q.query_id, "statement": q.statement, "sink": q.sink, "sources": list(q.sources),
                 "columns": [[c.name, c.type.ksql_name, c.namespace.value] for c in q.output_columns],
                 "offset": q.command_offset, "properties": self._query_properties.get(q.query_id, {})}
                for q in self.queries()],
        }

    # -- validate ------------------------------------------------------------------------------

    def validate(self, stmt: ast.Statement, properties: Mapping[str, Any] | None = None,
                 topics: Mapping[str, int] | None = None) -> Command:
        """The command for ``stmt`` (raises ``StatementError``; never mutates). ``properties``
        are the request's streamsProperties; ``topics`` the existing Kafka topics with their
        partition counts (None: do not check topic existence)."""
        if not goes_to_command_topic(stmt):
            raise StatementError(f"{type(stmt).__name__} statements are answered locally, not through the command topic.",
                                 statement_text=stmt.text)
        props = dict(properties or {})
        try:
            planned = self._plan(stmt, topics, None)
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
                stmt = _parse_one(command.statement)
            except StatementError as e:
                return [CommandResult("ERROR", e.message)]
        try:
            planned = self._plan(stmt, None, command.plan)
            return self._execute(planned, command, offset)
        except StatementError as e:
            return [CommandResult("ERROR", e.message)]

    # -- planning (shared by validate and apply) -----------------------------------------------

    def _plan(self, stmt: ast.Statement, topics: Mapping[str, int] | None, plan: Mapping[str, Any] | None) -> _Plan:
        if isinstance(stmt, ast.CreateSource):
            return self._plan_create(stmt, topics, plan)
        if isinstance(stmt, ast.CreateAsSelect):
            return self._plan_create_as(stmt, topics, plan)
        if isinstance(stmt, ast.InsertInto):
            return self._plan_insert(stmt)
        if isinstance(stmt, ast.DropSource):
            return self._plan_drop(stmt)
        if isinstance(stmt, ast.Terminate):
            if stmt.query_id is not None and stmt.query_id not in self._queries:
                raise StatementError(f"Unknown queryId: {stmt.query_id}")
            return _Plan(stmt, {})
        raise StatementError(f"Unsupported statement: {type(stmt).__name__}")

    def _existing_conflict(self, kind: SourceKind, name: str, or_replace: bool, if_not_exists: bool) -> SourceInfo | None:
        existing = self._sources.get(name)
        if existing is None:
            return None
        if if_not_exists:
            return existing
        if not or_replace or existing.kind is not kind:
            raise StatementError(f"Cannot add {_lower_kind(kind)} '{name}': A {_lower_kind(existing.kind)} with the same name "
                                 "already exists")
        if existing.read_only:
            raise StatementError(f"Cannot add {_lower_kind(kind)} '{name}': CREATE OR REPLACE is not supported on source "
                                 f"{_lower_kind(kind)}s.")
        return existing

    def _topic_partitions(self, stmt: ast.Statement, topic: str, partitions: int | None, replicas: int | None,
                          topics: Mapping[str, int] | None, plan: Mapping[str, Any] | None,
                          default_partitions: int | None) -> tuple[int, bool]:
        """(partition count, whether the topic must be created)."""
        if plan is not None and "partitions" in plan:
            return int(plan["partitions"]), bool(plan.get("createTopic", False))
        if topics is not None and topic in topics:
            existing = topics[topic]
            if partitions is not None and partitions != existing:
                raise StatementError(
                    f"A Kafka topic with the name '{topic}' already exists, with different partition/replica configuration "
                    f"than required. KSQL expects {partitions} partitions (topic has {existing}), "
                    f"{replicas or 1} replication factor (topic has {replicas or 1}).")
            return existing, False
        if partitions is not None:
            return partitions, True
        if default_partitions is not None:
            return default_partitions, True
        if topics is None:
            return 1, False
        example = stmt.text.rstrip().rstrip(";")
        raise StatementError(
            f"Topic '{topic}' does not exist. If you want to create a new topic for the stream/table please re-run the "
            "statement providing the required 'PARTITIONS' configuration in the WITH clause (and optionally 'REPLICAS'). "
            f"For example: {example} WITH (KAFKA_TOPIC='{topic}', PARTITIONS=2);")

    def _plan_create(self, stmt: ast.CreateSource, topics: Mapping[str, int] | None, plan: Mapping[str, Any] | None) -> _Plan:
        if stmt.or_replace and stmt.read_only:
            kind = _lower_kind(stmt.kind)
            raise StatementError(f"Cannot add {kind} '{stmt.name}': CREATE OR REPLACE is not supported on source {kind}s.")
        existing = self._existing_conflict(stmt.kind, stmt.name, stmt.or_replace, stmt.if_not_exists)
        if existing is not None and stmt.if_not_exists:
            return _Plan(stmt, dict(plan or {}), noop_message=f"Cannot add {_lower_kind(stmt.kind)} `{stmt.name}`: "
                         f"A {_lower_kind(existing.kind)} with the same name already exists.")
        props = stmt.properties
        topic = _prop(props, "KAFKA_TOPIC")
        if topic is None:
            raise StatementError('Missing required property "KAFKA_TOPIC" which has no default value.')
        topic = str(topic)
        fmt = _prop(props, "FORMAT")
        value_raw = _prop(props, "VALUE_FORMAT") or fmt
        if value_raw is None:
            raise StatementError("Statement is missing the 'VALUE_FORMAT' property from the WITH clause. Either provide one or "
                                 "set a default via the 'ksql.persistence.default.format.value' config.")
        value_format = _fmt(value_raw, "VALUE_FORMAT")
        if not stmt.columns:
            raise StatementError("The statement does not define any columns.")
        seen: set[str] = set()
        columns: list[Column] = []
        for cd in stmt.columns:
            if cd.name in RESERVED_COLUMNS:
                raise StatementError(f"'{cd.name}' is a reserved column name. You cannot use it as a name for a column.")
            if cd.name in seen:
                raise StatementError(f"Duplicate column names: `{cd.name}`")
            seen.add(cd.name)
            if stmt.kind is SourceKind.STREAM and cd.primary_key:
                raise StatementError(f"Column `{cd.name}` is a 'PRIMARY KEY' column: please use 'KEY' for streams.\nTables have "
                                     "PRIMARY KEYs, which are unique and NON NULL.\nStreams have KEYs, which have no uniqueness "
                                     "or NON NULL constraints.")
            if stmt.kind is SourceKind.TABLE and cd.key and not cd.primary_key:
                raise StatementError(f"Column `{cd.name}` is a 'KEY' column: please use 'PRIMARY KEY' for tables.\nTables have "
                                     "PRIMARY KEYs, which are unique and NON NULL.\nStreams have KEYs, which have no uniqueness "
                                     "or NON NULL constraints.")
            columns.append(Column(cd.name, cd.type, Namespace.KEY if (cd.key or cd.primary_key) else Namespace.VALUE))
        ordered = tuple([c for c in columns if c.is_key] + [c for c in columns if not c.is_key])
        keys = tuple(c for c in ordered if c.is_key)
        for k in keys:
            no_map_key(column_ref(k.name, None, k.type))
        if stmt.kind is SourceKind.TABLE and not keys:
            raise StatementError("Tables require a PRIMARY KEY. Please define the PRIMARY KEY.")
        key_raw = _prop(props, "KEY_FORMAT") or fmt
        # ksqlDB's default key format (ksql.persistence.default.format.key) is KAFKA, with or without key columns
        key_format = _fmt(key_raw, "KEY_FORMAT") if key_raw is not None else Format.KAFKA
        _check_kafka_format(key_format, keys, "KEY_FORMAT")
        _check_kafka_format(value_format, tuple(c for c in ordered if not c.is_key), "VALUE_FORMAT")
        ts_col, ts_fmt = _timestamp_column(props, ordered)
        _check_wrap_single_value(props, value_format, tuple(c for c in ordered if not c.is_key))
        partitions = _int_prop(props, "PARTITIONS")
        replicas = _int_prop(props, "REPLICAS")
        window = _window_of(props)
        if window is not None and not keys:
            raise StatementError("Windowed sources require a key column.")
        n, create = self._topic_partitions(stmt, topic, partitions, replicas, topics, plan, None)
        source = SourceInfo(
            name=stmt.name, kind=stmt.kind, topic=topic, key_format=key_format, value_format=value_format, columns=ordered,
            statement=stmt.text, partitions=n, replicas=replicas or 1, timestamp_column=ts_col, timestamp_format=ts_fmt,
            value_delimiter=_delimiter(props, value_format), window=window, read_only=stmt.read_only)
        if existing is not None:
            self._check_replace(existing, source)
        return _Plan(stmt, {"topic": topic, "partitions": n, "replicas": replicas or 1, "createTopic": create},
                     source=source, replace=existing)

    @staticmethod
    def _check_replace(existing: SourceInfo, new: SourceInfo) -> None:
        ok = (existing.kind is new.kind and existing.topic == new.topic and existing.key_columns == new.key_columns
              and new.value_columns[:len(existing.value_columns)] == existing.value_columns
              and existing.key_format is new.key_format and existing.value_format is new.value_format
              and existing.window == new.window)
        if not ok:
            old_schema = ", ".join(f"`{c.name}` {c.type.ksql_name}{' KEY' if c.is_key else ''}" for c in existing.columns)
            new_schema = ", ".join(f"`{c.name}` {c.type.ksql_name}{' KEY' if c.is_key else ''}" for c in new.columns)
            raise StatementError(f"Cannot upgrade data source: DataSource '`{existing.name}`' has schema = {old_schema} which "
                                 f"is not upgradeable to {new_schema}. (only adding value columns at the end, with the same "
                                 "topic, formats and key, is compatible)")

    def _plan_create_as(self, stmt: ast.CreateAsSelect, topics: Mapping[str, int] | None,
                        plan: Mapping[str, Any] | None) -> _Plan:
        existing = self._existing_conflict(stmt.kind, stmt.name, stmt.or_replace, stmt.if_not_exists)
        if existing is not None and stmt.if_not_exists:
            return _Plan(stmt, dict(plan or {}), noop_message=f"Cannot add {_lower_kind(stmt.kind)} `{stmt.name}`: "
                         f"A {_lower_kind(existing.kind)} with the same name already exists.")
        if stmt.query.limit is not None:
            raise StatementError(f"CREATE {stmt.kind.value} AS SELECT statements don't support LIMIT clause.")
        sources = {n: s for n, s in self._sources.items() if n != stmt.name or existing is None}
        if existing is not None:
            sources[stmt.name] = existing
        analyzed = analyze_query(stmt.query, sources, sink=stmt.name)
        if analyzed.result_kind is not stmt.kind:
            produced = analyzed.result_kind.value
            raise StatementError(f"Invalid result type. Your SELECT query produces a {produced}. Please use CREATE {produced} AS "
                                 "SELECT statement instead.")
        if any(s.name == stmt.name for s in analyzed.sources.values()):
            raise StatementError(f"Cannot {'replace' if existing else 'create'} {stmt.name}: a query cannot read from its own "
                                 "sink.")
        props = stmt.properties
        from_source = analyzed.sources[analyzed.from_alias]
        topic = str(_prop(props, "KAFKA_TOPIC") or stmt.name)
        fmt = _prop(props, "FORMAT")
        value_raw = _prop(props, "VALUE_FORMAT") or fmt
        value_format = _fmt(value_raw, "VALUE_FORMAT") if value_raw is not None else from_source.value_format
        key_raw = _prop(props, "KEY_FORMAT") or fmt
        partition_by_null = len(stmt.query.partition_by) == 1 and isinstance(stmt.query.partition_by[0], exp.Null)
        if partition_by_null:
            # ksqlDB: PARTITION BY NULL gives a key-less stream whose key format is NONE
            if key_raw is not None and str(key_raw).upper() != "NONE":
                raise StatementError("Key format specified for stream without key columns.")
            key_format = Format.NONE
        elif key_raw is not None:
            key_format = _fmt(key_raw, "KEY_FORMAT")
        elif from_source.key_format is Format.NONE and analyzed.key_columns:
            key_format = Format.KAFKA
        else:
            key_format = from_source.key_format
        _check_kafka_format(key_format, analyzed.key_columns, "KEY_FORMAT")
        _check_kafka_format(value_format, analyzed.value_columns, "VALUE_FORMAT")
        partitions = _int_prop(props, "PARTITIONS")
        replicas = _int_prop(props, "REPLICAS")
        default_partitions = max((s.partitions for s in analyzed.sources.values()), default=1)
        n, create = self._topic_partitions(stmt, topic, partitions, replicas, topics, plan, default_partitions)
        ts_col, ts_fmt = _timestamp_column(props, analyzed.columns)
        _check_wrap_single_value(props, value_format, analyzed.value_columns)
        source = SourceInfo(
            name=stmt.name, kind=stmt.kind, topic=topic, key_format=key_format, value_format=value_format,
            columns=analyzed.columns, statement=stmt.text, partitions=n, replicas=replicas or 1, timestamp_column=ts_col,
            timestamp_format=ts_fmt, value_delimiter=_delimiter(props, value_format), window=analyzed.window)
        if existing is not None:
            self._check_replace(existing, source)
        return _Plan(stmt, {"topic": topic, "partitions": n, "replicas": replicas or 1, "createTopic": create},
                     source=source, analyzed=analyzed, replace=existing)

    def _plan_insert(self, stmt: ast.InsertInto) -> _Plan:
        target = self._sources.get(stmt.target)
        if target is None:
            raise StatementError(f"Source `{stmt.target}` does not exist.")
        if target.kind is not SourceKind.STREAM:
            raise StatementError(f"INSERT INTO can only be used to insert into a stream. {stmt.target} is a table.")
        if target.read_only:
            raise StatementError(f"Cannot insert into read-only stream: {stmt.target}")
        analyzed = analyze_query(stmt.query, self._sources, sink=stmt.target)
        if analyzed.result_kind is not SourceKind.STREAM:
            raise StatementError(f"INSERT INTO can only be used to insert into a stream. The query produces a "
                                 f"{analyzed.result_kind.value.lower()}.")
        result_schema = analyzed.schema_text()
        sink_schema = ", ".join(f"`{c.name}` {c.type.ksql_name}{' KEY' if c.is_key else ''}" for c in target.columns)
        if result_schema != sink_schema:
            raise StatementError(f"Incompatible schema between results and sink.\nResult schema is {result_schema}\n"
                                 f"Sink schema is {sink_schema}")
        if any(s.name == stmt.target for s in analyzed.sources.values()):
            raise StatementError(f"Cannot insert into {stmt.target}: a query cannot read from its own sink.")
        query_id = _prop(stmt.properties, "QUERY_ID")
        plan: dict[str, Any] = {}
        if query_id is not None:
            qid = str(query_id).upper()
            for prefix in ("INSERTQUERY_", "CTAS_", "CSAS_", "CST_"):
                if qid.startswith(prefix):
                    raise StatementError("Query IDs must not start with a reserved query ID prefix (INSERTQUERY_, CTAS_, "
                                         f"CSAS_, CST_). Got '{qid}'.")
            if not qid.replace("_", "").isalnum():
                raise StatementError(f"Query IDs may contain only alphanumeric characters and '_'. Got: '{qid}'")
            if qid in self._queries:
                raise StatementError(f"Query ID '{qid}' already exists.")
            plan["queryId"] = qid
        return _Plan(stmt, plan, source=target, analyzed=analyzed)

    def _plan_drop(self, stmt: ast.DropSource) -> _Plan:
        existing = self._sources.get(stmt.name)
        kind = _lower_kind(stmt.kind)
        if existing is None:
            if stmt.if_exists:
                return _Plan(stmt, {}, noop_message=f"Source `{stmt.name}` does not exist.")
            raise StatementError(f"{kind.capitalize()} {stmt.name} does not exist.")
        if existing.kind is not stmt.kind:
            raise StatementError(f"Incompatible data source type is {_lower_kind(existing.kind)}, but statement was DROP {kind}")
        if existing.read_only and stmt.delete_topic:
            raise StatementError(f"Cannot delete topic for read-only source: {stmt.name}")
        if stmt.delete_topic:
            sharing = sorted(s.name for s in self._sources.values() if s.topic == existing.topic and s.name != stmt.name)
            if sharing:
                raise StatementError(f"Refusing to delete topic. Found other data sources ({', '.join(sharing)}) using topic "
                                     f"{existing.topic}")
        # ksqlDB checks the INSERT INTO queries first, then the sources created from this one
        readers = [q for q in self.readers_of(stmt.name) if q.startswith("INSERTQUERY_") or not self._is_create_as(q)]
        writers = [q for q in self.writers_of(stmt.name) if q != existing.created_by]
        if readers or writers:
            raise StatementError(f"Cannot drop {stmt.name}.\n"
                                 f"The following queries read from this source: [{', '.join(readers)}].\n"
                                 f"The following queries write into this source: [{', '.join(writers)}].\n"
                                 f"You need to terminate them before dropping {stmt.name}.")
        dependants = self.referenced_by(stmt.name)
        if dependants:
            raise StatementError(f"Cannot drop {stmt.name}.\nThe following streams and/or tables read from this source: "
                                 f"[{', '.join(dependants)}].\nYou need to drop them before dropping {stmt.name}.")
        return _Plan(stmt, {}, source=existing)

    def _is_create_as(self, query_id: str) -> bool:
        info = self._queries.get(query_id)
        if info is None:
            return False
        sink = self._sources.get(info.sink)
        return sink is not None and sink.created_by == query_id

    # -- execution -----------------------------------------------------------------------------

    def _execute(self, p: _Plan, command: Command, offset: int) -> list[Effect]:
        stmt = p.stmt
        if p.noop_message is not None:
            return [CommandResult("SUCCESS", p.noop_message)]
        effects: list[Effect] = []
        if isinstance(stmt, ast.CreateSource):
            assert p.source is not None
            if p.plan.get("createTopic"):
                effects.append(CreateTopic(p.source.topic, p.source.partitions, p.source.replicas,
                                           compacted=p.source.kind is SourceKind.TABLE))
            self._sources[stmt.name] = p.source
            self._references.pop(stmt.name, None)
            kind = "Stream" if stmt.kind is SourceKind.STREAM else "Table"
            effects.append(CommandResult("SUCCESS", f"{kind} created"))
            return effects
        if isinstance(stmt, ast.CreateAsSelect):
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
        if isinstance(stmt, ast.InsertInto):
            assert p.source is not None
            assert p.analyzed is not None
            query_id = p.plan.get("queryId") or f"INSERTQUERY_{offset}"
            info = self._register_query(query_id, stmt.text, p.source, stmt.query, p.analyzed, offset, command)
            effects.append(StartQuery(info, p.source, p.analyzed, dict(command.streams_properties)))
            effects.append(CommandResult("SUCCESS", f"Created query with ID {query_id}", query_id))
            return effects
        if isinstance(stmt, ast.DropSource):
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
        if isinstance(stmt, ast.Terminate):
            ids = [stmt.query_id] if stmt.query_id is not None else [q.query_id for q in self.queries()]
            for qid in ids:
                effects.append(StopQuery(qid))
                self._drop_query(qid)
            effects.append(CommandResult("SUCCESS", "Query terminated." if stmt.query_id else "All queries terminated."))
            return effects
        raise StatementError(f"Unsupported statement: {type(stmt).__name__}")

    def _register_query(self, query_id: str, text: str, sink: SourceInfo, query: ast.Query, analyzed: AnalyzedQuery,
                        offset: int, command: Command) -> QueryInfo:
        source_names = tuple(dict.fromkeys(s.name for s in analyzed.sources.values()))
        info = QueryInfo(query_id=query_id, statement=text, sink=sink.name, sources=source_names, query=query,
                         output_columns=analyzed.columns, command_offset=offset)
        self._queries[query_id] = info
        self._analyzed[query_id] = analyzed
        self._query_properties[query_id] = dict(command.streams_properties)
        return info

    def _drop_query(self, query_id: str) -> None:
        info = self._queries.pop(query_id, None)
        self._analyzed.pop(query_id, None)
        self._query_properties.pop(query_id, None)
        if info is None:
            return
        sink = self._sources.get(info.sink)
        if sink is not None and sink.created_by == query_id:
            # the sink stays (as in ksqlDB) but is no longer written by a query
            self._sources[info.sink] = replace(sink, created_by=None)


def _parse_one(text: str) -> ast.Statement:
    """Parse a command's statement text (a decoded command has no AST)."""
    # the parser package is only needed when replaying commands written by another process
    parser = importlib.import_module("oncestream.sql.parser")
    stmts: list[ast.Statement] = parser.parse(text)
    if len(stmts) != 1:
        raise StatementError(f"expected one statement in a command, got {len(stmts)}")
    return stmts[0]
