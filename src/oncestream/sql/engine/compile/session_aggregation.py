"""GROUP BY ... WINDOW SESSION over a stream with EMIT CHANGES, as ksqlDB writes it (Kafka Streams'
``KStreamSessionWindowAggregate``): every record writes its session's new result, after a
tombstone for each session it merged (docs/sql-on-spark.md, "Session windows").

Spark's ``session_window`` aggregation has no update mode (it writes a session once, when the
watermark passes it), so the plan is one ``transformWithState`` operator in event time
(``session_state``; the merging rules and the aggregates are pure functions in ``session_steps``):

    stream (WHERE applied, rows with a NULL GROUP BY value dropped)
      -> per record: group (JSON of the GROUP BY values), aggregate arguments (JSON), ROWTIME,
         partition, offset; event time ROWTIME + LATENESS_MS, watermark delay LATENESS_MS
      -> groupBy(group)   state: the group's open sessions and their records' arguments
         -> per write: window, results (JSON) or a tombstone, timestamp (the window's end)
      -> the SELECT over the group values, results and window bounds (Spark SQL)

The watermark is the largest ROWTIME of earlier micro-batches (Kafka Streams' stream time; the
shift keeps Spark from dropping late rows before the operator, which drops them by the grace
period itself). The operator emits rows (append mode), so the sink writes them exactly once like
a table aggregation's; a replayed micro-batch starts from the state of the batch before it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from sqlglot import exp

from oncestream.sql.engine.compile.expressions import Scope, quote, translate
from oncestream.sql.engine.compile.joins import LATENESS_MS
from oncestream.sql.engine.compile.session_state import SESSION_OUT, SessionProcessor
from oncestream.sql.engine.compile.session_steps import SessionWindow, session_udaf, unsupported_session_message
from oncestream.sql.engine.compile.table_aggregation import (
    GROUP_PREFIX,
    AggregateCalls,
    aggregate_calls,
    over_results,
    result_type,
    unpacked_columns,
)
from oncestream.sql.engine.compile.table_state import AGG_PREFIX
from oncestream.sql.language.catalog import ROWOFFSET, ROWPARTITION, WINDOWEND, WINDOWSTART, Column

DELETE = "__DELETE"            # plan.DELETE
RESULT_ROWTIME = "__ROWTIME"   # plan.RESULT_ROWTIME
WSTART = "__WSTART"            # plan.WSTART
WEND = "__WEND"                # plan.WEND

_JSON_OPTIONS = {"ignoreNullFields": "false"}


def session_calls(aggregates: Sequence[exp.Expression], scope: Scope) -> AggregateCalls:
    """``table_aggregation.aggregate_calls`` for sessions; StatementError naming the aggregates
    sessions cannot compute."""
    return aggregate_calls(aggregates, scope, session_udaf, unsupported_session_message)


def aggregate_sessions(frame: DataFrame, scope: Scope, alias: str, columns: Sequence[Column],
                       chosen: Mapping[str, exp.Expression], group_exprs: Sequence[exp.Expression],
                       aggregates: Sequence[exp.Expression], having: exp.Expression | None,
                       gap_ms: int, grace_ms: int, ts: str) -> DataFrame:
    """The frame of a session aggregation (module docstring; WHERE already applied, NULL groups
    dropped): one column per output column plus ``__WSTART``/``__WEND``, ``__DELETE`` (a tombstone
    of a merged session, or HAVING failed) and ``__ROWTIME`` (the session's end)."""
    calls, arg_sql, arg_slices = session_calls(aggregates, scope)
    group_sql = [translate(g, scope) for g in group_exprs]
    group_cols = [F.expr(g).alias(f"{GROUP_PREFIX}{i}") for i, g in enumerate(group_sql)]
    group_json = F.to_json(F.struct(*group_cols), _JSON_OPTIONS) if group_cols else F.lit("{}")
    args_struct = F.struct(*[F.expr(sql).alias(field) for field, sql in arg_sql]) if arg_sql else F.struct(F.lit(None).alias("_"))
    records = frame.select(
        group_json.alias("__G"), F.to_json(args_struct, _JSON_OPTIONS).alias("__A"),
        F.col(quote(ts)).cast("long").alias("__T"),
        F.col(quote(scope.internal(alias, ROWPARTITION))).cast("long").alias("__P"),
        F.col(quote(scope.internal(alias, ROWOFFSET))).cast("long").alias("__O"))
    group_schema = frame.select(*group_cols).schema
    # The watermark (stream time) is the largest ROWTIME seen: the event time is shifted by as much
    # as the watermark's delay, so Spark drops no row the operator would keep (module docstring).
    records = records.withColumn("__ET", F.timestamp_millis(F.col("__T") + F.lit(LATENESS_MS))) \
        .withWatermark("__ET", f"{LATENESS_MS} milliseconds")
    processor = SessionProcessor(SessionWindow(gap_ms, grace_ms), calls, arg_slices)
    writes = records.groupBy("__G").transformWithState(processor, SESSION_OUT, "Append", "EventTime")

    result_schema = T.StructType([T.StructField(f"{AGG_PREFIX}{i}", result_type(a)) for i, a in enumerate(aggregates)])
    unpacked = writes.select(F.from_json("__G", group_schema).alias("__g"), F.from_json("__R", result_schema).alias("__r"),
                             F.col("__WS").alias(WSTART), F.col("__WE").alias(WEND), F.col("__DEL"),
                             F.col("__T").alias(RESULT_ROWTIME))
    grouped = unpacked.select(*unpacked_columns(group_schema, aggregates), WSTART, WEND, "__DEL", RESULT_ROWTIME)

    names = [f.name for f in group_schema.fields] + [f"{AGG_PREFIX}{i}" for i in range(len(aggregates))]
    overrides = {**scope.overrides, **{n: quote(n) for n in names}, WINDOWSTART: quote(WSTART), WINDOWEND: quote(WEND)}
    result_scope = Scope(scope.sources, scope.qualified, overrides=overrides)
    selected = [F.expr(translate(over_results(chosen[c.name], group_exprs, aggregates), result_scope)).alias(c.name)
                for c in columns]
    delete = F.col("__DEL")
    if having is not None:
        passes = F.expr(translate(over_results(having, group_exprs, aggregates), result_scope))
        delete = delete | ~F.coalesce(passes, F.lit(False))
    return grouped.select(*selected, WSTART, WEND, delete.alias(DELETE), RESULT_ROWTIME)
