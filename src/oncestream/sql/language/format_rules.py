"""What the registry formats (AVRO, PROTOBUF, PROTOBUF_NOSR, JSON_SR) refuse in a source's
columns and properties, with ksqlDB's messages (pure; the statement planner calls these).

- MAP keys: ksqlDB's serde factories accept only STRING map keys anywhere in these formats'
  columns (``AvroUtil.throwOnInvalidSchema``, ``ProtobufSerdeFactory``'s and
  ``KsqlJsonSerdeFactory``'s validators), checked when a source's serdes are built, so a CREATE
  with columns and a C*AS alike.
- Avro names: the Avro schema a source registers must have legal names (``AvroSchemaTranslator``
  wraps Avro's ``SchemaParseException``): a name starts with a letter or ``_`` and goes on with
  letters, digits or ``_``; a full name is checked part by part.
- Format properties: ``*_SCHEMA_FULL_NAME`` (ksqlDB's ``fullSchemaName``) is a property of AVRO,
  JSON_SR and PROTOBUF only, and cannot be blank (``FormatProperties.validateProperties``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from oncestream.sql.errors import StatementError
from oncestream.sql.language.catalog import Column, Format
from oncestream.sql.language.schema_mapping import avro_schema_of
from oncestream.sql.language.types import BaseType, SqlType

_MAP_KEY_MESSAGE = {
    Format.AVRO: "Avro only supports MAPs with STRING keys",
    Format.PROTOBUF: "PROTOBUF format only supports MAP types with STRING keys. "
                     "See https://github.com/confluentinc/ksql/issues/6177.",
    Format.PROTOBUF_NOSR: "PROTOBUF format only supports MAP types with STRING keys. "
                          "See https://github.com/confluentinc/ksql/issues/6177.",
    Format.JSON_SR: "JSON only supports MAP types with STRING keys",
    Format.JSON: "JSON only supports MAP types with STRING keys",
}
FULL_NAME_FORMATS = (Format.AVRO, Format.JSON_SR, Format.PROTOBUF)


def has_non_string_map_key(ty: SqlType) -> bool:
    """Whether ``ty`` holds a MAP whose key is not a STRING, at any depth."""
    if ty.base is BaseType.MAP and ty.key is not None and ty.key.base is not BaseType.STRING:
        return True
    return any(has_non_string_map_key(x) for x in (ty.element, ty.key) if x is not None) or \
        any(has_non_string_map_key(f.type) for f in ty.fields)


def check_map_keys(fmt: Format, columns: tuple[Column, ...]) -> None:
    """Refuse a MAP with non-STRING keys in ``fmt``'s columns (JSON and the registry formats)."""
    message = _MAP_KEY_MESSAGE.get(fmt)
    if message is not None and any(has_non_string_map_key(c.type) for c in columns):
        raise StatementError(message)


def _name_problem(name: str) -> str | None:
    # Avro's Schema.validateName (Java's Character.isLetter / isLetterOrDigit: Unicode letters too)
    if not name:
        return "Empty name"
    if not (name[0].isalpha() or name[0] == "_"):
        return f"Illegal initial character: {name}"
    if any(not (c.isalnum() or c == "_") for c in name[1:]):
        return f"Illegal character in: {name}"
    return None


def _avro_names_problem(schema: Any) -> str | None:
    """The first illegal name in an Avro schema, in the order Avro's builders meet them (a
    record's name, then each field's type, then the field's name)."""
    if isinstance(schema, list):
        return next((p for p in map(_avro_names_problem, schema) if p is not None), None)
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    if kind == "record":
        full = ".".join(p for p in (str(schema.get("namespace") or ""), str(schema.get("name", ""))) if p)
        for part in full.split("."):
            if (problem := _name_problem(part)) is not None:
                return problem
        for field in schema.get("fields", []):
            problem = _avro_names_problem(field.get("type")) or _name_problem(str(field.get("name", "")))
            if problem is not None:
                return problem
        return None
    if kind == "array":
        return _avro_names_problem(schema.get("items"))
    if kind == "map":
        return _avro_names_problem(schema.get("values"))
    return None


def check_avro_names(columns: tuple[Column, ...], *, key: bool, full_name: str | None = None) -> None:
    """Refuse columns whose Avro schema (the one a source registers, its record named
    ``full_name`` if given) has an illegal name."""
    if not columns:
        return
    schema = avro_schema_of([(c.name, c.type) for c in columns], unwrapped=key and len(columns) == 1,
                            full_name=full_name)
    problem = _avro_names_problem(json.loads(schema))
    if problem is not None:
        raise StatementError(f"Schema is not compatible with Avro: {problem}")


def _prop(props: Mapping[str, Any], name: str) -> Any:
    return next((v for k, v in props.items() if k.upper() == name), None)


def full_schema_name(props: Mapping[str, Any], *, key: bool) -> str | None:
    """The ``fullSchemaName`` of one side: ``KEY_SCHEMA_FULL_NAME``, else for the value
    ``VALUE_AVRO_SCHEMA_FULL_NAME`` (the older name, which wins) or ``VALUE_SCHEMA_FULL_NAME``."""
    if key:
        raw = _prop(props, "KEY_SCHEMA_FULL_NAME")
    else:
        raw = _prop(props, "VALUE_AVRO_SCHEMA_FULL_NAME")
        if raw is None:
            raw = _prop(props, "VALUE_SCHEMA_FULL_NAME")
    return None if raw is None else str(raw).strip()


def check_format_properties(props: Mapping[str, Any], key_format: Format, value_format: Format) -> None:
    """``*_SCHEMA_FULL_NAME`` given for a format without it, or blank (ksqlDB's messages; a
    schema id given too is part of the configuration it prints)."""
    for key, fmt in ((True, key_format), (False, value_format)):
        name = full_schema_name(props, key=key)
        if name is None:
            continue
        if fmt not in FULL_NAME_FORMATS:
            raise StatementError(f"{fmt.value} does not support the following configs: [fullSchemaName]")
        if not name.strip():
            schema_id = _prop(props, "KEY_SCHEMA_ID" if key else "VALUE_SCHEMA_ID")
            shown = "fullSchemaName=" + ("" if schema_id is None else f", schemaId={schema_id}")
            raise StatementError(f"fullSchemaName cannot be empty. Format configuration: {{{shown}}}")
