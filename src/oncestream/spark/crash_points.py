"""Test-only crash injection: SIGKILL the Spark driver at a named step of a commit.

Inactive unless the environment variable ``ONCESTREAM_SPARK_CRASH_AT`` is set, e.g.
``after-record:3`` (kill when batch 3 reaches the step ``after-record``). The driver process group
to kill comes from ``ONCESTREAM_SPARK_DRIVER_PGID``, which the test harness sets when it starts the
driver in its own session; the commit runs in a Python worker of the driver's JVM, and the whole
group (Python driver, JVM, workers) must die at once, as in a machine crash.

Steps: ``before-record`` (tasks prepared, commit record not written), ``after-record`` (record
written, nothing completed), ``mid-complete`` (some transactions completed), ``after-complete``
(all completed, Spark's commit log not yet written); for the dual writer ``dual-after-prepare``
and ``dual-after-db`` (database committed, transaction not completed).
"""

from __future__ import annotations

import os
import signal
import sys

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
