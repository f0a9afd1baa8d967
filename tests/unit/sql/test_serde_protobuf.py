"""PROTOBUF and PROTOBUF_NOSR (``oncestream.sql.engine.serde_protobuf`` through
``serde.RecordLayout``) and ksqlDB's mapping between columns and a ``.proto`` schema
(``oncestream.sql.language.protobuf_schema``): the schema a sink registers (read back by the
registry's own ``.proto`` parser), the columns a CREATE without columns infers, Confluent's
message indexes (judged by confluent-kafka's own ``SchemaId``), proto3's nulls, and bad records
as ``SerdeError``. The real registry, confluent-kafka's serializers and whole queries are the
judges in tests/spark/sql/test_golden_protobuf.py."""

from __future__ import annotations

import io
import struct
from decimal import Decimal

import pytest
from confluent_kafka.schema_registry.common.serde import SchemaId
from google.protobuf import descriptor_pb2

from oncestream.schema_registry.proto_text import parse_proto_text
from oncestream.sql.engine import serde_protobuf
from oncestream.sql.engine.serde import SerdeError, layout_of
from oncestream.sql.engine.serde_registry import unframe
from oncestream.sql.errors import StatementError
from oncestream.sql.language import types as t
from oncestream.sql.language.catalog import Column, Format, Namespace, SourceInfo
from oncestream.sql.language.parser import parse
from oncestream.sql.language.protobuf_schema import (
    columns_of_protobuf,
    needs_references,
    protobuf_schema,
    protobuf_schema_of,
)
from oncestream.sql.language.sql_ast import SourceKind
from oncestream.sql.server.metastore import Metastore
from tests.support.memory_schema_registry import MemoryRegistry

ALL_TYPES = [("B", t.BOOLEAN), ("I", t.INTEGER), ("L", t.BIGINT), ("D", t.DOUBLE), ("DEC", t.decimal(6, 2)),
             ("S", t.STRING), ("BY", t.BYTES), ("TS", t.TIMESTAMP), ("DT", t.DATE), ("TM", t.TIME),
             ("A", t.array_of(t.INTEGER)), ("M", t.map_of(t.STRING, t.BIGINT)),
             ("ST", t.struct_of(("X", t.INTEGER), ("Y", t.struct_of(("Z", t.STRING))))),
             ("MS", t.map_of(t.STRING, t.struct_of(("W", t.DOUBLE))))]
ROW = {"B": True, "I": -3, "L": 1 << 40, "D": 1.5, "DEC": Decimal("-12.34"), "S": "é", "BY": b"\x00\x01",
       "TS": 1_700_000_000_123, "DT": 19_000, "TM": 3_600_001, "A": [1, 2, 3], "M": {"k": 7},
       "ST": {"X": 1, "Y": {"Z": "z"}}, "MS": {"a": {"W": 0.5}}}


def _source(fmt: Format, values=ALL_TYPES, keys=(("K", t.STRING),), value_schema_id: int | None = None) -> SourceInfo:
    columns = tuple(Column(n, ty, Namespace.KEY) for n, ty in keys) + tuple(Column(n, ty) for n, ty in values)
    return SourceInfo(name="S", kind=SourceKind.STREAM, topic="orders", key_format=fmt, value_format=fmt,
                      columns=columns, statement="", value_schema_id=value_schema_id)


