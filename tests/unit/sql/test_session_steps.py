"""Session windows with EMIT CHANGES as Kafka Streams' KStreamSessionWindowAggregate writes them
(ksqlDB's WINDOW SESSION), without Spark: every record writes its session's result, after a
tombstone of each session it merged; records before the close time (stream time - grace - gap)
are dropped; sessions past the store's retention (gap + grace) are not merged any more."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from oncestream.sql.engine.compile.session_state import dump_state, load_state
from oncestream.sql.engine.compile.session_steps import (
    KeyState,
    SessionWindow,
    next_expiry,
    process_batch,
    session_results,
    session_step,
    session_udaf,
)
from oncestream.sql.engine.compile.table_udafs import TableUdafError

DAY_MS = 24 * 60 * 60 * 1000


def _args(value: object, *more: object) -> str:
    return json.dumps({f"a{i}": v for i, v in enumerate((value, *more))})


def _parse(text: str) -> dict:
    return json.loads(text, parse_float=Decimal)


def _summary(writes, udaf=None, slices=(("a0",),)):
    out = []
    for w in writes:
        value = None
        if w.entries is not None:
            value = session_results([udaf], slices, w.entries, _parse)[0] if udaf else len(w.entries)
        out.append(((w.start, w.end), value if w.entries is not None else "tombstone", w.timestamp))
    return out


def test_merging_record_tombstones_both_sessions_then_writes_the_merged_one():
    """latest-offset-udaf.json "merging session windows": ts 0, 1500, 700 with a 1 s gap."""
    window = SessionWindow(1000, DAY_MS - 1000)
    latest = session_udaf("LATEST_BY_OFFSET", ("INTEGER",))
    state = KeyState()
    writes = []
    for ts, value in ((0, 1), (1500, 3), (700, 2)):
        writes += session_step(window, state, ts, _args(value))
    assert _summary(writes, latest) == [((0, 0), 1, 0), ((1500, 1500), 3, 1500), ((0, 0), "tombstone", 0),
                                        ((1500, 1500), "tombstone", 1500), ((0, 1500), 2, 1500)]
    assert [(s.start, s.end) for s in state.sessions] == [(0, 1500)]


def test_record_inside_a_single_point_session_updates_it_without_a_tombstone():
    # the merged window equals the record's own [ts, ts]: Kafka Streams puts over it
    window = SessionWindow(1000, 0)
    state = KeyState()
    session_step(window, state, 5, _args(1))
    assert _summary(session_step(window, state, 5, _args(1))) == [((5, 5), 2, 5)]


def test_record_extending_a_session_tombstones_the_old_window():
    window = SessionWindow(30_000, DAY_MS - 30_000)
    state = KeyState()
    session_step(window, state, 0, _args(1))
    assert _summary(session_step(window, state, 10_009, _args(5))) == [((0, 0), "tombstone", 0),
                                                                       ((0, 10_009), 2, 10_009)]


def test_out_of_order_with_grace_drops_late_records_and_hides_expired_sessions():
    """session-windows.json "out of order - explicit grace period" (gap 30 s, grace 1 min)."""
    window = SessionWindow(30_000, 60_000)
    maximum = session_udaf("MAX", ("BIGINT",))
    state = KeyState()
    writes = []
    for ts, value in ((0, 0), (100_010, 1), (10_009, 5), (10_010, 6)):
        writes += session_step(window, state, ts, _args(value))
    # 10009 is before the close time 100010 - 90000; [0, 0] is past retention so 10010 opens a session
    assert _summary(writes, maximum) == [((0, 0), 0, 0), ((100_010, 100_010), 1, 100_010),
                                         ((10_010, 10_010), 6, 10_010)]


def test_stream_time_of_the_query_drops_another_keys_late_record():
    """The watermark (earlier micro-batches, all keys) is the stream time: key 1's ts 60000 after
    stream time 86412022 with a 1 minute grace is dropped."""
    window = SessionWindow(30_000, 60_000)
    state = KeyState()
    assert process_batch(window, state, [(60_000, _args(200))], watermark_ms=86_412_022) == []
    assert state.sessions == []


def test_default_grace_keeps_a_day_old_record():
    """session-windows.json "out of order - no grace period": grace 24 h - gap."""
    window = SessionWindow(30_000, DAY_MS - 30_000)
    state = KeyState()
    writes = process_batch(window, state, [(60_000, _args(200))], watermark_ms=86_412_022)
    assert _summary(writes) == [((60_000, 60_000), 1, 60_000)]


def test_expiry_is_the_last_session_end_plus_gap_and_grace():
    window = SessionWindow(1000, 500)
    state = KeyState()
    session_step(window, state, 10, _args(1))
    session_step(window, state, 5000, _args(1))
    assert next_expiry(window, state) == 6500
    assert next_expiry(window, KeyState()) is None


def test_state_round_trips_through_its_json():
    window = SessionWindow(1000, 0)
    state = KeyState()
    session_step(window, state, 0, _args(1))
    session_step(window, state, 700, _args(None))
    again = load_state(dump_state(state))
    assert again == state


@pytest.mark.parametrize(("name", "args", "expected"), [
    ("LATEST_BY_OFFSET", [(1,), (None,), (3,), (None,)], 3),
    ("LATEST_BY_OFFSET", [(1, False), (None, False)], None),
    ("EARLIEST_BY_OFFSET", [(None,), (2,), (3,)], 2),
    ("EARLIEST_BY_OFFSET", [(None, False), (2, False)], None),
    ("LATEST_BY_OFFSET", [(1, 2, True), (None, 2, True), (3, 2, True), (4, 2, True)], [3, 4]),
    ("LATEST_BY_OFFSET", [(1, 2, False), (None, 2, False)], [1, None]),
    ("EARLIEST_BY_OFFSET", [(None, 2, True), (2, 2, True), (3, 2, True), (4, 2, True)], [2, 3]),
    ("EARLIEST_BY_OFFSET", [(None, 2, False), (2, 2, False), (3, 2, False)], [None, 2]),
    ("MAX", [(1,), (None,), (7,), (3,)], 7),
    ("MIN", [(None,), (4,), (2,)], 2),
    ("MIN", [(None,)], None),
    ("SUM", [(1,), (None,), (2,)], 3),
    ("COUNT", [(1,), (None,), (2,)], 2),
])
def test_aggregates_fold_a_sessions_records_in_arrival_order(name, args, expected):
    types = {1: ("INTEGER",), 2: ("INTEGER", "BOOLEAN"), 3: ("INTEGER", "INTEGER", "BOOLEAN")}[len(args[0])]
    udaf = session_udaf(name, types)
    state = KeyState()
    writes = []
    for ts, row in enumerate(args):
        writes = session_step(SessionWindow(1000, 0), state, ts, _args(*row))
    slices = [[f"a{i}" for i in range(len(args[0]))]]
    entries = writes[-1].entries
    assert entries is not None
    assert session_results([udaf], slices, entries, _parse) == [expected]


def test_aggregates_without_a_session_fold_are_refused():
    with pytest.raises(TableUdafError, match="not supported over WINDOW SESSION"):
        session_udaf("AVG", ("INTEGER",))
