"""The SQL server on a Spark cluster (issue 12 points 1 and 6: a SQL pipeline grows from one machine
to a Spark cluster without being rewritten).

One ``oncestream sql-server`` node whose ``--spark-master`` is ``local-cluster[2,1,1024]`` (a
standalone master and two workers inside the driver's JVM, which start two executor JVMs as
separate processes, as on a cluster; docs/spark-cluster.md) and whose ``checkpoint.root`` is a
Hadoop ``file://`` URL. The statements are the ones a single node runs: a filter/project stream
(CSAS) and a GROUP BY table (CTAS), sent through the REST API. Input is produced with librdkafka;
both outputs are read read_committed with librdkafka and must be exact. The driver's Spark UI REST
API shows that the tasks ran in the two executors (each completed some, the driver none), and the
executor JVMs are processes of their own in the node's session.
"""

from __future__ import annotations

import json
import struct
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Producer

from tests.spark.conftest import CLUSTER_MASTER
from tests.spark.spark_support import executors_in_group, read_committed
from tests.support.sql_servers import SqlServerProcess, wait_until, wait_until_running

pytestmark = [pytest.mark.spark]

EARLIEST = {"ksql.streams.auto.offset.reset": "earliest"}
CUSTOMERS = ("ann", "bob", "cyd", "dee", "eve")
RECORDS = 120


def _orders() -> list[tuple[int, str, int]]:
    """(id, customer, amount) of the input, deterministic."""
    return [(i, CUSTOMERS[i % len(CUSTOMERS)], (i * 37) % 100) for i in range(RECORDS)]


def _produce(bootstrap: str, topic: str, orders: list[tuple[int, str, int]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for order_id, customer, amount in orders:
        producer.produce(topic, json.dumps({"CUSTOMER": customer, "AMOUNT": amount}).encode(), struct.pack(">i", order_id))
    assert producer.flush(60) == 0


def _executors(ui_url: str) -> list[dict[str, Any]]:
    """The driver's view of its executors (Spark's monitoring REST API), the driver included."""
    apps = httpx.get(f"{ui_url}/api/v1/applications", timeout=30).json()
    assert len(apps) == 1, apps
    return httpx.get(f"{ui_url}/api/v1/applications/{apps[0]['id']}/executors", timeout=30).json()


def test_sql_pipeline_runs_on_a_local_cluster_exactly_once(eos_broker, tmp_path: Path) -> None:
    bootstrap = eos_broker.bootstrap
    suffix = uuid.uuid4().hex[:6]
    src, big, totals = f"orders_{suffix}", f"big_{suffix}", f"totals_{suffix}"
    shared = tmp_path / "shared-cp"
    service_id = f"cluster_{suffix}_"
    node = SqlServerProcess(
        bootstrap=bootstrap, service_id=service_id, state_dir=tmp_path / "node", spark_master=CLUSTER_MASTER,
        # Port 0: Spark's UI on any free port (its REST API is how the test sees the executors).
        # Two shuffle partitions: one task per single-core executor in the aggregation's stage.
        config={"checkpoint.root": shared.as_uri(), "spark.ui.enabled": "true", "spark.ui.port": "0",
                "spark.sql.shuffle.partitions": "2"})
    try:
        node.start()
        ui_url = node.spark_ui_url()
        node.ok(f"CREATE STREAM ORDERS (ID INT KEY, CUSTOMER STRING, AMOUNT INT) "
                f"WITH (KAFKA_TOPIC='{src}', PARTITIONS=2, VALUE_FORMAT='JSON');")
        csas = node.ok(f"CREATE STREAM BIG WITH (KAFKA_TOPIC='{big}', PARTITIONS=2) AS SELECT ID, UCASE(CUSTOMER) AS WHO, "
                       "AMOUNT * 2 AS DOUBLED FROM ORDERS WHERE AMOUNT > 50 EMIT CHANGES;", EARLIEST)[0]
        ctas = node.ok(f"CREATE TABLE TOTALS WITH (KAFKA_TOPIC='{totals}', PARTITIONS=2) AS SELECT CUSTOMER, "
                       "COUNT(*) AS N, SUM(AMOUNT) AS TOTAL FROM ORDERS GROUP BY CUSTOMER EMIT CHANGES;", EARLIEST)[0]
        query_ids = [csas["commandStatus"]["queryId"], ctas["commandStatus"]["queryId"]]
        assert all(query_ids), (csas, ctas)
        orders = _orders()
        _produce(bootstrap, src, orders)

        want_big = Counter((struct.pack(">i", i), json.dumps({"WHO": c.upper(), "DOUBLED": a * 2}, sort_keys=True))
                           for i, c, a in orders if a > 50)
        want_totals = {c.encode(): {"N": sum(1 for _i, cc, _a in orders if cc == c),
                                    "TOTAL": sum(a for _i, cc, a in orders if cc == c)} for c in CUSTOMERS}

        def big_output() -> Counter[tuple[bytes | None, str]]:
            return Counter((k, json.dumps(json.loads(v), sort_keys=True)) for k, v in read_committed(bootstrap, big)
                           if v is not None)

        def latest_totals() -> dict[bytes | None, Any]:
            latest: dict[bytes | None, Any] = {}
            for k, v in read_committed(bootstrap, totals):
                latest[k] = None if v is None else json.loads(v)
            return latest

        wait_until(lambda: sum(big_output().values()) >= sum(want_big.values()), "the stream's output", timeout_s=240,
                   interval_s=1.0, nodes=[node])
        wait_until(lambda: latest_totals() == want_totals, "the table's final counts", timeout_s=240,
                   interval_s=1.0, nodes=[node])
        # Exactly once: every selected input record once, nothing else.
        assert big_output() == want_big
        # The changelog: each customer's count only grows (no batch applied twice), ends exact.
        counts: dict[bytes | None, list[int]] = {}
        for k, v in read_committed(bootstrap, totals):
            assert v is not None, "no tombstone expected"
            counts.setdefault(k, []).append(json.loads(v)["N"])
        assert all(seq == sorted(set(seq)) for seq in counts.values()), counts
        assert latest_totals() == want_totals

        # The tasks ran in two executor JVMs, none in the driver.
        wait_until_running(node, query_ids)
        executors = _executors(ui_url)
        workers = [e for e in executors if e["id"] != "driver" and e["isActive"]]
        assert len(workers) == 2, executors
        assert all(e["completedTasks"] > 0 for e in workers), workers
        assert [e["totalTasks"] for e in executors if e["id"] == "driver"] == [0], executors
        assert node.process is not None
        jvms = executors_in_group(node.process.pid)
        assert len(jvms) == 2, jvms
        assert node.process.pid not in jvms, jvms
        # The checkpoints are where the Hadoop URL points (every node of a cluster would reach it).
        for query_id in query_ids:
            assert (shared / service_id / query_id / "offsets").is_dir(), sorted(p.name for p in shared.rglob("*"))

        assert node.terminate() == 0, node.log_tail()
        assert node.session_processes() == [], "processes (executor JVMs, Python workers) left after SIGTERM"
    finally:
        node.kill()
