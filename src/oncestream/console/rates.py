"""Message rates from offsets the console already reads: the growth of a topic's end offsets
between two looks, per second. Nothing is sampled in the background: a rate appears from the
second view of a page (the topics list refreshes itself every 5 s while open)."""

from __future__ import annotations

import threading
from collections.abc import Callable

# A previous look older than this is too old to stand for "now" (the page was not open).
MAX_INTERVAL_S = 300.0


class OffsetRates:
    """The last (time, end offsets total) per key and the rate since the look before; thread-safe."""

    def __init__(self, clock_s: Callable[[], float]) -> None:
        self._clock_s = clock_s
        self._last: dict[str, tuple[float, int, float | None]] = {}
        self._lock = threading.Lock()

    def observe(self, key: str, total: int) -> float | None:
        """Record ``total`` (the sum of the end offsets) now; the messages per second since the
        previous look, None without a recent one. Two looks within the same instant keep the rate
        of the look before (a page and its refresh may come together)."""
        now = self._clock_s()
        with self._lock:
            previous = self._last.get(key)
            rate: float | None = None
            if previous is not None:
                then, before, last_rate = previous
                elapsed = now - then
                if elapsed <= 0:
                    return last_rate
                if elapsed <= MAX_INTERVAL_S and total >= before:
                    rate = (total - before) / elapsed
            self._last[key] = (now, total, rate)
            return rate
