"""AVRO and JSON_SR (``oncestream.sql.engine.serde_registry`` through ``serde.RecordLayout``) and
ksqlDB's mapping between columns and registry schemas (``oncestream.sql.language.schema_mapping``):
the schema a sink registers, the columns a CREATE without columns infers, Confluent's framing,
logical types, and a bad record (unknown schema id, bad bytes) as a ``SerdeError``.

The registry here is an in-memory one behind the client's three calls; the real registry and
confluent-kafka's serializers are the judges in tests/interop/sql/test_registry_formats.py."""

from __future__ import annotations

import io
import json
import struct
from decimal import Decimal

import fastavro
import pytest

from oncestream.sql.engine.serde import SerdeError, layout_of
from oncestream.sql.engine.serde_registry import frame, strip_frame, unframe
from oncestream.sql.errors import StatementError
from oncestream.sql.language import sql_ast
from oncestream.sql.language import types as t
from oncestream.sql.language.catalog import Column, Format, Namespace, SourceInfo
from oncestream.sql.language.parser import parse
from oncestream.sql.language.schema_mapping import (
    avro_schema_of,
    columns_of,
    columns_of_avro,
    columns_of_json_schema,
    json_schema_of,
)
from oncestream.sql.language.sql_ast import SourceKind
from oncestream.sql.server import commands
from oncestream.sql.server.metastore import Metastore
from tests.support.memory_schema_registry import MemoryRegistry

ALL_TYPES = [("B", t.BOOLEAN), ("I", t.INTEGER), ("L", t.BIGINT), ("D", t.DOUBLE), ("DEC", t.decimal(6, 2)),
             ("S", t.STRING), ("BY", t.BYTES), ("TS", t.TIMESTAMP), ("DT", t.DATE), ("TM", t.TIME),
             ("A", t.array_of(t.INTEGER)), ("M", t.map_of(t.STRING, t.BIGINT)),
             ("ST", t.struct_of(("X", t.INTEGER), ("Y", t.struct_of(("Z", t.STRING)))))]
ROW = {"B": True, "I": -3, "L": 1 << 40, "D": 1.5, "DEC": Decimal("12.34"), "S": "é", "BY": b"\x00\x01",
       "TS": 1_700_000_000_123, "DT": 19_000, "TM": 3_600_001, "A": [1, None, 3], "M": {"k": 7},
       "ST": {"X": 1, "Y": {"Z": "z"}}}


def _source(fmt: Format, key_fmt: Format = Format.KAFKA, values=ALL_TYPES, keys=(("K", t.STRING),),
            value_schema_id: int | None = None) -> SourceInfo:
    columns = tuple(Column(n, ty, Namespace.KEY) for n, ty in keys) + tuple(Column(n, ty) for n, ty in values)
    return SourceInfo(name="S", kind=SourceKind.STREAM, topic="orders", key_format=key_fmt, value_format=fmt,
                      columns=columns, statement="", value_schema_id=value_schema_id)


def test_avro_schema_is_ksqldbs_optional_record_with_logical_types():
    schema = json.loads(avro_schema_of(ALL_TYPES, unwrapped=False))
    assert (schema["name"], schema["namespace"]) == ("KsqlDataSourceSchema", "io.confluent.ksql.avro_schemas")
    by_name = {f["name"]: f for f in schema["fields"]}
    assert all(f["type"][0] == "null" and f["default"] is None for f in schema["fields"])
    assert by_name["DEC"]["type"][1] == {"type": "bytes", "logicalType": "decimal", "precision": 6, "scale": 2}
    assert by_name["TS"]["type"][1] == {"type": "long", "logicalType": "timestamp-millis"}
    assert by_name["DT"]["type"][1] == {"type": "int", "logicalType": "date"}
    assert by_name["TM"]["type"][1] == {"type": "int", "logicalType": "time-millis"}
    assert by_name["ST"]["type"][1]["name"] == "KsqlDataSourceSchema_ST"
    fastavro.parse_schema(schema)   # a schema fastavro accepts
    # a single key column is its bare type
    assert json.loads(avro_schema_of([("K", t.STRING)], unwrapped=True)) == "string"


