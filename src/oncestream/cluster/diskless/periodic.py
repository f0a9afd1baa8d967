"""A background round every interval on the broker's event loop (consolidation, the orphan sweep).

A failed round is logged and the next one retries: the work is idempotent and every round starts
from what PostgreSQL says, so nothing is lost by skipping one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

import psycopg

from oncestream.cluster.pg.errors import MetadataStoreError
from oncestream.errors import RemoteStorageError, StorageError

log = logging.getLogger(__name__)

# What a round may fail with and still leave the loop running: PostgreSQL or the object store down.
ROUND_FAILURES: tuple[type[BaseException], ...] = (MetadataStoreError, psycopg.Error, RemoteStorageError, StorageError)


class PeriodicRound:
    """Runs ``round_fn`` every ``interval_ms`` between ``start`` and ``close``."""

    def __init__(self, name: str, interval_ms: int, round_fn: Callable[[], Awaitable[object]]) -> None:
        self._name = name
        self._interval_s = interval_ms / 1000
        self._round_fn = round_fn
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None

    def start(self) -> None:
        """Start the loop (once; a second call does nothing)."""
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name=self._name)

    async def close(self) -> None:
        """Stop the loop, cancelling a round in progress (rounds are safe to cut anywhere)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                await self._round_fn()
            except ROUND_FAILURES as exc:
                log.warning("%s round failed (the next one retries): %s", self._name, exc)
            except Exception:
                # A bug must not stop the background work for good: say it loudly, go on.
                log.exception("%s round failed unexpectedly (the next one retries)", self._name)
