"""What the broker counts on its hot path; ``BrokerMetrics`` (every method a no-op) when
``metrics.listen`` is not set, ``PrometheusBrokerMetrics`` when it is.

The hot path pays for one counter increment per appended partition, one per fetched topic, and
per request one counter and five histogram observations: label children are bound once and kept
in dicts (prometheus-client's ``labels()`` builds a tuple and takes a lock on every call), and
counters move per batch, never per record (bench/metrics_cost.py measures the cost).

A request's stages, as Kafka's RequestMetrics names them, measured where this broker has them:
frame read -> handler start (RequestQueueTimeMs: header parse, gate and body decode; there is no
queue, each connection's task handles its own frames) -> handler end (LocalTimeMs; it includes
what Kafka counts as RemoteTimeMs: a Fetch long poll, a Produce waiting for its fsync round) ->
response written and drained (ResponseSendTimeMs); TotalTimeMs spans all of it. ThrottleTimeMs
is what the request was throttled for (``RequestTiming.throttle_ms``, set by quotas).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterable, Sequence
from typing import Any

from kio.schema.errors import ErrorCode
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from oncestream.broker.metrics import names
from oncestream.protocol.api_keys import API_VERSIONS
from oncestream.protocol.fetch_response import PartitionFetchResult
from oncestream.protocol.schemas import request_class

# Request latencies in ms: sub-ms for metadata, up to a long-polling Fetch's 30 s.
LATENCY_BUCKETS_MS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)
FLUSH_BUCKETS_MS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 5000)

# Kafka's request names (ApiKeys.name): Produce, Fetch, ListOffsets, ...
API_NAMES: dict[int, str] = {
    key: request_class(key, versions[1]).__name__.removesuffix("Request") for key, versions in API_VERSIONS.items()
}


def error_name(code: int) -> str:
    """Kafka's name of an error code (Errors.name(): NONE, NOT_LEADER_OR_FOLLOWER, ...)."""
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"UNKNOWN_{code}"


class RequestTiming:
    """The stage times of the request a connection is handling (one per connection, reused):
    the dispatcher sets the api and the handler's start and end, quotas the throttle time."""

    __slots__ = ("api_key", "api_version", "handler_end_s", "handler_start_s", "throttle_ms")

    def __init__(self) -> None:
        self.api_key = -1  # -1: nothing to record (a bare SASL token, a refused frame)
        self.api_version = 0
        self.handler_start_s = 0.0
        self.handler_end_s = 0.0
        self.throttle_ms = 0.0


class BrokerMetrics:
    """The hot path's metrics interface; this class records nothing (metrics are off)."""

    enabled = False

    def request_done(self, timing: RequestTiming, read_s: float, written_s: float) -> None:
        """One request answered: ``read_s`` when its frame was read, ``written_s`` when its
        response was drained (``perf_counter`` seconds)."""

    def response_errors(self, api_key: int, response: object) -> None:
        """Count the error codes in ``response`` (a kio response) under ``api_key``."""

    def produced(self, topic: str, size_bytes: int, messages: int) -> None:
        """A batch of ``messages`` records, ``size_bytes`` as sent, appended to ``topic``."""

    def fetched(self, topics: Sequence[tuple[str, Sequence[PartitionFetchResult]]]) -> None:
        """A Fetch response's partitions: bytes out per topic and error codes."""

    def connection_opened(self, listener: str) -> None:
        """A connection on ``listener`` is served from now on."""

    def connection_closed(self, listener: str) -> None:
        """A connection counted by ``connection_opened`` ended."""

    def failed_authentication(self, listener: str) -> None:
        """A client failed SASL authentication on ``listener``."""

    def flush_round(self, seconds: float) -> None:
        """One group-commit fsync round took ``seconds``."""


