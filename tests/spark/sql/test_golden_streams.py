"""Golden tests, stateless statement families: filter/project (WHERE, CASE, CAST, struct and
array access, functions), PARTITION BY, INSERT INTO ... SELECT, push queries with LIMIT, INSERT
VALUES. Input produced with confluent-kafka; output read read_committed with confluent-kafka and
compared byte for byte with what ksqlDB writes."""

from __future__ import annotations

import asyncio
import json
import struct

import pytest

from oncestream.sql.engine.runtime import RUNNING
from oncestream.sql.language.catalog import Format, SourceInfo
from tests.spark.sql.golden import EARLIEST, analyze, create_topics, ddl, produce, read_output, sink_of, start, unique

pytestmark = [pytest.mark.spark]


def _int(v: int) -> bytes:
    return struct.pack(">i", v)


def _orders(bootstrap: str) -> tuple[str, SourceInfo]:
    topic = unique("orders")
    create_topics(bootstrap, topic)
    source = ddl(f"CREATE STREAM ORDERS (ID INT KEY, NAME STRING, X BIGINT, ST STRUCT<F STRING>, A ARRAY<INT>) "
                 f"WITH (KAFKA_TOPIC='{topic}', VALUE_FORMAT='JSON');")
    produce(bootstrap, topic, [
        (_int(1), b'{"NAME":"apple","X":1,"ST":{"F":"f1"},"A":[10,20]}', 1000),
        (_int(2), b'{"NAME":"pear","X":7,"ST":{"F":"f2"},"A":[30]}', 2000),
        # ksqlDB matches JSON fields case-insensitively.
        (_int(3), b'{"name":"fig","x":3,"st":null,"a":[1,2,3]}', 3000),
        (_int(4), None, 4000),  # a null value: dropped by WHERE, written through by a projection
        (None, b'{"NAME":null,"X":9,"ST":{"F":null},"A":null}', 5000),
    ])
    return topic, source


def test_filter_project_writes_ksqldb_json_with_kafka_key(runtime, eos_broker):
    """CSAS with WHERE, CASE, CAST, struct and 1-based array access and a function: keys stay
    4-byte big-endian INTs (a null key stays null), values are ksqlDB's JSON with nulls."""
    bootstrap = eos_broker.bootstrap
    _topic, orders = _orders(bootstrap)
    out_topic = unique("out")
    create_topics(bootstrap, out_topic)
    _statement, analyzed = analyze(
        "CREATE STREAM OUT AS SELECT ID, UCASE(NAME) AS UN, X * 2 AS X2, ST->F AS F, A[2] AS A2, "
        "CASE WHEN X > 5 THEN 'big' ELSE 'small' END AS SIZE, CAST(X AS STRING) AS XS, ROWTIME AS RT "
        "FROM ORDERS WHERE X > 1 EMIT CHANGES;", {"ORDERS": orders})
    sink = sink_of(analyzed, "OUT", out_topic)
    start(runtime, "CSAS_OUT_1", analyzed, sink)
    got = read_output(bootstrap, out_topic, 3, runtime=runtime, query_id="CSAS_OUT_1")
    assert runtime.status("CSAS_OUT_1").state == RUNNING
    assert got == [
        (_int(2), b'{"UN":"PEAR","X2":14,"F":"f2","A2":null,"SIZE":"big","XS":"7","RT":2000}'),
        (_int(3), b'{"UN":"FIG","X2":6,"F":null,"A2":2,"SIZE":"small","XS":"3","RT":3000}'),
        (None, b'{"UN":null,"X2":18,"F":null,"A2":null,"SIZE":"big","XS":"9","RT":5000}'),
    ]
    runtime.stop_persistent("CSAS_OUT_1")
    assert runtime.status("CSAS_OUT_1").state == "NOT_RUNNING"


def test_partition_by_rekeys_and_insert_into_select_appends(runtime, eos_broker):
    """PARTITION BY NAME: the key becomes the name (KAFKA STRING), the value keeps the other
    columns; INSERT INTO a second query's output into the same stream adds its rows."""
    bootstrap = eos_broker.bootstrap
    _topic, orders = _orders(bootstrap)
    out_topic = unique("byname")
    create_topics(bootstrap, out_topic)
    _s, analyzed = analyze("CREATE STREAM BYNAME AS SELECT NAME, ID, X FROM ORDERS PARTITION BY NAME EMIT CHANGES;",
                           {"ORDERS": orders})
    sink = sink_of(analyzed, "BYNAME", out_topic)
    start(runtime, "CSAS_BYNAME_2", analyzed, sink)
    _s, inserting = analyze("INSERT INTO BYNAME SELECT NAME, ID, X + 100 AS X FROM ORDERS WHERE ID = 1 "
                            "PARTITION BY NAME EMIT CHANGES;", {"ORDERS": orders, "BYNAME": sink})
    start(runtime, "INSERTQUERY_3", inserting, sink)
    got = read_output(bootstrap, out_topic, 6, runtime=runtime, query_id="CSAS_BYNAME_2")
    assert sorted(got, key=repr) == sorted([
        (b"apple", b'{"ID":1,"X":1}'),
        (None, None),   # the null value: PARTITION BY a value column gives it a null key (ksqlDB)
        (b"pear", b'{"ID":2,"X":7}'),
        (b"fig", b'{"ID":3,"X":3}'),
        (None, b'{"ID":null,"X":9}'),
        (b"apple", b'{"ID":1,"X":101}'),
    ], key=repr)
    runtime.stop_persistent("CSAS_BYNAME_2")
    runtime.stop_persistent("INSERTQUERY_3")


