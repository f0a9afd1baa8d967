"""oncestream.child_process: a child started with die_with_parent is killed with its parent, so a
demo (or test run) killed from outside leaves no broker behind holding a port and a data dir."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tests.support.narrow import present

PARENT = """
import subprocess, sys, time
from oncestream.child_process import die_with_parent
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], preexec_fn=die_with_parent)
print(child.pid, flush=True)
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"  # a zombie is dead, just not reaped
    except FileNotFoundError:
        return False


def test_child_dies_when_its_parent_is_sigkilled() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    try:
        child_pid = int(present(parent.stdout, "parent stdout").readline())
        assert _alive(child_pid)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(30)
        deadline = time.monotonic() + 30  # a liveness bound: the kernel signals at once
        while _alive(child_pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _alive(child_pid), "the child outlived its SIGKILLed parent"
    finally:
        parent.kill()
