"""Bounded waits that never lose a cancellation, for the loops that a shutdown cancels.

On Python 3.11, ``asyncio.wait_for(inner, timeout)`` swallows a cancellation that arrives once
``inner`` has finished but before the waiting task resumed: it returns ``inner``'s result instead
of raising ``CancelledError`` (CPython gh-86296, fixed in 3.12 by rewriting ``wait_for`` on top of
``asyncio.timeout``). A loop that waits that way (a timer woken by an event, a long poll woken by
an append) then goes round again, and a shutdown awaiting it waits forever. These helpers wait
with ``asyncio.timeout``, which re-raises any cancellation it did not cause itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any


async def wait_event(event: asyncio.Event, timeout_s: float) -> bool:
    """Wait until ``event`` is set or ``timeout_s`` passes; True if it is set. A cancellation of
    the waiting task always propagates, whatever the event did meanwhile."""
    if event.is_set():
        return True
    try:
        async with asyncio.timeout(max(timeout_s, 0.0)):
            await event.wait()
    except TimeoutError:
        return event.is_set()
    return True


async def wait_done(future: asyncio.Future[Any], timeout_s: float) -> bool:
    """Wait until ``future`` is done or ``timeout_s`` passes, without cancelling it; True if it
    is done. A cancellation of the waiting task always propagates."""
    if future.done():
        return True
    try:
        async with asyncio.timeout(max(timeout_s, 0.0)):
            await asyncio.shield(future)
    except TimeoutError:
        return future.done()
    return True


async def run_deadline_timer(next_deadline_ms: Callable[[], int | None], mono_ms: Callable[[], int],
                             wake: asyncio.Event, tick: Callable[[], None], max_sleep_s: float,
                             log: logging.Logger, what: str) -> None:
    """A coordinator's timer task: sleep until its next deadline (at most ``max_sleep_s``, woken
    early through ``wake`` when a call created a sooner one), then ``tick``. An exception of one
    tick is logged and the loop goes on: one bad group must not stop every timer."""
    while True:
        deadline = next_deadline_ms()
        sleep_s = max_sleep_s
        if deadline is not None:
            sleep_s = max(0.0, min((deadline - mono_ms()) / 1000, max_sleep_s))
        wake.clear()
        await wait_event(wake, sleep_s)
        try:
            tick()
        except Exception:
            log.exception("%s tick failed", what)
