"""``SparkRuntime`` (server_main): Spark starting beside the serving node (issue 24 point 5).

The session factory is injected (``make``), so these check the state table and who waits for
what without a JVM: nothing before ``start_eager``; callers of ``get`` wait until the start ends
and get the runtime or the start's failure; a stop during the start answers the waiting callers
with ksqlDB's shutting-down error; ``when_up`` callbacks run once Spark is up.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from oncestream.sql.errors import SERVER_SHUTTING_DOWN, NotReadyError
from oncestream.sql.server.server_main import SparkRuntime, SparkStartError

WAIT_S = 30.0


class _Runtime:
    def __init__(self) -> None:
        self.stopped = False

    def running(self) -> list[str]:
        return ["q1"]

    def stop_all(self) -> None:
        self.stopped = True


class _Gate:
    """A ``make`` that blocks until released (the JVM's start), then returns or raises."""

    def __init__(self, error: Exception | None = None) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.error = error
        self.runtime = _Runtime()
        self.calls = 0

    def __call__(self) -> tuple[Any, Any]:
        self.calls += 1
        self.entered.set()
        assert self.release.wait(WAIT_S)
        if self.error is not None:
            raise self.error
        return None, self.runtime


def _get_in_thread(runtime: SparkRuntime) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(runtime.get())
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def test_eager_start_serves_meanwhile_and_callers_wait_for_spark() -> None:
    gate = _Gate()
    runtime = SparkRuntime(gate, eager=True)
    assert runtime.state == "NOT_STARTED"
    assert gate.calls == 0
    up: list[str] = []
    runtime.when_up(lambda: up.append("ready file"))
    runtime.start_eager()
    assert gate.entered.wait(WAIT_S)
    assert runtime.state == "STARTING"
    assert runtime.running() == []
    assert runtime.ui_url() is None
    thread, out = _get_in_thread(runtime)
    thread.join(0.3)
    assert thread.is_alive()
    assert out == []
    assert up == []
    gate.release.set()
    thread.join(WAIT_S)
    assert out == [gate.runtime]
    assert runtime.state == "RUNNING"
    assert runtime.running() == ["q1"]
    assert up == ["ready file"]
    runtime.when_up(lambda: up.append("now"))
    assert up == ["ready file", "now"]
    runtime.stop()
    assert gate.runtime.stopped
    assert gate.calls == 1


def test_a_failed_start_is_told_to_every_caller() -> None:
    gate = _Gate(RuntimeError("no JVM here"))
    gate.release.set()
    runtime = SparkRuntime(gate, eager=False)
    with pytest.raises(SparkStartError, match="Spark could not start on this node: RuntimeError: no JVM here"):
        runtime.get()   # lazy: the first caller starts it
    assert runtime.state == "ERROR"
    with pytest.raises(SparkStartError):
        runtime.get()
    assert gate.calls == 1
    runtime.stop()


def test_stopping_during_the_start_answers_waiting_callers() -> None:
    gate = _Gate()
    runtime = SparkRuntime(gate, eager=True)
    runtime.start_eager()
    assert gate.entered.wait(WAIT_S)
    thread, out = _get_in_thread(runtime)
    stopper = threading.Thread(target=runtime.stop, daemon=True)
    stopper.start()
    thread.join(WAIT_S)
    assert len(out) == 1, out
    assert isinstance(out[0], NotReadyError), out
    assert out[0].error_code == SERVER_SHUTTING_DOWN
    gate.release.set()   # the JVM's start ends: stop then stops what it started
    stopper.join(WAIT_S)
    assert not stopper.is_alive()
    assert gate.runtime.stopped
