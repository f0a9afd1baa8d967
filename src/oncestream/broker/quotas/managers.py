"""The broker's quota managers (Kafka's ClientQuotaManager for produce and fetch bytes,
ClientRequestQuotaManager for request time, ControllerMutationQuotaManager for partition
mutations), sans-io: values and ``now_ms`` in, throttle times out.

One measurement per quota key and per sharing key (``entities.matching_levels``): clients that
match the same entity level share it, as Kafka's quota sensors do. A client without a quota is
not measured at all. Measurements nobody recorded into for an hour are dropped (Kafka expires its
quota sensors after an hour of inactivity), so a stream of short-lived client ids cannot grow
the broker's memory without bound.

Settings (Kafka's names and defaults): ``quota.window.num`` (11 samples) and
``quota.window.size.seconds`` (1 s); ``controller.quota.window.num`` / ``...size.seconds`` for
the controller mutation rate.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from oncestream.broker.quotas.entities import (
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    ClientQuotaConfigs,
)
from oncestream.broker.quotas.rate import QuotaConfigError, SampledRate, TokenBucket

INACTIVE_SENSOR_EXPIRY_MS = 3_600_000
# Kafka's ClientRequestQuotaManager: one request's time counts as a percentage of one thread:
# 1 ms of handler time is 0.1 percent-seconds.
_PERCENT_PER_MS = 100 / 1000


@dataclass(frozen=True, slots=True)
class QuotaWindow:
    """How a rate is measured: ``samples`` windows of ``window_ms``."""

    samples: int = 11
    window_ms: int = 1000

    @classmethod
    def from_properties(cls, props: Mapping[str, str], prefix: str = "") -> QuotaWindow:
        """``{prefix}quota.window.num`` and ``{prefix}quota.window.size.seconds``."""
        try:
            samples = int(props.get(f"{prefix}quota.window.num", "11"))
            window_s = int(props.get(f"{prefix}quota.window.size.seconds", "1"))
        except ValueError as exc:
            raise QuotaConfigError(f"{prefix}quota.window.*: {exc}") from None
        if samples < 2 or window_s < 1:
            raise QuotaConfigError(f"{prefix}quota.window.num must be >= 2 and {prefix}quota.window.size.seconds >= 1")
        return cls(samples, window_s * 1000)


class _RateQuota:
    """One quota key measured by sampled rates (bytes per second, or percent of a thread)."""

    def __init__(self, key: str, window: QuotaWindow, max_throttle_ms: int | None) -> None:
        self.key = key
        self.window = window
        self.max_throttle_ms = max_throttle_ms
        self._rates: dict[tuple[str, str], tuple[SampledRate, list[int]]] = {}

    def record(self, configs: ClientQuotaConfigs, user: str, client_id: str, value: float, now_ms: int) -> int:
        """Record ``value`` for the client; its throttle time in ms (0: within its quota)."""
        quota = configs.quota_for(user, client_id, self.key)
        if quota is None:
            return 0
        bound, metric_key = quota
        entry = self._rates.get(metric_key)
        if entry is None:
            self._expire(now_ms)
            entry = self._rates[metric_key] = (SampledRate(self.window.samples, self.window.window_ms, now_ms), [now_ms])
        rate, last_ms = entry
        last_ms[0] = now_ms
        rate.record(value, now_ms)
        throttle_ms = rate.throttle_ms(bound, now_ms)
        return throttle_ms if self.max_throttle_ms is None else min(throttle_ms, self.max_throttle_ms)

    def max_value_in_window(self, configs: ClientQuotaConfigs, user: str, client_id: str) -> float | None:
        """Kafka's getMaxValueInQuotaWindow: the most one request may take without the client
        owing more than the window holds, ``quota * (samples - 1) * window``; None: no quota."""
        quota = configs.quota_for(user, client_id, self.key)
        if quota is None:
            return None
        return quota[0] * (self.window.samples - 1) * self.window.window_ms / 1000

    def unrecord(self, configs: ClientQuotaConfigs, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Take back a recorded ``value`` (Kafka's unrecordQuotaSensor: a negative record)."""
        quota = configs.quota_for(user, client_id, self.key)
        entry = self._rates.get(quota[1]) if quota is not None else None
        if entry is not None:
            entry[0].record(-value, now_ms)

    def _expire(self, now_ms: int) -> None:
        stale = [key for key, (_, last) in self._rates.items() if now_ms - last[0] >= INACTIVE_SENSOR_EXPIRY_MS]
        for key in stale:
            del self._rates[key]

    def measured(self) -> int:
        """How many measurements are kept (for tests of the expiry)."""
        return len(self._rates)


