"""The per-key steps of foreign-key table-table joins (Kafka Streams' KIP-213, as ksqlDB runs
``left JOIN right ON <expression of left> = right.<primary key>``), plain Python so they are
tested without Spark (``fk_joins`` builds the plan).

Two steps, one per Spark operator:

- ``subscriptions`` (keyed by the left table's key): a left row's changes become messages to the
  group of its foreign key: ``SUB`` (the row, and whether the key had a row before), ``UNSUB``
  from the old foreign key when it changed, ``DELETE`` (to the old foreign key's group) when the
  row is deleted.
- ``foreign_key_step`` (keyed by the foreign key): the right row of that key and the left rows
  subscribed to it; a right change writes every subscribed left row joined with it (INNER: a
  tombstone for each when it is deleted; LEFT: the rows with nulls), a ``SUB`` writes the row
  joined (INNER without a right row: a tombstone if the key had a row before, else nothing), a
  ``DELETE`` a tombstone.

A left key whose foreign key changes within a micro-batch has messages in two groups, whose writes
Spark puts in no order: the messages say which group holds the key's last one (``final``), and the
other groups drop their writes for that key in that batch, so the key's last write is right (its
intermediate values are coalesced, as ksqlDB's record cache does).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from oncestream.sql.errors import StatementError

SUB, UNSUB, DELETE = "SUB", "UNSUB", "DELETE"
KINDS = ("INNER", "LEFT")


@dataclass(frozen=True)
class Message:
    """A left row's change for the group of foreign key ``group`` (None: no foreign key)."""

    group: str | None
    kind: str
    left_key: str
    row: str | None
    had_old: bool
    final: bool


@dataclass(frozen=True)
class FkWrite:
    """One write of the join: the left key, the two rows (JSON or None), whether it is a
    tombstone, and the index of the event that wrote it (its ROWTIME is that event's: Kafka
    Streams forwards a foreign-key join's result with the timestamp of the record that caused
    it, through the subscription and response topics)."""

    left_key: str
    left: str | None
    right: str | None
    delete: bool
    event: int = -1


def subscriptions(left_key: str, changes: Sequence[tuple[str | None, str | None, str | None]],
                  state: tuple[str | None, str | None] | None) -> tuple[list[Message], tuple[str | None, str | None] | None]:
    """A left key's changes, in order: (row JSON or None for a tombstone, its foreign key, the
    record's key columns as a row), against ``state`` (the key's row and foreign key, or None).
    Returns the messages and the new state. A ``DELETE`` carries the deleted row (or the key
    columns when there was none), which the tombstone's key is taken from."""
    drafts: list[tuple[str | None, str, str | None, bool]] = []
    current = state
    for row, foreign_key, key_row in changes:
        if row is None:
            if current is not None:
                drafts.append((current[1], DELETE, current[0], True))
            else:
                drafts.append((None, DELETE, key_row, False))
            current = None
            continue
        if current is not None and current[1] != foreign_key:
            drafts.append((current[1], UNSUB, None, True))
        drafts.append((foreign_key, SUB, row, current is not None))
        current = (row, foreign_key)
    last_group = drafts[-1][0] if drafts else None
    messages = [Message(group, kind, left_key, row, had_old, group == last_group) for group, kind, row, had_old in drafts]
    return messages, current


def foreign_key_step(kind: str, events: Sequence[tuple[str, Any]], right: str | None,
                     subscribed: dict[str, str]) -> tuple[list[FkWrite], str | None, dict[str, str]]:
    """One foreign key's micro-batch: ``events`` in order, each ("RIGHT", right row JSON or None)
    or ("LEFT", ``Message``), against the key's right row and its subscribed left rows (left key
    -> row). Returns the writes (each with the index of its event) and the new state."""
    if kind not in KINDS:
        raise StatementError(f"{kind} OUTER JOIN on a foreign key is not supported")
    writes: list[FkWrite] = []
    subs = dict(subscribed)
    moved: set[str] = set()
    for i, (source, event) in enumerate(events):
        if source == "RIGHT":
            right = event if isinstance(event, str) else None
            for left_key in sorted(subs, key=_key_order):
                if right is None and kind == "INNER":
                    writes.append(FkWrite(left_key, subs[left_key], None, True, i))
                else:
                    writes.append(FkWrite(left_key, subs[left_key], right, False, i))
            continue
        message: Message = event
        if not message.final:
            moved.add(message.left_key)
        if message.kind == UNSUB:
            subs.pop(message.left_key, None)
        elif message.kind == DELETE:
            subs.pop(message.left_key, None)
            writes.append(FkWrite(message.left_key, message.row, None, True, i))
        else:
            row = message.row
            if row is None:
                raise StatementError("a foreign-key join subscription without its row")
            if message.group is not None:
                subs[message.left_key] = row
            if right is not None and message.group is not None:
                writes.append(FkWrite(message.left_key, row, right, False, i))
            elif kind == "LEFT":
                writes.append(FkWrite(message.left_key, row, None, False, i))
            elif message.had_old:
                writes.append(FkWrite(message.left_key, row, None, True, i))
    return [w for w in writes if w.left_key not in moved], right, subs


def _key_order(left_key: str) -> tuple[int, Any]:
    """Subscribed rows in key order (numbers by value)."""
    try:
        return (0, float(left_key))
    except ValueError:
        return (1, left_key)
