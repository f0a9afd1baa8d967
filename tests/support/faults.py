"""Faults the test tree injects into our processes through their seams (never through a property,
option or environment variable the shipped code reads):

- ``SigkillAtStep``: a step observer (the transaction coordinator's ``TxnStepObserver``, the SQL
  node's write-step observer, the state store's commit fault hook) that SIGKILLs this process
  when a named step is reached, as a machine crash at exactly that point;
- ``FileSwitchedAppendFault``: an internal-topic appender (broker/internal_topic.py) whose appends
  fail with StorageError while a file exists, so a test through a real broker process can switch
  the failure on and off from outside;
- ``loop_that_loses_every_cancellation``: a broker background loop that swallows every
  cancellation (the bug a bounded shutdown must survive);
- ``fdatasync_hanging_when``: an ``fdatasync`` that never returns once a file exists (a disk that
  stopped answering: the disk thread running it can never be joined).

The launchers beside this module (broker_with_faults, sql_node_with_faults,
materializer_with_crash) build our processes through their Python entries with these injected.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from oncestream.broker.internal_topic import LogAppender
from oncestream.errors import StorageError
from oncestream.log.partition_log import PartitionLog

# The repository root: a launcher module runs as ``python -m tests.support.<name>`` from here.
REPO_ROOT = Path(__file__).resolve().parents[2]


def child_environment(base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (this process's environment by default) with the repository root and its src/
    first on PYTHONPATH, so a child process can import ``tests.support`` modules."""
    env = dict(os.environ if base is None else base)
    parts = [str(REPO_ROOT / "src"), str(REPO_ROOT), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in parts if p)
    return env


class SigkillAtStep:
    """SIGKILL this process when step ``step`` is reached for the ``at``-th time (1-based), after
    a line on stderr saying so (the test's log shows where the process died)."""

    def __init__(self, step: str, steps: tuple[str, ...], *, what: str, at: int = 1) -> None:
        if step not in steps:
            raise ValueError(f"{what} crash step must be one of {steps}, got {step!r}")
        if at < 1:
            raise ValueError(f"the occurrence to crash at is 1-based, got {at}")
        self.step = step
        self.what = what
        self._left = at

    def reached(self, step: str) -> None:
        """Observer entry: a step was reached; die if it is the chosen occurrence of ours."""
        if step != self.step:
            return
        self._left -= 1
        if self._left == 0:
            sys.stderr.write(f"oncestream test: injected {self.what} crash at step {step}\n")
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    __call__ = reached  # the state store's fault hook is a plain callable


class FileSwitchedAppendFault(LogAppender):
    """Internal-topic appends fail with StorageError while ``switch_file`` exists."""

    def __init__(self, switch_file: str | os.PathLike[str]) -> None:
        self.switch_file = Path(switch_file)

    def append(self, topic: str, partition: int, log: PartitionLog, batch: bytes, now_ms: int) -> None:
        """Refuse the append while the switch file exists, else append as the broker does."""
        if self.switch_file.exists():
            raise StorageError(f"injected append failure on {topic}-{partition} ({self.switch_file} exists)")
        super().append(topic, partition, log, batch, now_ms)


async def loop_that_loses_every_cancellation() -> None:
    """Sleeps forever; a cancellation only starts the next sleep (logged, so a test sees it)."""
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            logging.getLogger("stuck-loop").info("cancelled, and carrying on")
            continue


def fdatasync_hanging_when(gate: Path) -> Callable[[int], None]:
    """``os.fdatasync``, except that once ``gate`` exists it blocks forever."""
    never = threading.Event()

    def fdatasync(fd: int) -> None:
        if gate.exists():
            logging.getLogger("stuck-fsync").info("fdatasync hangs")
            never.wait()
        os.fdatasync(fd)

    return fdatasync


def fdatasync_held_while(gate: Path, poll_s: float = 0.01) -> Callable[[int], None]:
    """``os.fdatasync``, except that while ``gate`` exists it waits (looking every ``poll_s``):
    a test holds every fsync round, looks at what the broker does meanwhile, then lets them go."""

    def fdatasync(fd: int) -> None:
        while gate.exists():
            time.sleep(poll_s)
        os.fdatasync(fd)

    return fdatasync


def split_launcher_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """A launcher's own options and, after ``--``, the process's ordinary command line."""
    if "--" not in argv:
        raise SystemExit("usage: python -m tests.support.<launcher> [fault options] -- <command line>")
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1:]
