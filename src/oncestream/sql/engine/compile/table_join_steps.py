"""The per-key steps of table-table joins (``table_joins``), plain Python so they are tested
without Spark: Kafka Streams' KTable-KTable join rules (``join_change``), its processing order of
a key's records (``processing_order``), a key's micro-batch (``table_table_step``; n-way joins of
tables on one key: ``nway_table_step``) and the WHERE stage's tombstone rule (``where_step``)."""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from oncestream.sql.errors import StatementError

LEFT, RIGHT = 0, 1

KINDS = ("INNER", "LEFT", "RIGHT", "FULL")


@dataclass(frozen=True)
class JoinOutput:
    """One write of the join for a key: the two sides' rows (JSON or None) and whether it is a
    tombstone (then the rows are the last ones known, for the key only); ``old_left``/``old_right``
    and ``had_old``: the key's join result before the change (Kafka Streams' old value), which
    decides whether a row failing WHERE writes a tombstone."""

    left: Any
    right: Any
    delete: bool
    old_left: Any = None
    old_right: Any = None
    had_old: bool = False


def _preserved(kind: str, side: int) -> bool:
    return kind == "FULL" or (kind == "LEFT" and side == LEFT) or (kind == "RIGHT" and side == RIGHT)


def _exists(kind: str, left: Any, right: Any) -> bool:
    """Whether the join has a row for sides ``left`` and ``right``."""
    return (left is not None and right is not None) or (left is not None and _preserved(kind, LEFT)) or \
        (right is not None and _preserved(kind, RIGHT))


def join_change(kind: str, side: int, old: Any, new: Any, other: Any) -> JoinOutput | None:
    """What a change of ``side``'s row for a key (``old`` -> ``new``, None: absent) writes while
    the other side's row is ``other`` (Kafka Streams' KTableKTable{Inner,Left,Right,Outer}Join
    with old values)."""
    if kind not in KINDS:
        raise StatementError(f"join type {kind} is not supported")

    def rows(mine: Any, theirs: Any) -> tuple[Any, Any]:
        return (mine, theirs) if side == LEFT else (theirs, mine)

    before = rows(old, other)
    had_old = _exists(kind, *before)

    def write(mine: Any, theirs: Any, delete: bool) -> JoinOutput:
        return JoinOutput(*rows(mine, theirs), delete=delete, old_left=before[0], old_right=before[1], had_old=had_old)

    if other is None:
        if not _preserved(kind, side) or (new is None and old is None):
            return None
        if new is None:
            return write(old, None, True)
        return write(new, None, False)
    if new is None and not _preserved(kind, 1 - side):
        return write(old, other, True)
    return write(new, other, False)


def processing_order(sides: Sequence[int], rowtimes: Sequence[int], partitions: Sequence[int],
                     offsets: Sequence[int]) -> list[int]:
    """Indexes of a key's records in the order Kafka Streams processes them: each (side,
    partition) in offset order, the one whose next record has the smallest ROWTIME first."""
    queues: dict[tuple[int, int], list[int]] = {}
    for i, (side, partition) in enumerate(zip(sides, partitions, strict=True)):
        queues.setdefault((int(side), int(partition)), []).append(i)
    for queue in queues.values():
        queue.sort(key=lambda i: int(offsets[i]))
    heap = [(int(rowtimes[q[0]]), source, 0) for source, q in queues.items()]
    heapq.heapify(heap)
    order: list[int] = []
    while heap:
        _ts, source, position = heapq.heappop(heap)
        queue = queues[source]
        order.append(queue[position])
        if position + 1 < len(queue):
            heapq.heappush(heap, (int(rowtimes[queue[position + 1]]), source, position + 1))
    return order


def table_table_step(kind: str, sides: Sequence[int], rows: Sequence[str | None], order: Sequence[int],
                     left: str | None, right: str | None) -> tuple[list[JoinOutput], str | None, str | None]:
    """One key's micro-batch: the changes (``rows[i]`` of ``sides[i]``, None for a tombstone)
    in ``order`` against the state (``left``, ``right``). Returns the writes and the new state."""
    out: list[JoinOutput] = []
    current = [left, right]
    for i in order:
        side = int(sides[i])
        new = rows[i] if isinstance(rows[i], str) else None
        written = join_change(kind, side, current[side], new, current[1 - side])
        current[side] = new
        if written is not None:
            out.append(written)
    return out, current[0], current[1]


def _joined(kinds: Sequence[str], rows: Sequence[Any], upto: int) -> tuple[Any, ...] | None:
    """The value of the first ``upto`` + 1 tables joined (Kafka Streams' value getter of the
    join chain): a tuple of the tables' rows (None for an absent one), or None when the chain has
    no row for the key."""
    value: tuple[Any, ...] | None = (rows[0],) if rows[0] is not None else None
    for j in range(1, upto + 1):
        right = rows[j]
        if not _exists(kinds[j - 1], value, right):
            value = None
        else:
            value = (*(value if value is not None else (None,) * j), right)
    return value


