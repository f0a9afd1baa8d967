"""SQL-server node processes for tests: ``python -m oncestream.cli sql-server ...`` (or, with
faults injected, ``python -m tests.support.sql_node_with_faults ... -- sql-server ...``) in its own
session (so a test can SIGKILL the node with its Spark JVM and Python workers at once, like a
machine crash), ready when its ``--ready-file`` appears, spoken to over its REST API.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 90.0
REQUEST_TIMEOUT_S = 120.0

# A test node starts Spark only when a query needs it (statement-only tests stay light).
LAZY_SPARK = {"ksql.spark.start": "lazy"}


class SqlServerProcess:
    """One node (``spark_master``: its ``--spark-master``, default the node's ``local[*]``);
    ``start`` again after ``kill``/``terminate`` restarts it on a new port with the same state
    directory."""

    def __init__(self, *, bootstrap: str, service_id: str, state_dir: Path, config: dict[str, str] | None = None,
                 name: str = "node", spark_master: str | None = None, pyspark_python: str | None = None) -> None:
        self.bootstrap = bootstrap
        self.spark_master = spark_master
        self.service_id = service_id
        self.state_dir = Path(state_dir)
        self.config = dict(config or {})
        self.name = name
        # The interpreter Spark starts the node's Python processes with (PYSPARK_PYTHON, and
        # PYSPARK_DRIVER_PYTHON, which the driver's data-source processes run): a test may put a
        # wrapper there to slow or count those starts. Default: this interpreter for PYSPARK_PYTHON
        # and the node's own choice (oncestream-driver-python) for the driver's.
        self.pyspark_python = pyspark_python
        self.process: subprocess.Popen[bytes] | None = None
        self.url: str | None = None
        self.ready_info: dict[str, Any] = {}   # the node's --ready-file (url, serviceId, sparkUiUrl)
        self.runs = 0
        self._log: Path | None = None
        self._ready: Path | None = None

    def start(self, config: dict[str, str] | None = None, wait: bool = True, *,
              crash_step: str | None = None) -> SqlServerProcess:
        """Start the node (``config`` replaces the constructor's for this run). With
        ``crash_step`` (command_topic.WRITE_STEPS) the node is started through
        ``python -m tests.support.sql_node_with_faults`` and SIGKILLs itself when a statement's
        write reaches that step (injected into the node, for this run only)."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        ready = self._ready = self.state_dir / f"ready-{self.runs}.json"
        self._log = self.state_dir / f"{self.name}-{self.runs}.log"
        self.runs += 1
        launcher = ["oncestream.cli"] if crash_step is None else \
            ["tests.support.sql_node_with_faults", "--crash-step", crash_step, "--"]
        run_config = config if config is not None else self.config
        argv = [sys.executable, "-m", *launcher, "sql-server", "--bootstrap-server", self.bootstrap,
                "--service-id", self.service_id, "--state-dir", str(self.state_dir), "--ready-file", str(ready)]
        if "listeners" not in run_config:  # a test giving ksqlDB's listeners (https://...) binds there instead
            argv += ["--listen", "127.0.0.1:0"]
        if self.spark_master is not None:
            argv += ["--spark-master", self.spark_master]
        for key, value in run_config.items():
            argv += ["--config", f"{key}={value}"]
        env = dict(os.environ)
        env.pop("PYSPARK_DRIVER_PYTHON", None)
        env["PYSPARK_PYTHON"] = self.pyspark_python or sys.executable
        if self.pyspark_python is not None:
            env["PYSPARK_DRIVER_PYTHON"] = self.pyspark_python
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")])
        with open(self._log, "wb") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True, env=env)
        if wait:
            self._wait_ready(ready)
        return self

    def _wait_ready(self, ready: Path) -> None:
        assert self.process is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not ready.exists():
            if self.process.poll() is not None:
                raise AssertionError(f"{self.name} exited with {self.process.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name} not ready within {READY_TIMEOUT_S:.0f} s:\n{self.log_tail()}")
            time.sleep(0.1)
        self.ready_info = json.loads(ready.read_text())
        self.url = self.ready_info["url"]

    def spark_ui_url(self, timeout_s: float = READY_TIMEOUT_S) -> str:
        """The node's ``sparkUiUrl``: its ready file is written again once Spark is up (Spark
        starts beside the serving node); waits for that (with ``spark.ui.enabled=true``)."""
        assert self._ready is not None
        ready = self._ready

        def url() -> str | None:
            self.ready_info = json.loads(ready.read_text())
            return self.ready_info.get("sparkUiUrl")

        return str(wait_until(url, "the Spark UI's address in the ready file", timeout_s=timeout_s, nodes=[self]))

    def log_tail(self, size: int = 8000) -> str:
        if self._log is None or not self._log.exists():
            return ""
        return self._log.read_text(errors="replace")[-size:]

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the node's whole session (Python, JVM, workers) and reap it."""
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()

    def terminate(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM; returns the exit status (the session is SIGKILLed if it does not stop)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.name} did not stop on SIGTERM:\n{self.log_tail()}") from None

    def stop(self) -> None:
        """End the node for good (a fixture's teardown): SIGTERM if it still runs, then SIGKILL
        whatever its session left behind."""
        if self.alive:
            self.terminate()
        self.kill()

    def session_processes(self) -> list[int]:
        """Pids still in the node's session (its children included), from /proc."""
        assert self.process is not None
        sid = self.process.pid
        out = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            # fields after the command: state ppid pgrp session ...
            if int(fields[3]) == sid and fields[0] != "Z":
                out.append(int(entry.name))
        return out

    # --- REST ---------------------------------------------------------------------------------

    def ksql(self, statements: str, properties: dict[str, Any] | None = None,
             command_sequence_number: int | None = None) -> httpx.Response:
        """POST /ksql; returns the response (any status)."""
        assert self.url is not None
        body: dict[str, Any] = {"ksql": statements, "streamsProperties": properties or {}}
        if command_sequence_number is not None:
            body["commandSequenceNumber"] = command_sequence_number
        return httpx.post(f"{self.url}/ksql", json=body, timeout=REQUEST_TIMEOUT_S,
                          headers={"Accept": "application/vnd.ksql.v1+json"})

    def ok(self, statements: str, properties: dict[str, Any] | None = None, **kw: Any) -> list[dict[str, Any]]:
        """POST /ksql expecting 200; returns the entities."""
        response = self.ksql(statements, properties, **kw)
        assert response.status_code == 200, f"{statements!r}: {response.status_code} {response.text}"
        return response.json()

    def get(self, path: str) -> httpx.Response:
        assert self.url is not None
        return httpx.get(f"{self.url}{path}", timeout=REQUEST_TIMEOUT_S)


def wait_until(check: Any, what: str, timeout_s: float = 120.0, interval_s: float = 0.2,
               nodes: list[SqlServerProcess] | None = None) -> Any:
    """Poll ``check()`` until it returns something truthy (returned); fail after ``timeout_s``
    (with the tails of ``nodes``' logs in the message)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            logs = "".join(f"\n--- {n.name} ---\n{n.log_tail(4000)}" for n in nodes or [])
            raise AssertionError(f"timed out waiting for {what}{logs}")
        time.sleep(interval_s)


def wait_until_running(node: SqlServerProcess, query_ids: list[str], timeout_s: float = 90.0) -> list[dict[str, Any]]:
    """SHOW QUERIES's queries once every one of ``query_ids`` is RUNNING there. A query whose
    output is complete may still show ERROR for a few seconds: when Spark failed to start it (its
    Python process did not connect back in time, runtime.SPARK_START_FAILURES) the node shows
    ERROR until it has started it again, as ksqlDB shows a query it restarts."""
    shown: list[dict[str, Any]] = []

    def running() -> bool:
        shown[:] = node.ok("SHOW QUERIES;")[0]["queries"]
        return sorted(q["state"] for q in shown if q["id"] in query_ids) == ["RUNNING"] * len(query_ids)

    wait_until(running, f"{query_ids} RUNNING in SHOW QUERIES", timeout_s=timeout_s, nodes=[node])
    return shown


@contextlib.contextmanager
def running_node(broker: Any, base: Path, *, config: dict[str, str], name: str) -> Iterator[SqlServerProcess]:
    """One node (``config``, service id ``<name>_<random>_``, state under ``base``) on ``broker``
    (anything with a ``bootstrap``: our single broker or a cluster of the kind under test, from
    tests/conftest.py's factories), started; stopped on exit (the broker is the factory's)."""
    node = SqlServerProcess(bootstrap=broker.bootstrap, service_id=f"{name.replace('-', '_')}_{uuid.uuid4().hex[:6]}_",
                            state_dir=base / "node", config=config, name=name)
    try:
        node.start()
        yield node
    finally:
        node.stop()


def produce_numbered(bootstrap: str, topic: str, ids: Iterable[int]) -> None:
    """One record per id with librdkafka (idempotent): key the id as a big-endian INT, value
    ``{"V": "v<id>"}`` (the rows of a ``(ID INT KEY, V STRING)`` JSON stream)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in ids:
        producer.produce(topic, json.dumps({"V": f"v{i}"}).encode(), struct.pack(">i", i))
    assert producer.flush(60) == 0
