"""The schema-registry formats of ksqlDB, per row: AVRO, JSON_SR, PROTOBUF (and PROTOBUF_NOSR).

A framed record is Confluent's wire format: magic byte 0, the schema id (4 bytes big-endian),
then the body: Avro binary (fastavro) for AVRO, the JSON text for JSON_SR (the same JSON as the
JSON format writes; JSON, the JSON_SR format without registry, reads framed records too, as
ksqlDB's JSON deserializer does), Confluent's message indexes then the protobuf binary for
PROTOBUF (``serde_protobuf``). PROTOBUF_NOSR is the protobuf binary alone, its schema the
declared columns' (no registry).

Writing registers the columns' schema (``oncestream.sql.language.schema_mapping``) under the
subject ``<topic>-key`` / ``<topic>-value`` once, unless ``KEY_SCHEMA_ID`` / ``VALUE_SCHEMA_ID``
names the schema to write with. Reading takes the writer's schema by the record's id and maps
its fields to the columns by name (case-insensitively): a record whose id the registry does not
know, or whose body does not decode, is a ``SerdeError`` (the processing log's entry).

The framing is the Spark connector's (``oncestream.spark.schema_registry_client``, a layer below).
``FrameCodec`` is picklable (the registry client reconnects in each Spark Python worker).
"""

from __future__ import annotations

import datetime as dt
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from oncestream.spark.schema_registry_client import HEADER_BYTES, MAGIC_BYTE, FramingError, frame, unframe
from oncestream.sql.engine import serde_protobuf
from oncestream.sql.errors import KsqlError
from oncestream.sql.language.catalog import Column, registry_subject
from oncestream.sql.language.protobuf_schema import (
    dependency_files,
    file_descriptor,
    message_index,
    needs_references,
    protobuf_schema,
)
from oncestream.sql.language.schema_mapping import schema_of, unwraps_single
from oncestream.sql.language.types import BaseType, SqlType

REGISTRY_FORMATS = ("AVRO", "JSON_SR", "PROTOBUF", "PROTOBUF_NOSR")
NO_REGISTRY = "PROTOBUF_NOSR"
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_EPOCH_DATE = dt.date(1970, 1, 1)


def strip_frame(data: bytes) -> bytes:
    """A JSON record's text without Confluent's framing if it has one (ksqlDB's JSON reads
    JSON_SR records): JSON text never starts with a NUL byte."""
    if len(data) >= HEADER_BYTES and data[0] == MAGIC_BYTE:
        return bytes(data[HEADER_BYTES:])
    return data


# -- Python values <-> Avro datum ------------------------------------------------------------


def _to_avro(value: Any, t: SqlType) -> Any:
    if value is None:
        return None
    b = t.base
    if b is BaseType.TIMESTAMP:
        if isinstance(value, dt.datetime):
            value = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
            return (value - _EPOCH) // dt.timedelta(milliseconds=1)
        return int(value)
    if b is BaseType.DATE:
        return (value - _EPOCH_DATE).days if isinstance(value, dt.date) else int(value)
    if b is BaseType.TIME:
        if isinstance(value, dt.time):
            return ((value.hour * 60 + value.minute) * 60 + value.second) * 1000 + value.microsecond // 1000
        return int(value)
    if b is BaseType.DECIMAL:
        return Decimal(str(value)).quantize(Decimal(1).scaleb(-(t.scale or 0)))
    if b is BaseType.DOUBLE:
        return float(value)
    if b in (BaseType.INTEGER, BaseType.BIGINT):
        return int(value)
    if b is BaseType.BYTES:
        return bytes(value)
    if b is BaseType.ARRAY and t.element is not None:
        return [_to_avro(v, t.element) for v in value]
    if b is BaseType.MAP and t.element is not None:
        return {str(k): _to_avro(v, t.element) for k, v in value.items()}
    if b is BaseType.STRUCT:
        return {f.name: _to_avro(get_ci(value, f.name), f.type) for f in t.fields}
    return value


def get_ci(value: Mapping[str, Any], name: str) -> Any:
    """``value[name]``, else the field whose name matches case-insensitively (ksqlDB's rule)."""
    if name in value:
        return value[name]
    upper = name.upper()
    return next((v for k, v in value.items() if str(k).upper() == upper), None)


_WHOLE = (BaseType.INTEGER, BaseType.BIGINT, BaseType.TIMESTAMP, BaseType.DATE, BaseType.TIME)


