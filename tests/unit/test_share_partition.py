"""The sans-io share-partition (KIP-932): its state table, locks, acknowledgements, delivery
limit, window bound and persisted form; Hypothesis drives random interleavings of members."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from oncestream.coordinator.share.partition import (
    AckBatch,
    AckType,
    AcquiredRange,
    IllegalTransitionError,
    InFlightRecord,
    LogSpan,
    RecordState,
    SharePartition,
    SharePartitionConfig,
    StateBatch,
)

LOCK_MS = 1000
CONFIG = SharePartitionConfig(record_lock_duration_ms=LOCK_MS, delivery_count_limit=3, max_record_locks=50)


def log_of(end: int, undeliverable: frozenset[int] = frozenset()) -> list[LogSpan]:
    """A log of one-record batches 0..end-1."""
    return [LogSpan(o, o, o not in undeliverable) for o in range(end)]


def spans_from(sp: SharePartition, log: list[LogSpan], now_ms: int) -> list[LogSpan]:
    start = sp.next_fetch_offset(now_ms)
    return [s for s in log if s.last_offset >= start]


def entry(sp: SharePartition, offset: int) -> InFlightRecord:
    record = sp.record(offset)
    assert record is not None, offset
    return record


def offsets(ranges: list[AcquiredRange]) -> list[int]:
    return [o for r in ranges for o in range(r.first_offset, r.last_offset + 1)]


def test_acquire_ack_moves_start_offset() -> None:
    sp = SharePartition(CONFIG, 0)
    got = sp.acquire("a", log_of(5), 10, now_ms=0)
    assert got == [AcquiredRange(0, 4, 1)]
    assert sp.acknowledge("a", [AckBatch(0, 1, (AckType.ACCEPT,))], 1) == ErrorCode.none
    assert sp.start_offset == 2
    assert sp.end_offset == 5
    assert sp.record(2) is not None
    assert entry(sp, 2).state == RecordState.ACQUIRED


def test_second_member_gets_only_what_the_first_does_not_hold() -> None:
    sp = SharePartition(CONFIG, 0)
    assert offsets(sp.acquire("a", log_of(4), 2, now_ms=0)) == [0, 1]
    assert offsets(sp.acquire("b", spans_from(sp, log_of(4), 0), 10, now_ms=0)) == [2, 3]
    assert sp.acquire("c", spans_from(sp, log_of(4), 0), 10, now_ms=0) == []


def test_release_redelivers_with_higher_count_and_reject_never() -> None:
    sp = SharePartition(CONFIG, 0)
    sp.acquire("a", log_of(2), 10, now_ms=0)
    assert sp.acknowledge("a", [AckBatch(0, 1, (AckType.RELEASE, AckType.REJECT))], 1) == ErrorCode.none
    got = sp.acquire("b", spans_from(sp, log_of(2), 2), 10, now_ms=2)
    assert got == [AcquiredRange(0, 0, 2)]
    assert sp.record(1) is not None
    assert entry(sp, 1).state == RecordState.ARCHIVED


def test_lock_expiry_gives_back_and_delivery_limit_archives() -> None:
    sp = SharePartition(CONFIG, 0)
    now = 0
    for delivery in range(1, CONFIG.delivery_count_limit + 1):
        got = sp.acquire(f"m{delivery}", spans_from(sp, log_of(1), now), 10, now_ms=now)
        assert got == [AcquiredRange(0, 0, delivery)]
        now += LOCK_MS  # the lock runs out
    assert sp.acquire("late", spans_from(sp, log_of(1), now), 10, now_ms=now) == []
    assert sp.start_offset == 1  # archived: the poison record is done


def test_ack_of_records_not_acquired_or_held_by_another_member_changes_nothing() -> None:
    sp = SharePartition(CONFIG, 0)
    sp.acquire("a", log_of(3), 10, now_ms=0)
    before = sp.snapshot()
    assert sp.acknowledge("b", [AckBatch(0, 0, (AckType.ACCEPT,))], 1) == ErrorCode.invalid_record_state
    # One good and one bad batch: all or nothing.
    assert sp.acknowledge("a", [AckBatch(0, 0, (AckType.ACCEPT,)), AckBatch(7, 7, (AckType.ACCEPT,))], 1) \
        == ErrorCode.invalid_record_state
    assert sp.acknowledge("a", [AckBatch(0, 1, (1, 1, 1))], 1) == ErrorCode.invalid_request
    assert sp.acknowledge("a", [AckBatch(0, 0, (4,))], 1) == ErrorCode.invalid_request  # RENEW: v2 only
    assert sp.snapshot() == before
    assert sp.acquired_by("a") == [0, 1, 2]
    assert sp.acknowledge("a", [AckBatch(0, 0, (AckType.ACCEPT,))], LOCK_MS) == ErrorCode.invalid_record_state


def test_renew_extends_the_lock_when_allowed() -> None:
    sp = SharePartition(CONFIG, 0)
    sp.acquire("a", log_of(1), 10, now_ms=0)
    assert sp.acknowledge("a", [AckBatch(0, 0, (AckType.RENEW,))], 900, allow_renew=True) == ErrorCode.none
    assert sp.acquired_by("a") == [0]
    assert sp.expire_locks(LOCK_MS) == []
    assert sp.expire_locks(900 + LOCK_MS) == [0]


def test_undeliverable_spans_are_archived_never_handed_out() -> None:
    sp = SharePartition(CONFIG, 0)
    got = sp.acquire("a", log_of(4, frozenset({1, 2})), 10, now_ms=0)
    assert offsets(got) == [0, 3]
    assert sp.acknowledge("a", [AckBatch(0, 0, (1,)), AckBatch(3, 3, (1,))], 1) == ErrorCode.none
    assert sp.start_offset == 4


def test_window_bounded_by_max_record_locks() -> None:
    config = SharePartitionConfig(record_lock_duration_ms=LOCK_MS, max_record_locks=3)
    sp = SharePartition(config, 0)
    assert offsets(sp.acquire("a", log_of(10), 100, now_ms=0)) == [0, 1, 2]
    assert not sp.can_acquire(0)
    assert sp.acquire("b", spans_from(sp, log_of(10), 0), 100, now_ms=0) == []
    sp.acknowledge("a", [AckBatch(0, 0, (1,))], 1)
    assert offsets(sp.acquire("b", spans_from(sp, log_of(10), 1), 100, now_ms=1)) == [3]


def test_illegal_transition_raises() -> None:
    sp = SharePartition(CONFIG, 0)
    sp.acquire("a", log_of(2), 10, now_ms=0)
    sp.acknowledge("a", [AckBatch(1, 1, (1,))], 1)
    record = sp.record(1)
    assert record is not None
    with pytest.raises(IllegalTransitionError):
        sp._move(1, record, RecordState.ACQUIRED)


def test_persisted_form_brings_acquired_back_available_with_count() -> None:
    sp = SharePartition(CONFIG, 0)
    sp.acquire("a", log_of(4), 10, now_ms=0)
    sp.acknowledge("a", [AckBatch(1, 1, (1,)), AckBatch(2, 2, (3,))], 1)
    start, batches = sp.snapshot()
    assert (start, batches) == (0, [StateBatch(0, 0, 0, 1), StateBatch(1, 1, 2, 1), StateBatch(2, 2, 4, 1),
                                    StateBatch(3, 3, 0, 1)])
    restored = SharePartition(CONFIG, 0)
    restored.apply_persisted(start, batches, replace=True)
    assert offsets(restored.acquire("b", log_of(4), 10, now_ms=5)) == [0, 3]
    assert restored.record(0) is not None
    assert entry(restored, 0).delivery_count == 2


# --- properties ----------------------------------------------------------------------------------

LOG_END = 12
UNDELIVERABLE = frozenset({4, 9})
MEMBERS = ("a", "b", "c")

operation = st.one_of(
    st.tuples(st.just("acquire"), st.sampled_from(MEMBERS), st.integers(1, 5)),
    st.tuples(st.just("ack"), st.sampled_from(MEMBERS), st.sampled_from([0, 1, 2, 3])),
    st.tuples(st.just("ack_foreign"), st.sampled_from(MEMBERS), st.integers(0, LOG_END - 1)),
    st.tuples(st.just("leave"), st.sampled_from(MEMBERS), st.just(0)),
    st.tuples(st.just("tick"), st.just(""), st.integers(1, 2 * LOCK_MS)),
)


def _replay(initial: tuple[int, list[StateBatch]], updates: list[tuple[int, list[StateBatch]]]) -> SharePartition:
    sp = SharePartition(CONFIG, initial[0])
    sp.apply_persisted(initial[0], initial[1], replace=True)
    for start, batches in updates:
        sp.apply_persisted(start, batches, replace=False)
    return sp


@settings(max_examples=300, deadline=None)
@given(st.lists(operation, max_size=60))
def test_any_interleaving_is_safe_durable_and_completes(ops: list[tuple[str, str, int]]) -> None:
    sp = SharePartition(CONFIG, 0)
    log = log_of(LOG_END, UNDELIVERABLE)
    initial = sp.snapshot()
    updates: list[tuple[int, list[StateBatch]]] = []
    now = 0
    held: dict[int, tuple[str, int]] = {}  # offset -> (member, lock deadline), as the members see it
    accepted: set[int] = set()
    rejected: set[int] = set()
    for kind, member, arg in ops:
        if kind == "acquire":
            got = offsets(sp.acquire(member, spans_from(sp, log, now), arg, now_ms=now))
            for o in got:
                owner = held.get(o)
                # Never handed to two members at once; never again once accepted or rejected.
                assert owner is None or owner[1] <= now, (o, owner, member)
                assert o not in accepted
                assert o not in rejected
                assert o not in UNDELIVERABLE
                held[o] = (member, now + LOCK_MS)
        elif kind in ("ack", "ack_foreign"):
            mine = sorted(o for o, (m, deadline) in held.items() if m == member and deadline > now)
            if kind == "ack" and mine:
                error = sp.acknowledge(member, [AckBatch(mine[0], mine[0], (arg,))], now)
                assert error == ErrorCode.none
                held.pop(mine[0])
                (accepted if arg == AckType.ACCEPT else rejected if arg in (0, 3) else set()).add(mine[0])
            elif kind == "ack_foreign" and arg not in mine:
                # Locks due by now expire in any call (acknowledge too): that change is the
                # clock's, not the refused acknowledgement's, so it is applied before comparing.
                sp.expire_locks(now)
                before = sp.snapshot()
                assert sp.acknowledge(member, [AckBatch(arg, arg, (1,))], now) == ErrorCode.invalid_record_state
                assert sp.snapshot() == before
        elif kind == "leave":
            sp.release_member(member)
            held = {o: v for o, v in held.items() if v[0] != member}
        else:
            now += arg
        changes = sp.take_changes()
        if changes is not None:
            updates.append(changes)
        # The persisted form replays to the live state (acquired records as AVAILABLE).
        assert _replay(initial, updates).snapshot() == sp.snapshot()
    # Liveness: a diligent member drains everything; every record ends ACKNOWLEDGED or ARCHIVED.
    for _ in range(LOG_END * (CONFIG.delivery_count_limit + 2)):
        if sp.start_offset >= LOG_END:
            break
        now += LOCK_MS
        got = offsets(sp.acquire("z", spans_from(sp, log, now), LOG_END, now_ms=now))
        assert not set(got) & (accepted | rejected)
        for o in got:
            assert sp.acknowledge("z", [AckBatch(o, o, (AckType.ACCEPT,))], now) == ErrorCode.none
    assert sp.start_offset == LOG_END
    assert sp.in_flight() == 0
