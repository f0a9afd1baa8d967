"""One way to run a prepared piece of disk work off the event loop and finish it on the loop.

Topic creation, topic deletion, a topic's config change and DeleteRecords' checkpoint all follow
the same three steps (the log stays sans-io; the broker picks the threads): the log prepares the
step on the loop, its ``run`` (the writes and fsyncs) goes to ``BrokerState.disk_executor``, and the
log finishes it on the loop, or aborts it if ``run`` failed. The one subtle case lives here once:
when the waiting request is cancelled (its connection went away, the broker is stopping), the
disk work is already under way and cannot be taken back, so it is finished (or aborted) when it
ends instead of being left half done.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TypeVar

from oncestream.broker.state import BrokerState
from oncestream.errors import OnceStreamError

log = logging.getLogger(__name__)

T = TypeVar("T")


async def run_disk_step(state: BrokerState, run: Callable[[], None], finish: Callable[[], T],
                        abort: Callable[[], None], what: str) -> T:
    """Run ``run`` on the disk threads, then return ``finish()`` (on the loop); ``abort()`` and
    re-raise if ``run`` failed. ``what`` names the step in the log line of a late failure."""
    running = asyncio.get_running_loop().run_in_executor(state.disk_executor, run)
    try:
        await asyncio.shield(running)
    except asyncio.CancelledError:
        running.add_done_callback(lambda done: _settle_later(done, finish, abort, what))
        raise
    except BaseException:
        abort()
        raise
    return finish()


def _settle_later(done: asyncio.Future[None], finish: Callable[[], object], abort: Callable[[], None],
                  what: str) -> None:
    if done.cancelled() or done.exception() is not None:
        abort()
        return
    try:
        finish()
    except OnceStreamError as exc:
        log.warning("%s not finished after its request went away: %s", what, exc)