def _from_avro(value: Any, t: SqlType) -> Any:
    if value is None:
        return None
    b = t.base
    if b is BaseType.TIMESTAMP and isinstance(value, dt.datetime):
        value = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
        return (value - _EPOCH) // dt.timedelta(milliseconds=1)
    if b is BaseType.DATE and isinstance(value, dt.date):
        return (value - _EPOCH_DATE).days
    if b is BaseType.TIME and isinstance(value, dt.time):
        return ((value.hour * 60 + value.minute) * 60 + value.second) * 1000 + value.microsecond // 1000
    if b is BaseType.DECIMAL:
        return Decimal(str(value)).quantize(Decimal(1).scaleb(-(t.scale or 0)))
    if b is BaseType.DOUBLE:
        if not isinstance(value, (int, float, Decimal)) or isinstance(value, bool):
            raise TypeError(f"Cannot deserialize type {type(value).__name__} as type {t.ksql_name}")
        return float(value)
    if b in _WHOLE and (not isinstance(value, int) or isinstance(value, bool)):
        # A writer schema with another type under the column's name (a schema id of another
        # subject): ksqlDB's translator refuses it, and the UDF must not return a str for an int.
        raise TypeError(f"Cannot deserialize type {type(value).__name__} as type {t.ksql_name}")
    if b is BaseType.BOOLEAN and not isinstance(value, bool):
        raise TypeError(f"Cannot deserialize type {type(value).__name__} as type {t.ksql_name}")
    if b is BaseType.BYTES and not isinstance(value, (bytes, bytearray)):
        raise TypeError(f"Cannot deserialize type {type(value).__name__} as type {t.ksql_name}")
    if b is BaseType.STRING:
        return value if isinstance(value, str) else str(value)
    if b in (BaseType.ARRAY, BaseType.MAP) and not isinstance(value, list if b is BaseType.ARRAY else Mapping):
        raise TypeError(f"Cannot deserialize type {type(value).__name__} as type {t.ksql_name}")
    if b is BaseType.ARRAY and t.element is not None:
        return [_from_avro(v, t.element) for v in value]
    if b is BaseType.MAP and t.element is not None:
        return {str(k): _from_avro(v, t.element) for k, v in value.items()}
    if b is BaseType.STRUCT:
        if not isinstance(value, Mapping):
            raise TypeError(f"expected a record for {t.ksql_name}, got {type(value).__name__}")
        return {f.name: _from_avro(get_ci(value, f.name), f.type) for f in t.fields}
    return value


def _nullable(schema: Any) -> bool:
    return schema == "null" or (isinstance(schema, list) and "null" in schema)


def fit_to_schema(datum: Any, schema: Any, named: dict[str, Any]) -> Any:
    """``datum`` (a row's Avro datum) fitted to a registered Avro ``schema`` it is written with:
    a record's fields looked up by name (case-insensitively), a missing or null field whose type
    has no null left out so that the writer puts its default. ``named``: the named types met."""
    if isinstance(schema, str):
        schema = named.get(schema, schema)
    if isinstance(schema, list):
        branches = [named.get(b, b) if isinstance(b, str) else b for b in schema]
        records = [b for b in branches if isinstance(b, dict) and b.get("type") == "record"]
        if isinstance(datum, Mapping) and len(records) == 1:
            return fit_to_schema(datum, records[0], named)
        return datum
    if not isinstance(schema, dict) or schema.get("type") != "record" or not isinstance(datum, Mapping):
        return datum
    name = str(schema.get("name", ""))
    named[name] = schema
    if schema.get("namespace") and "." not in name:
        named[f"{schema['namespace']}.{name}"] = schema
    out: dict[str, Any] = {}
    for f in schema.get("fields", []):
        value = get_ci(datum, f["name"])
        if value is None and "default" in f and not _nullable(f["type"]):
            continue
        out[f["name"]] = fit_to_schema(value, f["type"], named)
    return out


