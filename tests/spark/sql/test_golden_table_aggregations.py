"""Golden tests of GROUP BY over a TABLE (ksqlDB's table aggregations): an update retracts the
row's old contribution and adds the new one (the group may change), a tombstone or a row now
failing WHERE retracts, a group whose rows are all gone is written at its initial value (COUNT 0),
HAVING writes tombstones; state carries across micro-batches. Outputs read read_committed with
confluent-kafka.

Input produced before a query starts lands in its first micro-batch, whose updates of one key are
coalesced (docs/sql-on-spark.md): ksqlDB's query-validation cases are compared at each key's last
value; later input rounds are compared record by record.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest

from oncestream.sql.language.catalog import Format
from tests.spark.sql.golden import analyze, create_topics, ddl, produce, read_output, sink_of, start, unique

pytestmark = [pytest.mark.spark]

T0 = 1_700_000_000_000
WAIT_S = 600.0  # a first micro-batch of two stateful Python operators is slow on a loaded machine


def _int(v: int) -> bytes:
    return struct.pack(">i", v)


def _json_values(records):
    return [(k, None if v is None else json.loads(v)) for k, v in records]


def _read(runtime, topic, count, query_id):
    return read_output(runtime.settings.bootstrap_servers, topic, count, timeout_s=WAIT_S, runtime=runtime,
                       query_id=query_id)


def _last_per_key(records):
    return {k: v for k, v in records}


def test_table_aggregates_retract_updates_across_batches_with_where_and_having(runtime, eos_broker):
    """COUNT(*), COUNT(col), SUM, AVG, COLLECT_LIST per region of a users table with WHERE; a
    second batch moves a user to another region, deletes one (tombstone) and updates one to fail
    WHERE; only the touched groups are written, each from its retained state. HAVING COUNT(*) > 1
    writes a tombstone for a region that falls below it."""
    bootstrap = eos_broker.bootstrap
    topic, out_topic, having_topic = unique("tagg_in"), unique("tagg_out"), unique("tagg_having")
    create_topics(bootstrap, topic, out_topic, having_topic)
    users = ddl(f"CREATE TABLE USERS (ID INT PRIMARY KEY, REGION STRING, AGE INT, SCORE DOUBLE) "
                f"WITH (KAFKA_TOPIC='{topic}', VALUE_FORMAT='JSON');")
    produce(bootstrap, topic, [
        (_int(1), b'{"REGION":"east","AGE":30,"SCORE":1.0}', T0),
        (_int(2), b'{"REGION":"east","AGE":null,"SCORE":2.0}', T0 + 1),
        (_int(3), b'{"REGION":"west","AGE":50,"SCORE":4.0}', T0 + 2),
        (_int(4), b'{"REGION":"west","AGE":20,"SCORE":null}', T0 + 3),
        # an update of user 1 in the same batch: only its last row counts
        (_int(1), b'{"REGION":"east","AGE":31,"SCORE":3.0}', T0 + 4),
        # fails WHERE: never counted
        (_int(5), b'{"REGION":"east","AGE":500,"SCORE":9.0}', T0 + 5),
        # NULL group: never counted
        (_int(6), b'{"REGION":null,"AGE":1,"SCORE":1.0}', T0 + 6),
    ])
    sources = {"USERS": users}
    _s, analyzed = analyze(
        "CREATE TABLE BY_REGION AS SELECT REGION, COUNT(*) AS C, COUNT(AGE) AS CA, SUM(AGE) AS SA, AVG(SCORE) AS AV, "
        "COLLECT_LIST(AGE) AS CL FROM USERS WHERE AGE IS NULL OR AGE < 100 GROUP BY REGION EMIT CHANGES;", sources)
    start(runtime, "CTAS_TAGG_1", analyzed, sink_of(analyzed, "BY_REGION", out_topic))
    got = sorted(_json_values(_read(runtime, out_topic, 2, "CTAS_TAGG_1")), key=repr)
    _s, having = analyze("CREATE TABLE BIG AS SELECT REGION, COUNT(*) AS C FROM USERS GROUP BY REGION "
                         "HAVING COUNT(*) > 1 EMIT CHANGES;", sources)
    start(runtime, "CTAS_TAGG_H_2", having, sink_of(having, "BIG", having_topic))
    assert got == [
        # user 1's update undoes its 30 and appends 31 after user 2's NULL (ksqlDB's CollectListUdaf)
        (b"east", {"C": 2, "CA": 1, "SA": 31, "AV": 2.5, "CL": [None, 31]}),
        (b"west", {"C": 2, "CA": 2, "SA": 70, "AV": 4.0, "CL": [50, 20]}),
    ]
    # east has users 1, 2 and 5 (WHERE does not apply here), west 3 and 4
    assert sorted(_read(runtime, having_topic, 2, "CTAS_TAGG_H_2")) == \
        [(b"east", b'{"C":3}'), (b"west", b'{"C":2}')]

    produce(bootstrap, topic, [
        (_int(3), b'{"REGION":"east","AGE":50,"SCORE":4.0}', T0 + 10),    # west -> east
        (_int(2), None, T0 + 11),                                          # deleted
        (_int(4), b'{"REGION":"west","AGE":200,"SCORE":null}', T0 + 12),  # now fails WHERE
    ])
    got = _json_values(_read(runtime, out_topic, 4, "CTAS_TAGG_1"))
    assert sorted(got[2:], key=repr) == [
        (b"east", {"C": 2, "CA": 2, "SA": 81, "AV": 3.5, "CL": [31, 50]}),
        # every row gone: written at the initial value, as ksqlDB ("should count back to zero")
        (b"west", {"C": 0, "CA": 0, "SA": 0, "AV": 0.0, "CL": []}),
    ]
    # HAVING: east keeps 3 (1, 3, 5); west has only user 4 left: a tombstone
    assert sorted(_read(runtime, having_topic, 4, "CTAS_TAGG_H_2")[2:], key=repr) == \
        sorted([(b"east", b'{"C":3}'), (b"west", None)], key=repr)

    # A new row in a group whose rows were all gone counts from zero again.
    produce(bootstrap, topic, [(_int(7), b'{"REGION":"west","AGE":1,"SCORE":1.0}', T0 + 20)])
    got = _json_values(_read(runtime, out_topic, 5, "CTAS_TAGG_1"))
    assert got[4:] == [(b"west", {"C": 1, "CA": 1, "SA": 1, "AV": 1.0, "CL": [1]})]
    # west has users 4 and 7 again: back from its tombstone
    assert _read(runtime, having_topic, 5, "CTAS_TAGG_H_2")[4:] == [(b"west", b'{"C":2}')]
    runtime.stop_persistent("CTAS_TAGG_1")
    runtime.stop_persistent("CTAS_TAGG_H_2")


def test_ksqldb_table_aggregation_cases(runtime, eos_broker):
    """ksqlDB's query-validation cases (group-by.json "fields (table->table)" and "with having
    expression (table->table)", count.json "should support removing zero counts from table",
    collect-list.json "collect_list string table", histogram.json "histogram on a table" with
    ATTR), compared at each key's last value."""
    bootstrap = eos_broker.bootstrap
    Records = list[tuple[bytes, bytes | None]]
    cases: list[tuple[str, str, dict[str, Any], Records, Records]] = [
        ("CREATE TABLE TEST (ID INT PRIMARY KEY, f1 INT, f2 VARCHAR) WITH (kafka_topic='{t}', format='DELIMITED');",
         "CREATE TABLE OUTPUT AS SELECT f1, f2, COUNT(*) FROM TEST GROUP BY f2, f1;",
         dict(key_format=Format.DELIMITED, value_format=Format.DELIMITED),
         [(b"1", b"1,a"), (b"2", b"2,b"), (b"1", b"1,b"), (b"2", None), (b"1", b"1,a")],
         [(b"a,1", b"1"), (b"b,2", b"1"), (b"a,1", b"0"), (b"b,1", b"1"), (b"b,2", b"0"), (b"b,1", b"0"),
          (b"a,1", b"1")]),
        ("CREATE TABLE TEST (K STRING PRIMARY KEY, f0 INT, f1 INT) WITH (kafka_topic='{t}', value_format='DELIMITED');",
         "CREATE TABLE OUTPUT AS SELECT f1, SUM(f0) FROM TEST GROUP BY f1 HAVING COUNT(f1) > 0;",
         dict(value_format=Format.DELIMITED),
         [(b"1", b"1,0"), (b"2", b"2,1"), (b"1", None), (b"3", b"3,0"), (b"2", b"2,0")],
         [(_int(0), b"1"), (_int(1), b"2"), (_int(0), None), (_int(0), b"3"), (_int(1), None), (_int(0), b"5")]),
        ("CREATE TABLE INPUT (K STRING PRIMARY KEY, ID bigint) WITH (kafka_topic='{t}', value_format='DELIMITED');",
         "CREATE TABLE OUTPUT as SELECT ID, COUNT() FROM INPUT GROUP BY ID HAVING COUNT() > 0;",
         dict(value_format=Format.DELIMITED),
         [(b"1", b"3"), (b"2", b"3"), (b"1", None), (b"2", None)],
         [(struct.pack(">q", 3), b"1"), (struct.pack(">q", 3), b"2"), (struct.pack(">q", 3), b"1"),
          (struct.pack(">q", 3), None)]),
        ("CREATE TABLE TEST (ID BIGINT PRIMARY KEY, VALUE varchar) WITH (kafka_topic='{t}', value_format='JSON');",
         "CREATE TABLE S2 as SELECT ID, collect_list(value) as collected FROM test group by id;",
         dict(),
         [(struct.pack(">q", 0), b'{"VALUE":"foo"}'), (struct.pack(">q", 100), b'{"VALUE":"baz"}'),
          (struct.pack(">q", 0), b'{"VALUE":"bar"}'), (struct.pack(">q", 100), b'{"VALUE":"baz"}'),
          (struct.pack(">q", 100), b'{"VALUE":"foo"}')],
         [(struct.pack(">q", 0), b'{"COLLECTED":["foo"]}'), (struct.pack(">q", 100), b'{"COLLECTED":["baz"]}'),
          (struct.pack(">q", 0), b'{"COLLECTED":["bar"]}'), (struct.pack(">q", 100), b'{"COLLECTED":["baz"]}'),
          (struct.pack(">q", 100), b'{"COLLECTED":["foo"]}')]),
        # histogram.json "histogram on a table" (bob moves east -> west, then is deleted), with
        # ATTR(ID): east keeps one id, west two (NULL)
        ("CREATE TABLE TEST (K STRING PRIMARY KEY, ID bigint, NAME varchar, REGION string) "
         "WITH (kafka_topic='{t}', value_format='JSON');",
         "CREATE TABLE COUNT_BY_REGION AS SELECT region, histogram(name) AS COUNTS, ATTR(ID) AS A FROM TEST GROUP BY region;",
         dict(),
         [(b"0", b'{"ID":0,"NAME":"alice","REGION":"east"}'), (b"1", b'{"ID":1,"NAME":"bob","REGION":"east"}'),
          (b"2", b'{"ID":2,"NAME":"carol","REGION":"west"}'), (b"3", b'{"ID":3,"NAME":"dave","REGION":"west"}'),
          (b"1", b'{"ID":1,"NAME":"bob","REGION":"west"}'), (b"1", None)],
         [(b"east", b'{"COUNTS":{"alice":1,"bob":1},"A":null}'), (b"west", b'{"COUNTS":{"carol":1,"dave":1},"A":null}'),
          (b"east", b'{"COUNTS":{"alice":1},"A":0}')]),
    ]
    # One query at a time: each starts Python workers for its state on the driver, which must
    # connect back within Spark's fixed 10 s (a heavily loaded machine can miss that).
    for i, (source_sql, query_sql, formats, inputs, outputs) in enumerate(cases):
        topic, out = unique(f"tcase{i}_in"), unique(f"tcase{i}_out")
        create_topics(bootstrap, topic, out)
        source = ddl(source_sql.format(t=topic))
        produce(bootstrap, topic, [(k, v, T0 + n) for n, (k, v) in enumerate(inputs)])
        _s, analyzed = analyze(query_sql, {source.name: source})
        query_id = f"CTAS_TCASE_{i}"
        start(runtime, query_id, analyzed, sink_of(analyzed, "OUT", out, **formats))
        expected = _last_per_key(outputs)
        got = _last_per_key(_read(runtime, out, len(expected), query_id))
        assert got == expected, query_sql
        runtime.stop_persistent(query_id)


