"""Faults and a settable clock for the Spark connector's tests, plugged in through the connector's
extension points (``oncestream.spark.plugins``): nothing here ships, and the connector reads no
test option.

``SparkFaults``, a step observer (sink option ``stepObserver`` = ``FAULTS_CLASS``, settings as
``stepObserver.<name>``; ``fault_options`` builds them; ``dual_write(observer=SparkFaults(...))``):

``gateDir``
    A directory the test and the write tasks share (an option rather than the environment
    because the tests' JVM and its Python workers outlive any one test). A task writes
    ``prepared-<partition>-<attempt>`` (its transactional id and state) after preparing, waits
    there while ``hold-<partition>`` exists until ``release`` appears, and with
    ``fail-<partition>`` raises on every attempt after producing its rows, before preparing, once
    ``release`` exists. Waiting on files lets a test look at the log while tasks are prepared and
    the driver has decided nothing, without depending on how fast anything runs.
``failAfterPrepare``
    Attempt numbers (``0,1``): the task's Python worker exits right after prepare, like an
    executor lost mid-task (no exception handler, no cleanup); Spark retries the task.
``crashAt``
    ``step:batch`` items, comma-separated (``after-record:3``; no batch: every batch): SIGKILL
    of ``killGroup`` (the driver's process group: the commit runs in a Python worker of the
    driver's JVM, and the Python driver, JVM and workers must die at once, as in a machine crash)
    and of this process when a batch reaches that step. Steps: ``before-record``,
    ``after-record``, ``after-complete``, ``dual-after-prepare``, ``dual-after-db`` (the
    connector's steps) and ``mid-complete``: exactly one of the batch's transactions committed
    (the first to start committing goes on, the others wait; the crash follows its commit).
``crashMarker``
    A file the crash is noted in before the kill (Spark captures a worker's stderr).

``FileClock``, a trigger clock (source option ``triggerClock`` = ``CLOCK_CLASS``,
``triggerClock.path`` = a file holding milliseconds, which the test rewrites): the stream reader
lives in a Spark planner process the test cannot reach otherwise.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from oncestream.spark import plugins

FAULTS_CLASS = "tests.support.spark_faults:SparkFaults"
CLOCK_CLASS = "tests.support.spark_faults:FileClock"
MID_COMPLETE = "mid-complete"
# A gate that is never released means the test went wrong; the task fails instead of hanging.
GATE_WAIT_S = 300.0
_GATE_POLL_S = 0.05
WORKER_EXIT_CODE = 17


class InjectedTaskFailure(Exception):
    """The failure a ``fail-<partition>`` gate makes a write task raise."""


def fault_options(*, gate_dir: str | Path | None = None, fail_after_prepare: str | None = None,
                  crash_at: str | None = None, kill_group: int | None = None,
                  crash_marker: str | Path | None = None) -> dict[str, str]:
    """Sink options plugging ``SparkFaults`` in with these settings."""
    settings = {"gateDir": gate_dir, "failAfterPrepare": fail_after_prepare, "crashAt": crash_at,
                "killGroup": kill_group, "crashMarker": crash_marker}
    return {plugins.STEP_OBSERVER_OPTION: FAULTS_CLASS,
            **{f"{plugins.STEP_OBSERVER_OPTION}.{k}": str(v) for k, v in settings.items() if v is not None}}


def clock_options(path: str | Path) -> dict[str, str]:
    """Source options making the trigger clock ``FileClock`` on ``path``."""
    return {plugins.TRIGGER_CLOCK_OPTION: CLOCK_CLASS, f"{plugins.TRIGGER_CLOCK_OPTION}.path": str(path)}


def _crash_points(spec: str) -> list[tuple[str, int | None]]:
    points = []
    for item in spec.split(","):
        name, _, batch = item.strip().partition(":")
        if name:
            points.append((name, int(batch) if batch else None))
    return points


class SparkFaults:
    """The step observer of the module docstring (settings: lower-case names, as Spark's options
    reach a plugin)."""

    def __init__(self, config: Mapping[str, str]) -> None:
        settings = {k.lower(): v for k, v in config.items()}
        self.gate_dir = Path(settings["gatedir"]) if settings.get("gatedir") else None
        self.fail_after_prepare = {int(a) for a in settings.get("failafterprepare", "").split(",") if a.strip()}
        self.crash_at = _crash_points(settings.get("crashat", ""))
        self.kill_group = int(settings.get("killgroup", "0") or 0)
        self.crash_marker = settings.get("crashmarker")
        self._lock = threading.Lock()
        self._first_completing: str | None = None

    def reached(self, step: str, info: Mapping[str, Any]) -> None:
        """Act on ``step`` as the settings say."""
        if step == plugins.TASK_BEFORE_PREPARE:
            self._gate_before_prepare(info["partition"], info["attempt"])
        elif step == plugins.TASK_AFTER_PREPARE:
            if info["attempt"] in self.fail_after_prepare:
                sys.stderr.write(f"oncestream test: injected failure after prepare ({info['transactional_id']}, "
                                 f"state {info['state']}); exiting the Python worker\n")
                sys.stderr.flush()
                os._exit(WORKER_EXIT_CODE)
            self._gate_after_prepare(info["partition"], info["attempt"], info["transactional_id"], info["state"])
        elif step == plugins.COMPLETING_TRANSACTION and self._armed(MID_COMPLETE, info):
            with self._lock:
                if self._first_completing is None:
                    self._first_completing = info["transactional_id"]
            if self._first_completing != info["transactional_id"]:
                threading.Event().wait(GATE_WAIT_S)  # the crash comes first; bounded all the same
        elif step == plugins.COMPLETED_TRANSACTION and self._armed(MID_COMPLETE, info):
            if self._first_completing == info["transactional_id"]:
                self._crash(MID_COMPLETE, info["batch_id"])
        elif self._armed(step, info):
            self._crash(step, info["batch_id"])

    def _armed(self, step: str, info: Mapping[str, Any]) -> bool:
        batch_id = info.get("batch_id")
        return any(name == step and (batch is None or batch == batch_id) for name, batch in self.crash_at)

    def _crash(self, step: str, batch_id: int) -> None:
        """SIGKILL the driver's process group (and this process)."""
        note = f"oncestream: injected driver crash at {step} of batch {batch_id}\n"
        sys.stderr.write(note)
        sys.stderr.flush()
        if self.crash_marker:
            with open(self.crash_marker, "a") as f:
                f.write(note)
                f.flush()
                os.fsync(f.fileno())
        if self.kill_group > 0:
            os.killpg(self.kill_group, signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)

    def _await_release(self, gate: Path, what: str) -> None:
        deadline = time.monotonic() + GATE_WAIT_S
        while not (gate / "release").exists():
            if time.monotonic() > deadline:
                raise InjectedTaskFailure(f"{what}: the test never created {gate / 'release'}")
            time.sleep(_GATE_POLL_S)

    def _gate_before_prepare(self, partition: int, attempt: int) -> None:
        """With ``fail-<partition>`` in the gate directory: wait for ``release``, then raise."""
        if self.gate_dir is None or not (self.gate_dir / f"fail-{partition}").exists():
            return
        self._await_release(self.gate_dir, f"partition {partition} attempt {attempt}")
        raise InjectedTaskFailure(f"injected failure of partition {partition}, attempt {attempt}, before prepare")

    def _gate_after_prepare(self, partition: int, attempt: int, transactional_id: str, state: str) -> None:
        """Report the prepared transaction; hold while ``hold-<partition>`` exists until ``release``."""
        if self.gate_dir is None:
            return
        marker = self.gate_dir / f"prepared-{partition}-{attempt}"
        # Written whole under a temporary name: the test reads the file as soon as it appears.
        tmp = marker.with_suffix(".tmp")
        tmp.write_text(f"{transactional_id} {state}\n")
        tmp.rename(marker)
        if (self.gate_dir / f"hold-{partition}").exists():
            self._await_release(self.gate_dir, f"partition {partition} attempt {attempt} (held after prepare)")


class FileClock:
    """A trigger clock reading milliseconds from the file ``path`` (setting ``triggerClock.path``)."""

    def __init__(self, config: Mapping[str, str]) -> None:
        self.path = config["path"]

    def now_ms(self) -> float:
        """The milliseconds the file holds now."""
        with open(self.path) as f:
            return float(f.read().strip())
