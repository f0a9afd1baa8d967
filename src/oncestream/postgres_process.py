"""A real PostgreSQL server on this machine (Debian's ``postgresql`` package): the metadata store of
the cluster-mode tests, benchmarks and demo, and dual_write's store in the Spark tests.

``PostgresServer`` runs ``initdb`` once into its own directory and the ``postgres`` server on
127.0.0.1 at a free port (Unix socket in the same directory, never /var/run). As root the server
runs as the ``postgres`` user (it refuses root). ``stop()`` (fast shutdown), ``kill()`` (SIGKILL of
the postmaster: a crash, recovered from the WAL at the next start) and ``start()`` again reuse the
port and the data, so a test can take the store away and bring it back. ``remove()`` deletes
everything. The server is started with ``fsync=on``: a crash test must not pass because writes
were never durable.

The postmaster is this process's own child (not daemonized by ``pg_ctl``) and dies with it
(``child_process.die_with_parent``): a test run killed from outside leaves no server behind
holding memory and a port. Its privileges are dropped by ``subprocess``'s ``user``/``group``
before the parent-death signal is set, because a change of user clears that signal.

The pytest fixtures built on it are in tests/support/postgres.py.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

from oncestream.broker_process import free_tcp_port, port_accepts_connections
from oncestream.child_process import die_with_parent

HOST = "127.0.0.1"
SUPERUSER = "postgres"
READY_TIMEOUT_S = 60.0
_COMMAND_TIMEOUT_S = 120.0
PORT_ATTEMPTS = 3  # first starts whose port another socket took before the server bound it
PORT_TAKEN = "could not bind IPv4 address"  # what the postmaster logs then (Address already in use)


class PortTakenError(RuntimeError):
    """The server exited at start because its port was taken."""


def postgres_bin_dir() -> Path:
    """The directory of ``initdb``/``pg_ctl``: from PATH, else the newest /usr/lib/postgresql/N/bin."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    if not candidates:
        raise FileNotFoundError("PostgreSQL is not installed (apt-get install postgresql): initdb/pg_ctl not found")
    return candidates[-1].parent


