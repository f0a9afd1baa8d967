"""Parsing the three schema types Confluent's registry knows: AVRO (the default), JSON (JSON
Schema) and PROTOBUF.

``parse_schema`` checks a schema as the registry receives it (with its referenced schemas already
parsed) and answers a ``ParsedSchema``: the text as stored, a canonical form (two registrations
whose canonical forms are equal are the same schema, so they share an id) and the parsed shape the
compatibility rules read. Anything unparsable is a ``RegistryError`` 42201.

Protobuf schemas arrive as a base64 serialized ``FileDescriptorProto`` (what confluent-kafka's
Python ProtobufSerializer sends, and what ``?format=serialized`` answers); the ``.proto`` text form
is parsed by ``proto_text`` into the same descriptor.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import fastavro
import fastavro.schema
import jsonschema
import jsonschema.exceptions
import jsonschema.validators
from google.protobuf import descriptor_pb2
from google.protobuf.message import DecodeError

from oncestream.schema_registry.errors import RegistryError, invalid_schema, unprocessable

AVRO = "AVRO"
JSON = "JSON"
PROTOBUF = "PROTOBUF"
SCHEMA_TYPES = (AVRO, JSON, PROTOBUF)


@dataclass(frozen=True)
class Reference:
    """A schema reference: ``name`` (how the schema names it: an Avro full name, a JSON ``$ref``
    target, a Protobuf import path) resolved to ``subject`` ``version``."""

    name: str
    subject: str
    version: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(frozen=True)
class ParsedSchema:
    """A checked schema: its type, text as given, canonical form and parsed shape.

    ``parsed``: AVRO, the schema's JSON; JSON, the JSON Schema document; PROTOBUF, the
    ``FileDescriptorProto``. ``named``: for AVRO, the JSON definitions of the named types its
    references bring (full name -> definition), for PROTOBUF the referenced files by import path."""

    schema_type: str
    schema_str: str
    canonical: str
    parsed: Any
    references: tuple[Reference, ...] = ()
    named: Mapping[str, Any] = field(default_factory=dict)


def normalize_type(schema_type: str | None) -> str:
    """The schema type of a request (absent: AVRO); unknown types are 42201 as Confluent answers."""
    value = (schema_type or AVRO).upper()
    if value not in SCHEMA_TYPES:
        raise invalid_schema(f"unknown schema type {schema_type!r}; known: {', '.join(SCHEMA_TYPES)}")
    return value


def parse_references(raw: object) -> tuple[Reference, ...]:
    """The ``references`` list of a request body."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise unprocessable("references must be a list")
    out = []
    for item in raw:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or \
                not isinstance(item.get("subject"), str) or not isinstance(item.get("version"), int):
            raise unprocessable(f"a reference needs a name, a subject and an integer version: {item!r}")
        out.append(Reference(item["name"], item["subject"], int(item["version"])))
    return tuple(out)


def parse_schema(schema_type: str, schema_str: object, references: Sequence[Reference] = (),
                 referenced: Sequence[ParsedSchema] = ()) -> ParsedSchema:
    """Check ``schema_str`` as a schema of ``schema_type`` whose ``references`` resolve to the
    already parsed ``referenced`` schemas (same order)."""
    if not isinstance(schema_str, str):
        raise unprocessable("the request needs a 'schema' string")
    if schema_type == AVRO:
        return _parse_avro(schema_str, tuple(references), referenced)
    if schema_type == JSON:
        return _parse_json(schema_str, tuple(references))
    return _parse_protobuf(schema_str, tuple(references), referenced)


# --- Avro ---------------------------------------------------------------------------------------

_AVRO_PARSE_ERRORS = (fastavro.schema.SchemaParseException, fastavro.schema.UnknownType, ValueError, TypeError,
                      KeyError, AttributeError)


def _parse_avro(schema_str: str, references: tuple[Reference, ...], referenced: Sequence[ParsedSchema]) -> ParsedSchema:
    try:
        document = json.loads(schema_str)
    except ValueError as exc:
        raise invalid_schema(f"{schema_str[:200]!r}: not JSON ({exc})") from exc
    named_json: dict[str, Any] = {}
    fastavro_named: dict[str, Any] = {}
    try:
        for ref in referenced:
            if ref.schema_type != AVRO:
                raise invalid_schema(f"an AVRO schema can only reference AVRO schemas, not {ref.schema_type}")
            named_json.update(ref.named)
            named_json.update(collect_avro_names(ref.parsed))
            fastavro.parse_schema(ref.parsed, named_schemas=fastavro_named)
        fastavro.parse_schema(document, named_schemas=fastavro_named)
    except RegistryError:
        raise
    except _AVRO_PARSE_ERRORS as exc:
        raise invalid_schema(f"{schema_str[:200]!r}: {type(exc).__name__}: {exc}") from exc
    canonical = json.dumps(_avro_normal(document), separators=(",", ":"), sort_keys=True)
    return ParsedSchema(AVRO, schema_str, canonical, document, references, named_json)


