"""Wake long-polling fetches when a partition they wait on receives data."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable


class AppendNotifier:
    """Futures keyed by (topic, partition), resolved on the next append to that partition."""

    def __init__(self) -> None:
        self._waiters: dict[tuple[str, int], set[asyncio.Future[None]]] = {}

    def waiter(self, partitions: Iterable[tuple[str, int]]) -> asyncio.Future[None]:
        """A future resolved when any of ``partitions`` is appended to. Call ``discard`` after."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for tp in partitions:
            self._waiters.setdefault(tp, set()).add(fut)
        return fut

    def discard(self, fut: asyncio.Future[None], partitions: Iterable[tuple[str, int]]) -> None:
        for tp in partitions:
            waiting = self._waiters.get(tp)
            if waiting is not None:
                waiting.discard(fut)
                if not waiting:
                    del self._waiters[tp]

    def notify(self, topic: str, partition: int) -> None:
        waiting = self._waiters.pop((topic, partition), None)
        if waiting:
            for fut in waiting:
                if not fut.done():
                    fut.set_result(None)
