"""The stateful processor of a session-window aggregation (``session_aggregation`` builds the
plan): Spark's ``transformWithState`` in event time, keyed by the GROUP BY values (JSON). Its
state, one JSON value per key in the state store (RocksDB, checkpointed with the query), is the
key's open sessions with their records' aggregate arguments, the stream time it saw and the next
arrival sequence (``session_steps.KeyState``); one event-time timer at the time its last session
expires removes the state of a key that receives no more records. Like ``table_state``, this
module imports only PySpark and the plain-Python steps, so a worker unpickles it quickly."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from decimal import Decimal
from typing import Any

from pyspark.sql import Row
from pyspark.sql import types as T
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

from oncestream.sql.engine.compile.session_steps import (
    Entry,
    KeyState,
    Session,
    SessionUdaf,
    SessionWindow,
    SessionWrite,
    expire,
    next_expiry,
    process_batch,
    session_results,
    session_udaf,
)
from oncestream.sql.engine.compile.table_state import AGG_PREFIX

SESSION_OUT = T.StructType([T.StructField("__G", T.StringType()), T.StructField("__R", T.StringType()),
                            T.StructField("__WS", T.LongType()), T.StructField("__WE", T.LongType()),
                            T.StructField("__DEL", T.BooleanType()), T.StructField("__T", T.LongType())])
_SESSIONS_STATE = T.StructType([T.StructField("sessions", T.StringType())])


def _parse(text: str) -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(text, parse_float=Decimal)
    return parsed


def _json_default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return float(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def dump_state(state: KeyState) -> str:
    """The key's state as the JSON text the state store keeps."""
    sessions = [[s.start, s.end, [[e.seq, e.ts, e.args] for e in s.entries]] for s in state.sessions]
    return json.dumps({"sessions": sessions, "stream_time": state.stream_time, "next_seq": state.next_seq})


def load_state(text: str | None) -> KeyState:
    """``dump_state``'s text read back (None: a key without state)."""
    if text is None:
        return KeyState()
    data = json.loads(text)
    sessions = [Session(int(start), int(end), [Entry(int(seq), int(ts), str(args)) for seq, ts, args in entries])
                for start, end, entries in data["sessions"]]
    return KeyState(sessions, int(data["stream_time"]), int(data["next_seq"]))


class SessionProcessor(StatefulProcessor):
    """Keyed by ``__G`` (the GROUP BY values' JSON); input rows: ``__A`` (aggregate arguments'
    JSON), ``__T`` (event time, ms), ``__P``/``__O`` (partition, offset: the arrival order);
    output: ``SESSION_OUT``, one row per write (``__DEL``: a tombstone of a merged-away session).
    ``calls``: (name, argument base types, star) of each aggregate; ``arg_slices``: the fields of
    the arguments' JSON that each one reads."""

    def __init__(self, window: SessionWindow, calls: Sequence[tuple[str, tuple[str, ...], bool]],
                 arg_slices: Sequence[Sequence[str]]) -> None:
        self.window = window
        self.calls = list(calls)
        self.arg_slices = [list(s) for s in arg_slices]

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.udafs: list[SessionUdaf] = [session_udaf(name, types, star) for name, types, star in self.calls]
        self.sessions = handle.getValueState("sessions", _SESSIONS_STATE)

    def _load(self) -> KeyState:
        stored = self.sessions.get() if self.sessions.exists() else None
        return load_state(str(stored[0]) if stored is not None else None)

    def _store(self, state: KeyState, watermark_ms: int) -> None:
        for timer in list(self.handle.listTimers()):
            self.handle.deleteTimer(timer)
        if not state.sessions:
            self.sessions.clear()
            return
        self.sessions.update((dump_state(state),))
        expiry = next_expiry(self.window, state)
        if expiry is not None:
            # a timer fires once the watermark passes it; one at or below the watermark would fire at once
            self.handle.registerTimer(max(expiry, watermark_ms + 1))

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:
        batch = sorted(rows, key=lambda r: (int(r["__P"]), int(r["__O"])))
        watermark_ms = int(timerValues.getCurrentWatermarkInMs())
        state = self._load()
        writes = process_batch(self.window, state, [(int(r["__T"]), str(r["__A"])) for r in batch], watermark_ms)
        self._store(state, watermark_ms)
        yield from self._rows(str(key[0]), writes)

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Row]:
        watermark_ms = int(timerValues.getCurrentWatermarkInMs())
        state = self._load()
        state.stream_time = max(state.stream_time, watermark_ms)
        expire(self.window, state)
        self._store(state, watermark_ms)
        yield from ()

    def _rows(self, group: str, writes: list[SessionWrite]) -> Iterator[Row]:
        for w in writes:
            results = None
            if w.entries is not None:
                values = session_results(self.udafs, self.arg_slices, w.entries, _parse)
                results = json.dumps({f"{AGG_PREFIX}{i}": v for i, v in enumerate(values)}, default=_json_default)
            yield Row(__G=group, __R=results, __WS=w.start, __WE=w.end, __DEL=w.entries is None, __T=w.timestamp)

    def close(self) -> None:
        pass
