"""Schema Registry processes for tests: ``python -m oncestream.cli schema-registry ...`` in its own
session (so a test can SIGKILL exactly it), ready when its ``--ready-file`` appears, bound to a
port the OS picked."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.support.faults import child_environment

READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


class SchemaRegistryProcess:
    """One registry instance; ``start`` again after ``kill`` restarts it (on a new port)."""

    def __init__(self, *, bootstrap: str, work_dir: Path, config: dict[str, str] | None = None,
                 name: str = "registry") -> None:
        self.bootstrap = bootstrap
        self.work_dir = Path(work_dir)
        self.config = dict(config or {})
        self.name = name
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.runs = 0
        self._log: Path | None = None

    def start(self) -> SchemaRegistryProcess:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        ready = self.work_dir / f"{self.name}-ready-{self.runs}.json"
        self._log = self.work_dir / f"{self.name}-{self.runs}.log"
        self.runs += 1
        argv = [sys.executable, "-m", "oncestream.cli", "schema-registry", "--bootstrap-server", self.bootstrap,
                "--ready-file", str(ready)]
        if "listeners" not in self.config:
            argv += ["--listen", "127.0.0.1:0"]
        for key, value in self.config.items():
            argv += ["--config", f"{key}={value}"]
        with open(self._log, "wb") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True, env=child_environment())
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not ready.exists():
            if self.process.poll() is not None:
                raise AssertionError(f"{self.name} exited with {self.process.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name} not ready within {READY_TIMEOUT_S:.0f} s:\n{self.log_tail()}")
            time.sleep(0.1)
        self.url = json.loads(ready.read_text())["url"]
        return self

    def log_tail(self, size: int = 6000) -> str:
        if self._log is None or not self._log.exists():
            return ""
        return self._log.read_text(errors="replace")[-size:]

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL (a crash) and reap."""
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()

    def stop(self) -> None:
        """SIGTERM, then SIGKILL whatever is left."""
        if self.alive:
            assert self.process is not None
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                pass
        self.kill()

    def wait_writable(self, timeout_s: float = 60.0) -> None:
        """Until a write through this instance succeeds (a primary exists and answers)."""
        deadline = time.monotonic() + timeout_s
        last = ""
        while time.monotonic() < deadline:
            try:
                response = httpx.get(f"{self.url}/config", timeout=10)
                level = response.json()["compatibilityLevel"]
                put = httpx.put(f"{self.url}/config", json={"compatibility": level}, timeout=20)
                if put.status_code == 200:
                    return
                last = put.text
            except (httpx.HTTPError, ValueError, KeyError) as exc:
                last = str(exc)
            time.sleep(0.3)
        raise AssertionError(f"{self.name} never took a write within {timeout_s:.0f} s: {last}\n{self.log_tail()}")
