"""Unwrapped single values (``WRAP_SINGLE_VALUE=false``) and PROTOBUF's nullable representations
through whole queries on Spark, against ``oncestream schema-registry``, judged by confluent-kafka:

- an AVRO stream declared without columns over an anonymous array schema (records written by
  confluent-kafka's AvroSerializer) is one column ``ROWVAL``; its CSAS with
  ``WRAP_SINGLE_VALUE=false`` registers the bare array schema and writes bare arrays that
  confluent-kafka's AvroDeserializer reads; a null column is a null record;
- a JSON_SR sink with ``WRAP_SINGLE_VALUE=false`` writes bare maps JSONDeserializer reads;
- PROTOBUF sinks with ``VALUE_PROTOBUF_NULLABLE_REPRESENTATION`` OPTIONAL and WRAPPER register
  schemas whose nulls ProtobufDeserializer tells from defaults (field presence).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from oncestream.sql.language.catalog import Format
from tests.spark.sql.golden import (
    analyze,
    create_topics,
    produce,
    read_output,
    registered_message_class,
    registry_source,
    sink_of,
    start,
    unique,
)

pytestmark = [pytest.mark.spark]

T0 = 1_700_000_000_000


def test_avro_anonymous_array_in_and_out(runtime, eos_broker, registry):
    bootstrap = eos_broker.bootstrap
    topic, out = unique("tags"), unique("tags_out")
    create_topics(bootstrap, topic, out)
    client = SchemaRegistryClient({"url": registry.url})
    serialize = AvroSerializer(client, json.dumps({"type": "array", "items": ["null", "string"]}))
    ctx = SerializationContext(topic, MessageField.VALUE)
    produce(bootstrap, topic, [(None, serialize(["a", None, "c"], ctx), T0), (None, serialize([], ctx), T0 + 1),
                               (None, serialize(["z"], ctx), T0 + 2)])
    source = registry_source(f"CREATE STREAM TAGS WITH (KAFKA_TOPIC='{topic}', VALUE_FORMAT='AVRO', "
                             "WRAP_SINGLE_VALUE=false);", topic)
    assert [(c.name, c.type.ksql_name) for c in source.columns] == [("ROWVAL", "ARRAY<STRING>")]
    assert source.value_unwrapped
    _s, query = analyze("CREATE STREAM OUT AS SELECT CASE WHEN ARRAY_LENGTH(ROWVAL) = 0 THEN NULL ELSE ROWVAL END "
                        "AS TAGS FROM TAGS EMIT CHANGES;", {"TAGS": source})
    start(runtime, "CSAS_TAGS_1", query, sink_of(query, "OUT", out, value_format=Format.AVRO, value_unwrapped=True))
    records = read_output(bootstrap, out, 3, runtime=runtime, query_id="CSAS_TAGS_1")
    registered = json.loads(client.get_latest_version(f"{out}-value").schema.schema_str or "")
    assert registered == {"type": "array", "items": ["null", "string"]}   # no record around it
    read = AvroDeserializer(client)
    out_ctx = SerializationContext(out, MessageField.VALUE)
    values = [value for _key, value in records]
    assert values[1] is None                      # a null single column: a null record
    assert [read(v, out_ctx) for v in (values[0], values[2])] == [["a", None, "c"], ["z"]]
    runtime.stop_persistent("CSAS_TAGS_1")


def test_json_sr_unwrapped_map_sink(runtime, eos_broker, registry):
    bootstrap = eos_broker.bootstrap
    topic, out = unique("counts"), unique("counts_out")
    create_topics(bootstrap, topic, out)
    produce(bootstrap, topic, [(None, b'{"C": {"a": 1, "b": 2}}', T0), (None, b'{"C": {"x": null}}', T0 + 1)])
    source = registry_source(f"CREATE STREAM C (C MAP<STRING, INT>) WITH (KAFKA_TOPIC='{topic}', "
                             "VALUE_FORMAT='JSON');", topic)
    _s, query = analyze("CREATE STREAM M AS SELECT C FROM C EMIT CHANGES;", {"C": source})
    start(runtime, "CSAS_M_1", query, sink_of(query, "M", out, value_format=Format.JSON_SR, value_unwrapped=True))
    records = read_output(bootstrap, out, 2, runtime=runtime, query_id="CSAS_M_1")
    client = SchemaRegistryClient({"url": registry.url})
    schema = client.get_latest_version(f"{out}-value").schema.schema_str or ""
    registered = json.loads(schema)
    assert (registered["type"], registered.get("properties")) == ("object", None)   # the bare map
    read = JSONDeserializer(schema, schema_registry_client=client)
    ctx = SerializationContext(out, MessageField.VALUE)
    assert [read(value, ctx) for _key, value in records] == [{"a": 1, "b": 2}, {"x": None}]
    runtime.stop_persistent("CSAS_M_1")


@pytest.mark.parametrize("nullable", ["OPTIONAL", "WRAPPER"])
def test_protobuf_nullable_representation_sinks(runtime, eos_broker, registry, nullable):
    bootstrap = eos_broker.bootstrap
    topic, out = unique("prims"), unique(f"prims_{nullable.lower()}")
    create_topics(bootstrap, topic, out)
    produce(bootstrap, topic, [(None, b'{"I": null, "L": 0, "S": null}', T0), (None, b'{"I": 0, "L": null, "S": ""}', T0 + 1)])
    source = registry_source(f"CREATE STREAM P (I INT, L BIGINT, S STRING) WITH (KAFKA_TOPIC='{topic}', "
                             "VALUE_FORMAT='JSON');", topic)
    _s, query = analyze("CREATE STREAM Q AS SELECT * FROM P EMIT CHANGES;", {"P": source})
    query_id = f"CSAS_Q_{nullable}"
    start(runtime, query_id, query, sink_of(query, "Q", out, value_format=Format.PROTOBUF,
                                            value_protobuf_nullable=nullable))
    records = read_output(bootstrap, out, 2, runtime=runtime, query_id=query_id)
    client = SchemaRegistryClient({"url": registry.url})
    text = client.get_latest_version(f"{out}-value").schema.schema_str or ""
    expected_field = "optional int32 I = 1;" if nullable == "OPTIONAL" else "google.protobuf.Int32Value I = 1;"
    assert expected_field in text
    read = ProtobufDeserializer(registered_message_class(client, f"{out}-value"), {"use.deprecated.format": False},
                                schema_registry_client=client)
    ctx = SerializationContext(out, MessageField.VALUE)
    got = [read(value, ctx) for _key, value in records]

    def seen(message: Any) -> dict[str, Any]:
        out = {}
        for name in ("I", "L", "S"):
            value = getattr(message, name)
            out[name] = (value.value if nullable == "WRAPPER" else value) if message.HasField(name) else None
        return out

    assert [seen(m) for m in got] == [{"I": None, "L": 0, "S": None}, {"I": 0, "L": None, "S": ""}]
    runtime.stop_persistent(query_id)
