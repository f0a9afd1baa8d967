"""A ksqlDB query (``ast.Query`` + the analyzer's result) compiled into a Spark streaming plan.

Shape of the plan (docs/sql-on-spark.md has the semantics):

    source(s) -> [join] -> WHERE -> projection                           (streams: append)
                                 -> GROUP BY [WINDOW] aggregates, HAVING  (update; sessions: append)

The compiled frame has one column per output column (named as the output column), and may add
``__WSTART``/``__WEND`` (BIGINT ms; windowed results), ``__DELETE`` (true: the row is a
tombstone for its key: a table row deleted upstream, or failing WHERE/HAVING on a table) and
``__ROWTIME`` (BIGINT ms: the result's ROWTIME as Kafka Streams gives it, see ``result_rowtime``).
A stream's records whose value is null go through a projection as records with a null value
(``__DELETE`` true) and are dropped by WHERE, table functions, aggregations and joins
(``null_values`` has ksqlDB's rules).
``records()`` turns it into the connector's ``key``/``value``/``timestamp`` columns for a sink's
formats.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from sqlglot import exp

from oncestream.sql.engine.compile import serde_columns
from oncestream.sql.engine.compile.expressions import Scope, is_aggregate, quote, translate
from oncestream.sql.engine.compile.having_gate import gate_having
from oncestream.sql.engine.compile.joins import join_frames, join_key_sql, key_column_sql
from oncestream.sql.engine.compile.null_values import key_only
from oncestream.sql.engine.compile.session_aggregation import aggregate_sessions
from oncestream.sql.engine.compile.sources import (
    RAW_KEY,
    TOMBSTONE,
    TS,
    ReadSettings,
    read_source,
    timestamp_ms,
    without_null_values,
)
from oncestream.sql.engine.compile.table_aggregation import RESULT_ROWTIME, aggregate_table
from oncestream.sql.engine.compile.table_functions import has_table_functions, spread_rows
from oncestream.sql.engine.compile.table_joins import JOIN_KEY
from oncestream.sql.engine.serde import RecordLayout, layout_of
from oncestream.sql.engine.serde_registry import NO_REGISTRY
from oncestream.sql.errors import StatementError
from oncestream.sql.language import functions_json, zone_text
from oncestream.sql.language.catalog import ROWTIME, WINDOWEND, WINDOWSTART, Column, Format, SourceInfo
from oncestream.sql.language.sql_ast import Query, SourceKind, WindowKind, WindowSpec

WSTART = "__WSTART"
WEND = "__WEND"
DELETE = "__DELETE"
HAVING = "__HAVING"
WINDOW = "__W"

# ksqlDB's default grace period for windows and joins without GRACE PERIOD (24 hours).
DEFAULT_GRACE_MS = 24 * 60 * 60 * 1000

_view_ids = itertools.count()


@dataclass(frozen=True)
class CompiledQuery:
    """A query's Spark plan: ``frame`` (see the module docstring) and how to run it."""

    frame: DataFrame
    columns: tuple[Column, ...]
    result_kind: SourceKind
    window: WindowSpec | None
    output_mode: str            # "append" or "update"
    has_delete: bool
    # Set when the output key is the source's key unchanged: the source's key layout. A sink with
    # the same key layout gets the record key's bytes as they were (no decode/encode per row).
    raw_key_layout: tuple[Any, ...] | None = None
    # Set when the output key is the source's key columns unchanged (in any key layout): a record
    # read with a null key is written with a null key, as ksqlDB's null key passes through its
    # serializer (decoded, all its columns are NULL, which an encoder would write as a value).
    source_key: bool = False

    def rows(self) -> DataFrame:
        """The output columns in order, tombstones and a stream's null values dropped (push
        queries, as ksqlDB's transient queries drop them)."""
        frame = self.frame.where(~F.col(DELETE)) if self.has_delete else self.frame
        return frame.select(*[F.col(quote(c.name)) for c in self.columns])

    def records(self, layout: RecordLayout, sink_timestamp: Column | None = None,
                sink_timestamp_format: str | None = None) -> DataFrame:
        """The connector's ``key``/``value``/``timestamp`` columns in the sink's formats (value
        null for a tombstone or a stream's null-valued record). The record timestamp is the result's ROWTIME, or with
        ``sink_timestamp`` (a C*AS's ``WITH (TIMESTAMP='col')``, one of ``columns``) that output
        column's value; a row whose column is null or negative is dropped, as ksqlDB drops a row
        whose timestamp it cannot extract (a tombstone keeps the result's ROWTIME)."""
        values = {c.name: F.col(quote(c.name)) for c in self.columns}
        start = F.col(WSTART) if self.window is not None else None
        end = F.col(WEND) if self.window is not None else None
        if self.raw_key_layout is not None and self.raw_key_layout == key_layout_of(layout):
            key = F.col(RAW_KEY)
        else:
            key = serde_columns.encode_key(layout, values, start, end)
            if self.source_key:
                key = F.when(F.col(RAW_KEY).isNull(), F.lit(None).cast("binary")).otherwise(key)
        value = serde_columns.encode_value(layout, values)
        if self.has_delete:
            value = F.when(F.col(DELETE), F.lit(None).cast("binary")).otherwise(value)
        frame = self.frame
        rowtime = F.col(RESULT_ROWTIME)
        if sink_timestamp is not None:
            chosen = timestamp_ms(F.col(quote(sink_timestamp.name)), sink_timestamp.type.base, sink_timestamp_format)
            keep = F.col(RESULT_ROWTIME) >= 0
            if self.has_delete:
                chosen = F.when(F.col(DELETE), rowtime).otherwise(chosen)
                keep = keep | F.col(DELETE)
            frame = frame.withColumn(RESULT_ROWTIME, chosen).where(keep)
            rowtime = F.col(RESULT_ROWTIME)
        return frame.select(key.alias("key"), value.alias("value"), F.timestamp_millis(rowtime).alias("timestamp"))


