"""A record a query cannot read never stops it (issue 25): in every format, keys as well as values,
a bad record between good ones is dropped into ksqlDB's processing log (one entry in ksqlDB's
shape: target, topic, the record in base64) while the good records come out exactly once and the
query stays RUNNING, as ksqlDB does with its default ``ksql.fail.on.deserialization.error=false``.

Bad records of each format, as real producers get them wrong:

- JSON: text that is not JSON, an array for an object, a field of another type, a key that is not JSON;
- DELIMITED: too many and too few fields, a field of another type, a key that is not a number;
- KAFKA: an INT key and a BIGINT value of the wrong width;
- AVRO / JSON_SR / PROTOBUF (written by confluent-kafka's serializers against ``oncestream
  schema-registry``): no magic byte, a schema id the registry does not have, the id of another
  subject's schema (of another type, or with the column under another type), a body that does
  not decode, and a framed key with an unknown id.

On the way out, a row the sink's format cannot write is ksqlDB's SERIALIZATION_ERROR entry, and
the query fails, as ksqlDB's does.
"""

from __future__ import annotations

import base64
import json
import struct
import time
from collections.abc import Sequence
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from oncestream.sql.engine.processing_log import ProcessingLogSettings
from oncestream.sql.engine.runtime import ERROR, RUNNING, QueryRuntime
from oncestream.sql.language.catalog import Format, SourceInfo
from tests.spark.sql.golden import (
    analyze,
    create_topics,
    ddl,
    produce,
    read_all,
    read_output,
    registry_source,
    sink_of,
    start,
    unique,
)

pytestmark = [pytest.mark.spark]

T0 = 1_700_000_000_000
GOOD_OUT = [(b"1", {"ID": 1, "NAME": "a"}), (b"2", {"ID": 2, "NAME": "b"}), (b"3", {"ID": 3, "NAME": "c"})]
Record = tuple[bytes | None, bytes | None]
# A query's first batch can take minutes on a loaded CI machine (Spark starts its Python workers).
LOADED_TIMEOUT_S = 300.0


def _frame(schema_id: int, body: bytes) -> bytes:
    return struct.pack(">bI", 0, schema_id) + body


def _run(runtime: QueryRuntime, bootstrap: str, source: SourceInfo, topic: str, records: Sequence[Record],
         bad: Sequence[tuple[str, bytes]], log: ProcessingLogSettings, query_id: str, *,
         columns: str = "K, ID, NAME", expected: Sequence[tuple[bytes, dict[str, Any]]] = GOOD_OUT) -> list[str]:
    """Produce ``records`` to ``topic`` (read as ``source``), run a CSAS copying ``columns`` to a
    JSON topic and check: ``expected`` exactly once, in order; the query RUNNING; one
    processing-log entry per ``bad`` (target, record) in ksqlDB's shape. The entries' messages."""
    out = unique("bad_out")
    create_topics(bootstrap, out)
    produce(bootstrap, topic, [(k, v, T0 + i) for i, (k, v) in enumerate(records)])
    _s, query = analyze(f"CREATE STREAM C AS SELECT {columns} FROM S EMIT CHANGES;", {"S": source})
    start(runtime, query_id, query, sink_of(query, "C", out, key_format=Format.JSON, value_format=Format.JSON))
    try:
        assert log.topic is not None
        entries = [json.loads(v) for v in read_all(bootstrap, log.topic, len(bad), LOADED_TIMEOUT_S)]
        got = read_output(bootstrap, out, len(expected), runtime=runtime, query_id=query_id)
        assert [(k, json.loads(v or b"null")) for k, v in got] == list(expected)
        assert runtime.status(query_id).state == RUNNING
    finally:
        runtime.stop_persistent(query_id)
    assert {(e["level"], e["message"]["type"]) for e in entries} == {("ERROR", 0)}
    errors = [e["message"]["deserializationError"] for e in entries]
    assert sorted((e["target"], base64.b64decode(e["recordB64"])) for e in errors) == sorted(bad)
    assert {e["topic"] for e in errors} == {topic}
    assert all(e["errorMessage"] for e in errors)
    assert all(e["message"][other] is None for e in entries for other in
               ("recordProcessingError", "productionError", "serializationError", "kafkaStreamsThreadError"))
    return [e["errorMessage"] for e in errors]


