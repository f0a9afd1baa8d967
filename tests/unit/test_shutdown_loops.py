"""Loops that a shutdown cancels must never lose the cancellation (issue 19, point 6).

On Python 3.11 ``asyncio.wait_for`` returns the inner wait's result when a cancellation arrives
after the inner wait finished but before the waiting task resumed (CPython gh-86296): a timer loop
woken at that moment goes round again and the shutdown awaiting it never ends. Each test wakes
the loop and cancels it after 0..N loop iterations, so one of the cancellations lands in that
window whatever the exact number of steps ``wait_for`` needs; with ``wait_for`` these tests fail
on 3.11, with ``async_wait`` every cancellation ends the loop.
"""

from __future__ import annotations

import asyncio
import signal
import threading

import pytest

from oncestream.async_wait import wait_done, wait_event
from oncestream.process_shutdown import (
    DEFAULT_SHUTDOWN_TIMEOUT_MS,
    FORCED_EXIT_CODE,
    ShutdownBound,
    shutdown_timeout_ms,
)

# Generous: a cancelled loop ends within a few loop iterations; the bound only stops a lost
# cancellation from hanging the suite (the loops below would otherwise wait for 60 s).
END_WAIT_S = 5.0
LOOP_SLEEP_S = 60.0
RACE_WINDOWS = range(8)


async def _cancel_and_expect_end(task: asyncio.Task[None], yields: int) -> None:
    for _ in range(yields):
        await asyncio.sleep(0)
    task.cancel()
    done, _pending = await asyncio.wait({task}, timeout=END_WAIT_S)
    assert task in done, f"the cancellation after {yields} loop iteration(s) was lost: the loop went on"
    assert task.cancelled()


@pytest.mark.parametrize("yields", RACE_WINDOWS)
def test_an_event_timer_loop_ends_when_cancelled_as_it_is_woken(yields: int) -> None:
    async def timer_loop(wake: asyncio.Event) -> None:
        while True:
            wake.clear()
            await wait_event(wake, LOOP_SLEEP_S)

    async def main() -> None:
        wake = asyncio.Event()
        task = asyncio.create_task(timer_loop(wake))
        await asyncio.sleep(0)  # the loop is waiting
        wake.set()
        await _cancel_and_expect_end(task, yields)

    asyncio.run(main())


@pytest.mark.parametrize("yields", RACE_WINDOWS)
def test_a_long_poll_loop_ends_when_cancelled_as_its_waiter_resolves(yields: int) -> None:
    """The fetch long poll: wait for an append's future, read, wait again."""
    waiters: list[asyncio.Future[None]] = []

    async def long_poll() -> None:
        while True:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            waiters.append(waiter)
            await wait_done(waiter, LOOP_SLEEP_S)

    async def main() -> None:
        task = asyncio.create_task(long_poll())
        await asyncio.sleep(0)
        waiters[-1].set_result(None)  # an append wakes the poll
        await _cancel_and_expect_end(task, yields)

    asyncio.run(main())


@pytest.mark.parametrize("yields", RACE_WINDOWS)
def test_the_group_timer_task_ends_when_cancelled_as_a_call_wakes_it(tmp_path, yields: int) -> None:
    """The broker's group timer loop itself (``GroupService.run_timers``), woken by a call."""
    from oncestream.broker.group_service import GroupService
    from oncestream.log.config import LogConfig
    from oncestream.log.manager import LogManager

    logs = LogManager.open(tmp_path, LogConfig(), 0)

    async def main() -> None:
        service = GroupService(logs, {"offsets.topic.num.partitions": "1"}, lambda: 0, lambda: 0)
        task = asyncio.create_task(service.run_timers())
        await asyncio.sleep(0)
        service.complete([])  # a group call finished: it wakes the timers
        await _cancel_and_expect_end(task, yields)

    try:
        asyncio.run(main())
    finally:
        logs.close()


def test_wait_event_and_wait_done_report_a_timeout() -> None:
    async def main() -> tuple[bool, bool, bool]:
        event = asyncio.Event()
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        timed_out_event = await wait_event(event, 0.01)
        timed_out_future = await wait_done(future, 0.01)
        event.set()
        return timed_out_event, timed_out_future, await wait_event(event, 0.01) and not future.cancelled()

    assert asyncio.run(main()) == (False, False, True)


# -- the process bound (process_shutdown) ----------------------------------------------------------
class _ExitRecorder:
    """Stands in for ``os._exit``: records the status and wakes the test."""

    def __init__(self) -> None:
        self.codes: list[int] = []
        self.called = threading.Event()

    def __call__(self, code: int) -> None:
        self.codes.append(code)
        self.called.set()


def test_a_stop_that_runs_past_the_bound_exits_with_the_forced_status() -> None:
    exits = _ExitRecorder()
    bound = ShutdownBound(50, "test process", exit_now=exits)
    bound.begin()
    bound.begin()  # idempotent: one clock
    assert exits.called.wait(END_WAIT_S)
    assert exits.codes == [FORCED_EXIT_CODE]


def test_a_stop_that_finished_leaves_with_status_zero_if_a_thread_still_holds_the_process() -> None:
    exits = _ExitRecorder()
    bound = ShutdownBound(50, "test process", exit_now=exits)
    bound.begin()
    bound.finished()
    assert exits.called.wait(END_WAIT_S)
    assert exits.codes == [0]


def test_a_second_signal_exits_at_once() -> None:
    exits = _ExitRecorder()
    bound = ShutdownBound(3_600_000, "test process", exit_now=exits)
    bound.begin()
    bound.on_second_signal(signal.SIGTERM, None)
    assert exits.codes == [FORCED_EXIT_CODE]


@pytest.mark.parametrize("text", ["0", "-5", "soon"])
def test_the_shutdown_timeout_must_be_a_positive_number(text: str) -> None:
    with pytest.raises(ValueError, match=r"oncestream\.shutdown\.timeout\.ms"):
        shutdown_timeout_ms({"oncestream.shutdown.timeout.ms": text})
    assert shutdown_timeout_ms({}) == DEFAULT_SHUTDOWN_TIMEOUT_MS
