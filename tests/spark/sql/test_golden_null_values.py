"""Golden tests of a STREAM's records whose value is null (issues 24 and 25), through Spark and a
real broker: a projection (SELECT *, a SELECT list, PARTITION BY) writes them with a null value,
keeping the record's key and timestamp; WHERE, table functions, aggregations and joins drop them;
push queries do not show them (compile/null_values.py has ksqlDB's rules). Input produced with
confluent-kafka, output read read_committed with confluent-kafka; the expected records are those
of ksqlDB's query-validation cases (null.json, partition-by.json, project-filter.json,
delimited.json, avro.json...) for the same inputs."""

from __future__ import annotations

import asyncio
import json
import struct

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from oncestream.sql.language.catalog import Format, SourceInfo
from tests.spark.sql.golden import (
    EARLIEST,
    analyze,
    create_topics,
    ddl,
    produce,
    read_output,
    read_timed_output,
    registry_source,
    sink_of,
    start,
    unique,
)

# Spark starting several streaming queries per test, on a loaded machine.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

T0 = 1_700_000_000_000


def _int(v: int) -> bytes:
    return struct.pack(">i", v)


def _stream(bootstrap: str) -> tuple[str, SourceInfo]:
    """A JSON stream whose second record has a null value (key 2, at T0 + 1)."""
    topic = unique("nv_in")
    create_topics(bootstrap, topic)
    source = ddl(f"CREATE STREAM S (K INT KEY, NAME STRING, V INT) WITH (KAFKA_TOPIC='{topic}', VALUE_FORMAT='JSON');")
    produce(bootstrap, topic, [(_int(1), b'{"NAME":"a","V":1}', T0), (_int(2), None, T0 + 1),
                               (_int(3), b'{"NAME":null,"V":3}', T0 + 2)])
    return topic, source


def test_projection_writes_a_null_value_where_drops_it(runtime, eos_broker):
    """ksqlDB's "stream clone row with null value" and "stream filter with null value": SELECT *
    writes the record with a null value, its key and timestamp; WHERE NAME IS NULL drops it."""
    bootstrap = eos_broker.bootstrap
    _topic, s = _stream(bootstrap)
    clone_out, filtered_out = unique("nv_clone"), unique("nv_filtered")
    create_topics(bootstrap, clone_out, filtered_out)
    _st, clone = analyze("CREATE STREAM CLONE AS SELECT * FROM S;", {"S": s})
    start(runtime, "CSAS_CLONE_1", clone, sink_of(clone, "CLONE", clone_out))
    _st, filtered = analyze("CREATE STREAM FILTERED AS SELECT * FROM S WHERE NAME IS NULL;", {"S": s})
    start(runtime, "CSAS_FILTERED_2", filtered, sink_of(filtered, "FILTERED", filtered_out))
    assert read_timed_output(bootstrap, clone_out, 3, runtime=runtime, query_id="CSAS_CLONE_1") == [
        (_int(1), b'{"NAME":"a","V":1}', T0), (_int(2), None, T0 + 1), (_int(3), b'{"NAME":null,"V":3}', T0 + 2)]
    assert read_output(bootstrap, filtered_out, 1, runtime=runtime, query_id="CSAS_FILTERED_2") == [
        (_int(3), b'{"NAME":null,"V":3}')]
    runtime.stop_persistent("CSAS_CLONE_1")
    runtime.stop_persistent("CSAS_FILTERED_2")


def test_partition_by_computes_a_null_values_key_from_its_key_only(runtime, eos_broker):
    """ksqlDB's "stream PARTITION BY IS NULL with null value" and "key expression - with null
    value": a PARTITION BY expression reading a value column gives the null-valued record a null
    key (not true for NAME IS NULL), one reading the key only is computed (K + 2)."""
    bootstrap = eos_broker.bootstrap
    _topic, s = _stream(bootstrap)
    by_null_out, by_key_out = unique("nv_bynull"), unique("nv_bykey")
    create_topics(bootstrap, by_null_out, by_key_out)
    _st, by_null = analyze("CREATE STREAM BYNULL AS SELECT * FROM S PARTITION BY (NAME IS NULL);", {"S": s})
    # a BOOLEAN key: the KAFKA key format has none, so JSON
    start(runtime, "CSAS_BYNULL_3", by_null, sink_of(by_null, "BYNULL", by_null_out, key_format=Format.JSON))
    _st, by_key = analyze("CREATE STREAM BYKEY AS SELECT K + 2 AS K2, NAME FROM S PARTITION BY K + 2;", {"S": s})
    start(runtime, "CSAS_BYKEY_4", by_key, sink_of(by_key, "BYKEY", by_key_out))
    records = read_output(bootstrap, by_null_out, 3, runtime=runtime, query_id="CSAS_BYNULL_3")
    assert [(k, None if v is None else json.loads(v)) for k, v in records] == [
        (b"false", {"NAME": "a", "K": 1, "V": 1}), (None, None), (b"true", {"NAME": None, "K": 3, "V": 3})]
    assert read_output(bootstrap, by_key_out, 3, runtime=runtime, query_id="CSAS_BYKEY_4") == [
        (_int(3), b'{"NAME":"a"}'), (_int(4), None), (_int(5), b'{"NAME":null}')]
    runtime.stop_persistent("CSAS_BYNULL_3")
    runtime.stop_persistent("CSAS_BYKEY_4")


