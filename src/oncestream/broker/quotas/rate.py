"""Kafka's quota measurements, sans-io: a sampled rate (``Rate`` over ``SampledStat``) for the
byte-rate and request-percentage quotas, and the token bucket of KIP-599 for the controller
mutation rate, with the throttle time each gives a violation. Time comes in as ``now_ms``.

The sampled rate (Kafka's ``org.apache.kafka.common.metrics.stats.Rate``): ``samples`` windows of
``window_ms`` each. A value goes into the current sample; a sample that has lasted ``window_ms``
is complete, and the next record starts the next sample (the oldest is reused). Samples older than
``samples * window_ms`` are forgotten before every measurement. The rate is the sum of the kept
samples over the elapsed time since the oldest sample started, never less than ``samples - 1``
full windows (so a first burst is not divided by a few milliseconds).

Throttle time: how long the client must stay silent for the rate to come back to the bound
(Kafka's ``QuotaUtils.throttleTime`` estimates it as ``(rate - bound) / bound * window``; see
``SampledRate.throttle_ms`` for why the samples' expiry is taken into account here).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


class QuotaConfigError(ValueError):
    """A quota window setting that cannot measure anything (e.g. zero samples)."""


@dataclass(slots=True)
class _Sample:
    start_ms: int
    value: float = 0.0


class SampledRate:
    """A per-second rate over ``samples`` windows of ``window_ms`` (Kafka's Rate)."""

    def __init__(self, samples: int, window_ms: int, now_ms: int) -> None:
        if samples < 2 or window_ms < 1:
            raise QuotaConfigError(f"a rate needs at least 2 samples of 1 ms or more (got {samples} x {window_ms} ms)")
        self.samples = samples
        self.window_ms = window_ms
        self._samples: list[_Sample] = [_Sample(now_ms)]
        self._current = 0

    def record(self, value: float, now_ms: int) -> None:
        """Add ``value`` at ``now_ms`` (a sample that lasted a window is closed first)."""
        sample = self._samples[self._current]
        if now_ms - sample.start_ms >= self.window_ms:
            self._current = (self._current + 1) % self.samples
            if self._current >= len(self._samples):
                self._samples.append(_Sample(now_ms))
            else:
                self._samples[self._current] = _Sample(now_ms)
            sample = self._samples[self._current]
        sample.value += value

    def _purge(self, now_ms: int) -> None:
        expire_ms = self.samples * self.window_ms
        for index, sample in enumerate(self._samples):
            if now_ms - sample.start_ms >= expire_ms:
                self._samples[index] = _Sample(now_ms)  # Kafka resets it: value 0, starting now

    def window_size_ms(self, now_ms: int) -> int:
        """The time the rate is divided by: since the oldest sample, at least samples-1 windows."""
        self._purge(now_ms)
        oldest_ms = min(sample.start_ms for sample in self._samples)
        elapsed_ms = now_ms - oldest_ms
        full_windows = elapsed_ms // self.window_ms
        if full_windows < self.samples - 1:
            elapsed_ms += (self.samples - 1 - full_windows) * self.window_ms
        return elapsed_ms

    def rate_per_s(self, now_ms: int) -> float:
        """The measured rate per second at ``now_ms``."""
        window_ms = self.window_size_ms(now_ms)
        return sum(sample.value for sample in self._samples) / (window_ms / 1000)

    def throttle_ms(self, bound_per_s: float, now_ms: int) -> int:
        """0 while the rate is within ``bound_per_s``; else how long the client must stay silent
        for the measured rate to be back within it.

        Kafka's QuotaUtils.throttleTime answers ``(rate - bound) / bound * window``, which assumes
        the window keeps growing while the client waits. Once the window is full (``samples``
        windows) it does not: the rate falls only as samples expire, and a client honouring
        those throttle times stays ~15% above its quota in a steady state (and is let through in
        bursts when a large sample expires). The wait is therefore computed from the samples
        themselves: per stretch of time between two sample expiries the kept bytes are fixed, and
        the wait is the first moment the window covering them is long enough. While no sample
        expires during the wait this is Kafka's value for a window that is not padded."""
        rate = self.rate_per_s(now_ms)  # purges the expired samples
        if rate <= bound_per_s:
            return 0
        expire_ms = self.samples * self.window_ms
        min_window_ms = (self.samples - 1) * self.window_ms
        expiries = sorted({sample.start_ms + expire_ms - now_ms for sample in self._samples})
        from_ms = 0
        for until_ms in (*expiries, math.inf):
            kept = [sample for sample in self._samples if sample.start_ms + expire_ms - now_ms > from_ms]
            total = sum(sample.value for sample in kept)
            needed_ms = total / bound_per_s * 1000  # the window that makes the kept bytes the bound
            if needed_ms <= min_window_ms:  # the window is never shorter than samples-1 windows
                wait_ms = float(from_ms)
            else:
                oldest_ms = min(sample.start_ms for sample in kept)
                wait_ms = max(float(from_ms), oldest_ms + needed_ms - now_ms)
            if wait_ms < until_ms:
                return math.ceil(wait_ms)
            from_ms = int(until_ms)
        raise AssertionError("unreachable: nothing is kept after the last expiry")


class TokenBucket:
    """KIP-599's token bucket (Kafka's ``TokenBucket`` stat): ``rate`` tokens per second up to a
    burst of ``rate * samples * window_s``; a record takes its tokens even into debt, and a
    bucket in debt is a violation whose throttle time is the time to pay it back."""

    def __init__(self, samples: int, window_ms: int, now_ms: int) -> None:
        if samples < 1 or window_ms < 1:
            raise QuotaConfigError(f"a token bucket needs samples and a window (got {samples} x {window_ms} ms)")
        self.burst_s = samples * window_ms / 1000
        self._tokens: float | None = None  # full on first use, whatever the rate is then
        self._last_ms = now_ms

    def _refill(self, rate_per_s: float, now_ms: int) -> float:
        burst = rate_per_s * self.burst_s
        tokens = burst if self._tokens is None else min(burst, self._tokens + rate_per_s * (now_ms - self._last_ms) / 1000)
        self._tokens = tokens
        self._last_ms = max(self._last_ms, now_ms)
        return tokens

    def record(self, value: float, rate_per_s: float, now_ms: int) -> None:
        """Take ``value`` tokens at ``now_ms``."""
        self._tokens = self._refill(rate_per_s, now_ms) - value

    def throttle_ms(self, rate_per_s: float, now_ms: int) -> int:
        """0 unless the bucket is in debt; else the time until it is not (Kafka's
        ControllerMutationQuotaManager.throttleTimeMs: ``-tokens / rate``)."""
        tokens = self._refill(rate_per_s, now_ms)
        if tokens >= 0:
            return 0
        return round(-tokens / rate_per_s * 1000)
