"""The SQL server's stop is bounded (issue 19, point 6): a node whose Spark JVM hangs (SIGSTOPped,
so stopping Spark through py4j never returns) still exits on SIGTERM, at
``oncestream.shutdown.timeout.ms`` or at once on a second SIGTERM, with the forced status, and
leaves no child process behind (the JVM is killed on the way out)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from oncestream.process_shutdown import FORCED_EXIT_CODE
from tests.support.shutdown_load import wait_for_exit
from tests.support.sql_servers import SqlServerProcess, wait_until

pytestmark = [pytest.mark.chaos, pytest.mark.spark]

BOUND_MS = 2000  # short: the test waits it out; the bound itself is what is checked
# How long past the bound a loaded machine may take to exit: a cap, not a speed claim.
EXIT_MARGIN_S = 60.0


def _node_with_a_hung_jvm(broker, tmp_path: Path, bound_ms: int) -> SqlServerProcess:
    node = SqlServerProcess(bootstrap=broker.bootstrap, service_id="bound_", state_dir=tmp_path / "node",
                            config={"oncestream.shutdown.timeout.ms": str(bound_ms)})
    node.start()  # eager Spark: it starts beside the node, which is ready before it
    assert node.process is not None
    wait_until(lambda: "Spark session ready" in node.log_tail(1 << 20), "Spark to be up", timeout_s=180.0,
               nodes=[node])
    jvms = [pid for pid in node.session_processes() if pid != node.process.pid]
    assert jvms, f"no Spark JVM in the node's session:\n{node.log_tail()}"
    for pid in jvms:
        os.kill(pid, signal.SIGSTOP)  # hung: py4j calls into it never return
    return node


def _wait_exit(node: SqlServerProcess, timeout_s: float) -> int:
    assert node.process is not None
    return wait_for_exit(node.process, timeout_s, "the node", node.log_tail, node.kill)


def _no_child_left(node: SqlServerProcess) -> bool:
    return node.session_processes() == []


def test_a_node_whose_spark_hangs_stops_at_the_bound(broker, tmp_path: Path) -> None:
    node = _node_with_a_hung_jvm(broker, tmp_path, BOUND_MS)
    try:
        node.process.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        code = _wait_exit(node, BOUND_MS / 1000 + EXIT_MARGIN_S)
        assert code == FORCED_EXIT_CODE, node.log_tail()
        assert f"shutdown did not finish within oncestream.shutdown.timeout.ms={BOUND_MS}" in node.log_tail()
        wait_until(lambda: _no_child_left(node), "the node's children to be gone", timeout_s=30.0, nodes=[node])
    finally:
        node.kill()


def test_a_second_sigterm_stops_a_node_whose_spark_hangs_at_once(broker, tmp_path: Path) -> None:
    # A bound far beyond the wait below: only the second signal can end the node in time.
    node = _node_with_a_hung_jvm(broker, tmp_path, 3_600_000)
    try:
        node.process.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        wait_until(lambda: "oncestream sql: shutting down" in node.log_tail(), "the stop to begin", nodes=[node])
        node.process.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        code = _wait_exit(node, EXIT_MARGIN_S)
        assert code == FORCED_EXIT_CODE, node.log_tail()
        assert "second SIGTERM during shutdown" in node.log_tail()
        wait_until(lambda: _no_child_left(node), "the node's children to be gone", timeout_s=30.0, nodes=[node])
    finally:
        node.kill()
