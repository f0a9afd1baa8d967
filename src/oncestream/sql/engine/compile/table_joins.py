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
off). A write's ROWTIME is Kafka Streams' (``KTableKTable*Join``): the larger of its change's and
the other tables' present rows', a tombstone's too. The output key is the join key (``JOIN_KEY``:
a RIGHT or FULL join's key when the left row is absent is the right row's key, as in ksqlDB).

Each write also carries the key's join result before the change (Kafka Streams' old value): with
a WHERE clause a row failing it (or a tombstone) is written as a tombstone only when the old result
passed WHERE, and dropped otherwise, as Kafka Streams' table filter does with old values (ksqlDB's
"table table join with where clause"). WHERE runs as plain projections on the old and new rows (no
second stateful operator).

N-way joins of tables (``T1 JOIN T2 ON ... JOIN T3 ON ...``, all on the primary key, so one key
for all) are the same operator with one state row per table: a change of table i goes through the
chain of KTable-KTable joins as Kafka Streams forwards it, each join's change (with its old value)
being the next one's left change, the other side read as the value getters give it
(``table_join_steps.nway_change``).
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
from oncestream.sql.engine.compile.table_join_steps import KINDS, nway_table_step, processing_order
from oncestream.sql.errors import StatementError
from oncestream.sql.language.catalog import ROWOFFSET, ROWPARTITION, ROWTIME, SourceInfo

JOIN_KEY = "__JOINKEY"


def _schemas(n: int) -> tuple[T.StructType, T.StructType]:
    """The operator's output (each table's row, tombstone, the old rows, had an old result, the
    changed table and its change's ROWTIME) and state (each table's row) for ``n`` tables."""
    string = T.StringType()
    out = T.StructType([*(T.StructField(f"__S{i}", string) for i in range(n)), T.StructField("__DEL", T.BooleanType()),
                        *(T.StructField(f"__O{i}", string) for i in range(n)), T.StructField("__OLD", T.BooleanType()),
                        T.StructField("__CHG", T.IntegerType()), T.StructField("__CHG_TS", T.LongType())])
    # two tables keep the state field names of the two-way join (checkpoints written before n-way joins)
    names = ["left", "right"] if n == 2 else [f"row{i}" for i in range(n)]
    state = T.StructType([T.StructField(name, string) for name in names])
    return out, state


def _join_function(kinds: list[str]) -> Any:
    n = len(kinds) + 1

    def join_key_rows(key: Any, frames: Iterator[Any], state: Any) -> Iterator[Any]:
        import pandas as pd

        rows = pd.concat(list(frames), ignore_index=True)
        current = list(state.get) if state.exists else [None] * n
        order = processing_order(rows["__SIDE"].tolist(), rows["__ORD_TS"].tolist(), rows["__ORD_P"].tolist(),
                                 rows["__ORD_O"].tolist())
        out, current = nway_table_step(kinds, rows["__SIDE"].tolist(), rows["__ROW"].tolist(), order, current)
        if all(r is None for r in current):
            if state.exists:
                state.remove()
        else:
            state.update(tuple(current))
        # the writes in order: the sink writes a partition's rows in order, so a key's records
        # keep it in the output topic
        columns: dict[str, Any] = {}
        for i in range(n):
            columns[f"__S{i}"] = pd.Series([o.rows[i] for o in out], dtype=object)
        columns["__DEL"] = pd.Series([o.delete for o in out], dtype=bool)
        for i in range(n):
            columns[f"__O{i}"] = pd.Series([o.old_rows[i] for o in out], dtype=object)
        columns["__OLD"] = pd.Series([o.had_old for o in out], dtype=bool)
        columns["__CHG"] = pd.Series([int(rows["__SIDE"].iat[o.record]) for o in out], dtype="int32")
        columns["__CHG_TS"] = pd.Series([int(rows["__ORD_TS"].iat[o.record]) for o in out], dtype="int64")
        yield pd.DataFrame(columns)

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


