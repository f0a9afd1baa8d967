"""A heap of per-key deadlines with lazy deletion: when is the next timer due, and which keys are.

The group coordinator keeps one entry per group (the group's earliest timer), so a tick pops only
the groups whose deadline passed instead of scanning every group and member, and asking for the
next deadline is a peek. Moving a key's deadline pushes a new entry; the superseded one stays in
the heap until it surfaces and is recognised as stale (its deadline is no longer the key's).
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

# Rebuild the heap when stale entries outnumber live ones by this factor (each heartbeat that
# moves a group's earliest deadline leaves one behind).
_MAX_STALE_RATIO = 4


class DeadlineHeap(Generic[K]):
    """Deadlines (ms on one monotonic clock) per key; at most one live deadline per key."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, K]] = []
        self._live: dict[K, int] = {}
        self._seq = 0  # ties break by insertion order; keys need not be comparable

    def __len__(self) -> int:
        """How many keys have a deadline."""
        return len(self._live)

    @property
    def entries(self) -> int:
        """Heap entries including stale ones (for tests and metrics)."""
        return len(self._heap)

    def deadline_of(self, key: K) -> int | None:
        """The key's deadline, or None."""
        return self._live.get(key)

    def schedule(self, key: K, deadline_ms: int | None) -> None:
        """Set (or with None clear) the key's deadline."""
        if deadline_ms is None:
            self._live.pop(key, None)
            return
        if self._live.get(key) == deadline_ms:
            return
        self._live[key] = deadline_ms
        self._seq += 1
        heapq.heappush(self._heap, (deadline_ms, self._seq, key))
        if len(self._heap) > _MAX_STALE_RATIO * len(self._live) + 64:
            self._rebuild()

    def next_ms(self) -> int | None:
        """The earliest live deadline, or None."""
        self._drop_stale_top()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now_ms: int) -> list[K]:
        """Remove and return, earliest first, every key whose deadline is at or before ``now_ms``."""
        due: list[K] = []
        while True:
            self._drop_stale_top()
            if not self._heap or self._heap[0][0] > now_ms:
                return due
            _, _, key = heapq.heappop(self._heap)
            del self._live[key]
            due.append(key)

    def _drop_stale_top(self) -> None:
        heap = self._heap
        while heap and self._live.get(heap[0][2]) != heap[0][0]:
            heapq.heappop(heap)

    def _rebuild(self) -> None:
        self._heap = [(d, i, k) for i, (k, d) in enumerate(self._live.items())]
        heapq.heapify(self._heap)
        self._seq = len(self._heap)
