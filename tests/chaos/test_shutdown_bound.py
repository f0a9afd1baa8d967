"""The bound on a broker's shutdown (issue 19, point 6), shown with a loop that never ends.

The broker runs with one extra background loop that swallows every cancellation (handed to
``run_broker`` through its ``background`` seam by ``tests/support/stuck_broker.py``), so its clean
stop can never finish. SIGTERM must still end the process: at ``oncestream.shutdown.timeout.ms``
with the forced status and the threads' stacks in its log, or at once on a second SIGTERM. Either
way the data directory is released and a normal broker starts on it.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from oncestream.process_shutdown import FORCED_EXIT_CODE
from tests.support.brokers import READY_TIMEOUT_S, BrokerProcess, ManagedBroker
from tests.support.clients import create_topic, unique_topic
from tests.support.shutdown_load import wait_for_exit

pytestmark = pytest.mark.chaos

ROOT = Path(__file__).resolve().parents[2]
BOUND_MS = 3000
# How long past the bound a loaded machine may take to notice and exit: a cap, not a speed claim.
EXIT_MARGIN_S = 30.0


class StuckBroker(ManagedBroker):
    """``tests.support.stuck_broker`` on a data directory."""

    name = "stuck-broker"

    def __init__(self, data_dir: Path, config: dict[str, str]) -> None:
        super().__init__(data_dir.parent / "logs", ready_timeout_s=READY_TIMEOUT_S)
        self.data_dir = data_dir
        self.config = config

    def command(self) -> list[str]:
        argv = [sys.executable, "-m", "tests.support.stuck_broker", "--data-dir", str(self.data_dir),
                "--listen", self.bootstrap]
        for key, value in self.config.items():
            argv += ["--config", f"{key}={value}"]
        return argv

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")])
        return env


def _wait_exit(broker: ManagedBroker, timeout_s: float) -> int:
    assert broker.process is not None
    return wait_for_exit(broker.process, timeout_s, "the broker", broker.output_tail, broker.kill)


def _wait_for_output(broker: ManagedBroker, text: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in broker.output_tail():
        assert broker.is_alive(), f"exited before logging {text!r}:\n{broker.output_tail()}"
        assert time.monotonic() < deadline, f"{text!r} not logged within {timeout_s:.0f} s:\n{broker.output_tail()}"
        time.sleep(0.05)


def _restarts_cleanly(data_dir: Path, topic: str) -> None:
    """A normal broker opens the data directory (lock released) and still has the topic."""
    from tests.support.clients import admin_client

    broker = BrokerProcess(data_dir)
    broker.start()
    try:
        topics = admin_client(broker.bootstrap).list_topics(timeout=30).topics
        assert topic in topics, f"{topic} missing after the forced exit: {sorted(topics)}"
    finally:
        assert broker.stop() == 0, broker.output_tail()


def test_a_shutdown_that_cannot_finish_ends_at_the_bound(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    broker = StuckBroker(data_dir, {"oncestream.shutdown.timeout.ms": str(BOUND_MS)})
    broker.start()
    topic = unique_topic("bound")
    create_topic(broker.bootstrap, topic)
    broker.process.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
    code = _wait_exit(broker, BOUND_MS / 1000 + EXIT_MARGIN_S)
    output = broker.output_tail()
    assert code == FORCED_EXIT_CODE, output
    assert "shutdown did not finish within oncestream.shutdown.timeout.ms=3000" in output
    assert "loop_that_loses_every_cancellation" in output  # the stuck task was named, with its stack
    _restarts_cleanly(data_dir, topic)


def test_a_second_sigterm_exits_at_once(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    # A bound far beyond the wait below: only the second signal can end this process in time.
    broker = StuckBroker(data_dir, {"oncestream.shutdown.timeout.ms": "3600000"})
    broker.start()
    topic = unique_topic("second")
    create_topic(broker.bootstrap, topic)
    broker.process.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
    _wait_for_output(broker, "cancelled, and carrying on", EXIT_MARGIN_S)
    broker.process.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
    code = _wait_exit(broker, EXIT_MARGIN_S)
    output = broker.output_tail()
    assert code == FORCED_EXIT_CODE, output
    assert "second SIGTERM during shutdown" in output
    _restarts_cleanly(data_dir, topic)