def key_layout_of(layout: RecordLayout) -> tuple[Any, ...]:
    """What decides a record key's bytes: format, key column types, delimiter, window kind, and
    in a registry format the subject and schema its codec frames with (ksqlDB writes a sink's key
    with the sink's schema, so a key read from another topic's subject is written again)."""
    delimiter = layout.key_delimiter if layout.key_format is Format.DELIMITED else None
    codec = layout.key_codec
    framing = None if codec is None or codec.fmt == NO_REGISTRY else (codec.subject, codec.schema_id, codec.schema_name)
    return (layout.key_format, tuple(c.type for c in layout.key_columns), delimiter, layout.window, framing)


# Key formats whose bytes are the one encoding of the key's values, so a record's key bytes are
# what ksqlDB's sink serializer writes again. JSON (and JSON_SR, DELIMITED) text has many forms of
# one value (field names in any case, spacing, 1.0 for an INT): ksqlDB reads the key and writes it
# with its own serializer (`{"ID":1}` for an input `{"id": 1}`), so such keys are encoded again.
_CANONICAL_KEY_FORMATS = frozenset({Format.KAFKA, Format.AVRO, Format.PROTOBUF, Format.PROTOBUF_NOSR})


def _keeps_source_key(analyzed: Any, scope: Scope, alias: str, source: SourceInfo) -> bool:
    """Whether the output key is exactly the source's key columns, in order (its bytes can be
    written again as they were read when the key format is in _CANONICAL_KEY_FORMATS)."""
    keys = tuple(getattr(analyzed, "key_expressions", ()) or ())
    source_keys = source.key_columns
    if not source_keys or len(keys) != len(source_keys) or analyzed.partition_by:
        return False
    for expression, column in zip(keys, source_keys, strict=True):
        if not isinstance(expression, exp.Column):
            return False
        if scope.resolve(expression.name, expression.table or None) != scope.internal(alias, column.name):
            return False
    output_keys = [c.type for c in analyzed.columns if c.is_key]
    return output_keys == [c.type for c in source_keys]


