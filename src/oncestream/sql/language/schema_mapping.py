"""ksqlDB's mapping between SQL columns and registry schemas (Avro, JSON Schema), pure.

Columns to a schema (what a CSAS/CTAS sink registers), as ksqlDB writes them:

- Avro: a value is a record ``io.confluent.ksql.avro_schemas.KsqlDataSourceSchema`` whose fields
  are optional (``["null", T]``, default null); nested STRUCTs are records named after their path
  (``KsqlDataSourceSchema_ADDRESS``). BOOLEAN boolean, INTEGER int, BIGINT long, DOUBLE double,
  STRING string, BYTES bytes, DECIMAL bytes with logicalType decimal (precision, scale), DATE int
  ``date``, TIME int ``time-millis``, TIMESTAMP long ``timestamp-millis``, ARRAY array, MAP map
  (Avro map keys are strings, as ksqlDB's MAP keys). A single key column is written unwrapped
  (its bare type), as is a single value column with ``WRAP_SINGLE_VALUE=false``; several
  columns make a record.
- JSON Schema: an object with one optional property per column (``oneOf: [null, T]``); INTEGER
  and BIGINT are ``integer`` with ``connect.type`` int32/int64, DOUBLE ``number``, DECIMAL
  ``number`` with ``connect.type: bytes`` and Connect's Decimal name, BYTES ``string`` with
  ``connect.type: bytes``, DATE/TIME/TIMESTAMP ``integer`` with Connect's logical names.

A schema to columns (CREATE without columns): the inverse, plus what other writers produce:
Avro float is DOUBLE, enum STRING, fixed BYTES, ``["null", T]`` T. A key schema (AVRO, JSON_SR)
is one column ``ROWKEY`` of the whole schema's type (ksqlDB infers keys unwrapped), and so is a
value schema with ``WRAP_SINGLE_VALUE=false`` (``ROWVAL``); any other value schema must be a
record, else ksqlDB's "anonymous type" error. JSON Schema
``integer`` without ``connect.type`` is BIGINT, ``number`` DOUBLE, an object with
``properties`` a STRUCT, with only ``additionalProperties`` a MAP.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from oncestream.sql.errors import StatementError
from oncestream.sql.language.types import BaseType, SqlType, StructField

AVRO_NAMESPACE = "io.confluent.ksql.avro_schemas"
AVRO_RECORD = "KsqlDataSourceSchema"
KEY_COLUMN = "ROWKEY"
VALUE_COLUMN = "ROWVAL"

_AVRO_PRIMITIVE = {
    BaseType.BOOLEAN: "boolean", BaseType.INTEGER: "int", BaseType.BIGINT: "long", BaseType.DOUBLE: "double",
    BaseType.STRING: "string", BaseType.BYTES: "bytes",
}
_AVRO_LOGICAL = {
    BaseType.DATE: {"type": "int", "logicalType": "date"},
    BaseType.TIME: {"type": "int", "logicalType": "time-millis"},
    BaseType.TIMESTAMP: {"type": "long", "logicalType": "timestamp-millis"},
}


# -- columns -> Avro ---------------------------------------------------------------------------


def _avro_type(t: SqlType, name: str, *, optional: bool, namespace: str = AVRO_NAMESPACE) -> Any:
    b = t.base
    out: Any
    if b in _AVRO_PRIMITIVE:
        out = _AVRO_PRIMITIVE[b]
    elif b in _AVRO_LOGICAL:
        out = dict(_AVRO_LOGICAL[b])
    elif b is BaseType.DECIMAL:
        out = {"type": "bytes", "logicalType": "decimal", "precision": t.precision or 10, "scale": t.scale or 0}
    elif b is BaseType.ARRAY and t.element is not None:
        out = {"type": "array", "items": _avro_type(t.element, name, optional=True, namespace=namespace)}
    elif b is BaseType.MAP and t.element is not None:
        out = {"type": "map", "values": _avro_type(t.element, name + "_MapValue", optional=True, namespace=namespace)}
    elif b is BaseType.STRUCT:
        out = _avro_record(t.fields, name, namespace)
    else:
        raise StatementError(f"The 'AVRO' format does not support type '{b.value}'")
    return ["null", out] if optional else out


def _avro_record(fields: tuple[StructField, ...], name: str, namespace: str = AVRO_NAMESPACE) -> dict[str, Any]:
    record: dict[str, Any] = {"type": "record", "name": name}
    if namespace:
        record["namespace"] = namespace
    record["fields"] = [{"name": f.name, "type": _avro_type(f.type, f"{name}_{f.name}", optional=True, namespace=namespace),
                         "default": None} for f in fields]
    return record


def unwraps_single(fmt: str, column_count: int, *, key: bool, value_unwrapped: bool = False) -> bool:
    """Whether one side's single column is written bare rather than as a record of one field:
    a single key in every format but PROTOBUF/PROTOBUF_NOSR (ksqlDB's keys are unwrapped where
    the format can), a single value when the source says so (``WRAP_SINGLE_VALUE=false``)."""
    if column_count != 1:
        return False
    if key:
        return not fmt.startswith("PROTOBUF")
    return value_unwrapped


def avro_schema_of(columns: list[tuple[str, SqlType]], *, unwrapped: bool, full_name: str | None = None) -> str:
    """The Avro schema (JSON text) ksqlDB registers for these key or value columns: the single
    column's bare type when ``unwrapped``, else a record; ``full_name`` (``*_SCHEMA_FULL_NAME``)
    names the record instead of ``io.confluent.ksql.avro_schemas.KsqlDataSourceSchema`` (its
    nested records ``<name>_<FIELD>`` in its namespace)."""
    namespace, _, name = (full_name or f"{AVRO_NAMESPACE}.{AVRO_RECORD}").rpartition(".")
    if unwrapped and len(columns) == 1:
        return json.dumps(_avro_type(columns[0][1], name, optional=False, namespace=namespace))
    record = _avro_record(tuple(StructField(n, t) for n, t in columns), name, namespace)
    return json.dumps(record)


# -- Avro -> columns ---------------------------------------------------------------------------


def _unwrap_optional(schema: Any) -> Any:
    if isinstance(schema, list):
        rest = [s for s in schema if s != "null"]
        if len(rest) != 1:
            raise StatementError(f"Avro union {json.dumps(schema)} is not supported: only [null, T] unions map to a column")
        return rest[0]
    return schema


def _sql_of_avro(schema: Any, named: dict[str, Any], ns: str | None = None) -> SqlType:
    """``named``: the named types seen so far by full name; ``ns`` the enclosing namespace."""
    schema = _unwrap_optional(schema)
    if isinstance(schema, str):
        simple = {"boolean": BaseType.BOOLEAN, "int": BaseType.INTEGER, "long": BaseType.BIGINT,
                  "float": BaseType.DOUBLE, "double": BaseType.DOUBLE, "string": BaseType.STRING,
                  "bytes": BaseType.BYTES}
        if schema in simple:
            return SqlType(simple[schema])
        full = schema if "." in schema or not ns else f"{ns}.{schema}"
        for name in (full, schema):
            if name in named:
                return _sql_of_avro(named[name], named, name.rpartition(".")[0] or None)
        raise StatementError(f"Avro type '{schema}' is not supported")
    if not isinstance(schema, dict):
        raise StatementError(f"Avro schema {json.dumps(schema)} is not supported")
    kind, logical = schema.get("type"), schema.get("logicalType")
    if logical == "decimal":
        return SqlType(BaseType.DECIMAL, precision=int(schema.get("precision", 10)), scale=int(schema.get("scale", 0)))
    if logical == "date":
        return SqlType(BaseType.DATE)
    if logical == "time-millis":
        return SqlType(BaseType.TIME)
    if logical == "timestamp-millis":
        return SqlType(BaseType.TIMESTAMP)
    if kind in ("record", "enum", "fixed"):
        full = _full_name(schema, ns)
        named[full] = schema
        ns = full.rpartition(".")[0] or None
    if kind == "record":
        return SqlType(BaseType.STRUCT, fields=tuple(StructField(str(f["name"]), _sql_of_avro(f["type"], named, ns))
                                                     for f in schema.get("fields", [])))
    if kind == "array":
        return SqlType(BaseType.ARRAY, element=_sql_of_avro(schema["items"], named, ns))
    if kind == "map":
        return SqlType(BaseType.MAP, key=SqlType(BaseType.STRING), element=_sql_of_avro(schema["values"], named, ns))
    if kind == "enum":
        return SqlType(BaseType.STRING)
    if kind == "fixed":
        return SqlType(BaseType.BYTES)
    if isinstance(kind, (str, list)):
        return _sql_of_avro(kind, named, ns)
    raise StatementError(f"Avro schema {json.dumps(schema)} is not supported")


def _full_name(schema: dict[str, Any], ns: str | None) -> str:
    name = str(schema["name"])
    namespace = schema.get("namespace", ns)
    return f"{namespace}.{name}" if namespace and "." not in name else name


def _avro_json(schema_text: str) -> Any:
    try:
        return json.loads(schema_text)
    except ValueError:
        return schema_text     # a bare primitive name, as some writers register it


def columns_of_avro(schema_text: str, *, key: bool) -> list[tuple[str, SqlType]]:
    """The columns of an Avro schema: a record's fields, or one column."""
    t = _sql_of_avro(_avro_json(schema_text), {})
    if t.base is BaseType.STRUCT:
        return [(f.name, f.type) for f in t.fields]
    return [(KEY_COLUMN if key else VALUE_COLUMN, t)]


