"""The conformance runner's registry formats (issue 25), sans-io: which schemas a QTT case's
``topics`` register and as what type, QTT specs written as Avro / Protobuf / JSON Schema records
the way ksqlDB's test runner converts them (field names case-insensitively, unions, decimals,
bytes, logical types), checked by decoding with fastavro and the protobuf package themselves, and
records read back as the specs ksqlDB's comparator sees."""

from __future__ import annotations

import base64
import datetime as dt
import io
import json
from decimal import Decimal
from typing import Any

import fastavro
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from oncestream.spark.schema_registry_client import RegisteredSchema, frame, unframe
from oncestream.sql.conformance.qtt_format import cases_of_test
from oncestream.sql.conformance.records import RecordCodecError, values_match
from oncestream.sql.conformance.registry_records import (
    RegistrySide,
    decode_avro,
    decode_protobuf,
    encode_avro,
    encode_protobuf,
    references_of,
    spec_to_avro,
    spec_to_json,
    topic_schemas,
)

ORDER = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "ITEM", "type": ["null", "string"]},
    {"name": "price", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 6, "scale": 2}]},
    {"name": "AT", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}]},
    {"name": "DAY", "type": ["null", {"type": "int", "logicalType": "date"}]},
    {"name": "RAW", "type": ["null", "bytes"]},
    {"name": "TAGS", "type": ["null", {"type": "array", "items": ["null", "string"]}]},
    {"name": "COUNTS", "type": ["null", {"type": "map", "values": ["null", "long"]}]},
    {"name": "NEXT", "type": ["null", "Order"]},
]}


def test_topic_schemas_take_their_type_from_the_topic_the_statement_or_the_case_format():
    (case,) = cases_of_test("f.json", {"name": "t", "statements": [
        "CREATE STREAM S WITH (kafka_topic='s', key_format='JSON_SR', value_format='PROTOBUF');"],
        "topics": [
            {"name": "s", "keySchema": {"type": "integer"}, "valueSchema": "syntax = \"proto3\"; message M {int32 A = 1;}",
             "valueSchemaId": 12},
            {"name": "a", "valueFormat": "AVRO", "valueSchema": "int"},
            {"name": "j", "valueFormat": "JSON", "valueSchema": {"type": "object"}},
        ]})
    schemas = {(s.topic, s.key): s for s in topic_schemas(case)}
    assert schemas[("s", True)].schema_type == "JSON"
    assert json.loads(schemas[("s", True)].schema) == {"type": "integer"}
    assert schemas[("s", False)].schema_type == "PROTOBUF"
    assert schemas[("s", False)].schema.startswith("syntax")
    assert schemas[("s", False)].case_id == 12
    assert (schemas[("a", False)].schema_type, schemas[("a", False)].schema) == ("AVRO", '"int"')
    assert schemas[("j", False)].schema_type == "JSON"


def test_referenced_schemas_are_registered_under_their_subjects():
    (case,) = cases_of_test("f.json", {"name": "t", "statements": [], "topics": [
        {"name": "s", "valueFormat": "AVRO", "valueSchema": {"type": "record", "name": "R", "fields": [
            {"name": "A", "type": "Inner"}]},
         "valueSchemaReferences": [{"name": "Inner", "subject": "inner-value", "version": 1, "schema": {
             "type": "record", "name": "Inner", "fields": [{"name": "X", "type": "int"}]}}]}]})
    assert references_of(case) == [("Inner", "AVRO", json.dumps(
        {"type": "record", "name": "Inner", "fields": [{"name": "X", "type": "int"}]}))]
    (schema,) = topic_schemas(case)
    assert schema.references == ("Inner",)
    (proto,) = cases_of_test("f.json", {"name": "t", "statements": [], "topics": [
        {"name": "s", "valueFormat": "PROTOBUF",
         "valueSchema": 'syntax = "proto3"; import "event.proto"; message L {Event e = 1;}',
         "valueSchemaReferences": [{"name": "event.proto", "format": "PROTOBUF",
                                    "schema": 'syntax = "proto3"; message Event {int64 t = 1;}'}]}]})
    assert references_of(proto) == [("event.proto", "PROTOBUF", 'syntax = "proto3"; message Event {int64 t = 1;}')]


