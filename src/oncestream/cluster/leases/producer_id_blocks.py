"""Producer ids of cluster mode: blocks taken from PostgreSQL, never the same id twice.

Like the single broker (coordinator/producer_ids.py, broker/producer_id_service.py) ids are handed
out from blocks, but a block comes from the one ``producer_id_allocation`` row
(leases_schema.py): ``next_id`` moves forward by the block size in a committed transaction, so
two brokers, or one broker before and after a restart, never get overlapping blocks. Ids of a
block a broker did not use before it stopped are skipped, never reused (KIP-98).

``PgProducerIdService`` has ProducerIdService's interface: callers await ``ready()`` before the
synchronous ``next_id()``; the next block is fetched early, when a tenth of the current one is
left. ``next_id`` without an id available (a timer that did not await ``ready``) raises the
retriable COORDINATOR_NOT_AVAILABLE rather than block the event loop on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import logging

from oncestream.cluster.leases.coordinator_leases import TransactionSource
from oncestream.coordinator.producer_ids import BLOCK_SIZE
from oncestream.errors import CoordinatorInvariantError, CoordinatorNotAvailableError

log = logging.getLogger(__name__)


async def take_block(store: TransactionSource, size: int) -> range:
    """Reserve ``size`` producer ids for the caller alone, in one transaction."""
    if size <= 0:
        raise CoordinatorInvariantError(f"the producer id block size must be positive, got {size}")
    async with store.transaction() as conn:
        cursor = await conn.execute(
            "UPDATE producer_id_allocation SET next_id = next_id + %s RETURNING next_id", (size,))
        row = await cursor.fetchone()
    if row is None:
        raise CoordinatorInvariantError("producer_id_allocation has no row (schema step 0201 not applied?)")
    end = int(row[0])
    return range(end - size, end)


class PgProducerIdService:
    """Producer ids from blocks reserved in PostgreSQL (see module docstring)."""

    def __init__(self, store: TransactionSource, block_size: int = BLOCK_SIZE) -> None:
        self._store = store
        self.block_size = block_size
        self._next_id = 0
        self._end = 0
        self._following: range | None = None  # a prefetched block not started yet
        self._fetching: asyncio.Task[range] | None = None

    @property
    def available(self) -> int:
        """Ids that may be handed out now without waiting for PostgreSQL."""
        return self._end - self._next_id + (len(self._following) if self._following is not None else 0)

    async def ready(self) -> None:
        """Return once an id is available (MetadataStore errors propagate: the request fails
        with a retriable error and the next one tries again)."""
        while self.available == 0:
            # Shielded: a cancelled waiter must not cancel the fetch every other waiter shares.
            await asyncio.shield(self._fetch())

    def next_id(self) -> int:
        """The next producer id of a reserved block; prefetches the next block early."""
        if self._next_id >= self._end and self._following is not None:
            self._next_id, self._end = self._following.start, self._following.stop
            self._following = None
        if self._next_id >= self._end:
            raise CoordinatorNotAvailableError("no producer id block reserved yet: retry")
        producer_id = self._next_id
        self._next_id += 1
        if self._following is None and self._fetching is None and self.available <= max(1, self.block_size // 10):
            try:
                self._fetch()
            except RuntimeError as exc:  # no running loop: the next ready() fetches
                log.debug("producer id block not prefetched: %s", exc)
        return producer_id

    def _fetch(self) -> asyncio.Task[range]:
        if self._fetching is None:
            task = asyncio.get_running_loop().create_task(take_block(self._store, self.block_size))
            self._fetching = task
            task.add_done_callback(self._settle)
        return self._fetching

    def _settle(self, task: asyncio.Task[range]) -> None:
        if self._fetching is task:
            self._fetching = None
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            log.error("producer id block reservation failed: %s", error)
            return
        block = task.result()
        if self._next_id >= self._end:
            self._next_id, self._end = block.start, block.stop
        else:
            self._following = block
