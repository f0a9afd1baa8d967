"""Pipelined Produce of one connection: handled concurrently, answered in order.

Used in cluster mode for every Produce, and on a single broker once a connection's Produce waited
for an fsync round (flush.messages): the next request then appends while the one before waits,
and one round can cover both (server.py decides, handlers/produce.py takes the turn).

The server reads, answers and writes one request of a connection at a time, as Kafka's SocketServer
does (it mutes a channel until the response is sent). On a single broker a Produce takes about a
millisecond, so that costs nothing. In cluster mode a Produce waits for its object to be uploaded
and its coordinates committed, up to ``diskless.append.commit.interval.ms`` (250 ms) plus the
upload and the commit, and librdkafka puts one partition in each Produce request (its issue
#1700): one request per connection per commit interval capped a producer at one partition batch
per cycle (measured: 3 batches per object with 3 producers, whatever the partition count;
docs/benchmarks.md). Here up to ``MAX_IN_FLIGHT`` Produce requests of a connection are handled at
once, so they join the same upload; their responses are still written in the order the requests
arrived, which is what the protocol promises and what idempotent producers' sequence numbers rely
on. The order of the commits follows the order in which requests enter the appender's buffer
(objects are cut and committed in that order, and requests within an object in buffer order), so
each request gets a ``ProduceTurn``: the handler awaits ``wait()`` just before it buffers its data
and calls ``entered()`` right after, and a request enters only once every earlier request of its
connection has entered or ended. Without it, a handler's own awaits before buffering (the topic
cache refreshed from PostgreSQL, log configs, a KIP-890 add) let a later request overtake an
earlier one: the idempotent producer's next batch then reached the commit before the one before
it, was refused OUT_OF_ORDER_SEQUENCE_NUMBER and, answered right after its predecessor's success,
looked to librdkafka like a broker that lost its sequence (a fatal error: the producer stops).

Any other request waits until every earlier Produce is answered (``wait_idle``), so requests that
are not Produce keep their one-at-a-time semantics. A handler's failure closes the connection, as
it does for an ordinary request: the reader sees it at its next step.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

# librdkafka's and the Java client's max.in.flight.requests.per.connection with idempotence.
MAX_IN_FLIGHT = 5
# How long a closing connection's requests in flight may take to finish their appends (an upload
# and a commit; the appender answers a request it cannot complete well within this).
CLOSE_DRAIN_S = 30.0

Response = bytes | list[bytes | bytearray | memoryview] | None


@dataclass(frozen=True)
class PipelinedResult:
    """What the connection loop needs once a pipelined request is answered."""

    response: Response
    mute_s: float | None  # KIP-219: the channel's throttle after this response
    read_s: float  # perf_counter when the frame was read (request metrics)
    timing: object  # the request's own RequestTiming (None: metrics off)


class ProduceTurn:
    """A pipelined request's place in its connection's order of entry into the appender."""

    def __init__(self, previous: asyncio.Event | None) -> None:
        self._previous = previous
        self._entered = asyncio.Event()

    async def wait(self) -> None:
        """Until every earlier request of the connection has entered (or ended without entering)."""
        if self._previous is not None:
            await self._previous.wait()

    def entered(self) -> None:
        """This request's data is buffered (or it will buffer none): the next request may enter."""
        self._entered.set()

    @property
    def entered_event(self) -> asyncio.Event:
        return self._entered


_current_turn: contextvars.ContextVar[ProduceTurn | None] = contextvars.ContextVar("produce_turn", default=None)


def current_produce_turn() -> ProduceTurn | None:
    """The turn of the pipelined Produce request being handled (None outside a pipeline)."""
    return _current_turn.get()


