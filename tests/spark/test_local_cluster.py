"""The connector in ``local-cluster[2,1,1024]`` mode: two executor JVMs with their own Python
workers, in processes other than the driver's, as on a real cluster (issue 11, point 2).

The source reads exactly the committed records (batch and streaming); the exactly-once sink keeps
its output exactly once, read_committed, when an executor JVM is SIGKILLed while its write task
holds a prepared transaction or is mid-write (Spark re-runs the task on an executor still alive or
on the one the standalone master starts in its place). These tests share one in-process cluster
(``spark_cluster``). The last two start local-cluster drivers as subprocesses
(tests/spark/crash_driver.py) and SIGKILL them with their executors: the sink and the dual-write
helper stay exactly once across the restart from the checkpoint. The dual-write one is marked
slow: the default run covers its two halves with test_driver_sigkilled_with_executors_output_exactly_once
(a local-cluster driver SIGKILLed with its executors) and tests/spark/test_dual_write.py (the
SQLite dual write SIGKILLed after the database commit, among other steps).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer

from oncestream.spark.log_client import LogClient
from tests.spark.spark_support import (
    DriverRun,
    committed_values,
    drain_in_session,
    executor_pids,
    executors_in_group,
    wait_for_executors,
)
from tests.spark.test_exactly_once_sink import _produce, _topics
from tests.support.narrow import present
from tests.support.spark_faults import fault_options
from tests.support.txn import wait_until

pytestmark = [pytest.mark.spark, pytest.mark.chaos]

GATE_WAIT_S = 240.0  # hang guard only


def _app_id(spark) -> str:
    return spark.sparkContext.applicationId


def _ongoing(bootstrap: str, query_id: str = "") -> list[tuple[str, int, str]]:
    with LogClient(bootstrap, client_id="test-check") as client:
        return [t for t in present(client.list_transactions(), "transactions") if t[2] == "Ongoing" and query_id in t[0]]


def test_tasks_run_in_two_executor_processes(spark_cluster):
    """The premise of this module: two executor JVMs, none of them the driver, and Python workers
    whose parent is an executor JVM, not the driver's."""
    pids = wait_for_executors(_app_id(spark_cluster), 2)
    assert len(pids) == 2
    assert os.getpid() not in pids.values()
    workers = (spark_cluster.sparkContext.parallelize(range(8), 8)
               .map(lambda _: (os.getpid(), os.getppid())).collect())
    assert {pid for pid, _ in workers}.isdisjoint({os.getpid()})
    # The Python daemon that forks the workers is a child of its executor JVM.
    parents_of_daemons = {int(Path(f"/proc/{ppid}/stat").read_text().split(") ")[1].split()[1])
                          for _, ppid in workers if Path(f"/proc/{ppid}").exists()}
    assert parents_of_daemons, (parents_of_daemons, pids)
    assert parents_of_daemons <= set(pids.values()), (parents_of_daemons, pids)


def test_batch_read_on_executors_returns_exactly_the_committed_records(spark_cluster, eos_broker):
    """A batch read split over both executors: every committed record once, aborted ones never."""
    bootstrap = eos_broker.bootstrap
    topic = f"lc-read-{uuid.uuid4().hex[:8]}"
    _topics(bootstrap, topic, partitions=4)
    expected = _produce(bootstrap, topic, 0, 200)
    df = (spark_cluster.read.format("oncestream").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic).load())
    rows = df.select("partition", "offset", "value").collect()
    assert Counter(bytes(r.value) for r in rows) == Counter(expected)
    assert len({(r.partition, r.offset) for r in rows}) == len(rows)


def test_streaming_read_on_executors_returns_exactly_the_committed_records(spark_cluster, eos_broker, tmp_path):
    """A streaming read in rate-limited micro-batches, records added while it runs: each committed
    record once in the output, none aborted."""
    bootstrap = eos_broker.bootstrap
    topic = f"lc-stream-{uuid.uuid4().hex[:8]}"
    _topics(bootstrap, topic)
    expected = _produce(bootstrap, topic, 0, 120)
    name = f"lc_{uuid.uuid4().hex[:8]}"
    query = (spark_cluster.readStream.format("oncestream").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "50").load()
             .select("value").writeStream.format("memory").queryName(name)
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(processingTime="200 milliseconds")
             .start())
    try:
        query.processAllAvailable()
        expected += _produce(bootstrap, topic, 1000, 80)
        query.processAllAvailable()
        values = [bytes(r.value) for r in spark_cluster.sql(f"SELECT value FROM {name}").collect()]
    finally:
        query.stop()
    assert query.exception() is None
    assert Counter(values) == Counter(expected)
    assert len([p for p in query.recentProgress if p["numInputRows"]]) >= 4


def _gated_passthrough(spark, bootstrap: str, topic_in: str, topic_out: str, gate: Path, checkpoint: Path):
    source = (spark.readStream.format("oncestream").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic_in).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "60").load())
    return (source.select("key", "value").writeStream.format("oncestream")
            .option("kafka.bootstrap.servers", bootstrap).option("topic", topic_out)
            .options(**fault_options(gate_dir=gate))
            .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())


