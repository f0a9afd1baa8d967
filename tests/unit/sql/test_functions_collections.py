"""Table functions, lambda functions and the JSON functions: ksqlDB's typing and refusals (through
the parser and analyzer), the Spark forms' null guards, and the JSON UDFs' Python bodies on
ksqlDB's own query-validation inputs."""

from __future__ import annotations

import pytest

from oncestream.sql.errors import StatementError
from oncestream.sql.language import functions
from oncestream.sql.language import types as t
from oncestream.sql.language.analyzer import analyze_query
from oncestream.sql.language.functions import CallSite, FunctionTypeError, LambdaSite
from oncestream.sql.language.functions_json import json_array_contains, json_concat
from oncestream.sql.language.parser import parse
from oncestream.sql.server.metastore import Metastore

DDL = """
CREATE STREAM S (ID STRING KEY, NUMBERS ARRAY<INT>, M MAP<STRING, ARRAY<INT>>, ST BIGINT,
                 STRUCTS ARRAY<STRUCT<C VARCHAR, D INT>>, F0 INT, DM MAP<STRING, DOUBLE>)
  WITH (kafka_topic='s', value_format='json');
CREATE TABLE T (ID STRING PRIMARY KEY, NUMBERS ARRAY<INT>) WITH (kafka_topic='t', value_format='json');
"""


@pytest.fixture(scope="module")
def sources():
    ms = Metastore()
    for offset, s in enumerate(parse(DDL)):
        ms.apply(ms.validate(s, {}, {"s": 1, "t": 1}), offset)
    return ms.source_map()


def analyze(sources, sql: str, sink: str | None = None):
    (stmt,) = parse(sql)
    return analyze_query(stmt.query, sources, sink=sink)   # type: ignore[attr-defined]


def types_of(sources, sql: str) -> str:
    return analyze(sources, sql).schema_text()


def test_lambda_functions_take_their_types_from_the_collection_and_the_body(sources) -> None:
    assert types_of(sources, "SELECT TRANSFORM(numbers, x => x + 5) AS c, FILTER(numbers, x => x > 5) AS f, "
                             "REDUCE(numbers, st, (s, x) => s + x) AS r FROM s EMIT CHANGES;") == \
        "`C` ARRAY<INTEGER>, `F` ARRAY<INTEGER>, `R` BIGINT"
    assert types_of(sources, "SELECT TRANSFORM(m, (k, v) => UCASE(k), (k, v) => ARRAY_MAX(v)) AS c, "
                             "FILTER(m, (k, v) => LEN(k) > 2) AS f, REDUCE(dm, CAST(3.2 AS DOUBLE), (s, k, v) => s * v) AS r "
                             "FROM s EMIT CHANGES;") == \
        "`C` MAP<STRING, INTEGER>, `F` MAP<STRING, ARRAY<INTEGER>>, `R` DOUBLE"
    # nested lambdas see the outer lambda's parameters; struct fields of a parameter
    assert types_of(sources, "SELECT TRANSFORM(structs, x => STRUCT(Q := x->d + 5, P := x->c + 'h')) AS t, "
                             "TRANSFORM(numbers, x => FILTER(numbers, y => y > x)) AS n FROM s EMIT CHANGES;") == \
        "`T` ARRAY<STRUCT<`Q` INTEGER, `P` STRING>>, `N` ARRAY<ARRAY<INTEGER>>"