def source_aliases(analyzed: Any) -> list[tuple[str, SourceInfo]]:
    """(alias, source) of the FROM source and each join, in order."""
    sources: Mapping[str, SourceInfo] = analyzed.sources
    first = analyzed.from_alias
    out = [(first, sources[first])]
    out += [(j.right_alias, j.right) for j in analyzed.joins]
    return out


def result_rowtime(aliases: Sequence[tuple[str, SourceInfo]], scope: Scope) -> str:
    """Spark SQL of a result row's ROWTIME before any aggregation, as Kafka Streams stamps it: the
    source record's; of a join, the larger ROWTIME of its stream sides (stream-stream: both,
    ``KStreamKStreamJoin``; stream-table: the stream's) or, when every side is a table, of the
    tables (``KTableKTableJoin``). A side without a row (outer joins) is skipped (``greatest``
    ignores nulls)."""
    streams = [alias for alias, source in aliases if source.kind is SourceKind.STREAM]
    sides = streams or [alias for alias, _ in aliases]
    columns = [quote(scope.internal(alias, ROWTIME)) for alias in sides]
    return columns[0] if len(columns) == 1 else f"greatest({', '.join(columns)})"


def compile_query(spark: SparkSession, query: Query, analyzed: Any, settings: ReadSettings) -> CompiledQuery:
    """Compile ``query`` as the analyzer resolved it (``analyzer.AnalyzedQuery``: output columns
    parallel to their expressions, WHERE, GROUP BY, HAVING, joins) into a streaming plan over our
    connector."""
    functions_json.register_udfs(spark)   # the JSON functions' Python UDFs (functions_json explains)
    zone_text.register_udfs(spark)        # zone letters of a named zone's timestamps (zone_text explains)
    aliases = source_aliases(analyzed)
    columns: tuple[Column, ...] = tuple(analyzed.columns)
    expressions = tuple(analyzed.expressions)
    if len(expressions) != len(columns):
        raise StatementError("the analyzed query's columns and expressions differ in number")
    chosen = {c.name: e for c, e in zip(columns, expressions, strict=True)}
    result_kind = analyzed.result_kind
    window = analyzed.window
    if aliases[1:]:
        frame, scope = join_frames(spark, analyzed, aliases, settings)
        synthetic = getattr(analyzed, "synthetic_key", None)
        if synthetic:
            # ksqlDB's synthetic join key (ROWKEY of a FULL OUTER join): whichever side is present.
            scope.overrides[synthetic] = join_key_sql(analyzed, scope)
    else:
        alias, source = aliases[0]
        frame = read_source(spark, source, settings)
        scope = Scope({alias: source})
    where = analyzed.where
    having = analyzed.having
    group_exprs = list(analyzed.group_by)
    aggregated = bool(group_exprs) or bool(getattr(analyzed, "aggregates", ())) or any(is_aggregate(e) for e in expressions)
    first_alias, first_source = aliases[0]
    # A stream's null-valued records reach this point only from a single source (joins drop them).
    null_rows = first_source.kind is SourceKind.STREAM and len(aliases) == 1
    if null_rows and (aggregated or where is not None or has_table_functions(expressions)):
        # ksqlDB's aggregations, WHERE and table functions drop them (compile/null_values.py).
        frame = without_null_values(frame, first_source)
        null_rows = False
    if aggregated:
        if first_source.kind is SourceKind.TABLE and len(aliases) == 1:
            # Updates retract the old row's contribution: compile/table_aggregation.py.
            aggregates = tuple(getattr(analyzed, "aggregates", ()))
            table_frame = aggregate_table(frame, scope, first_alias, columns, chosen, group_exprs, aggregates,
                                          where, having)
            return CompiledQuery(table_frame, columns, result_kind, None, "append", True)
        frame = frame.withColumn(RESULT_ROWTIME, F.expr(result_rowtime(aliases, scope)))
        emit_final = bool(getattr(analyzed, "emit_final", False))
        if window is not None and window.kind is WindowKind.SESSION and not emit_final and len(aliases) == 1:
            # ksqlDB's EMIT CHANGES of merging sessions: compile/session_aggregation.py.
            return _aggregate_sessions(frame, scope, first_alias, columns, chosen, group_exprs,
                                       tuple(getattr(analyzed, "aggregates", ())), where, having, window, result_kind)
        return _aggregate(spark, frame, scope, columns, chosen, group_exprs, where, having, window, result_kind,
                          scope.internal(first_alias, TS), emit_final)
    if has_table_functions(expressions):
        # EXPLODE / CUBE_EXPLODE spread each row (compile/table_functions.py), after WHERE
        if where is not None:
            frame = frame.where(F.expr(translate(where, scope)))
            where = None
        frame, chosen = spread_rows(frame, scope, columns, chosen)
    # A table-table join's key columns are its join key (a RIGHT/FULL join's row may lack the left side).
    join_key = JOIN_KEY if JOIN_KEY in frame.columns else None
    joined = bool(aliases[1:])
    selected = [(F.col(join_key) if join_key and c.is_key
                 else F.expr(key_column_sql(analyzed, chosen[c.name], scope) if joined and c.is_key
                             else translate(chosen[c.name], scope))).alias(c.name)
                for c in columns]
    if null_rows:
        # A null-valued record's new key (PARTITION BY) is computed from its key alone.
        source_keys = {scope.internal(first_alias, k.name) for k in first_source.key_columns}
        selected = [F.when(F.col(TOMBSTONE), F.lit(None)).otherwise(column).alias(c.name)
                    if c.is_key and not key_only(chosen[c.name], scope, source_keys) else column
                    for c, column in zip(columns, selected, strict=True)]
    extra: list[SparkColumn] = [F.expr(result_rowtime(aliases, scope)).alias(RESULT_ROWTIME)]
    if first_source.window is not None and len(aliases) == 1:
        # A windowed source keeps its window in the key: carry it to the output key.
        extra += [F.col(quote(WINDOWSTART)).alias(WSTART), F.col(quote(WINDOWEND)).alias(WEND)]
    keep = F.expr(translate(where, scope)) if where is not None else None
    raw_key = None
    source_key = len(aliases) == 1 and _keeps_source_key(analyzed, scope, first_alias, first_source)
    if source_key:
        extra.append(F.col(RAW_KEY))
        if first_source.key_format in _CANONICAL_KEY_FORMATS:
            raw_key = key_layout_of(layout_of(first_source))
    if result_kind is SourceKind.TABLE and first_source.kind is SourceKind.TABLE:
        # A table's changelog: a deleted row stays a delete; a row now failing WHERE deletes its key.
        delete = F.col(scope.internal(first_alias, TOMBSTONE))
        if keep is not None:
            delete = delete | ~F.coalesce(keep, F.lit(False))
        projected = frame.select(*selected, *extra, delete.alias(DELETE))
        return CompiledQuery(projected, columns, result_kind, first_source.window if len(aliases) == 1 else None,
                             "append", True, raw_key, source_key)
    if null_rows:
        # Written with a null value (``records``), not shown by push queries (``rows``).
        projected = frame.select(*selected, *extra, F.col(TOMBSTONE).alias(DELETE))
        return CompiledQuery(projected, columns, result_kind, first_source.window, "append", True, raw_key, source_key)
    if keep is not None:
        frame = frame.where(keep)
    projected = frame.select(*selected, *extra)
    return CompiledQuery(projected, columns, result_kind, first_source.window if len(aliases) == 1 else None,
                         "append", False, raw_key, source_key)