def test_avro_and_json_schemas_map_back_to_the_same_columns():
    assert columns_of_avro(avro_schema_of(ALL_TYPES, unwrapped=False), key=False) == ALL_TYPES
    assert columns_of_json_schema(json_schema_of(ALL_TYPES, unwrapped=False), key=False) == ALL_TYPES
    assert columns_of_avro(avro_schema_of([("K", t.BIGINT)], unwrapped=True), key=True) == [("ROWKEY", t.BIGINT)]


def test_columns_of_foreign_avro_schemas():
    """float is DOUBLE, enum STRING, fixed BYTES, a named type used twice, a primitive value ROWVAL."""
    schema = {"type": "record", "name": "User", "namespace": "acme", "fields": [
        {"name": "f", "type": "float"}, {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A"]}},
        {"name": "x", "type": {"type": "fixed", "name": "F", "size": 2}},
        {"name": "home", "type": {"type": "record", "name": "Addr", "fields": [{"name": "city", "type": "string"}]}},
        {"name": "work", "type": ["null", "acme.Addr"]}]}
    addr = t.struct_of(("city", t.STRING))
    assert columns_of_avro(json.dumps(schema), key=False) == [
        ("f", t.DOUBLE), ("e", t.STRING), ("x", t.BYTES), ("home", addr), ("work", addr)]
    assert columns_of_avro('"long"', key=False) == [("ROWVAL", t.BIGINT)]
    with pytest.raises(StatementError, match="union"):
        columns_of_avro('["int", "string"]', key=False)


def test_avro_round_trip_is_framed_and_readable_by_fastavro():
    registry = MemoryRegistry.empty()
    layout = layout_of(_source(Format.AVRO, Format.AVRO), registry)
    data = layout.encode_value(ROW)
    assert data is not None
    schema_id, body = unframe(data)
    assert registry.subjects == {"orders-value": [schema_id]}
    written = fastavro.schemaless_reader(io.BytesIO(body), fastavro.parse_schema(json.loads(registry.by_id(schema_id).schema)),
                                         None)
    assert isinstance(written, dict)
    assert written["DEC"] == Decimal("12.34")
    assert written["ST"] == {"X": 1, "Y": {"Z": "z"}}
    assert layout.decode_value(data) == ROW
    key = layout.encode_key({"K": "k1"})
    assert key is not None
    assert key[0] == 0
    assert "orders-key" in registry.subjects
    assert layout.decode_key(key) == ({"K": "k1"}, None)
    assert layout.encode_value(None) is None
    assert layout.decode_value(None) is None


def test_avro_reads_a_writer_schema_with_other_case_and_extra_fields():
    registry = MemoryRegistry.empty()
    writer = {"type": "record", "name": "W", "fields": [{"name": "id", "type": "int"}, {"name": "extra", "type": "string"},
                                                        {"name": "when", "type": {"type": "long",
                                                                                  "logicalType": "timestamp-millis"}}]}
    schema_id = registry.register("orders-value", "AVRO", json.dumps(writer))
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(writer), {"id": 5, "extra": "x", "when": 1000})
    layout = layout_of(_source(Format.AVRO, values=(("ID", t.INTEGER), ("WHEN", t.TIMESTAMP), ("GONE", t.STRING))), registry)
    assert layout.decode_value(frame(schema_id, buf.getvalue())) == {"ID": 5, "WHEN": 1000, "GONE": None}


def test_value_schema_id_writes_with_that_schema():
    registry = MemoryRegistry.empty()
    fixed = registry.register("other", "AVRO", avro_schema_of([("S", t.STRING)], unwrapped=False))
    layout = layout_of(_source(Format.AVRO, values=(("S", t.STRING),), value_schema_id=fixed), registry)
    assert unframe(layout.encode_value({"S": "a"}) or b"")[0] == fixed
    assert "orders-value" not in registry.subjects


