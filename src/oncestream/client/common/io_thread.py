"""The background thread that runs a client's asyncio event loop.

Public client methods are synchronous; they hand coroutines to this loop and wait for the result
(``run``), or poke it without waiting (``call_soon``). uvloop is used when installed.

A client the program never closes leaves its daemon thread inside the event loop's C code when
the interpreter shuts down, and a daemon thread still in native code during finalization can
crash the process (seen: a Spark driver whose dual-write producer was never closed died with
SIGSEGV after its last batch). So every loop still running at exit is stopped from an ``atexit``
hook, which runs before finalization begins.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import threading
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # uvloop is optional
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


_AT_EXIT_STOP_TIMEOUT_S = 2.0
_running: weakref.WeakSet[IoThread] = weakref.WeakSet()


@atexit.register
def stop_all_at_exit() -> None:
    """Stop every client loop still running (clients never closed) before the interpreter
    finalizes; see the module docstring."""
    for io in list(_running):
        io.stop(_AT_EXIT_STOP_TIMEOUT_S)


class IoThread:
    """A daemon thread running one event loop until ``stop``."""

    def __init__(self, name: str) -> None:
        self.loop = _new_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._stopped = False
        self._thread.start()
        self._started.wait()
        _running.add(self)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._started.set)
        try:
            self.loop.run_forever()
        finally:
            pending = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.close()

    def is_alive(self) -> bool:
        """True while the loop's thread runs."""
        return self._thread.is_alive()

    def in_loop_thread(self) -> bool:
        """True when called from the loop's own thread (where ``run`` would deadlock)."""
        return threading.current_thread() is self._thread

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; returns a thread-safe future."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for it; on timeout the coroutine is cancelled and
        ``TimeoutError`` raised."""
        if self.in_loop_thread():  # it would wait for itself forever
            raise RuntimeError("blocking call from the client's own I/O thread")
        future = self.submit(coro)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"operation did not finish within {timeout_s} s") from None

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the loop soon (thread-safe, does not wait)."""
        if not self._stopped:
            self.loop.call_soon_threadsafe(fn, *args)

    def shut_down(self, cleanup: Coroutine[Any, Any, Any], cleanup_timeout_s: float = 10.0) -> None:
        """A client's last step: run ``cleanup`` (closing connections, stopping tasks) on the
        loop for at most ``cleanup_timeout_s``, then stop the loop whether or not it finished
        (a close must not hang on a broker that stopped answering)."""
        try:
            self.run(cleanup, cleanup_timeout_s)
        except TimeoutError:
            pass
        self.stop()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the loop (cancelling its tasks) and join the thread."""
        if self._stopped:
            return
        self._stopped = True
        _running.discard(self)
        if self.in_loop_thread():
            self.loop.stop()
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout_s)
