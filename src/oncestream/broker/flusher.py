"""Group commit: one fsync per partition per event-loop turn for every acks=-1 request waiting on it.

Used only when a topic asks for power-loss durability (``flush.messages=1`` or the broker's
``log.flush.interval.messages=1``). By default the broker acknowledges once the batch is in the
page cache, which survives a process crash (SIGKILL) but not a power loss.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from oncestream.errors import KafkaError


class Flushable(Protocol):
    def flush(self) -> None: ...


class GroupCommitFlusher:
    """Coalesces flush requests made during one loop iteration into one fsync per log."""

    def __init__(self) -> None:
        self._pending: dict[int, Flushable] = {}
        self._waiters: list[asyncio.Future[None]] = []
        self._scheduled = False

    def flush_soon(self, log: Flushable) -> asyncio.Future[None]:
        """Return a future resolved once ``log`` has been fsynced after this call."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._pending[id(log)] = log
        self._waiters.append(fut)
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._run)
        return fut

    def _run(self) -> None:
        pending, waiters = self._pending, self._waiters
        self._pending, self._waiters, self._scheduled = {}, [], False
        error: BaseException | None = None
        for log in pending.values():
            try:
                log.flush()
            except (OSError, KafkaError) as exc:  # a failed fsync must fail the acknowledgement
                error = exc
        for fut in waiters:
            if fut.done():
                continue
            if error is None:
                fut.set_result(None)
            else:
                fut.set_exception(error)
