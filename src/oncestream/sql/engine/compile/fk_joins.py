"""Foreign-key table-table joins (``left JOIN right ON <expression of left> = right.<key>``,
INNER or LEFT; Kafka Streams' KIP-213 as ksqlDB runs it) as two ``transformWithState``
operators (``join_state``; Spark allows one ``applyInPandasWithState`` per query), the rules in
plain Python (``fk_join_steps``):

1. keyed by the left table's key: the state is the key's row and foreign key; each change becomes
   messages to the groups of its old and new foreign keys (subscribe, unsubscribe, delete);
2. keyed by the foreign key: the right table's records and the messages, in (ROWTIME, left before
   right, partition, offset) order; the state is the right row and the subscribed left rows; it
   writes the joined rows (a right change re-writes every subscribed left row).

The output key is the left table's key (its key columns, from the left row); a write's ROWTIME
is that of the record that caused it (Kafka Streams' KIP-213 join forwards that timestamp), a
tombstone's too. Both operators'
state is in Spark's checkpointed state store, restored with the query's checkpoint.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from oncestream.sql.engine.compile.expressions import Scope, quote, translate
from oncestream.sql.engine.compile.fk_join_steps import KINDS
from oncestream.sql.engine.compile.join_state import FK_WRITES, MESSAGES, ForeignKeyProcessor, SubscribeProcessor
from oncestream.sql.engine.compile.sources import TOMBSTONE, ReadSettings, read_source
from oncestream.sql.errors import StatementError
from oncestream.sql.language.catalog import ROWOFFSET, ROWPARTITION, ROWTIME, SourceInfo


def _json_row(frame: DataFrame) -> Any:
    return F.to_json(F.struct(*[F.col(quote(c)) for c in frame.columns]))


def fk_table_join(spark: SparkSession, analyzed: Any, scope: Scope, left: tuple[str, SourceInfo],
                  right: tuple[str, SourceInfo], settings: ReadSettings) -> DataFrame:
    """The joined frame of a foreign-key join (``analyzed.joins[0]``): both tables' columns and
    ``<left>__TOMBSTONE`` true for a tombstone of the output key (the left table's key)."""
    spec = analyzed.joins[0]
    kind = spec.kind.upper()
    if kind not in KINDS:
        what = "FULL" if kind in ("FULL", "OUTER") else kind
        raise StatementError(f"{what} OUTER JOIN on a foreign key is not supported")
    if tuple(getattr(analyzed, "group_by", ()) or ()):
        raise StatementError("Aggregating the result of a table-table join is not supported by oncestream's Spark "
                             "runtime.")
    left_alias, left_source = left
    right_alias, right_source = right
    lf = read_source(spark, left_source, settings, prefix=left_alias)
    rf = read_source(spark, right_source, settings, prefix=right_alias)
    tombstone = F.col(quote(f"{left_alias}__{TOMBSTONE}"))
    key_columns = [F.col(quote(f"{left_alias}__{c.name}")) for c in left_source.key_columns]
    left_key = key_columns[0].cast("string") if len(key_columns) == 1 else F.to_json(F.struct(*key_columns))
    keyed = lf.select(left_key.alias("__LK"), F.when(tombstone, F.lit(None).cast("string")).otherwise(_json_row(lf))
                      .alias("__ROW"), F.expr(translate(spec.left_key, scope)).cast("string").alias("__FK"),
                      _json_row(lf).alias("__KEYROW"), F.col(quote(f"{left_alias}__{ROWTIME}")).alias("__ORD_TS"),
                      F.col(quote(f"{left_alias}__{ROWPARTITION}")).cast("long").alias("__ORD_P"),
                      F.col(quote(f"{left_alias}__{ROWOFFSET}")).alias("__ORD_O"))
    messages = keyed.where(F.col("__LK").isNotNull()).groupBy("__LK").transformWithState(
        SubscribeProcessor(), MESSAGES, "Append", "None")
    right_tombstone = F.col(quote(f"{right_alias}__{TOMBSTONE}"))
    rights = rf.select(F.expr(translate(spec.right_key, scope)).cast("string").alias("__G"),
                       F.lit(None).cast("string").alias("__KIND"), F.lit(None).cast("string").alias("__LKEY"),
                       F.when(right_tombstone, F.lit(None).cast("string")).otherwise(_json_row(rf)).alias("__ROW"),
                       F.lit(False).alias("__OLD"), F.lit(True).alias("__FINAL"),
                       F.col(quote(f"{right_alias}__{ROWTIME}")).alias("__ORD_TS"),
                       F.col(quote(f"{right_alias}__{ROWPARTITION}")).cast("long").alias("__ORD_P"),
                       F.col(quote(f"{right_alias}__{ROWOFFSET}")).alias("__ORD_O"), F.lit(0).cast("long").alias("__SEQ"),
                       F.lit(1).alias("__SIDE")).where(F.col("__G").isNotNull())
    union = messages.withColumn("__SIDE", F.lit(0)).unionByName(rights)
    writes = union.groupBy("__G").transformWithState(ForeignKeyProcessor(kind), FK_WRITES, "Append", "None")
    joined = writes.select("__DEL", "__TS", F.from_json("__L", lf.schema).alias("__LROW"),
                           F.from_json("__R", rf.schema).alias("__RROW")).select("__DEL", "__TS", "__LROW.*", "__RROW.*")
    # A write's ROWTIME is its event's (fk_join_steps.FkWrite), not the rows' (result_rowtime
    # takes the larger of the two tables' ROWTIMEs).
    for alias in (left_alias, right_alias):
        joined = joined.withColumn(f"{alias}__{ROWTIME}", F.col("__TS"))
    joined = joined.drop("__TS")
    return joined.withColumn(f"{left_alias}__{TOMBSTONE}", F.col("__DEL")).drop("__DEL")
