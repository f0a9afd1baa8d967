"""An ``oncestream schema-registry`` OS process on a port the OS picked, managed as the brokers
are (``oncestream.broker_process.ManagedBroker``): ready once its port accepts connections, which
the registry only does after reading its schemas topic. The SQL conformance runner starts one
beside its broker for the registry formats' cases."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

from oncestream.broker_process import ManagedBroker, oncestream_command


class RegistryNotWritable(RuntimeError):
    """The registry served no write within the time given (no primary elected)."""


class SchemaRegistryProcess(ManagedBroker):
    """One registry instance on ``bootstrap`` (plain HTTP); ``config`` entries are passed as
    ``--config key=value``; its logs go to ``log_dir``."""

    name = "schema-registry"

    def __init__(self, *, bootstrap: str, log_dir: Path, config: dict[str, str] | None = None,
                 ready_timeout_s: float = 60.0) -> None:
        super().__init__(Path(log_dir), ready_timeout_s=ready_timeout_s)
        self.registry_bootstrap = bootstrap
        self.config = dict(config or {})

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        argv = [*oncestream_command(), "schema-registry", "--bootstrap-server", self.registry_bootstrap,
                "--listen", f"{self.host}:{self.port}"]
        for key, value in self.config.items():
            argv += ["--config", f"{key}={value}"]
        return argv

    def wait_writable(self, timeout_s: float = 60.0) -> None:
        """Until a write through this instance succeeds (a primary exists and answers): a PUT of
        the global compatibility level it already has."""
        deadline = time.monotonic() + timeout_s
        last = ""
        headers = {"Content-Type": "application/vnd.schemaregistry.v1+json"}
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/config", timeout=10) as answer:
                    level = json.loads(answer.read())["compatibilityLevel"]
                put = urllib.request.Request(f"{self.url}/config", method="PUT", headers=headers,
                                             data=json.dumps({"compatibility": level}).encode())
                with urllib.request.urlopen(put, timeout=20):
                    return
            except (urllib.error.URLError, OSError, ValueError, KeyError) as exc:
                last = str(exc)
            time.sleep(0.3)
        raise RegistryNotWritable(f"{self.name} took no write within {timeout_s:.0f} s: {last}")