def test_a_row_moving_to_another_group_writes_the_old_groups_result_first(runtime, eos_broker):
    """group-by.json "field with re-key (table->table)": one update that moves a row from r1 to r0
    changes both groups; ksqlDB writes r1's retraction, then r0's addition. The query's shuffle
    has one partition (as the conformance runner's), so its output has one order to check."""
    bootstrap = eos_broker.bootstrap
    topic, out = unique("tmove_in"), unique("tmove_out")
    create_topics(bootstrap, topic, out)
    source = ddl(f"CREATE TABLE TEST (ID INT PRIMARY KEY, USR INT, REGION VARCHAR) "
                 f"WITH (KAFKA_TOPIC='{topic}', VALUE_FORMAT='DELIMITED');")
    produce(bootstrap, topic, [(_int(1), b"1,r0", T0), (_int(2), b"2,r1", T0 + 1)])
    _s, analyzed = analyze("CREATE TABLE OUTPUT AS SELECT REGION, COUNT(*) AS C FROM TEST GROUP BY REGION;",
                           {"TEST": source})
    spark = runtime.spark
    partitions = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "1")
    try:
        start(runtime, "CTAS_TMOVE_1", analyzed, sink_of(analyzed, "OUTPUT", out, value_format=Format.DELIMITED))
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", partitions)
    assert sorted(_read(runtime, out, 2, "CTAS_TMOVE_1")) == [(b"r0", b"1"), (b"r1", b"1")]
    produce(bootstrap, topic, [(_int(2), b"2,r0", T0 + 2)])
    assert _read(runtime, out, 4, "CTAS_TMOVE_1")[2:] == [(b"r1", b"0"), (b"r0", b"2")]
    runtime.stop_persistent("CTAS_TMOVE_1")
