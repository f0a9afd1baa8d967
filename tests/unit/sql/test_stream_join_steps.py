"""Stream-stream outer joins (``compile.stream_join_steps``): ksqlDB's own joins.json cases (record
at a time, the query's stream time as Spark's watermark gives it with one record per micro-batch),
eager emission without GRACE PERIOD, the outer-join store with one, window bounds, eviction and
the timers' deadlines."""

from __future__ import annotations

import json
from typing import Any

import pytest

from oncestream.sql.engine.compile.stream_join_steps import (
    LEFT,
    RIGHT,
    JoinWindow,
    KeyState,
    Record,
    next_deadline,
    on_time,
    process_batch,
)
from oncestream.sql.errors import StatementError

Input = tuple[int, Any, dict[str, Any], int]          # side, key, value, timestamp


def _run(window: JoinWindow, inputs: list[Input], *, batch_each: bool = True) -> list[tuple[Any, Any, Any, int]]:
    """The writes (key, left value, right value, timestamp) of ``inputs`` processed as Spark runs
    the operator: one record per micro-batch (the watermark of a batch being the largest timestamp
    of the earlier ones), each batch first firing the timers of keys whose deadline the watermark
    passed; after the last record, one more batch with no data (Spark's, when the watermark moved)."""
    states: dict[Any, KeyState] = {}
    out: list[tuple[Any, Any, Any, int]] = []
    watermark = -1

    def fire() -> None:
        for key, state in states.items():
            deadline = next_deadline(window, state)
            if deadline is not None and deadline < watermark:
                for w in on_time(window, state, watermark):
                    out.append((key, _v(w.left), _v(w.right), w.ts))

    batches = [[i] for i in inputs] if batch_each else [inputs]
    for batch in batches:
        fire()
        for offset, (side, key, value, ts) in enumerate(batch):
            state = states.setdefault(key, KeyState([]))
            record = Record(side, ts, 0, offset, json.dumps(value), keyless=key is None)
            for w in process_batch(window, state, [record], watermark):
                out.append((key, _v(w.left), _v(w.right), w.ts))
        watermark = max([watermark, *(ts for *_rest, ts in batch)])
    fire()
    return out


def _v(row: str | None) -> Any:
    return None if row is None else json.loads(row)


def test_left_join_without_grace_writes_unmatched_rows_at_once_and_joins_later():
    """joins.json "stream stream left join" (WITHIN 11 seconds): every unmatched left row is written
    at once with nulls, a later right row writes the joined row too, timestamps as ksqlDB's."""
    window = JoinWindow("LEFT", 11000, 11000, None)
    inputs = [(LEFT, 0, {"NAME": "zero", "VALUE": 0}, 0), (RIGHT, 0, {"F1": "blah", "F2": 50}, 10000),
              (LEFT, 10, {"NAME": "100", "VALUE": 5}, 11000), (LEFT, 0, {"NAME": "foo", "VALUE": 100}, 13000),
              (RIGHT, 0, {"F1": "a", "F2": 10}, 15000), (RIGHT, 100, {"F1": "newblah", "F2": 150}, 16000),
              (LEFT, 90, {"NAME": "ninety", "VALUE": 90}, 17000), (LEFT, 0, {"NAME": "bar", "VALUE": 99}, 30000)]
    assert _run(window, inputs) == [
        (0, {"NAME": "zero", "VALUE": 0}, None, 0),
        (0, {"NAME": "zero", "VALUE": 0}, {"F1": "blah", "F2": 50}, 10000),
        (10, {"NAME": "100", "VALUE": 5}, None, 11000),
        (0, {"NAME": "foo", "VALUE": 100}, {"F1": "blah", "F2": 50}, 13000),
        (0, {"NAME": "foo", "VALUE": 100}, {"F1": "a", "F2": 10}, 15000),
        (90, {"NAME": "ninety", "VALUE": 90}, None, 17000),
        (0, {"NAME": "bar", "VALUE": 99}, None, 30000),
    ]