def _avro_normal(schema: Any) -> Any:
    """``schema`` with the spellings that do not change it made one: ``{"type": "int"}`` is
    ``"int"``; object keys are compared sorted (field, symbol and union order is kept: lists)."""
    if isinstance(schema, list):
        return [_avro_normal(item) for item in schema]
    if isinstance(schema, dict):
        if set(schema) == {"type"} and isinstance(schema["type"], (str, list, dict)):
            return _avro_normal(schema["type"])
        return {k: (_avro_normal(v) if k in ("type", "items", "values", "fields") else v) for k, v in schema.items()}
    return schema


def collect_avro_names(schema: Any, namespace: str = "", out: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every named type (record, enum, fixed) defined in ``schema``: full name -> (definition,
    its namespace). Namespaces are inherited as the Avro specification says."""
    names: dict[str, Any] = {} if out is None else out
    if isinstance(schema, list):
        for branch in schema:
            collect_avro_names(branch, namespace, names)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind in ("record", "error", "enum", "fixed") and isinstance(schema.get("name"), str):
            full, own_ns = avro_full_name(schema["name"], schema.get("namespace"), namespace)
            names[full] = (schema, own_ns)
            if kind in ("record", "error"):
                for fld in schema.get("fields", []) or []:
                    if isinstance(fld, dict):
                        collect_avro_names(fld.get("type"), own_ns, names)
        elif kind == "array":
            collect_avro_names(schema.get("items"), namespace, names)
        elif kind == "map":
            collect_avro_names(schema.get("values"), namespace, names)
        elif isinstance(kind, (dict, list)):
            collect_avro_names(kind, namespace, names)
    return names


def avro_full_name(name: str, namespace: str | None, enclosing: str) -> tuple[str, str]:
    """(full name, namespace of the type) for ``name`` declared with ``namespace`` inside a type
    whose namespace is ``enclosing``."""
    if "." in name:
        return name, name.rsplit(".", 1)[0]
    ns = namespace if namespace is not None else enclosing
    return (f"{ns}.{name}" if ns else name), ns or ""


# --- JSON Schema --------------------------------------------------------------------------------

def _parse_json(schema_str: str, references: tuple[Reference, ...]) -> ParsedSchema:
    try:
        document = json.loads(schema_str)
    except ValueError as exc:
        raise invalid_schema(f"{schema_str[:200]!r}: not JSON ({exc})") from exc
    if not isinstance(document, (dict, bool)):
        raise invalid_schema(f"{schema_str[:200]!r}: a JSON Schema is an object or a boolean")
    try:
        jsonschema.validators.validator_for(document).check_schema(document)
    except jsonschema.exceptions.SchemaError as exc:
        raise invalid_schema(f"{schema_str[:200]!r}: {exc.message}") from exc
    canonical = json.dumps(document, separators=(",", ":"), sort_keys=True)
    return ParsedSchema(JSON, schema_str, canonical, document, references)


# --- Protobuf -----------------------------------------------------------------------------------

def _parse_protobuf(schema_str: str, references: tuple[Reference, ...],
                    referenced: Sequence[ParsedSchema]) -> ParsedSchema:
    from oncestream.schema_registry.proto_text import ProtoSyntaxError, parse_proto_text

    file_proto = descriptor_pb2.FileDescriptorProto()
    try:
        file_proto.ParseFromString(base64.b64decode(schema_str, validate=True))
        if not file_proto.name and not file_proto.message_type and not file_proto.enum_type:
            raise DecodeError("an empty descriptor")
    except (binascii.Error, ValueError, DecodeError):
        try:
            file_proto = parse_proto_text(schema_str)
        except ProtoSyntaxError as exc:
            raise invalid_schema(f"{schema_str[:200]!r}: not a base64 FileDescriptorProto nor .proto text: {exc}") \
                from exc
    named = {ref.name: r.parsed for ref, r in zip(references, referenced)}
    for dependency in file_proto.dependency:
        if dependency not in named and not dependency.startswith("google/protobuf/") \
                and not dependency.startswith("confluent/") and not dependency.startswith("google/type/"):
            raise invalid_schema(f"the import {dependency!r} is not among the schema's references")
    canonical = base64.b64encode(file_proto.SerializeToString(deterministic=True)).decode()
    return ParsedSchema(PROTOBUF, schema_str, canonical, file_proto, references, named)


def protobuf_serialized(parsed: ParsedSchema) -> str:
    """The base64 serialized ``FileDescriptorProto`` of a PROTOBUF schema (``format=serialized``)."""
    return parsed.canonical
