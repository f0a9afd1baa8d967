"""Golden tests, table functions and lambda functions through the query runtime, Spark and the
exactly-once sink: ksqlDB's query-validation cases (table-functions.json, cube.json,
explode.json, transform-array.json, reduce-map.json, json_concat.json) with their inputs produced
with confluent-kafka and the output read read_committed with confluent-kafka, compared with
ksqlDB's records."""

from __future__ import annotations

import json

import pytest

from oncestream.sql.engine.runtime import RUNNING
from tests.spark.sql.golden import analyze, create_topics, ddl, produce, read_output, sink_of, start, unique

pytestmark = [pytest.mark.spark]


def _values(records: list[tuple[bytes | None, bytes | None]]) -> list[tuple[str | None, object]]:
    return [(None if k is None else k.decode(), None if v is None else json.loads(v)) for k, v in records]


def test_table_functions_spread_rows_as_ksqldb_zips_them(runtime, eos_broker):
    """EXPLODE after WHERE, two table functions zipped (NULL where the shorter one ended), a NULL or
    empty array giving no row, CUBE_EXPLODE's combinations, KSQL_COL names, keys passed through."""
    bootstrap = eos_broker.bootstrap
    in_topic, out_topic, cube_topic = unique("tf_in"), unique("tf_out"), unique("tf_cube")
    create_topics(bootstrap, in_topic, out_topic, cube_topic)
    test = ddl(f"CREATE STREAM TEST (ID STRING KEY, F0 INT, A1 ARRAY<BIGINT>, A2 ARRAY<BIGINT>, C1 INT, C2 INT) "
               f"WITH (kafka_topic='{in_topic}', value_format='JSON');")
    produce(bootstrap, in_topic, [
        (b"0", b'{"F0": 0, "A1": [1, 2], "A2": [10, 11, 12], "C1": 1, "C2": 2}', 1000),
        (b"1", b'{"F0": 1, "A1": [3, 4], "A2": [20], "C1": 1, "C2": null}', 2000),     # filtered out by WHERE
        (b"2", b'{"F0": 2, "A1": [], "A2": null, "C1": null, "C2": null}', 3000),       # no row
        (b"3", b'{"F0": 3, "A1": null, "A2": [30], "C1": 1, "C2": null}', 4000),
    ])
    _s, zipped = analyze("CREATE STREAM OUTPUT AS SELECT ID, F0, EXPLODE(A1), ABS(F0) AS A, EXPLODE(A2) AS V "
                         "FROM TEST WHERE F0 <> 1;", {"TEST": test})
    start(runtime, "CSAS_TF_1", zipped, sink_of(zipped, "OUTPUT", out_topic))
    _s, cube = analyze("CREATE STREAM CUBED AS SELECT ID, CUBE_EXPLODE(ARRAY[C1, C2]) VAL FROM TEST WHERE F0 < 2;",
                       {"TEST": test})
    start(runtime, "CSAS_TF_2", cube, sink_of(cube, "CUBED", cube_topic))
    got = _values(read_output(bootstrap, out_topic, 4, runtime=runtime, query_id="CSAS_TF_1"))
    assert got == [
        ("0", {"F0": 0, "KSQL_COL_0": 1, "A": 0, "V": 10}),
        ("0", {"F0": 0, "KSQL_COL_0": 2, "A": 0, "V": 11}),
        ("0", {"F0": 0, "KSQL_COL_0": None, "A": 0, "V": 12}),
        ("3", {"F0": 3, "KSQL_COL_0": None, "A": 3, "V": 30}),
    ]
    assert _values(read_output(bootstrap, cube_topic, 6, runtime=runtime, query_id="CSAS_TF_2")) == [
        ("0", {"VAL": [None, None]}), ("0", {"VAL": [None, 2]}), ("0", {"VAL": [1, None]}), ("0", {"VAL": [1, 2]}),
        ("1", {"VAL": [None, None]}), ("1", {"VAL": [1, None]}),
    ]
    assert runtime.status("CSAS_TF_1").state == RUNNING
    runtime.stop_persistent("CSAS_TF_1")
    runtime.stop_persistent("CSAS_TF_2")


def test_lambdas_and_json_functions_in_a_persistent_query(runtime, eos_broker):
    """TRANSFORM / FILTER / REDUCE over arrays and maps with ksqlDB's NULL answers (arithmetic on a
    NULL element makes the call NULL), and JSON_CONCAT (a Python UDF) in the same query."""
    bootstrap = eos_broker.bootstrap
    in_topic, out_topic = unique("lam_in"), unique("lam_out")
    create_topics(bootstrap, in_topic, out_topic)
    test = ddl(f"CREATE STREAM TEST (ID STRING KEY, NUMBERS ARRAY<INTEGER>, M MAP<STRING, INTEGER>, V1 STRING, V2 STRING) "
               f"WITH (kafka_topic='{in_topic}', value_format='JSON');")
    produce(bootstrap, in_topic, [
        (b"one", b'{"NUMBERS": [3, 6], "M": {"123": 3, "12": 7, "1234": 2}, "V1": "{\\"a\\": 1}", "V2": "{\\"b\\": 2}"}', 1000),
        (b"two", b'{"NUMBERS": [5, null], "M": {"1": 1, "ttttt": null, "": 3}, "V1": "[1, 2]", "V2": "{\\"a\\": 1}"}', 2000),
        (b"three", b'{"NUMBERS": null, "M": null, "V1": "1", "V2": ""}', 3000),
    ])
    _s, analyzed = analyze(
        "CREATE STREAM OUTPUT AS SELECT ID, TRANSFORM(numbers, x => x + 5) AS T, FILTER(numbers, x => x > 5) AS F, "
        "REDUCE(numbers, 2, (s, x) => s + x) AS R, "
        "REDUCE(m, 0, (s, k, v) => CASE WHEN LEN(k) > 3 THEN s + v ELSE s - v END) AS RM, "
        "TRANSFORM(m, (k, v) => k + '_x', (k, v) => v * 2) AS TM, JSON_CONCAT(V1, V2) AS J FROM TEST;", {"TEST": test})
    start(runtime, "CSAS_LAMBDA_1", analyzed, sink_of(analyzed, "OUTPUT", out_topic))
    got = _values(read_output(bootstrap, out_topic, 3, runtime=runtime, query_id="CSAS_LAMBDA_1"))
    assert got == [
        ("one", {"T": [8, 11], "F": [6], "R": 11, "RM": -8, "TM": {"123_x": 6, "12_x": 14, "1234_x": 4},
                 "J": '{"a":1,"b":2}'}),
        ("two", {"T": None, "F": [], "R": None, "RM": None, "TM": None, "J": '[1,2,{"a":1}]'}),
        ("three", {"T": None, "F": None, "R": 2, "RM": 0, "TM": None, "J": None}),
    ]
    runtime.stop_persistent("CSAS_LAMBDA_1")
