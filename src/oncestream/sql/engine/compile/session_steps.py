"""Session windows as Kafka Streams' ``KStreamSessionWindowAggregate`` writes them (EMIT CHANGES),
as pure functions over one GROUP BY key's state, tested without Spark.

Per input record (event time ``ts``) of a key, in order:

- stream time becomes ``max(stream time, ts)``; the close time is
  ``stream time - grace - gap``. A session whose end is at or before the close time is past the
  session store's retention (gap + grace): it is invisible to later records and leaves the state;
- the record's session is ``[ts, ts]`` merged with every session of the key that ends at or after
  ``ts - gap`` and starts at or before ``ts + gap``: ``[min start, max end]``;
- a merged session that ends before the close time is dropped (Kafka Streams' "Skipping record
  for expired window");
- otherwise, when the merged window is not ``[ts, ts]``, each session merged into it is written
  as a tombstone (keyed by its own window, timestamp its end), in the store's order (end, start);
  then the merged session's result (timestamp: its end, the session's largest event time).

A session keeps its records' aggregate arguments (``Entry``: arrival sequence, event time, the
arguments as JSON), and a merged session's result is the aggregates folded over the records of
all its parts in arrival order (``session_udaf``). For the supported aggregates this is what
ksqlDB's mergers give: COUNT and SUM add, MIN and MAX compare, LATEST_BY_OFFSET and
EARLIEST_BY_OFFSET keep the values with the largest / smallest sequence number, which is the
arrival order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from oncestream.sql.engine.compile.table_udafs import TableUdafError, table_udaf

# The aggregates a session window computes with EMIT CHANGES (``session_udaf``).
SESSION_AGGREGATES = frozenset({"COUNT", "SUM", "MIN", "MAX", "LATEST_BY_OFFSET", "EARLIEST_BY_OFFSET"})


@dataclass(frozen=True)
class SessionWindow:
    """A session window's gap and grace period (ms)."""

    gap_ms: int
    grace_ms: int


@dataclass(frozen=True)
class Entry:
    """One record of a session: its arrival sequence (per key), event time and arguments (JSON)."""

    seq: int
    ts: int
    args: str


@dataclass
class Session:
    """An open session: ``[start, end]`` (event times of its first and last record)."""

    start: int
    end: int
    entries: list[Entry]


@dataclass
class KeyState:
    """A key's open sessions, the stream time it has seen and the next arrival sequence."""

    sessions: list[Session] = field(default_factory=list)
    stream_time: int = -1
    next_seq: int = 0


@dataclass(frozen=True)
class SessionWrite:
    """An output record: the session's window, its entries (None: a tombstone) and timestamp."""

    start: int
    end: int
    entries: tuple[Entry, ...] | None
    timestamp: int


def close_time(window: SessionWindow, stream_time: int) -> int:
    """Sessions ending at or before this are expired; a merged session ending before it is dropped."""
    return stream_time - window.grace_ms - window.gap_ms


def expire(window: SessionWindow, state: KeyState) -> None:
    """Drops the sessions past the store's retention at the key's stream time."""
    closing = close_time(window, state.stream_time)
    state.sessions = [s for s in state.sessions if s.end > closing]


def session_step(window: SessionWindow, state: KeyState, ts: int, args: str) -> list[SessionWrite]:
    """One record of the key (event time ``ts``, arguments ``args``): the writes it causes, and
    ``state`` updated (the module docstring has the rules)."""
    state.stream_time = max(state.stream_time, ts)
    expire(window, state)
    merged = sorted((s for s in state.sessions if s.end >= ts - window.gap_ms and s.start <= ts + window.gap_ms),
                    key=lambda s: (s.end, s.start))
    start = min([ts, *(s.start for s in merged)])
    end = max([ts, *(s.end for s in merged)])
    if end < close_time(window, state.stream_time):
        return []
    writes: list[SessionWrite] = []
    if (start, end) != (ts, ts):
        writes += [SessionWrite(s.start, s.end, None, s.end) for s in merged]
    entries = sorted((e for s in merged for e in s.entries), key=lambda e: e.seq)
    entries.append(Entry(state.next_seq, ts, args))
    state.next_seq += 1
    merged_ids = {id(s) for s in merged}
    state.sessions = [s for s in state.sessions if id(s) not in merged_ids]
    state.sessions.append(Session(start, end, entries))
    state.sessions.sort(key=lambda s: (s.end, s.start))
    writes.append(SessionWrite(start, end, tuple(entries), end))
    return writes


def process_batch(window: SessionWindow, state: KeyState, records: Sequence[tuple[int, str]],
                  watermark_ms: int) -> list[SessionWrite]:
    """A key's records of a micro-batch (event time, arguments), in arrival order; stream time
    starts at the query's (``watermark_ms``: the largest event time of earlier micro-batches, all
    keys), as Kafka Streams' is the partition's."""
    state.stream_time = max(state.stream_time, watermark_ms)
    writes: list[SessionWrite] = []
    for ts, args in records:
        writes += session_step(window, state, ts, args)
    return writes


