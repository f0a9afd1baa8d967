"""The diskless append buffer (sans-io): an object is due after diskless.append.commit.interval.ms
since the oldest buffered request or at diskless.append.buffer.max.bytes, one object's worth at a time."""

from __future__ import annotations

import pytest

from oncestream.cluster.diskless.append_buffer import AppendBuffer
from oncestream.errors import InvalidConfigError


class Clock:
    def __init__(self) -> None:
        self.now_ms = 1_000.0

    def __call__(self) -> float:
        return self.now_ms


def test_empty_buffer_is_never_due():
    buffer: AppendBuffer[str] = AppendBuffer(Clock())
    assert buffer.ms_until_due() is None
    assert not buffer.flush_due()
    with pytest.raises(ValueError, match="empty"):
        buffer.take()


def test_due_after_the_interval_since_the_first_request_not_the_last():
    clock = Clock()
    buffer: AppendBuffer[str] = AppendBuffer(clock, commit_interval_ms=250, max_bytes=1000)
    buffer.add("a", 10)
    clock.now_ms += 200
    buffer.add("b", 10)
    assert buffer.ms_until_due() == 50
    assert not buffer.flush_due()
    clock.now_ms += 50
    assert buffer.flush_due()
    assert buffer.take() == ["a", "b"]
    assert len(buffer) == 0
    assert buffer.size_bytes == 0


def test_due_at_once_when_the_bytes_reach_the_bound():
    clock = Clock()
    buffer: AppendBuffer[str] = AppendBuffer(clock, commit_interval_ms=250, max_bytes=100)
    buffer.add("a", 60)
    assert not buffer.flush_due()
    buffer.add("b", 40)
    assert buffer.flush_due()


def test_take_hands_out_one_object_worth_and_the_rest_keeps_its_arrival_time():
    clock = Clock()
    buffer: AppendBuffer[str] = AppendBuffer(clock, commit_interval_ms=250, max_bytes=100)
    buffer.add("a", 60)
    clock.now_ms += 100
    buffer.add("b", 60)
    buffer.add("c", 30)
    clock.now_ms += 100
    assert buffer.take() == ["a"]  # a + b would exceed the bound
    assert buffer.size_bytes == 90
    # b arrived 100 ms after a: due 150 ms from now, not a fresh 250.
    assert buffer.ms_until_due() == 150
    assert buffer.take() == ["b", "c"]


def test_a_request_above_the_bound_still_goes_out_alone():
    buffer: AppendBuffer[str] = AppendBuffer(Clock(), max_bytes=10)
    buffer.add("huge", 50)
    buffer.add("small", 1)
    assert buffer.flush_due()
    assert buffer.take() == ["huge"]
    assert buffer.take() == ["small"]


def test_take_all_empties_the_buffer_for_shutdown():
    buffer: AppendBuffer[int] = AppendBuffer(Clock())
    for i in range(3):
        buffer.add(i, 5)
    assert buffer.take_all() == [0, 1, 2]
    assert buffer.ms_until_due() is None


@pytest.mark.parametrize(("interval_ms", "max_bytes"), [(-1, 10), (250, 0)])
def test_bad_bounds_are_config_errors(interval_ms, max_bytes):
    with pytest.raises(InvalidConfigError):
        AppendBuffer(Clock(), commit_interval_ms=interval_ms, max_bytes=max_bytes)
