"""The Spark connector on a three-broker cluster (issue 22 point 6: everything above the log works
unchanged on a cluster of stateless brokers on PostgreSQL and SeaweedFS).

The single-broker suites' driver-kill pipelines (tests/spark/test_exactly_once_sink.py,
test_dual_write.py), pointed at ``cluster.bootstrap`` (all three brokers), shortened to one
injected crash each so they fit the default run (the crashed driver is a process of its own, the
run resuming its checkpoint is the test's own SparkSession: one JVM start per test; the dual
write's is marked slow, as both its halves are in the default run). The source reads read_committed from diskless
topics, the exactly-once sink and the dual write prepare KIP-939 transactions whose coordinators
live on leases in PostgreSQL. Output is read with librdkafka read_committed and must equal the
input exactly.
"""

from __future__ import annotations

import uuid
from collections import Counter

import psycopg
import pytest

from oncestream.spark.log_client import LogClient
from tests.spark.conftest import TWO_PC_CONFIG
from tests.spark.spark_support import committed_values, drain_in_session
from tests.spark.test_dual_write import _check, _run_with_crashes
from tests.spark.test_exactly_once_sink import _driver, _driver_argv, _produce, _topics
from tests.support.cluster import cluster_factory  # noqa: F401  (fixture)
from tests.support.narrow import present
from tests.support.postgres import create_database

pytestmark = [pytest.mark.spark, pytest.mark.chaos]

# Aborted transactions of a killed driver are cleaned up quickly; shorter produce objects make
# more, shorter transactions per second on a loaded machine.
CLUSTER_CONFIG = {**TWO_PC_CONFIG, "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
                  "diskless.append.commit.interval.ms": "50"}


def _open_transactions(bootstrap: str) -> list[tuple[str, int, str]]:
    with LogClient(bootstrap) as client:
        return [t for t in present(client.list_transactions(), "transactions") if t[2] == "Ongoing"]


@pytest.mark.timeout(600)  # a driver process starting a JVM, on a loaded machine
def test_sink_pipeline_on_a_cluster_survives_driver_and_broker_sigkill(spark, tmp_path, cluster_factory):
    """read_committed source -> exactly-once sink on three brokers. Broker 1 (the first bootstrap
    address and the controller) is SIGKILLed after the first batch; the driver is SIGKILLed in the
    fourth batch with one of its prepared transactions committed and the other still prepared.
    Broker 1 restarts; a new query on the checkpoint drains the input: every committed input
    record once."""
    cluster = cluster_factory(3, CLUSTER_CONFIG)
    bootstrap = cluster.bootstrap
    topic_in, topic_out = f"in-{uuid.uuid4().hex[:8]}", f"out-{uuid.uuid4().hex[:8]}"
    _topics(bootstrap, topic_in, topic_out)
    expected = _produce(bootstrap, topic_in, 0, 200)

    # The crash comes at the fourth batch, so the broker dies while the driver still runs even
    # when its progress lines arrive a batch or two late.
    run = _driver(tmp_path, bootstrap, topic_in, topic_out, crash_at="mid-complete:3")
    run.wait_for_batches(1)
    victim = cluster.broker(1)
    victim.kill()
    assert run.process.poll() is None, f"the driver ended before the broker died:\n{run.stderr_tail()}"
    run.wait(300)
    assert run.killed_itself(), f"driver ended with {run.process.returncode}:\n{run.stderr_tail()}"
    victim.start()
    expected += _produce(bootstrap, topic_in, 10_000, 60)
    drain_in_session(spark, _driver_argv(tmp_path, bootstrap, topic_in, topic_out))

    got, want = Counter(committed_values(bootstrap, topic_out)), Counter(expected)
    assert got == want, (f"missing {sorted((want - got).elements())[:10]}, "
                         f"duplicated or foreign {sorted((got - want).elements())[:10]}")
    assert _open_transactions(bootstrap) == []


# Slow: its two halves stay in the default run: completing a prepared transaction a SIGKILLed
# driver left on the cluster (test_sink_pipeline_on_a_cluster_survives_driver_and_broker_sigkill,
# crashed mid-complete) and the PostgreSQL dual write's recovery after its database commit
# (tests/spark/test_dual_write.py::test_dual_write_postgres_under_driver_sigkill).
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_dual_write_to_postgres_on_a_cluster_under_driver_sigkill(spark, tmp_path, cluster_factory, postgres):
    """The dual write (PostgreSQL table + log) crashed after its database commit, before the
    prepared transaction completed; the restarted driver completes it and drains the input: the
    table and the log agree and hold every record once. The table is in another database of the
    PostgreSQL server the cluster's metadata lives on."""
    cluster = cluster_factory(3, CLUSTER_CONFIG)
    dsn = postgres.dsn(create_database(postgres, "dw"))
    expected, topic_out = _run_with_crashes(tmp_path, cluster.bootstrap, f"postgres:{dsn}", records=120,
                                            crashes=(("dual-after-db", 1),), random_kill=False, spark=spark)
    with psycopg.connect(dsn) as conn:
        db_values = [r[0] for r in conn.execute("SELECT v FROM events").fetchall()]
    _check(expected, committed_values(cluster.bootstrap, topic_out), db_values)
    assert _open_transactions(cluster.bootstrap) == []
