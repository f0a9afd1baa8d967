"""The per-key steps of table-table joins (``table_joins``), plain Python so they are tested
without Spark: Kafka Streams' KTable-KTable join rules (``join_change``), its processing order of
a key's records (``processing_order``), a key's micro-batch (``table_table_step``) and the WHERE
stage's tombstone rule (``where_step``)."""

from __future__ import annotations

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

    left: str | None
    right: str | None
    delete: bool
    old_left: str | None = None
    old_right: str | None = None
    had_old: bool = False


def _preserved(kind: str, side: int) -> bool:
    return kind == "FULL" or (kind == "LEFT" and side == LEFT) or (kind == "RIGHT" and side == RIGHT)


def _exists(kind: str, left: str | None, right: str | None) -> bool:
    """Whether the join has a row for sides ``left`` and ``right``."""
    return (left is not None and right is not None) or (left is not None and _preserved(kind, LEFT)) or \
        (right is not None and _preserved(kind, RIGHT))


def join_change(kind: str, side: int, old: str | None, new: str | None, other: str | None) -> JoinOutput | None:
    """What a change of ``side``'s row for a key (``old`` -> ``new``, None: absent) writes while
    the other side's row is ``other`` (Kafka Streams' KTableKTable{Inner,Left,Right,Outer}Join
    with old values)."""
    if kind not in KINDS:
        raise StatementError(f"join type {kind} is not supported")

    def rows(mine: str | None, theirs: str | None) -> tuple[str | None, str | None]:
        return (mine, theirs) if side == LEFT else (theirs, mine)

    before = rows(old, other)
    had_old = _exists(kind, *before)

    def write(mine: str | None, theirs: str | None, delete: bool) -> JoinOutput:
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


def where_write(delete: bool, keep: Any, keep_old: Any) -> bool | None:
    """A join write through WHERE, as Kafka Streams' table filter with old values: a row
    (``delete`` false, ``keep`` true) is written; a tombstone or a row failing WHERE (null fails)
    becomes a tombstone if the old result passed WHERE (``keep_old``), else nothing. Returns
    whether the write is a tombstone, or None for no write."""
    if not delete and keep is True:
        return False
    return True if keep_old is True else None
