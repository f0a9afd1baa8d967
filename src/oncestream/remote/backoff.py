"""Capped exponential backoff with jitter, per partition (sans-io).

Kafka's RemoteLogManager retries a failed copy after ``remote.log.manager.task.retry.backoff.ms``,
doubling up to ``remote.log.manager.task.retry.backoff.max.ms``, each delay scaled by a random
factor in ``[1 - jitter, 1 + jitter)`` so that partitions failing together do not retry together.
The clock and the random source come from the caller.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class BackoffPolicy:
    """The delays after consecutive failures: ``initial_ms * 2**(n-1)`` capped at ``max_ms``,
    times a jitter factor."""

    initial_ms: int = 500
    max_ms: int = 30000
    jitter: float = 0.2

    def delay_ms(self, failures: int, unit_random: float) -> int:
        """The wait after the ``failures``-th consecutive failure (>= 1); ``unit_random`` in [0, 1)."""
        if failures < 1:
            return 0
        exponent = min(failures - 1, 62)  # 2**62 ms is beyond any cap; avoids huge ints
        base_ms = min(self.max_ms, self.initial_ms * (1 << exponent))
        factor = 1.0 - self.jitter + 2 * self.jitter * unit_random
        return max(1, min(self.max_ms, int(base_ms * factor))) if self.jitter else base_ms


class Backoff:
    """One partition's retry state: how many attempts failed in a row and when the next may run."""

    def __init__(self, policy: BackoffPolicy, random: Callable[[], float]) -> None:
        self.policy = policy
        self._random = random
        self.failures = 0
        self.next_attempt_ms = 0

    def ready(self, now_ms: int) -> bool:
        """Whether an attempt may run at ``now_ms`` (monotonic)."""
        return now_ms >= self.next_attempt_ms

    def failed(self, now_ms: int) -> int:
        """Record a failure at ``now_ms``; returns the delay before the next attempt."""
        self.failures += 1
        delay_ms = self.policy.delay_ms(self.failures, self._random())
        self.next_attempt_ms = now_ms + delay_ms
        return delay_ms

    def succeeded(self) -> None:
        """An attempt succeeded: the next failure starts again from the initial delay."""
        self.failures = 0
        self.next_attempt_ms = 0