def test_push_query_does_not_show_a_null_value(runtime, eos_broker):
    """ksqlDB's transient queries drop a stream's null values (TransientQuerySinkProcessor)."""
    _topic, s = _stream(eos_broker.bootstrap)
    _st, analyzed = analyze("SELECT K, NAME FROM S EMIT CHANGES LIMIT 2;", {"S": s})
    push = runtime.start_push(analyzed, EARLIEST)

    async def collect() -> list:
        return [row async for row in push.rows()]

    assert asyncio.run(asyncio.wait_for(collect(), 180)) == [[1, "a"], [3, None]]


def test_delimited_and_kafka_values_write_a_null_value(runtime, eos_broker):
    """ksqlDB's "deserialize anonymous primitive by default - value - DELIMITED" and the KAFKA
    format alike: a null value is ksqlDB's null row, not a row of one null column."""
    bootstrap = eos_broker.bootstrap
    csv_in, kafka_in, csv_out, kafka_out = (unique("nv_csv"), unique("nv_kafka"), unique("nv_csv_out"),
                                            unique("nv_kafka_out"))
    create_topics(bootstrap, csv_in, kafka_in, csv_out, kafka_out)
    csv = ddl(f"CREATE STREAM C (K INT KEY, N STRING, V BIGINT) WITH (KAFKA_TOPIC='{csv_in}', VALUE_FORMAT='DELIMITED');")
    kafka = ddl(f"CREATE STREAM B (K INT KEY, V BIGINT) WITH (KAFKA_TOPIC='{kafka_in}', VALUE_FORMAT='KAFKA');")
    produce(bootstrap, csv_in, [(_int(1), None, T0), (_int(2), b"x,2", T0 + 1)])
    produce(bootstrap, kafka_in, [(_int(1), struct.pack(">q", 7), T0), (_int(2), None, T0 + 1)])
    _st, q1 = analyze("CREATE STREAM COUT AS SELECT * FROM C;", {"C": csv})
    start(runtime, "CSAS_COUT_1", q1, sink_of(q1, "COUT", csv_out, value_format=Format.DELIMITED))
    _st, q2 = analyze("CREATE STREAM BOUT AS SELECT K, V * 2 AS V2 FROM B;", {"B": kafka})
    start(runtime, "CSAS_BOUT_2", q2, sink_of(q2, "BOUT", kafka_out, value_format=Format.KAFKA))
    assert read_output(bootstrap, csv_out, 2, runtime=runtime, query_id="CSAS_COUT_1") == [
        (_int(1), None), (_int(2), b"x,2")]
    assert read_output(bootstrap, kafka_out, 2, runtime=runtime, query_id="CSAS_BOUT_2") == [
        (_int(1), struct.pack(">q", 14)), (_int(2), None)]
    runtime.stop_persistent("CSAS_COUT_1")
    runtime.stop_persistent("CSAS_BOUT_2")


def _three_rows(bootstrap: str) -> SourceInfo:
    """A JSON stream of key 1: two rows and, between them, a null value."""
    topic = unique("nv_s")
    create_topics(bootstrap, topic)
    s = ddl(f"CREATE STREAM S (K INT KEY, NAME STRING, A ARRAY<INT>) WITH (KAFKA_TOPIC='{topic}', VALUE_FORMAT='JSON');")
    produce(bootstrap, topic, [(_int(1), b'{"NAME":"a","A":[1,2]}', T0 + 3), (_int(1), None, T0 + 4),
                               (_int(1), b'{"NAME":"a","A":[3]}', T0 + 5)])
    return s


def test_aggregations_and_table_functions_drop_a_null_value(runtime, eos_broker):
    """ksqlDB's "stream GROUP BY with null value" and "count literal": COUNT ignores the record;
    EXPLODE gives no row for it (KudtfFlatMapper)."""
    bootstrap = eos_broker.bootstrap
    s = _three_rows(bootstrap)
    counts_out, exploded_out = unique("nv_counts"), unique("nv_exploded")
    create_topics(bootstrap, counts_out, exploded_out)
    _st, counts = analyze("CREATE TABLE COUNTS AS SELECT K, COUNT(*) AS N FROM S GROUP BY K;", {"S": s})
    start(runtime, "CTAS_COUNTS_5", counts, sink_of(counts, "COUNTS", counts_out))
    _st, exploded = analyze("CREATE STREAM EXPLODED AS SELECT K, EXPLODE(A) AS E FROM S;", {"S": s})
    start(runtime, "CSAS_EXPLODED_6", exploded, sink_of(exploded, "EXPLODED", exploded_out))
    # Spark may fold the updates of one micro-batch: read until the count of the two rows is there.
    records = read_output(bootstrap, counts_out, 1, runtime=runtime, query_id="CTAS_COUNTS_5")
    while records[-1] != (_int(1), b'{"N":2}') and len(records) < 3:
        records = read_output(bootstrap, counts_out, len(records) + 1, runtime=runtime, query_id="CTAS_COUNTS_5")
    assert records[-1] == (_int(1), b'{"N":2}')
    assert b'{"N":3}' not in [v for _k, v in records]
    assert read_output(bootstrap, exploded_out, 3, runtime=runtime, query_id="CSAS_EXPLODED_6") == [
        (_int(1), b'{"E":1}'), (_int(1), b'{"E":2}'), (_int(1), b'{"E":3}')]
    runtime.stop_persistent("CTAS_COUNTS_5")
    runtime.stop_persistent("CSAS_EXPLODED_6")


