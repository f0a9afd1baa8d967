"""GROUP BY over a TABLE source, with ksqlDB's semantics: a source row's update retracts its old
contribution and adds the new one (its group may change), a tombstone retracts, HAVING turns a
failing group into a tombstone (docs/sql-on-spark.md, "Table aggregations").

Spark's own streaming aggregation only adds rows, so the plan is two chained ``transformWithState``
operators (``table_state``: one JSON value of state per key, in the RocksDB state store and
checkpointed like every other operator's; the logic of each is a pure function in
``table_udafs``). Two ``applyInPandasWithState`` operators cannot be chained in one query.

    source table (changelog, read_committed)
      -> per record: key bytes, position, present (not a tombstone, passes WHERE),
         group (JSON of the GROUP BY values; NULL when one is NULL), aggregate arguments (JSON)
      -> groupBy(record key)  state: the key's contribution      -> retract / add deltas
      -> groupBy(group)       state: the group's accumulators    -> the group's results
      -> the SELECT and HAVING over the group values and results (Spark SQL)

Both operators emit rows (append mode), so the query writes with ``writeStream.format("oncestream")``
exactly once like a filter/project query; a replayed micro-batch starts from the state of the
batch before it, so it emits the same rows, which the sink's journal then writes once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from sqlglot import exp

from oncestream.sql.engine.compile import serde_columns
from oncestream.sql.engine.compile.expressions import TYPE_KEY, Scope, quote, translate
from oncestream.sql.engine.compile.sources import RAW_KEY, TOMBSTONE
from oncestream.sql.engine.compile.table_state import (
    AGG_PREFIX,
    DELTA_SCHEMA,
    RESULT_SCHEMA,
    ChangelogProcessor,
    GroupProcessor,
    in_change_order,
)
from oncestream.sql.engine.compile.table_udafs import TableUdafError, table_udaf, unsupported_message
from oncestream.sql.errors import StatementError
from oncestream.sql.language.analyzer_expr import call_parts, same_expression
from oncestream.sql.language.catalog import ROWOFFSET, ROWPARTITION, ROWTIME, Column
from oncestream.sql.language.types import BaseType, SqlType

GROUP_PREFIX = "__GRP_"
DELETE = "__DELETE"   # the same column as plan.DELETE (plan imports this module)
RESULT_ROWTIME = "__ROWTIME"   # the same column as plan.RESULT_ROWTIME

_JSON_OPTIONS = {"ignoreNullFields": "false"}


def _is_star(node: exp.Expression) -> bool:
    return isinstance(node, exp.Star)


AggregateCalls = tuple[list[tuple[str, tuple[str, ...], bool]], list[tuple[str, str]], list[list[str]]]


def aggregate_calls(aggregates: Sequence[exp.Expression], scope: Scope, udaf: Callable[..., object],
                    refusal: Callable[[list[str]], str]) -> AggregateCalls:
    """Each aggregate's (name, argument types, star), the arguments' (field, Spark SQL) and the
    fields each aggregate reads, for an aggregation that folds its own state (a table's, a
    session's). ``udaf(name, types, star=)`` raises TableUdafError for an aggregate it cannot
    compute; those are refused together with ``refusal(names)``."""
    calls: list[tuple[str, tuple[str, ...], bool]] = []
    arg_sql: list[tuple[str, str]] = []
    arg_slices: list[list[str]] = []
    unsupported: list[str] = []
    for aggregate in aggregates:
        parts = call_parts(aggregate)
        if parts is None:
            raise StatementError(f"not an aggregate call: {aggregate.sql()}")
        name = parts[0].upper()
        args = [a for a in parts[1] if isinstance(a, exp.Expression) and not _is_star(a)]
        names = []
        for a in args:
            field = f"a{len(arg_sql)}"
            arg_sql.append((field, translate(a, scope)))
            names.append(field)
        arg_slices.append(names)
        types = tuple(type_name(a) or "" for a in args)
        try:
            udaf(name, types, star=not args)
        except TableUdafError:
            if name not in unsupported:
                unsupported.append(name)
            continue
        calls.append((name, types, not args))
    if unsupported:
        raise StatementError(refusal(unsupported))
    return calls, arg_sql, arg_slices


def unpacked_columns(group_schema: T.StructType, aggregates: Sequence[exp.Expression]) -> list[SparkColumn]:
    """The group columns and ``AGG_PREFIX<i>`` results out of the ``__g`` / ``__r`` structs an
    aggregation operator's JSON output is read into (DECIMAL results cast to their precision)."""
    values = [F.col(f"__g.{quote(f.name)}").alias(f.name) for f in group_schema.fields]
    for i, aggregate in enumerate(aggregates):
        value = F.col(f"__r.{quote(f'{AGG_PREFIX}{i}')}")
        ty = aggregate.meta.get(TYPE_KEY)
        if isinstance(ty, SqlType) and ty.base is BaseType.DECIMAL:
            value = value.cast(serde_columns.spark_type(ty))
        values.append(value.alias(f"{AGG_PREFIX}{i}"))
    return values


def _placeholder(name: str, replaced: exp.Expression) -> exp.Expression:
    column = exp.column(exp.to_identifier(name, quoted=True))
    column.meta.update(replaced.meta)
    return column


def over_results(expression: exp.Expression, groups: Sequence[exp.Expression],
                  aggregates: Sequence[exp.Expression]) -> exp.Expression:
    """``expression`` with each GROUP BY expression and each aggregate call replaced by the
    column holding its value after the aggregation."""

    def swap(node: exp.Expression) -> exp.Expression:
        for i, g in enumerate(groups):
            if same_expression(node, g):
                return _placeholder(f"{GROUP_PREFIX}{i}", node)
        for i, a in enumerate(aggregates):
            if same_expression(node, a):
                return _placeholder(f"{AGG_PREFIX}{i}", node)
        return node

    return expression.copy().transform(swap)


def type_name(node: exp.Expression) -> str | None:
    """The ksqlDB base type name of an analyzed expression (None when it has no type); an
    ARRAY's with its element type (``ARRAY<INTEGER>``: SUM_LIST sums in it)."""
    ty = node.meta.get(TYPE_KEY)
    if not isinstance(ty, SqlType):
        return None
    return ty.ksql_name if ty.base is BaseType.ARRAY else ty.base.value


def result_type(aggregate: exp.Expression) -> T.DataType:
    """The Spark type an aggregate's result is read back with from the accumulators' JSON."""
    ty = aggregate.meta.get(TYPE_KEY)
    if not isinstance(ty, SqlType):
        raise StatementError(f"the aggregate {aggregate.sql()} has no type")
    if ty.base is BaseType.DECIMAL:
        return T.StringType()    # written as text by the accumulator, cast back below (exact)
    return serde_columns.spark_type(ty)


def aggregate_table(frame: DataFrame, scope: Scope, alias: str, columns: Sequence[Column],
                    chosen: Mapping[str, exp.Expression], group_exprs: Sequence[exp.Expression],
                    aggregates: Sequence[exp.Expression], where: exp.Expression | None,
                    having: exp.Expression | None) -> DataFrame:
    """The frame of a table aggregation (see the module docstring): one column per output column
    plus ``__DELETE`` (HAVING failed: a tombstone for the group's key) and ``__ROWTIME`` (the
    largest ROWTIME of the records that changed the group)."""
    calls, arg_sql, arg_slices = aggregate_calls(aggregates, scope, table_udaf, unsupported_message)

    group_sql = [translate(g, scope) for g in group_exprs]
    present = ~F.col(quote(scope.internal(alias, TOMBSTONE)))
    if where is not None:
        # A row failing WHERE is no row of the filtered table: it retracts, as a tombstone does.
        present = present & F.coalesce(F.expr(translate(where, scope)), F.lit(False))
    group_cols = [F.expr(g).alias(f"{GROUP_PREFIX}{i}") for i, g in enumerate(group_sql)]
    any_null = F.lit(False)
    for g in group_sql:
        any_null = any_null | F.expr(g).isNull()
    group_json = F.when(any_null, F.lit(None).cast("string")).otherwise(F.to_json(F.struct(*group_cols), _JSON_OPTIONS))
    args_struct = F.struct(*[F.expr(sql).alias(field) for field, sql in arg_sql]) if arg_sql else F.struct(F.lit(None).alias("_"))
    changes = frame.where(F.col(quote(RAW_KEY)).isNotNull()).select(
        F.col(quote(RAW_KEY)).alias("__K"), F.col(quote(scope.internal(alias, ROWPARTITION))).cast("long").alias("__P"),
        F.col(quote(scope.internal(alias, ROWOFFSET))).cast("long").alias("__O"), present.alias("__PRESENT"),
        group_json.alias("__G"), F.to_json(args_struct, _JSON_OPTIONS).alias("__A"),
        F.col(quote(scope.internal(alias, ROWTIME))).cast("long").alias("__T"))
    group_schema = frame.select(*group_cols).schema

    deltas = changes.groupBy("__K").transformWithState(ChangelogProcessor(), DELTA_SCHEMA, "Append", "None")
    results = deltas.groupBy("__G").transformWithState(GroupProcessor(calls, arg_slices), RESULT_SCHEMA,
                                                       "Append", "None")

    # One source record that moves a row to another group changes two groups: ksqlDB writes the
    # old group's result (the retraction) before the new one's, and every change's results in
    # the order of the records. Each group's result is placed by its last change (a micro-batch
    # has one result per group; ordering a partition orders all of the output where the shuffle
    # has one partition, as the conformance runner's; with several, Kafka orders per key only).
    results = results.mapInArrow(in_change_order, RESULT_SCHEMA)
    result_schema = T.StructType([T.StructField(f"{AGG_PREFIX}{i}", result_type(a)) for i, a in enumerate(aggregates)])
    unpacked = results.select(F.from_json("__G", group_schema).alias("__g"), F.from_json("__R", result_schema).alias("__r"),
                              F.col("__T").alias(RESULT_ROWTIME))
    grouped = unpacked.select(*unpacked_columns(group_schema, aggregates), RESULT_ROWTIME)

    names = [f.name for f in group_schema.fields] + [f"{AGG_PREFIX}{i}" for i in range(len(aggregates))]
    result_scope = Scope(scope.sources, scope.qualified, overrides={**scope.overrides, **{n: quote(n) for n in names}})
    selected = [F.expr(translate(over_results(chosen[c.name], group_exprs, aggregates), result_scope)).alias(c.name)
                for c in columns]
    delete = F.lit(False)
    if having is not None:
        passes = F.expr(translate(over_results(having, group_exprs, aggregates), result_scope))
        delete = ~F.coalesce(passes, F.lit(False))
    return grouped.select(*selected, delete.alias(DELETE), RESULT_ROWTIME)
