"""Programs started as a user would start them, each known ready by its ``--ready-file`` (the
broker and the SQL server both write one once they listen): for tests that run documented
command lines as they stand (tests/interop/test_install_commands.py, the README's quickstart)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

READY_TIMEOUT_S = 240.0
STOP_TIMEOUT_S = 90.0


def start_ready(argv: list[str], ready: Path, log: Path, env: dict[str, str],
                timeout_s: float = READY_TIMEOUT_S) -> subprocess.Popen[bytes]:
    """Run ``argv --ready-file READY`` in its own session, output to ``log``; return once READY
    exists. Fails with the log's tail if the program exits or is not ready within ``timeout_s``."""
    with open(log, "wb") as out:
        process = subprocess.Popen([*argv, "--ready-file", str(ready)], stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    while not ready.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            stop(process)
            raise AssertionError(f"{argv[:4]} not ready (exit {process.returncode}):\n{log.read_text()[-6000:]}")
        time.sleep(0.2)
    return process


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL the whole session if it has not ended within STOP_TIMEOUT_S."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
