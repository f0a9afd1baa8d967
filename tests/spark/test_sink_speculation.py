"""Speculative execution on (issue 11, point 1): speculative copies of write tasks race their
originals, every batch commits and the output is exactly once.

Spark never speculates in local mode, and never places a speculative copy on a host that already
runs an attempt of the task (``TaskSetManager.hasAttemptOnHost``), so ``local-cluster`` (all
executors on one host) never speculates either. The test therefore starts a small Spark
standalone cluster: a master and two workers bound to two loopback addresses (127.0.0.1 and
127.0.0.2, distinct hosts to the scheduler), and the driver as a subprocess
(tests/spark/speculation_driver.py; a JVM holds one SparkContext). Short run in the default
suite, long run marked slow.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from oncestream.spark.commit_journal import CommitJournal
from oncestream.spark.log_client import LogClient
from oncestream.spark.sink import ID_ALTERNATIVES, ID_WINDOW
from tests.spark.spark_support import committed_values
from tests.support.narrow import present
from tests.support.ports import free_tcp_port, port_accepts_connections
from tests.support.txn import wait_until

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).resolve().parent / "speculation_driver.py"
PARTITIONS = 2
MAX_ATTEMPTS = 4  # spark.task.maxFailures in the driver, plus speculative copies below it
CLUSTER_START_S = 240.0  # hang guard: JVMs start in seconds to tens of seconds on a loaded box
SPARK_HOME = Path(present(__import__("pyspark").__file__, "pyspark module file")).parent


class StandaloneCluster:
    """A Spark standalone master and two one-core workers on distinct loopback hosts, each JVM in
    its own process group (stopped with SIGKILL of the group; they die with the test run anyway
    as children of this process)."""

    def __init__(self, work_dir: Path) -> None:
        self.work_dir = work_dir
        self.port = free_tcp_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.processes: list[subprocess.Popen] = []
        env = dict(os.environ, SPARK_HOME=str(SPARK_HOME), SPARK_LOG_DIR=str(work_dir),
                   SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
                   SPARK_WORKER_OPTS="-Dspark.worker.cleanup.enabled=false")
        spark_class = str(SPARK_HOME / "bin" / "spark-class")
        self._start([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                     "--port", str(self.port), "--webui-port", "0"], env, "master")
        wait_until(lambda: port_accepts_connections("127.0.0.1", self.port), CLUSTER_START_S,
                   f"the Spark master on port {self.port}")
        for i in (1, 2):
            self._start([spark_class, "org.apache.spark.deploy.worker.Worker", "--host", f"127.0.0.{i}",
                         "--cores", "1", "--memory", "1g", "--webui-port", "0",
                         "--work-dir", str(work_dir / f"worker-{i}"), self.url], env, f"worker-{i}")
        wait_until(lambda: self._log("master").count("Registering worker") >= 2, CLUSTER_START_S,
                   "both Spark workers to register")

    def _log(self, name: str) -> str:
        return (self.work_dir / f"{name}.log").read_text(errors="replace")

    def _start(self, argv: list[str], env: dict[str, str], name: str) -> None:
        with open(self.work_dir / f"{name}.log", "wb") as out:
            self.processes.append(subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                                                   stdin=subprocess.DEVNULL, start_new_session=True))

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            process.wait()


@pytest.fixture
def standalone(tmp_path: Path):
    work = tmp_path / "standalone"
    work.mkdir()
    cluster = StandaloneCluster(work)
    try:
        yield cluster
    finally:
        cluster.stop()


def _run(tmp_path: Path, bootstrap: str, master: str, batches: int) -> None:
    topic_in, topic_out = f"spec-in-{uuid.uuid4().hex[:8]}", f"spec-out-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic_in, PARTITIONS, 1), NewTopic(topic_out, 1, 1)]).values():
        future.result(30)
    per_batch = 10 * PARTITIONS
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    values = [f"spec-{i:05d}".encode() for i in range(per_batch * batches)]
    for i, value in enumerate(values):
        producer.produce(topic_in, value=value, partition=i % PARTITIONS)
    assert producer.flush(30) == 0

    marks = tmp_path / "marks"
    marks.mkdir()
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable,
               PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    argv = [sys.executable, str(DRIVER), "--bootstrap", bootstrap, "--checkpoint", str(tmp_path / "cp"),
            "--in-topic", topic_in, "--out-topic", topic_out, "--marks", str(marks),
            "--max-offsets", str(per_batch), "--master", master]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800,
                          stdin=subprocess.DEVNULL, start_new_session=True)
    assert done.returncode == 0, done.stderr[-6000:]
    match = re.search(r"QUERY (\S+) BATCHES (-?\d+)", done.stdout)
    assert match, done.stdout[-2000:]
    query_id = match.group(1)

    journal = CommitJournal(bootstrap)
    try:
        record = journal.last(query_id)
    finally:
        journal.close()
    assert record is not None, record
    assert record.batch_id >= batches - 1, record
    copies = sorted(m.name for m in marks.iterdir() if not m.name.endswith("-a0"))
    slow = [b for b in range(batches) if b % 3 == 1]
    assert copies, f"no speculative copy ran (slow batches {slow}); marks: {sorted(os.listdir(marks))}"

    assert Counter(v for v in committed_values(bootstrap, topic_out)) == Counter(values)
    with LogClient(bootstrap, client_id="test-check") as client:
        listed = client.list_transactions() or []
    prefix = f"oncestream-spark-{query_id}-"
    mine = [(t, state) for t, _pid, state in listed if t.startswith(prefix)]
    assert all(state != "Ongoing" for _t, state in mine), mine
    assert len(mine) <= ID_WINDOW * PARTITIONS * MAX_ATTEMPTS * ID_ALTERNATIVES, sorted(mine)


@pytest.mark.timeout(1800)
def test_speculative_copies_of_write_tasks_keep_every_batch_exactly_once(tmp_path, eos_broker, standalone):
    """Five batches, two of them with a straggling write task that Spark copies speculatively."""
    _run(tmp_path, eos_broker.bootstrap, standalone.url, batches=5)


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_speculative_copies_over_a_long_run_keep_every_batch_exactly_once(tmp_path, eos_broker, standalone):
    """Thirty batches, ten of them with a straggler copied speculatively."""
    _run(tmp_path, eos_broker.bootstrap, standalone.url, batches=30)
