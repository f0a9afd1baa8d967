"""The rules of the statements that change the catalog (CREATE, CREATE ... AS SELECT, INSERT INTO,
DROP, TERMINATE, PAUSE, RESUME, CREATE / DROP TYPE, ALTER ... ADD COLUMN), checked
as ksqlDB checks them: ``StatementPlanner(catalog).plan(stmt, topics,
plan)`` says what a statement does (the source it creates, the query it starts, the topic it needs)
or raises ``StatementError`` with ksqlDB's message.

Sans-io and deterministic: the catalog is read through ``CatalogView`` (the metastore implements
it), existing topics come as a mapping, nothing here reads a clock or Kafka. The metastore
(``oncestream.sql.server.metastore``) validates with it before writing a command and applies the
same plan when the command comes back from the command topic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from sqlglot import exp

from oncestream.sql.errors import StatementError
from oncestream.sql.language import catalog, sql_ast
from oncestream.sql.language.analyzer import AnalyzedQuery, analyze_query
from oncestream.sql.language.analyzer_expr import column_ref, no_map_key
from oncestream.sql.language.catalog import Column, Format, Namespace, QueryInfo, SourceInfo
from oncestream.sql.language.format_rules import (
    check_avro_names,
    check_format_properties,
    check_map_keys,
    full_schema_name,
)
from oncestream.sql.language.protobuf_schema import file_descriptor, needs_references
from oncestream.sql.language.schema_mapping import columns_of
from oncestream.sql.language.sql_ast import SourceKind, WindowKind, WindowSpec
from oncestream.sql.language.statement_text import create_as_text
from oncestream.sql.language.types import BaseType, SqlType

RESERVED_COLUMNS = (catalog.ROWTIME, catalog.ROWPARTITION, catalog.ROWOFFSET, catalog.WINDOWSTART, catalog.WINDOWEND)
SUPPORTED_FORMATS = {f.value: f for f in Format}
REGISTRY_FORMATS = (Format.AVRO, Format.JSON_SR, Format.PROTOBUF)
_SCHEMA_TYPE = {Format.AVRO: "AVRO", Format.JSON_SR: "JSON", Format.PROTOBUF: "PROTOBUF"}


class SchemaLookup(Protocol):
    """The Schema Registry as the planner reads it when validating (``RegistryClient`` is one):
    answers have ``schema_id``, ``schema_type`` and ``schema``."""

    def latest(self, subject: str) -> Any: ...

    def by_id(self, schema_id: int) -> Any: ...

    def serialized(self, schema_id: int) -> str: ...

    def dependencies(self, schema_id: int) -> list[tuple[str, str]]: ...


class CatalogView(Protocol):
    """The catalog a statement is checked against (``Metastore`` implements it)."""

    def source_map(self) -> dict[str, SourceInfo]: ...

    def query(self, query_id: str) -> QueryInfo | None: ...

    def readers_of(self, name: str) -> list[str]: ...

    def writers_of(self, name: str) -> list[str]: ...

    def referenced_by(self, name: str) -> list[str]: ...

    def custom_type(self, name: str) -> SqlType | None: ...

    def created_as_select(self, name: str) -> bool: ...


def _prop(props: Mapping[str, Any], name: str) -> Any:
    for k, v in props.items():
        if k.upper() == name:
            return v
    return None


def _fmt(value: Any) -> Format:
    """A ``FORMAT``/``KEY_FORMAT``/``VALUE_FORMAT`` value (ksqlDB's ``FormatFactory.of``: any case)."""
    text = str(value).upper()
    fmt = SUPPORTED_FORMATS.get(text)
    if fmt is None:
        raise StatementError(f"Unknown format: {text}")
    return fmt


def _default_format(configured: Any, which: str) -> Any:
    """The default ``KEY``/``VALUE`` format (``ksql.persistence.default.format.*``) a CREATE takes
    when its WITH clause has none; ksqlDB's error when the config has none either."""
    if configured is None or str(configured).strip() == "":
        raise StatementError(f"Statement is missing the '{which}_FORMAT' property from the WITH clause. Either provide "
                             f"one or set a default via the 'ksql.persistence.default.format.{which.lower()}' config.")
    return configured


def _check_format_choice(props: Mapping[str, Any]) -> None:
    """``FORMAT`` sets both formats, so neither ``KEY_FORMAT`` nor ``VALUE_FORMAT`` may be given
    with it (ksqlDB's ``CommonCreateConfigs.validateKeyValueFormats``, checked on the WITH clause
    before anything else)."""
    if _prop(props, "FORMAT") is None:
        return
    for which in ("KEY_FORMAT", "VALUE_FORMAT"):
        if _prop(props, which) is not None:
            raise StatementError(f"Cannot supply both '{which}' and 'FORMAT' properties, as 'FORMAT' sets both key and "
                                 "value formats. Either use just 'FORMAT', or use 'KEY_FORMAT' and 'VALUE_FORMAT'.")


def _check_schema_ids(props: Mapping[str, Any], key_format: Format, value_format: Format,
                      declared: Sequence[sql_ast.ColumnDef] | None) -> None:
    """``KEY_SCHEMA_ID``/``VALUE_SCHEMA_ID`` need a format that reads its columns from the
    registry, and (a CREATE with ``declared`` columns) no declared columns on that side: ksqlDB's
    ``DefaultSchemaInjector``, checked before the registry is asked."""
    for key, fmt in ((True, key_format), (False, value_format)):
        which = "KEY_SCHEMA_ID" if key else "VALUE_SCHEMA_ID"
        if _prop(props, which) is None:
            continue
        if fmt not in REGISTRY_FORMATS:
            raise StatementError(f"{'KEY_FORMAT' if key else 'VALUE_FORMAT'} should support schema inference when "
                                 f"{which} is provided. Current format is {fmt.value}.")
        if declared and any(bool(cd.key or cd.primary_key) is key for cd in declared):
            raise StatementError(f"Table elements and {which} cannot both exist for create statement.")


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
    check_map_keys(fmt, columns)
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


WRAP_SINGLE_VALUES_CONFIG = "ksql.persistence.wrap.single.values"
HEADERS_COLUMNS_CONFIG = "ksql.headers.columns.enabled"   # false: CREATE refuses HEADERS/HEADER columns
# The formats a CREATE STREAM/TABLE takes when its WITH clause names none (ksqlDB's
# DefaultFormatInjector): the key's defaults to KAFKA, the value's to none (the statement is refused)
DEFAULT_KEY_FORMAT_CONFIG = "ksql.persistence.default.format.key"
DEFAULT_VALUE_FORMAT_CONFIG = "ksql.persistence.default.format.value"
# The configs whose server value a statement takes when its request does not set them (recorded
# in the command, so every node applies the statement alike)
# ksqlDB's ksql.output.topic.name.prefix: put before the default topic name of a C*AS sink (its
# name) when the statement names no KAFKA_TOPIC
OUTPUT_TOPIC_PREFIX_CONFIG = "ksql.output.topic.name.prefix"
STATEMENT_DEFAULT_CONFIGS = (WRAP_SINGLE_VALUES_CONFIG, DEFAULT_KEY_FORMAT_CONFIG, DEFAULT_VALUE_FORMAT_CONFIG,
                             OUTPUT_TOPIC_PREFIX_CONFIG)


def with_server_defaults(request: Mapping[str, Any], server: Mapping[str, Any]) -> dict[str, Any]:
    """The request's properties plus the server's STATEMENT_DEFAULT_CONFIGS it does not set
    (ksqlDB: the request's properties over the server's)."""
    defaults = {name: server[name] for name in STATEMENT_DEFAULT_CONFIGS if server.get(name) is not None}
    return {**defaults, **request}
# The value wrappings each format supports (ksqlDB's Format.supportedFeatures): True WRAP_SINGLES,
# False UNWRAP_SINGLES; KAFKA and DELIMITED never wrap, PROTOBUF always does, NONE has no value.
_WRAPPINGS: dict[Format, tuple[bool, ...]] = {
    Format.JSON: (True, False), Format.JSON_SR: (True, False), Format.AVRO: (True, False),
    Format.PROTOBUF_NOSR: (True, False), Format.PROTOBUF: (True,), Format.KAFKA: (False,),
    Format.DELIMITED: (False,), Format.NONE: (),
}


def _bool_setting(raw: Any, name: str) -> bool | None:
    if raw is None:
        return None
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise StatementError(f"Invalid value {raw} for configuration {name}: Expected value to be either true or false")
    return text == "true"


def explicit_wrap(props: Mapping[str, Any]) -> bool | None:
    """``WITH (WRAP_SINGLE_VALUE=...)``: True, False, or None when the statement does not say."""
    return _bool_setting(_prop(props, "WRAP_SINGLE_VALUE"), "WRAP_SINGLE_VALUE")


def default_wrap(properties: Mapping[str, Any] | None) -> bool | None:
    """``ksql.persistence.wrap.single.values`` of the request (or the server), None when unset."""
    return _bool_setting((properties or {}).get(WRAP_SINGLE_VALUES_CONFIG), WRAP_SINGLE_VALUES_CONFIG)


def value_unwrapped(props: Mapping[str, Any], value_format: Format, value_columns: tuple[Column, ...],
                    config_wrap: bool | None) -> bool:
    """Whether the single value column is written bare (ksqlDB's ``SerdeFeaturesFactory.
    buildValueFeatures``): an explicit ``WRAP_SINGLE_VALUE`` must be one the format supports and
    needs exactly one value column (ksqlDB's errors); else ``ksql.persistence.wrap.single.values``
    decides for a single column when the format supports its choice. Only the formats that can
    do both report True (KAFKA and DELIMITED values are bare by nature)."""
    supported = _WRAPPINGS.get(value_format, ())
    wrap = explicit_wrap(props)
    if wrap is not None:
        if wrap not in supported:
            raise StatementError(f"Format '{value_format.value}' does not support 'WRAP_SINGLE_VALUE' set to "
                                 f"'{str(wrap).lower()}'.")
        if len(value_columns) != 1:
            raise StatementError("'WRAP_SINGLE_VALUE' is only valid for single-field value schemas")
    elif len(value_columns) == 1 and config_wrap in supported:
        wrap = config_wrap
    return wrap is False and len(supported) == 2


_NULLABLE_REPRESENTATIONS = ("OPTIONAL", "WRAPPER")


def _protobuf_nullable(props: Mapping[str, Any], fmt: Format, which: str) -> str | None:
    """``KEY_/VALUE_PROTOBUF_NULLABLE_REPRESENTATION`` (ksqlDB's CreateSourceAsProperties):
    OPTIONAL or WRAPPER, and only for PROTOBUF and PROTOBUF_NOSR."""
    name = f"{which}_PROTOBUF_NULLABLE_REPRESENTATION"
    raw = _prop(props, name)
    if raw is None:
        return None
    text = str(raw)
    if text not in _NULLABLE_REPRESENTATIONS:
        raise StatementError(f"Invalid value {text} for configuration {name}: String must be one of: "
                             + ", ".join(_NULLABLE_REPRESENTATIONS))
    if fmt not in (Format.PROTOBUF, Format.PROTOBUF_NOSR):
        raise StatementError(f"Property {name} can only be enabled with protobuf format")
    return text


def _delimiter(props: Mapping[str, Any], value_format: Format, prop: str = "VALUE_DELIMITER") -> str:
    """``VALUE_DELIMITER`` (or ``KEY_DELIMITER`` of the key's format): one character, or TAB /
    SPACE; only for DELIMITED (ksqlDB's rules)."""
    raw = _prop(props, prop)
    if raw is None:
        return ","
    text = str(raw)
    named = {"TAB": "\t", "SPACE": " "}
    # ksqlDB's Delimiter.parse, run while the statement is prepared (hence the heading); Java's
    # trim() drops every character up to U+0020, so a lone tab or space is "empty"
    if not text.lstrip("".join(map(chr, range(0x21)))):
        raise StatementError(f"Failed to prepare statement: Configuration {prop} is invalid: Delimiter cannot be "
                             "empty, if you meant to have a tab or space for delimiter, please use the special values "
                             "'TAB' or 'SPACE'\nExample valid value: ';'")
    if len(text) != 1 and text.upper() not in named:
        raise StatementError(f"Failed to prepare statement: Configuration {prop} is invalid: Invalid delimiter "
                             f"value: '{text}'. Delimiter must be a single character or TAB,SPACE\nExample valid value: ';'")
    if value_format is not Format.DELIMITED:
        raise StatementError(f"{value_format.value} does not support the following configs: [delimiter]")
    return named.get(text.upper(), text)


def _sink_delimiter(props: Mapping[str, Any], fmt: Format, source_format: Format, source_delimiter: str,
                    prop: str) -> str:
    """A C*AS sink's delimiter of one side (``prop`` VALUE_DELIMITER or KEY_DELIMITER): its own,
    else its source's when both sides are DELIMITED (ksqlDB's Analyzer.buildFormatInfo inherits a
    format's properties from a source of the same format)."""
    if _prop(props, prop) is None and fmt is Format.DELIMITED and source_format is Format.DELIMITED:
        return source_delimiter
    return _delimiter(props, fmt, prop)


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


def _sink_schema_name(props: Mapping[str, Any], fmt: Format, source: SourceInfo, *, key: bool) -> str | None:
    """A C*AS sink's ``*_SCHEMA_FULL_NAME``: its own, else (PROTOBUF, whose format inherits it)
    the source's when the side keeps the source's format (ksqlDB's Analyzer.buildFormatInfo)."""
    own = full_schema_name(props, key=key)
    if own is not None:
        return own
    inherited = source.key_schema_name if key else source.value_schema_name
    same_format = fmt is (source.key_format if key else source.value_format)
    return inherited if fmt is Format.PROTOBUF and same_format else None


def _persistence_column(c: Column) -> str:
    return f"`{c.name}` {c.type.ksql_name}{' KEY' if c.is_key else ''}"


@dataclass
class StatementPlan:
    """What a statement does, computed from the catalog (the metastore's validate and apply share
    it): ``plan`` is what goes into the command (topic, partitions...), ``source`` the source it
    creates, inserts into or drops, ``analyzed`` its query, ``replace`` the source it replaces,
    ``noop_message`` set when it changes nothing (IF NOT EXISTS, IF EXISTS)."""

    stmt: sql_ast.Statement
    plan: dict[str, Any]
    source: SourceInfo | None = None
    analyzed: AnalyzedQuery | None = None
    replace: SourceInfo | None = None
    noop_message: str | None = None


class StatementPlanner:
    """Plans statements against one state of the catalog (build one per statement)."""

    def __init__(self, catalog_view: CatalogView, schemas: SchemaLookup | None = None,
                 properties: Mapping[str, Any] | None = None) -> None:
        self._catalog = catalog_view
        self._sources = catalog_view.source_map()
        self._schemas = schemas
        # the request's properties (the command's streamsProperties when applying): the defaults
        # statements take from them, ksql.persistence.wrap.single.values for one
        self._config_wrap = default_wrap(properties)
        self._default_key_format = (properties or {}).get(DEFAULT_KEY_FORMAT_CONFIG, Format.KAFKA.value)
        self._default_value_format = (properties or {}).get(DEFAULT_VALUE_FORMAT_CONFIG)
        self._output_topic_prefix = str((properties or {}).get(OUTPUT_TOPIC_PREFIX_CONFIG) or "")
        self._headers_enabled = _bool_setting((properties or {}).get(HEADERS_COLUMNS_CONFIG),
                                              HEADERS_COLUMNS_CONFIG) is not False

    def _registry_schema(self, fmt: Format, topic: str, props: Mapping[str, Any], key: bool,
                         plan: Mapping[str, Any] | None, recorded: dict[str, Any]) -> dict[str, Any] | None:
        """The registry schema a CREATE without columns reads its columns from: recorded in the
        command's plan when applying (so every node builds the same columns), else looked up
        (``<topic>-key``/``-value``'s latest, or ``KEY_SCHEMA_ID``/``VALUE_SCHEMA_ID``)."""
        side = "keySchema" if key else "valueSchema"
        if plan is not None:
            found = plan.get(side)
            if not isinstance(found, Mapping):
                return None
            recorded[side] = dict(found)
            return dict(found)
        schema_id = _int_prop(props, "KEY_SCHEMA_ID" if key else "VALUE_SCHEMA_ID")
        subject = catalog.registry_subject(topic, key=key)
        if self._schemas is None:
            raise StatementError(f"Schema Registry is not configured ('ksql.schema.registry.url'): cannot read the "
                                 f"{'key' if key else 'value'} columns of {fmt.value} from subject '{subject}'.")
        try:
            got = self._schemas.by_id(schema_id) if schema_id is not None else self._schemas.latest(subject)
        except Exception as e:  # noqa: BLE001 - the registry's refusal or absence, in the statement's error
            raise StatementError(f"Could not read the schema of subject '{subject}' from the Schema Registry: {e}") from None
        if got is None:
            if key:
                return None
            raise StatementError(f"Schema for message values on topic '{topic}' does not exist in the Schema Registry."
                                 f"\nSubject: {subject}")
        if got.schema_type != _SCHEMA_TYPE[fmt]:
            raise StatementError(f"Format '{fmt.value}' cannot read schema id {got.schema_id}: it is a "
                                 f"{got.schema_type} schema.")
        entry = {"id": int(got.schema_id), "type": str(got.schema_type), "schema": str(got.schema)}
        if fmt is Format.PROTOBUF:
            # The descriptor itself (the registry parses the .proto text; this layer has no parser).
            try:
                descriptor = str(self._schemas.serialized(got.schema_id))
                entry["descriptor"] = descriptor
                if needs_references(file_descriptor(descriptor)):   # the files its references name
                    entry["dependencies"] = [[str(n), str(d)] for n, d in self._schemas.dependencies(got.schema_id)]
            except Exception as e:  # noqa: BLE001 - the registry's refusal or absence, in the statement's error
                raise StatementError(f"Could not read the descriptor of schema id {got.schema_id}: {e}") from None
        recorded[side] = entry
        return entry

    def _sink_schema_id(self, fmt: Format, topic: str, props: Mapping[str, Any], columns: tuple[Column, ...], *,
                        key: bool, validating: bool) -> int | None:
        """A C*AS's ``KEY_SCHEMA_ID``/``VALUE_SCHEMA_ID``: the schema its sink writes with, checked
        as ksqlDB's ``DefaultSchemaInjector`` does when validating (the format reads schemas, the
        schema exists and is of the format's type, its columns start with the query's)."""
        which = "KEY_SCHEMA_ID" if key else "VALUE_SCHEMA_ID"
        schema_id = _int_prop(props, which)
        if schema_id is None:
            return None
        _check_schema_ids({which: schema_id}, fmt, fmt, None)
        if not validating or self._schemas is None:
            return schema_id
        entry = self._registry_schema(fmt, topic, props, key, None, {})
        if entry is None:
            raise StatementError(f"Schema for message keys on topic '{topic}' does not exist in the Schema Registry."
                                 f"\nSubject: {catalog.registry_subject(topic, key=True)}\nSchema Id: {schema_id}")
        inferred = columns_of(entry["type"], entry["schema"], key=key, descriptor=entry.get("descriptor"),
                              dependencies=entry.get("dependencies"), original_names=True,
                              full_name=full_schema_name(props, key=key))
        if key and len(inferred) == 1 and len(columns) == 1:   # an unwrapped key: its type alone
            inferred = [(columns[0].name, inferred[0][1])]
        changed = [c for i, c in enumerate(columns) if i >= len(inferred) or inferred[i] != (c.name, c.type)]
        if changed:
            shown = ", ".join(_persistence_column(c) for c in changed)
            registry = ", ".join(f"`{n}` {t.ksql_name}" for n, t in inferred)
            raise StatementError(f"The following {'key' if key else 'value'} columns are changed, missing or reordered: "
                                 f"[{shown}]. Schema from schema registry is [{registry}]")
        return schema_id

    def _no_schema(self, topic: str, key: bool) -> bool:
        """Whether ``topic``'s key or value subject has no schema yet (or no registry to ask)."""
        if self._schemas is None:
            return True
        try:
            return self._schemas.latest(catalog.registry_subject(topic, key=key)) is None
        except Exception:  # noqa: BLE001 - a registry that cannot answer: the registration will say so
            return True

    def plan(self, stmt: sql_ast.Statement, topics: Mapping[str, int] | None,
             plan: Mapping[str, Any] | None) -> StatementPlan:
        """What ``stmt`` does against the catalog: ``topics`` are the existing Kafka topics with their
        partition counts when validating (None: not checked), ``plan`` the command's recorded plan
        when applying (None when validating). Raises ``StatementError``."""
        if isinstance(stmt, sql_ast.CreateSource):
            return self._plan_create(stmt, topics, plan)
        if isinstance(stmt, sql_ast.CreateAsSelect):
            return self._plan_create_as(stmt, topics, plan)
        if isinstance(stmt, sql_ast.InsertInto):
            return self._plan_insert(stmt)
        if isinstance(stmt, sql_ast.DropSource):
            return self._plan_drop(stmt)
        if isinstance(stmt, sql_ast.Terminate | sql_ast.PauseQuery | sql_ast.ResumeQuery):
            # ksqlDB's ValidatedCommandFactory: the same refusal for TERMINATE, PAUSE and RESUME.
            if stmt.query_id is not None and self._catalog.query(stmt.query_id) is None:
                raise StatementError(f"Unknown queryId: {stmt.query_id}")
            return StatementPlan(stmt, {})
        if isinstance(stmt, sql_ast.CreateType):
            return self._plan_create_type(stmt)
        if isinstance(stmt, sql_ast.DropType):
            if not stmt.if_exists and self._catalog.custom_type(stmt.name) is None:
                raise StatementError(f"Type {stmt.name} does not exist.")
            return StatementPlan(stmt, {})
        if isinstance(stmt, sql_ast.AlterSource):
            return self._plan_alter(stmt)
        raise StatementError(f"Unsupported statement: {type(stmt).__name__}")

    def _plan_create_type(self, stmt: sql_ast.CreateType) -> StatementPlan:
        """ksqlDB's RegisterTypeFactory and DdlCommandExec.executeRegisterType."""
        existing = self._catalog.custom_type(stmt.name)
        if existing is None:
            return StatementPlan(stmt, {})
        if not stmt.if_not_exists:
            raise StatementError(f"Cannot register custom type '{stmt.name}' since it is already registered with type: "
                                 f"{existing.ksql_name}")
        return StatementPlan(stmt, {}, noop_message=f"{stmt.name} is already registered with type {existing.ksql_name}")

    def _plan_alter(self, stmt: sql_ast.AlterSource) -> StatementPlan:
        """ksqlDB's AlterSourceFactory and DdlCommandExec.executeAlterSource: value columns added
        at the end of a stream or table that no query created; ``source`` is the altered one."""
        kind = stmt.kind.value
        existing = self._sources.get(stmt.name)
        if existing is not None and existing.read_only:
            raise StatementError(f"Cannot alter {kind.lower()} '{stmt.name}': ALTER operations are not supported on "
                                 f"source {kind.lower()}s.")
        if existing is None:
            raise StatementError(f"Source {stmt.name} does not exist.")
        if existing.kind is not stmt.kind:
            raise StatementError(f"Incompatible data source type is {existing.kind.value}, but statement was ALTER {kind}")
        if existing.created_by is not None or self._catalog.created_as_select(stmt.name):
            raise StatementError("ALTER command is not supported for CREATE ... AS statements.")
        names = {c.name for c in existing.columns}
        added: list[Column] = []
        for cd in stmt.columns:
            if cd.name in names:
                raise StatementError(f"Cannot add column `{cd.name}` to schema. A column with the same name already exists.")
            names.add(cd.name)
            added.append(Column(cd.name, cd.type, Namespace.VALUE))
        altered = replace(existing, columns=existing.columns + tuple(added))
        return StatementPlan(stmt, {}, source=altered)

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

    def _topic_partitions(self, stmt: sql_ast.Statement, topic: str, partitions: int | None, replicas: int | None,
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

    def _plan_create(self, stmt: sql_ast.CreateSource, topics: Mapping[str, int] | None,
                     plan: Mapping[str, Any] | None) -> StatementPlan:
        if stmt.or_replace and stmt.read_only:
            kind = _lower_kind(stmt.kind)
            raise StatementError(f"Cannot add {kind} '{stmt.name}': CREATE OR REPLACE is not supported on source {kind}s.")
        existing = self._existing_conflict(stmt.kind, stmt.name, stmt.or_replace, stmt.if_not_exists)
        if existing is not None and stmt.if_not_exists:
            return StatementPlan(stmt, dict(plan or {}), noop_message=f"Cannot add {_lower_kind(stmt.kind)} `{stmt.name}`: "
                         f"A {_lower_kind(existing.kind)} with the same name already exists.")
        if plan is None and not self._headers_enabled and any(cd.headers for cd in stmt.columns):
            # ksqlDB's FeatureFlagChecker: new statements only; those already in the command topic still run
            raise StatementError(f"Cannot create {stmt.kind.value.capitalize()} because schema with headers columns is "
                                 "disabled.")
        props = stmt.properties
        topic = _prop(props, "KAFKA_TOPIC")
        if topic is None:
            raise StatementError('Missing required property "KAFKA_TOPIC" which has no default value.')
        topic = str(topic)
        _check_format_choice(props)
        fmt = _prop(props, "FORMAT")
        # a format the WITH clause leaves out is the config's default (ksqlDB's DefaultFormatInjector)
        value_format = _fmt(_prop(props, "VALUE_FORMAT") or fmt or _default_format(self._default_value_format, "VALUE"))
        key_format = _fmt(_prop(props, "KEY_FORMAT") or fmt or _default_format(self._default_key_format, "KEY"))
        check_format_properties(props, key_format, value_format)
        delimiter = _delimiter(props, value_format)
        key_delimiter = _delimiter(props, key_format, "KEY_DELIMITER")
        _check_schema_ids(props, key_format, value_format, stmt.columns)
        key_name, value_name = full_schema_name(props, key=True), full_schema_name(props, key=False)
        recorded: dict[str, Any] = {}
        declared = list(stmt.columns)
        inferred: list[Column] = []
        key_schema_id = value_schema_id = None
        if key_format in REGISTRY_FORMATS and not any(cd.key or cd.primary_key for cd in declared):
            entry = self._registry_schema(key_format, topic, props, True, plan, recorded)
            if entry is not None:
                key_schema_id = entry["id"] if _prop(props, "KEY_SCHEMA_ID") is not None else None
                # ksqlDB's key inference always unwraps the key where the format can (AVRO, JSON_SR)
                inferred += [Column(n, t, Namespace.KEY) for n, t in columns_of(
                    entry["type"], entry["schema"], key=True, descriptor=entry.get("descriptor"),
                    dependencies=entry.get("dependencies"), original_names=key_schema_id is not None,
                    full_name=key_name, unwrapped=key_format is not Format.PROTOBUF)]
        if value_format in REGISTRY_FORMATS and not any(not (cd.key or cd.primary_key or cd.headers) for cd in declared):
            entry = self._registry_schema(value_format, topic, props, False, plan, recorded)
            if entry is not None:
                value_schema_id = entry["id"] if _prop(props, "VALUE_SCHEMA_ID") is not None else None
                # only WITH's WRAP_SINGLE_VALUE counts here (ksqlDB's DefaultSchemaInjector), not the config
                inferred += [Column(n, t, Namespace.VALUE) for n, t in columns_of(
                    entry["type"], entry["schema"], key=False, descriptor=entry.get("descriptor"),
                    dependencies=entry.get("dependencies"), original_names=value_schema_id is not None,
                    full_name=value_name, unwrapped=explicit_wrap(props) is False)]
        if not stmt.columns and not inferred:
            raise StatementError("No columns supplied.")   # ksqlDB's TableElements.toLogicalSchema
        seen: set[str] = set()
        columns: list[Column] = []
        for c in inferred:
            seen.add(c.name)
            columns.append(c)
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
            if cd.headers:
                columns.append(_header_column(cd, columns))
            else:
                columns.append(Column(cd.name, cd.type, Namespace.KEY if (cd.key or cd.primary_key) else Namespace.VALUE))
        ordered = tuple([c for c in columns if c.is_key] + [c for c in columns if not c.is_key])
        values = tuple(c for c in ordered if c.is_value)
        keys = tuple(c for c in ordered if c.is_key)
        for k in keys:
            no_map_key(column_ref(k.name, None, k.type))
        if stmt.kind is SourceKind.TABLE and not keys:
            raise StatementError("Tables require a PRIMARY KEY. Please define the PRIMARY KEY.")
        _check_kafka_format(key_format, keys, "KEY_FORMAT")
        _check_kafka_format(value_format, values, "VALUE_FORMAT")
        if plan is None:
            # ksqlDB registers declared columns' schema when the subject has none: Avro's names checked then
            for key, fmt, side in ((True, key_format, keys), (False, value_format, values)):
                declared_side = bool(side) and side[0] not in inferred   # a side is all inferred or all declared
                if fmt is Format.AVRO and declared_side and self._no_schema(topic, key):
                    check_avro_names(side, key=key, full_name=key_name if key else value_name)
        ts_col, ts_fmt = _timestamp_column(props, ordered)
        unwrapped = value_unwrapped(props, value_format, values, self._config_wrap)
        partitions = _int_prop(props, "PARTITIONS")
        replicas = _int_prop(props, "REPLICAS")
        window = _window_of(props)
        if window is not None and not keys:
            raise StatementError("Windowed sources require a key column.")
        n, create = self._topic_partitions(stmt, topic, partitions, replicas, topics, plan, None)
        source = SourceInfo(
            name=stmt.name, kind=stmt.kind, topic=topic, key_format=key_format, value_format=value_format, columns=ordered,
            statement=stmt.text, partitions=n, replicas=replicas or 1, timestamp_column=ts_col, timestamp_format=ts_fmt,
            value_delimiter=delimiter, key_delimiter=key_delimiter, window=window,
            read_only=stmt.read_only,
            key_schema_id=key_schema_id, value_schema_id=value_schema_id, key_schema_name=key_name,
            value_schema_name=value_name, value_unwrapped=unwrapped,
            key_protobuf_nullable=_protobuf_nullable(props, key_format, "KEY"),
            value_protobuf_nullable=_protobuf_nullable(props, value_format, "VALUE"))
        if existing is not None:
            self._check_replace(existing, source)
        return StatementPlan(stmt, {"topic": topic, "partitions": n, "replicas": replicas or 1, "createTopic": create,
                                    **recorded}, source=source, replace=existing)

    @staticmethod
    def _check_replace(existing: SourceInfo, new: SourceInfo) -> None:
        ok = (existing.kind is new.kind and existing.topic == new.topic and existing.key_columns == new.key_columns
              and new.value_columns[:len(existing.value_columns)] == existing.value_columns
              and existing.key_format is new.key_format and existing.value_format is new.value_format
              and existing.window == new.window)
        if not ok:
            old_schema = ", ".join(c.schema_text for c in existing.columns)
            new_schema = ", ".join(c.schema_text for c in new.columns)
            raise StatementError(f"Cannot upgrade data source: DataSource '`{existing.name}`' has schema = {old_schema} which "
                                 f"is not upgradeable to {new_schema}. (only adding value columns at the end, with the same "
                                 "topic, formats and key, is compatible)")

    def _plan_create_as(self, stmt: sql_ast.CreateAsSelect, topics: Mapping[str, int] | None,
                        plan: Mapping[str, Any] | None) -> StatementPlan:
        existing = self._existing_conflict(stmt.kind, stmt.name, stmt.or_replace, stmt.if_not_exists)
        if existing is not None and stmt.if_not_exists:
            return StatementPlan(stmt, dict(plan or {}), noop_message=f"Cannot add {_lower_kind(stmt.kind)} `{stmt.name}`: "
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
        topic = str(_prop(props, "KAFKA_TOPIC") or self._output_topic_prefix + stmt.name)
        _check_format_choice(props)
        fmt = _prop(props, "FORMAT")
        value_raw = _prop(props, "VALUE_FORMAT") or fmt
        value_format = _fmt(value_raw) if value_raw is not None else from_source.value_format
        key_raw = _prop(props, "KEY_FORMAT") or fmt
        partition_by_null = len(stmt.query.partition_by) == 1 and isinstance(stmt.query.partition_by[0], exp.Null)
        if partition_by_null:
            # ksqlDB: PARTITION BY NULL gives a key-less stream whose key format is NONE
            if key_raw is not None and str(key_raw).upper() != "NONE":
                raise StatementError("Key format specified for stream without key columns.")
            key_format = Format.NONE
        elif key_raw is not None:
            key_format = _fmt(key_raw)
        elif from_source.key_format is Format.NONE and analyzed.key_columns:
            key_format = Format.KAFKA
        else:
            key_format = from_source.key_format
        try:
            _check_kafka_format(key_format, analyzed.key_columns, "KEY_FORMAT")
            _check_kafka_format(value_format, analyzed.value_columns, "VALUE_FORMAT")
        except StatementError as e:
            # ksqlDB checks the sink's formats on the rewritten statement: its error carries that
            # statement as ksqlDB prints it (group-by.json "multiple expressions - KAFKA key format")
            e.statement_text = create_as_text(stmt, analyzed)
            raise
        check_format_properties(props, key_format, value_format)
        # a C*AS registers its columns' schema (unless a schema id names the one to write with)
        if key_format is Format.AVRO and _prop(props, "KEY_SCHEMA_ID") is None:
            check_avro_names(analyzed.key_columns, key=True, full_name=full_schema_name(props, key=True))
        if value_format is Format.AVRO and _prop(props, "VALUE_SCHEMA_ID") is None:
            check_avro_names(analyzed.value_columns, key=False, full_name=full_schema_name(props, key=False))
        partitions = _int_prop(props, "PARTITIONS")
        replicas = _int_prop(props, "REPLICAS")
        default_partitions = max((s.partitions for s in analyzed.sources.values()), default=1)
        n, create = self._topic_partitions(stmt, topic, partitions, replicas, topics, plan, default_partitions)
        ts_col, ts_fmt = _timestamp_column(props, analyzed.columns)
        unwrapped = value_unwrapped(props, value_format, analyzed.value_columns, self._config_wrap)
        key_schema_id = self._sink_schema_id(key_format, topic, props, analyzed.key_columns, key=True, validating=plan is None)
        value_schema_id = self._sink_schema_id(value_format, topic, props, analyzed.value_columns, key=False,
                                               validating=plan is None)
        source = SourceInfo(
            name=stmt.name, kind=stmt.kind, topic=topic, key_format=key_format, value_format=value_format,
            columns=analyzed.columns, statement=stmt.text, partitions=n, replicas=replicas or 1, timestamp_column=ts_col,
            timestamp_format=ts_fmt,
            value_delimiter=_sink_delimiter(props, value_format, from_source.value_format, from_source.value_delimiter,
                                            "VALUE_DELIMITER"),
            key_delimiter=_sink_delimiter(props, key_format, from_source.key_format, from_source.key_delimiter,
                                          "KEY_DELIMITER"),
            window=analyzed.window,
            key_schema_id=key_schema_id, value_schema_id=value_schema_id,
            key_schema_name=_sink_schema_name(props, key_format, from_source, key=True),
            value_schema_name=_sink_schema_name(props, value_format, from_source, key=False),
            value_unwrapped=unwrapped, key_protobuf_nullable=_protobuf_nullable(props, key_format, "KEY"),
            value_protobuf_nullable=_protobuf_nullable(props, value_format, "VALUE"))
        if existing is not None:
            self._check_replace(existing, source)
        return StatementPlan(stmt, {"topic": topic, "partitions": n, "replicas": replicas or 1, "createTopic": create},
                     source=source, analyzed=analyzed, replace=existing)

    def _plan_insert(self, stmt: sql_ast.InsertInto) -> StatementPlan:
        target = self._sources.get(stmt.target)
        if target is None:
            raise StatementError(f"Source `{stmt.target}` does not exist.")
        if target.kind is not SourceKind.STREAM:
            raise StatementError(f"INSERT INTO can only be used to insert into a stream. {stmt.target} is a table.")
        if target.header_columns:   # header columns are read-only: nothing could write them
            raise StatementError(f"Cannot insert into {stmt.target} because it has header columns")
        if target.read_only:
            raise StatementError(f"Cannot insert into read-only stream: {stmt.target}")
        analyzed = analyze_query(stmt.query, self._sources, sink=stmt.target)
        if analyzed.result_kind is not SourceKind.STREAM:
            raise StatementError(f"INSERT INTO can only be used to insert into a stream. The query produces a "
                                 f"{analyzed.result_kind.value.lower()}.")
        result_schema = analyzed.schema_text()
        sink_schema = ", ".join(c.schema_text for c in target.columns)
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
            if self._catalog.query(qid) is not None:
                raise StatementError(f"Query ID '{qid}' already exists.")
            plan["queryId"] = qid
        return StatementPlan(stmt, plan, source=target, analyzed=analyzed)

    def _plan_drop(self, stmt: sql_ast.DropSource) -> StatementPlan:
        existing = self._sources.get(stmt.name)
        kind = _lower_kind(stmt.kind)
        if existing is None:
            if stmt.if_exists:
                return StatementPlan(stmt, {}, noop_message=f"Source `{stmt.name}` does not exist.")
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
        readers = [q for q in self._catalog.readers_of(stmt.name) if q.startswith("INSERTQUERY_") or not self._is_create_as(q)]
        writers = [q for q in self._catalog.writers_of(stmt.name) if q != existing.created_by]
        if readers or writers:
            raise StatementError(f"Cannot drop {stmt.name}.\n"
                                 f"The following queries read from this source: [{', '.join(readers)}].\n"
                                 f"The following queries write into this source: [{', '.join(writers)}].\n"
                                 f"You need to terminate them before dropping {stmt.name}.")
        dependants = self._catalog.referenced_by(stmt.name)
        if dependants:
            raise StatementError(f"Cannot drop {stmt.name}.\nThe following streams and/or tables read from this source: "
                                 f"[{', '.join(dependants)}].\nYou need to drop them before dropping {stmt.name}.")
        return StatementPlan(stmt, {}, source=existing)

    def _is_create_as(self, query_id: str) -> bool:
        info = self._catalog.query(query_id)
        if info is None:
            return False
        sink = self._sources.get(info.sink)
        return sink is not None and sink.created_by == query_id


def _header_column(cd: sql_ast.ColumnDef, earlier: list[Column]) -> Column:
    """The column of a ``HEADERS`` / ``HEADER('k')`` definition, with ksqlDB's schema rules
    (LogicalSchema.Builder): no header column after a HEADERS column, one HEADER column per key."""
    if any(c.is_header and c.header_key is None for c in earlier):
        raise StatementError("Schema already contains a HEADERS column.")
    if cd.header_key is not None and any(c.is_header and c.header_key == cd.header_key for c in earlier):
        raise StatementError(f"Schema already contains a HEADER('{cd.header_key}') column.")
    return Column(cd.name, cd.type, Namespace.HEADERS, header_key=cd.header_key)