class PostgresServer:
    """One throwaway PostgreSQL cluster; ``url(db)`` and ``dsn(db)`` address its databases."""

    def __init__(self, base_dir: Path | None = None, port: int | None = None) -> None:
        # Not under pytest's tmp dir by default: its parents are private to root, and the server
        # runs as the postgres user.
        self.base_dir = base_dir if base_dir is not None else Path(tempfile.mkdtemp(prefix="oncestream-pg-"))
        self.data_dir = self.base_dir / "pgdata"
        self.port = port if port is not None else free_tcp_port(HOST)
        self._port_chosen_here = port is None
        self.bin_dir = postgres_bin_dir()
        self._initialised = False
        self._process: subprocess.Popen[bytes] | None = None

    def _run(self, argv: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bin_dir / argv[0]), *argv[1:]]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", SUPERUSER, "--", *cmd]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=_COMMAND_TIMEOUT_S)
        if check and result.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed: {result.stdout}\n{result.stderr}")
        return result

    def dsn(self, dbname: str = "postgres") -> str:
        """A libpq keyword DSN (psycopg.connect) for ``dbname``."""
        return f"host={HOST} port={self.port} user={SUPERUSER} dbname={dbname} connect_timeout=10"

    def url(self, dbname: str = "postgres") -> str:
        """A ``postgresql://`` URL for ``dbname`` (the broker's ``--metadata-store``)."""
        return f"postgresql://{SUPERUSER}@{HOST}:{self.port}/{dbname}"

    def start(self) -> PostgresServer:
        """initdb (the first time) and start; returns once the server accepts connections.

        A port chosen here is free when chosen but not held until the server binds it, so another
        socket (an outgoing connection's ephemeral port) may take it first: at the first start a
        server that exits for that reason is started again on a fresh port (up to
        ``PORT_ATTEMPTS`` times). A restart keeps its port (clients know the address)."""
        first = self._process is None
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                return self._start_once()
            except PortTakenError:
                if not (first and self._port_chosen_here and attempt < PORT_ATTEMPTS):
                    raise
                self.port = free_tcp_port(HOST)
        raise RuntimeError("unreachable: the last attempt returns or raises")

    def _start_once(self) -> PostgresServer:
        if not self._initialised:
            self.base_dir.mkdir(parents=True, exist_ok=True)
            if os.geteuid() == 0:
                shutil.chown(self.base_dir, SUPERUSER, SUPERUSER)
            if not (self.data_dir / "PG_VERSION").exists():
                self._run(["initdb", "-D", str(self.data_dir), "-U", SUPERUSER, "--auth=trust", "-E", "UTF8",
                           "--no-sync"])
            self._initialised = True
        self._reap()
        as_postgres = {"user": SUPERUSER, "group": SUPERUSER} if os.geteuid() == 0 else {}
        with open(self.base_dir / "server.log", "ab") as server_log:
            self._process = subprocess.Popen(
                [str(self.bin_dir / "postgres"), "-D", str(self.data_dir), "-p", str(self.port),
                 "-c", f"listen_addresses={HOST}", "-k", str(self.base_dir), "-c", "fsync=on",
                 "-c", "max_connections=300"],
                stdin=subprocess.DEVNULL, stdout=server_log, stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent, **as_postgres)  # type: ignore[call-overload]
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self._accepts_sessions():
            if self._process.poll() is not None:
                log_path = self.base_dir / "server.log"
                error = PortTakenError if PORT_TAKEN in log_path.read_text(errors="replace")[-4000:] else RuntimeError
                raise error(f"PostgreSQL exited with {self._process.returncode} at start: see {log_path}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"PostgreSQL did not accept sessions on {HOST}:{self.port} within {READY_TIMEOUT_S} s")
            time.sleep(0.1)
        return self

    def _accepts_sessions(self) -> bool:
        """Whether a session opens (a server still recovering listens but refuses sessions)."""
        if not port_accepts_connections(HOST, self.port):
            return False
        try:
            with psycopg.connect(self.dsn(), connect_timeout=5):
                return True
        except psycopg.OperationalError:
            return False

    def _signal_own_postmaster(self, shutdown: signal.Signals) -> bool:
        """Shut down the postmaster this object started with ``shutdown`` (SIGINT fast, SIGQUIT
        immediate) and wait for it, SIGKILL past the bound; False when none of ours runs."""
        if self._process is None or self._process.poll() is not None:
            return False
        self._process.send_signal(shutdown)
        try:
            self._process.wait(timeout=_COMMAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        return True

    def _reap(self) -> None:
        """Collect an exited postmaster (no zombie left to look alive)."""
        if self._process is not None and self._process.poll() is not None:
            self._process = None

    def postmaster_pid(self) -> int | None:
        """The running postmaster's pid, from postmaster.pid; None when it is not running."""
        try:
            return int((self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    def stop(self) -> None:
        """A fast shutdown (every connection dropped, as in a restart); no-op when stopped."""
        # SIGINT: the postmaster's fast shutdown; pg_ctl for a server this object did not start.
        if not self._signal_own_postmaster(signal.SIGINT) and self.postmaster_pid() is not None:
            self._run(["pg_ctl", "-D", str(self.data_dir), "-m", "fast", "-w", "stop"], check=False)
        self._reap()

    def kill(self) -> None:
        """SIGKILL the postmaster (a crash); its backends exit when they see it gone. The next
        ``start()`` recovers from the WAL."""
        pid = self.postmaster_pid()
        if pid is None:
            return
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if self._process is not None and self._process.pid == pid:
            self._process.wait()
        self._reap()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while port_accepts_connections(HOST, self.port) and time.monotonic() < deadline:
            time.sleep(0.05)
        # Backends notice the dead postmaster and exit; wait for them before a restart reuses the port.
        time.sleep(0.5)
        # The lock files name the dead postmaster's pid; a postmaster this object did not start
        # may linger as a zombie nobody reaps, which a new postmaster would take for a live one.
        (self.data_dir / "postmaster.pid").unlink(missing_ok=True)
        (self.base_dir / f".s.PGSQL.{self.port}.lock").unlink(missing_ok=True)

    def remove(self) -> None:
        """Stop immediately and delete the data directory."""
        # SIGQUIT: the postmaster's immediate shutdown.
        if not self._signal_own_postmaster(signal.SIGQUIT) and self.data_dir.exists() and self.postmaster_pid() is not None:
            self._run(["pg_ctl", "-D", str(self.data_dir), "-m", "immediate", "-w", "stop"], check=False)
        self._reap()
        shutil.rmtree(self.base_dir, ignore_errors=True)