def test_joins_drop_a_null_value(runtime, eos_broker):
    """A stream-table and a stream-stream join skip a stream record whose value is null (Kafka
    Streams' join processors; ksqlDB's "stream-table-table - qualified select *"), on either
    side of the stream-stream join."""
    bootstrap = eos_broker.bootstrap
    s = _three_rows(bootstrap)
    t_topic, r_topic, st_out, ss_out = unique("nv_t"), unique("nv_r"), unique("nv_st"), unique("nv_ss")
    create_topics(bootstrap, t_topic, r_topic, st_out, ss_out)
    t = ddl(f"CREATE TABLE T (K INT PRIMARY KEY, TV STRING) WITH (KAFKA_TOPIC='{t_topic}', VALUE_FORMAT='JSON');")
    r = ddl(f"CREATE STREAM R (K INT KEY, RV STRING) WITH (KAFKA_TOPIC='{r_topic}', VALUE_FORMAT='JSON');")
    produce(bootstrap, t_topic, [(_int(1), b'{"TV":"t1"}', T0)])
    produce(bootstrap, r_topic, [(_int(1), b'{"RV":"r1"}', T0 + 1), (_int(1), None, T0 + 2)])
    _st, st = analyze("CREATE STREAM ST AS SELECT S.K AS K, NAME, TV FROM S JOIN T ON S.K = T.K;", {"S": s, "T": t})
    start(runtime, "CSAS_ST_7", st, sink_of(st, "ST", st_out))
    _st, ss = analyze("CREATE STREAM SS AS SELECT S.K AS K, NAME, RV FROM S JOIN R WITHIN 1 MINUTE ON S.K = R.K;",
                      {"S": s, "R": r})
    start(runtime, "CSAS_SS_8", ss, sink_of(ss, "SS", ss_out))
    assert read_output(bootstrap, st_out, 2, runtime=runtime, query_id="CSAS_ST_7") == [
        (_int(1), b'{"NAME":"a","TV":"t1"}'), (_int(1), b'{"NAME":"a","TV":"t1"}')]
    assert read_output(bootstrap, ss_out, 2, runtime=runtime, query_id="CSAS_SS_8") == [
        (_int(1), b'{"NAME":"a","RV":"r1"}'), (_int(1), b'{"NAME":"a","RV":"r1"}')]
    runtime.stop_persistent("CSAS_ST_7")
    runtime.stop_persistent("CSAS_SS_8")


def test_avro_stream_writes_a_null_value(runtime, eos_broker, registry):
    """ksqlDB's avro.json cases with a null input: SELECT * of an AVRO stream writes a null
    value, not an Avro record of nulls."""
    bootstrap = eos_broker.bootstrap
    topic, out = unique("nv_avro"), unique("nv_avro_out")
    create_topics(bootstrap, topic, out)
    client = SchemaRegistryClient({"url": registry.url})
    schema = json.dumps({"type": "record", "name": "Row", "fields": [
        {"name": "ID", "type": ["null", "long"], "default": None}]})
    serialize = AvroSerializer(client, schema)
    ctx = SerializationContext(topic, MessageField.VALUE)
    produce(bootstrap, topic, [(None, serialize({"ID": 1}, ctx), T0), (None, None, T0 + 1),
                               (None, serialize({"ID": 3}, ctx), T0 + 2)])
    source = registry_source(f"CREATE STREAM INPUT WITH (KAFKA_TOPIC='{topic}', VALUE_FORMAT='AVRO');", topic)
    _st, query = analyze("CREATE STREAM OUTPUT AS SELECT * FROM INPUT;", {"INPUT": source})
    start(runtime, "CSAS_AVRO_NV_1", query, sink_of(query, "OUTPUT", out, value_format=Format.AVRO))
    records = read_timed_output(bootstrap, out, 3, runtime=runtime, query_id="CSAS_AVRO_NV_1")
    read = AvroDeserializer(client)
    out_ctx = SerializationContext(out, MessageField.VALUE)
    assert [(None if v is None else read(v, out_ctx), ts) for _k, v, ts in records] == [
        ({"ID": 1}, T0), (None, T0 + 1), ({"ID": 3}, T0 + 2)]
    runtime.stop_persistent("CSAS_AVRO_NV_1")