# -- JSON Schema -------------------------------------------------------------------------------

_CONNECT_DECIMAL = "org.apache.kafka.connect.data.Decimal"
_CONNECT_LOGICAL = {BaseType.DATE: "org.apache.kafka.connect.data.Date",
                    BaseType.TIME: "org.apache.kafka.connect.data.Time",
                    BaseType.TIMESTAMP: "org.apache.kafka.connect.data.Timestamp"}


def _json_type(t: SqlType, *, optional: bool) -> dict[str, Any]:
    b = t.base
    out: dict[str, Any]
    if b is BaseType.BOOLEAN:
        out = {"type": "boolean"}
    elif b is BaseType.INTEGER:
        out = {"type": "integer", "connect.type": "int32"}
    elif b is BaseType.BIGINT:
        out = {"type": "integer", "connect.type": "int64"}
    elif b is BaseType.DOUBLE:
        out = {"type": "number", "connect.type": "float64"}
    elif b is BaseType.STRING:
        out = {"type": "string"}
    elif b is BaseType.BYTES:
        out = {"type": "string", "connect.type": "bytes"}
    elif b is BaseType.DECIMAL:
        out = {"type": "number", "title": _CONNECT_DECIMAL, "connect.type": "bytes",
               "connect.parameters": {"connect.decimal.precision": str(t.precision or 10), "scale": str(t.scale or 0)}}
    elif b in _CONNECT_LOGICAL:
        out = {"type": "integer", "title": _CONNECT_LOGICAL[b],
               "connect.type": "int64" if b is BaseType.TIMESTAMP else "int32"}
    elif b is BaseType.ARRAY and t.element is not None:
        out = {"type": "array", "items": _json_type(t.element, optional=True)}
    elif b is BaseType.MAP and t.element is not None:
        out = {"type": "object", "additionalProperties": _json_type(t.element, optional=True), "connect.type": "map"}
    elif b is BaseType.STRUCT:
        out = _json_object(t.fields)
    else:
        raise StatementError(f"The 'JSON_SR' format does not support type '{b.value}'")
    return {"oneOf": [{"type": "null"}, out]} if optional else out


