"""SIGTERM (issue 12 "Details"): the SQL-server process ends with status 0 and leaves no child
process, even when the signal comes while Spark's JVM is still starting (the node's own SIGTERM
while serving, with Spark up and a query running, is checked in test_cluster_failover.py)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.support.sql_servers import SqlServerProcess, wait_until

pytestmark = pytest.mark.chaos


def test_sigterm_while_spark_starts(broker, tmp_path: Path) -> None:
    node = SqlServerProcess(bootstrap=broker.bootstrap, service_id="sigterm_", state_dir=tmp_path / "node", config={})
    node.start(wait=False)
    try:
        assert node.process is not None
        pid = node.process.pid
        # The JVM (a child of the node) exists: Spark is starting.
        wait_until(lambda: [p for p in node.session_processes() if p != pid], "the Spark JVM to start", nodes=[node])
        node.process.send_signal(signal.SIGTERM)
        assert node.process.wait(120) == 0, node.log_tail()
        assert node.session_processes() == [], node.log_tail()
    finally:
        node.kill()