class MutationQuota:
    """KIP-599's controller mutation rate for one client: a token bucket per sharing key.

    ``strict`` (CreateTopics v6+, CreatePartitions v3+, DeleteTopics v5+): a mutation is refused
    (THROTTLING_QUOTA_EXCEEDED) while the bucket is in debt; the one that puts it in debt is
    accepted. Older versions are permissive: everything is accepted and only throttled."""

    def __init__(self, bucket: TokenBucket | None, rate_per_s: float, strict: bool, clock_ms: Callable[[], int]) -> None:
        self._bucket = bucket
        self._rate_per_s = rate_per_s
        self.strict = strict
        self._clock_ms = clock_ms
        self.throttle_ms = 0

    def try_record(self, mutations: int) -> bool:
        """Take ``mutations`` partitions from the quota; False (nothing taken) when strict and
        the quota is already exceeded."""
        if self._bucket is None or mutations <= 0:
            return True
        now_ms = self._clock_ms()
        if self.strict:
            waiting_ms = self._bucket.throttle_ms(self._rate_per_s, now_ms)
            if waiting_ms > 0:
                self.throttle_ms = max(self.throttle_ms, waiting_ms)
                return False
        self._bucket.record(mutations, self._rate_per_s, now_ms)
        self.throttle_ms = max(self.throttle_ms, self._bucket.throttle_ms(self._rate_per_s, now_ms))
        return True


class ClientQuotaManagers:
    """Every quota of one broker: the configured values and the measurements against them."""

    def __init__(self, configs: ClientQuotaConfigs, clock_ms: Callable[[], int], window: QuotaWindow | None = None,
                 controller_window: QuotaWindow | None = None) -> None:
        self.configs = configs
        self.clock_ms = clock_ms
        window = window or QuotaWindow()
        self.controller_window = controller_window or QuotaWindow()
        self.produce = _RateQuota(PRODUCER_BYTE_RATE, window, None)
        self.fetch = _RateQuota(CONSUMER_BYTE_RATE, window, None)
        # Kafka bounds a request-time throttle by one window (ClientRequestQuotaManager).
        self.request = _RateQuota(REQUEST_PERCENTAGE, window, window.window_ms)
        self._buckets: dict[tuple[str, str], TokenBucket] = {}

    def record_produce(self, user: str, client_id: str, size_bytes: int) -> int:
        """Produce request bytes; the throttle time in ms."""
        return self.produce.record(self.configs, user, client_id, size_bytes, self.clock_ms())

    def record_fetch(self, user: str, client_id: str, size_bytes: int) -> int:
        """Fetch response bytes; the throttle time in ms."""
        return self.fetch.record(self.configs, user, client_id, size_bytes, self.clock_ms())

    def fetch_window_max_bytes(self, user: str, client_id: str) -> int | None:
        """The largest Fetch response the client's consumer_byte_rate allows (Kafka's
        maxQuotaWindowBytes), or None when no fetch quota applies."""
        max_bytes = self.fetch.max_value_in_window(self.configs, user, client_id)
        return None if max_bytes is None else int(max_bytes)

    def unrecord_fetch(self, user: str, client_id: str, size_bytes: int) -> None:
        """Fetch bytes that were recorded but not sent (the throttled response went out empty)."""
        self.fetch.unrecord(self.configs, user, client_id, size_bytes, self.clock_ms())

    def record_request_time(self, user: str, client_id: str, handler_ms: float) -> int:
        """Time a request's handler ran; the throttle time in ms (at most one window)."""
        return self.request.record(self.configs, user, client_id, handler_ms * _PERCENT_PER_MS, self.clock_ms())

    def mutation_quota(self, user: str, client_id: str, *, strict: bool) -> MutationQuota:
        """The controller mutation quota one CreateTopics/CreatePartitions/DeleteTopics request
        draws from (unlimited when none applies)."""
        quota = self.configs.quota_for(user, client_id, CONTROLLER_MUTATION_RATE)
        if quota is None:
            return MutationQuota(None, 0.0, strict, self.clock_ms)
        rate_per_s, metric_key = quota
        bucket = self._buckets.get(metric_key)
        if bucket is None:
            bucket = self._buckets[metric_key] = TokenBucket(
                self.controller_window.samples, self.controller_window.window_ms, self.clock_ms())
        return MutationQuota(bucket, rate_per_s, strict, self.clock_ms)