def test_json_bad_values_and_keys_go_to_the_processing_log(runtime, eos_broker, processing_log):
    topic = unique("bad_json")
    create_topics(eos_broker.bootstrap, topic)
    source = ddl(f"CREATE STREAM S (K INT KEY, ID INT, NAME STRING) WITH (KAFKA_TOPIC='{topic}', FORMAT='JSON');")
    bad = [("value", b"not json"), ("value", b'[1, "a"]'), ("value", b'{"ID": "one", "NAME": "x"}'),
           ("key", b"{not json")]
    records: list[Record] = [(b"1", b'{"ID": 1, "NAME": "a"}'), (b"9", bad[0][1]), (b"9", bad[1][1]),
                             (b"2", b'{"id": 2, "name": "b"}'), (b"9", bad[2][1]), (bad[3][1], b'{"ID": 9}'),
                             (b"3", b'{"ID": "3", "NAME": "c"}')]   # a number in a string reads (ksqlDB's coercion)
    _run(runtime, eos_broker.bootstrap, source, topic, records, bad, processing_log, "CSAS_BAD_JSON_1")


def test_delimited_bad_values_and_keys_go_to_the_processing_log(runtime, eos_broker, processing_log):
    topic = unique("bad_csv")
    create_topics(eos_broker.bootstrap, topic)
    source = ddl(f"CREATE STREAM S (K INT KEY, ID INT, NAME STRING) WITH (KAFKA_TOPIC='{topic}', "
                 "FORMAT='DELIMITED');")
    bad = [("value", b"9,x,extra"), ("value", b"9"), ("value", b"nine,x"), ("key", b"k")]
    records: list[Record] = [(b"1", b"1,a"), (b"9", bad[0][1]), (b"9", bad[1][1]), (b"2", b"2,b"),
                             (b"9", bad[2][1]), (bad[3][1], b"9,x"), (b"3", b'3,"c"')]
    _run(runtime, eos_broker.bootstrap, source, topic, records, bad, processing_log, "CSAS_BAD_CSV_1")


def test_kafka_bad_widths_go_to_the_processing_log(runtime, eos_broker, processing_log):
    topic = unique("bad_kafka")
    create_topics(eos_broker.bootstrap, topic)
    source = ddl(f"CREATE STREAM S (K INT KEY, ID BIGINT) WITH (KAFKA_TOPIC='{topic}', FORMAT='KAFKA');")
    bad = [("value", b"\x00\x00\x01"), ("key", b"\x00\x01")]

    def key(i: int) -> bytes:
        return struct.pack(">i", i)

    def value(i: int) -> bytes:
        return struct.pack(">q", i)

    records: list[Record] = [(key(1), value(10)), (key(9), bad[0][1]), (key(2), value(20)), (bad[1][1], value(90)),
                             (key(3), value(30))]
    messages = _run(runtime, eos_broker.bootstrap, source, topic, records, bad, processing_log, "CSAS_BAD_KAFKA_1",
                    columns="K, ID", expected=[(str(i).encode(), {"ID": 10 * i}) for i in (1, 2, 3)])
    assert any("Size of data received by" in m for m in messages)


PERSON = json.dumps({"type": "record", "name": "Person", "fields": [
    {"name": "ID", "type": "int"}, {"name": "NAME", "type": "string"}]})
PERSON_ID_AS_TEXT = json.dumps({"type": "record", "name": "Other", "fields": [
    {"name": "ID", "type": "string"}, {"name": "NAME", "type": "string"}]})


def test_avro_bad_framing_ids_and_bodies_go_to_the_processing_log(runtime, eos_broker, registry, processing_log):
    topic = unique("bad_avro")
    create_topics(eos_broker.bootstrap, topic)
    client = SchemaRegistryClient({"url": registry.url})
    value_ctx, key_ctx = SerializationContext(topic, MessageField.VALUE), SerializationContext(topic, MessageField.KEY)
    serialize = AvroSerializer(client, PERSON)
    serialize_key = AvroSerializer(client, '"int"')
    other = AvroSerializer(client, PERSON_ID_AS_TEXT)
    json_id = client.register_schema(unique("elsewhere") + "-value", Schema(json.dumps({"type": "object"}), "JSON"))

    def value(i: int, name: str) -> bytes:
        data = serialize({"ID": i, "NAME": name}, value_ctx)
        assert data is not None
        return data

    def key(i: int) -> bytes:
        data = serialize_key(i, key_ctx)
        assert data is not None
        return data

    good = value(9, "z")
    wrong_type = other({"ID": "nine", "NAME": "z"}, SerializationContext(unique("elsewhere"), MessageField.VALUE))
    assert wrong_type is not None
    bad = [("value", good[5:]),                          # no magic byte, no id
           ("value", _frame(987_654, good[5:])),          # an id the registry does not have
           ("value", _frame(json_id, good[5:])),          # the id of another subject's JSON schema
           ("value", wrong_type),                         # another subject's record: ID a string
           ("value", good[:5] + b"\x12"),                 # a body cut short
           ("key", _frame(987_655, key(9)[5:]))]          # a key with an unknown id
    records: list[Record] = [(key(1), value(1, "a")), *((key(9), data) for _t, data in bad[:-1]),
                             (key(2), value(2, "b")), (bad[-1][1], good), (key(3), value(3, "c"))]
    source = registry_source(f"CREATE STREAM S (K INT KEY, ID INT, NAME STRING) WITH (KAFKA_TOPIC='{topic}', "
                             "FORMAT='AVRO');", topic)
    _run(runtime, eos_broker.bootstrap, source, topic, records, bad, processing_log, "CSAS_BAD_AVRO_1")


