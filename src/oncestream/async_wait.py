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