def test_left_join_with_grace_and_out_of_order_rows():
    """joins.json "stream stream left join with out of order and custom grace period" (WITHIN 1
    minute GRACE PERIOD 1 minute): the matched row only; late rows whose window closed are written
    at once; the row at 330 s still waits for its window to close."""
    window = JoinWindow("LEFT", 60000, 60000, 60000)
    inputs = [(LEFT, 0, {"L1": "A"}, 0), (RIGHT, 0, {"L2": "a"}, 60000), (LEFT, 1, {"L1": "B"}, 330000),
              (LEFT, 2, {"L1": "C"}, 90000), (RIGHT, 2, {"L2": "c"}, 90000), (LEFT, 3, {"L1": "D"}, 60000),
              (RIGHT, 3, {"L2": "d"}, 60000)]
    assert _run(window, inputs) == [
        (0, {"L1": "A"}, {"L2": "a"}, 60000),
        (2, {"L1": "C"}, None, 90000),
        (3, {"L1": "D"}, None, 60000),
    ]


def test_full_outer_join_with_grace_and_out_of_order_rows():
    """joins.json "stream stream full outer join with out of order and custom grace period": both
    sides' late unmatched rows are written, the expired rows of the other side join nothing."""
    window = JoinWindow("FULL", 60000, 60000, 60000)
    inputs = [(LEFT, 0, {"L1": "A"}, 0), (RIGHT, 0, {"L2": "a"}, 60000), (RIGHT, 1, {"L2": "b"}, 330000),
              (RIGHT, 2, {"L2": "c"}, 90000), (LEFT, 2, {"L1": "C"}, 90000), (RIGHT, 3, {"L2": "d"}, 60000),
              (LEFT, 3, {"L1": "D"}, 60000)]
    assert _run(window, inputs) == [
        (0, {"L1": "A"}, {"L2": "a"}, 60000),
        (2, None, {"L2": "c"}, 90000),
        (2, {"L1": "C"}, None, 90000),
        (3, None, {"L2": "d"}, 60000),
        (3, {"L1": "D"}, None, 60000),
    ]


def test_grace_writes_an_unmatched_row_once_stream_time_passes_its_window_end_plus_grace():
    """LEFT WITHIN 5 s GRACE PERIOD 1 s: the row at 1 s is due once stream time passes 7 s (a row of
    another key at exactly 7 s does not close it, one at 7.001 s does, through the timer); a
    matched row is never written with nulls."""
    window = JoinWindow("LEFT", 5000, 5000, 1000)
    base = [(LEFT, 1, {"V": "l1"}, 0), (LEFT, 2, {"V": "l2"}, 1000), (RIGHT, 1, {"V": "r1"}, 2000)]
    assert _run(window, [*base, (RIGHT, 9, {"V": "t"}, 7000)]) == [(1, {"V": "l1"}, {"V": "r1"}, 2000)]
    assert _run(window, [*base, (RIGHT, 9, {"V": "t"}, 7001)]) == [
        (1, {"V": "l1"}, {"V": "r1"}, 2000), (2, {"V": "l2"}, None, 1000)]


def test_a_row_of_the_same_key_closes_windows_before_it_joins():
    """With a grace period, a record that advances stream time first writes its key's closed
    unmatched rows (Kafka Streams' emitNonJoinedOuterRecords), then its own join."""
    window = JoinWindow("LEFT", 1000, 1000, 0)
    out = _run(window, [(LEFT, 1, {"V": "a"}, 0), (LEFT, 1, {"V": "b"}, 5000), (RIGHT, 1, {"V": "r"}, 5500)],
               batch_each=False)
    assert out == [(1, {"V": "a"}, None, 0), (1, {"V": "b"}, {"V": "r"}, 5500)]


def test_right_join_preserves_the_right_side_and_uses_its_window():
    """RIGHT JOIN is the right stream's left join (ksqlDB's StreamStreamJoinBuilder): a right row
    looks at left rows in [t - before, t + after]."""
    window = JoinWindow("RIGHT", 1000, 3000, None)
    out = _run(window, [(RIGHT, 1, {"R": 1}, 10000), (LEFT, 1, {"L": "late"}, 12500), (LEFT, 1, {"L": "early"}, 8500)])
    assert out == [(1, None, {"R": 1}, 10000), (1, {"L": "late"}, {"R": 1}, 12500)]


def test_null_keys_outer_side_written_at_once_other_side_dropped():
    window = JoinWindow("LEFT", 1000, 1000, 1000)
    out = _run(window, [(LEFT, None, {"L": 1}, 10), (RIGHT, None, {"R": 1}, 10)])
    assert out == [(None, {"L": 1}, None, 10)]


