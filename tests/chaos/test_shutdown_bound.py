"""The bound on a broker's shutdown (issue 19, point 6), shown with a loop that never ends.

The broker runs with one extra background loop that swallows every cancellation, or with a disk
thread stuck in an fdatasync that never returns (handed to ``run_broker`` through its
seams, ``BrokerSeams.background_loops`` and ``.fdatasync``, by ``tests/support/broker_with_faults.py``), so its clean stop can
never finish. SIGTERM must still end the process: at ``oncestream.shutdown.timeout.ms``
with the forced status and the threads' stacks in its log, or at once on a second SIGTERM. Either
way the data directory is released and a normal broker starts on it.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from oncestream.process_shutdown import FORCED_EXIT_CODE
from tests.support.brokers import BrokerFaults, BrokerProcess, ManagedBroker
from tests.support.clients import create_topic, unique_topic
from tests.support.shutdown_load import wait_for_exit

pytestmark = pytest.mark.chaos

BOUND_MS = 3000
# How long past the bound a loaded machine may take to notice and exit: a cap, not a speed claim.
EXIT_MARGIN_S = 30.0


def _stuck_broker(tmp_path: Path, bound_ms: int, faults: BrokerFaults) -> BrokerProcess:
    return BrokerProcess(tmp_path / "data", config={"oncestream.shutdown.timeout.ms": str(bound_ms)}, faults=faults)


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
    broker = _stuck_broker(tmp_path, BOUND_MS, BrokerFaults(stuck_background_loop=True))
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
    broker = _stuck_broker(tmp_path, 3_600_000, BrokerFaults(stuck_background_loop=True))
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


def test_a_disk_thread_stuck_in_fsync_cannot_hold_the_process(tmp_path: Path) -> None:
    """acks=all on a flush.messages=1 topic puts a disk thread in the hanging fdatasync; the
    clean stop then cannot join the disk threads, and the bound ends the process."""
    from confluent_kafka import Producer

    data_dir = tmp_path / "data"
    gate = tmp_path / "hang-fsync"
    broker = _stuck_broker(tmp_path, BOUND_MS, BrokerFaults(hang_fsync_file=gate))
    broker.start()
    topic = unique_topic("fsync")
    create_topic(broker.bootstrap, topic, config={"flush.messages": "1"})
    gate.touch()
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "log_level": 0})
    producer.produce(topic, b"never acknowledged")
    producer.poll(0)
    _wait_for_output(broker, "fdatasync hangs", EXIT_MARGIN_S)
    broker.process.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
    code = _wait_exit(broker, BOUND_MS / 1000 + EXIT_MARGIN_S)
    output = broker.output_tail()
    assert code == FORCED_EXIT_CODE, output
    assert "shutdown did not finish within oncestream.shutdown.timeout.ms=3000" in output
    producer.purge()
    producer.flush(0)
    gate.unlink()
    _restarts_cleanly(data_dir, topic)
