"""Applying the quotas to requests, as Kafka's KafkaApis does (KIP-219 semantics).

For every request the dispatcher hands its handler to ``QuotaEnforcer.call``, which

- times the handler's own work on the event loop (``request_percentage``): the coroutine's steps
  are timed, not the time it waits (a Fetch long poll or an fsync costs the broker nothing while
  it waits), close to Kafka's request handler thread time; ApiVersions and SASL are exempt, as
  in Kafka;
- records the request's bytes for Produce (``producer_byte_rate``) and the response's bytes for
  Fetch (``consumer_byte_rate``); a pipelined Produce (cluster mode, broker/produce_pipelining.py)
  has its bytes recorded when its frame is read instead (``record_produce_read``, below);
- puts the largest throttle time into the response's ``throttle_time_ms`` (a controller mutation
  throttle set by the topic handlers is kept when larger), and asks the connection to be muted
  for that long (``take_channel_mute_s``): the response goes out at once and the server reads
  nothing more from that connection until the time has passed (KIP-219). A client that honours
  the field waits by itself; one that does not still gets no more service.

Pipelined Produce: Kafka reads one request of a connection at a time, so the request that
crosses ``producer_byte_rate`` is the last one it reads before the mute. A cluster broker handles
up to five Produce requests of a connection at once, so their bytes are recorded as each frame is
read (``QuotaEnforcer.record_produce_read``), in arrival order, before it is handed to the
pipeline: the frame that crosses the quota gets the throttle time, the server reads no further
frame from that connection until it is answered and its mute has passed (the requests read before
it are still handled and answered in order, as Kafka handles a request it has read), and its
handler answers that throttle time without recording the bytes again
(``produce_recorded_at_read``). The frames read before it were counted before it, so a producer
gets past its quota by one request at most, as with one request at a time.

A Fetch is handled as Kafka's KafkaApis.handleFetchRequest does: its size is capped before the
read to what the client's quota window holds (``consumer_byte_rate * (quota.window.num - 1) *
quota.window.size.seconds``, Kafka's maxQuotaWindowBytes, so a fetch within its window can always
make progress), and a Fetch that ends up throttled (bytes or request time) is answered with no
partitions and its throttle time, its bytes un-recorded: the records are read again after the mute.

Difference from Kafka, on purpose: older request versions are muted the same way instead of
having their response held.
"""

from __future__ import annotations

import contextvars
import dataclasses
import datetime
import logging
import struct
import time
from collections.abc import Callable, Coroutine, Generator
from typing import Any

from oncestream.broker.quotas.managers import ClientQuotaManagers
from oncestream.protocol import api_keys as k
from oncestream.protocol.fetch_response import encode_fetch_response

# Kafka exempts these from request quotas (they precede authentication or ask for nothing).
REQUEST_QUOTA_EXEMPT = frozenset({k.API_VERSIONS_KEY, k.SASL_HANDSHAKE, k.SASL_AUTHENTICATE})
_MAX_THROTTLE_MS = 2**31 - 1
log = logging.getLogger(__name__)
_I32 = struct.Struct(">i")
_FETCH_FLEXIBLE_FROM_VERSION = 12

_mute_ms: contextvars.ContextVar[int] = contextvars.ContextVar("quota_mute_ms", default=0)
# The Fetch size the current request's quota allows (None: no fetch quota); set per request by
# QuotaEnforcer.call, read by the Fetch handler.
_fetch_max_bytes: contextvars.ContextVar[int | None] = contextvars.ContextVar("quota_fetch_max_bytes", default=None)


# Bytes-out counts of the current Fetch held until its quota decision (None: count at once).
_fetch_counts: contextvars.ContextVar[list[Callable[[], None]] | None] = contextvars.ContextVar(
    "quota_fetch_counts", default=None)


# A pipelined Produce's bytes were recorded when its frame was read, with this throttle time (set
# in the request's own task by the server); None: they are recorded when the request is handled.
_produce_read_throttle_ms: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "quota_produce_read_throttle_ms", default=None)


