"""Test-only hooks: fault injection and gates, gathered here so production code calls one small
function per hook and nothing else. None of this is for production use; every hook is inert
unless a test switches it on in one of these ways:

Spark driver (``crash_if_armed``)
    Environment variable ``ONCESTREAM_SPARK_CRASH_AT``, e.g. ``after-record:3`` (kill when batch 3
    reaches the step ``after-record``; several comma-separated). The driver process group to kill
    comes from ``ONCESTREAM_SPARK_DRIVER_PGID``, which the test harness sets when it starts the
    driver in its own session; the commit runs in a Python worker of the driver's JVM, and the
    whole group (Python driver, JVM, workers) must die at once, as in a machine crash.
    Steps: ``before-record`` (tasks prepared, commit record not written), ``after-record`` (record
    written, nothing completed), ``mid-complete`` (some transactions completed),
    ``after-complete`` (all completed, Spark's commit log not yet written); for the dual writer
    ``dual-after-prepare`` and ``dual-after-db`` (database committed, transaction not completed).

Spark write tasks (``gate_before_prepare``, ``gate_after_prepare``, ``crash_worker``)
    Sink option ``oncestream.test.gateDir``: a directory the test and the tasks share (an option
    rather than the environment because the tests' JVM outlives any one test). A task of the
    exactly-once sink writes ``prepared-<partition>-<attempt>`` (its transactional id and state)
    after preparing, waits there while ``hold-<partition>`` exists until ``release`` appears, and
    with ``fail-<partition>`` raises on every attempt after producing its rows, before preparing,
    once ``release`` exists. Waiting on files lets a test look at the log while tasks are prepared
    and the driver has decided nothing, without depending on how fast anything runs.
    Sink option ``oncestream.test.failAfterPrepare`` (attempt numbers): the task's Python worker
    exits right after prepare, like an executor lost mid-task.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from oncestream.spark.errors import OnceStreamSparkError

# --- Spark driver crash points --------------------------------------------------------------------

CRASH_ENV = "ONCESTREAM_SPARK_CRASH_AT"
DRIVER_PGID_ENV = "ONCESTREAM_SPARK_DRIVER_PGID"
# Spark captures a worker's stderr, so the crash is also noted in this file when it is set.
CRASH_MARKER_ENV = "ONCESTREAM_SPARK_CRASH_MARKER"


def armed(step: str, batch_id: int) -> bool:
    """Whether the environment asks for a crash at ``step`` of ``batch_id``."""
    spec = os.environ.get(CRASH_ENV, "")
    for item in spec.split(","):
        name, _, batch = item.strip().partition(":")
        if name == step and (not batch or int(batch) == batch_id):
            return True
    return False


def crash_if_armed(step: str, batch_id: int) -> None:
    """SIGKILL the driver's process group (and this process) when armed for this step."""
    if not armed(step, batch_id):
        return
    note = f"oncestream: injected driver crash at {step} of batch {batch_id}\n"
    sys.stderr.write(note)
    sys.stderr.flush()
    marker = os.environ.get(CRASH_MARKER_ENV)
    if marker:
        with open(marker, "a") as f:
            f.write(note)
            f.flush()
            os.fsync(f.fileno())
    pgid = int(os.environ.get(DRIVER_PGID_ENV, "0") or 0)
    if pgid > 0:
        os.killpg(pgid, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


# --- Spark write tasks: gates and a lost worker -----------------------------------------------------


def crash_worker(reason: str) -> None:
    """Sink option ``oncestream.test.failAfterPrepare``: the Python worker dies after prepare,
    like an executor lost mid-task (no exception handler, no cleanup); Spark retries the task."""
    sys.stderr.write(f"oncestream: {reason}; exiting the Python worker\n")
    sys.stderr.flush()
    os._exit(17)


# A gate that is never released means the test went wrong; the task fails instead of hanging.
GATE_WAIT_S = 300.0
_GATE_POLL_S = 0.05


class InjectedTaskFailure(OnceStreamSparkError):
    """The failure a ``fail-<partition>`` gate makes a write task raise."""


def _await_release(gate_dir: Path, what: str) -> None:
    deadline = time.monotonic() + GATE_WAIT_S
    while not (gate_dir / "release").exists():
        if time.monotonic() > deadline:
            raise InjectedTaskFailure(f"{what}: the test never created {gate_dir / 'release'}")
        time.sleep(_GATE_POLL_S)


def gate_before_prepare(gate_dir: str | None, partition: int, attempt: int) -> None:
    """With ``fail-<partition>`` in the gate directory: wait for ``release``, then raise."""
    if not gate_dir or not (Path(gate_dir) / f"fail-{partition}").exists():
        return
    _await_release(Path(gate_dir), f"partition {partition} attempt {attempt}")
    raise InjectedTaskFailure(f"injected failure of partition {partition}, attempt {attempt}, before prepare")


def gate_after_prepare(gate_dir: str | None, partition: int, attempt: int, transactional_id: str,
                       state: str) -> None:
    """Report the prepared transaction in the gate directory; hold while ``hold-<partition>``
    exists until ``release`` does."""
    if not gate_dir:
        return
    gate = Path(gate_dir)
    marker = gate / f"prepared-{partition}-{attempt}"
    # Written whole under a temporary name: the test reads the file as soon as it appears.
    tmp = marker.with_suffix(".tmp")
    tmp.write_text(f"{transactional_id} {state}\n")
    tmp.rename(marker)
    if (gate / f"hold-{partition}").exists():
        _await_release(gate, f"partition {partition} attempt {attempt} (held after prepare)")
