"""The log cleaner task: compacts logs with cleanup.policy=compact in the background.

Every ``log.cleaner.backoff.ms`` (default 15000) it asks every log how dirty it is, and cleans the
eligible ones, dirtiest first, one at a time: ``compaction_plan`` on the event loop (cheap: a
snapshot of sealed segments), ``compaction.build_cleaned`` on a dedicated worker thread (the
reading, decoding and writing), ``install_cleaned`` back on the loop (a few renames and fsyncs).
The loop keeps serving requests while a build runs. ``log.cleaner.enable=false`` turns it off.

Nothing here may take the broker down: a failing clean is logged in one line and retried at the
next pass. On shutdown (task cancelled) a running build is told to stop, awaited, and its files
removed; the broker closes its logs only after that.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from oncestream.errors import InvalidConfigError
from oncestream.log import compaction
from oncestream.log.manager import LogManager
from oncestream.log.partition_log import PartitionLog

if TYPE_CHECKING:
    from oncestream.broker.state import BrokerState

log = logging.getLogger("oncestream.cleaner")

DEFAULT_BACKOFF_MS = 15_000


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
    ) -> None:
        if backoff_ms < 0:
            raise InvalidConfigError(f"log.cleaner.backoff.ms must be >= 0, not {backoff_ms}")
        self.logs = logs
        self.clock_ms = clock_ms
        self.backoff_ms = backoff_ms
        self.enabled = enabled
        self.max_map_bytes = max_map_bytes
        self.cleaned_count = 0  # successful installs, for tests and logs
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None

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
        """The cleaner of a ``BrokerState`` (its logs, clock and ``--config`` properties)."""
        return cls.from_properties(state.logs, state.now_ms, state.config.raw)

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
                    log.error("log cleaner pass failed: %s: %s", type(exc).__name__, exc)
                await asyncio.sleep(self.backoff_ms / 1000)
        finally:
            self.close()

    def close(self) -> None:
        """Release the worker thread (a build still running finishes or aborts on its own)."""
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None

    def eligible_logs(self) -> list[PartitionLog]:
        """Logs worth cleaning now, dirtiest first (due tombstones count as fully dirty)."""
        now_ms = self.clock_ms()
        ranked: list[tuple[float, PartitionLog]] = []
        for partition_log in self.logs.logs().values():
            try:
                candidate = partition_log.compaction_candidate(now_ms)
            except Exception as exc:
                log.error("log cleaner: cannot assess %s: %s: %s", partition_log.directory, type(exc).__name__, exc)
                continue
            if candidate is not None:
                ranked.append((1.0 if candidate.tombstones_due else candidate.dirty_ratio, partition_log))
        ranked.sort(key=lambda item: item[0], reverse=True)
        return [partition_log for _, partition_log in ranked]

    async def clean_once(self) -> int:
        """One pass over every eligible log; returns how many were compacted."""
        cleaned = 0
        for partition_log in self.eligible_logs():
            try:
                if await self.clean_log(partition_log):
                    cleaned += 1
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.error("log cleaner: cleaning %s failed: %s: %s", partition_log.directory, type(exc).__name__, exc)
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
            except BaseException:
                pass  # aborted builds remove their own files
            else:
                compaction.delete_cleaned_files(leftover)
            partition_log.cancel_compaction(plan)
            raise
        except BaseException:
            partition_log.cancel_compaction(plan)
            if partition_log.closed:
                # The topic was deleted (or the broker is closing) under the build: not an error.
                log.info("log cleaner: %s went away while being cleaned", partition_log.directory)
                return False
            raise
        installed = partition_log.install_cleaned(result, self.clock_ms())
        if installed:
            self.cleaned_count += 1
        return installed
