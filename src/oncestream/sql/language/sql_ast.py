"""ksqlDB statements as parsed (by ``oncestream.sql.language.parser``), before any check against the
metastore.

Names: unquoted identifiers are upper-cased by the parser (as ksqlDB does); back-quoted ones keep
their case. Every name in these dataclasses is already normalised that way.

Expressions (select items, WHERE, GROUP BY, PARTITION BY, join conditions, VALUES) are sqlglot
trees (``sqlglot.exp.Expression``) with ksqlDB's own syntax already rewritten to standard nodes:
struct access ``a->b`` is ``exp.Dot``; array index ``a[1]`` is ``exp.Bracket`` with ksqlDB's
1-based index kept as written (the compiler maps it); identifiers are ``exp.Column`` with the
normalised name. ksqlDB-only clauses are lifted out of the SELECT into the fields of ``Query``
(``WINDOW``, ``WITHIN``, ``PARTITION BY``, ``EMIT CHANGES|FINAL``, ``LIMIT``), so ``Query.select``
holds only what standard SQL has.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from sqlglot import exp

from oncestream.sql.language.types import SqlType


class SourceKind(Enum):
    STREAM = "STREAM"
    TABLE = "TABLE"


class WindowKind(Enum):
    TUMBLING = "TUMBLING"
    HOPPING = "HOPPING"
    SESSION = "SESSION"


class Emit(Enum):
    """``EMIT CHANGES`` (push / persistent) or ``EMIT FINAL`` (suppressed windows); ``NONE`` for a
    pull query (no EMIT clause)."""

    NONE = "NONE"
    CHANGES = "CHANGES"
    FINAL = "FINAL"


@dataclass(frozen=True)
class Position:
    """Where a statement or token starts in the request text (1-based line and column)."""

    line: int
    column: int


@dataclass(frozen=True)
class ColumnDef:
    """A column of CREATE STREAM/TABLE: ``name type [KEY | PRIMARY KEY | HEADERS]``."""

    name: str
    type: SqlType
    key: bool = False           # KEY (stream) or PRIMARY KEY (table)
    primary_key: bool = False   # written as PRIMARY KEY (only legal on tables)
    headers: bool = False       # HEADERS or HEADER('k'): read from the record's headers, never written
    header_key: str | None = None   # HEADER('k'): the last header with key k; None with HEADERS (all of them)


@dataclass(frozen=True)
class WindowSpec:
    """``WINDOW TUMBLING (SIZE ...)``, ``HOPPING (SIZE ..., ADVANCE BY ...)``,
    ``SESSION (gap)``, each with optional ``RETENTION`` and ``GRACE PERIOD``."""

    kind: WindowKind
    size_ms: int                      # SESSION: the inactivity gap
    advance_ms: int | None = None     # HOPPING only
    retention_ms: int | None = None
    grace_ms: int | None = None


@dataclass(frozen=True)
class JoinSpec:
    """One join of the FROM clause, in order: ``[LEFT | RIGHT | FULL [OUTER] | INNER] JOIN source
    [alias] [WITHIN (before, after) | WITHIN n unit] ON condition``."""

    kind: str                         # "INNER" | "LEFT" | "RIGHT" | "FULL"
    source: str                       # the joined source's name
    alias: str | None
    on: exp.Expression
    within_before_ms: int | None = None
    within_after_ms: int | None = None
    within_grace_ms: int | None = None


@dataclass(frozen=True)
class Query:
    """A SELECT as ksqlDB writes it.

    ``select`` is the sqlglot SELECT holding the projection, the FROM source (first one only),
    WHERE, GROUP BY and HAVING; joins are in ``joins`` (not in ``select``)."""

    select: exp.Select
    source: str                       # the FROM source's name
    source_alias: str | None
    joins: tuple[JoinSpec, ...] = ()
    window: WindowSpec | None = None
    partition_by: tuple[exp.Expression, ...] = ()
    emit: Emit = Emit.NONE
    limit: int | None = None

    @property
    def is_push(self) -> bool:
        return self.emit is not Emit.NONE


@dataclass(frozen=True)
class Statement:
    """Base of every statement: its own text (as ksqlDB echoes it in ``statementText``, with the
    trailing semicolon) and where it starts in the request."""

    text: str
    position: Position


@dataclass(frozen=True)
class CreateSource(Statement):
    """``CREATE [OR REPLACE] [SOURCE] STREAM|TABLE [IF NOT EXISTS] name (columns) WITH (...)``."""

    kind: SourceKind
    name: str
    columns: tuple[ColumnDef, ...]
    properties: dict[str, Any] = field(default_factory=dict)   # upper-cased keys: KAFKA_TOPIC, ...
    if_not_exists: bool = False
    or_replace: bool = False
    read_only: bool = False          # CREATE SOURCE STREAM|TABLE


@dataclass(frozen=True)
class CreateAsSelect(Statement):
    """``CREATE [OR REPLACE] STREAM|TABLE [IF NOT EXISTS] name [WITH (...)] AS SELECT ...``."""

    kind: SourceKind
    name: str
    query: Query
    properties: dict[str, Any] = field(default_factory=dict)
    if_not_exists: bool = False
    or_replace: bool = False


@dataclass(frozen=True)
class InsertInto(Statement):
    """``INSERT INTO target [WITH (QUERY_ID='...')] SELECT ...``."""

    target: str
    query: Query
    properties: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class InsertValues(Statement):
    """``INSERT INTO target [(col, ...)] VALUES (expr, ...)``."""

    target: str
    columns: tuple[str, ...] | None
    values: tuple[exp.Expression, ...]


@dataclass(frozen=True)
class DropSource(Statement):
    """``DROP STREAM|TABLE [IF EXISTS] name [DELETE TOPIC]``."""

    kind: SourceKind
    name: str
    if_exists: bool = False
    delete_topic: bool = False


@dataclass(frozen=True)
class Terminate(Statement):
    """``TERMINATE query_id`` or ``TERMINATE ALL`` (``query_id`` None)."""

    query_id: str | None


@dataclass(frozen=True)
class PrintTopic(Statement):
    """``PRINT topic [FROM BEGINNING] [INTERVAL|SAMPLE n] [LIMIT n]``: the topic's records as text
    lines, streamed by the query endpoints. ``topic`` keeps its case (ksqlDB looks the name up
    case-sensitively); ``interval`` prints every n-th record (1: all); ``limit`` None: no limit."""

    topic: str
    from_beginning: bool
    interval: int = 1
    limit: int | None = None


@dataclass(frozen=True)
class PauseQuery(Statement):
    """``PAUSE query_id`` or ``PAUSE ALL`` (``query_id`` None): the query stops processing and
    keeps its state and position until RESUME."""

    query_id: str | None


@dataclass(frozen=True)
class ResumeQuery(Statement):
    """``RESUME query_id`` or ``RESUME ALL`` (``query_id`` None): a paused query goes on from
    where it stopped."""

    query_id: str | None


class ShowWhat(Enum):
    STREAMS = "STREAMS"
    TABLES = "TABLES"
    QUERIES = "QUERIES"
    TOPICS = "TOPICS"
    PROPERTIES = "PROPERTIES"
    FUNCTIONS = "FUNCTIONS"
    VARIABLES = "VARIABLES"
    TYPES = "TYPES"


@dataclass(frozen=True)
class Show(Statement):
    """``SHOW|LIST STREAMS|TABLES|QUERIES|TOPICS|PROPERTIES|FUNCTIONS|VARIABLES [EXTENDED]``."""

    what: ShowWhat
    extended: bool = False


@dataclass(frozen=True)
class Describe(Statement):
    """``DESCRIBE name [EXTENDED]``, ``DESCRIBE STREAMS|TABLES [EXTENDED]`` (``name`` None and
    ``what`` set), ``DESCRIBE FUNCTION name``."""

    name: str | None
    extended: bool = False
    what: ShowWhat | None = None
    function: bool = False


@dataclass(frozen=True)
class Explain(Statement):
    """``EXPLAIN query_id`` or ``EXPLAIN <statement>``."""

    query_id: str | None = None
    statement: Statement | None = None


@dataclass(frozen=True)
class CreateType(Statement):
    """``CREATE TYPE [IF NOT EXISTS] name AS type``: a named type for later column lists."""

    name: str
    type: SqlType
    if_not_exists: bool = False


@dataclass(frozen=True)
class DropType(Statement):
    """``DROP TYPE [IF EXISTS] name``."""

    name: str
    if_exists: bool = False


@dataclass(frozen=True)
class AlterSource(Statement):
    """``ALTER STREAM|TABLE name ADD [COLUMN] col type, ...``: value columns added at the end."""

    kind: SourceKind
    name: str
    columns: tuple[ColumnDef, ...]


@dataclass(frozen=True)
class DefineVariable(Statement):
    """``DEFINE name = 'value'``: a session variable, referenced as ``${name}`` by later statements."""

    name: str
    value: str


@dataclass(frozen=True)
class UndefineVariable(Statement):
    """``UNDEFINE name``."""

    name: str


@dataclass(frozen=True)
class SetProperty(Statement):
    """``SET 'name' = 'value'``."""

    name: str
    value: str


@dataclass(frozen=True)
class UnsetProperty(Statement):
    """``UNSET 'name'``."""

    name: str


@dataclass(frozen=True)
class QueryStatement(Statement):
    """A bare ``SELECT ...;`` (push query with EMIT CHANGES, else a pull query)."""

    query: Query
