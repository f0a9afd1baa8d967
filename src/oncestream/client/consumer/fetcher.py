"""The consumer's fetcher: an event-loop task keeping one Fetch request in flight per partition
leader, for every assigned partition whose previous fetch the application has started reading.

The fetcher never decodes records. It hands each partition's raw record bytes to the user's
thread (``CompletedFetch``, decoded lazily in ``poll``), and learns where the next fetch starts
from the batch headers alone, so the next fetches are already done while the application works
through the previous one (a few fetches ahead per partition, like librdkafka's prefetching).

Positions: the application's position (next offset to return) is written only by the user's
thread; the fetcher advances its own ``fetch_position``. A seek or reassignment bumps the
partition's ``epoch``; fetch results carrying an older epoch are dropped.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from oncestream.async_wait import wait_event
from oncestream.client.common.cluster import Cluster
from oncestream.client.common.errors import BrokerResponseError, ConnectionLostError, RequestTimedOutError
from oncestream.client.common.network import fetch_request_body
from oncestream.errors import CorruptRecordError
from oncestream.protocol.api_keys import FETCH
from oncestream.protocol.batch_walk import complete_batches_end

log = logging.getLogger("oncestream.client")

# Completed fetches a partition may have waiting for the application. More than one keeps every
# partition in each request (so a request returns as soon as any of them has data, instead of
# one drained partition long-polling alone while the others wait), bounded overall by
# queued.max.messages.kbytes.
MAX_QUEUED_FETCHES = 4
_METADATA_ERRORS = (
    ErrorCode.not_leader_or_follower,
    ErrorCode.unknown_topic_or_partition,
    ErrorCode.leader_not_available,
    ErrorCode.fenced_leader_epoch,
    ErrorCode.unknown_leader_epoch,
    ErrorCode.kafka_storage_error,
)


class PartitionState:
    """One assigned partition (see the module docstring for who writes what)."""

    __slots__ = (
        "epoch",
        "fetch_position",
        "high_watermark",
        "last_stable_offset",
        "log_start_offset",
        "partition",
        "paused",
        "position",
        "queued",
        "reset_error",
        "topic",
    )

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.position: int | None = None  # next offset for the application; None: to be found
        self.fetch_position: int | None = None
        self.epoch = 0
        self.paused = False
        self.queued = 0  # completed fetches handed over and not yet taken by the user thread
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.log_start_offset = -1
        self.reset_error = 0


class CompletedFetch:
    """One partition's part of a fetch response, for the user's thread."""

    __slots__ = ("aborted", "epoch", "error_code", "fetch_offset", "records", "state")

    def __init__(self, state: PartitionState, epoch: int, fetch_offset: int, records: bytes,
                 error_code: int, aborted: list[tuple[int, int]] | None) -> None:
        self.state = state
        self.epoch = epoch
        self.fetch_offset = fetch_offset
        self.records = records
        self.error_code = error_code
        self.aborted = aborted


class Fetcher:
    """Sends fetches and queues their results (event loop)."""

    def __init__(self, conf: dict[str, Any], cluster: Cluster,
                 partitions: dict[tuple[str, int], PartitionState], state_lock: threading.Lock,
                 completed: collections.deque[CompletedFetch], notify_user: Callable[[], None]) -> None:
        self._cluster = cluster
        self._partitions = partitions
        self._lock = state_lock
        self._completed = completed
        self._notify_user = notify_user
        self._max_wait_ms = conf["fetch.wait.max.ms"]
        self._min_bytes = conf["fetch.min.bytes"]
        self._max_bytes = conf["fetch.max.bytes"]
        self._partition_max_bytes = conf["max.partition.fetch.bytes"]
        self._isolation = 1 if conf["isolation.level"] == "read_committed" else 0
        self._max_buffered_bytes = conf["queued.max.messages.kbytes"] * 1024
        self._retry_backoff_s: float = conf["retry.backoff.ms"] / 1000
        self.buffered_bytes = 0  # fetcher adds, user thread subtracts via consumed()
        self.consumed_bytes = 0
        self._in_flight: set[int] = set()
        self._event: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._metadata_task: asyncio.Task[None] | None = None
        self._node_backoff_until: dict[int, float] = {}
        self.closed = False
        self.crash_error: BaseException | None = None  # why the fetch task died, if it did

    def start(self) -> None:
        """Start the fetch task (event loop)."""
        self._event = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run())
        self._task.add_done_callback(self._on_run_exit)

    def _on_run_exit(self, task: asyncio.Task[None]) -> None:
        """The fetch task ended. Cancelled by close() is the normal end; anything else is a crash,
        after which nothing would ever be fetched: logged with its traceback and kept in
        ``crash_error`` for the consumer to report from poll()."""
        if task.cancelled() or task.exception() is None:
            return
        self.crash_error = task.exception()
        log.error("oncestream consumer: the fetch task crashed", exc_info=self.crash_error)
        self._notify_user()

    def wakeup(self) -> None:
        """Event loop: look for fetchable partitions now."""
        if self._event is not None:
            self._event.set()

    async def close(self) -> None:
        """Stop fetching."""
        self.closed = True
        if self._task is not None:
            self._task.cancel()
            # Waits without raising: a crash was already reported by _on_run_exit.
            await asyncio.wait([self._task])

    async def _run(self) -> None:
        if self._event is None:
            raise RuntimeError("start() creates the wake-up event before the loop runs")
        while not self.closed:
            self._event.clear()
            try:
                wait_s = self._send_fetches()
            except Exception:  # keep fetching whatever a single bad iteration did
                log.exception("oncestream consumer: fetch iteration failed")
                wait_s = self._retry_backoff_s
            # Not asyncio.wait_for: on 3.11 it can swallow close()'s cancellation (async_wait).
            if wait_s is None:
                await self._event.wait()
            else:
                await wait_event(self._event, wait_s)

    def _send_fetches(self) -> float | None:
        """Send a fetch to every leader with fetchable partitions and none in flight; returns how
        long the run loop may sleep (None: until woken)."""
        by_node: dict[int, list[PartitionState]] = {}
        need_metadata = False
        now = time.monotonic()
        if self.buffered_bytes - self.consumed_bytes >= self._max_buffered_bytes:
            return None  # the application must catch up first; consumed() wakes us
        held_back: set[int] = set()  # nodes with partitions waiting for the application
        for state in list(self._partitions.values()):
            if state.paused or state.fetch_position is None:
                continue
            node = self._cluster.leader_for(state.topic, state.partition)
            if node < 0:
                need_metadata = True
                continue
            if state.queued >= MAX_QUEUED_FETCHES:
                held_back.add(node)
                continue
            if node in self._in_flight or self._node_backoff_until.get(node, 0) > now:
                continue
            by_node.setdefault(node, []).append(state)
        for node, states in by_node.items():
            if node in held_back and all(0 <= s.high_watermark <= (s.fetch_position or 0) for s in states):
                # Only caught-up partitions are fetchable: such a request would long-poll for
                # fetch.wait.max.ms while the partitions that do have data could not be fetched
                # behind it. Wait until the application frees one of those instead.
                continue
            self._send(node, states)
        if need_metadata:
            self._refresh_metadata()
            return self._retry_backoff_s
        if self._node_backoff_until:
            pending = [t - now for t in self._node_backoff_until.values() if t > now]
            if pending:
                return min(pending)
        return None

    def _refresh_metadata(self) -> None:
        if self._metadata_task is not None and not self._metadata_task.done():
            return

        async def refresh() -> None:
            try:
                await self._cluster.refresh()
            except (ConnectionLostError, RequestTimedOutError, BrokerResponseError):
                await asyncio.sleep(self._retry_backoff_s)
            finally:
                self.wakeup()

        self._metadata_task = asyncio.get_running_loop().create_task(refresh())

    def _send(self, node: int, states: list[PartitionState]) -> None:
        """Write one fetch request now; its response is handled in a done-callback, which sends
        the next fetch right away (no task switches between a response and the next request)."""
        conn = self._cluster.ready_connection(node)
        if conn is None:
            self._connect(node)
            return
        try:
            version = conn.version_for(FETCH, 12, 4)
        except BrokerResponseError:
            log.error("oncestream consumer: broker %s supports no Fetch version 4..12", node)
            self._node_backoff_until[node] = time.monotonic() + 10 * self._retry_backoff_s
            return
        requested = [(s, s.epoch, s.fetch_position) for s in states]
        by_topic: dict[str, list[tuple[int, int, int]]] = {}
        for s, _epoch, offset in requested:
            by_topic.setdefault(s.topic, []).append((s.partition, offset, self._partition_max_bytes))  # type: ignore[arg-type]
        body = fetch_request_body(version, self._max_wait_ms, self._min_bytes, self._max_bytes,
                                  self._isolation, list(by_topic.items()))
        self._in_flight.add(node)
        conn.send_frame(FETCH, version, body,
                        on_response=lambda response, error: self._on_response(node, requested, response, error))

    def _connect(self, node: int) -> None:
        if node in self._in_flight:
            return
        self._in_flight.add(node)

        async def connect() -> None:
            try:
                await self._cluster.connection(node)
            except (ConnectionLostError, RequestTimedOutError, BrokerResponseError):
                self._node_backoff_until[node] = time.monotonic() + self._retry_backoff_s
                self._refresh_metadata()
            finally:
                self._in_flight.discard(node)
                self.wakeup()

        asyncio.get_running_loop().create_task(connect())

    def _on_response(self, node: int, requested: list[tuple[PartitionState, int, int | None]],
                     response: Any, error: BaseException | None) -> None:
        self._in_flight.discard(node)
        if self.closed:
            return
        if error is not None:
            log.debug("fetch from %s failed: %r", node, error)
            self._node_backoff_until[node] = time.monotonic() + self._retry_backoff_s
            self._refresh_metadata()
            self.wakeup()
            return
        self._node_backoff_until.pop(node, None)
        try:
            self._handle_response(response, requested)
        except Exception:  # a malformed response must not stop fetching for good
            log.exception("oncestream consumer: could not handle a fetch response")
        self._send_fetches()

    def _handle_response(self, response: Any, requested: list[tuple[PartitionState, int, int | None]]) -> None:
        sent = {(s.topic, s.partition): (s, epoch, offset) for s, epoch, offset in requested}
        handed_over = False
        top_error = int(getattr(response, "error_code", 0))
        if top_error:
            log.debug("fetch error %s", top_error)
            self._refresh_metadata()
            return
        for topic in response.responses:
            for p in topic.partitions:
                entry = sent.get((topic.topic, p.partition_index))
                if entry is None:
                    continue
                state, epoch, offset = entry
                code = int(p.error_code)
                records = p.records or b""
                with self._lock:
                    if state.epoch != epoch or self._partitions.get((state.topic, state.partition)) is not state:
                        continue  # seeked or unassigned meanwhile
                    if code in _METADATA_ERRORS:
                        self._refresh_metadata()
                        continue
                    if code != 0:
                        # Out of range and friends are resolved by the user's thread.
                        state.queued += 1
                        self._completed.append(CompletedFetch(state, epoch, offset or 0, b"", code, None))
                        handed_over = True
                        continue
                    state.high_watermark = p.high_watermark
                    state.last_stable_offset = getattr(p, "last_stable_offset", -1)
                    state.log_start_offset = getattr(p, "log_start_offset", -1)
                    if not records:
                        continue
                    try:
                        _complete_bytes, next_offset = complete_batches_end(records)
                    except CorruptRecordError:
                        next_offset = -1  # the user's thread decodes it and reports the error
                    if next_offset > (offset or 0):
                        state.fetch_position = next_offset
                    aborted = None
                    if p.aborted_transactions:
                        aborted = [(a.producer_id, a.first_offset) for a in p.aborted_transactions]
                    state.queued += 1
                    self.buffered_bytes += len(records)
                    self._completed.append(CompletedFetch(state, epoch, offset or 0, records, 0, aborted))
                    handed_over = True
        if handed_over:
            self._notify_user()
