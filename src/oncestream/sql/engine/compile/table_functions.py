"""Table functions (``EXPLODE``, ``CUBE_EXPLODE``) in a compiled SELECT: one input row becomes
as many output rows as its longest table-function result, as ksqlDB's ``KudtfFlatMapper`` zips
them (KLIP-9): row i takes element i of each result, NULL where a shorter one has ended; a row
whose results are all NULL or empty gives no output row.

Spark's ``explode`` allows one generator per SELECT and cannot zip; so each call's array (the
catalog's Spark form, ``functions_collections``) becomes a column, one ``explode`` of the index
range ``sequence(0, n - 1)`` spreads the row, and each call in the SELECT expressions is replaced
by ``try_element_at(<its array>, index + 1)``. WHERE is applied before (ksqlDB filters the input
rows); the analyzer has refused table functions anywhere else (``analyzer_functions``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from sqlglot import exp

from oncestream.sql.engine.compile.expressions import TYPE_KEY, Scope, quote, translate
from oncestream.sql.language import functions
from oncestream.sql.language.catalog import Column

INDEX = "__TF_INDEX"
ARRAY_PREFIX = "__TF_ARRAY_"
ELEMENT_PREFIX = "__TF_ELEMENT_"


def has_table_functions(expressions: Sequence[exp.Expression]) -> bool:
    return any(_calls(e) for e in expressions)


def _calls(expression: exp.Expression) -> list[exp.Anonymous]:
    return [n for n in expression.walk() if isinstance(n, exp.Anonymous) and functions.is_table_function(str(n.this))]


def spread_rows(frame: DataFrame, scope: Scope, columns: Sequence[Column],
                chosen: Mapping[str, exp.Expression]) -> tuple[DataFrame, dict[str, exp.Expression]]:
    """``frame`` with one row per zipped table-function element, and the SELECT expressions with
    each table-function call replaced by its element (``scope.overrides`` resolves them)."""
    arrays: list[str] = []
    rewritten: dict[str, exp.Expression] = {}
    for column in columns:
        expression = chosen[column.name].copy()
        for call in _calls(expression):
            i = len(arrays)
            arrays.append(translate(call, scope))
            element = f"{ELEMENT_PREFIX}{i}"
            ref = exp.column(exp.to_identifier(element, quoted=True))
            ref.meta[TYPE_KEY] = call.meta.get(TYPE_KEY)
            scope.overrides[element] = f"try_element_at({quote(ARRAY_PREFIX + str(i))}, {quote(INDEX)} + 1)"
            if call is expression:
                expression = ref
            else:
                call.replace(ref)
        rewritten[column.name] = expression
    with_arrays = frame.select("*", *[F.expr(a).alias(f"{ARRAY_PREFIX}{i}") for i, a in enumerate(arrays)])
    longest = "greatest(0, " + ", ".join(f"coalesce(size({quote(ARRAY_PREFIX + str(i))}), 0)"
                                         for i in range(len(arrays))) + ")"
    spread = with_arrays.withColumn(INDEX, F.explode(F.expr(f"CASE WHEN {longest} > 0 THEN sequence(0, {longest} - 1) END")))
    return spread, rewritten
