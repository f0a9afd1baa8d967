"""ksqlDB's single-value wrapping (``WRAP_SINGLE_VALUE`` / ``ksql.persistence.wrap.single.values``,
the UNWRAP_SINGLES value feature) and PROTOBUF's nullable representations
(``*_PROTOBUF_NULLABLE_REPRESENTATION`` OPTIONAL / WRAPPER), through the planner (ksqlDB's error
texts, schema inference) and ``serde.RecordLayout`` (the Python form of the serde).

The registry is the in-memory one; confluent-kafka's deserializers against the real registry
judge the same records in tests/spark/sql/test_golden_wrap_single_value.py."""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import pytest
from google.protobuf import wrappers_pb2

from oncestream.schema_registry.proto_text import parse_proto_text
from oncestream.sql.engine import serde_protobuf
from oncestream.sql.engine.serde import layout_of
from oncestream.sql.engine.serde_registry import unframe
from oncestream.sql.errors import StatementError
from oncestream.sql.language import sql_ast
from oncestream.sql.language import types as t
from oncestream.sql.language.catalog import Column, Format, Namespace, SourceInfo
from oncestream.sql.language.parser import parse
from oncestream.sql.language.protobuf_schema import protobuf_schema
from oncestream.sql.language.sql_ast import SourceKind
from oncestream.sql.server.metastore import Metastore
from tests.support.memory_schema_registry import MemoryRegistry


def _create(text: str, registry: MemoryRegistry | None = None, properties: dict[str, Any] | None = None,
            metastore: Metastore | None = None) -> SourceInfo:
    metastore = metastore if metastore is not None else Metastore()
    stmt = parse(text)[0]
    command = metastore.validate(stmt, properties or {}, {"t": 1, "o": 1}, registry)
    metastore.apply(command, metastore.last_offset + 1)
    assert isinstance(stmt, sql_ast.CreateSource | sql_ast.CreateAsSelect)
    source = metastore.source(stmt.name)
    assert source is not None
    return source


def _source(fmt: Format, ty: t.SqlType, *, unwrapped: bool = True) -> SourceInfo:
    return SourceInfo(name="S", kind=SourceKind.STREAM, topic="t", key_format=Format.KAFKA, value_format=fmt,
                      columns=(Column("K", t.STRING, Namespace.KEY), Column("FOO", ty)), statement="",
                      value_unwrapped=unwrapped)


# -- the planner: when a value is unwrapped, and ksqlDB's errors --------------------------------------


@pytest.mark.parametrize("fmt", ["JSON", "AVRO", "JSON_SR", "PROTOBUF_NOSR"])
def test_wrap_single_value_false_unwraps_the_formats_that_can(fmt: str):
    source = _create(f"CREATE STREAM S (K STRING KEY, FOO INT) WITH (KAFKA_TOPIC='t', VALUE_FORMAT='{fmt}', "
                     "WRAP_SINGLE_VALUE=false);", MemoryRegistry.empty())
    assert source.value_unwrapped
    wrapped = _create(f"CREATE STREAM S (K STRING KEY, FOO INT) WITH (KAFKA_TOPIC='t', VALUE_FORMAT='{fmt}', "
                      "WRAP_SINGLE_VALUE=true);", MemoryRegistry.empty())
    assert not wrapped.value_unwrapped


@pytest.mark.parametrize(("text", "message"), [
    ("CREATE STREAM S (K STRING KEY, FOO INT) WITH (KAFKA_TOPIC='t', VALUE_FORMAT='PROTOBUF', WRAP_SINGLE_VALUE=false);",
     "Format 'PROTOBUF' does not support 'WRAP_SINGLE_VALUE' set to 'false'."),
    ("CREATE STREAM S (A INT, B INT) WITH (KAFKA_TOPIC='t', VALUE_FORMAT='AVRO', WRAP_SINGLE_VALUE=false);",
     "'WRAP_SINGLE_VALUE' is only valid for single-field value schemas"),
    ("CREATE STREAM S (A INT) WITH (KAFKA_TOPIC='t', VALUE_FORMAT='DELIMITED', WRAP_SINGLE_VALUE=true);",
     "Format 'DELIMITED' does not support 'WRAP_SINGLE_VALUE' set to 'true'."),
    ("CREATE STREAM S (A INT) WITH (KAFKA_TOPIC='t', VALUE_FORMAT='JSON', WRAP_SINGLE_VALUE='maybe');",
     "Invalid value maybe for configuration WRAP_SINGLE_VALUE"),
    ("CREATE STREAM S (A INT) WITH (KAFKA_TOPIC='t', VALUE_FORMAT='JSON', VALUE_PROTOBUF_NULLABLE_REPRESENTATION="
     "'OPTIONAL');", "Property VALUE_PROTOBUF_NULLABLE_REPRESENTATION can only be enabled with protobuf format"),
    ("CREATE STREAM S (A INT) WITH (KAFKA_TOPIC='t', VALUE_FORMAT='PROTOBUF', VALUE_PROTOBUF_NULLABLE_REPRESENTATION="
     "'NULL');", "String must be one of: OPTIONAL, WRAPPER"),
])
def test_ksqldbs_errors(text: str, message: str):
    with pytest.raises(StatementError) as caught:
        _create(text, MemoryRegistry.empty())
    assert message in caught.value.message