@dataclass(frozen=True)
class NwayOutput:
    """One write of an n-way table join for a key: each table's row (None: absent), whether it is
    a tombstone, and the key's result before the change (``had_old``: there was one). Its
    ROWTIME is Kafka Streams' join result timestamp, the larger of the change's and the other
    tables' present rows' (``KTableKTable*Join``), also for a tombstone: the change's table's
    ROWTIME in ``rows`` is therefore the change's (``table_joins``), not the last row's."""

    rows: tuple[Any, ...]
    delete: bool
    old_rows: tuple[Any, ...]
    had_old: bool
    record: int = -1    # the index of the change that wrote it (``nway_table_step``)


def nway_change(kinds: Sequence[str], side: int, new: Any, state: Sequence[Any]) -> NwayOutput | None:
    """What a change of table ``side``'s row for a key (``new``; None: deleted) writes, the
    tables' rows before it being ``state``: ``kinds[j]`` joins the first j + 1 tables with table
    j + 1 (the same key for all: Kafka Streams chains KTable-KTable joins, each forwarding its
    change with the old value to the next, which reads the other side through its value getter).
    """
    n = len(kinds) + 1
    width = len(state)
    if width != n:
        raise StatementError(f"an n-way join of {n} tables got the state of {width}")
    if side == 0:
        old_value: Any = state[0]
        new_value: Any = new
        first = 1
        is_left = True
    else:
        old_value, new_value, first, is_left = state[side], new, side, False
    result: JoinOutput | None = None
    for j in range(first, n):
        if is_left:
            left_old = (old_value,) if j == 1 and old_value is not None else old_value
            left_new = (new_value,) if j == 1 and new_value is not None else new_value
            result = join_change(kinds[j - 1], LEFT, left_old, left_new, state[j])
        else:
            result = join_change(kinds[j - 1], RIGHT, old_value, new_value, _joined(kinds, state, j - 1))
        if result is None:
            return None
        # the next join sees this join's change as its left side's (new, old)
        new_value = None if result.delete else _flat(result.left, result.right, j)
        old_value = _flat(result.old_left, result.old_right, j) if result.had_old else None
        is_left = True
    if result is None:
        return None
    return NwayOutput(_flat(result.left, result.right, n - 1), result.delete,
                      _flat(result.old_left, result.old_right, n - 1), result.had_old)


def _flat(left: Any, right: Any, j: int) -> tuple[Any, ...]:
    """The rows of tables 0..j from join j's (left value, right row)."""
    return (*(left if left is not None else (None,) * j), right)


def nway_table_step(kinds: Sequence[str], sides: Sequence[int], rows: Sequence[Any], order: Sequence[int],
                    state: Sequence[Any]) -> tuple[list[NwayOutput], list[Any]]:
    """One key's micro-batch of an n-way table join: the changes (``rows[i]`` of table
    ``sides[i]``, None for a tombstone) in ``order`` against ``state`` (each table's row).
    Returns the writes (each with the index ``i`` of its change) and the new state."""
    out: list[NwayOutput] = []
    current = list(state)
    for i in order:
        side = int(sides[i])
        new = rows[i] if isinstance(rows[i], str) else None
        written = nway_change(kinds, side, new, current)
        current[side] = new
        if written is not None:
            out.append(dataclasses.replace(written, record=i))
    return out, current


def stream_table_rows(rows: Sequence[tuple[int, int, int, int, str | None]], current: str | None,
                      left: bool) -> tuple[list[tuple[str, str | None]], str | None]:
    """One key's micro-batch of a stream-table join: ``rows`` (side: 0 table, 1 stream; ROWTIME,
    partition, offset, row JSON or None for a table tombstone) against the table's ``current``
    row, in (ROWTIME, table first, partition, offset) order. Returns the (stream row, table row)
    pairs joined (INNER: only with a table row; LEFT: every stream row) and the table row to keep."""
    joined: list[tuple[str, str | None]] = []
    for side, _ts, _partition, _offset, row in sorted(rows, key=lambda r: (r[1], r[0], r[2], r[3])):
        if side == 0:
            current = row
        elif row is not None and (current is not None or left):
            joined.append((row, current))
    return joined, current


def where_write(delete: bool, keep: Any, keep_old: Any) -> bool | None:
    """A join write through WHERE, as Kafka Streams' table filter with old values: a row
    (``delete`` false, ``keep`` true) is written; a tombstone or a row failing WHERE (null fails)
    becomes a tombstone if the old result passed WHERE (``keep_old``), else nothing. Returns
    whether the write is a tombstone, or None for no write."""
    if not delete and keep is True:
        return False
    return True if keep_old is True else None