@dataclass
class FrameCodec:
    """One side (key or value) of a source in AVRO or JSON_SR: columns, the subject to register
    under, the fixed writer schema id if ``*_SCHEMA_ID`` is set. ``registry`` is an
    ``oncestream.spark.schema_registry_client.RegistryClient``."""

    fmt: str
    columns: tuple[Column, ...]
    subject: str
    registry: Any
    key: bool
    schema_id: int | None = None
    schema_name: str | None = None    # *_SCHEMA_FULL_NAME: the PROTOBUF message written (and registered)
    unwrap: bool = False                    # the single column is written bare (``unwraps_single``)
    protobuf_nullable: str | None = None    # PROTOBUF(_NOSR): None, "OPTIONAL" or "WRAPPER"
    _parsed: dict[int, Any] = field(default_factory=dict, repr=False, compare=False)
    _classes: dict[tuple[int | None, tuple[int, ...]], Any] = field(default_factory=dict, repr=False, compare=False)
    _own_id: int | None = field(default=None, repr=False, compare=False)   # registered from the columns

    # Picklable for Spark: the caches (parsed schemas, message classes) are rebuilt in each worker.
    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_parsed": {}, "_classes": {}}

    @property
    def unwrapped(self) -> bool:
        """The single column is the record itself (an anonymous primitive, array, map or struct)."""
        return self.unwrap and len(self.columns) == 1

    def writer_id(self) -> int:
        """The id records are written with: the fixed ``*_SCHEMA_ID``, else the columns' schema
        registered under the subject (once)."""
        if self.schema_id is None:
            schema_type, text = schema_of(self.fmt, [(c.name, c.type) for c in self.columns], unwrapped=self.unwrapped,
                                          full_name=self.schema_name, protobuf_nullable=self.protobuf_nullable)
            self.schema_id = self._own_id = int(self.registry.register(self.subject, schema_type, text))
        return self.schema_id

    def register_sink_schema(self) -> None:
        """Register the sink's schema now (a C*AS sink, when its query starts, as ksqlDB's
        ``SchemaRegisterInjector``): the columns' schema, or with ``*_SCHEMA_ID`` that schema
        itself under the sink's subject, which must answer the same id. PROTOBUF_NOSR has no
        registry and registers nothing."""
        if self.fmt == NO_REGISTRY:
            return
        if self.schema_id is None or self.schema_id == self._own_id:
            self.writer_id()
            return
        fixed = self.registry.by_id(self.schema_id)
        references = self.registry.references(self.schema_id) if fixed.schema_type == "PROTOBUF" else []
        got = int(self.registry.register(self.subject, fixed.schema_type, fixed.schema, references or None))
        if got != self.schema_id:
            side = "KEY_SCHEMA_ID" if self.key else "VALUE_SCHEMA_ID"
            raise KsqlError(f"Schema id registered is {got} which is different from provided {side} {self.schema_id}."
                            f"\nSubject: {self.subject}\nSchema: {fixed.schema}")

    def _avro_schema(self, schema_id: int) -> Any:
        import fastavro

        parsed = self._parsed.get(schema_id)
        if parsed is None:
            registered = self.registry.by_id(schema_id)
            if registered.schema_type != "AVRO":
                raise FramingError(f"schema id {schema_id} is a {registered.schema_type} schema, not AVRO")
            text = registered.schema
            try:
                raw = json.loads(text)
            except ValueError:
                raw = text
            parsed = fastavro.parse_schema(raw)
            self._parsed[schema_id] = parsed
        return parsed

    def _avro_raw(self, schema_id: int) -> Any:
        text = self.registry.by_id(schema_id).schema
        try:
            return json.loads(text)
        except ValueError:
            return text

    def encode_avro(self, row: Mapping[str, Any]) -> bytes:
        """The framed Avro record of ``row``'s columns."""
        import fastavro

        schema_id = self.writer_id()
        schema = self._avro_schema(schema_id)
        if self.unwrapped:
            datum = _to_avro(row.get(self.columns[0].name), self.columns[0].type)
        else:
            datum = {c.name: _to_avro(row.get(c.name), c.type) for c in self.columns}
            if schema_id != self._own_id:
                # a schema named by *_SCHEMA_ID: its fields the columns lack, or null where the
                # schema has no null, take the field's default (ksqlDB's ConnectSRSchemaDataTranslator)
                datum = fit_to_schema(datum, self._avro_raw(schema_id), {})
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, schema, datum)
        return frame(schema_id, buf.getvalue())

    def decode_avro(self, data: bytes) -> dict[str, Any]:
        """The columns of a framed Avro record."""
        import fastavro

        schema_id, body = unframe(data)
        schema = self._avro_schema(schema_id)
        datum = fastavro.schemaless_reader(io.BytesIO(body), schema, None)
        if self.unwrapped:    # the datum is the column, a record included (an anonymous struct)
            return {self.columns[0].name: _from_avro(datum, self.columns[0].type)}
        if not isinstance(datum, Mapping):
            if len(self.columns) == 1:
                return {self.columns[0].name: _from_avro(datum, self.columns[0].type)}
            raise TypeError("an Avro value of several columns must be a record")
        return {c.name: _from_avro(get_ci(datum, c.name), c.type) for c in self.columns}

    def encode_json(self, body: bytes) -> bytes:
        """A JSON_SR record: the JSON text, framed with the registered schema's id."""
        return frame(self.writer_id(), body)

    def check_json_id(self, data: bytes) -> bytes:
        """The JSON text of a framed JSON_SR record whose id the registry knows."""
        schema_id, body = unframe(data)
        registered = self.registry.by_id(schema_id)
        if registered.schema_type != "JSON":
            raise FramingError(f"schema id {schema_id} is a {registered.schema_type} schema, not JSON")
        return body


    # -- PROTOBUF / PROTOBUF_NOSR ------------------------------------------------------------

    def _proto_class(self, schema_id: int | None, indexes: tuple[int, ...]) -> Any:
        """The message class of the writer's schema ``schema_id`` at ``indexes`` (None: the
        columns' own schema, PROTOBUF_NOSR's, and what a sink registers)."""
        cls = self._classes.get((schema_id, indexes))
        if cls is None:
            if schema_id is None and self.unwrapped:
                cls = self._unwrapped_class()
            else:
                if schema_id is None or schema_id == self._own_id:
                    file_proto = protobuf_schema([(c.name, c.type) for c in self.columns], full_name=self.schema_name,
                                                 nullable=self.protobuf_nullable)[1]
                else:
                    registered = self.registry.by_id(schema_id)
                    if registered.schema_type != "PROTOBUF":
                        raise FramingError(f"schema id {schema_id} is a {registered.schema_type} schema, not PROTOBUF")
                    file_proto = file_descriptor(self.registry.serialized(schema_id))
                # the files its schema references name (a reference's messages are the schema's types)
                dependencies = (dependency_files(self.registry.dependencies(schema_id)) if needs_references(file_proto)
                                else ())
                cls = serde_protobuf.message_class(file_proto, indexes, dependencies)
            self._classes[(schema_id, indexes)] = cls
        return cls

    def _unwrapped_class(self) -> Any:
        """PROTOBUF_NOSR's message for one bare column (ProtobufData's root schemas): a STRUCT is
        its own message, a primitive its google.protobuf wrapper; an ARRAY, MAP or logical type
        has no root message."""
        t = self.columns[0].type
        if t.base is BaseType.STRUCT:
            file_proto = protobuf_schema([(f.name, f.type) for f in t.fields], nullable=self.protobuf_nullable)[1]
            return serde_protobuf.message_class(file_proto, (0,))
        return serde_protobuf.wrapper_class(t)

    def encode_protobuf(self, row: Mapping[str, Any]) -> bytes:
        """The record of ``row``'s columns: framed with message index [0] (PROTOBUF), or the
        protobuf binary alone (PROTOBUF_NOSR)."""
        value: Any
        if self.unwrapped:    # the struct's fields, or the primitive the wrapper message holds
            column = self.columns[0]
            value = _to_avro(row.get(column.name), column.type)
        else:
            value = {c.name: _to_avro(row.get(c.name), c.type) for c in self.columns}
        if self.fmt == NO_REGISTRY:
            return bytes(serde_protobuf.from_dict(self._proto_class(None, (0,)), value).SerializeToString())
        schema_id = self.writer_id()
        indexes = (self._message_index(schema_id),)
        message = serde_protobuf.from_dict(self._proto_class(schema_id, indexes), value)
        return frame(schema_id, serde_protobuf.encode_indexes(indexes) + message.SerializeToString())

    def _message_index(self, schema_id: int) -> int:
        """The top-level message records are written with: the one ``schema_name`` names in a
        schema named by ``*_SCHEMA_ID``, else the first (the columns' own schema has one)."""
        if self.schema_name is None or schema_id == self._own_id:
            return 0
        return message_index(file_descriptor(self.registry.serialized(schema_id)), self.schema_name)

    def decode_protobuf(self, data: bytes) -> dict[str, Any]:
        """The columns of a PROTOBUF (framed) or PROTOBUF_NOSR record."""
        if self.fmt == NO_REGISTRY:
            cls, body = self._proto_class(None, (0,)), bytes(data)
        else:
            schema_id, framed = unframe(data)
            indexes, body = serde_protobuf.decode_indexes(framed)
            cls = self._proto_class(schema_id, indexes)
        message = cls()
        message.ParseFromString(body)
        fields = serde_protobuf.to_dict(message)
        if self.unwrapped:
            column = self.columns[0]
            bare = fields if column.type.base is BaseType.STRUCT else fields.get("value")
            return {column.name: _from_avro(bare, column.type)}
        return {c.name: _from_avro(get_ci(fields, c.name), c.type) for c in self.columns}


def codec_for(fmt: str, columns: Sequence[Column], topic: str, registry: Any, *, key: bool,
              schema_id: int | None, schema_name: str | None = None, value_unwrapped: bool = False,
              protobuf_nullable: str | None = None) -> FrameCodec | None:
    """The codec of one side of a source, or None when ``fmt`` needs no registry
    (``value_unwrapped``: the source's ``WRAP_SINGLE_VALUE=false``)."""
    if fmt not in REGISTRY_FORMATS or not columns:
        return None
    if registry is None and fmt != NO_REGISTRY:
        raise KsqlError(f"The {fmt} format needs a Schema Registry: set 'ksql.schema.registry.url'.")
    subject = registry_subject(topic, key=key)
    unwrap = unwraps_single(fmt, len(columns), key=key, value_unwrapped=value_unwrapped)
    return FrameCodec(fmt, tuple(columns), subject, registry, key, schema_id, schema_name, unwrap, protobuf_nullable)
