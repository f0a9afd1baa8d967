"""The append buffer (sans-io): which produce requests go into the next object, and when.

Requests of every partition and every producer are collected; an object is due when
``diskless.append.commit.interval.ms`` (default 250) has passed since the oldest buffered request
arrived, or when the buffered bytes reach ``diskless.append.buffer.max.bytes`` (default 8 MiB).
``take`` hands out one object's worth (at most max bytes, but always at least one request, so a
request larger than the bound still goes out alone), oldest first; what remains keeps its arrival
times, so its interval is not restarted. Time comes from an injected monotonic clock (ms).

State table:

==========  =====================================  ==================================
state       due when                               take()
==========  =====================================  ==================================
empty       never (``ms_until_due`` is None)       ValueError
buffering   oldest arrival + interval <= now, or   the oldest requests up to max bytes
            buffered bytes >= max bytes
==========  =====================================  ==================================
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from oncestream.errors import InvalidConfigError

DEFAULT_COMMIT_INTERVAL_MS = 250
DEFAULT_BUFFER_MAX_BYTES = 8 * 1024 * 1024

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class _Buffered(Generic[T]):
    item: T
    size_bytes: int
    arrived_ms: float


class AppendBuffer(Generic[T]):
    """Buffered produce requests (opaque items with their sizes) and the flush decision."""

    def __init__(
        self,
        clock_ms: Callable[[], float],
        *,
        commit_interval_ms: int = DEFAULT_COMMIT_INTERVAL_MS,
        max_bytes: int = DEFAULT_BUFFER_MAX_BYTES,
    ) -> None:
        if commit_interval_ms < 0:
            raise InvalidConfigError(f"diskless.append.commit.interval.ms must be >= 0, not {commit_interval_ms}")
        if max_bytes < 1:
            raise InvalidConfigError(f"diskless.append.buffer.max.bytes must be >= 1, not {max_bytes}")
        self._clock_ms = clock_ms
        self._interval_ms = commit_interval_ms
        self._max_bytes = max_bytes
        self._items: deque[_Buffered[T]] = deque()
        self._size_bytes = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def size_bytes(self) -> int:
        """Bytes buffered (the sum of the sizes given to ``add``)."""
        return self._size_bytes

    def add(self, item: T, size_bytes: int) -> None:
        """Buffer one request (``size_bytes``: what it adds to the object)."""
        if size_bytes < 0:
            raise ValueError(f"a request cannot be {size_bytes} bytes")
        self._items.append(_Buffered(item, size_bytes, self._clock_ms()))
        self._size_bytes += size_bytes

    def ms_until_due(self) -> float | None:
        """Milliseconds until an object is due (0 = now), None while empty."""
        if not self._items:
            return None
        if self._size_bytes >= self._max_bytes:
            return 0.0
        return max(0.0, self._items[0].arrived_ms + self._interval_ms - self._clock_ms())

    def flush_due(self) -> bool:
        """Whether the next object should be built now."""
        remaining = self.ms_until_due()
        return remaining is not None and remaining <= 0

    def take(self) -> list[T]:
        """The oldest requests that fit one object (max bytes; at least one), removed from the buffer."""
        if not self._items:
            raise ValueError("the append buffer is empty")
        taken: list[T] = []
        taken_bytes = 0
        while self._items:
            head = self._items[0]
            if taken and taken_bytes + head.size_bytes > self._max_bytes:
                break
            self._items.popleft()
            taken.append(head.item)
            taken_bytes += head.size_bytes
            self._size_bytes -= head.size_bytes
        return taken

    def take_all(self) -> list[T]:
        """Everything buffered (shutdown: each request is then answered with an error)."""
        items = [buffered.item for buffered in self._items]
        self._items.clear()
        self._size_bytes = 0
        return items
