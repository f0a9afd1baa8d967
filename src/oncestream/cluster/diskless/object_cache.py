"""Ranged reads of diskless objects through one bounded cache shared by every reader of a broker.

Objects are immutable (keys are unique per upload and never overwritten), so a byte range read
once stays valid for as long as anyone asks for it: the cache never needs invalidating, only
bounding. It holds at most ``budget_bytes`` of ranges, evicting the least recently used; a range
larger than the whole budget is served but not kept. Concurrent requests for a range that one
in-flight GET (or one cached range) already covers wait for it instead of issuing their own, so a
hundred consumers tailing the same partition cost one GET per new object range.

``ObjectStore`` calls block, so they run on an executor (the broker's remote threads).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections import OrderedDict
from dataclasses import dataclass

from oncestream.remote.object_store import ObjectStore

DEFAULT_BUDGET_BYTES = 64 * 1024 * 1024

RangeKey = tuple[str, int, int]  # (object key, start, end)


@dataclass(frozen=True, slots=True)
class ObjectCacheStats:
    """Counters of an ``ObjectRangeCache`` (for metrics and tests)."""

    size_bytes: int
    peak_size_bytes: int
    entries: int
    gets: int  # GETs sent to the store
    hits: int  # requests served from a cached range
    joins: int  # requests served by joining another request's in-flight GET


class ObjectRangeCache:
    """LRU cache of object byte ranges with coalesced in-flight GETs (see the module doc).

    Use from one event loop. Errors of the store (``RemoteObjectNotFoundError`` for a missing
    object, ``RemoteStorageError`` otherwise) reach every request waiting on that GET; nothing
    is cached for a failed GET.
    """

    def __init__(self, store: ObjectStore, *, budget_bytes: int = DEFAULT_BUDGET_BYTES,
                 executor: concurrent.futures.Executor | None = None) -> None:
        if budget_bytes < 0:
            raise ValueError("the object cache budget cannot be negative")
        self._store = store
        self._budget_bytes = budget_bytes
        self._executor = executor
        self._entries: OrderedDict[RangeKey, bytes] = OrderedDict()
        self._ranges_by_object: dict[str, set[RangeKey]] = {}
        self._in_flight: dict[RangeKey, asyncio.Future[bytes]] = {}
        self._size_bytes = 0
        self._peak_size_bytes = 0
        self._gets = 0
        self._hits = 0
        self._joins = 0

    @property
    def budget_bytes(self) -> int:
        return self._budget_bytes

    def stats(self) -> ObjectCacheStats:
        return ObjectCacheStats(self._size_bytes, self._peak_size_bytes, len(self._entries),
                                self._gets, self._hits, self._joins)

    async def get_range(self, object_key: str, start: int, end: int) -> bytes:
        """Bytes [``start``, ``end``) of the object (shorter if the object ends first)."""
        if end <= start:
            return b""
        cached = self._covering_entry(object_key, start, end)
        if cached is not None:
            self._hits += 1
            (_, c_start, _), data = cached
            return data[start - c_start : end - c_start]
        for (key, f_start, f_end), future in self._in_flight.items():
            if key == object_key and f_start <= start and end <= f_end:
                self._joins += 1
                data = await asyncio.shield(future)
                return data[start - f_start : end - f_start]
        return await self._fetch((object_key, start, end))

    def _covering_entry(self, object_key: str, start: int, end: int) -> tuple[RangeKey, bytes] | None:
        for range_key in self._ranges_by_object.get(object_key, ()):
            if range_key[1] <= start and end <= range_key[2]:
                self._entries.move_to_end(range_key)
                return range_key, self._entries[range_key]
        return None

    async def _fetch(self, range_key: RangeKey) -> bytes:
        # The GET belongs to no requester: cancelling the one that started it (a fetch answered
        # at its max wait) leaves it running for the others, and its result is still cached.
        loop = asyncio.get_running_loop()
        object_key, start, end = range_key
        future = loop.run_in_executor(self._executor, self._store.get_range, object_key, start, end)
        self._in_flight[range_key] = future
        self._gets += 1
        future.add_done_callback(lambda done: self._finished(range_key, done))
        return await asyncio.shield(future)

    def _finished(self, range_key: RangeKey, future: asyncio.Future[bytes]) -> None:
        del self._in_flight[range_key]
        if not future.cancelled() and future.exception() is None:
            self._insert(range_key, future.result())

    def _insert(self, range_key: RangeKey, data: bytes) -> None:
        size = len(data)
        if size > self._budget_bytes or range_key in self._entries:
            return
        while self._size_bytes + size > self._budget_bytes and self._entries:
            evicted, evicted_data = self._entries.popitem(last=False)
            self._size_bytes -= len(evicted_data)
            ranges = self._ranges_by_object[evicted[0]]
            ranges.discard(evicted)
            if not ranges:
                del self._ranges_by_object[evicted[0]]
        self._entries[range_key] = data
        self._ranges_by_object.setdefault(range_key[0], set()).add(range_key)
        self._size_bytes += size
        self._peak_size_bytes = max(self._peak_size_bytes, self._size_bytes)
