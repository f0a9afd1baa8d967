"""N-way table joins on one key (``compile.table_join_steps.nway_table_step``): ksqlDB's own
multi-joins.json table-table-table cases, the chain's rules for deletes and outer joins, and
agreement with the two-way step (``table_table_step``, itself checked on joins.json) for two
tables."""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

import pytest

from oncestream.sql.engine.compile.table_join_steps import (
    KINDS,
    nway_change,
    nway_table_step,
    processing_order,
    stream_table_rows,
    table_table_step,
)

Record = tuple[int, dict[str, Any] | None, int]          # table, value, timestamp


def _run(kinds: list[str], records: list[Record], batched: bool) -> list[tuple[tuple[Any, ...], bool]]:
    """The writes for one key: (each table's row as a dict or None, tombstone)."""
    batches = [records] if batched else [[r] for r in records]
    state: list[Any] = [None] * (len(kinds) + 1)
    out: list[tuple[tuple[Any, ...], bool]] = []
    for batch in batches:
        sides = [t for t, _v, _ts in batch]
        rows = [None if v is None else json.dumps(v) for _t, v, _ts in batch]
        offsets = [records.index(r) for r in batch]
        order = processing_order(sides, [ts for *_x, ts in batch], [0] * len(batch), offsets)
        written, state = nway_table_step(kinds, sides, rows, order, state)
        out += [(tuple(None if r is None else json.loads(r) for r in w.rows), w.delete) for w in written]
    return out


@pytest.mark.parametrize("batched", [True, False])
def test_ksqldb_table_table_table_inner_inner(batched: bool) -> None:
    # multi-joins.json "table-table-table - inner-inner"
    records: list[Record] = [(0, {"V0": 1}, 0), (1, {"V0": 2}, 1), (2, {"V0": 3}, 2), (0, {"V0": 4}, 1000)]
    assert _run(["INNER", "INNER"], records, batched) == [
        (({"V0": 1}, {"V0": 2}, {"V0": 3}), False), (({"V0": 4}, {"V0": 2}, {"V0": 3}), False)]


@pytest.mark.parametrize("batched", [True, False])
def test_ksqldb_table_table_table_inner_full(batched: bool) -> None:
    # multi-joins.json "table-table-table - inner-full": T3 alone is a row of the FULL join
    records: list[Record] = [(0, {"V0": 1}, 0), (2, {"V0": 3}, 2), (1, {"V0": 2}, 3), (0, {"V0": 4}, 1000)]
    assert _run(["INNER", "FULL"], records, batched) == [
        ((None, None, {"V0": 3}), False), (({"V0": 1}, {"V0": 2}, {"V0": 3}), False),
        (({"V0": 4}, {"V0": 2}, {"V0": 3}), False)]


@pytest.mark.parametrize("batched", [True, False])
def test_ksqldb_four_tables(batched: bool) -> None:
    # multi-joins.json "table-table-table-table - qualified select *"
    records: list[Record] = [(0, {"V0": 1}, 0), (1, {"V0": 2}, 1), (2, {"V0": 3}, 2), (3, {"V0": 4}, 3)]
    assert _run(["INNER", "INNER", "INNER"], records, batched) == [
        (({"V0": 1}, {"V0": 2}, {"V0": 3}, {"V0": 4}), False)]


def test_a_delete_in_the_middle_of_an_inner_chain_is_a_tombstone_then_nothing() -> None:
    records: list[Record] = [(0, {"a": 1}, 0), (1, {"b": 1}, 1), (2, {"c": 1}, 2), (1, None, 3), (2, {"c": 2}, 4),
                             (1, {"b": 2}, 5)]
    assert _run(["INNER", "INNER"], records, batched=False) == [
        (({"a": 1}, {"b": 1}, {"c": 1}), False),
        (({"a": 1}, {"b": 1}, {"c": 1}), True),           # T2 deleted: the key's row goes
        (({"a": 1}, {"b": 2}, {"c": 2}), False)]          # T3's change while T2 is absent writes nothing


