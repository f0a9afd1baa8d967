"""One SQL-server node with Spark for the SQL interop modules that only need a node serving REST
(statements, inserts, push queries) and queries that fail: tests/interop/sql/test_node_info.py,
test_node_query_errors.py and test_rest_e2e.py. Starting a node's Spark session is the largest cost
of each of those modules (10-25 s each); they share one for the session instead.

The broker is ours with KIP-939 two-phase commit left disabled (Kafka's default): a persistent
query on it is refused, which is what test_node_query_errors checks; the others do not run
persistent queries. Tests on the shared node use unique stream and topic names and never stop it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.support.brokers import NO_INITIAL_REBALANCE_DELAY, BrokerProcess
from tests.support.sql_servers import SqlServerProcess


@pytest.fixture(scope="session")
def shared_spark_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, SqlServerProcess]]:
    """(broker, node): our broker without two-phase commit, and a node on it whose Spark starts
    with it (not lazily: ksql-python-ng's inserts_stream waits 5 s at most, less than a first
    INSERT that had to start the JVM)."""
    base = tmp_path_factory.mktemp("shared-spark-node")
    broker = BrokerProcess(data_dir=base / "data", config=NO_INITIAL_REBALANCE_DELAY)
    broker.start()
    try:
        node = SqlServerProcess(bootstrap=broker.bootstrap, service_id=f"shared_{uuid.uuid4().hex[:6]}_",
                                state_dir=base / "node", name="shared-node")
        try:
            node.start()
            yield broker, node
        finally:
            node.stop()
    finally:
        broker.stop()