def _json_object(fields: tuple[StructField, ...]) -> dict[str, Any]:
    return {"type": "object", "properties": {f.name: _json_type(f.type, optional=True) for f in fields}}


def json_schema_of(columns: list[tuple[str, SqlType]], *, unwrapped: bool) -> str:
    """The JSON Schema (text) ksqlDB registers for these key or value columns: the single
    column's bare type when ``unwrapped``, else an object."""
    if unwrapped and len(columns) == 1:
        return json.dumps(_json_type(columns[0][1], optional=False))
    return json.dumps(_json_object(tuple(StructField(n, t) for n, t in columns)))


def _sql_of_json(schema: Any) -> SqlType:
    if not isinstance(schema, dict):
        raise StatementError(f"JSON schema {json.dumps(schema)} is not supported")
    for union in ("oneOf", "anyOf"):
        if union in schema:
            rest = [s for s in schema[union] if not (isinstance(s, dict) and s.get("type") == "null")]
            if len(rest) != 1:
                raise StatementError(f"JSON schema {union} {json.dumps(schema[union])} is not supported")
            return _sql_of_json(rest[0])
    kind = schema.get("type")
    if isinstance(kind, list):
        rest = [k for k in kind if k != "null"]
        if len(rest) != 1:
            raise StatementError(f"JSON schema type {kind} is not supported")
        return _sql_of_json({**schema, "type": rest[0]})
    title, connect = schema.get("title"), schema.get("connect.type")
    if title == _CONNECT_DECIMAL:
        params = schema.get("connect.parameters", {})
        return SqlType(BaseType.DECIMAL, precision=int(params.get("connect.decimal.precision", 10)),
                       scale=int(params.get("scale", 0)))
    for base, name in _CONNECT_LOGICAL.items():
        if title == name:
            return SqlType(base)
    if kind == "boolean":
        return SqlType(BaseType.BOOLEAN)
    if kind == "integer":
        return SqlType(BaseType.INTEGER if connect in ("int8", "int16", "int32") else BaseType.BIGINT)
    if kind == "number":
        return SqlType(BaseType.DOUBLE)
    if kind == "string":
        return SqlType(BaseType.BYTES if connect == "bytes" else BaseType.STRING)
    if kind == "array":
        return SqlType(BaseType.ARRAY, element=_sql_of_json(schema.get("items", {"type": "string"})))
    if kind == "object" or "properties" in schema:
        props = schema.get("properties")
        if props is None or connect == "map":
            values = schema.get("additionalProperties", {"type": "string"})
            return SqlType(BaseType.MAP, key=SqlType(BaseType.STRING),
                           element=_sql_of_json(values if isinstance(values, dict) else {"type": "string"}))
        return SqlType(BaseType.STRUCT, fields=tuple(StructField(n, _sql_of_json(s)) for n, s in props.items()))
    raise StatementError(f"JSON schema {json.dumps(schema)} is not supported")


