"""The broker demo's exactly-once verdict (``oncestream.demos.broker_crash.check`` and ``report``), fed outcomes
directly: a clean run passes with exit code 0, and a duplicate, a loss, a failed (aborted) write
that is visible anyway, and a record the demo never wrote are each reported and exit 1. This is
what shows the demo's final check can fail at all."""

from __future__ import annotations

import pytest

from oncestream.demos.broker_crash import LiveStats, ProducerLedger, ReadBack, Verdict, check, report

RECORDS = 6


def _clean_ledger() -> ProducerLedger:
    """Every record acknowledged on partition 0 at offset == seq."""
    return ProducerLedger(acked={seq: (0, seq) for seq in range(RECORDS)})


def _clean_log() -> list[tuple[int, int, int | None]]:
    return [(0, seq, seq) for seq in range(RECORDS)]


def _verdict(ledger: ProducerLedger, records: list[tuple[int, int, int | None]],
             live: LiveStats | None = None) -> Verdict:
    return check(RECORDS, RECORDS, ledger, ReadBack(records), live or LiveStats(read=len(records)))


def test_clean_outcome_has_no_violation_and_exits_zero(capsys) -> None:
    verdict = _verdict(_clean_ledger(), _clean_log())
    assert verdict.violations == []
    assert verdict.exit_code == 0
    assert report(verdict, 1.0) == 0
    out = capsys.readouterr().out
    assert "OK: no loss, no duplicates" in out
    assert "FAILED" not in out


def test_duplicated_record_is_a_violation(capsys) -> None:
    """The same record twice in the log (an idempotence failure after a retry)."""
    records = [*_clean_log(), (0, RECORDS, 3)]
    verdict = _verdict(_clean_ledger(), records)
    assert "1 duplicated records in the log" in verdict.violations
    # Seq 3 after seq 5 is also out of order within the partition.
    assert "1 records out of order within their partition" in verdict.violations
    assert verdict.exit_code == 1
    assert report(verdict, 1.0) == 1
    out = capsys.readouterr().out
    assert "FAILED" in out
    assert "- 1 duplicated records in the log" in out


def test_lost_acknowledged_record_is_a_violation() -> None:
    """An acknowledged record missing from the log (lost by a crash after its ack)."""
    records = [r for r in _clean_log() if r[2] != 2]
    verdict = _verdict(_clean_ledger(), records)
    assert any(v.startswith("lost 1 records (first seqs: [2]), 1 of them acknowledged") for v in verdict.violations), \
        verdict.violations
    assert verdict.exit_code == 1


def test_failed_write_visible_in_the_log_is_a_violation() -> None:
    """A record the producer was told failed (its batch aborted) is served to read_committed anyway:
    the torn/aborted write became visible."""
    ledger = _clean_ledger()
    del ledger.acked[4]
    ledger.failed[4] = "KafkaError{code=_MSG_TIMED_OUT}"
    verdict = _verdict(ledger, _clean_log())
    assert "1 records reported as failed are visible in the log (first seqs: [4])" in verdict.violations
    assert verdict.exit_code == 1


def test_record_the_demo_never_wrote_is_a_violation() -> None:
    """A torn batch's garbage (no sequence number) or a seq beyond what was produced."""
    records = [*_clean_log(), (0, RECORDS, None), (0, RECORDS + 1, RECORDS + 7)]
    verdict = _verdict(_clean_ledger(), records)
    assert "2 records in the log that the demo never wrote" in verdict.violations
    assert verdict.exit_code == 1


def test_record_at_another_offset_than_acknowledged_is_a_violation() -> None:
    ledger = _clean_ledger()
    ledger.acked[5] = (0, 9)
    verdict = _verdict(ledger, _clean_log())
    assert "1 records are not at the offset their acknowledgement gave" in verdict.violations


@pytest.mark.parametrize(
    ("live", "expected"),
    [
        (LiveStats(read=7, duplicates=1), "live consumer saw 1 duplicates, 0 out of order"),
        (LiveStats(read=6, error="boom"), "live consumer failed: boom"),
    ],
)
def test_live_consumer_anomalies_are_violations(live: LiveStats, expected: str) -> None:
    verdict = _verdict(_clean_ledger(), _clean_log(), live)
    assert verdict.violations == [expected]
    assert verdict.exit_code == 1


def test_delivery_report_for_a_foreign_value_is_counted_not_fatal() -> None:
    """``on_delivery`` runs inside librdkafka's poll: a value it cannot decode becomes a violation
    instead of an exception thrown through the client (or an ``assert`` that ``-O`` strips)."""

    class _Msg:
        def value(self) -> bytes:
            return b"not-a-demo-record"

    ledger = _clean_ledger()
    ledger.on_delivery(None, _Msg())
    assert ledger.foreign_reports == 1
    verdict = _verdict(ledger, _clean_log())
    assert "1 delivery reports for records the demo never wrote" in verdict.violations
