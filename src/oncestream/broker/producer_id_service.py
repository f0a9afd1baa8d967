"""Producer id blocks reserved on the broker's disk threads, never on the event loop.

``coordinator/producer_ids`` decides (sans-io) which ids may be handed out: only those below a
block end that is durable. This module runs its ``BlockReservation`` (a small file, two fsyncs)
on ``BrokerState.disk_executor``: requests that need an id while no durable one is left await
the reservation (``ready``) while the loop keeps answering everybody else; the next block is
asked for early, when a tenth of the current one is left, so most requests never wait.

The coordinators take ids synchronously (``next_id``, their ``allocate_producer_id``). Callers
that may need one await ``ready()`` first, and nothing else runs between that and their
synchronous coordinator call, so ``next_id`` finds an id. Only a caller that did not (a timer
aborting many transactions whose epochs are exhausted at once) may find none; it then waits for
the reservation in flight and reserves on the loop, logged, rather than hand out an id that is
not durable (KIP-98: an id never names two producers, restarts included).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable
from typing import Protocol

from oncestream.coordinator.producer_ids import BlockReservation, ProducerIdManager
from oncestream.errors import CoordinatorInvariantError

log = logging.getLogger(__name__)


class ProducerIdSource(Protocol):
    """What the coordinators and InitProducerId need: ``await ready()`` then ``next_id()``. This
    module's service (a file of blocks), or in cluster mode blocks taken from PostgreSQL
    (cluster/leases/producer_id_blocks.PgProducerIdService)."""

    async def ready(self) -> None:
        """Return once ``next_id`` has an id to hand out."""
        ...

    def next_id(self) -> int:
        """A producer id never handed out before."""
        ...


class ProducerIdService:
    """A ``ProducerIdManager`` whose block writes run on ``executor`` (with ``fsync``)."""

    def __init__(self, manager: ProducerIdManager, executor: concurrent.futures.Executor,
                 fsync: Callable[[int], None] | None = None) -> None:
        self.manager = manager
        self._executor = executor
        self._fsync = fsync
        # The reservation in flight and its write (None when none is).
        self._running: tuple[BlockReservation, concurrent.futures.Future[None]] | None = None

    async def ready(self) -> None:
        """Return once at least one durable id is available (StorageError if the block cannot be
        written: the request fails, the next one tries again)."""
        while self.manager.available == 0:
            running = self._running if self.manager.reserving is not None else None
            if running is None:
                self._start()
                running = self._running
            if running is None:
                raise CoordinatorInvariantError("a producer id reservation started without its write")
            reservation, write = running
            try:
                # Shielded: a cancelled waiter (its connection went away) must not cancel the
                # write every other waiter shares.
                await asyncio.shield(asyncio.wrap_future(write))
            finally:
                self._settle(reservation, write)

    def next_id(self) -> int:
        """A producer id whose block is durable; starts the next block's reservation early."""
        producer_id = self.manager.take_id()
        if producer_id is None:
            producer_id = self._next_id_the_slow_way()
        if self.manager.reservation_due():
            try:
                self._start()
            except RuntimeError as exc:  # no running loop or executor shut down: reserve later
                log.debug("producer id block not prefetched: %s", exc)
        return producer_id

    def _start(self) -> None:
        reservation = self.manager.begin_reserve()
        try:
            write = self._executor.submit(reservation.run, self._fsync)
        except BaseException:
            self.manager.fail_reserve(reservation)
            raise
        self._running = (reservation, write)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # settled by whoever waits for it (``ready`` or the slow way)
        write.add_done_callback(lambda done: _call_soon(loop, self._settle, reservation, done))

    def _settle(self, reservation: BlockReservation, done: concurrent.futures.Future[None]) -> None:
        """On the loop once the write ended: its ids become available, or it is given up.
        Idempotent (the waiter and the write's callback may both get here)."""
        if self.manager.reserving is not reservation or not done.done():
            return
        if done.cancelled() or done.exception() is not None:
            self.manager.fail_reserve(reservation)
            log.error("producer id block reservation failed: %s", done.exception() if not done.cancelled() else "cancelled")
        else:
            self.manager.finish_reserve(reservation)

    def _next_id_the_slow_way(self) -> int:
        if self.manager.reserving is not None and self._running is not None:
            reservation, write = self._running
            log.warning("no durable producer id left: waiting on the event loop for the block being reserved")
            try:
                write.result()  # raises the write's StorageError, if any
            finally:
                self._settle(reservation, write)
        if self.manager.available == 0:
            log.warning("no durable producer id left: reserving a block on the event loop")
            reservation = self.manager.begin_reserve()
            try:
                reservation.run(self._fsync)
            except BaseException:
                self.manager.fail_reserve(reservation)
                raise
            self.manager.finish_reserve(reservation)
        producer_id = self.manager.take_id()
        if producer_id is None:
            raise CoordinatorInvariantError("a durable producer id block holds no id")
        return producer_id


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[..., None], *args: object) -> None:
    """From the disk thread: run ``callback`` on the loop, unless it is gone (broker stopped)."""
    try:
        loop.call_soon_threadsafe(callback, *args)
    except RuntimeError:  # the loop is closed: nobody is left to hand out ids
        log.debug("producer id reservation ended after the event loop closed")
