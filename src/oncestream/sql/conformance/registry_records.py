"""QTT records in the registry formats (AVRO, JSON_SR, PROTOBUF, PROTOBUF_NOSR) as the bytes on
the topics, written and read as ksqlDB's functional-test runner does (sans-io but for the
``registry`` object these functions are given: an ``oncestream.spark.schema_registry_client``
``RegistryClient`` or anything with its ``latest``, ``by_id``, ``serialized`` and ``register``).

ksqlDB's runner (``TestExecutor``, ``TestExecutorUtil``, ``ConnectSerdeSupplier``):

- **schemas**: before the statements run, each ``topics`` entry's ``keySchema``/``valueSchema``
  is registered under ``<topic>-key``/``-value`` (its type from ``keyFormat``/``valueFormat``,
  else from the CREATE statement on that topic); a CREATE with columns in a registry format
  registers its columns' schema when the case gives none (``TestCaseBuilderUtil``). A case's
  ``keySchemaId``/``valueSchemaId`` is the id its statements name (``KEY_SCHEMA_ID``): the runner
  registers without asking for an id (the registry is shared by every case) and puts the id it
  got in the statements (``schema_id_map``);
- **inputs**: a record's JSON ("spec") is converted to the subject's latest schema (field names
  case-insensitively, ``SpecToConnectConverter.specToConnect``), then framed: magic byte 0, the
  4-byte id, then Avro binary / the JSON text / the message indexes and the protobuf binary.
  PROTOBUF_NOSR is the protobuf binary of the declared columns' schema, unframed;
- **outputs**: the id names the writer's schema in the registry; the decoded value becomes a
  spec again (``connectToSpec``): records/messages -> objects with the schema's field names,
  decimals -> ``Decimal``, bytes -> base64 text, timestamps/dates/times -> their numbers.

The conversions are written from the formats' definitions, not with the engine's serde, so the
runner does not judge the engine with its own code; only the protobuf descriptor plumbing (the
pool with the well-known imports, Confluent's message indexes) is shared with the engine
(``serde_protobuf``), as the schema texts of PROTOBUF_NOSR come from the columns (ksqlDB's own
runner uses ksqlDB's schema translator there too).
"""

from __future__ import annotations

import base64
import datetime as dt
import io
import json
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from oncestream.spark.schema_registry_client import FramingError, frame, unframe
from oncestream.sql.conformance.qtt_format import QttCase
from oncestream.sql.conformance.records import RecordCodecError
from oncestream.sql.errors import StatementError

REGISTRY_FORMATS = ("AVRO", "JSON_SR", "PROTOBUF", "PROTOBUF_NOSR")
# A topic entry's format names the schema's type (SerdeUtil.buildSchema): JSON and JSON_SR are
# JSON Schema.
SCHEMA_TYPES = {"AVRO": "AVRO", "PROTOBUF": "PROTOBUF", "JSON_SR": "JSON", "JSON": "JSON"}
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_EPOCH_DATE = dt.date(1970, 1, 1)


@dataclass(frozen=True)
class TopicSchema:
    """A schema a case's ``topics`` entry gives: registered under ``<topic>-key``/``-value``
    before the statements; ``case_id`` is the id the case's statements name it by (or None)."""

    topic: str
    key: bool
    schema_type: str
    schema: str
    case_id: int | None = None
    references: tuple[str, ...] = ()   # the names of the schemas it imports (references_of)


_FORMAT = re.compile(r"\b(KEY_FORMAT|VALUE_FORMAT|FORMAT)\s*=\s*'([A-Za-z_]+)'", re.IGNORECASE)
_TOPIC = re.compile(r"\bKAFKA_TOPIC\s*=\s*'([^']*)'", re.IGNORECASE)


def statement_format(case: QttCase, topic: str, key: bool) -> str | None:
    """The key or value format the case's statements give the sources on ``topic`` (None if none
    says): ``KEY_FORMAT``/``VALUE_FORMAT``, else ``FORMAT``."""
    wanted = "KEY_FORMAT" if key else "VALUE_FORMAT"
    for text in case.statements:
        if topic not in _TOPIC.findall(text):
            continue
        props = {name.upper(): value.upper() for name, value in _FORMAT.findall(text)}
        found = props.get(wanted) or props.get("FORMAT")
        if found:
            return found
    return None