def _window_sql(window: WindowSpec, ts: str) -> str:
    if window.kind is WindowKind.TUMBLING:
        return f"window({quote(ts)}, '{window.size_ms} milliseconds')"
    if window.kind is WindowKind.HOPPING:
        advance = window.advance_ms or window.size_ms
        return f"window({quote(ts)}, '{window.size_ms} milliseconds', '{advance} milliseconds')"
    return f"session_window({quote(ts)}, '{window.size_ms} milliseconds')"


def _aggregate_sessions(frame: DataFrame, scope: Scope, alias: str, columns: Sequence[Column],
                        chosen: Mapping[str, exp.Expression], group_exprs: Sequence[exp.Expression],
                        aggregates: Sequence[exp.Expression], where: exp.Expression | None,
                        having: exp.Expression | None, window: WindowSpec, result_kind: SourceKind) -> CompiledQuery:
    """A session-window aggregation of one stream with EMIT CHANGES: every record writes its
    session's result, after tombstones of the sessions it merged (compile/session_aggregation.py).
    The frame must carry RESULT_ROWTIME (the records' event time)."""
    if where is not None:
        frame = frame.where(F.expr(translate(where, scope)))
    group_sql = [translate(g, scope) for g in group_exprs]
    if group_sql:
        # as _aggregate: a row whose GROUP BY expression is NULL is skipped
        frame = frame.where(F.expr(" AND ".join(f"({g}) IS NOT NULL" for g in group_sql)))
    grace_ms = window.grace_ms if window.grace_ms is not None else default_grace_ms(window.size_ms)
    sessions = aggregate_sessions(frame, scope, alias, columns, chosen, group_exprs, aggregates, having,
                                  window.size_ms, grace_ms, RESULT_ROWTIME)
    keys = [F.col(quote(c.name)) for c in columns if c.is_key]
    if having is not None and keys:
        # ksqlDB's HAVING filter (compile/having_gate.py) over the session table: a tombstone (a
        # merged session's, or a result failing HAVING) is written only where the session's last
        # written result passed. A session's key includes both window bounds.
        sessions = gate_having(sessions, [*keys, F.col(WSTART), F.col(WEND)])
    return CompiledQuery(sessions, tuple(columns), result_kind, window, "append", True)


