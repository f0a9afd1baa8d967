"""Joins: stream-stream (``WITHIN``) and stream-table with Spark's state store.

Stream-stream (INNER, LEFT, RIGHT, FULL OUTER): both sides keyed by the join key and unioned into
one ``transformWithState`` operator in event time that does what Kafka Streams'
``KStreamKStreamJoin`` does for ksqlDB (``stream_join_steps``, ``_stream_stream``).

Stream-table: Spark cannot join a stream with a changing table (it would join each stream row
with every version of the table). Both sides are instead keyed by the join key and unioned into
one ``applyInPandasWithState`` operator whose state holds the table's latest row for the key;
each key's rows of a micro-batch are processed in (ROWTIME, table before stream, partition,
offset) order, a table row replacing (or, as a tombstone, deleting) the state and a stream row
being emitted joined with the state (INNER: only when there is one; LEFT: always). A table update
that arrives in a later micro-batch than a stream row it precedes in time is not seen by that
row (ksqlDB has the same race, bounded there by ``max.task.idle.ms``).

Table-table (on the primary keys): ``table_joins``; on a foreign key of the left table: ``fk_joins``.

N-way joins (ksqlDB's ``FROM a JOIN b ON ... JOIN c ON ...``) are planned left-deep as ksqlDB
plans them: each join joins the result so far with the next source. Tables only (ksqlDB refuses a
stream after a table) are one n-way operator on their common key (``table_joins``). A stream's
joins are chained Spark operators: a stream-table step keys the result so far by its left key; a
stream-stream step joins it with the next stream within WITHIN of the result's ROWTIME (the larger
of a stream-stream join's two rows', the stream row's of a stream-table join, as in Kafka
Streams). A join whose left key is a key of the result so far (ksqlDB's key
synonyms, one of which may be null after an outer join) joins on their coalesce, which is that
result's key. Each operator's state is in Spark's checkpointed state store, restored with the
query's checkpoint; the exactly-once sink makes the output of a replayed batch appear once.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.streaming.state import GroupStateTimeout

from oncestream.sql.engine.compile.expressions import Scope, quote, translate
from oncestream.sql.engine.compile.fk_joins import fk_table_join
from oncestream.sql.engine.compile.join_state import (
    STREAM_STREAM_OUT,
    STREAM_TABLE_OUT,
    StreamStreamProcessor,
    StreamTableProcessor,
)
from oncestream.sql.engine.compile.sources import TOMBSTONE, ReadSettings, read_source, without_null_values
from oncestream.sql.engine.compile.stream_join_steps import JoinWindow
from oncestream.sql.engine.compile.table_join_steps import stream_table_rows
from oncestream.sql.engine.compile.table_joins import table_table
from oncestream.sql.errors import StatementError
from oncestream.sql.language.analyzer_expr import same_expression
from oncestream.sql.language.analyzer_joins import JoinType, key_synonyms
from oncestream.sql.language.catalog import ROWOFFSET, ROWPARTITION, ROWTIME, SourceInfo
from oncestream.sql.language.sql_ast import JoinSpec, SourceKind

LATENESS_MS = 3650 * 24 * 60 * 60 * 1000    # how late a row of a stream-stream join may be (10 years)


@dataclass
class _Joined:
    """The sources joined so far (left-deep, as ksqlDB plans n-way joins): the frame (columns
    ``<ALIAS>__<COLUMN>``), its kind, Spark SQL of its ROWTIME (BIGINT ms; a stream-stream join's
    is the larger of its two rows', Kafka Streams' rule), partition and offset (the order of a
    key's rows in the joins' operators)."""

    frame: DataFrame
    kind: SourceKind
    rowtime: str
    partition: str
    offset: str
    watermarked: bool = False               # a watermark is defined upstream (Spark allows one per branch)
    pandas_state: bool = False              # an applyInPandasWithState upstream (Spark allows one per query)


def _first(spark: SparkSession, alias: str, source: SourceInfo, settings: ReadSettings) -> _Joined:
    # Kafka Streams' joins skip a stream record whose value is null (compile/null_values.py).
    frame = without_null_values(read_source(spark, source, settings, prefix=alias), source, alias)
    return _Joined(frame, source.kind, quote(f"{alias}__{ROWTIME}"), quote(f"{alias}__{ROWPARTITION}"),
                   quote(f"{alias}__{ROWOFFSET}"))


def left_key_sql(joined_keys: Sequence[Any], left_key: Any, scope: Scope) -> str:
    """Spark SQL of a join's left key: when it is one of the joined sources' key synonyms, their
    coalesce (one may be null after an outer join, the key is not), else the expression."""
    if any(same_expression(left_key, k) for k in joined_keys):
        return f"coalesce({', '.join(translate(k, scope) for k in joined_keys)})"
    return translate(left_key, scope)


def key_column_sql(analyzed: Any, expression: Any, scope: Scope) -> str:
    """Spark SQL of a key column of a join's result: a key synonym (``SELECT t.id`` of
    ``... RIGHT JOIN tt ON t.id = tt.id``) is the record's join key, as Kafka Streams keys the
    join's output, present when that source's side is not (ksqlDB writes a RIGHT join's unmatched
    right row under its key); another expression as it is."""
    return left_key_sql(key_synonyms(list(analyzed.joins)), expression, scope)


def join_key_sql(analyzed: Any, scope: Scope) -> str:
    """Spark SQL of the key of a query's join result when it is synthetic (ksqlDB's ROWKEY: a FULL
    OUTER join's, whichever side is present, or a join on expressions that are not columns)."""
    joins = list(analyzed.joins)
    last = joins[-1]
    return f"coalesce({left_key_sql(key_synonyms(joins[:-1]), last.left_key, scope)}, {translate(last.right_key, scope)})"


