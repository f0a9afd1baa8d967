"""The broker-wide request memory pool (``queued.max.request.bytes``, Kafka's MemoryPool idea):
reserve before reading a body, release after the response; frames of at most 1 MiB are always
admitted; the accounting never goes negative."""

from __future__ import annotations

import pytest

from oncestream.broker.memory_pool import (
    ALWAYS_ADMITTED_BYTES,
    PoolAccountingError,
    RequestMemoryPool,
)
from oncestream.errors import InvalidConfigError

MIB = 1024 * 1024


def test_reserve_and_release_within_capacity() -> None:
    pool = RequestMemoryPool(10 * MIB)
    assert pool.try_reserve(4 * MIB)
    assert pool.try_reserve(6 * MIB)
    assert (pool.reserved_bytes, pool.available_bytes) == (10 * MIB, 0)
    pool.release(4 * MIB)
    assert pool.available_bytes == 4 * MIB
    pool.release(6 * MIB)
    assert (pool.reserved_bytes, pool.available_bytes) == (0, 10 * MIB)


def test_a_large_frame_that_does_not_fit_is_refused_and_reserves_nothing() -> None:
    pool = RequestMemoryPool(5 * MIB)
    assert pool.try_reserve(3 * MIB)
    assert not pool.try_reserve(3 * MIB)
    assert (pool.reserved_bytes, pool.refused_count) == (3 * MIB, 1)
    pool.release(3 * MIB)
    assert pool.try_reserve(3 * MIB), "fits again once the first reservation is given back"


def test_frames_up_to_one_mebibyte_are_always_admitted_and_counted() -> None:
    pool = RequestMemoryPool(2 * MIB)
    assert pool.try_reserve(2 * MIB)  # the pool is full
    assert pool.try_reserve(ALWAYS_ADMITTED_BYTES)
    assert pool.try_reserve(10)
    assert pool.reserved_bytes == 3 * MIB + 10
    assert pool.available_bytes == 0, "never negative, even past capacity"
    assert not pool.try_reserve(ALWAYS_ADMITTED_BYTES + 1)
    pool.release(ALWAYS_ADMITTED_BYTES)
    pool.release(10)
    pool.release(2 * MIB)
    assert pool.reserved_bytes == 0


def test_releasing_more_than_reserved_is_a_bookkeeping_error() -> None:
    pool = RequestMemoryPool(MIB)
    pool.try_reserve(100)
    with pytest.raises(PoolAccountingError):
        pool.release(101)
    with pytest.raises(PoolAccountingError):
        pool.release(-1)
    with pytest.raises(PoolAccountingError):
        pool.try_reserve(-1)
    assert pool.reserved_bytes == 100


def test_minus_one_is_unbounded_and_zero_is_refused() -> None:
    pool = RequestMemoryPool(-1)
    assert pool.try_reserve(2**40)
    pool.release(2**40)
    with pytest.raises(InvalidConfigError):
        RequestMemoryPool(0)