def test_json_sr_is_framed_json_and_json_reads_it():
    registry = MemoryRegistry.empty()
    values = (("ID", t.INTEGER), ("NAME", t.STRING))
    layout = layout_of(_source(Format.JSON_SR, values=values), registry)
    data = layout.encode_value({"ID": 1, "NAME": "a"})
    assert data is not None
    schema_id, body = unframe(data)
    assert body == b'{"ID":1,"NAME":"a"}'
    assert registry.by_id(schema_id).schema_type == "JSON"
    assert layout.decode_value(data) == {"ID": 1, "NAME": "a"}
    plain = layout_of(_source(Format.JSON, values=values), registry)
    assert plain.decode_value(data) == {"ID": 1, "NAME": "a"}
    assert strip_frame(b'{"a":1}') == b'{"a":1}'


@pytest.mark.parametrize("fmt", [Format.AVRO, Format.JSON_SR])
def test_bad_records_are_serde_errors(fmt: Format):
    registry = MemoryRegistry.empty()
    layout = layout_of(_source(fmt, values=(("ID", t.INTEGER),)), registry)
    good = layout.encode_value({"ID": 1}) or b""
    with pytest.raises(SerdeError, match="99"):           # a schema id the registry does not have
        layout.decode_value(struct.pack(">bI", 0, 99) + good[5:])
    with pytest.raises(SerdeError, match="magic byte"):    # not framed
        layout.decode_value(b'{"ID":1}')
    if fmt is Format.AVRO:
        with pytest.raises(SerdeError):                     # a body that does not decode
            layout.decode_value(good[:5] + b"\x02")


def test_registry_formats_need_a_registry():
    with pytest.raises(Exception, match=r"ksql\.schema\.registry\.url"):
        layout_of(_source(Format.AVRO), None)


def _create(metastore: Metastore, text: str, registry: MemoryRegistry | None) -> SourceInfo:
    stmt = parse(text)[0]
    command = metastore.validate(stmt, {}, {"orders": 1}, registry)
    metastore.apply(command, metastore.last_offset + 1)
    assert isinstance(stmt, sql_ast.CreateSource)
    source = metastore.source(stmt.name)
    assert source is not None
    return source


def test_create_without_columns_infers_them_from_the_registry_and_records_them():
    registry = MemoryRegistry.empty()
    registry.register("orders-value", "AVRO", avro_schema_of([("ID", t.BIGINT), ("AMOUNT", t.decimal(8, 2))], unwrapped=False))
    registry.register("orders-key", "AVRO", '"string"')
    metastore = Metastore()
    source = _create(metastore, "CREATE STREAM O WITH (KAFKA_TOPIC='orders', FORMAT='AVRO');", registry)
    assert [(c.name, c.type, c.is_key) for c in source.columns] == [
        ("ROWKEY", t.STRING, True), ("ID", t.BIGINT, False), ("AMOUNT", t.decimal(8, 2), False)]
    # the command carries the schema (through its encoding): applying it elsewhere needs no registry
    stmt = parse("CREATE STREAM O WITH (KAFKA_TOPIC='orders', FORMAT='AVRO');")[0]
    command = Metastore().validate(stmt, {}, {"orders": 1}, registry)
    assert command.plan["valueSchema"]["id"] == 1
    key, value = commands.encode(command)
    replica = Metastore()
    replica.apply(commands.decode(key, value), 0)
    copy = replica.source("O")
    assert copy is not None
    assert copy.columns == source.columns


def test_create_without_columns_json_sr_and_declared_key():
    registry = MemoryRegistry.empty()
    registry.register("orders-value", "JSON", json.dumps({"type": "object", "properties": {
        "id": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}}}))
    source = _create(Metastore(), "CREATE TABLE T (K STRING PRIMARY KEY) WITH (KAFKA_TOPIC='orders', "
                                  "VALUE_FORMAT='JSON_SR');", registry)
    # the latest schema's field names upper-cased, as ksqlDB infers them
    assert [(c.name, c.type) for c in source.columns] == [("K", t.STRING), ("ID", t.BIGINT),
                                                          ("TAGS", t.array_of(t.STRING))]