class PrometheusBrokerMetrics(BrokerMetrics):
    """Records into its own registry (one per broker: several brokers in one test process never
    share a series)."""

    enabled = True

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self._bytes_in = Counter(names.BYTES_IN, "Bytes appended per topic (as sent).", ["topic"], registry=r)
        self._messages_in = Counter(names.MESSAGES_IN, "Records appended per topic.", ["topic"], registry=r)
        self._bytes_out = Counter(names.BYTES_OUT, "Record bytes fetched per topic.", ["topic"], registry=r)
        self._requests = Counter(names.REQUESTS, "Requests answered.", ["request", "version"], registry=r)
        self._errors = Counter(names.ERRORS, "Error codes in responses (NONE included, as Kafka).",
                               ["request", "error"], registry=r)
        stage = {
            names.TOTAL_TIME: "Frame read to response written",
            names.QUEUE_TIME: "Frame read to handler start",
            names.LOCAL_TIME: "Handler start to handler end",
            names.THROTTLE_TIME: "Throttled for",
            names.SEND_TIME: "Handler end to response written",
        }
        self._stages = [
            Histogram(name, f"{doc} (ms).", ["request"], buckets=LATENCY_BUCKETS_MS, registry=r)
            for name, doc in stage.items()
        ]
        self._connections = Gauge(names.CONNECTIONS, "Connections served now.", ["listener"], registry=r)
        self._failed_auth = Counter(names.FAILED_AUTH, "Failed SASL authentications.", ["listener"], registry=r)
        self._flush = Histogram(names.FLUSH_TIME, "Group-commit fsync rounds (ms).", buckets=FLUSH_BUCKETS_MS,
                                registry=r)
        # Bound label children: the hot path never calls labels().
        self._topic_children: dict[str, tuple[Any, Any, Any]] = {}
        self._request_children: dict[tuple[int, int], tuple[Any, list[Any]]] = {}
        self._error_children: dict[tuple[int, int], Any] = {}

    def _topic(self, topic: str) -> tuple[Any, Any, Any]:
        children = self._topic_children.get(topic)
        if children is None:
            children = (self._bytes_in.labels(topic), self._messages_in.labels(topic), self._bytes_out.labels(topic))
            self._topic_children[topic] = children
        return children

    def request_done(self, timing: RequestTiming, read_s: float, written_s: float) -> None:
        key = (timing.api_key, timing.api_version)
        if key[0] < 0:
            return
        children = self._request_children.get(key)
        if children is None:
            name = API_NAMES.get(key[0], str(key[0]))
            children = (self._requests.labels(name, str(key[1])), [h.labels(name) for h in self._stages])
            self._request_children[key] = children
        requests, (total, queue, local, throttle, send) = children
        requests.inc()
        total.observe((written_s - read_s) * 1000)
        queue.observe((timing.handler_start_s - read_s) * 1000)
        local.observe((timing.handler_end_s - timing.handler_start_s) * 1000)
        throttle.observe(timing.throttle_ms)
        send.observe((written_s - timing.handler_end_s) * 1000)
        timing.api_key = -1
        timing.throttle_ms = 0.0

    def _count_errors(self, api_key: int, codes: Iterable[int]) -> None:
        tally: dict[int, int] = {}
        for code in codes:
            tally[code] = tally.get(code, 0) + 1
        for code, count in tally.items():
            child = self._error_children.get((api_key, code))
            if child is None:
                child = self._errors.labels(API_NAMES.get(api_key, str(api_key)), error_name(code))
                self._error_children[(api_key, code)] = child
            child.inc(count)

    def response_errors(self, api_key: int, response: object) -> None:
        codes: list[int] = []
        _collect_error_codes(response, codes)
        self._count_errors(api_key, codes)

    def produced(self, topic: str, size_bytes: int, messages: int) -> None:
        bytes_in, messages_in, _ = self._topic(topic)
        bytes_in.inc(size_bytes)
        messages_in.inc(messages)

    def fetched(self, topics: Sequence[tuple[str, Sequence[PartitionFetchResult]]]) -> None:
        codes: list[int] = []
        for topic, parts in topics:
            size_bytes = 0
            for part in parts:
                size_bytes += part.size_bytes
                codes.append(part.error_code)
            if size_bytes:
                self._topic(topic)[2].inc(size_bytes)
        self._count_errors(FETCH_KEY, codes)

    def connection_opened(self, listener: str) -> None:
        self._connections.labels(listener).inc()

    def connection_closed(self, listener: str) -> None:
        self._connections.labels(listener).dec()

    def failed_authentication(self, listener: str) -> None:
        self._failed_auth.labels(listener).inc()

    def flush_round(self, seconds: float) -> None:
        self._flush.observe(seconds * 1000)


FETCH_KEY = 1

# Per response class: the fields that hold an error code, and those that may hold nested entries.
_PLANS: dict[type, tuple[tuple[str, ...], tuple[str, ...]]] = {}


def _plan(cls: type) -> tuple[tuple[str, ...], tuple[str, ...]]:
    plan = _PLANS.get(cls)
    if plan is None:
        fields = dataclasses.fields(cls)
        error_fields = tuple(f.name for f in fields if f.name == "error_code")
        nested = tuple(f.name for f in fields if f.name != "error_code" and _may_nest(f.type))
        plan = _PLANS[cls] = (error_fields, nested)
    return plan


def _may_nest(annotation: object) -> bool:
    """Whether a field of this type may hold nested entries: a dataclass, or a tuple or union
    with one among its arguments (kio's annotations are resolved types)."""
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        return True
    return any(_may_nest(arg) for arg in typing.get_args(annotation))


def _collect_error_codes(entry: object, out: list[int]) -> None:
    if not dataclasses.is_dataclass(entry):
        return
    error_fields, nested = _plan(type(entry))
    for name in error_fields:
        out.append(int(getattr(entry, name)))
    for name in nested:
        value = getattr(entry, name)
        if isinstance(value, tuple):
            for item in value:
                _collect_error_codes(item, out)
        elif value is not None:
            _collect_error_codes(value, out)