def _json_schema_json(schema_text: str) -> Any:
    try:
        return json.loads(schema_text)
    except ValueError as e:
        raise StatementError(f"The registry's JSON schema is not JSON: {e}") from None


def columns_of_json_schema(schema_text: str, *, key: bool) -> list[tuple[str, SqlType]]:
    """The columns of a JSON Schema: an object's properties, or one column."""
    t = _sql_of_json(_json_schema_json(schema_text))
    if t.base is BaseType.STRUCT:
        return [(f.name, f.type) for f in t.fields]
    return [(KEY_COLUMN if key else VALUE_COLUMN, t)]


def schema_of(fmt: str, columns: list[tuple[str, SqlType]], *, unwrapped: bool, full_name: str | None = None,
              protobuf_nullable: str | None = None) -> tuple[str, str]:
    """(registry schema type, schema text) of ``columns`` in format ``fmt`` (AVRO, JSON_SR or
    PROTOBUF; ``full_name``: the Avro record's or PROTOBUF message's name, ``*_SCHEMA_FULL_NAME``;
    ``protobuf_nullable``: PROTOBUF's nullable representation, None, OPTIONAL or WRAPPER).
    ``unwrapped``: the single column's bare type (PROTOBUF never unwraps)."""
    if fmt == "AVRO":
        return "AVRO", avro_schema_of(columns, unwrapped=unwrapped, full_name=full_name)
    if fmt == "JSON_SR":
        return "JSON", json_schema_of(columns, unwrapped=unwrapped)
    if fmt == "PROTOBUF":
        from oncestream.sql.language.protobuf_schema import protobuf_schema

        return "PROTOBUF", protobuf_schema(columns, full_name=full_name, nullable=protobuf_nullable)[0]
    raise StatementError(f"format {fmt} registers no schema")