def test_an_avro_spec_is_written_as_ksqldb_writes_it_and_fastavro_reads_it_back():
    spec = {"item": "pen", "PRICE": Decimal("1.5"), "at": 1000, "day": 3, "raw": base64.b64encode(b"\x00\x01").decode(),
            "tags": ["a", None], "counts": {"x": 1}, "next": {"ITEM": "ink"}, "unknown": 1}
    data = encode_avro(spec, 42, json.dumps(ORDER))
    schema_id, body = unframe(data)
    assert schema_id == 42
    read: Any = fastavro.schemaless_reader(io.BytesIO(body), fastavro.parse_schema(ORDER), None)
    assert read["ITEM"] == "pen"
    assert read["price"] == Decimal("1.50")
    assert read["AT"] == dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=dt.UTC)
    assert read["DAY"] == dt.date(1970, 1, 4)
    assert read["RAW"] == b"\x00\x01"
    assert (read["TAGS"], read["COUNTS"]) == (["a", None], {"x": 1})
    assert (read["NEXT"]["ITEM"], read["NEXT"]["price"]) == ("ink", None)
    # Read back as the spec ksqlDB's comparator sees: logical types as numbers, bytes as base64
    back = decode_avro(body, json.dumps(ORDER))
    assert (back["AT"], back["DAY"], back["RAW"], back["price"]) == (1000, 3, "AAE=", Decimal("1.50"))
    assert values_match({"ITEM": "pen", "price": 1.50, "AT": 1000}, {k: back[k] for k in ("ITEM", "price", "AT")})


def test_avro_primitives_and_coercion_follow_ksqldbs_spec_converter():
    assert spec_to_avro(10, "int") == 10
    assert spec_to_avro(10, "string") == "10"
    assert spec_to_avro(True, ["null", "string"]) == "true"
    assert spec_to_avro(None, ["null", "int"]) is None
    assert spec_to_avro(Decimal("2"), "double") == 2.0
    with pytest.raises(RecordCodecError, match="does not fit the Avro schema"):
        spec_to_avro("x", "int")


def test_objects_compare_as_ksqldbs_compare_struct():
    """An expected field is looked up by its name, then upper-cased (ksqlDB's compareStruct):
    ``{"i": 0}`` matches a PROTOBUF message field ``I``; the field counts must agree."""
    assert values_match({"i": 0, "s": ""}, {"I": 0, "S": ""})
    assert values_match({"i": None}, {"I": None})
    assert not values_match({"i": 0}, {"I": 0, "J": 1})
    assert not values_match({"i": 1}, {"I": 0})


def test_a_decimal_given_as_text_compares_with_its_scale():
    assert values_match("1.50", Decimal("1.50"))
    assert not values_match("1.5", Decimal("1.50"))


def test_json_sr_properties_take_the_schemas_names():
    schema = {"type": "object", "properties": {"Name": {"type": "string"}, "INNER": {
        "oneOf": [{"type": "null"}, {"type": "object", "properties": {"x": {"type": "integer"}}}]}}}
    assert spec_to_json({"NAME": "a", "inner": {"X": 1, "y": 2}, "other": 3}, schema) == {"Name": "a", "INNER": {"x": 1}}


def _message_class(file_proto: descriptor_pb2.FileDescriptorProto) -> Any:
    pool = descriptor_pool.DescriptorPool()
    return message_factory.GetMessageClass(pool.Add(file_proto).message_types_by_name["M"])