def produce_recorded_at_read(throttle_ms: int) -> None:
    """The current request (a pipelined Produce, in its own task) had its bytes recorded when its
    frame was read (``QuotaEnforcer.record_produce_read``), which gave it ``throttle_ms``: the
    enforcer answers that throttle time and records the bytes no more."""
    _produce_read_throttle_ms.set(throttle_ms)


def fetch_quota_max_bytes() -> int | None:
    """The largest Fetch response the current request's consumer_byte_rate allows, or None."""
    return _fetch_max_bytes.get()


def count_fetch_when_sent(count: Callable[[], None]) -> None:
    """Run ``count`` (the Fetch response's bytes-out metrics) once the response is known to go
    out with its records: at once without quotas, else after QuotaEnforcer.call's decision. A
    throttled fetch goes out empty and counts nothing, as Kafka records bytes out only for what it
    sends."""
    pending = _fetch_counts.get()
    if pending is None:
        count()
    else:
        pending.append(count)


def take_channel_mute_s() -> float | None:
    """How long the current connection must not be read from after this response (seconds), or
    None; taking it clears it (called by the server once the response is written)."""
    mute_ms = _mute_ms.get()
    if mute_ms <= 0:
        return None
    _mute_ms.set(0)
    return mute_ms / 1000


def quota_user(principal: str) -> str:
    """The quota ``user`` of a principal: its name (``User:alice`` -> ``alice``), as Kafka."""
    _kind, sep, name = principal.partition(":")
    return name if sep else principal


class TimedCoroutine:
    """Awaits a coroutine and adds up the time its steps run (``busy_s``), not the time it waits."""

    __slots__ = ("_clock_s", "_coro", "busy_s")

    def __init__(self, coro: Coroutine[Any, Any, Any], clock_s: Callable[[], float] = time.perf_counter) -> None:
        self._coro = coro
        self._clock_s = clock_s
        self.busy_s = 0.0

    def __await__(self) -> Generator[Any, Any, Any]:
        coro = self._coro
        sent: Any = None
        error: BaseException | None = None
        while True:
            start_s = self._clock_s()
            try:
                yielded = coro.send(sent) if error is None else coro.throw(error)
            except StopIteration as stop:
                self.busy_s += self._clock_s() - start_s
                return stop.value
            self.busy_s += self._clock_s() - start_s
            try:
                sent, error = (yield yielded), None
            except BaseException as exc:  # noqa: BLE001  # cancellation goes into the handler, as with await
                sent, error = None, exc


def with_throttle(api_key: int, api_version: int, response: Any, throttle_ms: int) -> Any:
    """``response`` with ``throttle_time_ms`` set (a kio response, or Fetch's framed buffers)."""
    throttle_ms = min(throttle_ms, _MAX_THROTTLE_MS)
    if isinstance(response, list):
        if api_key != k.FETCH or len(response) < 2:
            return response
        # [size prefix, correlation id, (tagged fields,) throttle_time_ms, ...]: see fetch_response.
        offset = 4 + (1 if api_version >= _FETCH_FLEXIBLE_FROM_VERSION else 0)
        head = bytearray(response[1])
        head[offset:offset + 4] = _I32.pack(throttle_ms)
        return [response[0], bytes(head), *response[2:]]
    if hasattr(response, "throttle_time"):
        return dataclasses.replace(response, throttle_time=datetime.timedelta(milliseconds=throttle_ms))
    return response


def empty_fetch_response(api_version: int, response: list[Any], throttle_ms: int) -> list[Any]:
    """A Fetch response with no partitions in place of ``response`` (its correlation id kept):
    what Kafka's FetchContext.getThrottledResponse answers. Sessions are not kept (handlers/fetch.py),
    so session id 0 declines one as the full response did."""
    (correlation_id,) = _I32.unpack_from(bytes(response[1][:4]))
    return encode_fetch_response(api_version, correlation_id, (), throttle_time_ms=min(throttle_ms, _MAX_THROTTLE_MS))


