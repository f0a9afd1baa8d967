"""oncestream.testing_hooks: every test-only hook is inert unless switched on, and does what the
suites that switch it on rely on (the Spark suite's driver crash points and task gates)."""

from __future__ import annotations

import pytest

from oncestream.testing_hooks import (
    CRASH_ENV,
    InjectedTaskFailure,
    armed,
    gate_after_prepare,
    gate_before_prepare,
)


def test_spark_crash_point_is_armed_per_step_and_batch(monkeypatch) -> None:
    monkeypatch.delenv(CRASH_ENV, raising=False)
    assert not armed("after-record", 3)
    monkeypatch.setenv(CRASH_ENV, "after-record:3, mid-complete")
    assert armed("after-record", 3)
    assert not armed("after-record", 2)
    assert not armed("before-record", 3)
    assert armed("mid-complete", 0)
    assert armed("mid-complete", 7)


def test_gates_do_nothing_without_a_gate_dir(tmp_path) -> None:
    gate_before_prepare(None, 0, 0)
    gate_after_prepare(None, 0, 0, "txn", "1:2")
    gate_before_prepare(str(tmp_path), 0, 0)  # no fail-0 file: passes
    assert list(tmp_path.iterdir()) == []


def test_fail_gate_raises_once_released(tmp_path) -> None:
    (tmp_path / "fail-1").touch()
    (tmp_path / "release").touch()
    gate_before_prepare(str(tmp_path), 0, 0)  # another partition passes
    with pytest.raises(InjectedTaskFailure, match="partition 1, attempt 2"):
        gate_before_prepare(str(tmp_path), 1, 2)


def test_after_prepare_gate_reports_the_prepared_transaction(tmp_path) -> None:
    gate_after_prepare(str(tmp_path), 2, 1, "p-q-2-1", "1000:4")
    assert (tmp_path / "prepared-2-1").read_text() == "p-q-2-1 1000:4\n"
    assert not list(tmp_path.glob("*.tmp"))
