"""The SQL server on a three-broker cluster (issue 22 point 6: the SQL server and pull queries work
unchanged on a cluster of stateless brokers on PostgreSQL and SeaweedFS).

One ``oncestream sql-server`` node bootstrapped from all three brokers. Its command topic is a
transactional single-partition topic (each statement: init_transactions, begin, produce, commit,
then the node's runner reads it back read_committed), here a diskless topic whose transaction
coordinator lives on a lease in PostgreSQL. The test sends CREATE STREAM and a CTAS (a
persistent GROUP BY query writing through the exactly-once sink, KIP-939), produces the input
with librdkafka, and then: a push query sees the input rows, a pull query answers the table's
final totals from the node's store, the table's topic read with librdkafka read_committed ends
at the same totals, and the command topic read the same way holds the two statements.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.spark.conftest import TWO_PC_CONFIG
from tests.spark.spark_support import read_committed
from tests.spark.sql.test_sql_server_cluster import CUSTOMERS, EARLIEST, _orders, _produce
from tests.support.cluster import cluster_factory  # noqa: F401  (fixture)
from tests.support.sql_servers import SqlServerProcess, wait_until

pytestmark = [pytest.mark.spark]

PUSH_ROWS = 5


def _query_stream(node: SqlServerProcess, sql: str, properties: dict[str, Any] | None = None) -> httpx.Response:
    """POST /query-stream (a push query with LIMIT, or a pull query) answered as one JSON array.
    The bound is generous: a push query starts a Spark streaming query, which on a loaded
    machine took over 120 s to answer."""
    assert node.url is not None
    return httpx.post(f"{node.url}/query-stream", json={"sql": sql, "properties": properties or {}},
                      headers={"Accept": "application/json"}, timeout=300)


def _rows(response: httpx.Response) -> list[list[Any]] | None:
    """The rows of a 200 answer (after its header), else None."""
    if response.status_code != 200:
        return None
    return [row for row in response.json()[1:] if isinstance(row, list)]


@pytest.mark.timeout(600)  # a node starting Spark, on a loaded machine
def test_sql_server_on_a_cluster_streams_pushes_and_pulls(tmp_path: Path, cluster_factory) -> None:
    cluster = cluster_factory(3, TWO_PC_CONFIG)
    bootstrap = cluster.bootstrap
    suffix = uuid.uuid4().hex[:6]
    src, totals = f"orders_{suffix}", f"totals_{suffix}"
    service_id = f"bc_{suffix}_"
    node = SqlServerProcess(bootstrap=bootstrap, service_id=service_id, state_dir=tmp_path / "node",
                            config={"spark.sql.shuffle.partitions": "2"})
    try:
        node.start()
        created = node.ok(f"CREATE STREAM ORDERS (ID INT KEY, CUSTOMER STRING, AMOUNT INT) "
                          f"WITH (KAFKA_TOPIC='{src}', PARTITIONS=2, VALUE_FORMAT='JSON');")[0]
        ctas = node.ok(f"CREATE TABLE TOTALS WITH (KAFKA_TOPIC='{totals}', PARTITIONS=2) AS SELECT CUSTOMER, "
                       "COUNT(*) AS N, SUM(AMOUNT) AS TOTAL FROM ORDERS GROUP BY CUSTOMER EMIT CHANGES;", EARLIEST)[0]
        assert created["commandStatus"]["status"] == "SUCCESS", created
        assert ctas["commandStatus"]["status"] == "SUCCESS", ctas
        assert ctas["commandStatus"]["queryId"], ctas
        assert ctas["commandSequenceNumber"] > created["commandSequenceNumber"], (created, ctas)
        orders = _orders()
        _produce(bootstrap, src, orders)

        # A push query from the beginning sees the input.
        push = _rows(_query_stream(node, f"SELECT ID, CUSTOMER, AMOUNT FROM ORDERS EMIT CHANGES LIMIT {PUSH_ROWS};",
                                   {"auto.offset.reset": "earliest"}))
        assert push is not None
        assert len(push) == PUSH_ROWS, push
        assert all(tuple(row) in set(orders) for row in push), push

        # A pull query answers the final totals from the node's store of the table.
        want = sorted([c, sum(1 for _i, cc, _a in orders if cc == c), sum(a for _i, cc, a in orders if cc == c)]
                      for c in CUSTOMERS)
        scan = "SELECT CUSTOMER, N, TOTAL FROM TOTALS;"
        wait_until(lambda: sorted(_rows(_query_stream(node, scan)) or []) == want, "the table's final totals",
                   timeout_s=240, interval_s=1.0, nodes=[node])
        ann = _rows(_query_stream(node, "SELECT N, TOTAL FROM TOTALS WHERE CUSTOMER = 'ann';"))
        assert ann == [want[0][1:]], ann

        # The table's changelog, read_committed by librdkafka, ends at the same totals.
        latest: dict[str, list[Any]] = {}
        for key, value in read_committed(bootstrap, totals):
            assert key is not None, value
            assert value is not None, key
            latest[key.decode()] = [key.decode(), json.loads(value)["N"], json.loads(value)["TOTAL"]]
        assert sorted(latest.values()) == want
        # The command topic holds the two statements, committed, in order.
        commands = [json.loads(v)["statement"] for _k, v in
                    read_committed(bootstrap, f"_confluent-ksql-{service_id}_command_topic") if v is not None]
        assert [c.split(" ", 2)[:2] for c in commands] == [["CREATE", "STREAM"], ["CREATE", "TABLE"]], commands
        assert node.terminate() == 0, node.log_tail()
    finally:
        node.kill()

