"""A window's grace period when the statement gives none: ksqlDB's rules (the query-validation
cases of suppress.json and the session/tumbling cases are the spec)."""

from __future__ import annotations

from oncestream.sql.engine.compile.plan import DEFAULT_GRACE_MS, default_grace_ms


def test_emit_final_without_grace_closes_windows_at_their_end():
    # suppress.json "should emit at window end if no grace period given" (RewrittenAnalysis)
    assert default_grace_ms(2, emit_final=True) == 0


def test_emit_changes_keeps_a_window_24_hours_after_its_start():
    # StreamAggregateBuilder.defaultGrace: 24 hours less the size (a session's gap), at least 0
    assert default_grace_ms(2) == DEFAULT_GRACE_MS - 2
    assert default_grace_ms(60_000, emit_final=False) == DEFAULT_GRACE_MS - 60_000
    assert default_grace_ms(DEFAULT_GRACE_MS + 1) == 0
