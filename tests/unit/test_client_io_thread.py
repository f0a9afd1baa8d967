"""The client's I/O thread: loops of clients never closed are stopped at interpreter exit, before
finalization, so no daemon thread is inside the event loop's native code while the interpreter
tears down (that crashed a Spark driver with SIGSEGV after its last batch)."""

from __future__ import annotations

import subprocess
import sys

from oncestream.client.common import io_thread
from oncestream.client.common.io_thread import IoThread


def test_stop_all_at_exit_stops_every_loop_still_running() -> None:
    forgotten = [IoThread(f"forgotten-{i}") for i in range(3)]
    closed = IoThread("closed")
    closed.stop()
    assert all(io.is_alive() for io in forgotten)

    io_thread.stop_all_at_exit()

    assert not any(io.is_alive() for io in forgotten)
    assert not closed.is_alive()
    assert not list(io_thread._running)


def test_the_hook_runs_at_a_real_interpreter_exit() -> None:
    """A process that never stops its loop: at exit the loop thread is gone before anything
    registered earlier with atexit runs (atexit is last-in, first-out)."""
    script = (
        "import atexit\n"
        "threads = []\n"
        "atexit.register(lambda: print('alive at exit:', threads[0].is_alive(), flush=True))\n"
        "from oncestream.client.common.io_thread import IoThread\n"  # registers the module's hook later
        "threads.append(IoThread('never-closed'))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "alive at exit: False" in done.stdout, done.stdout