def topic_schemas(case: QttCase) -> list[TopicSchema]:
    """The schemas of the case's ``topics`` entries, in their order (key before value)."""
    out: list[TopicSchema] = []
    for topic in case.topics:
        name = str(topic.get("name"))
        for key in (True, False):
            side = "key" if key else "value"
            raw = topic.get(f"{side}Schema")
            if raw is None and not key:
                raw = topic.get("schema")
            if raw is None:
                continue
            fmt = topic.get(f"{side}Format") or topic.get("format") or statement_format(case, name, key) or case.format
            schema_type = SCHEMA_TYPES.get(str(fmt).upper()) if fmt else None
            if schema_type is None:
                # No format anywhere: a text schema that is not JSON is a .proto, else Avro
                schema_type = "PROTOBUF" if isinstance(raw, str) and "syntax" in raw else "AVRO"
            text = raw if isinstance(raw, str) and schema_type == "PROTOBUF" else json.dumps(_plain(raw))
            refs = tuple(str(r["name"]) for r in topic.get(f"{side}SchemaReferences") or [])
            case_id = topic.get(f"{side}SchemaId")
            out.append(TopicSchema(name, key, schema_type, text, None if case_id is None else int(case_id), refs))
    return out


def references_of(case: QttCase) -> list[tuple[str, str, str]]:
    """(name, schema type, schema text) of the schemas the ``topics`` entries reference
    (``keySchemaReferences``/``valueSchemaReferences``: ksqlDB's runner registers each under its
    name as the subject, version 1, before the schema that imports it)."""
    out = []
    for topic in case.topics:
        for side in ("key", "value"):
            for ref in topic.get(f"{side}SchemaReferences") or []:
                fmt = ref.get("format") or topic.get(f"{side}Format") or topic.get("format") or "AVRO"
                schema_type = SCHEMA_TYPES.get(str(fmt).upper(), "AVRO")
                raw = ref.get("schema")
                text = raw if isinstance(raw, str) and schema_type == "PROTOBUF" else json.dumps(_plain(raw))
                out.append((str(ref["name"]), schema_type, text))
    return out


