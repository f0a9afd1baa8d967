"""Table-table joins on the primary key (INNER, LEFT, RIGHT, FULL OUTER) with Kafka Streams'
KTable-KTable join semantics, as ksqlDB runs them.

Both tables are keyed by the join key (the primary key of each) and unioned into one
``applyInPandasWithState`` operator whose state per key is the latest row of each side (JSON; a
side's tombstone clears it). Each change of either side is processed in Kafka Streams' order (per
input partition in offset order, the partition whose next record has the smallest ROWTIME first,
the left table first on a tie) and, by ``join_change``, writes the joined row for that key, a
tombstone, or nothing:

- INNER: nothing while the other side is absent; else the joined row, or a tombstone when this
  side was deleted.
- LEFT / RIGHT (the preserved side keeps its row): a change of the preserved side writes its row
  joined with the other side or nulls, a tombstone when it was deleted (nothing when it was absent
  already and the other side is too); a change of the other side writes the preserved row joined
  with it (nulls once deleted) while the preserved row exists, nothing otherwise.
- FULL OUTER: the joined row of whichever sides exist; a tombstone once both are gone.

Every change is written (no micro-batch coalescing: the output is ksqlDB's with its record cache
off). The output key is the join key (``JOIN_KEY``: a RIGHT or FULL join's key when the left row
is absent is the right row's key, as in ksqlDB).

Each write also carries the key's join result before the change (Kafka Streams' old value): with
a WHERE clause a row failing it (or a tombstone) is written as a tombstone only when the old result
passed WHERE, and dropped otherwise, as Kafka Streams' table filter does with old values (ksqlDB's
"table table join with where clause"). Spark allows one ``applyInPandasWithState`` per query, so
WHERE runs as plain projections on the old and new rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.streaming.state import GroupStateTimeout

from oncestream.sql.engine.compile.expressions import Scope, quote, translate
from oncestream.sql.engine.compile.sources import TOMBSTONE, ReadSettings, read_source
from oncestream.sql.engine.compile.table_join_steps import KINDS, LEFT, RIGHT, processing_order, table_table_step
from oncestream.sql.errors import StatementError
from oncestream.sql.language.catalog import ROWOFFSET, ROWPARTITION, ROWTIME, SourceInfo

JOIN_KEY = "__JOINKEY"
_JOIN_OUT = T.StructType([T.StructField("__L", T.StringType()), T.StructField("__R", T.StringType()),
                          T.StructField("__DEL", T.BooleanType()), T.StructField("__OL", T.StringType()),
                          T.StructField("__OR", T.StringType()), T.StructField("__OLD", T.BooleanType())])
_JOIN_STATE = T.StructType([T.StructField("left", T.StringType()), T.StructField("right", T.StringType())])


def _join_function(kind: str) -> Any:
    def join_key_rows(key: Any, frames: Iterator[Any], state: Any) -> Iterator[Any]:
        import pandas as pd

        rows = pd.concat(list(frames), ignore_index=True)
        left, right = state.get if state.exists else (None, None)
        order = processing_order(rows["__SIDE"].tolist(), rows["__ORD_TS"].tolist(), rows["__ORD_P"].tolist(),
                                 rows["__ORD_O"].tolist())
        out, left, right = table_table_step(kind, rows["__SIDE"].tolist(), rows["__ROW"].tolist(), order, left, right)
        if left is None and right is None:
            if state.exists:
                state.remove()
        else:
            state.update((left, right))
        # the writes in order: the sink writes a partition's rows in order, so a key's records
        # keep it in the output topic
        yield pd.DataFrame({"__L": pd.Series([o.left for o in out], dtype=object),
                            "__R": pd.Series([o.right for o in out], dtype=object),
                            "__DEL": pd.Series([o.delete for o in out], dtype=bool),
                            "__OL": pd.Series([o.old_left for o in out], dtype=object),
                            "__OR": pd.Series([o.old_right for o in out], dtype=object),
                            "__OLD": pd.Series([o.had_old for o in out], dtype=bool)})

    return join_key_rows


def _keyed(frame: DataFrame, alias: str, key_sql: str, side: int) -> DataFrame:
    row = F.to_json(F.struct(*[F.col(quote(c)) for c in frame.columns]))
    row = F.when(F.col(quote(f"{alias}__{TOMBSTONE}")), F.lit(None).cast("string")).otherwise(row)
    keyed = frame.select(F.expr(key_sql).cast("string").alias("__JK"), F.lit(side).alias("__SIDE"),
                         F.col(quote(f"{alias}__{ROWTIME}")).alias("__ORD_TS"),
                         F.col(quote(f"{alias}__{ROWPARTITION}")).alias("__ORD_P"),
                         F.col(quote(f"{alias}__{ROWOFFSET}")).alias("__ORD_O"), row.alias("__ROW"))
    # Kafka Streams ignores a table record whose key is null: it can join nothing.
    return keyed.where(F.col("__JK").isNotNull())


def table_table(spark: SparkSession, analyzed: Any, scope: Scope, left: tuple[str, SourceInfo],
                right: tuple[str, SourceInfo], settings: ReadSettings) -> DataFrame:
    """The joined frame of two tables on their primary keys (``analyzed.joins[0]``; the analyzer
    checked both sides of ON are the key columns): both sides' columns, ``<left>__TOMBSTONE``
    true for a tombstone of the output key, and ``JOIN_KEY``."""
    spec = analyzed.joins[0]
    kind = {"OUTER": "FULL"}.get(spec.kind.upper(), spec.kind.upper())
    if kind not in KINDS:
        raise StatementError(f"join type {spec.kind} is not supported")
    if tuple(getattr(analyzed, "group_by", ()) or ()):
        raise StatementError("Aggregating the result of a table-table join is not supported by oncestream's Spark "
                             "runtime.")
    left_alias, left_source = left
    right_alias, right_source = right
    lf = read_source(spark, left_source, settings, prefix=left_alias)
    rf = read_source(spark, right_source, settings, prefix=right_alias)
    union = _keyed(lf, left_alias, translate(spec.left_key, scope), LEFT).unionByName(
        _keyed(rf, right_alias, translate(spec.right_key, scope), RIGHT))
    joined = union.groupBy("__JK").applyInPandasWithState(
        _join_function(kind), _JOIN_OUT, _JOIN_STATE, "append", GroupStateTimeout.NoTimeout)

    carried = ["__L", "__R", "__DEL", "__OL", "__OR", "__OLD"]

    def parsed(frame: DataFrame, left_json: str, right_json: str, keep: list[str]) -> DataFrame:
        """``frame``'s kept columns and the sides' columns parsed from ``left_json``/``right_json``."""
        return frame.select(*keep, F.from_json(left_json, lf.schema).alias("__LROW"),
                            F.from_json(right_json, rf.schema).alias("__RROW")).select(*keep, "__LROW.*", "__RROW.*")

    frame = joined
    if analyzed.where is not None:
        # Kafka Streams' table filter with old values (table_join_steps.where_write): WHERE on
        # the key's join result before the change decides whether a failing row is a tombstone.
        where_sql = translate(analyzed.where, scope)
        old = parsed(frame, "__OL", "__OR", carried)
        frame = old.select(*carried, (F.col("__OLD") & F.coalesce(F.expr(where_sql), F.lit(False))).alias("__KEEP_OLD"))
        new = parsed(frame, "__L", "__R", [*carried, "__KEEP_OLD"])
        passes = ~F.col("__DEL") & F.coalesce(F.expr(where_sql), F.lit(False))
        tombstone = F.when(passes, F.lit(False)).when(F.col("__KEEP_OLD"), F.lit(True))
        frame = new.withColumn("__DEL", tombstone).where(F.col("__DEL").isNotNull()).select(*carried)
    result = parsed(frame, "__L", "__R", ["__DEL"])
    result = result.withColumn(JOIN_KEY, F.coalesce(F.expr(translate(spec.left_key, scope)),
                                                    F.expr(translate(spec.right_key, scope))))
    return result.withColumn(f"{left_alias}__{TOMBSTONE}", F.col("__DEL")).drop("__DEL")