def throttle_in(response: Any) -> int:
    """The throttle time a handler already put into its (kio) response, in ms."""
    throttle = getattr(response, "throttle_time", None)
    return int(throttle.total_seconds() * 1000) if isinstance(throttle, datetime.timedelta) else 0


class QuotaEnforcer:
    """Measures each request against the client's quotas and throttles its response."""

    def __init__(self, managers: Callable[[], ClientQuotaManagers], clock_s: Callable[[], float] = time.perf_counter) -> None:
        """``managers`` gives the broker's quota managers; ``clock_s`` times handlers (seconds)."""
        self._managers = managers
        self._clock_s = clock_s

    def record_produce_read(self, principal: str, client_id: str | None, frame_bytes: int) -> int:
        """Record a Produce request's ``frame_bytes`` against the client's ``producer_byte_rate``
        as its frame is read, before it is handled (a pipelined Produce, see the module's
        docstring): its throttle time in ms (0: within the quota, or no quota applies). The request's
        task then calls ``produce_recorded_at_read`` with it, so ``call`` records nothing twice."""
        managers = self._managers()
        if managers.configs.is_empty():
            return 0
        return managers.record_produce(quota_user(principal), client_id or "", frame_bytes)

    async def call(self, api_key: int, api_version: int, principal: str, client_id: str | None, frame_bytes: int,
                   run: Callable[[], Any], is_async: bool) -> Any:
        """Run the handler (``run()``: its result, or its coroutine when ``is_async``), measure
        it, and return the response with its throttle time; the mute is left for the server."""
        managers = self._managers()
        read_throttle_ms = _produce_read_throttle_ms.get() if api_key == k.PRODUCE else None
        if managers.configs.is_empty() and not read_throttle_ms:
            if api_key == k.FETCH:
                _fetch_max_bytes.set(None)  # quotas may have been removed since this connection's last fetch
            return await run() if is_async else run()  # no quota anywhere: nothing to measure
        user, client = quota_user(principal), client_id or ""
        counts: list[Callable[[], None]] = []
        if api_key == k.FETCH:
            _fetch_max_bytes.set(managers.fetch_window_max_bytes(user, client))
            _fetch_counts.set(counts)
        try:
            if is_async:
                timed = TimedCoroutine(run(), self._clock_s)
                response = await timed
                busy_ms = timed.busy_s * 1000
            else:
                start_s = self._clock_s()
                response = run()
                busy_ms = (self._clock_s() - start_s) * 1000
        finally:
            if api_key == k.FETCH:
                _fetch_counts.set(None)
        throttle_ms = 0
        if api_key not in REQUEST_QUOTA_EXEMPT:
            throttle_ms = managers.record_request_time(user, client, busy_ms)
        if api_key == k.PRODUCE:
            if read_throttle_ms is None:
                read_throttle_ms = managers.record_produce(user, client, frame_bytes)
            throttle_ms = max(throttle_ms, read_throttle_ms)
        elif api_key == k.FETCH and isinstance(response, list):
            size_bytes = sum(len(b) for b in response)
            throttle_ms = max(throttle_ms, managers.record_fetch(user, client, size_bytes))
            if throttle_ms > 0:  # Kafka: a throttled fetch is answered empty, its bytes un-recorded
                managers.unrecord_fetch(user, client, size_bytes)
                response = empty_fetch_response(api_version, response, throttle_ms)
                counts.clear()
        for count in counts:
            count()
        handler_throttle_ms = throttle_in(response)
        if throttle_ms > handler_throttle_ms and response is not None:
            response = with_throttle(api_key, api_version, response, throttle_ms)
        mute_ms = max(throttle_ms, handler_throttle_ms)
        if mute_ms > 0 and log.isEnabledFor(logging.DEBUG):  # one line per throttled request: DEBUG, as Kafka
            log.debug("request throttled for %d ms", mute_ms,
                      extra={"event": "throttled", "api_key": api_key, "throttle_ms": mute_ms,
                             "quota_user": user, "client_id": client})
        _mute_ms.set(mute_ms)
        return response