def next_expiry(window: SessionWindow, state: KeyState) -> int | None:
    """The stream time at which the key's last open session expires (None: no session)."""
    if not state.sessions:
        return None
    return max(s.end for s in state.sessions) + window.grace_ms + window.gap_ms


# -- the aggregates, folded over a session's records ---------------------------------------------


@dataclass(frozen=True)
class SessionUdaf:
    """An aggregate folded over a session's records in arrival order: ``initial``, ``add`` one
    record's arguments, ``result``."""

    name: str
    initial: Callable[[], Any]
    add: Callable[[Any, Sequence[Any]], Any]
    result: Callable[[Any], Any]


def _extreme(name: str) -> SessionUdaf:
    # ksqlDB's MIN/MAX ignore NULLs; NULL when the session has no value.
    pick = max if name == "MAX" else min

    def add(acc: Any, args: Sequence[Any]) -> Any:
        value = args[0]
        if value is None:
            return acc
        return value if acc is None else pick(acc, value)

    def result(acc: Any) -> Any:
        return str(acc) if isinstance(acc, Decimal) else acc

    return SessionUdaf(name, lambda: None, add, result)


def _flag(value: Any, default: bool) -> bool:
    return default if value is None else bool(value)


def _by_offset(latest: bool, with_n: bool) -> SessionUdaf:
    """LATEST_BY_OFFSET / EARLIEST_BY_OFFSET (x [, ignoreNulls]) and (x, n [, ignoreNulls]):
    the values kept in arrival order (ignoring NULLs unless ignoreNulls is false); the single
    form gives the last (first) value, the N form the last (first) n, oldest first."""

    def add(acc: list[Any], args: Sequence[Any]) -> list[Any]:
        ignore_nulls = _flag(args[2] if with_n and len(args) > 2 else (args[1] if not with_n and len(args) > 1 else None),
                             True)
        if args[0] is None and ignore_nulls:
            return acc
        return [*acc, [args[0], args[1] if with_n else 1]]   # [value, n]

    def result(acc: list[Any]) -> Any:
        values = [v for v, _ in acc]
        if not with_n:
            if not values:
                return None
            return values[-1] if latest else values[0]
        n = int(acc[-1][1]) if acc else 0
        return values[-n:] if latest else values[:n]

    return SessionUdaf("LATEST_BY_OFFSET" if latest else "EARLIEST_BY_OFFSET", list, add, result)


def _from_table_udaf(name: str, arg_types: Sequence[str], star: bool) -> SessionUdaf:
    udaf = table_udaf(name, arg_types, star)
    return SessionUdaf(udaf.name, udaf.initial, udaf.add, udaf.result)


def session_udaf(name: str, arg_types: Sequence[str], star: bool = False) -> SessionUdaf:
    """The fold of aggregate ``name`` (arguments of ksqlDB base types ``arg_types``; ``star``
    for COUNT(*)) over a session's records; TableUdafError for one this engine cannot compute
    over merging sessions."""
    upper = name.upper()
    if upper in ("COUNT", "SUM"):
        return _from_table_udaf(upper, arg_types, star)
    if upper in ("MIN", "MAX"):
        return _extreme(upper)
    if upper in ("LATEST_BY_OFFSET", "EARLIEST_BY_OFFSET"):
        with_n = len(arg_types) >= 2 and arg_types[1] != "BOOLEAN"
        return _by_offset(upper == "LATEST_BY_OFFSET", with_n)
    raise TableUdafError(unsupported_session_message([upper]))


def unsupported_session_message(names: Sequence[str]) -> str:
    """Our refusal of aggregates a session window cannot compute (docs/sql-on-spark.md)."""
    joined = ", ".join(names)
    return (f"The aggregation function(s) {joined} are not supported over WINDOW SESSION with EMIT CHANGES "
            f"(supported: {', '.join(sorted(SESSION_AGGREGATES))}); use EMIT FINAL.")


def session_results(udafs: Sequence[SessionUdaf], arg_slices: Sequence[Sequence[str]], entries: Sequence[Entry],
                    parse: Callable[[str], dict[str, Any]]) -> list[Any]:
    """The aggregates over a session's entries (in arrival order). ``arg_slices[i]`` names the
    fields of the arguments' JSON that aggregate ``i`` reads."""
    accs = [u.initial() for u in udafs]
    for entry in entries:
        values = parse(entry.args)
        for i, udaf in enumerate(udafs):
            accs[i] = udaf.add(accs[i], [values.get(name) for name in arg_slices[i]])
    return [u.result(a) for u, a in zip(udafs, accs, strict=True)]
