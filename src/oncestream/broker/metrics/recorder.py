"""What the broker counts on its hot path; ``BrokerMetrics`` (every method a no-op) when
``metrics.listen`` is not set, ``PrometheusBrokerMetrics`` when it is.

The hot path pays for one dict increment per appended partition, one per fetched topic, and per
request one counter and five bucket increments, all plain Python on the loop's thread; counters
move per batch, never per record. prometheus-client's Counter and Histogram cost ~14 us per
request here (locks, value objects, ``labels()``), about 8% of produce throughput; these cost
~3 us. The registry reads them at scrape time (bench/metrics_cost.py measures the cost).

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
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from contextvars import ContextVar

from kio.schema.errors import ErrorCode
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

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
    """The stage times of the request a connection is handling (one per connection, reused, in
    ``current_timing``): the dispatcher sets the api and the handler's start and end, quotas the
    throttle time."""

    __slots__ = ("api_key", "api_version", "handler_end_s", "handler_start_s", "throttle_ms")

    def __init__(self) -> None:
        self.api_key = -1  # -1: nothing to record (a bare SASL token, a refused frame)
        self.api_version = 0
        self.handler_start_s = 0.0
        self.handler_end_s = 0.0
        self.throttle_ms = 0.0


# The timing of the request the current connection task handles (each task has its own context);
# None while metrics are off.
current_timing: ContextVar[RequestTiming | None] = ContextVar("oncestream_request_timing", default=None)


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
        """A client failed SASL authentication on ``listener`` (or asked for a mechanism it has not)."""

    def flush_round(self, seconds: float) -> None:
        """One group-commit fsync round took ``seconds``."""


class LatencyHistogram:
    """Bucket counts and a sum, exported as a Prometheus histogram at scrape time. Not
    prometheus-client's Histogram: its observe() takes a lock and walks a value object per
    bucket (~2.5 us; five per request cost ~8% of produce throughput); the broker's hot path
    runs on one thread, so a list increment does (~0.3 us)."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.total = 0.0

    def observe(self, value: float) -> None:
        """One observation (Prometheus ``le``: counted in the first bucket whose bound is >= it)."""
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def buckets(self) -> list[tuple[str, float]]:
        """Cumulative (le, count) pairs, +Inf last."""
        out, running = [], 0
        for bound, count in zip((*map(str, self.bounds), "+Inf"), self.counts):
            running += count
            out.append((bound, float(running)))
        return out


class PrometheusBrokerMetrics(BrokerMetrics):
    """Counts in plain dicts and lists on the event loop's thread (the only one that calls these
    methods: handlers, connection tasks, the flusher's done callbacks) and hands them to its own
    registry at scrape time, which also runs on the loop (metrics/endpoint.py). One registry per
    broker: several brokers in one test process never share a series."""

    enabled = True

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        # topic -> [bytes in, messages in, bytes out]
        self.topics: dict[str, list[int]] = {}
        # (api key, version) -> [requests, total, queue, local, throttle, send histograms]
        self.requests: dict[tuple[int, int], tuple[list[int], tuple[LatencyHistogram, ...]]] = {}
        self.errors: dict[tuple[int, int], int] = {}
        self.connections: dict[str, int] = {}
        self.failed_authentications: dict[str, int] = {}
        self.flushes = LatencyHistogram(FLUSH_BUCKETS_MS)
        self.registry.register(_HotPathCollector(self))

    def _topic(self, topic: str) -> list[int]:
        counts = self.topics.get(topic)
        if counts is None:
            counts = self.topics[topic] = [0, 0, 0]
        return counts

    def request_done(self, timing: RequestTiming, read_s: float, written_s: float) -> None:
        key = (timing.api_key, timing.api_version)
        if key[0] < 0:
            return
        entry = self.requests.get(key)
        if entry is None:
            entry = self.requests[key] = ([0], tuple(LatencyHistogram(LATENCY_BUCKETS_MS) for _ in range(5)))
        count, (total, queue, local, throttle, send) = entry
        count[0] += 1
        total.observe((written_s - read_s) * 1000)
        queue.observe((timing.handler_start_s - read_s) * 1000)
        local.observe((timing.handler_end_s - timing.handler_start_s) * 1000)
        throttle.observe(timing.throttle_ms)
        send.observe((written_s - timing.handler_end_s) * 1000)
        timing.api_key = -1
        timing.throttle_ms = 0.0

    def _count_errors(self, api_key: int, codes: Iterable[int]) -> None:
        errors = self.errors
        for code in codes:
            key = (api_key, code)
            errors[key] = errors.get(key, 0) + 1

    def response_errors(self, api_key: int, response: object) -> None:
        codes: list[int] = []
        collect_error_codes(response, codes)
        self._count_errors(api_key, codes)

    def produced(self, topic: str, size_bytes: int, messages: int) -> None:
        counts = self._topic(topic)
        counts[0] += size_bytes
        counts[1] += messages

    def fetched(self, topics: Sequence[tuple[str, Sequence[PartitionFetchResult]]]) -> None:
        codes: list[int] = []
        for topic, parts in topics:
            size_bytes = 0
            for part in parts:
                size_bytes += part.size_bytes
                codes.append(part.error_code)
            if size_bytes:
                self._topic(topic)[2] += size_bytes
        self._count_errors(FETCH_KEY, codes)

    def connection_opened(self, listener: str) -> None:
        self.connections[listener] = self.connections.get(listener, 0) + 1

    def connection_closed(self, listener: str) -> None:
        self.connections[listener] = self.connections.get(listener, 0) - 1

    def failed_authentication(self, listener: str) -> None:
        self.failed_authentications[listener] = self.failed_authentications.get(listener, 0) + 1

    def flush_round(self, seconds: float) -> None:
        self.flushes.observe(seconds * 1000)


