"""AVRO and JSON_SR through whole queries, against ``oncestream schema-registry`` and
confluent-kafka's own serializers: a stream declared without columns reads them from the
registry, records written by confluent-kafka's AvroSerializer are read, the CSAS sink registers
its schema under ``<topic>-value`` and writes records confluent-kafka's AvroDeserializer reads
(logical types included); records with an unknown schema id or a body that does not decode are
dropped into the processing log while the query keeps running."""

from __future__ import annotations

import datetime as dt
import json
import struct
from decimal import Decimal

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from oncestream.sql.engine.runtime import RUNNING
from oncestream.sql.language.catalog import Format
from tests.spark.sql.golden import analyze, create_topics, produce, read_output, registry_source, sink_of, start, unique

pytestmark = [pytest.mark.spark]

T0 = 1_700_000_000_000
ORDER = json.dumps({"type": "record", "name": "Order", "namespace": "acme", "fields": [
    {"name": "id", "type": "long"},
    {"name": "item", "type": ["null", "string"], "default": None},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 8, "scale": 2}},
    {"name": "placed", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "tags", "type": {"type": "array", "items": "string"}}]})


def test_avro_stream_without_columns_to_an_avro_sink(runtime, eos_broker, registry):
    bootstrap = eos_broker.bootstrap
    topic, out = unique("orders"), unique("big_orders")
    create_topics(bootstrap, topic, out)
    client = SchemaRegistryClient({"url": registry.url})
    serialize = AvroSerializer(client, ORDER)
    ctx = SerializationContext(topic, MessageField.VALUE)
    day = dt.date(2024, 2, 29)
    placed = dt.datetime(2024, 2, 29, 12, 0, tzinfo=dt.UTC)
    good = [serialize({"id": i, "item": f"i{i}", "amount": Decimal(f"{i}.25"), "placed": placed, "day": day,
                       "tags": ["a", str(i)]}, ctx) for i in (1, 2, 3)]
    assert good[0] is not None
    unknown_id = struct.pack(">bI", 0, 987_654) + good[0][5:]
    bad_body = good[0][:5] + b"\x02"
    produce(bootstrap, topic, [(None, good[0], T0), (None, unknown_id, T0 + 1), (None, bad_body, T0 + 2),
                               (None, good[1], T0 + 3), (None, good[2], T0 + 4)])

    source = registry_source(f"CREATE STREAM ORDERS WITH (KAFKA_TOPIC='{topic}', VALUE_FORMAT='AVRO');", topic)
    # ksqlDB upper-cases the inferred names of a subject's latest schema
    assert [(c.name, c.type.ksql_name) for c in source.columns] == [
        ("ID", "BIGINT"), ("ITEM", "STRING"), ("AMOUNT", "DECIMAL(8, 2)"), ("PLACED", "TIMESTAMP"), ("DAY", "DATE"),
        ("TAGS", "ARRAY<STRING>")]
    _s, query = analyze("CREATE STREAM BIG AS SELECT ID, AMOUNT * 2 AS TWICE, PLACED, DAY, TAGS "
                        "FROM ORDERS WHERE ID > 1 EMIT CHANGES;", {"ORDERS": source})
    start(runtime, "CSAS_BIG_1", query, sink_of(query, "BIG", out, value_format=Format.AVRO))
    records = read_output(bootstrap, out, 2, runtime=runtime, query_id="CSAS_BIG_1")
    assert len(records) == 2
    latest = client.get_latest_version(f"{out}-value")
    assert json.loads(latest.schema.schema_str or "")["name"] == "KsqlDataSourceSchema"
    read = AvroDeserializer(client)
    out_ctx = SerializationContext(out, MessageField.VALUE)
    assert [read(value, out_ctx) for _key, value in records] == [
        {"ID": i, "TWICE": Decimal(f"{i}.25") * 2, "PLACED": placed, "DAY": day, "TAGS": ["a", str(i)]} for i in (2, 3)]
    assert runtime.status("CSAS_BIG_1").state == RUNNING    # the bad records did not stop it
    runtime.stop_persistent("CSAS_BIG_1")


def test_json_sr_sink_is_read_by_confluents_json_deserializer(runtime, eos_broker, registry):
    bootstrap = eos_broker.bootstrap
    topic, out = unique("plain"), unique("framed")
    create_topics(bootstrap, topic, out)
    produce(bootstrap, topic, [(None, b'{"ID": 1, "NAME": "a"}', T0), (None, b'{"ID": 2, "NAME": "b"}', T0 + 1)])
    source = registry_source(f"CREATE STREAM P (ID INT, NAME STRING) WITH (KAFKA_TOPIC='{topic}', VALUE_FORMAT='JSON');", topic)
    _s, query = analyze("CREATE STREAM F AS SELECT ID, UCASE(NAME) AS NAME FROM P EMIT CHANGES;", {"P": source})
    start(runtime, "CSAS_F_1", query, sink_of(query, "F", out, value_format=Format.JSON_SR))
    records = read_output(bootstrap, out, 2, runtime=runtime, query_id="CSAS_F_1")
    client = SchemaRegistryClient({"url": registry.url})
    schema = client.get_latest_version(f"{out}-value").schema.schema_str or ""
    read = JSONDeserializer(schema, schema_registry_client=client)
    ctx = SerializationContext(out, MessageField.VALUE)
    assert [read(value, ctx) for _key, value in records] == [{"ID": 1, "NAME": "A"}, {"ID": 2, "NAME": "B"}]
    runtime.stop_persistent("CSAS_F_1")


def test_connector_from_avro_and_to_avro(sql_spark, registry):
    """The Spark connector's helpers: confluent-kafka's AvroSerializer output read with
    ``from_avro`` (an unknown id and a bad body read as null), written back with ``to_avro``
    under a new subject and read by confluent-kafka's AvroDeserializer."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from oncestream.spark.registry_formats import from_avro, to_avro

    subject = unique("spark_orders")
    client = SchemaRegistryClient({"url": registry.url})
    ctx = SerializationContext(subject, MessageField.VALUE)
    serialize = AvroSerializer(client, ORDER)
    day, placed = dt.date(2024, 1, 2), dt.datetime(2024, 1, 2, 3, 4, 5, 6000, tzinfo=dt.UTC)
    good = serialize({"id": 7, "item": None, "amount": Decimal("1.50"), "placed": placed, "day": day, "tags": []}, ctx)
    assert good is not None
    rows = [(good,), (struct.pack(">bI", 0, 987_655) + good[5:],), (good[:5] + b"\xff",), (None,)]
    frame = sql_spark.createDataFrame(rows, T.StructType([T.StructField("value", T.BinaryType())]))
    read = frame.select(from_avro(F.col("value"), registry.url, f"{subject}-value").alias("o"))
    got = [r["o"] for r in read.collect()]
    assert got[1:] == [None, None, None]
    assert got[0].asDict() == {"id": 7, "item": None, "amount": Decimal("1.50"), "day": day, "tags": [],
                               "placed": placed.astimezone().replace(tzinfo=None)}
    written = read.where(F.col("o").isNotNull()).select(
        to_avro(F.col("o"), registry.url, f"{subject}-copy-value", ORDER).alias("v")).collect()
    back = AvroDeserializer(client)(bytes(written[0]["v"]), SerializationContext(f"{subject}-copy", MessageField.VALUE))
    assert back == {"id": 7, "item": None, "amount": Decimal("1.50"), "placed": placed, "day": day, "tags": []}
