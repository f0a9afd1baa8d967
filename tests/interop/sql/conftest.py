"""One SQL-server node with Spark for the SQL interop modules that only need a node serving REST
(statements, inserts, push queries) and queries that fail: tests/interop/sql/test_node_query_errors.py
and test_rest_e2e.py. Starting a node's Spark session is the largest cost of each of those modules
(10-25 s each in CI); they share one for the session instead.

The broker is the kind under test (tests/conftest.py's ``session_our_broker_factory``: our single
broker, or three cluster brokers in the cluster pass) with the group suites' config and KIP-939
two-phase commit left disabled (Kafka's default): a persistent query on it is refused, which is
what test_node_query_errors checks; the others do not run persistent queries. The group suites
share that running broker (their config), so holding it for the session costs no start of its
own. Tests on the shared node use unique stream and topic names and never stop it.
The node starts Spark lazily, when a query first needs it (``ksql.spark.start=lazy``): whichever
module comes first shows that start on demand.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.support.cluster_kind import BrokerUnderTest
from tests.support.groups import GROUP_BROKER_CONFIG
from tests.support.sql_servers import LAZY_SPARK, SqlServerProcess, running_node


@pytest.fixture(scope="session")
def shared_spark_node(session_our_broker_factory: Callable[..., BrokerUnderTest],
                      tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerUnderTest, SqlServerProcess]]:
    """(broker, node): the broker of the kind under test without two-phase commit, and a node on
    it with lazy Spark (INSERT VALUES and /inserts-stream need no Spark; a persistent or push
    query starts it)."""
    broker = session_our_broker_factory(GROUP_BROKER_CONFIG)
    with running_node(broker, tmp_path_factory.mktemp("shared-spark-node"), config=LAZY_SPARK,
                      name="shared-node") as node:
        yield broker, node