def upper_case_fields(t: SqlType) -> SqlType:
    """``t`` with every STRUCT field name upper-cased, at any depth (ksqlDB's default
    ``UPPERCASE_FIELD_NAME`` schema translation policy); map keys are data and stay."""
    if t.base is BaseType.STRUCT:
        return dataclasses.replace(t, fields=tuple(StructField(f.name.upper(), upper_case_fields(f.type))
                                                   for f in t.fields))
    if t.element is not None:
        return dataclasses.replace(t, element=upper_case_fields(t.element))
    return t


ANONYMOUS_VALUE = ("Schema returned from schema registry is anonymous type. To use this schema with ksqlDB, set "
                   "'WRAP_SINGLE_VALUE=false' in the WITH clause properties.")


def columns_of(schema_type: str, schema_text: str, *, key: bool, descriptor: str | None = None,
               original_names: bool = False, full_name: str | None = None,
               dependencies: Any = None, unwrapped: bool = False) -> list[tuple[str, SqlType]]:
    """The columns inferred from a registered schema of type AVRO, JSON or PROTOBUF (whose
    ``descriptor`` is the registry's base64 ``format=serialized`` answer). As ksqlDB's
    ``SchemaRegistryTopicSchemaSupplier``: column and struct field names upper-cased when the schema
    is the subject's latest, as the schema has them (``original_names``) when the statement named
    it by ``KEY_SCHEMA_ID``/``VALUE_SCHEMA_ID``; ``full_name`` picks a PROTOBUF file's message,
    ``dependencies`` are the (import name, base64 descriptor) pairs of its schema references.
    ``unwrapped`` (a key of AVRO/JSON_SR, a value with ``WRAP_SINGLE_VALUE=false``): the whole
    schema is one column, ``ROWKEY``/``ROWVAL``; otherwise the schema must be a record (ksqlDB's
    ``ConnectFormatSchemaTranslator``)."""
    if schema_type == "PROTOBUF":
        from oncestream.sql.language.protobuf_schema import columns_of_protobuf, dependency_files, file_descriptor

        if descriptor is None:
            raise StatementError("A PROTOBUF schema is read from its descriptor (format=serialized)")
        columns = columns_of_protobuf(file_descriptor(descriptor), schema_text, key=key, full_name=full_name,
                                      dependencies=dependency_files(dependencies))
        whole = SqlType(BaseType.STRUCT, fields=tuple(StructField(n, t) for n, t in columns))
    elif schema_type == "AVRO":
        whole = _sql_of_avro(_avro_json(schema_text), {})
    elif schema_type == "JSON":
        whole = _sql_of_json(_json_schema_json(schema_text))
    else:
        raise StatementError(f"Schema type {schema_type} cannot be mapped to columns here")
    if unwrapped:
        columns = [(KEY_COLUMN if key else VALUE_COLUMN, whole)]
    elif whole.base is BaseType.STRUCT:
        columns = [(f.name, f.type) for f in whole.fields]
    else:
        raise StatementError(ANONYMOUS_VALUE)
    if original_names:
        return columns
    return [(name.upper(), upper_case_fields(t)) for name, t in columns]