def table_table(spark: SparkSession, analyzed: Any, scope: Scope, tables: list[tuple[str, SourceInfo]],
                settings: ReadSettings) -> DataFrame:
    """The joined frame of two or more tables on their primary keys (``analyzed.joins``, the
    n-th joining the first n tables with table n + 1; the analyzer checked that each joins on a
    key of the tables so far and the primary key of the next, so all share one key): every
    table's columns, ``<first>__TOMBSTONE`` true for a tombstone of the output key, and
    ``JOIN_KEY``."""
    joins = list(analyzed.joins)
    kinds = [{"OUTER": "FULL"}.get(spec.kind.upper(), spec.kind.upper()) for spec in joins]
    for spec, kind in zip(joins, kinds, strict=True):
        if kind not in KINDS:
            raise StatementError(f"join type {spec.kind} is not supported")
    if tuple(getattr(analyzed, "group_by", ()) or ()):
        raise StatementError("Aggregating the result of a table-table join is not supported by oncestream's Spark "
                             "runtime.")
    frames = [read_source(spark, source, settings, prefix=alias) for alias, source in tables]
    # each table's own key: the first table's is the first join's left side, the others' their right sides
    key_sql = [translate(joins[0].left_key, scope), *(translate(spec.right_key, scope) for spec in joins)]
    union = _keyed(frames[0], tables[0][0], key_sql[0], 0)
    for side in range(1, len(tables)):
        union = union.unionByName(_keyed(frames[side], tables[side][0], key_sql[side], side))
    out_schema, state_schema = _schemas(len(tables))
    joined = union.groupBy("__JK").applyInPandasWithState(
        _join_function(kinds), out_schema, state_schema, "append", GroupStateTimeout.NoTimeout)

    n = len(tables)
    carried = [*(f"__S{i}" for i in range(n)), "__DEL", *(f"__O{i}" for i in range(n)), "__OLD", "__CHG", "__CHG_TS"]

    def parsed(frame: DataFrame, prefix: str, keep: list[str]) -> DataFrame:
        """``frame``'s kept columns and the tables' columns parsed from ``<prefix><i>``."""
        rows = [F.from_json(f"{prefix}{i}", frames[i].schema).alias(f"__ROW{i}") for i in range(n)]
        return frame.select(*keep, *rows).select(*keep, *(f"__ROW{i}.*" for i in range(n)))

    frame = joined
    if analyzed.where is not None:
        # Kafka Streams' table filter with old values (table_join_steps.where_write): WHERE on
        # the key's join result before the change decides whether a failing row is a tombstone.
        where_sql = translate(analyzed.where, scope)
        old = parsed(frame, "__O", carried)
        frame = old.select(*carried, (F.col("__OLD") & F.coalesce(F.expr(where_sql), F.lit(False))).alias("__KEEP_OLD"))
        new = parsed(frame, "__S", [*carried, "__KEEP_OLD"])
        passes = ~F.col("__DEL") & F.coalesce(F.expr(where_sql), F.lit(False))
        tombstone = F.when(passes, F.lit(False)).when(F.col("__KEEP_OLD"), F.lit(True))
        frame = new.withColumn("__DEL", tombstone).where(F.col("__DEL").isNotNull()).select(*carried)
    result = parsed(frame, "__S", ["__DEL", "__CHG", "__CHG_TS"])
    # Kafka Streams stamps a join result, a tombstone too, with the larger of its change's ROWTIME
    # and the other tables' rows' (result_rowtime takes the larger of the tables' ROWTIMEs): the
    # changed table's is its change's, not that of the row a tombstone carries (or of none).
    for i, (alias, _source) in enumerate(tables):
        rowtime = f"{alias}__{ROWTIME}"
        result = result.withColumn(rowtime, F.when(F.col("__CHG") == i, F.col("__CHG_TS"))
                                   .otherwise(F.col(quote(rowtime))))
    result = result.drop("__CHG", "__CHG_TS")
    result = result.withColumn(JOIN_KEY, F.coalesce(*(F.expr(k) for k in key_sql)))
    return result.withColumn(f"{tables[0][0]}__{TOMBSTONE}", F.col("__DEL")).drop("__DEL")
