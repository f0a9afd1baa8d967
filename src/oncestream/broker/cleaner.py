"""The log cleaner task: compacts logs with cleanup.policy=compact in the background.

Every ``log.cleaner.backoff.ms`` (default 15000) it asks every log how dirty it is, and cleans the
eligible ones, dirtiest first, one at a time: ``compaction_plan`` on the event loop (cheap: a
snapshot of sealed segments), ``compaction.build_cleaned`` on a dedicated worker thread (the
reading, decoding and writing), then the install: its commit point (the manifest write, two
fsyncs) on the broker's disk threads, the renames and the new segment list back on the loop,
and its durable tail (merged-away segments' removal, directory fsync, checkpoint, manifest
removal) on the disk threads again.
The loop keeps serving requests while a build runs. ``log.cleaner.enable=false`` turns it off.

Nothing here may take the broker down, and no failure is swallowed: a partition whose cleaning
fails is logged with its traceback (kept in ``failures`` too) and retried after an exponential,
capped backoff; after ``max_failures`` consecutive failures it is marked uncleanable and left
alone (Kafka's LogCleanerManager "uncleanable partitions") until the broker restarts or the topic
is re-created, while every other partition keeps being cleaned. On shutdown (task cancelled) a
running build is told to stop, awaited, and its files removed; the broker closes its logs only
after that.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from oncestream.broker.state import BrokerState
from oncestream.errors import InvalidConfigError, StorageError
from oncestream.log import compaction
from oncestream.log.log_cleaning import SwapCommit, SwapTail
from oncestream.log.manager import LogManager
from oncestream.log.partition_log import PartitionLog

log = logging.getLogger("oncestream.cleaner")

DEFAULT_BACKOFF_MS = 15_000
# Consecutive failures after which a partition is uncleanable, and the longest wait between tries.
DEFAULT_MAX_FAILURES = 5
DEFAULT_MAX_FAILURE_BACKOFF_MS = 600_000

PartitionKey = tuple[str, int]


def _monotonic_ms() -> float:
    return time.monotonic() * 1000


@dataclass
class CleaningFailure:
    """The consecutive failures of one partition's cleaning, the last one's traceback included."""

    count: int
    error: str  # ``Type: message`` of the last failure
    traceback: str  # its formatted traceback
    retry_at_ms: float  # monotonic; not tried again before
    uncleanable: bool = False


class FailureTracker:
    """Sans-io bookkeeping of failing partitions: exponential backoff (``base_backoff_ms`` doubled
    per consecutive failure, capped at ``max_backoff_ms``) and the uncleanable mark after
    ``max_failures`` in a row. A success forgets the partition's failures."""

    def __init__(self, base_backoff_ms: int, max_backoff_ms: int, max_failures: int) -> None:
        if base_backoff_ms < 0 or max_backoff_ms < 0 or max_failures < 1:
            raise InvalidConfigError("cleaner backoffs must be >= 0 and max_failures >= 1")
        self.base_backoff_ms = base_backoff_ms
        self.max_backoff_ms = max_backoff_ms
        self.max_failures = max_failures
        self.failures: dict[PartitionKey, CleaningFailure] = {}

    def backoff_ms(self, count: int) -> int:
        """How long to wait after the ``count``-th consecutive failure."""
        doublings = min(max(count - 1, 0), 32)
        return min(self.max_backoff_ms, self.base_backoff_ms << doublings)

    def record(self, key: PartitionKey, exc: BaseException, now_ms: float) -> CleaningFailure:
        """Count a failure of ``key``; returns its updated state."""
        previous = self.failures.get(key)
        count = 1 if previous is None else previous.count + 1
        failure = CleaningFailure(
            count=count,
            error=f"{type(exc).__name__}: {exc}",
            traceback="".join(traceback.format_exception(exc)),
            retry_at_ms=now_ms + self.backoff_ms(count),
            uncleanable=count >= self.max_failures,
        )
        self.failures[key] = failure
        return failure

    def succeeded(self, key: PartitionKey) -> None:
        """``key`` was cleaned (or assessed) fine: its failure streak ends."""
        self.failures.pop(key, None)

    def forget(self, key: PartitionKey) -> None:
        """``key`` is gone (topic deleted or re-created): start afresh."""
        self.failures.pop(key, None)

    def may_try(self, key: PartitionKey, now_ms: float) -> bool:
        """False while ``key`` backs off, and for good once uncleanable."""
        failure = self.failures.get(key)
        return failure is None or (not failure.uncleanable and now_ms >= failure.retry_at_ms)

    def uncleanable(self) -> set[PartitionKey]:
        """Partitions marked uncleanable."""
        return {key for key, failure in self.failures.items() if failure.uncleanable}