def join_frames(spark: SparkSession, analyzed: Any, aliases: Sequence[tuple[str, SourceInfo]],
                settings: ReadSettings) -> tuple[DataFrame, Scope]:
    """The joined frame of the query's sources (columns ``<ALIAS>__<COLUMN>``) and its scope
    (``analyzed.joins``: ``analyzer.AnalyzedJoin``, one per source after the first, joined left to
    right). Tables joined to tables (all on one key, the analyzer checked) are one n-way operator
    (``table_joins``); a stream is joined step by step, each step a stream-stream or a
    stream-table join of the result so far with the next source."""
    joins = list(analyzed.joins)
    if len(aliases) != len(joins) + 1 or len(joins) < 1:
        raise StatementError("the analyzed query's joins and sources differ in number")
    scope = Scope(dict(aliases), qualified=True)
    first_alias, first = aliases[0]
    if first.kind is SourceKind.TABLE:
        if any(source.kind is not SourceKind.TABLE for _a, source in aliases[1:]):
            kinds = " JOIN ".join(source.kind.value for _a, source in aliases)
            raise StatementError("Invalid join order: table-stream joins are not supported; only stream-table joins. "
                                 f"Got {kinds}.")
        if any(spec.join_type == JoinType.FOREIGN_KEY for spec in joins):
            if len(joins) > 1:
                raise StatementError("N-way joins with a foreign-key join are not supported by oncestream's Spark runtime.")
            return fk_table_join(spark, analyzed, scope, aliases[0], aliases[1], settings), scope
        return table_table(spark, analyzed, scope, list(aliases), settings), scope
    if tuple(getattr(analyzed, "group_by", ()) or ()) and any(source.kind is SourceKind.STREAM for _a, source in aliases[1:]):
        # an aggregation runs in update mode, Spark's stream-stream join in append mode only
        raise StatementError("Aggregating the result of a stream-stream join is not supported by oncestream's Spark "
                             "runtime.")
    joined = _first(spark, first_alias, first, settings)
    for i, (spec, (right_alias, right)) in enumerate(zip(joins, aliases[1:], strict=True)):
        left_sql = left_key_sql(key_synonyms(joins[:i]), spec.left_key, scope)
        right_sql = translate(spec.right_key, scope)
        if right.kind is SourceKind.STREAM:
            joined = _stream_stream(spark, spec, scope, joined, (right_alias, right), left_sql, right_sql, settings)
        else:
            if spec.kind.upper() not in ("INNER", "LEFT"):
                raise StatementError(f"{spec.kind} OUTER JOIN between a stream and a table is not supported. "
                                     "Only INNER and LEFT joins are.")
            joined = _stream_table(spark, joined, (right_alias, right), left_sql, right_sql,
                                   spec.kind.upper() == "LEFT", settings)
    return joined.frame, scope


