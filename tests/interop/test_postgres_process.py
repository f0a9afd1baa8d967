"""``PostgresServer``: the postmaster is a child that dies with the process that started it.

A test run killed from outside (a CI timeout, SIGKILL) runs no teardown; a server daemonized by
``pg_ctl`` would linger with its memory and port. Here a helper process starts a server and is
SIGKILLed: its postmaster must be gone soon after. (stop, kill and start again are exercised by
the cluster chaos tests that take PostgreSQL away under load.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from oncestream.postgres_process import PostgresServer

pytestmark = pytest.mark.interop

WAIT_S = 60.0  # a bound on a hang only

_STARTER = """
import sys, time
from oncestream.postgres_process import PostgresServer
server = PostgresServer().start()
print(server.postmaster_pid(), server.base_dir, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_the_server_dies_with_the_process_that_started_it() -> None:
    starter = subprocess.Popen([sys.executable, "-c", _STARTER], stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        line = starter.stdout.readline() if starter.stdout is not None else ""
        pid_text, base_dir = line.split()
        pid = int(pid_text)
        assert _alive(pid)
        starter.send_signal(signal.SIGKILL)
        starter.wait(timeout=WAIT_S)
        deadline = time.monotonic() + WAIT_S
        while _alive(pid):
            assert time.monotonic() < deadline, f"postmaster {pid} outlived the process that started it"
            time.sleep(0.1)
    finally:
        starter.kill()
        starter.wait()
        if "base_dir" in locals():
            PostgresServer(Path(base_dir)).remove()

