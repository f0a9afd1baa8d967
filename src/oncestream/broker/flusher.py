"""Group commit: one fsync round per partition for every acks=-1 request waiting on it, run on the
broker's disk threads so that a slow disk never stalls the event loop.

Used only when a topic asks for power-loss durability (``flush.messages=1`` or the broker's
``log.flush.interval.messages=1``). By default the broker acknowledges once the batch is in the
page cache, which survives a process crash (SIGKILL) but not a power loss.

Requests that ask during one loop turn share a round. A round is prepared on the loop
(``begin_flush``: which files, duplicated descriptors), its fsyncs run on the executor, and it is
finished on the loop (``finish_flush``, or ``fail_flush`` which takes the log offline). At most
one round per log is in flight: requests arriving meanwhile wait for the next round, which starts
when the current one ends. Starting it earlier would be wrong, not just wasteful: the next round
would find the dirty marks cleared by the running one and could answer before the running one's
fsyncs are done. A failed round fails every request that waited on it (KAFKA_STORAGE_ERROR at the
Produce handler): nothing is acknowledged that is not durable.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Protocol

from oncestream.errors import OnceStreamError, StorageError
from oncestream.log.flush_job import FdatasyncFn, FlushJob

logger = logging.getLogger(__name__)


class Flushable(Protocol):
    """What the flusher needs of a partition log (see PartitionLog)."""

    def flush(self) -> None: ...

    def begin_flush(self, fdatasync: FdatasyncFn | None = None) -> FlushJob | None: ...
    def finish_flush(self, job: FlushJob) -> None: ...
    def fail_flush(self, job: FlushJob, error: BaseException) -> None: ...


class GroupCommitFlusher:
    """Coalesces flush requests into fsync rounds that run on ``executor``, one per log at a time.

    ``fdatasync`` replaces ``os.fdatasync`` in every round (tests observe or delay the disk)."""

    def __init__(self, executor: Executor | None = None, *, fdatasync: FdatasyncFn | None = None) -> None:
        self._executor = executor  # None: the loop's default executor
        self._fdatasync = fdatasync
        self._waiting: dict[int, tuple[Flushable, list[asyncio.Future[None]]]] = {}
        self._in_flight: set[int] = set()
        self._scheduled = False
        # Told each round's duration in seconds (broker/metrics: LogFlushRateAndTimeMs).
        self.on_round_s: Callable[[float], None] | None = None

    def flush_soon(self, log: Flushable) -> asyncio.Future[None]:
        """A future resolved once everything written to ``log`` before this call is fsynced
        (StorageError if that failed)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._waiting.setdefault(id(log), (log, []))[1].append(fut)
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._start_rounds)
        return fut

    def flush_in_background(self, log: Flushable) -> None:
        """Start a round for ``log`` nobody waits for (a rolled segment, flush.messages=N,
        housekeeping): a failure takes the log offline and is logged, nothing else."""
        if id(log) in self._waiting:
            # A round is queued already and covers everything written before it starts: no
            # future per produce while a slow round runs.
            return
        try:
            fut = self.flush_soon(log)
        except RuntimeError:  # no running event loop (a tool or test driving the logs itself)
            log.flush()
            return
        fut.add_done_callback(_log_failure)

    def _start_rounds(self) -> None:
        self._scheduled = False
        for key in [k for k in self._waiting if k not in self._in_flight]:
            log, waiters = self._waiting.pop(key)
            self._start_round(key, log, waiters)

    def _start_round(self, key: int, log: Flushable, waiters: list[asyncio.Future[None]]) -> None:
        try:
            job = log.begin_flush(self._fdatasync)
        except (OSError, OnceStreamError) as exc:
            _settle(waiters, exc)
            return
        if job is None:  # closed meanwhile: close() flushed everything
            _settle(waiters, None)
            return
        loop = asyncio.get_running_loop()
        try:
            running = loop.run_in_executor(self._executor, job.run)
        except RuntimeError as exc:  # the executor is shut down: the broker is stopping
            # The job stays begun-but-not-done in its log, so close() will not mark the log clean.
            job.release()
            _settle(waiters, StorageError(f"flush not started: {exc}"))
            return
        self._in_flight.add(key)
        began_s = time.perf_counter()
        running.add_done_callback(lambda done: self._round_done(key, log, job, waiters, done, began_s))

    def _round_done(self, key: int, log: Flushable, job: FlushJob, waiters: list[asyncio.Future[None]],
                    done: asyncio.Future[None], began_s: float) -> None:
        self._in_flight.discard(key)
        if self.on_round_s is not None:
            self.on_round_s(time.perf_counter() - began_s)
        error = done.exception() if not done.cancelled() else StorageError("flush cancelled")
        if error is None:
            try:
                log.finish_flush(job)
            except (OSError, OnceStreamError) as exc:
                error = exc
        else:
            log.fail_flush(job, error)
        _settle(waiters, error)
        queued = self._waiting.pop(key, None)
        if queued is not None:  # requests that arrived while this round ran
            self._start_round(key, *queued)


def _log_failure(fut: asyncio.Future[None]) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        logger.error("background flush failed: %s", fut.exception())


def _settle(waiters: list[asyncio.Future[None]], error: BaseException | None) -> None:
    for fut in waiters:
        if fut.done():
            continue
        if error is None:
            fut.set_result(None)
        else:
            fut.set_exception(error)