def _stream_stream(spark: SparkSession, spec: Any, scope: Scope, left: _Joined, right: tuple[str, SourceInfo],
                   left_sql: str, right_sql: str, settings: ReadSettings) -> _Joined:
    """A stream-stream join (INNER, LEFT, RIGHT, FULL OUTER) as Kafka Streams writes it
    (``stream_join_steps``): both sides keyed by the join key and unioned into one
    ``transformWithState`` operator in event time, whose watermark (the largest ROWTIME of earlier
    micro-batches, of both sides) is the stream time that closes windows. Spark's own stream-stream
    join is not used: its watermark is the smaller of its two sides', so it joins rows ksqlDB drops
    as out of the grace period while one side lags, and writes a key's rows of one micro-batch in
    no particular order."""
    if spec.within_before_ms is None:
        raise StatementError("Stream-Stream joins must have a WITHIN clause specified. None was provided.")
    before = spec.within_before_ms
    after = spec.within_after_ms if spec.within_after_ms is not None else before
    kinds = {"inner": "INNER", "left_outer": "LEFT", "right_outer": "RIGHT", "full_outer": "FULL"}
    window = JoinWindow(kinds[join_kind(spec)], before, after, spec.within_grace_ms)
    right_alias, right_source = right
    lf = left.frame
    # Kafka Streams' joins skip a stream record whose value is null (compile/null_values.py)
    rf = without_null_values(read_source(spark, right_source, settings, prefix=right_alias), right_source, right_alias)
    right_order = (quote(f"{right_alias}__{ROWTIME}"), quote(f"{right_alias}__{ROWPARTITION}"),
                   quote(f"{right_alias}__{ROWOFFSET}"))
    # Spark drops a row older than the watermark before an event-time operator sees it; Kafka
    # Streams still joins (and, outer, writes) a late row. The event time is the ROWTIME shifted
    # by LATENESS_MS and the watermark's delay is as long: the watermark is still the largest
    # ROWTIME (stream time), and only a row later than LATENESS_MS is dropped.
    event_time = F.timestamp_millis(F.col("__ORD_TS") + F.lit(LATENESS_MS))
    delay = f"{LATENESS_MS} milliseconds"
    keyed_left = _keyed(lf, left_sql, 0, (left.rowtime, left.partition, left.offset), None).withColumn("__ET", event_time)
    keyed_right = _keyed(rf, right_sql, 1, right_order, None).withColumn("__ET", event_time)
    if not left.watermarked:
        # one watermark over both sides: the largest ROWTIME of either, Kafka Streams' stream time
        union = keyed_left.unionByName(keyed_right).withWatermark("__ET", delay)
    else:
        # the result of an earlier stream-stream join carries its watermark (Spark allows one
        # definition per branch): the right side gets its own, and the query's is the smaller
        union = keyed_right.withWatermark("__ET", delay).unionByName(keyed_left)
    joined = union.groupBy("__JK").transformWithState(StreamStreamProcessor(window), STREAM_STREAM_OUT, "Append",
                                                      "EventTime")
    frame = joined.select(F.from_json("__L", lf.schema).alias("__l"), F.from_json("__R", rf.schema).alias("__r")) \
        .select("__l.*", "__r.*")
    right_rowtime = quote(f"{right_alias}__{ROWTIME}")
    # the result's ROWTIME is the larger of the two rows' (an unmatched row's own), Kafka Streams' rule
    return _Joined(frame, SourceKind.STREAM, f"greatest({left.rowtime}, {right_rowtime})",
                   f"coalesce({left.partition}, {quote(f'{right_alias}__{ROWPARTITION}')})",
                   f"coalesce({left.offset}, {quote(f'{right_alias}__{ROWOFFSET}')})", watermarked=True,
                   pandas_state=left.pandas_state)


def _keyed(frame: DataFrame, key_sql: str, side: int, order: tuple[str, str, str], deleted: Any) -> DataFrame:
    """``frame``'s rows as JSON keyed by ``key_sql``, with their order (ROWTIME, partition,
    offset: Spark SQL)."""
    columns = [F.col(quote(c)) for c in frame.columns]
    row = F.to_json(F.struct(*columns))
    if deleted is not None:
        row = F.when(deleted, F.lit(None).cast("string")).otherwise(row)
    rowtime, partition, offset = order
    return frame.select(F.expr(key_sql).cast("string").alias("__JK"), F.lit(side).alias("__SIDE"),
                        F.expr(rowtime).alias("__ORD_TS"), F.expr(partition).alias("__ORD_P"),
                        F.expr(offset).alias("__ORD_O"), row.alias("__ROW"))