def test_schema_is_ksqldbs_connect_default_message_and_the_registry_parses_it():
    text = protobuf_schema_of([("I", t.INTEGER), ("L", t.BIGINT), ("D", t.DOUBLE), ("B", t.BOOLEAN), ("S", t.STRING)],
                              key=False)
    # ksqlDB's query-validation-tests/protobuf.json registers exactly this message
    assert text == ('syntax = "proto3";\n\nmessage ConnectDefault1 {\n  int32 I = 1;\n  int64 L = 2;\n  double D = 3;\n'
                    '  bool B = 4;\n  string S = 5;\n}\n')
    full = protobuf_schema_of(ALL_TYPES, key=False)
    assert "confluent.type.Decimal DEC = 5 [(confluent.field_meta)" in full
    assert 'import "google/protobuf/timestamp.proto";' in full
    assert "google.type.TimeOfDay TM = 10;" in full
    assert "map<string, int64> M = 12;" in full
    assert "ConnectDefault2 ST = 13;" in full
    parsed = parse_proto_text(full)   # what `oncestream schema-registry` stores
    assert columns_of_protobuf(parsed, full) == ALL_TYPES
    assert columns_of_protobuf(protobuf_schema(ALL_TYPES)[1], full) == ALL_TYPES
    with pytest.raises(StatementError, match="inside an ARRAY or MAP"):
        protobuf_schema_of([("AA", t.array_of(t.array_of(t.INTEGER)))], key=False)


def test_columns_of_foreign_protobuf_types():
    text = """syntax = "proto3"; package acme;
    import "google/protobuf/wrappers.proto";
    message Order { uint32 u = 1; sint64 s = 2; float f = 3; Kind kind = 4; google.protobuf.StringValue note = 5;
      repeated Line lines = 6; fixed32 x = 7;
      message Line { string sku = 1; } enum Kind { A = 0; B = 1; } }
    message Other { string ignored = 1; }"""
    # two top-level messages: the statement names one (VALUE_SCHEMA_FULL_NAME), as ksqlDB requires
    expected = [("u", t.BIGINT), ("s", t.BIGINT), ("f", t.DOUBLE), ("kind", t.STRING), ("note", t.STRING),
                ("lines", t.array_of(t.struct_of(("sku", t.STRING)))), ("x", t.BIGINT)]
    assert columns_of_protobuf(parse_proto_text(text), text, full_name="acme.Order") == expected
    assert columns_of_protobuf(parse_proto_text(text), text, full_name="Order") == expected
    with pytest.raises(StatementError, match="multiple schema definitions"):
        columns_of_protobuf(parse_proto_text(text), text)


@pytest.mark.parametrize("indexes", [(0,), (1,), (0, 2), (3, 0, 65)])
def test_message_indexes_are_confluents(indexes):
    ours = serde_protobuf.encode_indexes(indexes)
    theirs = SchemaId("PROTOBUF", 7, message_indexes=list(indexes)).id_to_bytes()[5:]
    assert ours == theirs
    assert serde_protobuf.decode_indexes(ours + b"rest") == (indexes, b"rest")
    read = SchemaId("PROTOBUF")
    read.from_bytes(io.BytesIO(struct.pack(">bI", 0, 7) + ours))
    assert tuple(read.message_indexes or ()) == indexes


def test_protobuf_round_trip_is_framed_and_registered_as_proto_text():
    registry = MemoryRegistry.empty()
    layout = layout_of(_source(Format.PROTOBUF), registry)
    data = layout.encode_value(ROW)
    assert data is not None
    schema_id, body = unframe(data)
    registered = registry.by_id(schema_id)
    assert registered.schema_type == "PROTOBUF"
    assert registered.schema.startswith('syntax = "proto3";')
    assert body[0] == 0   # message index [0]
    cls = serde_protobuf.message_class(parse_proto_text(registered.schema))
    message = cls.FromString(body[1:])   # an independent reader of the body
    assert (message.I, message.L, message.S, message.ST.Y.Z, list(message.A)) == (-3, 1 << 40, "é", "z", [1, 2, 3])
    assert (message.TS.seconds, message.TS.nanos, message.DT.year, message.DEC.scale) == (1_700_000_000, 123_000_000,
                                                                                        2022, 2)
    assert layout.decode_value(data) == ROW
    # one key column is still a message (PROTOBUF has no unwrapped keys), registered under -key
    key = layout.encode_key({"K": "k1"})
    assert key is not None
    assert registry.subjects["orders-key"]
    assert unframe(key)[1] == b"\x00\x0a\x02k1"
    assert layout.decode_key(key) == ({"K": "k1"}, None)


