"""Joins: stream-stream (``WITHIN``) with Spark's stream-stream join, stream-table with Spark's
state store.

Stream-stream: both sides carry a watermark (the grace period, default 24 h) and the condition
adds ksqlDB's time bounds, ``L.ROWTIME - before <= R.ROWTIME <= L.ROWTIME + after``; Spark
keeps each side's rows in its state store until the watermark passes the bound. An outer join's
unmatched row is emitted when the watermark closes its window (ksqlDB 0.25+ behaves the same
with a grace period).

Stream-table: Spark cannot join a stream with a changing table (it would join each stream row
with every version of the table). Both sides are instead keyed by the join key and unioned into
one ``applyInPandasWithState`` operator whose state holds the table's latest row for the key;
each key's rows of a micro-batch are processed in (ROWTIME, table before stream, partition,
offset) order, a table row replacing (or, as a tombstone, deleting) the state and a stream row
being emitted joined with the state (INNER: only when there is one; LEFT: always). A table update
that arrives in a later micro-batch than a stream row it precedes in time is not seen by that
row (ksqlDB has the same race, bounded there by ``max.task.idle.ms``).

Table-table (on the primary keys): ``table_joins``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.streaming.state import GroupStateTimeout

from oncestream.sql.engine.compile.expressions import Scope, quote, translate
from oncestream.sql.engine.compile.sources import TOMBSTONE, TS, ReadSettings, read_source
from oncestream.sql.engine.compile.table_joins import table_table
from oncestream.sql.errors import StatementError
from oncestream.sql.language.catalog import ROWOFFSET, ROWPARTITION, ROWTIME, SourceInfo
from oncestream.sql.language.sql_ast import JoinSpec, SourceKind

DEFAULT_GRACE_MS = 24 * 60 * 60 * 1000


def join_frames(spark: SparkSession, analyzed: Any, aliases: Sequence[tuple[str, SourceInfo]],
                settings: ReadSettings) -> tuple[DataFrame, Scope]:
    """The joined frame of the query's sources (columns ``<ALIAS>__<COLUMN>``) and its scope
    (``analyzed.joins``: ``analyzer.AnalyzedJoin``)."""
    if len(aliases) != 2 or len(analyzed.joins) != 1:
        raise StatementError("oncestream's Spark runtime joins two sources per query")
    scope = Scope(dict(aliases), qualified=True)
    spec = analyzed.joins[0]
    (left_alias, left), (right_alias, right) = aliases
    kinds = (left.kind, right.kind)
    if kinds == (SourceKind.STREAM, SourceKind.STREAM):
        return _stream_stream(spark, spec, scope, aliases, settings), scope
    if kinds == (SourceKind.STREAM, SourceKind.TABLE):
        if spec.kind.upper() not in ("INNER", "LEFT"):
            raise StatementError(f"{spec.kind} OUTER JOIN between a stream and a table is not supported. "
                                 "Only INNER and LEFT joins are.")
        return _stream_table(spark, scope, (left_alias, left), (right_alias, right),
                             translate(spec.left_key, scope), translate(spec.right_key, scope),
                             spec.kind.upper() == "LEFT", settings), scope
    if kinds == (SourceKind.TABLE, SourceKind.STREAM):
        raise StatementError("Invalid join order: table-stream joins are not supported; only stream-table joins. "
                             "Got TABLE JOIN STREAM.")
    return table_table(spark, analyzed, scope, (left_alias, left), (right_alias, right), settings), scope


def _stream_stream(spark: SparkSession, spec: Any, scope: Scope, aliases: Sequence[tuple[str, SourceInfo]],
                   settings: ReadSettings) -> DataFrame:
    (left_alias, left), (right_alias, right) = aliases
    if spec.within_before_ms is None:
        raise StatementError("Stream-Stream joins must have a WITHIN clause specified. None was provided.")
    before = spec.within_before_ms
    after = spec.within_after_ms if spec.within_after_ms is not None else before
    grace = spec.within_grace_ms if spec.within_grace_ms is not None else DEFAULT_GRACE_MS
    left_ts, right_ts = f"{left_alias}__{TS}", f"{right_alias}__{TS}"
    lf = read_source(spark, left, settings, prefix=left_alias).withWatermark(left_ts, f"{grace} milliseconds")
    rf = read_source(spark, right, settings, prefix=right_alias).withWatermark(right_ts, f"{grace} milliseconds")
    condition = (f"({translate(spec.on, scope)}) AND {quote(right_ts)} >= {quote(left_ts)} - INTERVAL {before} MILLISECONDS"
                 f" AND {quote(right_ts)} <= {quote(left_ts)} + INTERVAL {after} MILLISECONDS")
    return lf.join(rf, F.expr(condition), join_kind(spec))


def _keyed(frame: DataFrame, alias: str, key_sql: str, side: int, deleted: Any) -> DataFrame:
    columns = [F.col(quote(c)) for c in frame.columns]
    row = F.to_json(F.struct(*columns))
    if deleted is not None:
        row = F.when(deleted, F.lit(None).cast("string")).otherwise(row)
    return frame.select(F.expr(key_sql).cast("string").alias("__JK"), F.lit(side).alias("__SIDE"),
                        F.col(quote(f"{alias}__{ROWTIME}")).alias("__ORD_TS"),
                        F.col(quote(f"{alias}__{ROWPARTITION}")).alias("__ORD_P"),
                        F.col(quote(f"{alias}__{ROWOFFSET}")).alias("__ORD_O"), row.alias("__ROW"))


_OUT_SCHEMA = T.StructType([T.StructField("__S", T.StringType()), T.StructField("__T", T.StringType())])
_STATE_SCHEMA = T.StructType([T.StructField("row", T.StringType())])


def stream_table_step(rows: Any, current: str | None, left: bool) -> tuple[list[str], list[str | None], str | None]:
    """One key's micro-batch of the stream-table join: ``rows`` (a pandas frame with __SIDE,
    __ORD_TS, __ORD_P, __ORD_O, __ROW) against the table's ``current`` row. Returns the joined
    stream rows, their table rows, and the table row to keep."""
    ordered = rows.sort_values(["__ORD_TS", "__SIDE", "__ORD_P", "__ORD_O"], kind="stable")
    out_s: list[str] = []
    out_t: list[str | None] = []
    for side, row in zip(ordered["__SIDE"], ordered["__ROW"], strict=True):
        text = row if isinstance(row, str) else None
        if side == 0:
            current = text
        elif text is not None and (current is not None or left):
            out_s.append(text)
            out_t.append(current)
    return out_s, out_t, current


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


def _stream_table(spark: SparkSession, scope: Scope, stream: tuple[str, SourceInfo], table: tuple[str, SourceInfo],
                  stream_key: str, table_key: str, left: bool, settings: ReadSettings) -> DataFrame:
    """``stream_key``/``table_key``: Spark SQL of the two sides of the ON equality (the analyzer
    checked the table side is the table's primary key)."""
    stream_alias, stream_source = stream
    table_alias, table_source = table
    sf = read_source(spark, stream_source, settings, prefix=stream_alias)
    tf = read_source(spark, table_source, settings, prefix=table_alias)
    union = _keyed(sf, stream_alias, stream_key, 1, None).unionByName(
        _keyed(tf, table_alias, table_key, 0, F.col(quote(f"{table_alias}__{TOMBSTONE}"))))
    joined = union.groupBy("__JK").applyInPandasWithState(
        _join_function(left), _OUT_SCHEMA, _STATE_SCHEMA, "append", GroupStateTimeout.NoTimeout)
    s_schema, t_schema = sf.schema, tf.schema
    return joined.select(F.from_json("__S", s_schema).alias("__s"), F.from_json("__T", t_schema).alias("__t")) \
        .select("__s.*", "__t.*")


def join_kind(spec: JoinSpec) -> str:
    """Spark's join type for a ksqlDB join kind."""
    kinds = {"INNER": "inner", "LEFT": "left_outer", "RIGHT": "right_outer", "FULL": "full_outer", "OUTER": "full_outer"}
    kind = kinds.get(spec.kind.upper())
    if kind is None:
        raise StatementError(f"join type {spec.kind} is not supported")
    return kind