def test_the_config_sets_the_default_and_with_overrides_it():
    """``ksql.persistence.wrap.single.values=false`` unwraps single values where the format can;
    the statement's WRAP_SINGLE_VALUE wins; several columns and KAFKA ignore the default."""
    config = {"ksql.persistence.wrap.single.values": "false"}
    assert _create("CREATE STREAM S (A INT) WITH (KAFKA_TOPIC='t', VALUE_FORMAT='JSON');", None, config).value_unwrapped
    assert not _create("CREATE STREAM S (A INT) WITH (KAFKA_TOPIC='t', VALUE_FORMAT='JSON', WRAP_SINGLE_VALUE=true);",
                       None, config).value_unwrapped
    assert not _create("CREATE STREAM S (A INT, B INT) WITH (KAFKA_TOPIC='t', VALUE_FORMAT='JSON');",
                       None, config).value_unwrapped
    assert not _create("CREATE STREAM S (A INT) WITH (KAFKA_TOPIC='t', VALUE_FORMAT='PROTOBUF');",
                       MemoryRegistry.empty(), config).value_unwrapped
    assert not _create("CREATE STREAM S (A INT) WITH (KAFKA_TOPIC='t', VALUE_FORMAT='JSON');").value_unwrapped


def test_a_create_as_select_sink_takes_its_own_with_clause_not_its_sources():
    metastore = Metastore()
    _create("CREATE STREAM S (K STRING KEY, FOO INT) WITH (KAFKA_TOPIC='t', VALUE_FORMAT='JSON', "
            "WRAP_SINGLE_VALUE=false);", metastore=metastore)
    sink = _create("CREATE STREAM O WITH (KAFKA_TOPIC='o', VALUE_FORMAT='PROTOBUF_NOSR', "
                   "VALUE_PROTOBUF_NULLABLE_REPRESENTATION='WRAPPER') AS SELECT * FROM S;", metastore=metastore)
    assert (sink.value_unwrapped, sink.value_protobuf_nullable) == (False, "WRAPPER")
    unwrapped = _create("CREATE STREAM O2 WITH (KAFKA_TOPIC='o', WRAP_SINGLE_VALUE=false) AS SELECT * FROM S;",
                        metastore=metastore)
    assert unwrapped.value_unwrapped


def test_inference_of_anonymous_schemas():
    """A value schema that is not a record needs WRAP_SINGLE_VALUE=false (ksqlDB's error), then it
    is one column ROWVAL, a record included; a key schema is always one column ROWKEY."""
    registry = MemoryRegistry.empty()
    registry.register("t-value", "AVRO", json.dumps({"type": "array", "items": ["null", "string"]}))
    with pytest.raises(StatementError, match="Schema returned from schema registry is anonymous type"):
        _create("CREATE STREAM S WITH (KAFKA_TOPIC='t', VALUE_FORMAT='AVRO');", registry)
    source = _create("CREATE STREAM S WITH (KAFKA_TOPIC='t', VALUE_FORMAT='AVRO', WRAP_SINGLE_VALUE=false);", registry)
    assert [(c.name, c.type) for c in source.columns] == [("ROWVAL", t.array_of(t.STRING))]
    assert source.value_unwrapped
    record = {"type": "record", "name": "r", "fields": [{"name": "f0", "type": ["null", "int"]}]}
    registry.register("t-value", "AVRO", json.dumps(record))
    registry.register("t-key", "AVRO", json.dumps(record))
    source = _create("CREATE STREAM S WITH (KAFKA_TOPIC='t', FORMAT='AVRO', WRAP_SINGLE_VALUE=false);", registry)
    assert [(c.name, c.type, c.is_key) for c in source.columns] == [
        ("ROWKEY", t.struct_of(("F0", t.INTEGER)), True), ("ROWVAL", t.struct_of(("F0", t.INTEGER)), False)]


# -- the serde: a bare value per format ----------------------------------------------------------------


def test_avro_unwrapped_values_are_the_bare_datum():
    registry = MemoryRegistry.empty()
    ints = layout_of(_source(Format.AVRO, t.array_of(t.BIGINT)), registry)
    data = ints.encode_value({"FOO": [1, None, 3]})
    assert data is not None
    schema_id, body = unframe(data)
    registered = json.loads(registry.by_id(schema_id).schema)
    assert registered == {"type": "array", "items": ["null", "long"]}
    assert fastavro.schemaless_reader(io.BytesIO(body), fastavro.parse_schema(registered), None) == [1, None, 3]
    assert ints.decode_value(data) == {"FOO": [1, None, 3]}
    # a null single column is a null record (ksqlDB's unwrapped serializer)
    assert ints.encode_value({"FOO": None}) is None
    struct = layout_of(_source(Format.AVRO, t.struct_of(("F0", t.INTEGER))), registry)
    data = struct.encode_value({"FOO": {"F0": 7}})
    assert data is not None
    schema_id, body = unframe(data)
    parsed = fastavro.parse_schema(json.loads(registry.by_id(schema_id).schema))
    assert fastavro.schemaless_reader(io.BytesIO(body), parsed, None) == {"F0": 7}   # the struct is the record
    assert struct.decode_value(data) == {"FOO": {"F0": 7}}