@pytest.mark.parametrize(("sql", "message"), [
    ("SELECT TRANSFORM(numbers, id => 1) FROM s EMIT CHANGES;", "Lambda function argument can't be a column name: ID"),
    ("SELECT TRANSFORM(numbers, x => TRANSFORM(numbers, x => 1)) FROM s EMIT CHANGES;",
     "Reusing lambda arguments in nested lambda is not allowed"),
    ("SELECT FILTER(numbers, x => x + 1) FROM s EMIT CHANGES;",
     "Function 'filter' does not accept parameters (ARRAY<INTEGER>, LAMBDA (INTEGER) => INTEGER)."),
    ("SELECT TRANSFORM(numbers, (x, y) => x) FROM s EMIT CHANGES;",
     "Function 'transform' does not accept parameters (ARRAY<INTEGER>, LAMBDA (INTEGER))."),
    ("SELECT TRANSFORM(st, x => x) FROM s EMIT CHANGES;", "Function 'transform' does not accept parameters (BIGINT, LAMBDA)."),
    ("SELECT x FROM s EMIT CHANGES;", "SELECT column 'X' cannot be resolved."),
])
def test_lambda_refusals_use_ksqldb_messages(sources, sql: str, message: str) -> None:
    with pytest.raises(StatementError) as e:
        analyze(sources, sql)
    assert e.value.message == message


@pytest.mark.parametrize(("sql", "message"), [
    ("CREATE TABLE O AS SELECT id, EXPLODE(m), COUNT(*) FROM s GROUP BY id;",
     "Table functions cannot be used with aggregations."),
    ("CREATE TABLE O AS SELECT id, EXPLODE(numbers) AS v FROM t;", "Table source is not supported with table functions"),
    ("CREATE STREAM O AS SELECT id, EXPLODE(m) FROM s;",
     "Function 'explode' does not accept parameters (MAP<STRING, ARRAY<INTEGER>>).\nValid alternatives are:\n"
     "explode(ARRAY<DECIMAL> input)\nexplode(ARRAY<T> list)"),
    ("CREATE STREAM O AS SELECT id, EXPLODE(CUBE_EXPLODE(numbers)) FROM s;",
     "Table functions cannot be nested: EXPLODE(CUBE_EXPLODE())"),
    ("CREATE STREAM O AS SELECT id, CASE WHEN f0 > 1 THEN EXPLODE(numbers) END AS v FROM s;",
     "Table functions cannot be used in CASE: (CASE WHEN (F0 > 1) THEN EXPLODE(NUMBERS) END)"),
    ("CREATE STREAM O AS SELECT id, f0 FROM s WHERE EXPLODE(numbers) > 1;",
     "Table function EXPLODE can only be used in the SELECT clause."),
])
def test_table_function_refusals_use_ksqldb_messages(sources, sql: str, message: str) -> None:
    with pytest.raises(StatementError) as e:
        analyze(sources, sql, sink="O")
    assert e.value.message == message


def test_table_functions_type_as_their_elements_and_name_as_ksqldb(sources) -> None:
    a = analyze(sources, "CREATE STREAM O AS SELECT id, ABS(f0), EXPLODE(numbers), CUBE_EXPLODE(ARRAY[f0, 1]) AS c, "
                         "EXPLODE(structs)->d AS d FROM s;", sink="O")
    assert a.schema_text() == "`ID` STRING KEY, `KSQL_COL_0` INTEGER, `KSQL_COL_1` INTEGER, `C` ARRAY<INTEGER>, `D` INTEGER"


def _spark(name: str, args: list[str], types: list[t.SqlType | None], lambdas: tuple[LambdaSite, ...] = ()) -> str:
    fd = functions.lookup(name)
    assert fd is not None
    return fd.spark(CallSite(args=args, types=types, lambdas=lambdas))


