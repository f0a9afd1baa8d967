"""The two stateful processors of a table aggregation (``table_aggregation`` builds the plan):
Spark's ``transformWithState`` runs them in Python workers, on the executors and, when a query
starts, once on the driver to learn their state schemas; and the ``mapInArrow`` that puts their
results in change order. This module imports only what they need (PySpark, pyarrow,
``table_udafs``), not the SQL layer, so a worker unpickles them quickly."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from decimal import Decimal
from typing import Any

import pyarrow as pa
from pyspark.sql import Row
from pyspark.sql import types as T
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

from oncestream.sql.engine.compile.table_udafs import ChangeRow, Delta, TableUdaf, changelog_step, group_step, table_udaf

AGG_PREFIX = "__AGG_"

DELTA_SCHEMA = T.StructType([T.StructField("__G", T.StringType()), T.StructField("__A", T.StringType()),
                             T.StructField("__SIGN", T.LongType()), T.StructField("__P", T.LongType()),
                             T.StructField("__O", T.LongType()), T.StructField("__SEQ", T.LongType()),
                             T.StructField("__T", T.LongType())])
# a group's result, and where it goes in the batch's output: after the results of the changes
# before its last one (``__P``, ``__O``, ``__SEQ`` of its last delta; table_aggregation sorts by them)
RESULT_SCHEMA = T.StructType([T.StructField("__G", T.StringType()), T.StructField("__R", T.StringType()),
                              T.StructField("__T", T.LongType()), T.StructField("__P", T.LongType()),
                              T.StructField("__O", T.LongType()), T.StructField("__SEQ", T.LongType())])
_CONTRIBUTION_STATE = T.StructType([T.StructField("group", T.StringType()), T.StructField("args", T.StringType())])
_ACCUMULATOR_STATE = T.StructType([T.StructField("accumulators", T.StringType())])
_ROWTIME_STATE = T.StructType([T.StructField("rowtime", T.LongType())])


def _parse(text: str) -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(text, parse_float=Decimal)
    return parsed


class ChangelogProcessor(StatefulProcessor):
    """Keyed by the source table's record key; state: the contribution of the key's row."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.contribution = handle.getValueState("contribution", _CONTRIBUTION_STATE)

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:
        changes: list[ChangeRow] = []
        rowtimes: dict[tuple[int, int], int] = {}
        for r in rows:
            changes.append(ChangeRow(int(r["__P"]), int(r["__O"]), bool(r["__PRESENT"]), r["__G"], r["__A"]))
            rowtimes[(int(r["__P"]), int(r["__O"]))] = int(r["__T"])
        stored = self.contribution.get() if self.contribution.exists() else None
        previous = (str(stored[0]), str(stored[1])) if stored is not None else None
        deltas, current = changelog_step(changes, previous)
        if current is None:
            if stored is not None:
                self.contribution.clear()
        else:
            self.contribution.update(current)
        for d in deltas:
            # Both deltas of a change carry its record's ROWTIME (Kafka Streams' repartition
            # forwards the old and the new value with the updating record's timestamp).
            yield Row(__G=d.group, __A=d.args, __SIGN=d.sign, __P=d.partition, __O=d.offset, __SEQ=d.seq,
                      __T=rowtimes[(d.partition, d.offset)])

    def close(self) -> None:
        pass


def _json_default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return float(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


class GroupProcessor(StatefulProcessor):
    """Keyed by the group (JSON of its GROUP BY values); state: the aggregates' accumulators and
    the group's ROWTIME (the largest of the records that changed it: Kafka Streams'
    KTableAggregate stamps each result with max(record, previous result)).
    ``calls``: (name, argument base types, star) of each aggregate; ``arg_slices``: the fields of
    the arguments' JSON that each one reads."""

    def __init__(self, calls: Sequence[tuple[str, tuple[str, ...], bool]], arg_slices: Sequence[Sequence[str]]) -> None:
        self.calls = list(calls)
        self.arg_slices = [list(s) for s in arg_slices]

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.udafs: list[TableUdaf] = [table_udaf(name, types, star) for name, types, star in self.calls]
        self.accumulators = handle.getValueState("accumulators", _ACCUMULATOR_STATE)
        self.rowtime = handle.getValueState("rowtime", _ROWTIME_STATE)

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:
        group = str(key[0])
        deltas: list[Delta] = []
        kept_rowtime = self.rowtime.get() if self.rowtime.exists() else None
        rowtime = int(kept_rowtime[0]) if kept_rowtime is not None else None
        for r in rows:
            deltas.append(Delta(group, r["__A"], int(r["__SIGN"]), int(r["__P"]), int(r["__O"]), int(r["__SEQ"])))
            rowtime = int(r["__T"]) if rowtime is None else max(rowtime, int(r["__T"]))
        stored = self.accumulators.get() if self.accumulators.exists() else None
        accumulators = json.loads(stored[0]) if stored is not None else None
        results, kept = group_step(deltas, accumulators, self.udafs, self.arg_slices, _parse)
        self.accumulators.update((json.dumps(kept, default=_json_default),))
        if rowtime is not None:
            self.rowtime.update((rowtime,))
        fields = {f"{AGG_PREFIX}{i}": r for i, r in enumerate(results)}
        last = max(deltas, key=Delta.order)
        yield Row(__G=group, __R=json.dumps(fields, default=_json_default), __T=rowtime, __P=last.partition,
                  __O=last.offset, __SEQ=last.seq)

    def close(self) -> None:
        pass


def in_change_order(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A partition's group results (``RESULT_SCHEMA``) in the order of the changes that made them
    (``mapInArrow``: Spark refuses to sort a streaming frame, even within partitions, and
    ``transformWithState`` emits its groups in key order)."""
    received = list(batches)
    table = pa.Table.from_batches(received) if received else None
    if table is not None and table.num_rows:
        yield from table.sort_by([("__P", "ascending"), ("__O", "ascending"), ("__SEQ", "ascending")]).to_batches()