def test_push_query_streams_rows_until_limit(runtime, eos_broker):
    """SELECT ... EMIT CHANGES LIMIT 2 from earliest: two JSON-ready rows in column order, then
    the query ends by itself (limit_reached)."""
    bootstrap = eos_broker.bootstrap
    _topic, orders = _orders(bootstrap)
    _statement, analyzed = analyze("SELECT ID, NAME, A FROM ORDERS WHERE X > 1 EMIT CHANGES LIMIT 2;",
                                  {"ORDERS": orders})
    push = runtime.start_push(analyzed, EARLIEST)
    assert [(c.name, c.type) for c in push.columns] == [("ID", "INTEGER"), ("NAME", "STRING"), ("A", "ARRAY<INTEGER>")]

    async def collect() -> list:
        return [row async for row in push.rows()]

    rows = asyncio.run(asyncio.wait_for(collect(), 180))
    assert rows == [[2, "pear", [30]], [3, "fig", [1, 2, 3]]]
    assert push.limit_reached


def test_insert_values_writes_the_formats_bytes(runtime, eos_broker):
    """INSERT VALUES through the runtime: KAFKA key, JSON / DELIMITED / KAFKA values as ksqlDB
    writes them, ROWTIME as the record timestamp; read back with confluent-kafka."""
    bootstrap = eos_broker.bootstrap
    topics = [unique("ins") for _ in range(3)]
    create_topics(bootstrap, *topics)
    json_s = ddl(f"CREATE STREAM J (ID BIGINT KEY, NAME STRING, V DOUBLE) WITH (KAFKA_TOPIC='{topics[0]}', VALUE_FORMAT='JSON');")
    csv_s = ddl(f"CREATE STREAM C (ID STRING KEY, NAME STRING, V INT) WITH (KAFKA_TOPIC='{topics[1]}', "
                "VALUE_FORMAT='DELIMITED');")
    kafka_s = ddl(f"CREATE STREAM K (V DOUBLE) WITH (KAFKA_TOPIC='{topics[2]}', VALUE_FORMAT='KAFKA');")
    runtime.insert_values(json_s, {"ID": 7, "NAME": "a\"b", "V": 1.5, "ROWTIME": 12345})
    runtime.insert_values(csv_s, {"ID": "k", "NAME": "x,y", "V": None})
    runtime.insert_values(kafka_s, {"V": -2.5})
    assert read_output(bootstrap, topics[0], 1) == [(struct.pack(">q", 7), b'{"NAME":"a\\"b","V":1.5}')]
    assert read_output(bootstrap, topics[1], 1) == [(b"k", b'"x,y",')]
    assert read_output(bootstrap, topics[2], 1) == [(None, struct.pack(">d", -2.5))]
    assert json.loads(b'{"NAME":"a\\"b","V":1.5}')["NAME"] == 'a"b'
    assert csv_s.value_format is Format.DELIMITED


def test_a_value_column_named_timestamp_is_a_column_like_any_other(runtime, eos_broker):
    """stringtimestamp.json "string to timestamp": a value column named TIMESTAMP (legal in
    ksqlDB) is read and written; the record's own timestamp (the connector's ``timestamp``
    column, Spark names being case-insensitive) made the name ambiguous and failed the query."""
    bootstrap = eos_broker.bootstrap
    topic, out_topic = unique("stamps"), unique("ts")
    create_topics(bootstrap, topic, out_topic)
    source = ddl(f"CREATE STREAM TEST (K STRING KEY, ID BIGINT, NAME VARCHAR, timestamp VARCHAR) "
                 f"WITH (KAFKA_TOPIC='{topic}', VALUE_FORMAT='DELIMITED');")
    produce(bootstrap, topic, [(b"0", b"0,zero,2018-05-11T21:58:33Z", 7000)])
    _s, analyzed = analyze("CREATE STREAM TS AS SELECT K, ID, STRINGTOTIMESTAMP(timestamp, 'yyyy-MM-dd''T''HH:mm:ssX') "
                           "AS TS, ROWTIME AS RT FROM TEST;", {"TEST": source})
    start(runtime, "CSAS_TS_5", analyzed, sink_of(analyzed, "TS", out_topic))
    assert read_output(bootstrap, out_topic, 1, runtime=runtime, query_id="CSAS_TS_5") == [
        (b"0", b'{"ID":0,"TS":1526075913000,"RT":7000}')]
    runtime.stop_persistent("CSAS_TS_5")
