"""The stateful processors of joins that run as Spark's ``transformWithState`` (Python workers):
Spark allows one ``applyInPandasWithState`` per query, so a query's second stream-table join (n-way
joins) and both operators of a foreign-key join are these; so is a stream-stream join, whose
event-time timers write an outer join's unmatched rows of keys that receive no more input. Like ``table_state``, this module
imports only what the processors need (PySpark and the plain-Python join steps), so a worker
unpickles them quickly. Each keeps one value of state per key in the state store (RocksDB,
checkpointed with the query) and emits rows (append mode)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from pyspark.sql import Row
from pyspark.sql import types as T
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

from oncestream.sql.engine.compile.fk_join_steps import Message, foreign_key_step, subscriptions
from oncestream.sql.engine.compile.stream_join_steps import (
    Buffered,
    JoinWindow,
    KeyState,
    Record,
    Write,
    next_deadline,
    on_time,
    process_batch,
)
from oncestream.sql.engine.compile.table_join_steps import processing_order, stream_table_rows

_S = T.StringType()
STREAM_TABLE_OUT = T.StructType([T.StructField("__S", _S), T.StructField("__T", _S)])
MESSAGES = T.StructType([T.StructField("__G", _S), T.StructField("__KIND", _S), T.StructField("__LKEY", _S),
                         T.StructField("__ROW", _S), T.StructField("__OLD", T.BooleanType()),
                         T.StructField("__FINAL", T.BooleanType()), T.StructField("__ORD_TS", T.LongType()),
                         T.StructField("__ORD_P", T.LongType()), T.StructField("__ORD_O", T.LongType()),
                         T.StructField("__SEQ", T.LongType())])
FK_WRITES = T.StructType([T.StructField("__L", _S), T.StructField("__R", _S), T.StructField("__DEL", T.BooleanType()),
                          T.StructField("__TS", T.LongType())])
STREAM_STREAM_OUT = T.StructType([T.StructField("__L", _S), T.StructField("__R", _S)])
_ROW_STATE = T.StructType([T.StructField("row", _S)])
_LEFT_STATE = T.StructType([T.StructField("row", _S), T.StructField("fk", _S)])
_GROUP_STATE = T.StructType([T.StructField("right", _S), T.StructField("subscribed", _S)])
_WINDOW_STATE = T.StructType([T.StructField("rows", _S), T.StructField("stream_time", T.LongType())])


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


class StreamTableProcessor(StatefulProcessor):
    """Keyed by the join key; state: the table's latest row (``table_join_steps.stream_table_rows``)."""

    def __init__(self, left: bool) -> None:
        self.left = left

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.table_row = handle.getValueState("row", _ROW_STATE)

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:
        batch = [(int(r["__SIDE"]), int(r["__ORD_TS"]), int(r["__ORD_P"]), int(r["__ORD_O"]), _text(r["__ROW"]))
                 for r in rows]
        stored = self.table_row.get() if self.table_row.exists() else None
        joined, current = stream_table_rows(batch, _text(stored[0]) if stored is not None else None, self.left)
        if current is None:
            if stored is not None:
                self.table_row.clear()
        else:
            self.table_row.update((current,))
        for stream_row, table_row in joined:
            yield Row(__S=stream_row, __T=table_row)

    def close(self) -> None:
        pass