def _parse_bool(name: str, text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise InvalidConfigError(f"{name}: {text!r} is not a boolean")


class LogCleaner:
    """Background compaction of every log of a ``LogManager``."""

    def __init__(
        self,
        logs: LogManager,
        clock_ms: Callable[[], int],
        *,
        backoff_ms: int = DEFAULT_BACKOFF_MS,
        enabled: bool = True,
        max_map_bytes: int = compaction.DEFAULT_MAX_MAP_BYTES,
        max_failures: int = DEFAULT_MAX_FAILURES,
        max_failure_backoff_ms: int = DEFAULT_MAX_FAILURE_BACKOFF_MS,
        monotonic_ms: Callable[[], float] = _monotonic_ms,
    ) -> None:
        if backoff_ms < 0:
            raise InvalidConfigError(f"log.cleaner.backoff.ms must be >= 0, not {backoff_ms}")
        self.logs = logs
        self.clock_ms = clock_ms  # wall clock: compaction lags and delete horizons are record times
        self.monotonic_ms = monotonic_ms  # backoffs: a wall-clock step must not shorten or stretch them
        # The first retry waits one pass (at least a second), then twice as long each time.
        self.failures = FailureTracker(max(backoff_ms, 1000), max_failure_backoff_ms, max_failures)
        self._known_logs: dict[PartitionKey, PartitionLog] = {}
        self.backoff_ms = backoff_ms
        self.enabled = enabled
        self.max_map_bytes = max_map_bytes
        self.cleaned_count = 0  # successful installs, for tests and logs
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        # Where the install's fsyncs run, and with which fsync (the broker's disk threads and
        # its injectable fsync; without a broker, the worker thread and os.fsync).
        self.disk_executor: concurrent.futures.Executor | None = None
        self.disk_fsync: Callable[[int], None] | None = None

    @classmethod
    def from_properties(cls, logs: LogManager, clock_ms: Callable[[], int], props: Mapping[str, str]) -> LogCleaner:
        """Read ``log.cleaner.backoff.ms``, ``log.cleaner.enable`` and
        ``log.cleaner.dedupe.buffer.size`` (the key map's memory bound) from broker properties."""
        try:
            backoff_ms = int(props.get("log.cleaner.backoff.ms", str(DEFAULT_BACKOFF_MS)))
            max_map_bytes = int(props.get("log.cleaner.dedupe.buffer.size", str(compaction.DEFAULT_MAX_MAP_BYTES)))
        except ValueError as exc:
            raise InvalidConfigError(f"log.cleaner.*: {exc}") from exc
        if max_map_bytes < 1:
            raise InvalidConfigError(f"log.cleaner.dedupe.buffer.size must be positive, not {max_map_bytes}")
        enabled = _parse_bool("log.cleaner.enable", props.get("log.cleaner.enable", "true"))
        return cls(logs, clock_ms, backoff_ms=backoff_ms, enabled=enabled, max_map_bytes=max_map_bytes)

    @classmethod
    def for_state(cls, state: BrokerState) -> LogCleaner:
        """The cleaner of a ``BrokerState`` (its logs, clock, disk threads and ``--config``
        properties)."""
        cleaner = cls.from_properties(state.logs, state.now_ms, state.config.raw)
        cleaner.disk_executor = state.disk_executor
        cleaner.disk_fsync = state.disk_fsync
        return cleaner

    async def run(self) -> None:
        """Clean, sleep ``log.cleaner.backoff.ms``, repeat, until cancelled."""
        if not self.enabled:
            log.info("log cleaner disabled (log.cleaner.enable=false)")
            return
        try:
            while True:
                try:
                    await self.clean_once()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # never take the broker down
                    log.error("log cleaner pass failed: %s: %s", type(exc).__name__, exc, exc_info=exc)
                await asyncio.sleep(self.backoff_ms / 1000)
        finally:
            self.close()

    def close(self) -> None:
        """Release the worker thread (a build still running finishes or aborts on its own)."""
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None

    def eligible_logs(self) -> list[PartitionLog]:
        """Logs worth cleaning now, dirtiest first (due tombstones count as fully dirty); logs
        backing off after a failure, and uncleanable ones, are left out."""
        now_ms = self.clock_ms()
        monotonic_now_ms = self.monotonic_ms()
        current = self.logs.logs()
        for key in [key for key, known in self._known_logs.items() if current.get(key) is not known]:
            del self._known_logs[key]  # deleted or re-created: its failures were another log's
            self.failures.forget(key)
        ranked: list[tuple[float, PartitionLog]] = []
        for key, partition_log in current.items():
            self._known_logs[key] = partition_log
            if not self.failures.may_try(key, monotonic_now_ms):
                continue
            try:
                candidate = partition_log.compaction_candidate(now_ms)
            except Exception as exc:  # noqa: BLE001  # one broken log must not stop the others
                self._failed(partition_log, "cannot assess", exc)
                continue
            if candidate is not None:
                ranked.append((1.0 if candidate.tombstones_due else candidate.dirty_ratio, partition_log))
        ranked.sort(key=lambda item: item[0], reverse=True)
        return [partition_log for _, partition_log in ranked]

    def uncleanable(self) -> dict[PartitionKey, CleaningFailure]:
        """Partitions given up on, with their last failure (traceback included)."""
        return {key: self.failures.failures[key] for key in sorted(self.failures.uncleanable())}

    def _failed(self, partition_log: PartitionLog, doing: str, exc: BaseException) -> None:
        key = (partition_log.topic, partition_log.partition)
        failure = self.failures.record(key, exc, self.monotonic_ms())
        if failure.uncleanable:
            outcome = f"marked uncleanable after {failure.count} consecutive failures"
        else:
            outcome = f"failure {failure.count}, retrying in {self.failures.backoff_ms(failure.count)} ms"
        log.error(
            "log cleaner: %s %s-%d: %s (%s)", doing, key[0], key[1], failure.error, outcome, exc_info=exc
        )

    async def clean_once(self) -> int:
        """One pass over every eligible log; returns how many were compacted. A failure is
        recorded against its partition and the pass goes on with the others."""
        cleaned = 0
        for partition_log in self.eligible_logs():
            try:
                if await self.clean_log(partition_log):
                    cleaned += 1
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001  # recorded, backed off, never swallowed
                self._failed(partition_log, "cleaning", exc)
            else:
                self.failures.succeeded((partition_log.topic, partition_log.partition))
        return cleaned

    async def clean_log(self, partition_log: PartitionLog) -> bool:
        """Plan, build on the worker thread, install. False if there was nothing to do or the
        plan went stale while building."""
        plan = partition_log.compaction_plan(self.clock_ms(), max_map_bytes=self.max_map_bytes)
        if plan is None:
            return False
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="log-cleaner")
        future = asyncio.get_running_loop().run_in_executor(self._executor, compaction.build_cleaned, plan)
        try:
            result = await asyncio.shield(future)
        except asyncio.CancelledError:
            # Shutdown: stop the build and wait for it, so the logs are not closed under it.
            plan.abort.set()
            try:
                leftover = await future
            except (compaction.CompactionAborted, compaction.StalePlan):
                pass  # the build stopped as asked (or found its plan gone) and removed its own files
            except Exception as exc:  # noqa: BLE001 - recorded and logged with its traceback
                # The build failed on its own while it was being stopped: a real fault of this
                # partition, logged with its traceback and recorded like any failed clean.
                self._failed(partition_log, "cleaning (stopped by shutdown)", exc)
            else:
                compaction.delete_cleaned_files(leftover)
            partition_log.cancel_compaction(plan)
            raise
        except compaction.StalePlan as exc:
            # Retention, DeleteRecords or a topic deletion removed a planned segment before the
            # build read it: the log changed, not a fault of this partition. The build removed
            # its files; the next pass plans afresh.
            partition_log.cancel_compaction(plan)
            log.info("log cleaner: %s changed while being cleaned, abandoning: %s", partition_log.directory, exc)
            return False
        except BaseException:
            partition_log.cancel_compaction(plan)
            if partition_log.closed:
                # The topic was deleted (or the broker is closing) under the build: not an error.
                log.info("log cleaner: %s went away while being cleaned", partition_log.directory)
                return False
            raise
        try:
            commit = partition_log.begin_install_cleaned(result, self.clock_ms())
        except BaseException:
            # Without this the log would keep a plan nobody builds and never be a candidate again.
            partition_log.cancel_compaction(plan)
            compaction.delete_cleaned_files(result)
            raise
        if commit is None:
            return False
        tail = await self._commit(partition_log, commit)
        if tail is None:
            return False
        if not await self._finish_install(partition_log, tail):
            return False
        self.cleaned_count += 1
        return True

    def _disk(self) -> concurrent.futures.Executor | None:
        return self.disk_executor if self.disk_executor is not None else self._executor

    async def _commit(self, partition_log: PartitionLog, commit: SwapCommit) -> SwapTail | None:
        """The manifest write (the commit point, two fsyncs) on the broker's disk threads, the
        loop serving requests meanwhile (the old segments, still on disk); the swap back on the
        loop once the manifest is durable. None if the log went away meanwhile."""
        running = asyncio.get_running_loop().run_in_executor(self._disk(), commit.run, self.disk_fsync)
        try:
            await asyncio.shield(running)
        except asyncio.CancelledError:
            running.add_done_callback(lambda _: self._settle_commit(partition_log, commit, running))
            raise
        except BaseException as exc:
            partition_log.fail_commit_cleaned(commit, exc)
            if partition_log.closed:
                log.info("log cleaner: %s went away while its clean was committed", partition_log.directory)
                return None
            raise
        return partition_log.apply_install_cleaned(commit, self.clock_ms())

    def _settle_commit(self, partition_log: PartitionLog, commit: SwapCommit, running: asyncio.Future[None]) -> None:
        """The commit ended after its waiter was cancelled (shutdown): finish what it started,
        so the log in memory never lags a durable manifest while it stays open."""
        if running.cancelled() or running.exception() is not None:
            partition_log.fail_commit_cleaned(commit, running.exception() or asyncio.CancelledError())
            return
        try:
            tail = partition_log.apply_install_cleaned(commit, self.clock_ms())
        except StorageError as exc:  # the log is offline now; the next open finishes the swap
            log.warning("log cleaner: swap of %s not applied after shutdown began: %s", partition_log.directory, exc)
            return
        if tail is None:
            return
        try:
            tail_running = asyncio.get_running_loop().run_in_executor(self._disk(), tail.run, self.disk_fsync)
        except RuntimeError as exc:  # the executor is shut down: offline, the next open finishes
            partition_log.fail_install_cleaned(tail, exc)
            return
        tail_running.add_done_callback(lambda _: _settle_install(partition_log, tail, tail_running))

    async def _finish_install(self, partition_log: PartitionLog, tail: SwapTail) -> bool:
        """The install's removals and fsyncs (merged-away segments, directory, checkpoint,
        manifest removal) on the broker's disk threads, the loop serving requests meanwhile; the
        rest back on the loop."""
        running = asyncio.get_running_loop().run_in_executor(self._disk(), tail.run, self.disk_fsync)
        try:
            await asyncio.shield(running)
        except asyncio.CancelledError:
            running.add_done_callback(lambda _: _settle_install(partition_log, tail, running))
            raise
        except BaseException as exc:
            partition_log.fail_install_cleaned(tail, exc)
            if partition_log.closed:
                # The topic was deleted (or the broker is closing) under the tail: not an error.
                log.info("log cleaner: %s went away while being installed", partition_log.directory)
                return False
            raise
        partition_log.finish_install_cleaned(tail)
        return True


def _settle_install(partition_log: PartitionLog, tail: SwapTail, running: asyncio.Future[None]) -> None:
    if running.cancelled():
        partition_log.fail_install_cleaned(tail, asyncio.CancelledError())
    elif (exc := running.exception()) is not None:
        partition_log.fail_install_cleaned(tail, exc)
    else:
        partition_log.finish_install_cleaned(tail)
