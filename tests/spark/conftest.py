"""Fixtures of the Spark connector suite: one SparkSession for the whole run (a JVM start costs
several seconds) and a broker with KIP-939 two-phase commit enabled."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

from tests.support.brokers import BrokerProcess

TWO_PC_CONFIG = {"transaction.two.phase.commit.enable": "true"}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "spark: PySpark connector (starts a JVM)")


@pytest.fixture(scope="session")
def spark():
    """A local SparkSession allowing 4 task attempts (so injected task failures are retried)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import oncestream.spark

    session = (SparkSession.builder.master("local[2,4]").appName("oncestream-spark-tests")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    oncestream.spark.register(session)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def eos_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """Our broker with transaction.two.phase.commit.enable=true, for a whole module."""
    broker = BrokerProcess(data_dir=tmp_path_factory.mktemp("eos-broker") / "data", config=TWO_PC_CONFIG)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()