def test_rows_are_evicted_after_the_window_store_retention():
    """A row stays joinable until stream time passes its timestamp + before + after + grace;
    JoinWindows.of's grace is max(24 h - 2 * before, 0)."""
    window = JoinWindow("LEFT", 1000, 1000, None)
    assert window.retention_ms == 2000 + 24 * 3600 * 1000 - 2000
    graced = JoinWindow("FULL", 1000, 1000, 500)
    state = KeyState([])
    process_batch(graced, state, [Record(LEFT, 100, 0, 0, '"l"')], -1)
    assert next_deadline(graced, state) == 100 + 1000 + 500
    assert on_time(graced, state, 1600) == []
    writes = on_time(graced, state, 1601)
    assert [(w.left, w.right, w.ts) for w in writes] == [('"l"', None, 100)]
    assert next_deadline(graced, state) == 100 + 2500
    on_time(graced, state, 2600)
    assert state.rows == []
    assert next_deadline(graced, state) is None


def test_only_ksqldb_join_kinds_make_a_window():
    with pytest.raises(StatementError):
        JoinWindow("CROSS", 1, 1, None)


def test_inner_join_with_grace_drops_rows_beyond_the_grace_of_stream_time():
    """joins.json "stream stream inner join with out of order and custom grace period" (WITHIN 1
    minute GRACE PERIOD 1 minute): once B at 330 s moved stream time, the rows at 90 s and 60 s are
    out of the window stores (retention 180 s) and join nothing; only A and a are joined. Stream
    time is both sides' (Kafka Streams' shared time tracker), where Spark's own join took the
    smaller of its two sides' watermarks and joined them."""
    window = JoinWindow("INNER", 60000, 60000, 60000)
    inputs = [(LEFT, 0, {"L1": "A"}, 0), (RIGHT, 0, {"L2": "a"}, 60000), (LEFT, 1, {"L1": "B"}, 330000),
              (LEFT, 2, {"L1": "C"}, 90000), (RIGHT, 2, {"L2": "c"}, 90000), (LEFT, 3, {"L1": "D"}, 60000),
              (RIGHT, 3, {"L2": "d"}, 60000)]
    assert _run(window, inputs) == [(0, {"L1": "A"}, {"L2": "a"}, 60000)]


def test_inner_join_without_grace_writes_joined_rows_only():
    """joins.json "stream stream inner join" rows: no side is outer, unmatched rows are never written."""
    window = JoinWindow("INNER", 11000, 11000, None)
    inputs = [(LEFT, 0, {"V": "zero"}, 0), (RIGHT, 0, {"F": "blah"}, 10000), (LEFT, 10, {"V": "100"}, 11000),
              (LEFT, 0, {"V": "foo"}, 13000), (RIGHT, 0, {"F": "a"}, 15000), (RIGHT, None, {"F": "k"}, 16000)]
    assert _run(window, inputs) == [(0, {"V": "zero"}, {"F": "blah"}, 10000), (0, {"V": "foo"}, {"F": "blah"}, 13000),
                                    (0, {"V": "foo"}, {"F": "a"}, 15000)]


def test_right_join_with_grace_uses_the_query_stream_time_not_each_window_store_own():
    """joins.json "stream stream right join with out of order and custom grace period": a known
    difference. Kafka Streams' window stores each track their own side's stream time: the right
    store saw 90 s at most, so d (60 s) is still in it when D (90 s) arrives and ksqlDB writes D
    joined with d. The operator has one stream time for both sides (the query's watermark, 330 s
    after the left row B): d's window closed, it is written at once with nulls, and D joins
    nothing. Spark gives an operator one watermark per query, not one per input."""
    window = JoinWindow("RIGHT", 60000, 60000, 60000)
    inputs = [(LEFT, 0, {"L1": "A"}, 0), (RIGHT, 0, {"L2": "a"}, 60000), (LEFT, 1, {"L1": "B"}, 330000),
              (LEFT, 2, {"L1": "C"}, 90000), (RIGHT, 2, {"L2": "c"}, 90000), (RIGHT, 3, {"L2": "d"}, 60000),
              (LEFT, 3, {"L1": "D"}, 90000)]
    ksqldb_first_three = [(0, {"L1": "A"}, {"L2": "a"}, 60000), (2, None, {"L2": "c"}, 90000),
                          (3, None, {"L2": "d"}, 60000)]
    # ksqlDB writes a fourth record, (3, {"L1": "D"}, {"L2": "d"}, 90000)
    assert _run(window, inputs) == ksqldb_first_three