def test_protobuf_nosr_is_plain_binary_with_proto3_nulls():
    layout = layout_of(_source(Format.PROTOBUF_NOSR), None)   # no registry needed
    data = layout.encode_value(ROW)
    assert data is not None
    assert data[0] != 0
    assert layout.decode_value(data) == ROW
    # proto3 scalars have no null (ksqlDB's default): they read back as defaults; messages stay null
    nulls = layout.decode_value(layout.encode_value({"I": None, "S": None, "ST": None, "TS": None, "A": None}))
    assert nulls is not None
    assert (nulls["I"], nulls["S"], nulls["B"], nulls["ST"], nulls["TS"], nulls["A"], nulls["M"]) == (
        0, "", False, None, None, [], {})
    assert layout.encode_key({"K": "x"}) == b"\x0a\x01x"


def test_reads_a_writer_schema_with_other_case_and_a_later_message_index():
    registry = MemoryRegistry.empty()
    text = 'syntax = "proto3"; message First { int32 n = 1; } message Order { int64 id = 1; string name = 2; }'
    writer_id = registry.register("elsewhere", "PROTOBUF", text)
    cls = serde_protobuf.message_class(parse_proto_text(text), (1,))
    body = cls(id=5, name="x").SerializeToString()
    layout = layout_of(_source(Format.PROTOBUF, values=(("ID", t.BIGINT), ("NAME", t.STRING))), registry)
    framed = struct.pack(">bI", 0, writer_id) + serde_protobuf.encode_indexes((1,)) + body
    assert layout.decode_value(framed) == {"ID": 5, "NAME": "x"}


def test_bad_protobuf_records_are_serde_errors():
    registry = MemoryRegistry.empty()
    layout = layout_of(_source(Format.PROTOBUF, values=(("ID", t.INTEGER),)), registry)
    good = layout.encode_value({"ID": 1}) or b""
    with pytest.raises(SerdeError, match="99"):            # a schema id the registry does not have
        layout.decode_value(struct.pack(">bI", 0, 99) + good[5:])
    with pytest.raises(SerdeError, match="magic byte"):     # not framed
        layout.decode_value(b"\x08\x01")
    with pytest.raises(SerdeError):                         # a body that does not decode
        layout.decode_value(good[:6] + b"\xff\xff\xff")
    with pytest.raises(SerdeError, match="message index"):  # an index the schema does not have
        layout.decode_value(good[:5] + serde_protobuf.encode_indexes((4,)) + good[6:])
    avro_id = registry.register("x", "AVRO", '"string"')
    with pytest.raises(SerdeError, match="not PROTOBUF"):
        layout.decode_value(struct.pack(">bI", 0, avro_id) + good[5:])


def test_a_schema_reference_builds_with_the_referenced_file_and_is_refused_without_it():
    """protobuf.json's "schema with external references": ``import "event.proto"`` resolves to
    the referenced schema's descriptor, for the columns (inference) and the message class."""
    text = 'syntax = "proto3";\nimport "event.proto";\nmessage Logistics {\n Event event = 1;\n}'
    event = parse_proto_text('syntax = "proto3";\nmessage Event {\n int64 timestamp = 1;\n}')
    event.name = "event.proto"
    proto = descriptor_pb2.FileDescriptorProto(name="a.proto", syntax="proto3", dependency=["event.proto"])
    field = proto.message_type.add(name="Logistics").field.add(name="event", number=1, type=11, label=1)
    field.type_name = "Event"
    assert needs_references(proto)
    with pytest.raises(serde_protobuf.ProtobufError, match=r"imports 'event\.proto', which no schema reference names"):
        serde_protobuf.message_class(proto)
    cls = serde_protobuf.message_class(proto, (0,), [event])
    message = cls.FromString(cls(event={"timestamp": 5}).SerializeToString())
    assert message.event.timestamp == 5
    assert columns_of_protobuf(proto, text, dependencies=(event,)) == [("event", t.struct_of(("timestamp", t.BIGINT)))]


