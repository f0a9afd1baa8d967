"""What the metastore holds: sources (streams and tables) and persistent queries.

These are plain immutable values; ``oncestream.sql.server.metastore.Metastore`` owns the mutable map
from names to them. Every node builds identical values from the same command-topic prefix, so
nothing here may depend on the node (no wall clock, no host): query ids, for example, are derived
from the command's offset in the command topic.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from oncestream.sql.language.sql_ast import Query, SourceKind, WindowSpec
from oncestream.sql.language.types import SqlType


class Format(Enum):
    """Key and value formats (``KEY_FORMAT`` / ``VALUE_FORMAT``). ``NONE`` is a source with no key
    columns (its records' keys are ignored / written null)."""

    JSON = "JSON"
    DELIMITED = "DELIMITED"
    KAFKA = "KAFKA"
    NONE = "NONE"
    AVRO = "AVRO"          # framed Avro, schema in the Schema Registry
    JSON_SR = "JSON_SR"    # framed JSON, JSON Schema in the Schema Registry (JSON reads it too)
    PROTOBUF = "PROTOBUF"  # framed Protobuf (with message indexes), schema in the Schema Registry
    PROTOBUF_NOSR = "PROTOBUF_NOSR"  # plain Protobuf binary, the schema from the declared columns


def registry_subject(topic: str, *, key: bool) -> str:
    """The Schema Registry subject of ``topic``'s key or value schema: ksqlDB (and the Confluent
    serializers' default TopicNameStrategy) name it ``<topic>-key`` / ``<topic>-value``."""
    return f"{topic}-{'key' if key else 'value'}"


class Namespace(Enum):
    KEY = "KEY"
    VALUE = "VALUE"
    HEADERS = "HEADERS"   # HEADERS / HEADER('k') columns: read from the record's headers, never written


@dataclass(frozen=True)
class Column:
    """A column of a source. Key columns come first in ksqlDB's DESCRIBE output. A header column
    (namespace HEADERS) is neither key nor value: ``header_key`` None holds all the record's
    headers (HEADERS), else the last header with that key (HEADER('k'))."""

    name: str
    type: SqlType
    namespace: Namespace = Namespace.VALUE
    header_key: str | None = None

    @property
    def is_key(self) -> bool:
        return self.namespace is Namespace.KEY

    @property
    def is_header(self) -> bool:
        return self.namespace is Namespace.HEADERS

    @property
    def is_value(self) -> bool:
        return self.namespace is Namespace.VALUE

    @property
    def schema_text(self) -> str:
        """The column as ksqlDB's schema strings write it (Column.toString):
        ```ID` INTEGER KEY``, ```H` BYTES HEADER('k')``, ```V` BIGINT``."""
        suffix = ""
        if self.is_key:
            suffix = " KEY"
        elif self.is_header:
            suffix = " HEADERS" if self.header_key is None else f" HEADER('{self.header_key}')"
        return f"`{self.name}` {self.type.ksql_name}{suffix}"


# Pseudo columns every source has (ksqlDB's SystemColumns); never stored in the value.
ROWTIME = "ROWTIME"            # the record timestamp (BIGINT ms)
ROWPARTITION = "ROWPARTITION"  # INTEGER
ROWOFFSET = "ROWOFFSET"        # BIGINT
WINDOWSTART = "WINDOWSTART"    # windowed sources only (BIGINT ms)
WINDOWEND = "WINDOWEND"


@dataclass(frozen=True)
class SourceInfo:
    """A stream or table of the metastore."""

    name: str
    kind: SourceKind
    topic: str
    key_format: Format
    value_format: Format
    columns: tuple[Column, ...]             # key columns first, then value and header columns, declared order
    statement: str                          # the statement that created it (DESCRIBE EXTENDED shows it)
    partitions: int = 1
    replicas: int = 1
    timestamp_column: str | None = None     # WITH (TIMESTAMP='col'), else ROWTIME
    timestamp_format: str | None = None     # WITH (TIMESTAMP_FORMAT='yyyy-MM-dd ...')
    value_delimiter: str = ","              # DELIMITED only (VALUE_DELIMITER)
    key_delimiter: str = ","                # DELIMITED keys only (KEY_DELIMITER)
    window: WindowSpec | None = None        # windowed table/stream (the key carries the window)
    read_only: bool = False                 # CREATE SOURCE STREAM|TABLE
    created_by: str | None = None           # id of the persistent query writing it (C*AS)
    key_schema_id: int | None = None        # AVRO/JSON_SR: WITH (KEY_SCHEMA_ID=...) or the id inferred from
    value_schema_id: int | None = None      # VALUE_SCHEMA_ID (records are written with that schema)
    key_schema_name: str | None = None      # KEY_SCHEMA_FULL_NAME: the message/record the key schema names
    value_schema_name: str | None = None    # VALUE_(AVRO_)SCHEMA_FULL_NAME (PROTOBUF: which message of the file)
    # WRAP_SINGLE_VALUE=false (or ksql.persistence.wrap.single.values=false): the one value column
    # is written bare (an anonymous primitive, array, map or struct), not as a field of a record
    # (ksqlDB's UNWRAP_SINGLES value feature; JSON, AVRO, JSON_SR and PROTOBUF_NOSR support it)
    value_unwrapped: bool = False
    # PROTOBUF / PROTOBUF_NOSR: KEY_/VALUE_PROTOBUF_NULLABLE_REPRESENTATION, "OPTIONAL" (proto3
    # `optional` fields) or "WRAPPER" (google.protobuf wrappers); None: plain proto3 fields
    key_protobuf_nullable: str | None = None
    value_protobuf_nullable: str | None = None

    @property
    def key_columns(self) -> tuple[Column, ...]:
        return tuple(c for c in self.columns if c.is_key)

    @property
    def value_columns(self) -> tuple[Column, ...]:
        """The columns of the record's value (neither key nor header columns)."""
        return tuple(c for c in self.columns if c.is_value)

    @property
    def header_columns(self) -> tuple[Column, ...]:
        return tuple(c for c in self.columns if c.is_header)

    def column(self, name: str) -> Column | None:
        return next((c for c in self.columns if c.name == name), None)


class QueryKind(Enum):
    PERSISTENT = "PERSISTENT"   # CREATE ... AS SELECT, INSERT INTO ... SELECT
    PUSH = "PUSH"               # transient SELECT ... EMIT CHANGES (never in the metastore)


@dataclass(frozen=True)
class QueryInfo:
    """A persistent query of the metastore (started on whichever node the assignment gives it).

    ``query_id`` is ksqlDB's form, made unique by the command's command-topic offset:
    ``CSAS_<SINK>_<offset>``, ``CTAS_<SINK>_<offset>``, ``INSERTQUERY_<offset>``.
    ``output_schema`` is the sink's columns (as the analyzer computed them)."""

    query_id: str
    statement: str
    sink: str
    sources: tuple[str, ...]
    query: Query
    output_columns: tuple[Column, ...]
    command_offset: int
