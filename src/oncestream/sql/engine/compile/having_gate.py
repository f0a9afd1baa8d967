"""HAVING over an update-mode stream aggregation, written as ksqlDB writes it.

ksqlDB filters the aggregation's table with HAVING (Kafka Streams' ``KTableFilter``, old values
sent): an update is written when the new result passes; when it fails, a tombstone is written only
if the key's previous result passed (the row leaves the table), and nothing when the previous
result failed too or there was none (the row was never in the table). Spark's aggregation state
keeps the accumulators, not whether the last written result passed, so the aggregation's
``__DELETE`` rows go through one more stateful operator, keyed by the output key (and the window):
its state is a flag per key that is set while the key's last written row is a result (``live``).

The flag lives in the operator's state store, in the query's checkpoint, so a replayed micro-batch
starts from the flags of the batch before it and writes the same rows (exactly once with the
update sink's journal, compile/update_sink.py). Aggregations without HAVING do not get the step.

This module imports only PySpark, so a worker unpickles the processor quickly.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

DELETE = "__DELETE"   # the same column as plan.DELETE (plan imports this module)
GATE_KEY = "__HK"

_LIVE_STATE = T.StructType([T.StructField("live", T.BooleanType())])


def gate_step(fails: bool, live: bool) -> tuple[bool, bool]:
    """One result of a key through ksqlDB's HAVING filter: (write it, the key is live after it).
    ``fails``: the result fails HAVING (its row is a tombstone); ``live``: the key's last written
    row is a result that passed. A failing result is written (as a tombstone) only over a live
    key."""
    if not fails:
        return True, True
    return live, False


def gated_rows(rows: Iterator[Row], live: bool) -> tuple[list[Row], bool]:
    """A key's results in order through ``gate_step``: the rows to write and whether the key is
    live after them (an update-mode batch has one result per key; more are taken in order)."""
    written: list[Row] = []
    for row in rows:
        write, live = gate_step(bool(row[DELETE]), live)
        if write:
            written.append(row)
    return written, live


class HavingGate(StatefulProcessor):
    """Keyed by ``GATE_KEY`` (the output key and window); state: present while the key is live."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.live = handle.getValueState("live", _LIVE_STATE)

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:
        was_live = self.live.exists()
        written, live = gated_rows(rows, was_live)
        if live and not was_live:
            self.live.update((True,))
        elif was_live and not live:
            self.live.clear()
        yield from written

    def close(self) -> None:
        pass


def gate_having(frame: DataFrame, key_columns: Sequence[SparkColumn]) -> DataFrame:
    """``frame`` (an update-mode aggregation with ``__DELETE``: the result fails HAVING) without
    the tombstones of keys that are not live. ``key_columns``: the columns that make the output
    record's key (the key columns, and the window start of a windowed result)."""
    # One text column (the key's JSON), not the columns themselves: an aggregation's output is
    # already partitioned by its grouping columns, and a stateful operator in the same stage as
    # the aggregation's fails (RocksDB's read store is taken for the other operator's), so the
    # gate's key must ask for a shuffle. Not a struct column either: PySpark's state API then
    # gives every key of a partition the same state (Spark 4.1).
    if not key_columns:
        raise ValueError("a HAVING gate needs the output key's columns")
    keyed = frame.withColumn(GATE_KEY, F.to_json(F.struct(*key_columns)))
    gated = keyed.groupBy(GATE_KEY).transformWithState(HavingGate(), keyed.schema, "Update", "None")
    return gated.drop(GATE_KEY)