def _plain(value: Any) -> Any:
    """JSON-able: the QTT parser's ``Decimal`` numbers back to int/float."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() and "." not in str(value) else float(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


# -- Avro -----------------------------------------------------------------------------------------


class _AvroNames:
    """Named Avro types of a schema (records, enums, fixed), by full and short name."""

    def __init__(self) -> None:
        self.types: dict[str, Any] = {}

    def collect(self, schema: Any, ns: str | None = None) -> None:
        if isinstance(schema, list):
            for branch in schema:
                self.collect(branch, ns)
        elif isinstance(schema, dict):
            kind = schema.get("type")
            if kind in ("record", "error", "enum", "fixed"):
                name = str(schema["name"])
                space = schema.get("namespace", ns)
                full = name if "." in name or not space else f"{space}.{name}"
                self.types[full] = schema
                self.types.setdefault(full.rsplit(".", 1)[-1], schema)
                for f in schema.get("fields", []) if kind in ("record", "error") else []:
                    self.collect(f["type"], full.rsplit(".", 1)[0] if "." in full else space)
            elif kind == "array":
                self.collect(schema["items"], ns)
            elif kind == "map":
                self.collect(schema["values"], ns)
            elif isinstance(kind, (dict, list)):
                self.collect(kind, ns)

    def resolve(self, schema: Any) -> Any:
        if isinstance(schema, str) and schema in self.types:
            return self.types[schema]
        if isinstance(schema, dict) and isinstance(schema.get("type"), (dict, list)) and "logicalType" not in schema:
            return self.resolve(schema["type"])
        return schema


def _type_name(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    if isinstance(schema, dict):
        kind = schema.get("type")
        return kind if isinstance(kind, str) else "complex"
    return "union"


def _avro_fits(spec: Any, schema: Any, names: _AvroNames) -> bool:
    kind = _type_name(names.resolve(schema))
    if spec is None:
        return kind == "null"
    if kind in ("int", "long"):
        return isinstance(spec, (int, Decimal)) and not isinstance(spec, bool)
    if kind in ("float", "double"):
        return isinstance(spec, (int, float, Decimal)) and not isinstance(spec, bool)
    if kind == "boolean":
        return isinstance(spec, bool)
    if kind in ("string", "enum"):
        return isinstance(spec, str)
    if kind in ("bytes", "fixed"):
        return isinstance(spec, (str, Decimal, int))
    if kind in ("record", "error", "map"):
        return isinstance(spec, dict)
    if kind == "array":
        return isinstance(spec, list)
    return False


def spec_to_avro(spec: Any, schema: Any, names: _AvroNames | None = None) -> Any:
    """The Avro datum (for fastavro) of a QTT spec value under the Avro ``schema`` (parsed JSON)."""
    if names is None:
        names = _AvroNames()
        names.collect(schema)
    schema = names.resolve(schema)
    if isinstance(schema, list):  # a union: the first branch the value fits (null first for null)
        for branch in schema:
            if _avro_fits(spec, branch, names):
                return spec_to_avro(spec, branch, names)
        non_null = [b for b in schema if b != "null"]
        if not non_null:
            return None
        return spec_to_avro(spec, non_null[0], names)
    if spec is None:
        return None
    kind = _type_name(schema)
    logical = schema.get("logicalType") if isinstance(schema, dict) else None
    try:
        if logical == "decimal":
            scale = int(schema.get("scale", 0))
            return Decimal(str(spec)).quantize(Decimal(1).scaleb(-scale))
        if kind in ("int", "long"):
            return int(Decimal(str(spec)))
        if kind in ("float", "double"):
            return float(spec)
        if kind == "boolean":
            return spec if isinstance(spec, bool) else str(spec).lower() == "true"
        if kind in ("string", "enum"):
            return spec if isinstance(spec, str) else _spec_text(spec)
        if kind in ("bytes", "fixed"):
            return base64.b64decode(spec) if isinstance(spec, str) else bytes(spec)
        if kind == "array":
            return [spec_to_avro(v, schema["items"], names) for v in spec]
        if kind == "map":
            return {str(k): spec_to_avro(v, schema["values"], names) for k, v in spec.items()}
        if kind in ("record", "error"):
            by_upper = {str(k).upper(): v for k, v in spec.items()}
            return {f["name"]: spec_to_avro(by_upper.get(f["name"].upper()), f["type"], names)
                    for f in schema["fields"]}
    except (ValueError, TypeError, InvalidOperation, AttributeError) as e:
        raise RecordCodecError(f"{spec!r} does not fit the Avro schema {json.dumps(schema)}: {e}") from None
    if kind == "null":
        return None
    raise RecordCodecError(f"the runner cannot write Avro type {kind!r}")


def _spec_text(spec: Any) -> str:
    if isinstance(spec, bool):
        return "true" if spec else "false"
    return str(spec)


def _reading_schema(schema: Any) -> Any:
    """``schema`` without its logical types but decimal: fastavro then reads timestamps, dates
    and times as the numbers ksqlDB's tests expect."""
    if isinstance(schema, list):
        return [_reading_schema(s) for s in schema]
    if isinstance(schema, dict):
        out = {k: _reading_schema(v) for k, v in schema.items() if not (k == "logicalType" and v != "decimal")}
        if "fields" in schema:
            out["fields"] = [{**f, "type": _reading_schema(f["type"])} for f in schema["fields"]]
        return out
    return schema


def avro_to_spec(datum: Any) -> Any:
    """The spec of a decoded Avro datum (``connectToSpec``): bytes as base64 text."""
    if isinstance(datum, (bytes, bytearray)):
        return base64.b64encode(bytes(datum)).decode()
    if isinstance(datum, dict):
        return {k: avro_to_spec(v) for k, v in datum.items()}
    if isinstance(datum, list):
        return [avro_to_spec(v) for v in datum]
    return datum


