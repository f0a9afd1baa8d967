"""The coordinate cache of diskless reads: runs join when they touch, the tail wins otherwise,
rows are bounded in number and in age (consolidation may move batches: see coordinates.py)."""

from __future__ import annotations

import uuid

from oncestream.cluster.diskless.coordinates import BatchCoordinate, CoordinateCache

KEY = (uuid.UUID(int=1), 0)
OTHER = (uuid.UUID(int=2), 0)


def rows(first: int, count: int, size: int = 2) -> list[BatchCoordinate]:
    """``count`` batches of ``size`` offsets from ``first``."""
    return [BatchCoordinate(base, base + size - 1, "o", None, 0, 100, -1, False, False, 0)
            for base in range(first, first + count * size, size)]


def bases(hit: tuple[list[BatchCoordinate], int] | None) -> tuple[list[int], int] | None:
    return None if hit is None else ([row.base_offset for row in hit[0]], hit[1])


def test_runs_join_when_they_touch_and_lookups_start_at_the_containing_batch() -> None:
    cache = CoordinateCache()
    cache.store(KEY, 0, rows(0, 3))  # [0, 6)
    assert bases(cache.lookup(KEY, 3)) == ([2, 4], 6)
    assert cache.lookup(KEY, 6) is None
    cache.store(KEY, 6, rows(6, 2))  # the tail follower's next query: joined
    assert bases(cache.lookup(KEY, 0)) == ([0, 2, 4, 6, 8], 10)
    cache.store(KEY, 4, rows(4, 4))  # overlapping and reaching further
    assert bases(cache.lookup(KEY, 1)) == ([0, 2, 4, 6, 8, 10], 12)
    assert cache.batch_count == 6


def test_a_disjoint_run_replaces_only_a_run_ending_earlier() -> None:
    cache = CoordinateCache()
    cache.store(KEY, 100, rows(100, 2))
    cache.store(KEY, 0, rows(0, 2))  # a replay far behind the tail: the tail's run is kept
    assert cache.lookup(KEY, 0) is None
    assert bases(cache.lookup(KEY, 100)) == ([100, 102], 104)
    cache.store(KEY, 200, rows(200, 1))
    assert cache.lookup(KEY, 100) is None
    assert bases(cache.lookup(KEY, 200)) == ([200], 202)
    assert cache.batch_count == 1


def test_rows_are_bounded_in_number_least_recently_used_partition_first() -> None:
    cache = CoordinateCache(max_batches=5)
    cache.store(KEY, 0, rows(0, 3))
    cache.store(OTHER, 0, rows(0, 2))
    assert cache.lookup(KEY, 0) is not None  # KEY is now the more recently used
    cache.store(OTHER, 4, rows(4, 2))  # OTHER grows to 4 rows: KEY goes
    assert cache.batch_count == 4
    assert cache.lookup(KEY, 0) is None
    cache.store(OTHER, 8, rows(8, 3))  # one run over the bound keeps its newest rows
    assert cache.batch_count == 5
    assert bases(cache.lookup(OTHER, 4)) == ([4, 6, 8, 10, 12], 14)
    assert cache.lookup(OTHER, 2) is None


def test_rows_expire_after_their_ttl() -> None:
    now = [0.0]
    cache = CoordinateCache(ttl_ms=1000, clock_ms=lambda: now[0])
    cache.store(KEY, 0, rows(0, 2))
    now[0] = 900.0
    cache.store(KEY, 4, rows(4, 1))
    assert cache.lookup(KEY, 0) is not None
    now[0] = 1001.0  # the run is as old as its oldest rows
    assert cache.lookup(KEY, 4) is None
    assert cache.batch_count == 0
