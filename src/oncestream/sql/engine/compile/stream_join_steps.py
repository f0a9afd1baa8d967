"""The per-key steps of stream-stream joins (INNER, LEFT, RIGHT, FULL OUTER), plain Python so they
are tested without Spark: Kafka Streams' ``KStreamKStreamJoin`` as ksqlDB configures it (an INNER
join writes only the joined rows: no side is outer).

ksqlDB builds ``JoinWindows.of(before).after(after)`` when the statement has no ``GRACE PERIOD``
(grace ``max(24 h - 2 * before, 0)``, the spurious-result fix off) and
``JoinWindows.ofTimeDifferenceAndGrace(before, grace).after(after)`` with one (KIP-633, the fix
on). A RIGHT join is the right stream's left join with the left one (``StreamStreamJoinBuilder``),
so the *primary* side, whose window is ``[t - before, t + after]``, is the left stream for LEFT and
FULL, the right stream for RIGHT; a secondary row at ``t`` matches primary rows in
``[t - after, t + before]``.

A record at ``t`` of one side, against the key's buffered rows (Kafka Streams' window stores and,
with a grace period, its outer-join store):

- stream time advances to ``max(stream time, t)``; with a grace period, when ``t`` is the stream
  time, the key's unmatched rows whose window closed (``ts + lookback + grace < stream time``,
  lookback ``after`` for a primary row, ``before`` for a secondary one) are written first, each
  with nulls for the other side and its own timestamp;
- it joins every buffered row of the other side in its window that the other side's window store
  still holds (``ts > stream time - (before + after + grace)``), each write timestamped with the
  larger of the two rows' timestamps; a matched row of the other side leaves the outer-join store;
- unmatched and of an outer side (LEFT/RIGHT: the primary one; FULL: both): without a grace period
  it is written at once with nulls (later matches write joined rows too: the "spurious" results
  ksqlDB's tests expect); with one it waits in the outer-join store, unless its own window already
  closed (``t + lookahead < stream time``), when it is written at once;
- a record whose key is null is written at once with nulls by an outer side and dropped otherwise.

Stream time here is the larger of the query's (the caller passes Spark's watermark: the largest
ROWTIME of earlier micro-batches) and the key's rows so far; Kafka Streams' is its task's (one per
partition), so rows of other keys in the same micro-batch move it only from the next batch on.
Kafka Streams also throttles the outer-join store's scan to one per second of wall-clock time (a
performance measure); this writes a row as soon as its window closes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from oncestream.sql.errors import StatementError

LEFT, RIGHT = 0, 1

JOIN_KINDS = ("INNER", "LEFT", "RIGHT", "FULL")

DEFAULT_GRACE_MS = 24 * 60 * 60 * 1000


@dataclass(frozen=True)
class JoinWindow:
    """A stream-stream join's kind and window (ms): ``grace_ms`` None when the statement has no
    GRACE PERIOD (ksqlDB's eager emission of an outer join's unmatched rows)."""

    kind: str
    before_ms: int
    after_ms: int
    grace_ms: int | None

    def __post_init__(self) -> None:
        if self.kind not in JOIN_KINDS:
            raise StatementError(f"join type {self.kind} is not a stream-stream join")

    @property
    def eager(self) -> bool:
        return self.grace_ms is None

    @property
    def effective_grace_ms(self) -> int:
        """The grace Kafka Streams uses: ``JoinWindows.of``'s ``max(24 h - 2 * before, 0)`` without GRACE PERIOD."""
        if self.grace_ms is None:
            return max(DEFAULT_GRACE_MS - 2 * self.before_ms, 0)
        return self.grace_ms

    @property
    def retention_ms(self) -> int:
        """How long a window store keeps a row: the window's size plus grace."""
        return self.before_ms + self.after_ms + self.effective_grace_ms

    @property
    def primary(self) -> int:
        return RIGHT if self.kind == "RIGHT" else LEFT

    def outer(self, side: int) -> bool:
        """Whether ``side``'s unmatched rows are written with nulls."""
        return self.kind == "FULL" or (self.kind != "INNER" and side == self.primary)

    def reach(self, side: int) -> tuple[int, int]:
        """How far (before, after) a row of ``side`` looks into the other side's rows."""
        return (self.before_ms, self.after_ms) if side == self.primary else (self.after_ms, self.before_ms)

    def closes_at(self, row: Buffered) -> int:
        """The stream time after which ``row``'s unmatched write is due (Kafka Streams' outer-join
        store: the row's timestamp + its look-back + grace)."""
        return row.ts + self.reach(row.side)[1] + self.effective_grace_ms


