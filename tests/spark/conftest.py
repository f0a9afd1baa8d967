"""Fixtures of the Spark connector suite: one SparkSession at a time for the whole run (a JVM start
costs several seconds), either ``local[2,4]`` (``spark``) or a ``local-cluster[2,1,1024]`` with
two executor JVMs (``spark_cluster``), and a broker with KIP-939 two-phase commit enabled."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oncestream.spark.driver_python import launcher_path
from tests.support.brokers import BrokerProcess

TWO_PC_CONFIG = {"transaction.two.phase.commit.enable": "true"}
ROOT = Path(__file__).resolve().parents[2]

LOCAL_MASTER = "local[2,4]"
# Two executors of one core and 1 GiB each: separate JVMs with their own Python workers, as on a
# cluster (Spark's own test mode, a standalone master and workers inside the driver's JVM).
CLUSTER_MASTER = "local-cluster[2,1,1024]"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "spark: PySpark connector (starts a JVM)")


def executor_pythonpath() -> str:
    """PYTHONPATH for executors: this checkout's sources first, so their Python workers import the
    oncestream under test (not another installed copy)."""
    parts = [str(ROOT / "src"), str(ROOT), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    return os.pathsep.join(dict.fromkeys(p for p in parts if p))


class _SparkSessions:
    """The one SparkSession of this process (a JVM holds one SparkContext): switching master stops
    the current session and starts the other. Test files run in order, so a run switches only at
    the local-cluster module's edges."""

    def __init__(self) -> None:
        self.master: str | None = None
        self.session: Any = None

    def get(self, master: str) -> Any:
        if self.master == master and self.session is not None:
            return self.session
        self.stop()
        os.environ["PYSPARK_PYTHON"] = sys.executable
        # The driver's data-source processes as the SQL server starts them (docs/spark-connector-options.md).
        os.environ["PYSPARK_DRIVER_PYTHON"] = launcher_path()
        # Executors inherit the environment of the process that starts them (the standalone
        # worker inside this JVM), so this reaches their Python workers too.
        os.environ["PYTHONPATH"] = executor_pythonpath()
        from pyspark.sql import SparkSession

        import oncestream.spark

        builder = (SparkSession.builder.master(master).appName("oncestream-spark-tests")
                   .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2"))
        if master == CLUSTER_MASTER:
            builder = (builder.config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
                       .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
                       # A lost executor's task is retried: allow as many attempts as local[2,4].
                       .config("spark.task.maxFailures", "4"))
        session = builder.getOrCreate()
        session.sparkContext.setLogLevel("ERROR")
        oncestream.spark.register(session)
        self.master, self.session = master, session
        return session

    def stop(self) -> None:
        if self.session is not None:
            self.session.stop()
        self.master, self.session = None, None


@pytest.fixture(scope="session")
def _spark_sessions() -> Iterator[_SparkSessions]:
    sessions = _SparkSessions()
    yield sessions
    sessions.stop()


@pytest.fixture
def spark(_spark_sessions: _SparkSessions):
    """A local SparkSession allowing 4 task attempts (so injected task failures are retried)."""
    return _spark_sessions.get(LOCAL_MASTER)


@pytest.fixture
def spark_cluster(_spark_sessions: _SparkSessions):
    """A ``local-cluster[2,1,1024]`` SparkSession: two executor JVMs (one core each) with their own
    Python workers, in other processes than the driver, as on a real cluster."""
    return _spark_sessions.get(CLUSTER_MASTER)


@pytest.fixture(scope="module")
def eos_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """Our broker with transaction.two.phase.commit.enable=true, for a whole module."""
    broker = BrokerProcess(data_dir=tmp_path_factory.mktemp("eos-broker") / "data", config=TWO_PC_CONFIG)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()
