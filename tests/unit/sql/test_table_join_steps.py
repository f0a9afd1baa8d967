"""Table-table join rules (``compile.table_join_steps``) on ksqlDB's own query-validation cases
(joins.json: "table table inner/left/right/outer join", "table to table wrapped single field value
schema on inputs", "table-table - SR-enabled key format - with nulls", "table table join with where
clause"): the records go through the per-key steps as one micro-batch and as one micro-batch per
record (state carried), and both give ksqlDB's outputs in order."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from oncestream.sql.engine.compile.table_join_steps import (
    LEFT,
    RIGHT,
    JoinOutput,
    join_change,
    processing_order,
    table_table_step,
    where_write,
)

L, R = "left_topic", "right_topic"
Record = tuple[str, int, dict[str, Any] | None, int]          # topic, key, value, timestamp
Output = tuple[int, dict[str, Any] | None]


def _run(kind: str, records: list[Record], batched: bool,
         where: Callable[[dict[str, Any]], bool | None] | None = None) -> list[Output]:
    """The outputs of ``records`` (joined value: left columns then right ones, nulls for an
    absent side) through the steps, in one batch or one record per batch."""
    batches = [records] if batched else [[r] for r in records]
    state: dict[int, tuple[str | None, str | None]] = {}
    out: list[Output] = []
    columns = {LEFT: set(), RIGHT: set()}            # type: dict[int, set[str]]
    for _topic, _key, value, _ts in records:
        if value is not None:
            columns[LEFT if _topic == L else RIGHT].update(value)
    for batch in batches:
        for key in dict.fromkeys(k for _t, k, _v, _ts in batch):
            mine = [r for r in batch if r[1] == key]
            sides = [LEFT if t == L else RIGHT for t, _k, _v, _ts in mine]
            rows = [None if v is None else json.dumps(v) for _t, _k, v, _ts in mine]
            offsets = [records.index(r) for r in mine]
            order = processing_order(sides, [ts for *_x, ts in mine], [0] * len(mine), offsets)
            left, right = state.get(key, (None, None))
            written, left, right = table_table_step(kind, sides, rows, order, left, right)
            state[key] = (left, right)

            def merged(left_json: str | None, right_json: str | None) -> dict[str, Any]:
                value = {c: None for c in sorted(columns[LEFT])} | {c: None for c in sorted(columns[RIGHT])}
                value |= json.loads(left_json) if left_json else {}
                return value | (json.loads(right_json) if right_json else {})

            for w in written:
                value = merged(w.left, w.right)
                tombstone: bool | None = w.delete
                if where is not None:
                    keep_old = where(merged(w.old_left, w.old_right)) if w.had_old else None
                    tombstone = where_write(w.delete, where(value), keep_old)
                if tombstone is not None:
                    out.append((key, None if tombstone else value))
    # One batch is processed key by key: only each key's outputs keep ksqlDB's order.
    return sorted(out, key=lambda o: o[0]) if batched else out


def _expect(expected: Sequence[Output], batched: bool) -> list[Output]:
    return sorted(expected, key=lambda o: o[0]) if batched else list(expected)


def _v(name: str | None, value: int | None, f1: str | None, f2: int | None) -> dict[str, Any]:
    return {"NAME": name, "VALUE": value, "F1": f1, "F2": f2}


_INPUTS: list[Record] = [
    (L, 0, {"NAME": "zero", "VALUE": 0}, 0), (R, 0, {"F1": "blah", "F2": 50}, 10000),
    (L, 10, {"NAME": "100", "VALUE": 5}, 11000), (L, 0, {"NAME": "foo", "VALUE": 100}, 13000),
    (R, 0, {"F1": "a", "F2": 10}, 15000), (L, 0, {"NAME": "bar", "VALUE": 99}, 16000),
    (L, 90, {"NAME": "ninety", "VALUE": 90}, 17000)]

CASES = {
    "table table left join": ("LEFT", _INPUTS, [
        (0, _v("zero", 0, None, None)), (0, _v("zero", 0, "blah", 50)), (10, _v("100", 5, None, None)),
        (0, _v("foo", 100, "blah", 50)), (0, _v("foo", 100, "a", 10)), (0, _v("bar", 99, "a", 10)),
        (90, _v("ninety", 90, None, None))]),
    "table table right join": ("RIGHT", [*_INPUTS, (R, 7, {"F1": "b", "F2": 20}, 18000)], [
        (0, _v("zero", 0, "blah", 50)), (0, _v("foo", 100, "blah", 50)), (0, _v("foo", 100, "a", 10)),
        (0, _v("bar", 99, "a", 10)), (7, _v(None, None, "b", 20))]),
    "table table inner join": ("INNER", [*_INPUTS[:5], (R, 15, {"F1": "c", "F2": 20}, 15500), *_INPUTS[5:]], [
        (0, _v("zero", 0, "blah", 50)), (0, _v("foo", 100, "blah", 50)), (0, _v("foo", 100, "a", 10)),
        (0, _v("bar", 99, "a", 10))]),
    "table table outer join": ("FULL", [*_INPUTS[:5], (R, 15, {"F1": "c", "F2": 20}, 15500), _INPUTS[5]], [
        (0, _v("zero", 0, None, None)), (0, _v("zero", 0, "blah", 50)), (10, _v("100", 5, None, None)),
        (0, _v("foo", 100, "blah", 50)), (0, _v("foo", 100, "a", 10)), (15, _v(None, None, "c", 20)),
        (0, _v("bar", 99, "a", 10))]),
}


@pytest.mark.parametrize("batched", [False, True], ids=["record_per_batch", "one_batch"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_ksqldb_table_table_join_cases(name: str, batched: bool) -> None:
    kind, records, expected = CASES[name]
    assert _run(kind, records, batched) == _expect(expected, batched)


@pytest.mark.parametrize("batched", [False, True], ids=["record_per_batch", "one_batch"])
def test_inner_join_tombstones_only_while_the_other_side_exists(batched: bool) -> None:
    """"table to table wrapped single field value schema on inputs": a row whose columns are all
    null is still a row; deleting T1 writes a tombstone, deleting T2 afterwards nothing."""
    records: list[Record] = [(L, 0, {"N1": "a"}, 0), (R, 0, {"N2": "b"}, 10), (L, 0, {"N1": None}, 20),
                             (R, 0, {"N2": None}, 30), (L, 0, {"N1": None}, 40), (L, 0, None, 50), (R, 0, None, 60)]
    assert _run("INNER", records, batched) == [
        (0, {"N1": "a", "N2": "b"}), (0, {"N1": None, "N2": "b"}), (0, {"N1": None, "N2": None}),
        (0, {"N1": None, "N2": None}), (0, None)]


@pytest.mark.parametrize("batched", [False, True], ids=["record_per_batch", "one_batch"])
def test_left_join_with_tombstones_on_both_sides(batched: bool) -> None:
    """"table-table - SR-enabled key format - with nulls": deleting the right row rewrites the
    left one with nulls; deleting the left row writes a tombstone; a right row without a left
    row writes nothing."""
    records: list[Record] = [(L, 0, {"NAME": "zero"}, 1), (R, 0, {"F1": "blah"}, 2), (R, 0, None, 3),
                             (L, 0, None, 4), (R, 0, {"F1": "foo"}, 5), (L, 0, {"NAME": "goo"}, 6)]
    assert _run("LEFT", records, batched) == [
        (0, {"NAME": "zero", "F1": None}), (0, {"NAME": "zero", "F1": "blah"}), (0, {"NAME": "zero", "F1": None}),
        (0, None), (0, {"NAME": "goo", "F1": "foo"})]


@pytest.mark.parametrize("batched", [False, True], ids=["record_per_batch", "one_batch"])
def test_where_writes_a_tombstone_only_for_a_key_whose_last_write_was_a_row(batched: bool) -> None:
    """"table table join with where clause" (WHERE t.value > 10 AND tt.f2 > 5)."""
    records: list[Record] = [
        (L, 0, {"NAME": "zero", "VALUE": 0}, 0), (R, 0, {"F1": "blah", "F2": 4}, 10000),
        (L, 0, {"NAME": "foo", "VALUE": 100}, 13000), (R, 0, {"F1": "a", "F2": 10}, 15000),
        (L, 0, {"NAME": "bar", "VALUE": 99}, 16000), (L, 90, {"NAME": "ninety", "VALUE": 90}, 17000),
        (R, 90, {"F1": "b", "F2": 10}, 18000), (R, 90, None, 19000)]

    def where(v: dict[str, Any]) -> bool | None:
        if v["VALUE"] is None or v["F2"] is None:
            return None
        return bool(v["VALUE"] > 10 and v["F2"] > 5)

    got = [(k, None if v is None else {c: v[c] for c in ("NAME", "F1", "F2")})
           for k, v in _run("INNER", records, batched, where)]
    assert got == _expect([(0, {"NAME": "foo", "F1": "a", "F2": 10}), (0, {"NAME": "bar", "F1": "a", "F2": 10}),
                           (90, {"NAME": "ninety", "F1": "b", "F2": 10}), (90, None)], batched)


def test_full_outer_join_deletes_once_both_sides_are_gone() -> None:
    assert join_change("FULL", LEFT, '{"a":1}', None, '{"b":2}') == \
        JoinOutput(None, '{"b":2}', delete=False, old_left='{"a":1}', old_right='{"b":2}', had_old=True)
    assert join_change("FULL", RIGHT, '{"b":2}', None, None) == \
        JoinOutput(None, '{"b":2}', delete=True, old_right='{"b":2}', had_old=True)
    assert join_change("FULL", RIGHT, None, None, None) is None


def test_processing_order_follows_each_partition_in_offset_order_smallest_rowtime_first() -> None:
    """Kafka Streams takes the partition whose next record is earliest; within a partition the
    offset order holds even when a later record has an older ROWTIME."""
    sides = [LEFT, LEFT, RIGHT, RIGHT]
    rowtimes = [50, 10, 20, 60]        # left: offsets 0, 1 (second one older); right: offsets 0, 1
    offsets = [0, 1, 0, 1]
    assert processing_order(sides, rowtimes, [0, 0, 0, 0], offsets) == [2, 0, 1, 3]
    # a tie goes to the left table
    assert processing_order([RIGHT, LEFT], [5, 5], [0, 0], [0, 0]) == [1, 0]
