"""Broker processes for tests and benchmarks: our broker (``BrokerProcess``) and Tansu (``TansuProcess``).

A thin test layer over ``oncestream.broker_process`` (the one helper that runs a broker as a child
process, shared with the demos and benchmarks): test-suite defaults (a 20 s readiness cap, logs
beside the data dir) and the names the suites import. Each broker runs in its own session so a
test can SIGKILL exactly the broker and nothing else; one that dies or never listens fails with
the tail of its stderr so the cause is in the test report.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from oncestream.broker_process import (
    HOST,
    BrokerExitedEarly,
    BrokerStartError,
    ManagedBroker,
    OnceStreamBroker,
    TansuBroker,
    oncestream_command,
    tansu_executable,
)
from tests.support.faults import child_environment

READY_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 15.0
# Drops Kafka's 3 s group.initial.rebalance.delay.ms: it only makes each new group's first join
# wait, and what a test checks happens after that join either way. A test module sets
# ``MODULE_BROKER_CONFIG = NO_INITIAL_REBALANCE_DELAY`` to run conftest's ``broker`` with it.
NO_INITIAL_REBALANCE_DELAY = {"group.initial.rebalance.delay.ms": "0"}

__all__ = [
    "HOST",
    "NO_INITIAL_REBALANCE_DELAY",
    "READY_TIMEOUT_S",
    "STOP_TIMEOUT_S",
    "BrokerExitedEarly",
    "BrokerFaults",
    "BrokerProcess",
    "BrokerStartError",
    "ManagedBroker",
    "TansuProcess",
    "oncestream_executable",
    "tansu_executable",
]


def oncestream_executable() -> str:
    """Path of the ``oncestream`` console script installed next to the running interpreter."""
    command = oncestream_command()
    if len(command) != 1:
        raise BrokerStartError("the `oncestream` command is not installed (pip install -e .)")
    return command[0]


@dataclass(frozen=True)
class BrokerFaults:
    """Faults injected into the broker through its seams (tests/support/broker_with_faults.py)."""

    txn_crash_point: str | None = None          # txn_service.TXN_STEPS: SIGKILL at that commit step
    internal_append_fail_file: Path | None = None  # internal-topic appends fail while it exists
    stuck_background_loop: bool = False  # one more background loop, deaf to cancellation
    hang_fsync_file: Path | None = None  # fdatasync never returns once it exists
    hold_fsync_file: Path | None = None  # fdatasync waits while it exists

    def argv(self) -> list[str]:
        out: list[str] = []
        if self.txn_crash_point is not None:
            out += ["--txn-crash-point", self.txn_crash_point]
        if self.internal_append_fail_file is not None:
            out += ["--internal-append-fail-file", str(self.internal_append_fail_file)]
        if self.stuck_background_loop:
            out.append("--stuck-background-loop")
        if self.hang_fsync_file is not None:
            out += ["--hang-fsync-file", str(self.hang_fsync_file)]
        if self.hold_fsync_file is not None:
            out += ["--hold-fsync-file", str(self.hold_fsync_file)]
        return out


class BrokerProcess(OnceStreamBroker):
    """An ``oncestream broker`` process with a data directory that survives restarts.

    ``config`` holds Kafka broker property names passed as ``--config key=value``. With
    ``faults`` the broker is started through ``python -m tests.support.broker_with_faults`` with
    those faults injected; set ``faults`` to None before a restart to bring it back without them.
    The process can import the test tree (``principal.builder.class`` from tests/support).
    """

    def __init__(self, data_dir: Path, port: int | None = None, config: dict[str, str] | None = None,
                 log_dir: Path | None = None, faults: BrokerFaults | None = None) -> None:
        super().__init__(data_dir, port, config, log_dir, ready_timeout_s=READY_TIMEOUT_S)
        self.faults = faults

    def command(self) -> list[str]:
        argv = super().command()
        if self.faults is None:
            return argv
        cli_args = argv[len(oncestream_command()):]  # ``broker --data-dir ...``
        return [sys.executable, "-m", "tests.support.broker_with_faults", *self.faults.argv(), "--", *cli_args]

    def environment(self) -> dict[str, str]:
        return child_environment(super().environment())

    def stderr_tail(self) -> str:
        """The last few KB of the current run's stderr, for failure messages."""
        return self.output_tail()


class TansuProcess(TansuBroker):
    """A Tansu broker with in-memory storage: every restart starts empty."""

    def __init__(self, log_dir: Path, port: int | None = None) -> None:
        super().__init__(log_dir, port, ready_timeout_s=READY_TIMEOUT_S)

    def stderr_tail(self) -> str:
        """The last few KB of the current run's stderr, for failure messages."""
        return self.output_tail()


# Older spelling, still imported by some suites.
_ManagedBroker = ManagedBroker