def test_json_sr_bad_framing_ids_and_bodies_go_to_the_processing_log(runtime, eos_broker, registry, processing_log):
    topic = unique("bad_jsr")
    create_topics(eos_broker.bootstrap, topic)
    client = SchemaRegistryClient({"url": registry.url})
    schema = json.dumps({"type": "object", "properties": {"ID": {"type": "integer"}, "NAME": {"type": "string"}}})
    serialize = JSONSerializer(schema, client)
    ctx = SerializationContext(topic, MessageField.VALUE)
    avro_id = client.register_schema(unique("elsewhere") + "-value", Schema(PERSON, "AVRO"))

    def value(i: int, name: str) -> bytes:
        data = serialize({"ID": i, "NAME": name}, ctx)
        assert data is not None
        return data

    good = value(9, "z")
    bad = [("value", _frame(987_654, good[5:])),          # an id the registry does not have
           ("value", _frame(avro_id, good[5:])),          # the id of another subject's AVRO schema
           ("value", good[:5] + b"{not json"),            # a body that is not JSON
           ("value", good[:5] + b'{"ID": "x"}')]          # a field of another type
    records: list[Record] = [(b"1", value(1, "a")), *((b"9", data) for _t, data in bad[:2]), (b"2", value(2, "b")),
                             *((b"9", data) for _t, data in bad[2:]), (b"3", value(3, "c"))]
    source = registry_source(f"CREATE STREAM S (K STRING KEY, ID INT, NAME STRING) WITH (KAFKA_TOPIC='{topic}', "
                             "KEY_FORMAT='KAFKA', VALUE_FORMAT='JSON_SR');", topic)
    out = [(b'"1"', {"ID": 1, "NAME": "a"}), (b'"2"', {"ID": 2, "NAME": "b"}), (b'"3"', {"ID": 3, "NAME": "c"})]
    _run(runtime, eos_broker.bootstrap, source, topic, records, bad, processing_log, "CSAS_BAD_JSR_1", expected=out)


def test_a_row_the_sink_cannot_write_is_a_serialization_error_and_the_query_fails(runtime, eos_broker, registry,
                                                                                  processing_log):
    """A null element of an ARRAY has no proto3 form: ksqlDB's LoggingSerializer logs a
    SERIALIZATION_ERROR (type 3) and the query fails (Kafka Streams' default answer to a
    serializer's exception); so does ours."""
    bootstrap = eos_broker.bootstrap
    topic, out = unique("unwritable"), unique("unwritable_out")
    create_topics(bootstrap, topic, out)
    produce(bootstrap, topic, [(None, b'{"A": [1, null]}', T0)])
    source = ddl(f"CREATE STREAM S (A ARRAY<INT>) WITH (KAFKA_TOPIC='{topic}', VALUE_FORMAT='JSON');")
    _s, query = analyze("CREATE STREAM P AS SELECT A FROM S EMIT CHANGES;", {"S": source})
    start(runtime, "CSAS_UNWRITABLE_1", query, sink_of(query, "P", out, value_format=Format.PROTOBUF))
    try:
        deadline = time.monotonic() + LOADED_TIMEOUT_S
        while runtime.status("CSAS_UNWRITABLE_1").state != ERROR and time.monotonic() < deadline:
            time.sleep(0.5)
        assert runtime.status("CSAS_UNWRITABLE_1").state == ERROR
        assert processing_log.topic is not None
        entry = json.loads(read_all(bootstrap, processing_log.topic, 1)[0])
    finally:
        runtime.stop_persistent("CSAS_UNWRITABLE_1")
    assert (entry["level"], entry["logger"], entry["message"]["type"]) == ("ERROR", f"processing.{out}.value.serializer", 3)
    error = entry["message"]["serializationError"]
    assert (error["target"], error["topic"]) == ("value", out)
    assert error["errorMessage"]
    assert error["record"] == repr({"A": [1, None]})
    assert entry["message"]["deserializationError"] is None
