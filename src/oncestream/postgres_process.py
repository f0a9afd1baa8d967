"""A real PostgreSQL server on this machine (Debian's ``postgresql`` package): the metadata store of
the cluster-mode tests, benchmarks and demo, and dual_write's store in the Spark tests.

``PostgresServer`` runs ``initdb`` once into its own directory and ``pg_ctl`` on 127.0.0.1 at a
free port (Unix socket in the same directory, never /var/run). As root the server runs as the
``postgres`` user (it refuses root) through ``runuser``. ``stop()`` (fast shutdown), ``kill()``
(SIGKILL of the postmaster: a crash, recovered from the WAL at the next start) and ``start()``
again reuse the port and the data, so a test can take the store away and bring it back. ``remove()``
deletes everything. The server is started with ``fsync=on``: a crash test must not pass because
writes were never durable.

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

from oncestream.broker_process import free_tcp_port, port_accepts_connections

HOST = "127.0.0.1"
SUPERUSER = "postgres"
READY_TIMEOUT_S = 60.0
_COMMAND_TIMEOUT_S = 120.0


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
        self.bin_dir = postgres_bin_dir()
        self._initialised = False

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
        """initdb (the first time) and start; returns once the server accepts connections."""
        if not self._initialised:
            self.base_dir.mkdir(parents=True, exist_ok=True)
            if os.geteuid() == 0:
                shutil.chown(self.base_dir, SUPERUSER, SUPERUSER)
            if not (self.data_dir / "PG_VERSION").exists():
                self._run(["initdb", "-D", str(self.data_dir), "-U", SUPERUSER, "--auth=trust", "-E", "UTF8",
                           "--no-sync"])
            self._initialised = True
        self._run(["pg_ctl", "-D", str(self.data_dir), "-l", str(self.base_dir / "server.log"), "-w",
                   "-o", f"-p {self.port} -c listen_addresses={HOST} -k {self.base_dir} -c fsync=on "
                         "-c max_connections=300",
                   "start"])
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not port_accepts_connections(HOST, self.port):
            if time.monotonic() > deadline:
                raise RuntimeError(f"PostgreSQL did not listen on {HOST}:{self.port} within {READY_TIMEOUT_S} s")
            time.sleep(0.1)
        return self

    def postmaster_pid(self) -> int | None:
        """The running postmaster's pid, from postmaster.pid; None when it is not running."""
        try:
            return int((self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    def stop(self) -> None:
        """A fast shutdown (every connection dropped, as in a restart); no-op when stopped."""
        if self.postmaster_pid() is not None:
            self._run(["pg_ctl", "-D", str(self.data_dir), "-m", "fast", "-w", "stop"], check=False)

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
        deadline = time.monotonic() + READY_TIMEOUT_S
        while port_accepts_connections(HOST, self.port) and time.monotonic() < deadline:
            time.sleep(0.05)
        # Backends notice the dead postmaster and exit; wait for them before a restart reuses the port.
        time.sleep(0.5)
        # The lock files name the dead postmaster's pid; where nobody reaps it (a container's
        # init), it lingers as a zombie that a new postmaster would take for a live one.
        (self.data_dir / "postmaster.pid").unlink(missing_ok=True)
        (self.base_dir / f".s.PGSQL.{self.port}.lock").unlink(missing_ok=True)

    def remove(self) -> None:
        """Stop immediately and delete the data directory."""
        if self.data_dir.exists() and self.postmaster_pid() is not None:
            self._run(["pg_ctl", "-D", str(self.data_dir), "-m", "immediate", "-w", "stop"], check=False)
        shutil.rmtree(self.base_dir, ignore_errors=True)