def test_lambda_translations_answer_null_where_ksqldb_fails_on_a_null_operand() -> None:
    plus = LambdaSite(("x",), "x + 5", "x IS NULL")
    assert _spark("TRANSFORM", ["a"], [t.array_of(t.INTEGER)], (plus,)) == \
        "CASE WHEN exists(a, x -> x IS NULL) THEN NULL ELSE transform(a, x -> x + 5) END"
    assert _spark("FILTER", ["a"], [t.array_of(t.INTEGER)], (LambdaSite(("x",), "x > 5"),)) == "filter(a, x -> x > 5)"
    assert _spark("FILTER", ["m"], [t.map_of(t.STRING, t.INTEGER)], (LambdaSite(("k", "v"), "v > 5"),)) == \
        "map_filter(m, (k, v) -> v > 5)"
    reduce = _spark("REDUCE", ["a", "s0"], [t.array_of(t.INTEGER), t.BIGINT], (LambdaSite(("s", "x"), "s + x", "x IS NULL"),))
    # a NULL initial state is NULL, a NULL array is the initial state, the state keeps its type
    assert reduce == ("CASE WHEN s0 IS NULL THEN NULL WHEN a IS NULL THEN CAST(s0 AS BIGINT) ELSE CASE WHEN "
                      "exists(a, x -> x IS NULL) THEN NULL ELSE aggregate(a, CAST(s0 AS BIGINT), (s, x) -> "
                      "CAST(s + x AS BIGINT)) END END")
    # a MAP's two lambdas: a duplicate key or a NULL value is ksqlDB's failure (NULL), not Spark's
    transformed = _spark("TRANSFORM", ["m"], [t.map_of(t.STRING, t.INTEGER)],
                         (LambdaSite(("k", "v"), "upper(k)"), LambdaSite(("k", "v"), "v")))
    assert "map_from_arrays(zip_with(map_keys(m), map_values(m), (k, v) -> upper(k)), " \
           "zip_with(map_keys(m), map_values(m), (k, v) -> v))" in transformed
    assert "size(array_distinct(" in transformed


def test_generate_series_types_and_wrong_steps() -> None:
    series = functions.lookup("GENERATE_SERIES")
    assert series is not None
    assert series.result_type([t.INTEGER, t.INTEGER]) == t.array_of(t.INTEGER)
    assert series.result_type([t.INTEGER, t.BIGINT, t.INTEGER]) == t.array_of(t.BIGINT)
    with pytest.raises(FunctionTypeError):
        series.result_type([t.STRING, t.INTEGER])
    assert _spark("GENERATE_SERIES", ["1", "5"], [t.INTEGER, t.INTEGER]) == "sequence(CAST(1 AS INT), CAST(5 AS INT))"
    assert _spark("GENERATE_SERIES", ["1", "5", "s"], [t.INTEGER, t.INTEGER, t.INTEGER]).startswith(
        "CASE WHEN CAST(s AS INT) = 0 OR")


def test_entries_and_json_types() -> None:
    entries = functions.lookup("ENTRIES")
    assert entries is not None
    assert entries.result_type([t.map_of(t.STRING, t.BIGINT), t.BOOLEAN]) == \
        t.array_of(t.struct_of(("K", t.STRING), ("V", t.BIGINT)))
    with pytest.raises(FunctionTypeError):
        entries.result_type([t.map_of(t.STRING, t.array_of(t.INTEGER)), t.BOOLEAN])
    for name, result in (("IS_JSON_STRING", t.BOOLEAN), ("JSON_ARRAY_LENGTH", t.INTEGER),
                         ("JSON_KEYS", t.array_of(t.STRING)), ("JSON_RECORDS", t.map_of(t.STRING, t.STRING)),
                         ("JSON_ITEMS", t.array_of(t.STRING)), ("TO_JSON_STRING", t.STRING)):
        fd = functions.lookup(name)
        assert fd is not None
        assert fd.result_type([t.STRING]) == result, name


@pytest.mark.parametrize(("texts", "expected"), [   # ksqlDB's json_concat.json cases
    (['{"a": 1}', '{"b": 2}'], '{"a":1,"b":2}'),
    (["{}", "{}"], "{}"),
    (['{"a": {"5": 6}}', '{"a": {"3": 4}}'], '{"a":{"3":4}}'),
    (["[1, 2]", "[3, 4]"], "[1,2,3,4]"),
    (["null", "null"], "[null,null]"),
    (["[1, 2]", '{"a": 1}'], '[1,2,{"a":1}]'),
    (["[]", "[]"], "[]"),
    (["[1, [2]]", "[[[3]], [[[4]]]]"], "[1,[2],[[3]],[[[4]]]]"),
    (["1", ""], None), (["", "1"], None), (["", ""], None), ([None, None], None),
    (['{"a": 1}', '{"b": 2}', '{"c": 3}'], '{"a":1,"b":2,"c":3}'),
    (["[1, 2]", '{"a": 1}', "4"], '[1,2,{"a":1},4]'),
    (['{"x": 1.50, "y": "é"}', "{}"], '{"x":1.50,"y":"é"}'),     # numbers as written, non-ASCII kept (Jackson)
])
def test_json_concat_python_body(texts: list[str | None], expected: str | None) -> None:
    assert json_concat(texts) == expected


