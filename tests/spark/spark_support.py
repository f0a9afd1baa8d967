"""Helpers for the Spark connector tests: a driver subprocess that can be SIGKILLed, a throwaway
PostgreSQL cluster, and a librdkafka read_committed reader to check what the log holds."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support.narrow import present

ROOT = Path(__file__).resolve().parents[2]
DRIVER_SCRIPT = Path(__file__).resolve().parent / "crash_driver.py"
DRIVER_START_TIMEOUT_S = 180.0
QUIET_END_S = 5.0


class DriverRun:
    """One run of tests/spark/crash_driver.py in its own session (process group = its pid), so a
    SIGKILL takes the Python driver and its JVM down together, like a machine crash."""

    def __init__(self, log_dir: Path, argv: list[str], crash_at: str | None = None) -> None:
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        n = len(list(self.log_dir.glob("driver-*.out")))
        self.stdout_path = self.log_dir / f"driver-{n}.out"
        self.stderr_path = self.log_dir / f"driver-{n}.err"
        env = dict(os.environ)
        env["PYSPARK_PYTHON"] = sys.executable
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "src"), env.get("PYTHONPATH", "")])
        self.crash_marker = self.log_dir / f"driver-{n}.crash"
        if crash_at:
            # tests.support.spark_faults.SparkFaults, plugged into the driver's query.
            argv = [*argv, "--crash-at", crash_at, "--crash-marker", str(self.crash_marker)]
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.process = subprocess.Popen([sys.executable, str(DRIVER_SCRIPT), *argv], stdout=out, stderr=err,
                                            stdin=subprocess.DEVNULL, start_new_session=True, env=env)

    def progress(self) -> list[dict]:
        """The progress lines the driver printed so far."""
        lines = self.stdout_path.read_text(errors="replace").splitlines()
        return [json.loads(line) for line in lines if line.startswith("{")]

    def batches_with_rows(self) -> int:
        return sum(1 for p in self.progress() if p.get("rows", 0) > 0)

    def wait_for_batches(self, count: int, timeout_s: float = DRIVER_START_TIMEOUT_S) -> None:
        """Block until the driver reported ``count`` non-empty micro-batches (or failed)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.batches_with_rows() >= count:
                return
            if self.process.poll() is not None:
                raise AssertionError(f"driver exited with {self.process.returncode}:\n{self.stderr_tail()}")
            time.sleep(0.2)
        raise AssertionError(f"driver made no progress in {timeout_s:.0f} s:\n{self.stderr_tail()}")

    def kill(self) -> None:
        """SIGKILL the driver's whole process group and reap it."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait()

    def wait(self, timeout_s: float = 300.0) -> int:
        """Wait for the driver to exit by itself; returns its exit code."""
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"driver did not finish in {timeout_s:.0f} s:\n{self.stderr_tail()}") from None

    def killed_itself(self) -> bool:
        """True when the run ended by an injected crash (SIGKILL of its group)."""
        return self.process.returncode == -signal.SIGKILL and self.crash_marker.exists() and \
            "injected driver crash" in self.crash_marker.read_text()

    def stderr_tail(self, size: int = 6000) -> str:
        text = self.stderr_path.read_text(errors="replace")
        return text[-size:]


def drain_in_session(spark, argv: list[str], timeout_s: float = 300.0) -> None:
    """Run tests/spark/crash_driver.py's query for ``argv`` with --available-now in the test's own
    SparkSession (no JVM to start): it resumes a crashed driver's checkpoint and drains the input."""
    from tests.spark.crash_driver import parse, start_query

    query = start_query(spark, parse([*argv, "--available-now"]))
    if not query.awaitTermination(timeout_s):
        query.stop()
        raise AssertionError(f"the draining query did not finish in {timeout_s:.0f} s")
    error = query.exception()
    if error is not None:
        raise AssertionError(f"the draining query failed: {error}")


def read_committed(bootstrap: str, topic: str, timeout_s: float = 60.0, *,
                   end_at_eof: bool = False) -> list[tuple[bytes | None, bytes | None]]:
    """Every record of ``topic`` visible to a librdkafka read_committed consumer (key, value).

    By default a partition that stays quiet for ``QUIET_END_S`` is at its end (which also makes
    an empty answer mean "nothing became visible for that long"). With ``end_at_eof`` a partition
    ends at librdkafka's end-of-partition event, i.e. at its last stable offset: what is visible
    now, without the quiet wait (for callers that poll until what they want is visible)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "enable.partition.eof": end_at_eof})
    try:
        meta = consumer.list_topics(topic, timeout=10)
        parts = sorted(meta.topics[topic].partitions)
        tps = [TopicPartition(topic, p, 0) for p in parts]
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
        consumer.assign(tps)
        out: list[tuple[bytes | None, bytes | None]] = []
        at_eof: set[int] = set()
        deadline = time.monotonic() + timeout_s
        last_message = time.monotonic()
        while time.monotonic() < deadline:
            positions = {pos.partition: pos.offset for pos in consumer.position(tps)}
            if all(ends[p] == 0 or positions[p] >= ends[p] or p in at_eof for p in parts):
                return out
            # librdkafka may leave its position before a trailing transaction marker; a quiet
            # partition after that is the end as well.
            if time.monotonic() - last_message > QUIET_END_S:
                return out
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    at_eof.add(present(msg.partition(), "partition of an end-of-partition event"))
                continue
            at_eof.discard(present(msg.partition(), "partition of a record"))  # more became visible since
            last_message = time.monotonic()
            out.append((msg.key(), msg.value()))
        raise AssertionError(f"could not read {topic} to its end within {timeout_s} s")
    finally:
        consumer.close()


def committed_values(bootstrap: str, topic: str, timeout_s: float = 60.0) -> list[bytes]:
    """The values of :func:`read_committed`'s records; a record without a value fails the test."""
    return [present(value, f"value of a record of {topic}") for _key, value in read_committed(bootstrap, topic, timeout_s)]


def executor_pids(application_id: str) -> dict[str, int]:
    """Executor id -> pid of the live executor JVMs (``CoarseGrainedExecutorBackend``) of a Spark
    application, found by their command line (``--executor-id N ... --app-id APP``)."""
    found: dict[str, int] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # gone meanwhile
        args = [a.decode(errors="replace") for a in argv]
        if "org.apache.spark.executor.CoarseGrainedExecutorBackend" not in args:
            continue
        if application_id in args and "--executor-id" in args:
            found[args[args.index("--executor-id") + 1]] = int(proc.name)
    return found


def wait_for_executors(application_id: str, count: int, timeout_s: float = 120.0) -> dict[str, int]:
    """Block until ``count`` executor JVMs of the application run; executor id -> pid."""
    deadline = time.monotonic() + timeout_s
    while True:
        pids = executor_pids(application_id)
        if len(pids) >= count:
            return pids
        if time.monotonic() > deadline:
            raise AssertionError(f"{len(pids)} of {count} executors of {application_id} started in {timeout_s} s")
        time.sleep(0.2)


def executors_in_group(pgid: int) -> list[int]:
    """Pids of Spark executor JVMs in process group ``pgid`` (a local-cluster driver's group)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes()
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        # Field 5 of /proc/PID/stat is the process group; the command name before it may hold spaces.
        if b"CoarseGrainedExecutorBackend" in argv and int(stat.rsplit(")", 1)[1].split()[2]) == pgid:
            found.append(int(proc.name))
    return found