def test_create_without_columns_infers_protobuf_columns_and_nosr_needs_them():
    registry = MemoryRegistry.empty()
    registry.register("orders-value", "PROTOBUF", protobuf_schema_of([("ID", t.BIGINT), ("AMOUNT", t.decimal(8, 2)),
                                                                      ("AT", t.TIMESTAMP)], key=False))
    registry.register("orders-key", "PROTOBUF", protobuf_schema_of([("K", t.STRING)], key=True))
    metastore = Metastore()
    (stmt,) = parse("CREATE STREAM O WITH (KAFKA_TOPIC='orders', FORMAT='PROTOBUF');")
    command = metastore.validate(stmt, {}, {"orders": 1}, registry)
    assert "descriptor" in command.plan["valueSchema"]   # applied elsewhere without the registry
    metastore.apply(command, 0)
    source = metastore.source("O")
    assert source is not None
    assert [(c.name, c.type, c.is_key) for c in source.columns] == [
        ("K", t.STRING, True), ("ID", t.BIGINT, False), ("AMOUNT", t.decimal(8, 2), False), ("AT", t.TIMESTAMP, False)]
    (nosr,) = parse("CREATE STREAM N WITH (KAFKA_TOPIC='orders', VALUE_FORMAT='PROTOBUF_NOSR');")
    with pytest.raises(StatementError, match=r"No columns supplied\."):
        Metastore().validate(nosr, {}, {"orders": 1}, registry)


def test_decimal_params_from_a_serialized_descriptors_field_options():
    """A schema registered as a serialized descriptor (confluent-kafka's serializers) keeps the
    ``confluent.field_meta`` option on its fields: precision and scale come from there."""

    def length_delimited(number: int, data: bytes) -> bytes:
        return bytes([number << 3 | 2, len(data)]) + data

    def entry(key: str, value: str) -> bytes:
        return length_delimited(2, length_delimited(1, key.encode()) + length_delimited(2, value.encode()))

    meta = entry("precision", "9") + entry("scale", "3")
    proto = descriptor_pb2.FileDescriptorProto(name="d.proto", syntax="proto3", dependency=["confluent/type/decimal.proto"])
    message = proto.message_type.add(name="Price")
    amount = message.field.add(name="amount", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
                               type_name=".confluent.type.Decimal")
    amount.options.MergeFromString(b"\xe2\x40" + bytes([len(meta)]) + meta)   # field 1036, length-delimited
    parsed = descriptor_pb2.FileDescriptorProto.FromString(proto.SerializeToString())   # as the registry answers
    assert columns_of_protobuf(parsed) == [("amount", t.decimal(9, 3))]


def test_value_schema_id_writes_with_that_schemas_field_numbers():
    registry = MemoryRegistry.empty()
    text = 'syntax = "proto3"; message Theirs { string name = 7; int64 id = 3; }'
    chosen = registry.register("elsewhere", "PROTOBUF", text)
    layout = layout_of(_source(Format.PROTOBUF, values=(("ID", t.BIGINT), ("NAME", t.STRING)), value_schema_id=chosen),
                       registry)
    data = layout.encode_value({"ID": 4, "NAME": "n"})
    assert data is not None
    assert unframe(data)[0] == chosen
    assert "orders-value" not in registry.subjects     # nothing registered: the id is given
    theirs = serde_protobuf.message_class(parse_proto_text(text)).FromString(unframe(data)[1][1:])
    assert (theirs.id, theirs.name) == (4, "n")
    assert layout.decode_value(data) == {"ID": 4, "NAME": "n"}
