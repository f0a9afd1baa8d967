"""The object range cache of diskless reads, over the real SeaweedFS: concurrent requests for one
range cost one GET, many readers keep the cache within its byte budget, errors reach everyone."""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from oncestream.cluster.diskless.object_cache import ObjectRangeCache
from oncestream.errors import RemoteObjectNotFoundError
from oncestream.remote.object_store import ObjectStore

T = TypeVar("T")


def run(main: Callable[[], Awaitable[T]]) -> T:
    async def bounded() -> T:
        async with asyncio.timeout(120):
            return await main()

    return asyncio.run(bounded())


class GatedStore:
    """The real store, with its ranged GETs counted and held until the test opens the gate."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.gate = threading.Event()
        self.gate.set()
        self.range_gets = 0
        self._lock = threading.Lock()

    def get_range(self, key: str, start: int, end: int) -> bytes:
        with self._lock:
            self.range_gets += 1
        if not self.gate.wait(60):
            raise TimeoutError("the test never opened the gate")
        return self.store.get_range(key, start, end)


def _cache(gated: GatedStore, budget_bytes: int) -> ObjectRangeCache:
    return ObjectRangeCache(gated, budget_bytes=budget_bytes)  # type: ignore[arg-type]  # get_range is all it calls


async def _until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(30):
        while not condition():  # noqa: ASYNC110  (set on an executor thread, no loop event to await)
            await asyncio.sleep(0.01)


def test_concurrent_requests_for_one_range_coalesce_into_one_get(object_store: ObjectStore) -> None:
    data = bytes(range(256)) * 64
    object_store.put("objects/a", data)
    gated = GatedStore(object_store)
    cache = _cache(gated, 1 << 20)

    async def main() -> None:
        gated.gate.clear()
        first = asyncio.ensure_future(cache.get_range("objects/a", 100, 9000))
        await _until(lambda: gated.range_gets == 1)
        # The same range and ranges inside it, requested while the GET is in flight, join it.
        others = [asyncio.ensure_future(cache.get_range("objects/a", 100 + i, 9000 - i)) for i in range(20)]
        await asyncio.sleep(0.05)
        gated.gate.set()
        assert await first == data[100:9000]
        for i, other in enumerate(others):
            assert await other == data[100 + i : 9000 - i]
        assert gated.range_gets == 1
        # Cached now: inner ranges are hits; a range reaching outside is a new GET.
        assert await cache.get_range("objects/a", 200, 300) == data[200:300]
        assert gated.range_gets == 1
        assert await cache.get_range("objects/a", 50, 300) == data[50:300]
        assert gated.range_gets == 2
        stats = cache.stats()
        assert (stats.gets, stats.joins) == (2, 20)

    run(main)


def test_many_readers_keep_the_cache_within_its_budget(object_store: ObjectStore) -> None:
    rng = random.Random(22)
    objects = {f"objects/{i}": rng.randbytes(64 * 1024) for i in range(4)}
    for key, data in objects.items():
        object_store.put(key, data)
    budget = 48 * 1024
    gated = GatedStore(object_store)
    cache = _cache(gated, budget)

    async def reader(seed: int) -> None:
        local = random.Random(seed)
        for _ in range(15):
            key = local.choice(sorted(objects))
            start = local.randrange(0, 60 * 1024)
            end = start + local.randrange(1, 16 * 1024)
            assert await cache.get_range(key, start, end) == objects[key][start:end]
            assert cache.stats().size_bytes <= budget

    async def main() -> None:
        await asyncio.gather(*(reader(seed) for seed in range(40)))

    run(main)
    stats = cache.stats()
    assert stats.peak_size_bytes <= budget
    assert stats.size_bytes <= budget
    assert stats.peak_size_bytes > budget // 2  # it was actually used, not bypassed
    # A range larger than the whole budget is served, not kept.
    assert run(lambda: cache.get_range("objects/0", 0, 60 * 1024)) == objects["objects/0"][: 60 * 1024]
    assert cache.stats().size_bytes <= budget


def test_a_missing_object_fails_every_waiter_and_caches_nothing(object_store: ObjectStore) -> None:
    gated = GatedStore(object_store)
    cache = _cache(gated, 1 << 20)

    async def main() -> None:
        gated.gate.clear()
        waiters = [asyncio.ensure_future(cache.get_range("objects/none", 0, 10)) for _ in range(5)]
        await _until(lambda: gated.range_gets == 1)
        gated.gate.set()
        for waiter in waiters:
            with pytest.raises(RemoteObjectNotFoundError):
                await waiter
        assert cache.stats().entries == 0
        with pytest.raises(RemoteObjectNotFoundError):
            await cache.get_range("objects/none", 0, 10)
        assert gated.range_gets == 2  # a failure is not remembered: the next request asks again

    run(main)
