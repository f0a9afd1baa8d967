"""Test-only hooks: fault injection and gates, gathered here so production code calls one small
function per hook and nothing else. None of this is for production use; every hook is inert
unless a test switches it on in one of these ways:

Broker (``TxnCrashPoint``)
    Broker property ``oncestream.fault.txn.crash.point`` = ``before-markers`` (PrepareCommit
    durable, no marker written), ``between-markers`` (after the first marker) or
    ``before-complete`` (every marker written, CompleteCommit not yet): the broker SIGKILLs itself
    at that step of every committing transaction; the chaos suite restarts it without the
    property and checks that recovery finishes the commit. ``TxnService`` calls
    ``TxnCrashPoint.reached(step)`` at each step.

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

Broker internal topics (``internal_append_fault_from``)
    Broker property ``oncestream.test.internal.append.fail.file``: while the file it names exists,
    every append to an internal topic (``__consumer_offsets``, ``__transaction_state``) fails with
    StorageError, so tests through a real broker can check that no coordinator answers NONE for
    records that never reached the log.

State-store materializer (``state_commit_crash_hook_from_env``)
    Environment variables ``ONCESTREAM_STATE_CRASH_POINT`` (``before-batch``, ``inside-batch``,
    ``after-batch``) and ``ONCESTREAM_STATE_CRASH_AT_COMMIT`` (1-based, default 1): the
    materializer process SIGKILLs itself at that point of that store commit.

SQL server write protocol (``SqlCrashPoint``)
    SQL-server property ``oncestream.test.sql.crash.step`` (``--config``) names a step of the
    command-topic write protocol (``oncestream.sql.server.command_topic.WRITE_STEPS``: ``init``,
    ``begun``, ``end-offset``, ``caught-up``, ``validated``, ``produced``, ``committed``,
    ``applied``): the node SIGKILLs itself the first time a statement reaches it; the chaos suite
    restarts it without the property and checks that nothing was lost, doubled or half-applied.

Broker principal from client.id (``principal_from_client_id``)
    Broker property ``oncestream.test.principal.from.client.id=true``: a request whose client.id
    is ``principal:NAME`` makes its connection's principal ``User:NAME``, so ACL tests can act as
    several users before SASL or mTLS exist. Off by default; it lets any client claim any
    identity, so it must never be set outside tests.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from oncestream.spark.errors import OnceStreamSparkError

# --- broker: transaction coordinator crash points -------------------------------------------------

CRASH_POINT_PROPERTY = "oncestream.fault.txn.crash.point"
CRASH_POINTS = ("before-markers", "between-markers", "before-complete")


def _sigkill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class TxnCrashPoint:
    """The broker's configured transaction crash point (``CRASH_POINT_PROPERTY``), or none.

    ``crash`` is what reaching the point does (SIGKILL of this process; a test may pass another
    callable to observe the call without dying)."""

    def __init__(self, point: str | None, crash: Callable[[], None] = _sigkill_self) -> None:
        if point not in (None, *CRASH_POINTS):
            raise ValueError(f"{CRASH_POINT_PROPERTY} must be one of {CRASH_POINTS}, got {point!r}")
        self.point = point
        self._crash = crash

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> TxnCrashPoint:
        """The crash point the broker properties ask for (none without the property)."""
        return cls(props.get(CRASH_POINT_PROPERTY))

    def reached(self, step: str) -> None:
        """A committing transaction reached ``step``: crash now if that is the configured point."""
        if self.point is not None and step == self.point:
            self._crash()


# --- SQL server: command-topic write protocol crash points -----------------------------------------

SQL_CRASH_STEP_PROPERTY = "oncestream.test.sql.crash.step"


class SqlCrashPoint:
    """The SQL node's configured write-protocol crash step (``SQL_CRASH_STEP_PROPERTY``), or none."""

    def __init__(self, step: str | None, steps: tuple[str, ...], crash: Callable[[], None] = _sigkill_self) -> None:
        if step not in (None, *steps):
            raise ValueError(f"{SQL_CRASH_STEP_PROPERTY} must be one of {steps}, got {step!r}")
        self.step = step
        self._crash = crash

    def reached(self, step: str) -> None:
        """A statement being written reached ``step``: crash now if that is the configured step."""
        if self.step is not None and step == self.step:
            sys.stderr.write(f"oncestream: injected SQL node crash at write step {step}\n")
            sys.stderr.flush()
            self._crash()


# --- broker: principal from client.id (ACL tests) -------------------------------------------------

PRINCIPAL_FROM_CLIENT_ID_PROPERTY = "oncestream.test.principal.from.client.id"
_CLIENT_ID_PRINCIPAL_PREFIX = "principal:"


def principal_from_client_id_enabled(props: Mapping[str, str]) -> bool:
    """Whether the broker properties switch the test-only identity hook on."""
    return props.get(PRINCIPAL_FROM_CLIENT_ID_PROPERTY, "false").strip().lower() == "true"


def principal_from_client_id(client_id: str | None) -> str | None:
    """``User:NAME`` for client.id ``principal:NAME``; None for any other client.id."""
    if client_id and client_id.startswith(_CLIENT_ID_PRINCIPAL_PREFIX) and len(client_id) > len(_CLIENT_ID_PRINCIPAL_PREFIX):
        return "User:" + client_id[len(_CLIENT_ID_PRINCIPAL_PREFIX):]
    return None


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


# --- broker: internal-topic append faults ---------------------------------------------------------

APPEND_FAULT_FILE_PROPERTY = "oncestream.test.internal.append.fail.file"


def internal_append_fault_from(props: Mapping[str, str]) -> Callable[[], bool] | None:
    """The append fault named by ``APPEND_FAULT_FILE_PROPERTY``, if the broker has one: a check
    that is true while the file exists (InternalTopic then refuses the append)."""
    path = props.get(APPEND_FAULT_FILE_PROPERTY)
    if not path:
        return None
    return lambda: os.path.exists(path)


# --- state-store materializer: commit crash points --------------------------------------------------

STATE_CRASH_POINT_ENV = "ONCESTREAM_STATE_CRASH_POINT"
STATE_CRASH_AT_COMMIT_ENV = "ONCESTREAM_STATE_CRASH_AT_COMMIT"
STATE_CRASH_POINTS = ("before-batch", "inside-batch", "after-batch")


def state_commit_crash_hook_from_env(environ: Mapping[str, str] = os.environ) -> Callable[[str], None] | None:
    """A store fault hook that SIGKILLs this process at ``STATE_CRASH_POINT_ENV`` of commit number
    ``STATE_CRASH_AT_COMMIT_ENV``, or None when the variable is unset."""
    point = environ.get(STATE_CRASH_POINT_ENV)
    if not point:
        return None
    if point not in STATE_CRASH_POINTS:
        raise ValueError(f"{STATE_CRASH_POINT_ENV} must be one of {', '.join(STATE_CRASH_POINTS)}")
    at_commit = int(environ.get(STATE_CRASH_AT_COMMIT_ENV, "1"))
    seen = {"commits": 0}

    def hook(name: str) -> None:
        if name == "before-batch":
            seen["commits"] += 1
        if name == point and seen["commits"] == at_commit:
            _sigkill_self()

    return hook