_STAGES = (
    (names.TOTAL_TIME, "Frame read to response written (ms)."),
    (names.QUEUE_TIME, "Frame read to handler start (ms)."),
    (names.LOCAL_TIME, "Handler start to handler end (ms)."),
    (names.THROTTLE_TIME, "Throttled for (ms)."),
    (names.SEND_TIME, "Handler end to response written (ms)."),
)


class _HotPathCollector(Collector):
    """Turns the recorder's counts into metric families at scrape time."""

    def __init__(self, metrics: PrometheusBrokerMetrics) -> None:
        self._m = metrics

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        m = self._m
        families = [
            CounterMetricFamily(names.BYTES_IN, "Bytes appended per topic (as sent).", labels=["topic"]),
            CounterMetricFamily(names.MESSAGES_IN, "Records appended per topic.", labels=["topic"]),
            CounterMetricFamily(names.BYTES_OUT, "Record bytes fetched per topic.", labels=["topic"]),
        ]
        for topic, counts in sorted(m.topics.items()):
            for family, count in zip(families, counts):
                family.add_metric([topic], count)
        yield from families
        requests = CounterMetricFamily(names.REQUESTS, "Requests answered.", labels=["request", "version"])
        stages = [HistogramMetricFamily(name, doc, labels=["request"]) for name, doc in _STAGES]
        # The histograms are per api (Kafka's RequestMetrics have no version label): versions summed.
        merged: dict[str, list[LatencyHistogram]] = {}
        for (api_key, version), (answered, per_stage) in sorted(m.requests.items()):
            name = API_NAMES.get(api_key, str(api_key))
            requests.add_metric([name, str(version)], answered[0])
            into = merged.setdefault(name, [LatencyHistogram(LATENCY_BUCKETS_MS) for _ in per_stage])
            for target, source in zip(into, per_stage):
                target.counts = [a + b for a, b in zip(target.counts, source.counts)]
                target.total += source.total
        for name, summed in merged.items():
            for stage, histogram in zip(stages, summed):
                stage.add_metric([name], histogram.buckets(), histogram.total)
        yield requests
        yield from stages
        errors = CounterMetricFamily(names.ERRORS, "Error codes in responses (NONE included, as Kafka).",
                                     labels=["request", "error"])
        for (api_key, code), count in sorted(m.errors.items()):
            errors.add_metric([API_NAMES.get(api_key, str(api_key)), error_name(code)], count)
        yield errors
        connections = GaugeMetricFamily(names.CONNECTIONS, "Connections served now.", labels=["listener"])
        for listener, count in sorted(m.connections.items()):
            connections.add_metric([listener], count)
        yield connections
        failed = CounterMetricFamily(names.FAILED_AUTH, "Failed SASL authentications.", labels=["listener"])
        for listener, count in sorted(m.failed_authentications.items()):
            failed.add_metric([listener], count)
        yield failed
        flushes = HistogramMetricFamily(names.FLUSH_TIME, "Group-commit fsync rounds (ms).")
        flushes.add_metric([], m.flushes.buckets(), m.flushes.total)
        yield flushes


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


def collect_error_codes(entry: object, out: list[int]) -> None:
    """Append every error code in ``entry`` (a kio response, walked through its nested entries)
    to ``out`` (the metrics and the request log read them)."""
    if not dataclasses.is_dataclass(entry):
        return
    error_fields, nested = _plan(type(entry))
    for name in error_fields:
        out.append(int(getattr(entry, name)))
    for name in nested:
        value = getattr(entry, name)
        if isinstance(value, tuple):
            for item in value:
                collect_error_codes(item, out)
        elif value is not None:
            collect_error_codes(value, out)