def _avro_schema_json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def encode_avro(spec: Any, schema_id: int, schema_text: str) -> bytes:
    """A framed Avro record of ``spec`` under the registered schema ``schema_id``."""
    import fastavro

    raw = _avro_schema_json(schema_text)
    datum = spec_to_avro(spec, raw)
    buf = io.BytesIO()
    try:
        fastavro.schemaless_writer(buf, fastavro.parse_schema(raw), datum)
    except (ValueError, TypeError, KeyError) as e:
        raise RecordCodecError(f"{spec!r} is not writable with Avro schema {schema_text}: {e}") from None
    return frame(schema_id, buf.getvalue())


def decode_avro(body: bytes, schema_text: str) -> Any:
    """The spec of an Avro body written with ``schema_text``."""
    import fastavro

    schema = fastavro.parse_schema(_reading_schema(_avro_schema_json(schema_text)))
    try:
        return avro_to_spec(fastavro.schemaless_reader(io.BytesIO(body), schema, None))
    except (ValueError, TypeError, EOFError, IndexError, KeyError) as e:
        raise RecordCodecError(f"not an Avro record of schema {schema_text}: {e}") from None


# -- JSON Schema -----------------------------------------------------------------------------------


def spec_to_json(spec: Any, schema: Any) -> Any:
    """The JSON ksqlDB's JSON_SR serializer writes for ``spec`` under a JSON ``schema``: object
    properties named as the schema names them (matched case-insensitively; others dropped)."""
    if spec is None or not isinstance(schema, dict):
        return spec
    if "oneOf" in schema or "anyOf" in schema:
        branches = [b for b in schema.get("oneOf") or schema.get("anyOf") or [] if b.get("type") != "null"]
        return spec_to_json(spec, branches[0]) if len(branches) == 1 else spec
    props = schema.get("properties")
    if isinstance(spec, dict) and isinstance(props, dict):
        by_upper = {str(k).upper(): v for k, v in spec.items()}
        return {name: spec_to_json(by_upper[name.upper()], sub) for name, sub in props.items()
                if name.upper() in by_upper}
    if isinstance(spec, list) and isinstance(schema.get("items"), dict):
        return [spec_to_json(v, schema["items"]) for v in spec]
    return spec


# -- Protobuf --------------------------------------------------------------------------------------

_TIMESTAMP, _DATE, _TIME, _DECIMAL = ("google.protobuf.Timestamp", "google.type.Date", "google.type.TimeOfDay",
                                      "confluent.type.Decimal")
_WRAPPER_PREFIX = "google.protobuf."
_WRAPPERS = {"DoubleValue", "FloatValue", "Int64Value", "UInt64Value", "Int32Value", "UInt32Value", "BoolValue",
             "StringValue", "BytesValue"}
_MESSAGE, _ENUM, _BYTES, _STRING, _BOOL = 11, 14, 12, 9, 8
_FLOATS = (1, 2)  # double, float


def _is_wrapper(descriptor: Any) -> bool:
    full = descriptor.full_name
    return full.startswith(_WRAPPER_PREFIX) and full[len(_WRAPPER_PREFIX):] in _WRAPPERS


def _scalar_to_proto(field: Any, spec: Any) -> Any:
    if field.type == _ENUM:
        return field.enum_type.values_by_name[str(spec)].number
    if field.type == _BYTES:
        return base64.b64decode(spec) if isinstance(spec, str) else bytes(spec)
    if field.type == _STRING:
        return spec if isinstance(spec, str) else _spec_text(spec)
    if field.type == _BOOL:
        return spec if isinstance(spec, bool) else str(spec).lower() == "true"
    if field.type in _FLOATS:
        return float(spec)
    return int(Decimal(str(spec)))


