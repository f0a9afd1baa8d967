"""Schema Registry processes for tests: ``python -m oncestream.cli schema-registry ...`` managed as
the brokers are (``oncestream.broker_process.ManagedBroker``: its own session, so a test can
SIGKILL exactly it; a port the OS picked, kept across restarts; ready once that port accepts
connections, which the registry only does after reading its schemas topic)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import httpx

from oncestream.schema_registry_process import SchemaRegistryProcess as RegistryProcess
from tests.support.faults import child_environment

READY_TIMEOUT_S = 60.0


class SchemaRegistryProcess(RegistryProcess):
    """One registry instance on ``bootstrap`` (``oncestream.schema_registry_process``, as the
    conformance runner starts it); ``config`` entries are passed as ``--config`` (with
    ``listeners=https://...`` it serves HTTPS on its port); the test environment's coverage and
    fault settings reach the child."""

    def __init__(self, *, bootstrap: str, work_dir: Path, config: dict[str, str] | None = None,
                 name: str = "schema-registry") -> None:
        super().__init__(bootstrap=bootstrap, log_dir=Path(work_dir) / name, config=config,
                         ready_timeout_s=READY_TIMEOUT_S)
        self.name = name
        self.scheme = "https" if self.config.get("listeners", "").startswith("https") else "http"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    def command(self) -> list[str]:
        argv = [sys.executable, "-m", "oncestream.cli", "schema-registry", "--bootstrap-server", self.registry_bootstrap]
        config = dict(self.config)
        if self.scheme == "https":
            config["listeners"] = f"https://{self.host}:{self.port}"
        else:
            argv += ["--listen", f"{self.host}:{self.port}"]
        for key, value in config.items():
            argv += ["--config", f"{key}={value}"]
        return argv

    def environment(self) -> dict[str, str]:
        return child_environment(super().environment())

    def wait_writable(self, timeout_s: float = 60.0) -> None:
        """Until a write through this instance succeeds (a primary exists and answers): PUT of the
        global compatibility level it already has."""
        deadline = time.monotonic() + timeout_s
        last = ""
        while time.monotonic() < deadline:
            try:
                level = httpx.get(f"{self.url}/config", timeout=10).json()["compatibilityLevel"]
                put = httpx.put(f"{self.url}/config", json={"compatibility": level}, timeout=20)
                if put.status_code == 200:
                    return
                last = put.text
            except (httpx.HTTPError, ValueError, KeyError) as exc:
                last = str(exc)
            time.sleep(0.3)
        raise AssertionError(f"{self.name} took no write within {timeout_s:.0f} s: {last}\n{self.output_tail()}")
