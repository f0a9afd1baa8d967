"""The pull-query expression evaluator: SQL's three-valued logic, Java arithmetic as ksqlDB
computes it, the supported functions, and refusals of the rest."""

from __future__ import annotations

import decimal

import pytest
import sqlglot

from oncestream.sql.errors import StatementError
from oncestream.sql.language import functions, sql_ast
from oncestream.sql.language.analyzer import analyze_query
from oncestream.sql.language.evaluate import UnsupportedInPullQueryError, check_supported, evaluate
from oncestream.sql.language.parser import parse, parse_expression
from oncestream.sql.server.metastore import Metastore
from tests.support.narrow import of_type

ROW = {"A": 7, "B": -7, "S": "Hello", "N": None, "X": 2.5, "T": True, "F": False,
       "ARR": [10, 20, 30], "M": {"k": "v"}, "ST": {"F1": 1, "INNER": {"G": "deep"}}}


def ev(text: str):
    node = parse_expression(text)   # ksqlDB's parser: calls are exp.Anonymous, a->b is exp.Dot
    check_supported(node)
    return evaluate(node, ROW)


@pytest.mark.parametrize(("text", "expected"), [
    ("A = 7", True), ("A <> 7", False), ("A != 8", True), ("A > B", True), ("B >= -7", True), ("X < 3", True),
    # a comparison with a NULL operand is false (ksqlDB's ComparisonInterpreter), so NOT makes it true
    ("N = 1", False), ("N IS NULL", True), ("A IS NOT NULL", True), ("NOT N = 1", True),
    ("N = 1 AND F", False), ("N = 1 AND T", False), ("N = 1 OR T", True), ("N = 1 OR F", False),
    ("A IN (1, 7)", True), ("A IN (1, N)", None), ("A IN (1, 2)", False), ("N IN (1)", None),
    ("A BETWEEN 7 AND 9", True), ("A BETWEEN 8 AND N", False), ("A BETWEEN 1 AND N", False),
    ("S LIKE 'He%o'", True), ("S LIKE 'h%'", False), ("S LIKE 'H_llo'", True), ("S LIKE 'H.llo'", False),
])
def test_predicates_follow_ksqldb_null_rules(text, expected):
    assert ev(text) is expected


@pytest.mark.parametrize(("text", "expected"), [
    ("A + 1", 8), ("A - B", 14), ("A * 2", 14), ("B / 2", -3), ("A / 2", 3), ("B % 3", -1), ("A % -3", 1),
    ("A / 0", None), ("X * 2", 5.0), ("X + 1.5", 4.0), ("-A", -7), ("N + 1", None),
    ("S || '!'", "Hello!"), ("S || N", None), ("1.5 + 1", decimal.Decimal("2.5")),
])
def test_arithmetic_is_javas(text, expected):
    assert ev(text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("UCASE(S)", "HELLO"), ("LCASE(S)", "hello"), ("LCASE(N)", None), ("LEN(S)", 5),
    ("ABS(B)", 7), ("ROUND(X)", 3), ("ROUND(2.345, 2)", decimal.Decimal("2.35")), ("FLOOR(X)", 2.0),
    ("CEIL(X)", 3.0), ("CONCAT(S, N, '-', 'x')", "Hello-x"), ("COALESCE(N, N, 3)", 3), ("IFNULL(N, 'd')", "d"),
    ("SUBSTRING(S, 2)", "ello"), ("SUBSTRING(S, 2, 3)", "ell"), ("SUBSTRING(S, -3)", "llo"), ("TRIM('  a ')", "a"),
    ("SUBSTRING(S, 0)", "Hello"), ("CAST('yes' AS BOOLEAN)", True), ("CAST(' n ' AS BOOLEAN)", False),
    ("CAST('maybe' AS BOOLEAN)", None),
    ("CAST(A AS STRING)", "7"), ("CAST('12' AS BIGINT)", 12), ("CAST('x' AS INTEGER)", None), ("CAST(A AS DOUBLE)", 7.0),
    ("CAST(T AS STRING)", "true"), ("CAST('TRUE' AS BOOLEAN)", True),
    ("CASE WHEN A > 10 THEN 'big' WHEN A > 5 THEN 'mid' ELSE 'small' END", "mid"),
    ("CASE A WHEN 7 THEN 'seven' END", "seven"), ("CASE WHEN N = 1 THEN 1 END", None),
    ("ARR[1]", 10), ("ARR[3]", 30), ("ARR[-1]", 30), ("ARR[4]", None), ("ARR[0]", None), ("ARR[N]", None),
    ("M['k']", "v"), ("M['x']", None), ("ST->F1", 1), ("ST->INNER->G", "deep"), ("ST->MISSING", None),
])
def test_functions(text, expected):
    assert ev(text) == expected


