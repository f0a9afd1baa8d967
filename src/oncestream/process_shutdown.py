"""A bounded shutdown for a server process (the broker, the SQL server).

The first SIGTERM (or SIGINT) asks the process to stop cleanly and starts a clock: the stop has
``oncestream.shutdown.timeout.ms`` to finish. A second signal, or the bound passing, ends the
process at once (``os._exit``), whatever it is doing: a task that lost its cancellation, a disk
thread stuck in a syscall, a library thread nobody can join. Exiting hard is safe: it is what a
SIGKILL does, and no acknowledged write is lost to a SIGKILL (the log recovers on restart).

Why not rely on the event loop for the second signal: the clean stop may block the loop's thread
(joining disk threads, stopping a JVM), and a loop-side signal handler would then never run. After
the first signal the handler is a plain Python one, which the interpreter runs in the main thread
between bytecodes and also when a blocking wait (a lock, a join, ``select``) is interrupted by the
signal. The bound itself is a daemon thread that needs nothing from the main thread.

Before a forced exit the stacks of every thread are written to stderr, so the log says what held
the process.
"""

from __future__ import annotations

import asyncio
import faulthandler
import os
import signal
import sys
import threading
import time
from collections.abc import Callable

DEFAULT_SHUTDOWN_TIMEOUT_MS = 30_000
SHUTDOWN_TIMEOUT_PROPERTY = "oncestream.shutdown.timeout.ms"
# The exit status of a stop that did not finish (second signal, or the bound passed).
FORCED_EXIT_CODE = 1
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def shutdown_timeout_ms(props: dict[str, str], default_ms: int = DEFAULT_SHUTDOWN_TIMEOUT_MS) -> int:
    """``oncestream.shutdown.timeout.ms`` from ``props`` (positive), else ``default_ms``."""
    text = props.get(SHUTDOWN_TIMEOUT_PROPERTY)
    if text is None:
        return default_ms
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{SHUTDOWN_TIMEOUT_PROPERTY}={text!r}: must be a positive number of milliseconds")
    return value


def _write_stderr(text: str) -> None:
    # os.write, not logging or print: this may run in a signal handler that interrupted a write
    # holding the logging lock or sys.stderr's buffer.
    try:
        os.write(2, text.encode("utf-8", "replace"))
    except OSError:
        pass


class ShutdownBound:
    """The clock of one process's shutdown, and the way out when it runs over.

    ``begin()`` (idempotent) starts the clock (call it from the main thread); ``finished()`` says the clean stop is done (the
    durable state is closed), after which the bound passing exits with status 0: only threads
    nobody can join are left. ``force(reason)`` exits at once with ``FORCED_EXIT_CODE``.
    ``exit_now`` is ``os._exit`` outside unit tests.
    """

    def __init__(self, bound_ms: int, what: str, *, exit_now: Callable[[int], object] = os._exit,
                 before_forced_exit: Callable[[], object] | None = None) -> None:
        if bound_ms < 1:
            raise ValueError(f"the shutdown bound must be positive, not {bound_ms} ms")
        self.bound_ms = bound_ms
        self.what = what
        self._exit_now = exit_now
        # Best effort before a forced exit (the SQL server kills its Spark JVM): never raises.
        self._before_forced_exit = before_forced_exit
        self._begun = False
        self._finished = threading.Event()
        self._lock = threading.Lock()
        self._watchdog: threading.Thread | None = None

    @property
    def begun(self) -> bool:
        """True once a stop was asked for."""
        return self._begun

    def begin(self) -> None:
        """Start the clock (the first call only)."""
        with self._lock:
            if self._begun:
                return
            self._begun = True
            self._watchdog = threading.Thread(target=self._watch, name=f"{self.what}-shutdown-bound", daemon=True)
            self._watchdog.start()

    def finished(self) -> None:
        """The clean stop is done: from now on the bound passing exits with status 0."""
        self._finished.set()

    def force(self, reason: str) -> None:
        """Exit the process now with ``FORCED_EXIT_CODE``, after writing why and every thread's
        stack to stderr."""
        _write_stderr(f"{self.what}: {reason}: exiting at once (status {FORCED_EXIT_CODE}); threads follow\n")
        try:
            faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        except (OSError, ValueError, RuntimeError):
            pass  # no usable stderr: exit all the same
        if self._before_forced_exit is not None:
            try:
                self._before_forced_exit()
            except Exception as exc:  # noqa: BLE001  # exiting all the same; say why it failed
                _write_stderr(f"{self.what}: before exiting: {type(exc).__name__}: {exc}\n")
        self._exit_now(FORCED_EXIT_CODE)

    def _watch(self) -> None:
        if not self._finished.wait(self.bound_ms / 1000):
            self.force(f"shutdown did not finish within {SHUTDOWN_TIMEOUT_PROPERTY}={self.bound_ms}")
            return
        # Stopped cleanly: the interpreter now exits, joining the threads it knows of (this
        # daemon thread dies with it). One that never ends would hold the process: after the same
        # bound again, leave with the clean status.
        time.sleep(self.bound_ms / 1000)
        _write_stderr(f"{self.what}: stopped cleanly but a thread still runs {self.bound_ms} ms later: "
                      "exiting with status 0\n")
        self._exit_now(0)

    # -- signals --------------------------------------------------------------------------------
    def on_second_signal(self, signum: int, _frame: object) -> None:
        """A plain signal handler: the stop is under way and someone insists."""
        self.force(f"second {signal.Signals(signum).name} during shutdown")

    def arm_second_signal(self) -> None:
        """From now on SIGTERM/SIGINT exit at once (call from the main thread)."""
        for sig in STOP_SIGNALS:
            signal.signal(sig, self.on_second_signal)


def install_stop_signals(loop: asyncio.AbstractEventLoop, bound: ShutdownBound, stop: Callable[[], None]) -> None:
    """SIGTERM/SIGINT on ``loop``: the first one starts ``bound`` and calls ``stop()``; any later
    one exits at once (a plain handler, which runs even while the loop's thread is blocked)."""

    def first() -> None:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)
        bound.arm_second_signal()
        bound.begin()
        stop()

    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, first)