class ProducePipeline:
    """The Produce requests of one connection in flight; responses written in arrival order."""

    def __init__(self, write: Callable[[PipelinedResult], Awaitable[None]], release_bytes: Callable[[int], None], *,
                 max_in_flight: int = MAX_IN_FLIGHT, on_idle: Callable[[], None] = lambda: None) -> None:
        """``write`` writes one result's response and accounts for it (metrics, mute);
        ``release_bytes`` gives a request's share of queued.max.request.bytes back once its
        response is written (or the connection closes); ``on_idle`` runs whenever the last request
        in flight has been answered."""
        self._write = write
        self._release_bytes = release_bytes
        self._on_idle = on_idle
        # Each request's handling and the bytes its frame holds in the pool.
        self._in_flight: collections.deque[tuple[asyncio.Task[PipelinedResult], int]] = collections.deque()
        self._space = asyncio.Semaphore(max_in_flight)
        self._idle = asyncio.Event()
        self._idle.set()
        self._writer: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None
        self._last_entered: asyncio.Event | None = None  # the latest request's entry (ProduceTurn)

    @property
    def busy(self) -> bool:
        """Whether a request is in flight or a response is still being written."""
        return not self._idle.is_set()

    def raise_failure(self) -> None:
        """Re-raise what ended the pipeline (a handler's exception, a lost client), if anything did."""
        if self._failure is not None:
            raise self._failure

    async def submit(self, handle: Awaitable[PipelinedResult], reserved_bytes: int) -> None:
        """Start handling one request whose frame holds ``reserved_bytes`` of the pool (waits
        while ``max_in_flight`` are already in flight); the pipeline gives them back."""
        try:
            self.raise_failure()
            await self._space.acquire()
            self.raise_failure()
        except BaseException:
            self._release_bytes(reserved_bytes)
            if asyncio.iscoroutine(handle):
                handle.close()
            raise
        turn = ProduceTurn(self._last_entered)
        self._last_entered = turn.entered_event
        self._in_flight.append((asyncio.ensure_future(self._in_turn(turn, handle)), reserved_bytes))
        self._idle.clear()
        if self._writer is None or self._writer.done():
            self._writer = asyncio.ensure_future(self._write_in_order())

    @staticmethod
    async def _in_turn(turn: ProduceTurn, handle: Awaitable[PipelinedResult]) -> PipelinedResult:
        """Run ``handle`` with ``turn`` as its current turn (this task's own context); a request
        that ends without entering lets the next one enter."""
        _current_turn.set(turn)
        try:
            return await handle
        finally:
            turn.entered()

    async def wait_idle(self) -> None:
        """Until every request submitted so far is answered; raises what ended the pipeline."""
        await self._idle.wait()
        self.raise_failure()

    async def _write_in_order(self) -> None:
        try:
            while self._in_flight:
                task, reserved_bytes = self._in_flight[0]
                result = await asyncio.shield(task)  # cancelling the writer must not cancel the request (close)
                await self._write(result)
                self._in_flight.popleft()
                self._release_bytes(reserved_bytes)
                self._space.release()
        except BaseException as exc:  # noqa: BLE001  # handed to the reader, which closes the connection
            self._failure = exc
            self._space.release()  # a reader waiting for room wakes and sees the failure
        finally:
            if not self._in_flight or self._failure is not None:
                self._idle.set()
                self._on_idle()

    async def close(self, drain_timeout_s: float = CLOSE_DRAIN_S) -> None:
        """The connection is closing: stop writing answers, let the requests in flight finish
        their appends for up to ``drain_timeout_s`` (then cancel them), and wait for both.

        A request read in full is appended even though its answer cannot be sent, as on the
        single broker and in Kafka: an acks=0 producer that flushes and closes at once (it never
        waits for an answer) would otherwise lose every record of its last commit interval."""
        if self._writer is not None:
            self._writer.cancel()
        tasks: list[asyncio.Future[Any]] = [task for task, _reserved in self._in_flight]
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=drain_timeout_s)
            for task in pending:
                task.cancel()
        if self._writer is not None:
            tasks.append(self._writer)
        await asyncio.gather(*tasks, return_exceptions=True)
        for _task, reserved_bytes in self._in_flight:
            self._release_bytes(reserved_bytes)
        self._in_flight.clear()

