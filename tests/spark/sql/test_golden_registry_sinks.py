"""Registry-format sinks and sources that name their schemas, through whole queries against
``oncestream schema-registry``, read back with confluent-kafka's deserializers:

- a CSAS with ``VALUE_SCHEMA_ID`` writes with that schema (avro.json's "VALUE_SCHEMA_ID with
  compound types" cases): the sink's subject keeps its one version, fields the query lacks or
  leaves null take the schema's defaults;
- a PROTOBUF stream over a schema with a reference (``import "event.proto"``) infers its columns
  through the referenced file and its CSAS writes records of that schema (protobuf.json's
  "deserialize and serialize schema using internal references using schema id").
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from oncestream.spark.schema_registry_client import frame
from oncestream.sql.engine.runtime import RUNNING
from oncestream.sql.language.parser import parse
from oncestream.sql.server.metastore import Metastore
from tests.spark.sql.golden import analyze, create_topics, produce, read_output, start, unique

pytestmark = [pytest.mark.spark]

T0 = 1_700_000_000_000
TRANSACTION = {"type": "record", "name": "Transaction", "namespace": "com.acme.namespace", "fields": [
    {"name": "eventID", "type": "string"},
    {"name": "transaction", "type": {"type": "record", "name": "transaction", "fields": [
        {"name": "num_shares", "type": "int", "default": 0}, {"name": "amount", "type": ["null", "int"]}]}},
    {"name": "optField", "type": "string", "default": "foo"}]}
F = descriptor_pb2.FieldDescriptorProto


def _plan(registry_url: str, sql: str, topics: dict[str, int]) -> Metastore:
    from oncestream.spark.schema_registry_client import RegistryClient

    metastore = Metastore()
    for offset, stmt in enumerate(parse(sql)):
        metastore.apply(metastore.validate(stmt, {}, topics, RegistryClient(registry_url)), offset)
    return metastore


def test_a_sink_named_by_value_schema_id_writes_with_that_schema(runtime, eos_broker, registry):
    bootstrap = eos_broker.bootstrap
    topic, out = unique("txs"), unique("model_txs")
    create_topics(bootstrap, topic, out)
    client = SchemaRegistryClient({"url": registry.url})
    schema_id = client.register_schema(f"{out}-value", Schema(json.dumps(TRANSACTION), "AVRO"))
    produce(bootstrap, topic, [(b"1", b'{"id": "1", "tx": "{\\"amount\\": 5}"}', T0),
                               (b"2", b'{"id": "2", "tx": "{\\"n\\": 7, \\"amount\\": 9}"}', T0 + 1)])
    create_as = (f"CREATE STREAM M WITH (KAFKA_TOPIC='{out}', VALUE_FORMAT='AVRO', VALUE_SCHEMA_ID={schema_id}) AS "
                 "SELECT `id`, AS_VALUE(`id`) AS `eventID`, STRUCT(`num_shares` := CAST(EXTRACTJSONFIELD(`tx`, '$.n') "
                 "AS INT), `amount` := CAST(EXTRACTJSONFIELD(`tx`, '$.amount') AS INT)) AS `transaction` FROM TXS;")
    metastore = _plan(registry.url, f"CREATE STREAM TXS (`id` STRING KEY, `tx` STRING) WITH (KAFKA_TOPIC='{topic}', "
                                    f"VALUE_FORMAT='JSON'); {create_as}", {topic: 1, out: 1})
    sink, txs = metastore.source("M"), metastore.source("TXS")
    assert sink is not None
    assert txs is not None
    assert sink.value_schema_id == schema_id
    _s, query = analyze(create_as, {"TXS": txs})
    start(runtime, "CSAS_M_1", query, sink)
    records = read_output(bootstrap, out, 2, runtime=runtime, query_id="CSAS_M_1")
    read = AvroDeserializer(client)
    ctx = SerializationContext(out, MessageField.VALUE)
    assert [int.from_bytes((value or b"")[1:5], "big") for _key, value in records] == [schema_id, schema_id]
    assert [read(value, ctx) for _key, value in records] == [
        {"eventID": "1", "transaction": {"num_shares": 0, "amount": 5}, "optField": "foo"},
        {"eventID": "2", "transaction": {"num_shares": 7, "amount": 9}, "optField": "foo"}]
    assert client.get_versions(f"{out}-value") == [1]   # the schema itself, not the columns' own
    assert runtime.status("CSAS_M_1").state == RUNNING
    runtime.stop_persistent("CSAS_M_1")


def _logistics_files() -> tuple[descriptor_pb2.FileDescriptorProto, descriptor_pb2.FileDescriptorProto]:
    event = descriptor_pb2.FileDescriptorProto(name="event.proto", syntax="proto3")
    event.message_type.add(name="Event").field.add(name="timestamp", number=1, type=F.TYPE_INT64,
                                                   label=F.LABEL_OPTIONAL)
    logistics = descriptor_pb2.FileDescriptorProto(name="logistics.proto", syntax="proto3", dependency=["event.proto"])
    logistics.message_type.add(name="Logistics").field.add(name="event", number=1, type=F.TYPE_MESSAGE,
                                                           type_name=".Event", label=F.LABEL_OPTIONAL)
    return event, logistics


def _logistics_class() -> Any:
    pool = descriptor_pool.DescriptorPool()
    for file_proto in _logistics_files():
        pool.Add(file_proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("Logistics"))


def test_a_protobuf_schema_with_a_reference_is_read_and_written(runtime, eos_broker, registry):
    bootstrap = eos_broker.bootstrap
    topic, out = unique("logistics"), unique("logistics_out")
    create_topics(bootstrap, topic, out)
    client = SchemaRegistryClient({"url": registry.url})
    event_subject = unique("event")
    client.register_schema(event_subject, Schema('syntax = "proto3";\nmessage Event {\n int64 timestamp = 1;\n}',
                                                 "PROTOBUF"))
    logistics_text = 'syntax = "proto3";\n\nimport "event.proto";\n\nmessage Logistics {\n Event event = 1;\n}'
    reference = SchemaReference("event.proto", event_subject, 1)
    schema_id = client.register_schema(f"{topic}-value", Schema(logistics_text, "PROTOBUF", [reference]))
    logistics = _logistics_class()
    produce(bootstrap, topic, [(None, frame(schema_id, b"\x00" + logistics(event={"timestamp": t}).SerializeToString()),
                                T0 + t) for t in (1, 2)])
    create_as = f"CREATE STREAM OUTPUT WITH (KAFKA_TOPIC='{out}', VALUE_SCHEMA_ID={schema_id}) AS SELECT * FROM INPUT;"
    metastore = _plan(registry.url, f"CREATE STREAM INPUT WITH (KAFKA_TOPIC='{topic}', VALUE_FORMAT='PROTOBUF', "
                                    f"VALUE_SCHEMA_ID={schema_id}); {create_as}", {topic: 1, out: 1})
    source, sink = metastore.source("INPUT"), metastore.source("OUTPUT")
    assert source is not None
    assert sink is not None
    # the referenced file's message is a STRUCT column, its names as the schema has them (a schema id)
    assert [(c.name, c.type.ksql_name) for c in source.columns] == [("event", "STRUCT<`timestamp` BIGINT>")]
    _s, query = analyze(create_as, {"INPUT": source})
    start(runtime, "CSAS_OUTPUT_1", query, sink)
    records = read_output(bootstrap, out, 2, runtime=runtime, query_id="CSAS_OUTPUT_1")
    read = ProtobufDeserializer(logistics, {"use.deprecated.format": False})
    ctx = SerializationContext(out, MessageField.VALUE)
    assert [int.from_bytes((value or b"")[1:5], "big") for _key, value in records] == [schema_id, schema_id]
    assert [read(value, ctx).event.timestamp for _key, value in records] == [1, 2]
    runtime.stop_persistent("CSAS_OUTPUT_1")
