"""ksqlDB's HAVING over an aggregation (Kafka Streams' KTableFilter with old values sent), as the
gate after an update-mode stream aggregation applies it, without Spark: a failing result is a
tombstone only when the key's previous result passed."""

from __future__ import annotations

from pyspark.sql import Row

from oncestream.sql.engine.compile.having_gate import DELETE, gate_step, gated_rows


def test_passing_result_is_written_and_makes_the_key_live():
    assert gate_step(fails=False, live=False) == (True, True)
    assert gate_step(fails=False, live=True) == (True, True)


def test_failing_result_is_a_tombstone_only_over_a_live_key():
    # KTableFilter: the old value passed, the new one fails -> Change(null, old): a tombstone
    assert gate_step(fails=True, live=True) == (True, False)
    # both fail (or no old value): "unnecessary to forward"
    assert gate_step(fails=True, live=False) == (False, False)


def _row(total: int, fails: bool) -> Row:
    return Row(ID=1, TOTAL=total, **{DELETE: fails})


def test_results_in_order_as_ksqldb_writes_them():
    """having.json "table having" / group-by.json "udafs only in having": fail (nothing), pass,
    fail (tombstone), fail (nothing), pass."""
    rows = [_row(0, True), _row(101, False), _row(96, True), _row(90, True), _row(150, False)]
    written, live = gated_rows(iter(rows), live=False)
    assert [(r["TOTAL"], r[DELETE]) for r in written] == [(101, False), (96, True), (150, False)]
    assert live


def test_state_carries_over_batches():
    written, live = gated_rows(iter([_row(96, True)]), live=True)
    assert [r["TOTAL"] for r in written] == [96]
    assert not live
    written, live = gated_rows(iter([_row(90, True)]), live=live)
    assert written == []
    assert not live
    written, live = gated_rows(iter([]), live=True)
    assert written == []
    assert live