def _fill_message(message: Any, spec: Any) -> None:
    """Set ``message`` from a spec value (an object; the well-known types from their numbers)."""
    full = message.DESCRIPTOR.full_name
    if full == _TIMESTAMP:
        ms = int(Decimal(str(spec)))
        message.seconds, message.nanos = ms // 1000, (ms % 1000) * 1_000_000
        return
    if full == _DATE:
        day = _EPOCH_DATE + dt.timedelta(days=int(Decimal(str(spec))))
        message.year, message.month, message.day = day.year, day.month, day.day
        return
    if full == _TIME:
        ms = int(Decimal(str(spec)))
        message.hours, message.minutes = ms // 3_600_000, ms // 60_000 % 60
        message.seconds, message.nanos = ms // 1000 % 60, ms % 1000 * 1_000_000
        return
    if full == _DECIMAL:
        value = Decimal(str(spec))
        sign, digits, exponent = value.as_tuple()
        unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
        scale = -int(exponent)
        message.value = unscaled.to_bytes(max(1, (unscaled.bit_length() + 8) // 8), "big", signed=True)
        message.precision, message.scale = max(len(digits), scale), scale
        return
    if _is_wrapper(message.DESCRIPTOR):
        message.value = _scalar_to_proto(message.DESCRIPTOR.fields_by_name["value"], spec)
        return
    if not isinstance(spec, dict):
        raise RecordCodecError(f"{spec!r} is not an object for message {full}")
    fields = {f.name.upper(): f for f in message.DESCRIPTOR.fields}
    for name, value in spec.items():
        field = fields.get(str(name).upper())
        if field is None or value is None:
            continue  # ksqlDB drops unknown fields; proto3 has no null (the default is read back)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            target = getattr(message, field.name)
            value_field = field.message_type.fields_by_name["value"]
            for k, v in value.items():
                if v is None:
                    continue
                if value_field.type == _MESSAGE:
                    _fill_message(target[k], v)
                else:
                    target[k] = _scalar_to_proto(value_field, v)
        elif field.is_repeated:
            target = getattr(message, field.name)
            for v in value:
                if field.type == _MESSAGE:
                    _fill_message(target.add(), v)
                elif v is not None:
                    target.append(_scalar_to_proto(field, v))
        elif field.type == _MESSAGE:
            sub = getattr(message, field.name)
            sub.SetInParent()   # present even when all its fields are null (Connect's empty struct)
            _fill_message(sub, value)
        else:
            setattr(message, field.name, _scalar_to_proto(field, value))


def _scalar_to_spec(field: Any, value: Any) -> Any:
    if field.type == _ENUM:
        found = field.enum_type.values_by_number.get(value)
        return found.name if found is not None else value
    if field.type == _BYTES:
        return base64.b64encode(value).decode()
    return value


def message_to_spec(message: Any) -> Any:
    """The spec of a decoded message (``connectToSpec``): unset proto3 scalars are their
    defaults, an unset message field is null, the well-known types their numbers."""
    full = message.DESCRIPTOR.full_name
    if full == _TIMESTAMP:
        return message.seconds * 1000 + message.nanos // 1_000_000
    if full == _DATE:
        return (dt.date(message.year, message.month, message.day) - _EPOCH_DATE).days if message.year else 0
    if full == _TIME:
        return ((message.hours * 60 + message.minutes) * 60 + message.seconds) * 1000 + message.nanos // 1_000_000
    if full == _DECIMAL:
        unscaled = int.from_bytes(message.value, "big", signed=True) if message.value else 0
        return Decimal(unscaled).scaleb(-message.scale)
    if _is_wrapper(message.DESCRIPTOR):
        return _scalar_to_spec(message.DESCRIPTOR.fields_by_name["value"], message.value)
    out: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            out[field.name] = {str(k): (message_to_spec(v) if value_field.type == _MESSAGE
                                        else _scalar_to_spec(value_field, v)) for k, v in value.items()}
        elif field.is_repeated:
            out[field.name] = [message_to_spec(v) if field.type == _MESSAGE else _scalar_to_spec(field, v)
                               for v in value]
        elif field.type == _MESSAGE:
            out[field.name] = message_to_spec(value) if message.HasField(field.name) else None
        elif field.has_presence and not message.HasField(field.name):
            out[field.name] = None  # proto3 `optional`: unset is null
        else:
            out[field.name] = _scalar_to_spec(field, value)
    return out


def encode_protobuf(spec: Any, message_class: Any) -> bytes:
    """The protobuf binary of ``spec`` as a message of ``message_class``."""
    message = message_class()
    try:
        _fill_message(message, spec)
    except (ValueError, TypeError, KeyError, InvalidOperation, AttributeError) as e:
        raise RecordCodecError(f"{spec!r} is not a {message.DESCRIPTOR.full_name}: {e}") from None
    return bytes(message.SerializeToString())


def decode_protobuf(body: bytes, message_class: Any) -> Any:
    """The spec of a protobuf binary of ``message_class``."""
    message = message_class()
    try:
        message.ParseFromString(body)
    except Exception as e:  # noqa: BLE001 - protobuf's DecodeError and friends: not a record of the schema
        raise RecordCodecError(f"not a {message.DESCRIPTOR.full_name} record: {e}") from None
    return message_to_spec(message)


# -- one side of a topic: encode and decode ------------------------------------------------------


class RegistrySide:
    """The key or value of a topic in a registry format: writes specs with the subject's latest
    schema, reads records by the id they carry. ``columns_proto`` is the file descriptor of the
    declared columns' schema (PROTOBUF_NOSR's only schema); ``message`` the PROTOBUF message a
    record is written with (the source's ``*_SCHEMA_FULL_NAME``, as ksqlDB's runner: else the first)."""

    def __init__(self, registry: Any, fmt: str, subject: str, columns_proto: Any = None,
                 message: str | None = None) -> None:
        self.registry = registry
        self.fmt = fmt
        self.subject = subject
        self.columns_proto = columns_proto
        self.message = message

    def _proto_class(self, schema_id: int | None, indexes: tuple[int, ...]) -> Any:
        from oncestream.sql.engine.serde_protobuf import message_class
        from oncestream.sql.language.protobuf_schema import dependency_files, file_descriptor, needs_references

        if schema_id is None:
            return message_class(self.columns_proto, indexes)
        file_proto = file_descriptor(self.registry.serialized(schema_id))
        dependencies = dependency_files(self.registry.dependencies(schema_id)) if needs_references(file_proto) else ()
        return message_class(file_proto, indexes, dependencies)

    def encode(self, spec: Any) -> bytes:
        """The record bytes of ``spec``."""
        from oncestream.sql.engine.serde_protobuf import encode_indexes

        if self.fmt == "PROTOBUF_NOSR":
            return encode_protobuf(spec, self._proto_class(None, (0,)))
        latest = self.registry.latest(self.subject)
        if latest is None:
            raise RecordCodecError(f"subject {self.subject} has no schema to write the record with")
        if self.fmt == "AVRO":
            return encode_avro(spec, latest.schema_id, latest.schema)
        if self.fmt == "JSON_SR":
            body = json.dumps(_plain(spec_to_json(spec, _avro_schema_json(latest.schema))))
            return frame(latest.schema_id, body.encode())
        from oncestream.sql.language.protobuf_schema import file_descriptor, message_index

        try:
            indexes = (message_index(file_descriptor(self.registry.serialized(latest.schema_id)), self.message),)
        except StatementError as e:
            raise RecordCodecError(e.message) from None
        return frame(latest.schema_id, encode_indexes(indexes) + encode_protobuf(spec, self._proto_class(latest.schema_id,
                                                                                                           indexes)))

    def decode(self, data: bytes) -> Any:
        """The spec of the record bytes ``data``."""
        from oncestream.sql.engine.serde_protobuf import decode_indexes

        if self.fmt == "PROTOBUF_NOSR":
            return decode_protobuf(data, self._proto_class(None, (0,)))
        try:
            schema_id, body = unframe(data)
        except FramingError as e:
            raise RecordCodecError(f"not a framed {self.fmt} record: {e}: {data[:16]!r}") from None
        if self.fmt == "AVRO":
            return decode_avro(body, self.registry.by_id(schema_id).schema)
        if self.fmt == "JSON_SR":
            return json.loads(body, parse_float=Decimal)
        indexes, message = decode_indexes(body)
        return decode_protobuf(message, self._proto_class(schema_id, indexes))
