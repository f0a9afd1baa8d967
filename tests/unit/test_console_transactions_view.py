"""The console's transactions model (console/transactions_view.py): rows, prepared 2PC
transactions and the three hanging-transaction rules, driven with made-up admin answers and an
injected ``now_ms``."""

from __future__ import annotations

from oncestream.client.admin.admin import ProducerState, TransactionDescription, TransactionListing
from oncestream.client.common.message import TopicPartition
from oncestream.console.transactions_view import (
    LSO_HELD_BACK,
    OPEN_PAST_TIMEOUT,
    TWO_PHASE_COMMIT_TIMEOUT_MS,
    UNKNOWN_TO_COORDINATOR,
    PartitionOffsets,
    build_snapshot,
    format_duration_ms,
)

T0 = 1_800_000_000_000     # a wall-clock start time, ms
MAX_TIMEOUT_MS = 900_000


def _described(tid: str, pid: int, *, state: str = "Ongoing", timeout_ms: int = 60_000, start_ms: int = T0,
               partitions: tuple[tuple[str, int], ...] = (("t", 0),), epoch: int = 3) -> TransactionDescription:
    return TransactionDescription(tid, state, pid, epoch, timeout_ms, start_ms,
                                  [TopicPartition(t, p) for t, p in partitions])


def _open(pid: int, start_offset: int, *, last_ms: int = T0, epoch: int = 3) -> ProducerState:
    return ProducerState(pid, epoch, 5, last_ms, 7, start_offset)


def _kinds(flags) -> list[str]:
    return [f.kind for f in flags]


def test_an_ongoing_transaction_within_its_timeout_is_listed_and_not_flagged() -> None:
    snap = build_snapshot(
        [TransactionListing("app", 10, "Ongoing")],
        {"app": _described("app", 10, partitions=(("t", 1), ("t", 0)))},
        {("t", 0): [_open(10, 4)], ("t", 1): [_open(10, 9)]},
        {("t", 0): PartitionOffsets(4, 8), ("t", 1): PartitionOffsets(9, 10)},
        now_ms=T0 + 59_000)
    row = snap.transaction("app")
    assert row is not None
    assert (row.state, row.producer_id, row.producer_epoch, row.timeout_ms) == ("Ongoing", 10, 3, 60_000)
    assert row.partitions == (("t", 0), ("t", 1))
    assert row.age_ms == 59_000
    assert row.open
    assert snap.open_transactions == (row,)
    assert not row.hanging
    assert not row.prepared
    assert [o.start_offset for o in row.open_partitions] == [4, 9]
    assert snap.hanging == ()


def test_open_past_its_timeout_is_flagged_with_the_lso_it_holds_back() -> None:
    snap = build_snapshot(
        [TransactionListing("stuck", 10, "Ongoing")],
        {"stuck": _described("stuck", 10, timeout_ms=1_000)},
        {("t", 0): [_open(10, 2)]},
        {("t", 0): PartitionOffsets(2, 5)},
        now_ms=T0 + 1_500)
    row = snap.transaction("stuck")
    assert row is not None
    assert row.hanging
    assert _kinds(row.flags) == [OPEN_PAST_TIMEOUT, LSO_HELD_BACK]
    assert "past its transaction timeout of 1.0s" in row.flags[0].explanation
    assert "stays at 2, 3 records behind the high watermark 5" in row.flags[1].explanation
    (held,) = snap.hanging
    assert (held.topic, held.partition, held.producer_id, held.coordinator_epoch) == ("t", 0, 10, 7)


def test_the_timeout_is_not_passed_at_exactly_the_timeout() -> None:
    snap = build_snapshot([TransactionListing("x", 1, "Ongoing")], {"x": _described("x", 1, timeout_ms=1_000)},
                          {}, {}, now_ms=T0 + 1_000)
    row = snap.transaction("x")
    assert row is not None
    assert not row.hanging


def test_a_two_phase_commit_transaction_is_prepared_never_timed_out() -> None:
    snap = build_snapshot(
        [TransactionListing("2pc", 20, "Ongoing")],
        {"2pc": _described("2pc", 20, timeout_ms=TWO_PHASE_COMMIT_TIMEOUT_MS)},
        {("t", 0): [_open(20, 0)]},
        {("t", 0): PartitionOffsets(0, 3)},
        now_ms=T0 + 86_400_000)   # a day later: still not hanging, it waits for a decision
    row = snap.transaction("2pc")
    assert row is not None
    assert row.prepared
    assert row.two_phase_commit
    assert not row.hanging
    assert snap.hanging == ()


def test_a_completed_two_phase_commit_producer_is_not_prepared() -> None:
    snap = build_snapshot([TransactionListing("2pc", 20, "CompleteCommit")],
                          {"2pc": _described("2pc", 20, state="CompleteCommit", timeout_ms=TWO_PHASE_COMMIT_TIMEOUT_MS,
                                             partitions=())}, {}, {}, now_ms=T0)
    row = snap.transaction("2pc")
    assert row is not None
    assert not row.open
    assert row.two_phase_commit
    assert not row.prepared
    assert row.age_ms is None