def test_executor_sigkilled_holding_a_prepared_transaction_output_exactly_once(spark_cluster, eos_broker, tmp_path):
    """Both write tasks of batch 0 prepare and hold (one per executor: each has one core). One
    executor JVM is SIGKILLed; its task is re-run as attempt 1 elsewhere. The driver commits the
    winners and aborts the dead attempt's prepared transaction: read_committed output equals the
    input exactly, and no transaction stays open."""
    bootstrap = eos_broker.bootstrap
    app = _app_id(spark_cluster)
    before = wait_for_executors(app, 2)
    topic_in, topic_out = f"lc-in-{uuid.uuid4().hex[:8]}", f"lc-out-{uuid.uuid4().hex[:8]}"
    _topics(bootstrap, topic_in, topic_out)
    expected = _produce(bootstrap, topic_in, 0, 200)
    gate = tmp_path / "gate"
    gate.mkdir()
    for partition in (0, 1):
        (gate / f"hold-{partition}").touch()
    query = _gated_passthrough(spark_cluster, bootstrap, topic_in, topic_out, gate, tmp_path / "cp")
    try:
        wait_until(lambda: {m.name for m in gate.glob("prepared-*")} >= {"prepared-0-0", "prepared-1-0"},
                   GATE_WAIT_S, f"both tasks of batch 0 prepared in {gate}")
        # Both tasks are held after prepare, so each executor runs one: whichever dies holds one.
        victim_id, victim_pid = sorted(before.items())[0]
        os.kill(victim_pid, signal.SIGKILL)
        wait_until(lambda: victim_id not in executor_pids(app), GATE_WAIT_S, "the killed executor to be gone")
        assert len(_ongoing(bootstrap, str(query.id))) == 2, "both prepared transactions still open"
        (gate / "release").touch()
        query.awaitTermination(GATE_WAIT_S)
    finally:
        (gate / "release").touch()
        query.stop()
    assert query.exception() is None
    retried = sorted(m.name for m in gate.glob("prepared-*-1"))
    assert len(retried) == 1, f"one task re-run after the executor loss, got {retried}"
    got = Counter(v for v in committed_values(bootstrap, topic_out))
    want = Counter(expected)
    assert got == want, (f"missing {sorted((want - got).elements())[:10]}, "
                         f"duplicated or foreign {sorted((got - want).elements())[:10]}")
    assert _ongoing(bootstrap) == []
    assert len(wait_for_executors(app, 2)) == 2  # the standalone master replaced the lost executor


def test_executor_sigkilled_mid_write_output_exactly_once(spark_cluster, eos_broker, tmp_path):
    """Both write tasks of batch 0 produced rows into open, unprepared transactions and wait before
    prepare (``fail-<partition>`` gates), one per executor. One executor JVM is SIGKILLed mid-write;
    its task is re-run, the other raises once released and is retried too. The dead attempt's open
    transaction is aborted: read_committed output equals the input exactly, nothing left open."""
    bootstrap = eos_broker.bootstrap
    app = _app_id(spark_cluster)
    before = wait_for_executors(app, 2)
    topic_in, topic_out = f"lcm-in-{uuid.uuid4().hex[:8]}", f"lcm-out-{uuid.uuid4().hex[:8]}"
    _topics(bootstrap, topic_in, topic_out)
    expected = _produce(bootstrap, topic_in, 0, 200)
    gate = tmp_path / "gate"
    gate.mkdir()
    for partition in (0, 1):
        (gate / f"fail-{partition}").touch()
    query = _gated_passthrough(spark_cluster, bootstrap, topic_in, topic_out, gate, tmp_path / "cp")
    try:
        # Neither task can finish before ``release`` exists: two open transactions of attempt 0
        # mean both tasks run, one on each single-core executor.
        # Ids are <prefix>-<query>-<slot>-<partition>-<attempt>-<k> (spark/sink.py transactional_id).
        wait_until(lambda: {t[0].rsplit("-", 3)[1] for t in _ongoing(bootstrap, str(query.id))} == {"0", "1"},
                   GATE_WAIT_S, "both write tasks of batch 0 to have open transactions")
        victim_id, victim_pid = sorted(before.items())[0]
        os.kill(victim_pid, signal.SIGKILL)
        wait_until(lambda: victim_id not in executor_pids(app), GATE_WAIT_S, "the killed executor to be gone")
        for partition in (0, 1):
            (gate / f"fail-{partition}").unlink()
        (gate / "release").touch()
        query.awaitTermination(GATE_WAIT_S)
    finally:
        (gate / "release").touch()
        query.stop()
    assert query.exception() is None
    assert len(list(gate.glob("prepared-*-1"))) >= 1, "the killed task was re-run"
    got = Counter(v for v in committed_values(bootstrap, topic_out))
    want = Counter(expected)
    assert got == want, (f"missing {sorted((want - got).elements())[:10]}, "
                         f"duplicated or foreign {sorted((got - want).elements())[:10]}")
    assert _ongoing(bootstrap) == []