def _proto() -> descriptor_pb2.FileDescriptorProto:
    f = descriptor_pb2.FileDescriptorProto(name="m.proto", syntax="proto3")
    m = f.message_type.add(name="M")
    FD = descriptor_pb2.FieldDescriptorProto
    m.field.add(name="I", number=1, type=FD.TYPE_INT32, label=FD.LABEL_OPTIONAL)
    m.field.add(name="L", number=2, type=FD.TYPE_INT64, label=FD.LABEL_OPTIONAL)
    m.field.add(name="S", number=3, type=FD.TYPE_STRING, label=FD.LABEL_OPTIONAL)
    m.field.add(name="B", number=4, type=FD.TYPE_BYTES, label=FD.LABEL_OPTIONAL)
    m.field.add(name="R", number=5, type=FD.TYPE_STRING, label=FD.LABEL_REPEATED)
    entry = m.nested_type.add(name="MEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=FD.TYPE_STRING, label=FD.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=FD.TYPE_INT32, label=FD.LABEL_OPTIONAL)
    m.field.add(name="MP", number=6, type=FD.TYPE_MESSAGE, type_name=".M.MEntry", label=FD.LABEL_REPEATED)
    m.field.add(name="SUB", number=7, type=FD.TYPE_MESSAGE, type_name=".M", label=FD.LABEL_OPTIONAL)
    return f


def test_a_protobuf_spec_is_a_message_the_protobuf_package_reads():
    cls = _message_class(_proto())
    body = encode_protobuf({"i": 3, "l": 998877665544332211, "s": None, "b": "AAE=", "r": ["x", "y"],
                            "mp": {"k": 1}, "sub": {"I": 4}}, cls)
    message = cls()
    message.ParseFromString(body)
    assert (message.I, message.L, message.S, message.B) == (3, 998877665544332211, "", b"\x00\x01")
    assert (list(message.R), dict(message.MP), message.SUB.I) == (["x", "y"], {"k": 1}, 4)
    # proto3 has no null: the unset string reads as "", the unset message as null
    # A struct whose fields are all null is still there (its fields read as their defaults)
    empty = decode_protobuf(encode_protobuf({"SUB": {"I": None}}, cls), cls)
    assert (empty["SUB"]["I"], empty["SUB"]["SUB"]) == (0, None)
    back = decode_protobuf(body, cls)
    assert (back["S"], back["B"], back["SUB"]["SUB"], back["MP"]) == ("", "AAE=", None, {"k": 1})


class _Registry:
    """The registry calls RegistrySide makes, over a dict (the HTTP client is tested against the
    real server in tests/interop)."""

    def __init__(self) -> None:
        self.schemas: dict[int, RegisteredSchema] = {}
        self.subjects: dict[str, int] = {}

    def add(self, subject: str, schema_type: str, text: str) -> int:
        schema_id = len(self.schemas) + 1
        self.schemas[schema_id] = RegisteredSchema(schema_id, schema_type, text)
        self.subjects[subject] = schema_id
        return schema_id

    def latest(self, subject: str) -> RegisteredSchema | None:
        return self.schemas.get(self.subjects.get(subject, 0))

    def by_id(self, schema_id: int) -> RegisteredSchema:
        return self.schemas[schema_id]


def test_a_side_writes_with_the_subjects_latest_schema_and_reads_by_the_records_id():
    registry = _Registry()
    registry.add("t-value", "AVRO", json.dumps(ORDER))
    newer = registry.add("t-value", "AVRO", json.dumps({"type": "record", "name": "V", "fields": [
        {"name": "ITEM", "type": ["null", "string"]}]}))
    side = RegistrySide(registry, "AVRO", "t-value")
    data = side.encode({"item": "pen"})
    assert unframe(data)[0] == newer
    assert side.decode(data) == {"ITEM": "pen"}
    assert side.decode(encode_avro({"ITEM": "old"}, 1, json.dumps(ORDER)))["ITEM"] == "old"
    with pytest.raises(RecordCodecError, match="not a framed AVRO record"):
        side.decode(b"{}")
    json_side = RegistrySide(registry, "JSON_SR", "j-value")
    registry.add("j-value", "JSON", json.dumps({"type": "object", "properties": {"A": {"type": "number"}}}))
    framed = json_side.encode({"a": Decimal("1.5")})
    assert unframe(framed) == (3, b'{"A": 1.5}')
    assert json_side.decode(frame(3, b'{"A": 1.50}')) == {"A": Decimal("1.50")}
    with pytest.raises(RecordCodecError, match="has no schema"):
        RegistrySide(registry, "AVRO", "none-value").encode({"A": 1})