@pytest.mark.parametrize(("text", "value", "expected"), [   # ksqlDB's json_array_contains.json and its UDF tests
    ('["Red", "Green"]', "Pink", False), ('["Pink", "Yellow", "Pink"]', "Pink", True), ('["Pink", null]', "Pink", True),
    ("[1, 2]", 2, True), ("[1, 2]", 2.0, False), ("[1.0, 2]", 1.0, True), ("[true]", True, True), ("[true]", 1, False),
    ("[null]", None, True), ("[1]", None, False), ('{"a": 1}', 1, False), ("not json", 1, False), (None, 1, None),
])
def test_json_array_contains_python_body(text: str | None, value: object, expected: bool | None) -> None:
    assert json_array_contains(text, value) is expected


def test_functions_once_refused_are_now_in_the_catalog(sources) -> None:
    for name in ("EXPLODE", "CUBE_EXPLODE", "TRANSFORM", "FILTER", "REDUCE", "GENERATE_SERIES", "ENTRIES", "IS_JSON_STRING",
                 "JSON_ARRAY_LENGTH", "JSON_KEYS", "JSON_RECORDS", "JSON_ITEMS", "JSON_CONCAT", "JSON_ARRAY_CONTAINS",
                 "TO_JSON_STRING"):
        assert functions.lookup(name) is not None, name
        assert name not in functions.NOT_SUPPORTED, name


def test_time_unit_keywords_are_arguments_not_columns(sources) -> None:
    ms = Metastore()
    for offset, s in enumerate(parse("CREATE STREAM D (ID STRING KEY, TS TIMESTAMP, DT DATE, TM TIME, N INT) "
                                     "WITH (kafka_topic='d', value_format='json');")):
        ms.apply(ms.validate(s, {}, {"d": 1}), offset)
    d = ms.source_map()
    a = analyze(d, "SELECT TIMESTAMPADD(MILLISECONDS, 10, ts) AS a, DATESUB(DAYS, n, dt) AS b, TIMEADD(HOURS, 1, tm) AS c "
                   "FROM d EMIT CHANGES;")
    assert a.schema_text() == "`A` TIMESTAMP, `B` DATE, `C` TIME"
    with pytest.raises(StatementError) as e:
        analyze(d, "SELECT timestampadd(ts, 5, ts) FROM d EMIT CHANGES;")
    assert e.value.message == "Function 'timestampadd' does not accept parameters (TIMESTAMP, INTEGER, TIMESTAMP)."
    with pytest.raises(StatementError) as e:
        analyze(d, "SELECT dateadd(DAYS, 5, ts) FROM d EMIT CHANGES;")
    assert e.value.message == "Function 'dateadd' does not accept parameters (STRING, INTEGER, TIMESTAMP)."
    # ksqlDB's TimeUnit arithmetic: a DATE shifted by milliseconds truncates to its day, a TIME wraps around the day
    assert _spark("DATEADD", ["'MILLISECONDS'", "n", "d"], [t.STRING, t.INTEGER, t.DATE]) == \
        "date_from_unix_date(CAST((CAST(unix_date(d) AS BIGINT) * 86400000 + CAST(n AS BIGINT) * 1) div 86400000 AS INT))"
    assert _spark("TIMESUB", ["'SECONDS'", "n", "t"], [t.STRING, t.INTEGER, t.TIME]) == \
        "CAST(pmod(CAST(t AS BIGINT) - CAST(n AS BIGINT) * 1000, 86400000) AS INT)"
