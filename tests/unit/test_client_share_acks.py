"""Share-consumer acknowledgement bookkeeping (client/consumer/share_acks.py): the record state
table and Kafka's acknowledgement-batch encoding."""

from __future__ import annotations

import pytest

from oncestream.client.consumer.share_acks import (
    ACK_ACCEPT,
    ACK_GAP,
    ACK_REJECT,
    ACK_RELEASE,
    AckBatch,
    InFlightRecords,
    NotInFlightError,
    RecordState,
    ack_batches,
)

TP = ("t", 0)
TP1 = ("t", 1)


def test_batches_one_type_per_run_of_consecutive_offsets() -> None:
    assert ack_batches({5: ACK_ACCEPT, 6: ACK_ACCEPT, 7: ACK_ACCEPT, 10: ACK_ACCEPT}) == [
        AckBatch(5, 7, (ACK_ACCEPT,)), AckBatch(10, 10, (ACK_ACCEPT,))]


def test_batches_with_mixed_types_list_one_type_per_offset() -> None:
    assert ack_batches({3: ACK_RELEASE, 1: ACK_ACCEPT, 2: ACK_GAP}) == [
        AckBatch(1, 3, (ACK_ACCEPT, ACK_GAP, ACK_RELEASE))]


def test_batches_of_nothing_is_empty() -> None:
    assert ack_batches({}) == []


def _delivered(records: InFlightRecords, tp: tuple[str, int], offsets: list[int]) -> None:
    records.acquired(tp, offsets)
    for offset in offsets:
        records.handed_out(tp, offset)


def test_record_lifecycle_explicit() -> None:
    records = InFlightRecords()
    records.acquired(TP, [0, 1, 2], gaps=[3])
    assert records.state(TP, 0) is RecordState.BUFFERED
    assert records.state(TP, 3) is RecordState.READY  # a gap is acknowledged as GAP at once
    for offset in (0, 1, 2):
        records.handed_out(TP, offset)
    assert records.unacknowledged_delivered() == [(TP, 0), (TP, 1), (TP, 2)]
    records.acknowledge(TP, 0, ACK_ACCEPT)
    records.acknowledge(TP, 1, ACK_RELEASE)
    records.acknowledge(TP, 1, ACK_REJECT)  # changed before it is sent: the last one counts
    assert records.unacknowledged_delivered() == [(TP, 2)]
    gap = records.take_acks()
    assert gap == {TP: {3: ACK_GAP}}  # the application's acknowledgements wait for poll or commit
    records.finished(gap)
    records.submit()
    sent = records.take_acks()
    assert sent == {TP: {0: ACK_ACCEPT, 1: ACK_REJECT}}
    assert records.state(TP, 1) is RecordState.SENDING
    with pytest.raises(NotInFlightError):
        records.acknowledge(TP, 1, ACK_ACCEPT)  # already on its way
    records.finished(sent)
    assert records.state(TP, 0) is None
    assert records.held() == 1  # offset 2 still waits for its acknowledgement


def test_acknowledge_needs_a_delivered_record() -> None:
    records = InFlightRecords()
    records.acquired(TP, [0], gaps=[1])
    with pytest.raises(NotInFlightError):
        records.acknowledge(TP, 0, ACK_ACCEPT)  # buffered, never handed out
    with pytest.raises(NotInFlightError):
        records.acknowledge(TP, 1, ACK_ACCEPT)  # a gap
    with pytest.raises(NotInFlightError):
        records.acknowledge(TP, 9, ACK_ACCEPT)  # never acquired
    with pytest.raises(NotInFlightError):
        records.acknowledge(TP1, 0, ACK_ACCEPT)
    records.handed_out(TP, 0)
    with pytest.raises(ValueError, match="not ACCEPT"):
        records.acknowledge(TP, 0, ACK_GAP)
    with pytest.raises(NotInFlightError):
        records.handed_out(TP, 0)  # twice


def test_implicit_mode_accepts_what_the_last_poll_handed_out_and_only_that() -> None:
    records = InFlightRecords()
    records.acquired(TP, [0, 1, 2, 3])
    records.handed_out(TP, 0)
    records.handed_out(TP, 1)
    records.accept_delivered()
    assert records.take_acks() == {TP: {0: ACK_ACCEPT, 1: ACK_ACCEPT}}
    assert records.state(TP, 2) is RecordState.BUFFERED
    records.accept_delivered()  # nothing handed out since: nothing more accepted
    assert not records.has_acks()