class SubscribeProcessor(StatefulProcessor):
    """A foreign-key join's first operator, keyed by the left table's key; state: the key's row and
    foreign key (``fk_join_steps.subscriptions``)."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.left = handle.getValueState("left", _LEFT_STATE)

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:
        batch = sorted(rows, key=lambda r: (int(r["__ORD_P"]), int(r["__ORD_O"])))
        stored = self.left.get() if self.left.exists() else None
        current: tuple[str | None, str | None] | None = (str(stored[0]), _text(stored[1])) if stored is not None else None
        out: list[tuple[Any, ...]] = []
        for r in batch:
            messages, current = subscriptions(str(key[0]), [(_text(r["__ROW"]), _text(r["__FK"]), _text(r["__KEYROW"]))],
                                              current)
            out += [(m.group, m.kind, m.left_key, m.row, m.had_old, int(r["__ORD_TS"]), int(r["__ORD_P"]),
                     int(r["__ORD_O"])) for m in messages]
        if current is None:
            if stored is not None:
                self.left.clear()
        else:
            self.left.update(current)
        # which group holds the key's last message in this batch (the others drop their writes)
        last = out[-1][0] if out else None
        for seq, (group, kind, left_key, row, had_old, ts, partition, offset) in enumerate(out):
            yield Row(__G=group, __KIND=kind, __LKEY=left_key, __ROW=row, __OLD=had_old, __FINAL=group == last,
                      __ORD_TS=ts, __ORD_P=partition, __ORD_O=offset, __SEQ=seq)

    def close(self) -> None:
        pass


class ForeignKeyProcessor(StatefulProcessor):
    """A foreign-key join's second operator, keyed by the foreign key; state: the right row and the
    subscribed left rows (``fk_join_steps.foreign_key_step``)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.group = handle.getValueState("group", _GROUP_STATE)

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:
        batch = sorted(rows, key=lambda r: (int(r["__ORD_TS"]), int(r["__SIDE"]), int(r["__ORD_P"]), int(r["__ORD_O"]),
                                            int(r["__SEQ"])))
        stored = self.group.get() if self.group.exists() else None
        right = _text(stored[0]) if stored is not None else None
        subscribed: dict[str, str] = json.loads(stored[1]) if stored is not None else {}
        events: list[tuple[str, Any]] = []
        for r in batch:
            if int(r["__SIDE"]) == 1:
                events.append(("RIGHT", _text(r["__ROW"])))
            else:
                events.append(("LEFT", Message(_text(r["__G"]), str(r["__KIND"]), str(r["__LKEY"]), _text(r["__ROW"]),
                                               bool(r["__OLD"]), bool(r["__FINAL"]))))
        writes, right, subscribed = foreign_key_step(self.kind, events, right, subscribed)
        if right is None and not subscribed:
            if stored is not None:
                self.group.clear()
        else:
            self.group.update((right, json.dumps(subscribed)))
        for w in writes:
            yield Row(__L=w.left, __R=w.right, __DEL=w.delete, __TS=int(batch[w.event]["__ORD_TS"]))

    def close(self) -> None:
        pass


class StreamStreamProcessor(StatefulProcessor):
    """A stream-stream join (INNER or outer) keyed by the join key (event time: Spark's watermark is the
    query's stream time); state: the key's buffered rows of both sides and the stream time it saw
    (``stream_join_steps``), one event-time timer at the key's next deadline (an unmatched row's
    window closing, or its rows' eviction)."""

    def __init__(self, window: JoinWindow) -> None:
        self.window = window

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.rows = handle.getValueState("window", _WINDOW_STATE)

    def _load(self) -> KeyState:
        stored = self.rows.get() if self.rows.exists() else None
        if stored is None:
            return KeyState([])
        rows = [Buffered(int(side), int(ts), str(row), bool(pending)) for side, ts, row, pending in json.loads(stored[0])]
        return KeyState(rows, int(stored[1]))

    def _store(self, state: KeyState, watermark_ms: int) -> None:
        for timer in list(self.handle.listTimers()):
            self.handle.deleteTimer(timer)
        if not state.rows:
            self.rows.clear()
            return
        self.rows.update((json.dumps([[r.side, r.ts, r.row, r.pending] for r in state.rows]), state.stream_time))
        deadline = next_deadline(self.window, state)
        if deadline is not None:
            # a timer fires once the watermark passes it; one at or below the watermark would fire at once
            self.handle.registerTimer(max(deadline, watermark_ms + 1))

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:
        batch = list(rows)
        order = processing_order([int(r["__SIDE"]) for r in batch], [int(r["__ORD_TS"]) for r in batch],
                                 [int(r["__ORD_P"]) for r in batch], [int(r["__ORD_O"]) for r in batch])
        keyless = key[0] is None
        records = [Record(int(batch[i]["__SIDE"]), int(batch[i]["__ORD_TS"]), int(batch[i]["__ORD_P"]),
                          int(batch[i]["__ORD_O"]), str(batch[i]["__ROW"]), keyless) for i in order]
        watermark_ms = int(timerValues.getCurrentWatermarkInMs())
        state = self._load()
        writes = process_batch(self.window, state, records, watermark_ms)
        self._store(state, watermark_ms)
        yield from _rows(writes)

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Row]:
        watermark_ms = int(timerValues.getCurrentWatermarkInMs())
        state = self._load()
        writes = on_time(self.window, state, watermark_ms)
        self._store(state, watermark_ms)
        yield from _rows(writes)

    def close(self) -> None:
        pass


def _rows(writes: list[Write]) -> Iterator[Row]:
    for w in writes:
        yield Row(__L=w.left, __R=w.right)