def test_create_without_columns_errors():
    stmt = "CREATE STREAM O WITH (KAFKA_TOPIC='orders', VALUE_FORMAT='AVRO');"
    with pytest.raises(StatementError, match="does not exist in the Schema Registry"):
        _create(Metastore(), stmt, MemoryRegistry.empty())
    with pytest.raises(StatementError, match="not configured"):
        _create(Metastore(), stmt, None)
    registry = MemoryRegistry.empty()
    registry.register("orders-value", "JSON", '{"type": "object", "properties": {}}')
    with pytest.raises(StatementError, match="JSON schema"):
        _create(Metastore(), stmt, registry)


def test_value_schema_id_property_picks_the_schema():
    registry = MemoryRegistry.empty()
    registry.register("orders-value", "AVRO", avro_schema_of([("A", t.INTEGER)], unwrapped=False))
    chosen = registry.register("elsewhere", "AVRO", avro_schema_of([("B", t.STRING)], unwrapped=False))
    source = _create(Metastore(), f"CREATE STREAM O WITH (KAFKA_TOPIC='orders', VALUE_FORMAT='AVRO', "
                                  f"VALUE_SCHEMA_ID={chosen});", registry)
    assert [c.name for c in source.value_columns] == ["B"]
    assert source.value_schema_id == chosen


def test_a_writer_schema_with_a_column_of_another_type_is_a_serde_error():
    """A record framed with the id of another subject's schema whose field has the column's name
    but another type: ksqlDB's translator refuses it (and the Spark UDF must not return a str
    for an INT); a long for a DOUBLE column converts."""
    registry = MemoryRegistry.empty()
    other = {"type": "record", "name": "Other", "fields": [{"name": "ID", "type": "string"},
                                                          {"name": "D", "type": "long"}]}
    schema_id = registry.register("elsewhere-value", "AVRO", json.dumps(other))
    layout = layout_of(_source(Format.AVRO, values=(("ID", t.INTEGER), ("D", t.DOUBLE))), registry)
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(other), {"ID": "nine", "D": 2})
    with pytest.raises(SerdeError, match="Cannot deserialize type str as type INTEGER"):
        layout.decode_value(frame(schema_id, buf.getvalue()))
    doubles = layout_of(_source(Format.AVRO, values=(("D", t.DOUBLE),)), registry)
    assert doubles.decode_value(frame(schema_id, buf.getvalue())) == {"D": 2.0}
    booleans = layout_of(_source(Format.AVRO, values=(("D", t.BOOLEAN),)), registry)
    with pytest.raises(SerdeError, match="BOOLEAN"):
        booleans.decode_value(frame(schema_id, buf.getvalue()))


def test_inferred_names_are_upper_cased_unless_the_schema_was_named_by_id():
    """ksqlDB's SchemaRegistryTopicSchemaSupplier: a subject's latest schema gives upper-cased
    column and struct field names (UPPERCASE_FIELD_NAME), a schema named by KEY/VALUE_SCHEMA_ID its
    own (ORIGINAL_FIELD_NAME); map keys are data. (ksqlDB's QTT avro/protobuf "should convert
    record to STRUCT" expect {"C1": {"F1": 1}} from fields c1 { f1 }.)"""
    schema = json.dumps({"type": "record", "name": "R", "fields": [
        {"name": "c1", "type": {"type": "record", "name": "S", "fields": [{"name": "f1", "type": "int"}]}},
        {"name": "c2", "type": {"type": "map", "values": {"type": "record", "name": "T", "fields": [
            {"name": "g", "type": "string"}]}}}]})
    got = columns_of("AVRO", schema, key=False)
    assert [n for n, _ in got] == ["C1", "C2"]
    assert [f.name for f in got[0][1].fields] == ["F1"]
    assert got[1][1].element is not None
    assert [f.name for f in got[1][1].element.fields] == ["G"]
    original = columns_of("AVRO", schema, key=False, original_names=True)
    assert [n for n, _ in original] == ["c1", "c2"]
    assert [f.name for f in original[0][1].fields] == ["f1"]
    assert [n for n, _ in columns_of("JSON", json.dumps({"type": "object", "properties": {"a": {"type": "integer"}}}),
                                     key=False)] == ["A"]