def test_json_and_json_sr_unwrapped_values_are_bare_json():
    plain = layout_of(_source(Format.JSON, t.map_of(t.STRING, t.INTEGER)), None)
    assert plain.encode_value({"FOO": {"a": 1}}) == b'{"a":1}'
    assert plain.decode_value(b'{"a":1}') == {"FOO": {"a": 1}}
    registry = MemoryRegistry.empty()
    framed = layout_of(_source(Format.JSON_SR, t.BOOLEAN), registry)
    data = framed.encode_value({"FOO": True})
    assert data is not None
    schema_id, body = unframe(data)
    assert (body, json.loads(registry.by_id(schema_id).schema)) == (b"true", {"type": "boolean"})
    assert framed.decode_value(data) == {"FOO": True}


def test_protobuf_nosr_unwrapped_values_are_wrapper_or_struct_messages():
    """ProtobufData's root schemas: a primitive is its google.protobuf wrapper, a STRUCT its own
    message; an ARRAY has no root message."""
    ints = layout_of(_source(Format.PROTOBUF_NOSR, t.INTEGER), None)
    data = ints.encode_value({"FOO": 5})
    assert data == wrappers_pb2.Int32Value(value=5).SerializeToString()
    assert ints.decode_value(data) == {"FOO": 5}
    struct = layout_of(_source(Format.PROTOBUF_NOSR, t.struct_of(("F0", t.INTEGER))), None)
    data = struct.encode_value({"FOO": {"F0": 3}})
    assert data == b"\x08\x03"
    assert struct.decode_value(data) == {"FOO": {"F0": 3}}
    with pytest.raises(Exception, match="Unsupported root schema of type ARRAY"):
        layout_of(_source(Format.PROTOBUF_NOSR, t.array_of(t.INTEGER)), None).encode_value({"FOO": [1]})


# -- PROTOBUF nullable representations -----------------------------------------------------------------

PRIMITIVES = [("I", t.INTEGER), ("L", t.BIGINT), ("D", t.DOUBLE), ("B", t.BOOLEAN), ("S", t.STRING)]


def test_nullable_schemas_are_ksqldbs():
    optional = protobuf_schema(PRIMITIVES, nullable="OPTIONAL")[0]
    assert "  optional int32 I = 1;\n  optional int64 L = 2;\n" in optional
    wrapper = protobuf_schema(PRIMITIVES, nullable="WRAPPER")[0]
    assert 'import "google/protobuf/wrappers.proto";' in wrapper
    assert "  google.protobuf.Int32Value I = 1;\n  google.protobuf.Int64Value L = 2;\n" in wrapper
    # the registry's text parser gives proto3 optional fields their presence back
    parsed = serde_protobuf.message_class(parse_proto_text(optional))
    assert parsed.DESCRIPTOR.fields_by_name["I"].has_presence
    assert [o.name for o in parse_proto_text(optional).message_type[0].oneof_decl] == ["_I", "_L", "_D", "_B", "_S"]


@pytest.mark.parametrize("fmt", [Format.PROTOBUF, Format.PROTOBUF_NOSR])
@pytest.mark.parametrize("nullable", ["OPTIONAL", "WRAPPER"])
def test_nulls_and_defaults_stay_apart(fmt: Format, nullable: str):
    """ksqlDB's QTT ``protobuf primitives with null and nullable as ...``: a null reads null and a
    0 / false / "" reads as itself (the plain proto3 default reads both as the default)."""
    columns = (Column("K", t.STRING, Namespace.KEY), *(Column(n, ty) for n, ty in PRIMITIVES))
    source = SourceInfo(name="S", kind=SourceKind.STREAM, topic="t", key_format=Format.KAFKA, value_format=fmt,
                        columns=columns, statement="", value_protobuf_nullable=nullable)
    layout = layout_of(source, MemoryRegistry.empty())
    for row in ({"I": None, "L": 0, "D": None, "B": False, "S": None}, {"I": 0, "L": None, "D": 0.0, "B": None, "S": ""}):
        data = layout.encode_value(row)
        assert layout.decode_value(data) == row
    plain = layout_of(SourceInfo(name="S", kind=SourceKind.STREAM, topic="u", key_format=Format.KAFKA,
                                 value_format=fmt, columns=columns, statement=""), MemoryRegistry.empty())
    assert plain.decode_value(plain.encode_value({"I": None, "L": 0, "D": None, "B": False, "S": None})) == {
        "I": 0, "L": 0, "D": 0.0, "B": False, "S": ""}