def test_batch_read_after_executor_loss_still_exact(spark_cluster, eos_broker):
    """After the cluster lost an executor (previous test) the replacement serves reads: a batch
    read still returns every committed record once."""
    bootstrap = eos_broker.bootstrap
    topic = f"lc-after-{uuid.uuid4().hex[:8]}"
    _topics(bootstrap, topic, partitions=2)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    values = [f"v{i}".encode() for i in range(50)]
    for i, value in enumerate(values):
        producer.produce(topic, value=value, partition=i % 2)
    assert producer.flush(30) == 0
    rows = (spark_cluster.read.format("oncestream").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).load().select("value").collect())
    assert Counter(bytes(r.value) for r in rows) == Counter(values)


CLUSTER = "local-cluster[2,1,1024]"


def _cluster_driver(tmp: Path, argv: list[str], crash_at: str | None = None) -> DriverRun:
    return DriverRun(tmp / "logs", [*argv, "--master", CLUSTER], crash_at=crash_at)


def _assert_cluster_dies_with_driver(run: DriverRun) -> None:
    """A driver run of this module has two executor JVMs in its process group while it works and
    none left once the group is SIGKILLed (no executor outlives its driver to keep writing)."""
    assert len(executors_in_group(run.process.pid)) == 2, "the driver should run two executor JVMs"
    run.kill()
    wait_until(lambda: executors_in_group(run.process.pid) == [], GATE_WAIT_S, "the executors to die with the driver")


@pytest.mark.timeout(900)  # two driver runs, each starting a JVM and two executors
def test_driver_sigkilled_with_executors_output_exactly_once(tmp_path, eos_broker, spark_cluster):
    """A local-cluster driver is SIGKILLed (with its executors) after the commit record of batch 1
    and before any of its transactions completed, then at a random point; the query restarted from
    the same checkpoint in the module's local-cluster session (its batches on two executors too)
    finishes: read_committed output equals the input exactly once."""
    bootstrap = eos_broker.bootstrap
    topic_in, topic_out = f"lcd-in-{uuid.uuid4().hex[:8]}", f"lcd-out-{uuid.uuid4().hex[:8]}"
    _topics(bootstrap, topic_in, topic_out)
    expected = _produce(bootstrap, topic_in, 0, 200)
    argv = ["--bootstrap", bootstrap, "--checkpoint", str(tmp_path / "checkpoint"), "--in-topic", topic_in,
            "--out-topic", topic_out, "--max-offsets", "80"]
    run = _cluster_driver(tmp_path, argv, crash_at="after-record:1")
    run.wait(300)
    assert run.killed_itself(), f"driver ended with {run.process.returncode}:\n{run.stderr_tail()}"
    expected += _produce(bootstrap, topic_in, 10_000, 60)
    run = _cluster_driver(tmp_path, argv)
    run.wait_for_batches(1)
    _assert_cluster_dies_with_driver(run)
    drain_in_session(spark_cluster, argv)

    got = Counter(v for v in committed_values(bootstrap, topic_out))
    want = Counter(expected)
    assert got == want, (f"missing {sorted((want - got).elements())[:10]}, "
                         f"duplicated or foreign {sorted((got - want).elements())[:10]}")
    assert _ongoing(bootstrap) == []


@pytest.mark.slow  # both halves are in the default run (see the module's docstring)
@pytest.mark.timeout(900)
def test_dual_write_in_local_cluster_under_driver_sigkill(tmp_path, eos_broker):
    """dual_write (SQLite) with the batches computed on executors: the driver is SIGKILLed after
    the database committed batch 1 and before the log's transaction completed; the restarted
    query finishes. Database and log agree and hold every input record once."""
    bootstrap = eos_broker.bootstrap
    topic_in, topic_out = f"lcw-in-{uuid.uuid4().hex[:8]}", f"lcw-out-{uuid.uuid4().hex[:8]}"
    _topics(bootstrap, topic_in, topic_out)
    expected = _produce(bootstrap, topic_in, 0, 200)
    db = tmp_path / "state.db"
    argv = ["--bootstrap", bootstrap, "--checkpoint", str(tmp_path / "checkpoint"), "--in-topic", topic_in,
            "--out-topic", topic_out, "--mode", "dualwrite", "--store", f"sqlite:{db}", "--max-offsets", "80"]
    run = _cluster_driver(tmp_path, argv, crash_at="dual-after-db:1")
    run.wait(300)
    assert run.killed_itself(), f"driver ended with {run.process.returncode}:\n{run.stderr_tail()}"
    final = _cluster_driver(tmp_path, [*argv, "--available-now"])
    assert final.wait(300) == 0, final.stderr_tail()
    with sqlite3.connect(db) as conn:
        db_values = [r[0].encode() for r in conn.execute("SELECT v FROM events")]
    log_values = [v for v in committed_values(bootstrap, topic_out)]
    assert Counter(log_values) == Counter(expected)
    assert Counter(db_values) == Counter(expected), "database and log disagree"