def default_grace_ms(size_ms: int, emit_final: bool = False) -> int:
    """ksqlDB's grace period of a window without GRACE PERIOD: 0 with EMIT FINAL (its analyzer
    rewrites the window so, RewrittenAnalysis), else 24 hours less the window's size (a session
    window's gap), at least 0 (StreamAggregateBuilder.defaultGrace): a window is kept 24 hours
    after its start."""
    return 0 if emit_final else max(DEFAULT_GRACE_MS - size_ms, 0)


def _aggregate(spark: SparkSession, frame: DataFrame, scope: Scope, columns: Sequence[Column],
               chosen: Mapping[str, exp.Expression], group_exprs: Sequence[exp.Expression],
               where: exp.Expression | None, having: exp.Expression | None, window: WindowSpec | None,
               result_kind: SourceKind, ts: str, emit_final: bool = False) -> CompiledQuery:
    """A stream aggregation. Each result's ROWTIME is the largest ROWTIME of its rows (per window
    when windowed), as Kafka Streams' KStream(Window)Aggregate stamps it; the frame must carry
    RESULT_ROWTIME."""
    if where is not None:
        frame = frame.where(F.expr(translate(where, scope)))
    group_sql = [translate(g, scope) for g in group_exprs]
    if group_sql:
        # ksqlDB logs and skips a row whose GROUP BY expression (any of several) is NULL: a
        # table's key cannot be NULL. Spark would make NULL a group of its own.
        frame = frame.where(F.expr(" AND ".join(f"({g}) IS NOT NULL" for g in group_sql)))
    inner = frame
    agg_scope = scope
    extra_sql = [f"max({quote(RESULT_ROWTIME)}) AS {quote(RESULT_ROWTIME)}"]
    output_mode = "update"
    if window is not None:
        grace_ms = window.grace_ms if window.grace_ms is not None else default_grace_ms(window.size_ms, emit_final)
        # Spark's watermark: rows older than (max event time seen - grace) are dropped and their
        # windows' state is freed (ksqlDB: grace period per partition's stream time).
        inner = inner.withWatermark(ts, f"{grace_ms} milliseconds")
        inner = inner.withColumn(WINDOW, F.expr(_window_sql(window, ts)))
        if window.kind is not WindowKind.SESSION:
            # Kafka Streams (TimeWindows.windowsFor) never opens a time window that starts before
            # the epoch; Spark opens hopping windows from time - SIZE (and tumbling ones for a
            # negative TIMESTAMP column, a record Kafka Streams skips). Dropped before grouping,
            # so no state is kept for them.
            inner = inner.where(F.expr(f"unix_millis({quote(WINDOW)}.start) >= 0"))
        group_sql.append(quote(WINDOW))
        agg_scope = Scope(scope.sources, scope.qualified, window_column=WINDOW, overrides=scope.overrides)
        extra_sql.append(f"unix_millis({quote(WINDOW)}.start) AS {quote(WSTART)}")
        if window.kind is WindowKind.SESSION:
            # ksqlDB's session WINDOWEND is the last event's time; Spark's session end is that plus
            # the gap (exclusive).
            extra_sql.append(f"unix_millis({quote(WINDOW)}.end) - {window.size_ms} AS {quote(WEND)}")
            agg_scope.overrides = {**scope.overrides,
                                   WINDOWEND: f"unix_millis({quote(WINDOW)}.end) - {window.size_ms}"}
            # Spark has no update mode for session windows: a session is written once, when the
            # watermark passes its end (as ksqlDB's EMIT FINAL).
            output_mode = "append"
        else:
            extra_sql.append(f"unix_millis({quote(WINDOW)}.end) AS {quote(WEND)}")
            if emit_final:
                # EMIT FINAL: Spark's append mode writes each window once, when the watermark
                # (largest ROWTIME seen - grace) reaches its end, i.e. when stream time passes
                # window end + grace, which is when Kafka Streams' emit-on-window-close writes it.
                output_mode = "append"
    view = f"oncestream_sql_{next(_view_ids)}"
    inner.createOrReplaceTempView(view)
    select_sql = [f"{translate(chosen[c.name], agg_scope)} AS {quote(c.name)}" for c in columns]
    has_delete = having is not None
    if having is not None:
        select_sql.append(f"NOT coalesce({translate(having, agg_scope)}, false) AS {quote(DELETE)}")
    sql = f"SELECT {', '.join(select_sql + extra_sql)} FROM {view}"
    if group_sql:
        sql += f" GROUP BY {', '.join(group_sql)}"
    try:
        aggregated = spark.sql(sql)
    finally:
        # spark.sql analyzed the view's plan into its own, so the name is no longer needed; kept, a
        # node that starts many aggregations would hold every one's plan in its session catalog
        # (the suspected cause of a whole-suite conformance run's driver running out of heap).
        spark.catalog.dropTempView(view)
    keys = [F.col(quote(c.name)) for c in columns if c.is_key]
    if having is not None and output_mode == "update" and keys:
        # A failing result is a tombstone only where the key's last written result passed
        # (ksqlDB's HAVING filter): compile/having_gate.py. (A push query without its key columns
        # drops tombstones anyway.)
        aggregated = gate_having(aggregated, keys + ([F.col(WSTART)] if window is not None else []))
    return CompiledQuery(aggregated, tuple(columns), result_kind, window, output_mode, has_delete)
