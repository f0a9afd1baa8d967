"""PROTOBUF and PROTOBUF_NOSR through whole queries, against ``oncestream schema-registry`` and
confluent-kafka's ProtobufSerializer / ProtobufDeserializer (message classes generated at test
time from descriptors: no protoc), and ksqlDB's processing-log topic:

- a stream declared without columns reads its columns from the registry and reads records
  confluent-kafka's ProtobufSerializer wrote; its CSAS registers ``.proto`` text under
  ``<topic>-value`` and writes records confluent-kafka's ProtobufDeserializer reads (with the
  writer schema it fetches from the registry);
- a record with an unknown schema id and one whose body does not decode go to the processing-log
  topic (read back raw, and through ``SELECT * FROM KSQL_PROCESSING_LOG EMIT CHANGES``) while
  the query keeps running;
- PROTOBUF_NOSR keys and values round trip against a hand-built descriptor, and a PROTOBUF key
  is framed and registered under ``<topic>-key``.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
import struct
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

from oncestream.sql.engine.processing_log import stream_statement
from oncestream.sql.engine.runtime import RUNNING
from oncestream.sql.language.catalog import Format
from oncestream.sql.language.types import BaseType
from tests.spark.sql.golden import (
    EARLIEST,
    analyze,
    create_topics,
    ddl,
    produce,
    read_all,
    read_output,
    registered_message_class,
    registry_source,
    sink_of,
    start,
    unique,
)

pytestmark = [pytest.mark.spark]

T0 = 1_700_000_000_000
F = descriptor_pb2.FieldDescriptorProto
_OPTIONAL, _REPEATED = F.LABEL_OPTIONAL, F.LABEL_REPEATED


def _order_file() -> descriptor_pb2.FileDescriptorProto:
    """acme/order.proto: Order {int64 id; string item; Timestamp placed; repeated string tags;
    Address address; map<string, int32> counts}, with nested Address and the map's entry."""
    proto = descriptor_pb2.FileDescriptorProto(name="acme/order.proto", package="acme", syntax="proto3",
                                               dependency=["google/protobuf/timestamp.proto"])
    order = proto.message_type.add(name="Order")
    address = order.nested_type.add(name="Address")
    address.field.add(name="city", number=1, type=F.TYPE_STRING, label=_OPTIONAL)
    entry = order.nested_type.add(name="CountsEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=F.TYPE_STRING, label=_OPTIONAL)
    entry.field.add(name="value", number=2, type=F.TYPE_INT32, label=_OPTIONAL)
    order.field.add(name="id", number=1, type=F.TYPE_INT64, label=_OPTIONAL)
    order.field.add(name="item", number=2, type=F.TYPE_STRING, label=_OPTIONAL)
    order.field.add(name="placed", number=3, type=F.TYPE_MESSAGE, type_name=".google.protobuf.Timestamp",
                    label=_OPTIONAL)
    order.field.add(name="tags", number=4, type=F.TYPE_STRING, label=_REPEATED)
    order.field.add(name="address", number=5, type=F.TYPE_MESSAGE, type_name=".acme.Order.Address", label=_OPTIONAL)
    order.field.add(name="counts", number=6, type=F.TYPE_MESSAGE, type_name=".acme.Order.CountsEntry", label=_REPEATED)
    return proto


def _message_class(proto: descriptor_pb2.FileDescriptorProto, name: str) -> Any:
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


def test_protobuf_stream_without_columns_to_a_protobuf_sink_and_the_processing_log(
        runtime, eos_broker, registry, processing_log):
    bootstrap = eos_broker.bootstrap
    topic, out = unique("pb_orders"), unique("pb_big")
    create_topics(bootstrap, topic, out)
    client = SchemaRegistryClient({"url": registry.url})
    order = _message_class(_order_file(), "acme.Order")
    serialize = ProtobufSerializer(order, client, {"use.deprecated.format": False})
    ctx = SerializationContext(topic, MessageField.VALUE)
    placed = timestamp_pb2.Timestamp(seconds=1_709_208_000, nanos=250_000_000)

    def record(i: int) -> bytes | None:
        message = order(id=i, item=f"i{i}", tags=["a", str(i)], address=order.Address(city=f"c{i}"), counts={"x": i})
        message.placed.seconds, message.placed.nanos = placed.seconds, placed.nanos
        return serialize(message, ctx)

    good = [record(i) for i in (1, 2, 3)]
    assert good[0] is not None
    unknown_id = struct.pack(">bI", 0, 987_654) + good[0][5:]
    bad_body = good[0][:6] + b"\x0a\xff\x01"      # field 1 as a 255-byte string the record does not have
    produce(bootstrap, topic, [(None, good[0], T0), (None, unknown_id, T0 + 1), (None, bad_body, T0 + 2),
                               (None, good[1], T0 + 3), (None, good[2], T0 + 4)])

    source = registry_source(f"CREATE STREAM ORDERS WITH (KAFKA_TOPIC='{topic}', VALUE_FORMAT='PROTOBUF');", topic)
    # ksqlDB upper-cases the inferred names of a subject's latest schema, struct fields too
    assert [(c.name, c.type.ksql_name) for c in source.columns] == [
        ("ID", "BIGINT"), ("ITEM", "STRING"), ("PLACED", "TIMESTAMP"), ("TAGS", "ARRAY<STRING>"),
        ("ADDRESS", "STRUCT<`CITY` STRING>"), ("COUNTS", "MAP<STRING, INTEGER>")]
    _s, query = analyze("CREATE STREAM BIG AS SELECT ID, UCASE(ITEM) AS ITEM, PLACED, "
                        "ADDRESS->CITY AS CITY, COUNTS, TAGS FROM ORDERS WHERE ID > 1 "
                        "EMIT CHANGES;", {"ORDERS": source})
    start(runtime, "CSAS_PB_BIG_1", query, sink_of(query, "BIG", out, value_format=Format.PROTOBUF))
    records = read_output(bootstrap, out, 2, runtime=runtime, query_id="CSAS_PB_BIG_1")
    assert len(records) == 2
    latest = client.get_latest_version(f"{out}-value")
    assert latest.schema.schema_type == "PROTOBUF"
    assert (latest.schema.schema_str or "").startswith('syntax = "proto3";')
    assert "message ConnectDefault1 {" in (latest.schema.schema_str or "")
    read = ProtobufDeserializer(registered_message_class(client, f"{out}-value"), {"use.deprecated.format": False},
                                schema_registry_client=client)
    out_ctx = SerializationContext(out, MessageField.VALUE)
    got = [read(value, out_ctx) for _key, value in records]
    assert [(m.ID, m.ITEM, m.CITY, dict(m.COUNTS), list(m.TAGS)) for m in got] == [
        (i, f"I{i}", f"c{i}", {"x": i}, ["a", str(i)]) for i in (2, 3)]
    assert all(m.PLACED.ToDatetime(dt.UTC) == placed.ToDatetime(dt.UTC) for m in got)
    assert runtime.status("CSAS_PB_BIG_1").state == RUNNING    # the bad records did not stop it

    # The two bad records are in the processing-log topic, in ksqlDB's record shape.
    assert processing_log.topic is not None
    entries = [json.loads(v) for v in read_all(bootstrap, processing_log.topic, 2)]
    errors = [e["message"]["deserializationError"] for e in entries]
    assert {e["level"] for e in entries} == {"ERROR"}
    assert {e["message"]["type"] for e in entries} == {0}
    assert [base64.b64decode(e["recordB64"]) for e in errors] == [unknown_id, bad_body]
    assert {(e["target"], e["topic"]) for e in errors} == {("value", topic)}
    assert "987654" in errors[0]["errorMessage"]
    runtime.stop_persistent("CSAS_PB_BIG_1")

    # ... and SELECT * FROM KSQL_PROCESSING_LOG EMIT CHANGES shows them.
    log_stream = ddl(stream_statement(processing_log))
    assert log_stream.name == "KSQL_PROCESSING_LOG"
    _s, select = analyze("SELECT * FROM KSQL_PROCESSING_LOG EMIT CHANGES LIMIT 2;", {"KSQL_PROCESSING_LOG": log_stream})
    push = runtime.start_push(select, EARLIEST)

    async def collect() -> list[Any]:
        return [row async for row in push.rows()]

    rows = asyncio.run(asyncio.wait_for(collect(), 180))
    names = [c.name for c in select.columns]
    assert names == ["LOGGER", "LEVEL", "TIME", "MESSAGE"]
    messages = [dict(zip(names, row, strict=True))["MESSAGE"] for row in rows]
    shown = [m["DESERIALIZATIONERROR"] for m in messages]
    assert [base64.b64decode(s["RECORDB64"]) for s in shown] == [unknown_id, bad_body]
    assert [s["topic"] for s in shown] == [topic, topic]
    assert [m["TYPE"] for m in messages] == [0, 0]


def _plain_file() -> descriptor_pb2.FileDescriptorProto:
    """A hand-written schema of the PROTOBUF_NOSR source: Key {string K}, Value {int32 N;
    Inner S {string A}} (what ksqlDB's generated schema for these columns amounts to)."""
    proto = descriptor_pb2.FileDescriptorProto(name="plain.proto", syntax="proto3")
    key = proto.message_type.add(name="Key")
    key.field.add(name="K", number=1, type=F.TYPE_STRING, label=_OPTIONAL)
    value = proto.message_type.add(name="Value")
    inner = value.nested_type.add(name="Inner")
    inner.field.add(name="A", number=1, type=F.TYPE_STRING, label=_OPTIONAL)
    value.field.add(name="N", number=1, type=F.TYPE_INT32, label=_OPTIONAL)
    value.field.add(name="S", number=2, type=F.TYPE_MESSAGE, type_name=".Value.Inner", label=_OPTIONAL)
    return proto


def test_protobuf_nosr_round_trip_and_a_protobuf_key(runtime, eos_broker, registry):
    bootstrap = eos_broker.bootstrap
    topic, out = unique("nosr_in"), unique("nosr_out")
    create_topics(bootstrap, topic, out)
    key_cls, value_cls = _message_class(_plain_file(), "Key"), _message_class(_plain_file(), "Value")
    produce(bootstrap, topic, [
        (key_cls(K=f"k{i}").SerializeToString(), value_cls(N=i, S=value_cls.Inner(A=f"a{i}")).SerializeToString(), T0 + i)
        for i in (1, 2)])
    source = ddl(f"CREATE STREAM P (K STRING KEY, N INT, S STRUCT<A STRING>) WITH (KAFKA_TOPIC='{topic}', "
                 "KEY_FORMAT='PROTOBUF_NOSR', VALUE_FORMAT='PROTOBUF_NOSR');")
    assert (source.key_format, source.value_format) == (Format.PROTOBUF_NOSR, Format.PROTOBUF_NOSR)
    _s, query = analyze("CREATE STREAM Q AS SELECT K, N * 10 AS N, S FROM P EMIT CHANGES;", {"P": source})
    assert [c.type.base for c in query.columns] == [BaseType.STRING, BaseType.INTEGER, BaseType.STRUCT]
    start(runtime, "CSAS_NOSR_Q_1", query,
          sink_of(query, "Q", out, key_format=Format.PROTOBUF, value_format=Format.PROTOBUF_NOSR))
    records = read_output(bootstrap, out, 2, runtime=runtime, query_id="CSAS_NOSR_Q_1")
    values = [value_cls.FromString(value or b"") for _key, value in records]
    assert [(v.N, v.S.A) for v in values] == [(10, "a1"), (20, "a2")]
    client = SchemaRegistryClient({"url": registry.url})
    read_key = ProtobufDeserializer(registered_message_class(client, f"{out}-key"), {"use.deprecated.format": False},
                                    schema_registry_client=client)
    keys = [read_key(key, SerializationContext(out, MessageField.KEY)) for key, _value in records]
    assert [k.K for k in keys] == ["k1", "k2"]
    runtime.stop_persistent("CSAS_NOSR_Q_1")
