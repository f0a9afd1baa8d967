"""One expression semantics: a table of ksqlDB expressions, analyzed once, evaluated by the pull
evaluator (``language.evaluate``, Python values) and by the compiled path (``compile.expressions``
translated to Spark SQL, run on a one-row frame with the SQL server's Spark settings). Both must
give the same value: a pull query and a persistent query answer the same."""

from __future__ import annotations

import decimal
from typing import Any

import pytest

from oncestream.sql.engine.compile.expressions import Scope, translate
from oncestream.sql.language.evaluate import check_supported, evaluate
from tests.spark.sql.golden import analyze, ddl

pytestmark = [pytest.mark.spark]

SOURCE = ddl("CREATE STREAM SRC (ID INT KEY, A INT, B INT, S STRING, N STRING, X DOUBLE, T BOOLEAN, F BOOLEAN, "
             "ARR ARRAY<INT>, M MAP<STRING, STRING>, NA ARRAY<INT>) WITH (KAFKA_TOPIC='src', VALUE_FORMAT='JSON');")
SCHEMA = ("ID INT, A INT, B INT, S STRING, N STRING, X DOUBLE, T BOOLEAN, F BOOLEAN, ARR ARRAY<INT>, M MAP<STRING, STRING>, "
          "NA ARRAY<INT>")
ROW: dict[str, Any] = {"ID": 1, "A": 7, "B": -7, "S": "Hello", "N": None, "X": 2.5, "T": True, "F": False,
                       "ARR": [10, 20, 30], "M": {"k": "v"}, "NA": [5, None]}

