"""Golden tests of foreign-key table-table joins (KIP-213; ``compile/fk_joins.py``) through Spark
and a real broker, outputs read read_committed with confluent-kafka: ksqlDB's query-validation
cases (fk-join.json "Should support inner join with left value-column expression" and "Should
support left join with left value-column expression") with their inputs and outputs, per key in
topic order, with ksqlDB's timestamps (a write's is that of the record that caused it)
(tests/unit/sql/test_fk_join_steps.py checks the same rules without Spark, record by record and
in one batch).

The inputs are produced before the query starts (from earliest): the first micro-batch holds them
all, processed per foreign key in ROWTIME order, which gives ksqlDB's writes per key."""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest

from tests.spark.sql.golden import analyze, create_topics, ddl, produce, read_timed_output, sink_of, start, unique

pytestmark = [pytest.mark.spark]

T0 = 1_700_000_000_000

Input = tuple[str, int, dict[str, Any] | None, int]        # "L"/"R", key, value, timestamp

INNER: tuple[list[Input], dict[int, list[tuple[Any, int]]]] = (
    [("R", 0, {"F1": "blah", "F2": 4}, 0), ("L", 1, {"NAME": "zero", "FOREIGN_KEY": 0}, 10000),
     ("L", 0, {"NAME": "foo", "FOREIGN_KEY": 100}, 13000), ("R", 0, {"F1": "a", "F2": 10}, 15000),
     ("L", 10, {"NAME": "bar", "FOREIGN_KEY": 0}, 16000), ("R", 0, None, 17000), ("L", 1, None, 18000)],
    {1: [({"R_ID": 0, "NAME": "zero", "F1": "blah"}, 10000), ({"R_ID": 0, "NAME": "zero", "F1": "a"}, 15000),
         (None, 17000), (None, 18000)],
     10: [({"R_ID": 0, "NAME": "bar", "F1": "a"}, 16000), (None, 17000)]})
LEFT: tuple[list[Input], dict[int, list[tuple[Any, int]]]] = (
    [("L", 1, {"NAME": "zero", "FOREIGN_KEY": 0}, 0), ("R", 0, {"F1": "blah", "F2": 4}, 10000),
     ("L", 1, {"NAME": "zero", "FOREIGN_KEY": 0}, 11000), ("L", 0, {"NAME": "foo", "FOREIGN_KEY": 100}, 13000),
     ("R", 0, {"F1": "a", "F2": 10}, 15000), ("L", 10, {"NAME": "bar", "FOREIGN_KEY": 0}, 16000), ("R", 0, None, 17000),
     ("L", 1, None, 18000), ("L", 0, None, 19000)],
    {1: [({"R_ID": None, "NAME": "zero", "F1": None}, 0), ({"R_ID": 0, "NAME": "zero", "F1": "blah"}, 10000),
         ({"R_ID": 0, "NAME": "zero", "F1": "blah"}, 11000), ({"R_ID": 0, "NAME": "zero", "F1": "a"}, 15000),
         ({"R_ID": None, "NAME": "zero", "F1": None}, 17000), (None, 18000)],
     0: [({"R_ID": None, "NAME": "foo", "F1": None}, 13000), (None, 19000)],
     10: [({"R_ID": 0, "NAME": "bar", "F1": "a"}, 16000), ({"R_ID": None, "NAME": "bar", "F1": None}, 17000)]})


@pytest.mark.parametrize(("join", "case"), [("JOIN", INNER), ("LEFT JOIN", LEFT)], ids=["inner", "left"])
def test_foreign_key_joins_match_ksqldb(runtime, eos_broker, join, case):
    bootstrap = eos_broker.bootstrap
    inputs, expected = case
    kind = join.split()[0].lower()
    left_t, right_t, out_t = unique(f"fk_{kind}_l"), unique(f"fk_{kind}_r"), unique(f"fk_{kind}_out")
    create_topics(bootstrap, left_t, right_t, out_t)
    left = ddl(f"CREATE TABLE LEFT_TABLE (L_ID BIGINT PRIMARY KEY, NAME VARCHAR, FOREIGN_KEY BIGINT) "
               f"WITH (kafka_topic='{left_t}', value_format='JSON');")
    right = ddl(f"CREATE TABLE RIGHT_TABLE (R_ID BIGINT PRIMARY KEY, F1 VARCHAR, F2 BIGINT) "
                f"WITH (kafka_topic='{right_t}', value_format='JSON');")
    for side, topic in (("L", left_t), ("R", right_t)):
        produce(bootstrap, topic, [(struct.pack(">q", k), None if v is None else json.dumps(v).encode(), T0 + ts)
                                   for s, k, v, ts in inputs if s == side])
    _s, analyzed = analyze(f"CREATE TABLE OUT_{kind} AS SELECT L_ID, R_ID, NAME, F1 FROM LEFT_TABLE {join} RIGHT_TABLE "
                           "ON FOREIGN_KEY = R_ID;", {"LEFT_TABLE": left, "RIGHT_TABLE": right})
    query_id = f"CTAS_FK_{kind.upper()}"
    start(runtime, query_id, analyzed, sink_of(analyzed, f"OUT_{kind}", out_t))
    count = sum(len(v) for v in expected.values())
    got: dict[int, list[tuple[Any, int]]] = {}
    for key, value, ts in read_timed_output(bootstrap, out_t, count, runtime=runtime, query_id=query_id):
        assert key is not None
        got.setdefault(struct.unpack(">q", key)[0], []).append((None if value is None else json.loads(value), ts - T0))
    assert got == expected
    runtime.stop_persistent(query_id)
