"""One SQL-server node with Spark for the SQL interop modules that only need a node serving REST
(statements, inserts, push queries) and queries that fail: tests/interop/sql/test_node_query_errors.py
and test_rest_e2e.py. Starting a node's Spark session is the largest cost of each of those modules
(10-25 s each in CI); they share one for the session instead.

The broker is ours with KIP-939 two-phase commit left disabled (Kafka's default): a persistent
query on it is refused, which is what test_node_query_errors checks; the others do not run
persistent queries. Tests on the shared node use unique stream and topic names and never stop it.
The node starts Spark lazily, when a query first needs it (``ksql.spark.start=lazy``): whichever
module comes first shows that start on demand.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.brokers import NO_INITIAL_REBALANCE_DELAY, BrokerProcess
from tests.support.sql_servers import LAZY_SPARK, SqlServerProcess, broker_and_node


@pytest.fixture(scope="session")
def shared_spark_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, SqlServerProcess]]:
    """(broker, node): our broker without two-phase commit, and a node on it with lazy Spark
    (INSERT VALUES and /inserts-stream need no Spark; a persistent or push query starts it)."""
    with broker_and_node(tmp_path_factory.mktemp("shared-spark-node"), broker_config=NO_INITIAL_REBALANCE_DELAY,
                         node_config=LAZY_SPARK, name="shared-node") as (broker, node):
        yield broker, node