@pytest.mark.parametrize("text", [
    "EXP(A)", "SUM(A)", "COUNT(*)", "A IN (SELECT 1)", "CAST(A AS DECIMAL(4, 2))", "LEN(S, A)", "MAX(A, B)",
    "ARRAY[1, 2]", "A IS TRUE",
])
def test_unsupported_expressions_are_refused(text):
    """sqlglot's own nodes too (the evaluator's guard does not rely on the parser)."""
    with pytest.raises(UnsupportedInPullQueryError, match=r"Pull queries don't support|does not accept"):
        check_supported(sqlglot.parse_one(text))


def test_unknown_column_and_type_mismatch_are_statement_errors():
    with pytest.raises(StatementError, match="cannot be resolved"):
        ev("MISSING = 1")
    with pytest.raises(StatementError, match="Cannot compare"):
        ev("S > 1")


def test_the_evaluator_runs_exactly_the_functions_with_a_python_form():
    """One function table: the evaluator has no functions of its own, it runs the catalog's."""
    with_python = functions.python_functions()
    assert {"UCASE", "LCASE", "LEN", "ABS", "ROUND", "FLOOR", "CEIL", "CONCAT", "COALESCE", "IFNULL", "SUBSTRING",
            "TRIM"} <= set(with_python)
    for name, definition in functions.catalog().items():
        call = parse_expression(f"{name}({', '.join(['S'] * max(definition.min_args, 1))})")
        if name in with_python:
            check_supported(call)
        else:
            with pytest.raises(UnsupportedInPullQueryError):
                check_supported(call)


def test_integer_arithmetic_wraps_as_javas_by_the_analyzed_type():
    """INTEGER and BIGINT overflow wraps (Java, and Spark with ANSI off); the width is the type the
    analyzer gave the expression."""
    metastore = Metastore()
    (create,) = parse("CREATE STREAM SRC (A INT, L BIGINT) WITH (KAFKA_TOPIC='t', VALUE_FORMAT='JSON', PARTITIONS=1);")
    metastore.apply(metastore.validate(create), 0)
    (parsed,) = parse("SELECT A * 1000000000, -(A * 1000000000), L * 2, A + 1 FROM SRC EMIT CHANGES;")
    select = of_type(parsed, sql_ast.QueryStatement)
    analyzed = analyze_query(select.query, metastore.source_map())
    row = {"A": 7, "L": 2**62}
    assert [evaluate(e, row) for e in analyzed.expressions] == [-1589934592, 1589934592, -(2**63), 8]


def test_cast_of_time_types_to_string_is_ksqldbs_text():
    """CAST(... AS STRING) of TIMESTAMP, DATE and TIME (held as millis, days and millis of the day)
    as ksqlDB's SqlTimeTypes writes them: a TIME without seconds is ``HH:mm`` (Java's LocalTime)."""
    metastore = Metastore()
    (create,) = parse("CREATE STREAM SRC (TS TIMESTAMP, D DATE, TM TIME) "
                      "WITH (KAFKA_TOPIC='t', VALUE_FORMAT='JSON', PARTITIONS=1);")
    metastore.apply(metastore.validate(create), 0)
    (parsed,) = parse("SELECT CAST(TS AS STRING), CAST(D AS STRING), CAST(TM AS STRING) FROM SRC EMIT CHANGES;")
    analyzed = analyze_query(of_type(parsed, sql_ast.QueryStatement).query, metastore.source_map())
    rows: list[tuple[dict[str, int | None], list[str | None]]] = [
            ({"TS": 10, "D": 10, "TM": 5000}, ["1970-01-01T00:00:00.010", "1970-01-11", "00:00:05"]),
            ({"TS": 1526075913000, "D": -1, "TM": 60_999}, ["2018-05-11T21:58:33.000", "1969-12-31", "00:01"]),
            ({"TS": None, "D": None, "TM": None}, [None, None, None])]
    for row, expected in rows:
        assert [evaluate(e, row) for e in analyzed.expressions] == expected
