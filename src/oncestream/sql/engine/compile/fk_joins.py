"""Foreign-key table-table joins (``left JOIN right ON <expression of left> = right.<key>``,
INNER or LEFT; Kafka Streams' KIP-213 as ksqlDB runs it) as two ``applyInPandasWithState``
operators, the rules in plain Python (``fk_join_steps``):

1. keyed by the left table's key: the state is the key's row and foreign key; each change becomes
   messages to the groups of its old and new foreign keys (subscribe, unsubscribe, delete);
2. keyed by the foreign key: the right table's records and the messages, in (ROWTIME, left before
   right, partition, offset) order; the state is the right row and the subscribed left rows; it
   writes the joined rows (a right change re-writes every subscribed left row).

The output key is the left table's key (its key columns, from the left row). Both operators'
state is in Spark's checkpointed state store, restored with the query's checkpoint.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.streaming.state import GroupStateTimeout

from oncestream.sql.engine.compile.expressions import Scope, quote, translate
from oncestream.sql.engine.compile.fk_join_steps import KINDS, Message, foreign_key_step, subscriptions
from oncestream.sql.engine.compile.sources import TOMBSTONE, ReadSettings, read_source
from oncestream.sql.errors import StatementError
from oncestream.sql.language.catalog import ROWOFFSET, ROWPARTITION, ROWTIME, SourceInfo

_S = T.StringType()
_MESSAGES = T.StructType([T.StructField("__G", _S), T.StructField("__KIND", _S), T.StructField("__LKEY", _S),
                          T.StructField("__ROW", _S), T.StructField("__OLD", T.BooleanType()),
                          T.StructField("__FINAL", T.BooleanType()), T.StructField("__ORD_TS", T.LongType()),
                          T.StructField("__ORD_P", T.LongType()), T.StructField("__ORD_O", T.LongType()),
                          T.StructField("__SEQ", T.LongType())])
_LEFT_STATE = T.StructType([T.StructField("row", _S), T.StructField("fk", _S)])
_WRITES = T.StructType([T.StructField("__L", _S), T.StructField("__R", _S), T.StructField("__DEL", T.BooleanType())])
_GROUP_STATE = T.StructType([T.StructField("right", _S), T.StructField("subscribed", _S)])


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _subscribe_function() -> Any:
    def left_key_rows(key: Any, frames: Iterator[Any], state: Any) -> Iterator[Any]:
        import pandas as pd

        rows = pd.concat(list(frames), ignore_index=True).sort_values(["__ORD_P", "__ORD_O"], kind="stable")
        stored = state.get if state.exists else None
        changes = [(_text(r), _text(fk), _text(k)) for r, fk, k in zip(rows["__ROW"], rows["__FK"], rows["__KEYROW"],
                                                                       strict=True)]
        order = list(zip(rows["__ORD_TS"], rows["__ORD_P"], rows["__ORD_O"], strict=True))
        out: list[tuple[Any, ...]] = []
        current: tuple[str | None, str | None] | None = (str(stored[0]), _text(stored[1])) if stored is not None else None
        for i, change in enumerate(changes):
            messages, current = subscriptions(str(key[0]), [change], current)
            ts, partition, offset = order[i]
            out += [(m.group, m.kind, m.left_key, m.row, m.had_old, m.final, ts, partition, offset, len(out) + j)
                    for j, m in enumerate(messages)]
        # which group holds the key's last message in this batch (the others drop their writes)
        last = out[-1][0] if out else None
        out = [(*m[:5], m[0] == last, *m[6:]) for m in out]
        if current is None:
            if state.exists:
                state.remove()
        else:
            state.update(current)
        yield pd.DataFrame(out, columns=[f.name for f in _MESSAGES.fields])

    return left_key_rows


def _group_function(kind: str) -> Any:
    def foreign_key_rows(key: Any, frames: Iterator[Any], state: Any) -> Iterator[Any]:
        import pandas as pd

        rows = pd.concat(list(frames), ignore_index=True).sort_values(
            ["__ORD_TS", "__SIDE", "__ORD_P", "__ORD_O", "__SEQ"], kind="stable")
        right, subscribed = (state.get[0], json.loads(state.get[1])) if state.exists else (None, {})
        events: list[tuple[str, Any]] = []
        for side, group, kind_, left_key, row, old, final in zip(
                rows["__SIDE"], rows["__G"], rows["__KIND"], rows["__LKEY"], rows["__ROW"], rows["__OLD"], rows["__FINAL"],
                strict=True):
            if side == 1:
                events.append(("RIGHT", _text(row)))
            else:
                events.append(("LEFT", Message(_text(group), str(kind_), str(left_key), _text(row), bool(old), bool(final))))
        writes, right, subscribed = foreign_key_step(kind, events, _text(right), subscribed)
        if right is None and not subscribed:
            if state.exists:
                state.remove()
        else:
            state.update((right, json.dumps(subscribed)))
        yield pd.DataFrame({"__L": pd.Series([w.left for w in writes], dtype=object),
                            "__R": pd.Series([w.right for w in writes], dtype=object),
                            "__DEL": pd.Series([w.delete for w in writes], dtype=bool)})

    return foreign_key_rows


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
    messages = keyed.where(F.col("__LK").isNotNull()).groupBy("__LK").applyInPandasWithState(
        _subscribe_function(), _MESSAGES, _LEFT_STATE, "append", GroupStateTimeout.NoTimeout)
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
    writes = union.groupBy("__G").applyInPandasWithState(
        _group_function(kind), _WRITES, _GROUP_STATE, "append", GroupStateTimeout.NoTimeout)
    joined = writes.select("__DEL", F.from_json("__L", lf.schema).alias("__LROW"),
                           F.from_json("__R", rf.schema).alias("__RROW")).select("__DEL", "__LROW.*", "__RROW.*")
    return joined.withColumn(f"{left_alias}__{TOMBSTONE}", F.col("__DEL")).drop("__DEL")