def test_left_left_keeps_the_first_table_row_through_the_chain() -> None:
    records: list[Record] = [(0, {"a": 1}, 0), (2, {"c": 1}, 1), (1, {"b": 1}, 2), (2, None, 3), (0, None, 4)]
    assert _run(["LEFT", "LEFT"], records, batched=False) == [
        (({"a": 1}, None, None), False),
        (({"a": 1}, None, {"c": 1}), False),
        (({"a": 1}, {"b": 1}, {"c": 1}), False),
        (({"a": 1}, {"b": 1}, None), False),
        (({"a": 1}, {"b": 1}, None), True)]


def test_an_inner_join_after_a_right_join_sees_the_right_table_alone() -> None:
    # T1 RIGHT JOIN T2 has T2's row alone; joining T3 to it needs T3 only
    records: list[Record] = [(1, {"b": 1}, 0), (2, {"c": 1}, 1), (0, {"a": 1}, 2)]
    assert _run(["RIGHT", "INNER"], records, batched=False) == [
        ((None, {"b": 1}, {"c": 1}), False), (({"a": 1}, {"b": 1}, {"c": 1}), False)]


def test_the_old_result_is_the_chain_before_the_change() -> None:
    state = ['{"a":1}', '{"b":1}', '{"c":1}']
    written = nway_change(["INNER", "INNER"], 1, '{"b":2}', state)
    assert written is not None
    assert written.had_old
    assert written.old_rows == ('{"a":1}', '{"b":1}', '{"c":1}')
    assert written.rows == ('{"a":1}', '{"b":2}', '{"c":1}')
    assert not written.delete


@pytest.mark.parametrize("kind", KINDS)
def test_two_tables_agree_with_the_two_way_step(kind: str) -> None:
    rng = random.Random(f"nway-{kind}")
    for _ in range(200):
        n = rng.randint(1, 8)
        sides = [rng.randint(0, 1) for _ in range(n)]
        rows = [None if rng.random() < 0.3 else json.dumps({"v": rng.randint(0, 3)}) for _ in range(n)]
        order = list(range(n))
        two_way, left, right = table_table_step(kind, sides, rows, order, None, None)
        nway, state = nway_table_step([kind], sides, rows, order, [None, None])
        assert [(w.rows, w.delete, w.old_rows, w.had_old) for w in nway] == \
            [((w.left, w.right), w.delete, (w.old_left, w.old_right), w.had_old) for w in two_way]
        assert state == [left, right]


def test_each_write_names_the_change_that_wrote_it() -> None:
    """A write's ROWTIME is its change's (Kafka Streams stamps a tombstone with the deleting
    record's time): ``record`` is the index of that change, in the batch's processing order."""
    sides = [1, 0, 1, 0]
    rows = ['{"b":1}', '{"a":1}', None, None]
    written, _state = nway_table_step(["INNER"], sides, rows, [1, 0, 2, 3], [None, None])
    assert [(w.record, w.delete) for w in written] == [(0, False), (2, True)]


def test_every_pair_of_kinds_is_accepted() -> None:
    for kinds in itertools.product(KINDS, repeat=2):
        assert _run(list(kinds), [(0, {"a": 1}, 0), (1, {"b": 1}, 1), (2, {"c": 1}, 2)], batched=True)[-1][0] == (
            {"a": 1}, {"b": 1}, {"c": 1})


def test_stream_table_rows_join_each_stream_row_with_the_table_row_of_its_time() -> None:
    # (side 0 table / 1 stream, ROWTIME, partition, offset, row): the table row at ROWTIME 5 is
    # seen by the stream row at 5 (table first on a tie), the tombstone at 8 by the row at 9
    rows = [(1, 9, 0, 2, "s9"), (0, 5, 0, 0, "t5"), (1, 5, 0, 1, "s5"), (1, 1, 0, 0, "s1"), (0, 8, 0, 1, None)]
    assert stream_table_rows(rows, None, left=False) == ([("s5", "t5")], None)
    assert stream_table_rows(rows, "t0", left=True) == ([("s1", "t0"), ("s5", "t5"), ("s9", None)], None)