@dataclass(frozen=True)
class Record:
    """One input row of a key: its side, timestamp (ROWTIME ms), partition, offset and value
    (JSON); ``keyless``: its join key is null."""

    side: int
    ts: int
    partition: int
    offset: int
    row: str
    keyless: bool = False


@dataclass(frozen=True)
class Buffered:
    """A row in a side's window store; ``pending``: unmatched and waiting in the outer-join store."""

    side: int
    ts: int
    row: str
    pending: bool = False


@dataclass(frozen=True)
class Write:
    """One output row: the left and right rows (JSON, None for the absent side) and its timestamp."""

    left: str | None
    right: str | None
    ts: int


@dataclass
class KeyState:
    """A key's buffered rows (both sides, in arrival order) and the stream time it has seen."""

    rows: list[Buffered]
    stream_time: int = -1


def _write(side: int, mine: str | None, other: str | None, ts: int) -> Write:
    return Write(mine, other, ts) if side == LEFT else Write(other, mine, ts)


def _emit_closed(window: JoinWindow, state: KeyState, out: list[Write]) -> None:
    """Writes the pending rows whose window closed, in (timestamp, primary side first) order."""
    due = [r for r in state.rows if r.pending and window.closes_at(r) < state.stream_time]
    if not due:
        return
    for row in sorted(due, key=lambda r: (r.ts, r.side != window.primary)):
        out.append(_write(row.side, row.row, None, row.ts))
    state.rows = [replace(r, pending=False) if r.pending and window.closes_at(r) < state.stream_time else r
                  for r in state.rows]


def _evict(window: JoinWindow, state: KeyState) -> None:
    """Drops rows the window stores no longer hold (a pending row stays until written)."""
    horizon = state.stream_time - window.retention_ms
    state.rows = [r for r in state.rows if r.pending or r.ts > horizon]


def process(window: JoinWindow, state: KeyState, record: Record) -> list[Write]:
    """The writes of one record of a key (see the module docstring); updates ``state``."""
    out: list[Write] = []
    state.stream_time = max(state.stream_time, record.ts)
    if record.keyless:
        if window.outer(record.side):
            out.append(_write(record.side, record.row, None, record.ts))
        return out
    if not window.eager and record.ts == state.stream_time:
        _emit_closed(window, state, out)
    before, after = window.reach(record.side)
    time_from, time_to = max(0, record.ts - before), max(0, record.ts + after)
    visible_after = state.stream_time - window.retention_ms
    matched_ts: set[int] = set()
    other = [r for r in state.rows if r.side != record.side and time_from <= r.ts <= time_to and r.ts > visible_after]
    for r in sorted(other, key=lambda r: r.ts):
        out.append(_write(record.side, record.row, r.row, max(record.ts, r.ts)))
        matched_ts.add(r.ts)
    if matched_ts:
        # Kafka Streams removes the matched rows' (side, key, timestamp) entries from its outer-join store
        state.rows = [replace(r, pending=False) if r.side != record.side and r.ts in matched_ts else r
                      for r in state.rows]
    pending = False
    if not other and window.outer(record.side):
        if window.eager or time_to < state.stream_time:
            out.append(_write(record.side, record.row, None, record.ts))
        else:
            pending = True
    state.rows.append(Buffered(record.side, record.ts, record.row, pending))
    _evict(window, state)
    return out


def process_batch(window: JoinWindow, state: KeyState, records: Sequence[Record], watermark_ms: int) -> list[Write]:
    """A key's micro-batch: stream time starts at the query's (``watermark_ms``), the records are
    processed in order, then rows whose window closed meanwhile are written."""
    state.stream_time = max(state.stream_time, watermark_ms)
    out: list[Write] = []
    for record in records:
        out += process(window, state, record)
    if not window.eager:
        _emit_closed(window, state, out)
    _evict(window, state)
    return out


def on_time(window: JoinWindow, state: KeyState, watermark_ms: int) -> list[Write]:
    """The writes due when the query's stream time reached ``watermark_ms`` with no row of the key."""
    state.stream_time = max(state.stream_time, watermark_ms)
    out: list[Write] = []
    if not window.eager:
        _emit_closed(window, state, out)
    _evict(window, state)
    return out


def next_deadline(window: JoinWindow, state: KeyState) -> int | None:
    """The stream time at which the key next needs attention: the earliest pending row's window
    close, else the eviction of its oldest row; None when it holds no rows."""
    pending = [window.closes_at(r) for r in state.rows if r.pending]
    if pending:
        return min(pending)
    if state.rows:
        return min(r.ts for r in state.rows) + window.retention_ms
    return None