def test_release_gives_back_buffered_and_unacknowledged_records() -> None:
    records = InFlightRecords()
    records.acquired(TP, [0, 1, 2])
    records.handed_out(TP, 0)
    records.handed_out(TP, 1)
    records.acknowledge(TP, 0, ACK_ACCEPT)
    records.submit()
    records.acquired(TP1, [7])
    records.release([TP1])
    assert records.take_acks([TP1]) == {TP1: {7: ACK_RELEASE}}
    records.release(None, delivered=False)  # a revoked partition: only what was never handed out
    assert records.state(TP, 1) is RecordState.DELIVERED
    records.release(None)
    assert records.take_acks() == {TP: {0: ACK_ACCEPT, 1: ACK_RELEASE, 2: ACK_RELEASE}}


def test_forget_drops_a_partition_whose_session_is_gone() -> None:
    records = InFlightRecords()
    _delivered(records, TP, [0, 1])
    _delivered(records, TP1, [5])
    records.forget([TP])
    assert records.partitions() == [TP1]
    assert records.unacknowledged_delivered() == [(TP1, 5)]


def test_a_commit_takes_its_own_acknowledgements_and_a_fetch_only_the_poll_ones() -> None:
    records = InFlightRecords()
    _delivered(records, TP, [0, 1])
    records.acknowledge(TP, 0, ACK_ACCEPT)
    records.submit(commit=True)  # commit_sync: offset 0 goes in its ShareAcknowledge
    records.acknowledge(TP, 1, ACK_REJECT)
    records.submit()  # a poll: offset 1 rides the next ShareFetch
    assert records.state(TP, 0) is RecordState.COMMITTING
    assert records.has_acks()
    assert records.take_acks() == {TP: {1: ACK_REJECT}}
    assert not records.has_acks()
    assert records.has_acks(commit=True)
    assert records.take_acks(commit=True) == {TP: {0: ACK_ACCEPT}}


def test_implicit_commit_accepts_for_the_commit() -> None:
    records = InFlightRecords()
    _delivered(records, TP, [4])
    records.accept_delivered(commit=True)
    assert records.take_acks() == {}
    assert records.take_acks(commit=True) == {TP: {4: ACK_ACCEPT}}


def test_finished_leaves_records_acknowledged_after_the_request_was_built() -> None:
    records = InFlightRecords()
    _delivered(records, TP, [0, 1])
    records.acknowledge(TP, 0, ACK_ACCEPT)
    records.submit()
    sent = records.take_acks()
    records.acknowledge(TP, 1, ACK_ACCEPT)
    records.finished(sent)
    assert not records.has_acks()
    records.submit()
    assert records.take_acks() == {TP: {1: ACK_ACCEPT}}


def test_handed_out_offsets_are_what_a_lost_session_takes_from_the_application() -> None:
    records = InFlightRecords()
    records.acquired(TP, [0, 1, 2, 3, 4], gaps=[5])
    for offset in (0, 1, 2, 3):
        records.handed_out(TP, offset)
    records.acknowledge(TP, 1, ACK_ACCEPT)
    records.acknowledge(TP, 2, ACK_RELEASE)
    records.submit()
    records.acknowledge(TP, 3, ACK_REJECT)
    records.submit(commit=True)
    assert records.handed_out_offsets([TP, TP1]) == {TP: {0, 1, 2, 3}}  # not buffered 4, not gap 5


def test_records_given_back_unseen_are_not_reported_even_when_acquired_again() -> None:
    records = InFlightRecords()
    _delivered(records, TP, [0])
    records.acquired(TP, [1, 2])  # fetched ahead, never handed out
    records.accept_delivered()
    records.release([TP], delivered=False)  # e.g. the member joins again
    sent = records.take_acks()
    assert sent == {TP: {0: ACK_ACCEPT, 1: ACK_RELEASE, 2: ACK_RELEASE}}
    records.acquired(TP, [1, 2])  # the ShareFetch carrying the RELEASE acquires them again
    assert records.reportable(sent) == {TP: {0}}
    records.finished(sent)
    assert records.state(TP, 1) is RecordState.BUFFERED
    records.handed_out(TP, 1)
    records.accept_delivered()
    assert records.reportable(records.take_acks()) == {TP: {1}}  # now the application had it


def test_a_release_never_sent_hides_nothing_once_the_record_is_acquired_again() -> None:
    records = InFlightRecords()
    records.acquired(TP, [4])
    records.release([TP], delivered=False)
    records.acquired(TP, [4])  # its lock ran out before the RELEASE left: a new acquisition
    records.handed_out(TP, 4)
    records.accept_delivered()
    assert records.reportable(records.take_acks()) == {TP: {4}}