EXPRESSIONS = [
    # three-valued logic, comparisons, IN, BETWEEN, LIKE
    "A = 7", "A <> 7", "A > B", "X < 3", "N = 'x'", "N IS NULL", "A IS NOT NULL", "NOT (N = 'x')",
    "(N = 'x') AND F", "(N = 'x') AND T", "(N = 'x') OR T", "(N = 'x') OR F", "A IN (1, 7)", "A IN (1, 2)",
    "A BETWEEN 7 AND 9", "A BETWEEN 8 AND 9", "S LIKE 'He%o'", "S LIKE 'h%'", "S LIKE 'H_llo'",
    # arithmetic (Java's integer division and remainder, NULL on division by zero)
    "A + 1", "A - B", "A * 2", "B / 2", "A / 2", "B % 3", "A % -3", "A / 0", "X * 2", "X + 1.5", "-A", "A + CAST(N AS INT)",
    "S + '!'",
    # casts, CASE, subscripts
    "CAST(A AS STRING)", "CAST('12' AS BIGINT)", "CAST('x' AS INTEGER)", "CAST(A AS DOUBLE)", "CAST(T AS STRING)",
    "CAST('true' AS BOOLEAN)", "CASE WHEN A > 10 THEN 'big' WHEN A > 5 THEN 'mid' ELSE 'small' END",
    "CASE A WHEN 7 THEN 'seven' END", "CASE WHEN N = 'x' THEN 1 END", "ARR[1]", "ARR[3]", "ARR[-1]", "ARR[4]",
    "M['k']", "M['x']",
    # the functions with a Python form
    "UCASE(S)", "LCASE(S)", "LCASE(N)", "LEN(S)", "TRIM('  a ')", "ABS(B)", "ROUND(X)", "ROUND(2.345, 2)",
    "FLOOR(X)", "CEIL(X)", "CONCAT(S, N, '-', 'x')", "COALESCE(N, 'd')", "IFNULL(N, 'd')", "SUBSTRING(S, 2)",
    "SUBSTRING(S, 2, 3)", "SUBSTRING(S, -3)", "S || '!'",
    # corners: overflow wraps (Java ints), substring from 0, subscript 0, boolean words, NULL arguments
    "A * 1000000000", "CAST(A AS BIGINT) * 1000000000000", "-(A * 1000000000)", "SUBSTRING(S, 0)", "SUBSTRING(S, 10)",
    "SUBSTRING(S, 2, -1)", "SUBSTRING(S, -10)", "ARR[0]", "ARR[-4]", "M['K']", "CAST('yes' AS BOOLEAN)",
    "CAST(' n ' AS BOOLEAN)", "CAST('maybe' AS BOOLEAN)", "CAST(X AS INTEGER)", "CAST(' 12 ' AS INTEGER)",
    "CAST(X AS STRING)", "CAST(F AS STRING)", "S = 'Hello'", "S > 'A'", "A = 7.0", "A / 2.0", "X / 0", "X % 2",
    "ABS(-2.5)", "ROUND(-2.5)", "ROUND(2.5)", "ROUND(-2.345, 2)", "ROUND(-X)", "ROUND(-X, 0)",
    "ROUND(-X - 0.01, 1)", "FLOOR(-2.5)", "CEIL(-2.5)", "FLOOR(A)", "LEN('')",
    # TRIM is Java's String.trim: everything up to U+0020 at both ends, nothing above
    "TRIM(' \t a b \t\r\n')", "TRIM('\u00a0a\u2003 \u2028')", "TRIM('\t')",
    "TRIM(N)", "CONCAT(N)", "COALESCE(N, N)", "IFNULL(A, 0)", "CASE N WHEN 'x' THEN 1 ELSE 2 END",
    "A BETWEEN 9 AND 8", "S LIKE '%'", "N LIKE '%'", "S IN ('Hello', N)", "S IN ('x', N)", "NOT T",
    # ksqlDB's Chr (code points past 255, '\\uXXXX' escapes), Split (literal, empty and NULL
    # delimiters) and ArrayJoin (NULL elements 'null', a NULL delimiter '')
    "CHR(A + 68)", "CHR(A * 3000)", "CHR(B)", "CHR(N)", "CHR(CONCAT('\\u00', '4b'))", "CHR(S)",
    "SPLIT(S, 'l')", "SPLIT(S, '')", "SPLIT(S, N)", "SPLIT('', '')", "SPLIT(CONCAT(S, '.'), '.')",
    "ARRAY_JOIN(ARR)", "ARRAY_JOIN(ARR, '-')", "ARRAY_JOIN(ARR, N)", "ARRAY_JOIN(NA, '|')", "ARRAY_JOIN(NA)",
]


def _same(python_value: Any, spark_value: Any) -> bool:
    if isinstance(python_value, bool) or isinstance(spark_value, bool):
        return python_value is spark_value
    if isinstance(python_value, decimal.Decimal | float) or isinstance(spark_value, decimal.Decimal | float):
        return python_value is not None and spark_value is not None and \
            decimal.Decimal(str(python_value)) == decimal.Decimal(str(spark_value))
    return bool(python_value == spark_value)


def test_pull_evaluation_and_compiled_spark_agree(sql_spark):
    select = ", ".join(f"{e} AS E{i}" for i, e in enumerate(EXPRESSIONS))
    _statement, analyzed = analyze(f"SELECT {select} FROM SRC EMIT CHANGES;", {"SRC": SOURCE})
    expressions = list(analyzed.expressions)
    assert len(expressions) == len(EXPRESSIONS)
    for expression in expressions:
        check_supported(expression)      # every expression of the table is one pull queries run
    python_values = [evaluate(e, ROW) for e in expressions]
    frame = sql_spark.createDataFrame([tuple(ROW[c] for c in ROW)], SCHEMA)
    scope = Scope({"SRC": SOURCE})
    spark_row = frame.selectExpr(*[f"{translate(e, scope)} AS E{i}" for i, e in enumerate(expressions)]).collect()[0]
    disagreements = [(text, p, s) for text, p, s in zip(EXPRESSIONS, python_values, list(spark_row), strict=True)
                     if not _same(p, s)]
    assert disagreements == [], "\n".join(map(repr, disagreements))