_OUT_SCHEMA = T.StructType([T.StructField("__S", T.StringType()), T.StructField("__T", T.StringType())])
_STATE_SCHEMA = T.StructType([T.StructField("row", T.StringType())])


def stream_table_step(rows: Any, current: str | None, left: bool) -> tuple[list[str], list[str | None], str | None]:
    """One key's micro-batch of the stream-table join: ``rows`` (a pandas frame with __SIDE,
    __ORD_TS, __ORD_P, __ORD_O, __ROW) against the table's ``current`` row
    (``table_join_steps.stream_table_rows``). Returns the joined stream rows, their table rows,
    and the table row to keep."""
    batch = [(int(side), int(ts), int(p), int(o), row if isinstance(row, str) else None)
             for side, ts, p, o, row in zip(rows["__SIDE"], rows["__ORD_TS"], rows["__ORD_P"], rows["__ORD_O"],
                                            rows["__ROW"], strict=True)]
    joined, current = stream_table_rows(batch, current, left)
    return [s for s, _t in joined], [t for _s, t in joined], current


def _join_function(left: bool) -> Any:
    def join_key_rows(key: Any, frames: Iterator[Any], state: Any) -> Iterator[Any]:
        import pandas as pd

        rows = pd.concat(list(frames), ignore_index=True)
        current = state.get[0] if state.exists else None
        out_s, out_t, current = stream_table_step(rows, current, left)
        if current is None:
            if state.exists:
                state.remove()
        else:
            state.update((current,))
        yield pd.DataFrame({"__S": pd.Series(out_s, dtype=object), "__T": pd.Series(out_t, dtype=object)})

    return join_key_rows


def _stream_table(spark: SparkSession, stream: _Joined, table: tuple[str, SourceInfo], stream_key: str,
                  table_key: str, left: bool, settings: ReadSettings) -> _Joined:
    """``stream_key``/``table_key``: Spark SQL of the two sides of the ON equality (the analyzer
    checked the table side is the table's primary key)."""
    table_alias, table_source = table
    sf = stream.frame
    tf = read_source(spark, table_source, settings, prefix=table_alias)
    order = (stream.rowtime, stream.partition, stream.offset)
    table_order = (quote(f"{table_alias}__{ROWTIME}"), quote(f"{table_alias}__{ROWPARTITION}"),
                   quote(f"{table_alias}__{ROWOFFSET}"))
    union = _keyed(sf, stream_key, 1, order, None).unionByName(
        _keyed(tf, table_key, 0, table_order, F.col(quote(f"{table_alias}__{TOMBSTONE}"))))
    if not stream.pandas_state:
        # the first stream-table join of a query (the operator two-way joins have always used)
        joined = union.groupBy("__JK").applyInPandasWithState(
            _join_function(left), _OUT_SCHEMA, _STATE_SCHEMA, "append", GroupStateTimeout.NoTimeout)
    else:
        # Spark allows one applyInPandasWithState per query: the next ones are transformWithState
        joined = union.groupBy("__JK").transformWithState(StreamTableProcessor(left), STREAM_TABLE_OUT, "Append", "None")
    s_schema, t_schema = sf.schema, tf.schema
    frame = joined.select(F.from_json("__S", s_schema).alias("__s"), F.from_json("__T", t_schema).alias("__t")) \
        .select("__s.*", "__t.*")
    # the result's ROWTIME is the stream row's (Kafka Streams' stream-table join)
    return _Joined(frame, SourceKind.STREAM, stream.rowtime, stream.partition, stream.offset,
                   watermarked=stream.watermarked, pandas_state=True)


def join_kind(spec: JoinSpec) -> str:
    """Spark's join type for a ksqlDB join kind."""
    kinds = {"INNER": "inner", "LEFT": "left_outer", "RIGHT": "right_outer", "FULL": "full_outer", "OUTER": "full_outer"}
    kind = kinds.get(spec.kind.upper())
    if kind is None:
        raise StatementError(f"join type {spec.kind} is not supported")
    return kind
