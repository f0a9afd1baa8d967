"""ksqlDB's set-like array functions and COLLECT_SET over values Spark cannot compare (MAPs, and
STRUCTs or ARRAYs holding them), NULL victims and elements, CASTs of TIME / TIMESTAMP and TIME
compared with a STRING, as Spark runs the compiler's translation; the expected values are ksqlDB's (its
array-remove, array-set-functions, collect-set, time and timestamp query-validation cases)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from oncestream.sql.engine.compile.expressions import Scope, translate
from tests.spark.sql.golden import analyze, ddl
from tests.spark.sql.golden import spark_plain as _plain

pytestmark = [pytest.mark.spark]

SOURCE = ddl("CREATE STREAM SRC (ID INT KEY, MAPS ARRAY<MAP<STRING, INT>>, BAD MAP<STRING, INT>, "
             "OTHER ARRAY<MAP<STRING, INT>>, S ARRAY<STRUCT<A STRING, M MAP<STRING, DOUBLE>>>, INTS ARRAY<INT>, "
             "BAD_INT INT, M MAP<STRING, BIGINT>, TM TIME, TS TIMESTAMP) "
             "WITH (KAFKA_TOPIC='src', VALUE_FORMAT='JSON');")
SCHEMA = ("ID INT, MAPS ARRAY<MAP<STRING, INT>>, BAD MAP<STRING, INT>, OTHER ARRAY<MAP<STRING, INT>>, "
          "S ARRAY<STRUCT<A: STRING, M: MAP<STRING, DOUBLE>>>, INTS ARRAY<INT>, BAD_INT INT, M MAP<STRING, BIGINT>, "
          "TM INT, TS TIMESTAMP")
A, B, C = {"a": 1, "b": 2}, {"b": 2, "a": 1}, {"c": 3}
ROWS: list[dict[str, Any]] = [
    {"ID": 1, "MAPS": [A, C, B, None, C, None], "BAD": {"b": 2, "a": 1}, "OTHER": [C, {"d": 4}],
     "S": [{"A": "x", "M": {"k": 1.5}}, {"A": "x", "M": {"k": 1.5}}, None], "INTS": [0, None, 1, 0, -1, None],
     "BAD_INT": None, "M": {"Record0": 1}, "TM": 5000, "TS": dt.datetime(1970, 1, 1, 0, 0, 0, 10_000, tzinfo=dt.UTC)},
    {"ID": 1, "MAPS": None, "BAD": None, "OTHER": None, "S": None, "INTS": None, "BAD_INT": -1,
     "M": {"Record1": 100}, "TM": 60_999, "TS": None},
    {"ID": 1, "MAPS": [], "BAD": C, "OTHER": [], "S": [], "INTS": [], "BAD_INT": 0,
     "M": {"Record1": 100}, "TM": None, "TS": None},
    {"ID": 1, "MAPS": [A], "BAD": A, "OTHER": [B], "S": [None], "INTS": [5], "BAD_INT": 5,
     "M": None, "TM": 86_399_999, "TS": dt.datetime(2018, 5, 11, 21, 58, 33, tzinfo=dt.UTC)},
]

# (expression, its value on each row)
SCALARS: list[tuple[str, list[Any]]] = [
    ("ARRAY_DISTINCT(MAPS)", [[A, C, None], None, [], [A]]),
    ("ARRAY_DISTINCT(S)", [[{"A": "x", "M": {"k": 1.5}}, None], None, [], [None]]),
    ("ARRAY_REMOVE(MAPS, BAD)", [[C, None, C, None], None, [], []]),
    ("ARRAY_REMOVE(INTS, BAD_INT)", [[0, 1, 0, -1], None, [], []]),
    ("ARRAY_UNION(MAPS, OTHER)", [[A, C, None, {"d": 4}], None, [], [A]]),
    ("ARRAY_INTERSECT(MAPS, OTHER)", [[C], None, [], [A]]),
    ("ARRAY_EXCEPT(MAPS, OTHER)", [[A, None], None, [], []]),
    ("ARRAY_UNION(INTS, ARRAY[7, 0])", [[0, None, 1, -1, 7], None, [7, 0], [5, 7, 0]]),
    ("CAST(TM AS STRING)", ["00:00:05", "00:01", None, "23:59:59"]),
    ("CAST(TS AS STRING)", ["1970-01-01T00:00:00.010", None, None, "2018-05-11T21:58:33.000"]),
    # a TIME is compared with a STRING by parsing the string as a time (time.json)
    ("TM > '00:00:05'", [False, True, False, True]), ("TM = '00:00:05.000'", [True, False, False, False]),
    ("TM BETWEEN '00:00:04' AND '00:01'", [True, False, False, False]),
    ("CAST('00:00:00.010' AS TIME)", [10, 10, 10, 10]), ("CAST('00:01' AS TIME)", [60_000] * 4),
    ("CAST('foo' AS TIME)", [None] * 4), ("CAST(TS AS TIME)", [10, None, None, 79_113_000]),
]


def _frame(spark):
    return spark.createDataFrame([tuple(r[c] for c in ROWS[0]) for r in ROWS], SCHEMA).coalesce(1)


def test_set_functions_and_temporal_casts_give_ksqldb_values_on_spark(sql_spark):
    select = ", ".join(f"{e} AS E{i}" for i, (e, _) in enumerate(SCALARS))
    _statement, analyzed = analyze(f"SELECT {select} FROM SRC EMIT CHANGES;", {"SRC": SOURCE})
    scope = Scope({"SRC": SOURCE})
    rows = _frame(sql_spark).selectExpr(*[f"{translate(e, scope)} AS E{i}" for i, e in enumerate(analyzed.expressions)]
                                        ).collect()
    wrong = [(text, expected, got) for i, (text, expected) in enumerate(SCALARS)
             if (got := [_plain(r[i]) for r in rows]) != expected]
    assert wrong == [], "\n".join(map(repr, wrong))


def test_collect_set_keeps_first_seen_order_nulls_and_maps_on_spark(sql_spark):
    cases = [
        ("COLLECT_SET(M)", [{"Record0": 1}, {"Record1": 100}, None]),
        ("COLLECT_SET(BAD)", [B, None, C]),
        ("COLLECT_SET(BAD_INT)", [None, -1, 0, 5]),
        ("COLLECT_SET(MAPS)", [[A, C, B, None, C, None], None, [], [A]]),
    ]
    select = ", ".join(f"{e} AS E{i}" for i, (e, _) in enumerate(cases))
    _statement, analyzed = analyze(f"SELECT ID, {select} FROM SRC GROUP BY ID EMIT CHANGES;", {"SRC": SOURCE})
    scope = Scope({"SRC": SOURCE})
    expressions = [e for e in analyzed.expressions if "COLLECT_SET" in e.sql().upper()]
    row = _frame(sql_spark).selectExpr(*[f"{translate(e, scope)} AS E{i}" for i, e in enumerate(expressions)]).collect()[0]
    wrong = [(text, expected, _plain(got)) for (text, expected), got in zip(cases, list(row), strict=True)
             if _plain(got) != expected]
    assert wrong == [], "\n".join(map(repr, wrong))