def test_a_partition_open_transaction_of_a_producer_no_coordinator_knows_is_hanging() -> None:
    snap = build_snapshot([], {}, {("t", 3): [_open(99, 11)]}, {("t", 3): PartitionOffsets(11, 40)},
                          now_ms=T0 + MAX_TIMEOUT_MS + 1)
    (orphan,) = snap.orphans
    assert orphan.transactional_id is None
    assert _kinds(orphan.flags) == [UNKNOWN_TO_COORDINATOR, LSO_HELD_BACK]
    assert "no transaction coordinator knows that producer" in orphan.flags[0].explanation
    assert snap.hanging == (orphan,)


def test_find_hanging_waits_the_max_transaction_timeout_before_suspecting_a_partition() -> None:
    """A partition may learn of a transaction before its coordinator lists the partition
    (Kafka's find-hanging only considers transactions older than the max timeout)."""
    snap = build_snapshot([], {}, {("t", 3): [_open(99, 11)]}, {("t", 3): PartitionOffsets(11, 40)},
                          now_ms=T0 + MAX_TIMEOUT_MS)
    assert snap.hanging == ()
    assert len(snap.orphans) == 1


def test_a_partition_the_coordinators_transaction_does_not_name_is_hanging() -> None:
    snap = build_snapshot(
        [TransactionListing("app", 10, "Ongoing")],
        {"app": _described("app", 10, partitions=(("t", 0),), timeout_ms=MAX_TIMEOUT_MS * 2)},
        {("t", 0): [_open(10, 1)], ("t", 1): [_open(10, 6)]},
        {("t", 0): PartitionOffsets(1, 2), ("t", 1): PartitionOffsets(6, 9)},
        now_ms=T0 + MAX_TIMEOUT_MS + 1)
    by_partition = {o.partition: o for o in snap.open_partitions}
    assert not by_partition[0].hanging
    assert _kinds(by_partition[1].flags) == [UNKNOWN_TO_COORDINATOR, LSO_HELD_BACK]
    assert "does not list t[1]" in by_partition[1].flags[0].explanation
    row = snap.transaction("app")
    assert row is not None
    assert _kinds(row.flags) == [UNKNOWN_TO_COORDINATOR, LSO_HELD_BACK]


def test_a_partition_left_open_after_the_coordinator_completed_is_hanging() -> None:
    snap = build_snapshot(
        [TransactionListing("app", 10, "CompleteAbort")],
        {"app": _described("app", 10, state="CompleteAbort", partitions=())},
        {("t", 0): [_open(10, 1)]}, {},
        now_ms=T0 + MAX_TIMEOUT_MS + 1)
    (hung,) = snap.hanging
    assert _kinds(hung.flags) == [UNKNOWN_TO_COORDINATOR]   # no offsets known: no LSO flag
    assert "state CompleteAbort" in hung.flags[0].explanation


def test_an_lso_not_at_the_hanging_transactions_start_is_not_blamed_on_it() -> None:
    """An earlier (healthy) open transaction holds the LSO: the hanging one is flagged but the
    LSO sentence would be wrong."""
    snap = build_snapshot([], {}, {("t", 0): [_open(1, 2, last_ms=T0 + MAX_TIMEOUT_MS), _open(99, 5)]},
                          {("t", 0): PartitionOffsets(2, 9)}, now_ms=T0 + MAX_TIMEOUT_MS + 1)
    (hung,) = snap.hanging
    assert hung.producer_id == 99
    assert _kinds(hung.flags) == [UNKNOWN_TO_COORDINATOR]


def test_producers_without_an_open_transaction_are_ignored_and_errors_are_rows() -> None:
    bad = TransactionDescription("gone", "", -1, -1, 0, -1, [], error="TRANSACTIONAL_ID_NOT_FOUND")  # type: ignore[arg-type]
    snap = build_snapshot([TransactionListing("gone", 4, "Empty")], {"gone": bad},
                          {("t", 0): [_open(4, -1)]}, {}, now_ms=T0)
    assert snap.open_partitions == ()
    row = snap.transaction("gone")
    assert row is not None
    assert row.error == "TRANSACTIONAL_ID_NOT_FOUND"
    assert row.state == "Empty"


def test_durations_read_as_words() -> None:
    assert format_duration_ms(1_500) == "1.5s"
    assert format_duration_ms(185_000) == "3m 05s"
    assert format_duration_ms(3_720_000) == "1h 02m"
    assert format_duration_ms(90_000_000) == "1d 01h"
    assert format_duration_ms(-1) == "-"


def test_an_ended_transaction_is_listed_without_being_described() -> None:
    snap = build_snapshot([TransactionListing("done", 8, "CompleteCommit")], {}, {}, {}, now_ms=T0)
    row = snap.transaction("done")
    assert row is not None
    assert (row.state, row.producer_id, row.described, row.error, row.open) == ("CompleteCommit", 8, False, None, False)


def test_a_partition_open_for_a_producer_its_coordinator_lists_as_ended_is_hanging() -> None:
    """The listing says the id's transaction ended (so it was not described), yet a partition
    still holds an open transaction of that producer."""
    snap = build_snapshot([TransactionListing("app", 10, "CompleteAbort")], {}, {("t", 0): [_open(10, 4)]},
                          {("t", 0): PartitionOffsets(4, 6)}, now_ms=T0 + MAX_TIMEOUT_MS + 1)
    (hung,) = snap.hanging
    assert _kinds(hung.flags) == [UNKNOWN_TO_COORDINATOR, LSO_HELD_BACK]
    assert "lists 'app' as CompleteAbort" in hung.flags[0].explanation
    row = snap.transaction("app")
    assert row is not None
    assert row.hanging
