"""Producer ids from PostgreSQL: unique across allocators and restarts."""

from __future__ import annotations

import asyncio

import pytest

from oncestream.cluster.leases.producer_id_blocks import PgProducerIdService, take_block
from oncestream.errors import CoordinatorNotAvailableError
from tests.cluster.lease_support import prepare


def test_producer_ids_are_unique_across_two_allocators_and_a_restart(pg_database):
    async def main() -> None:
        store = await prepare(pg_database)
        first, second = PgProducerIdService(store, block_size=10), PgProducerIdService(store, block_size=10)
        ids: list[int] = []

        async def take(service: PgProducerIdService, count: int) -> None:
            for _ in range(count):
                await service.ready()
                ids.append(service.next_id())
                await asyncio.sleep(0)  # let the other allocator and the prefetch run

        await asyncio.gather(take(first, 35), take(second, 35))
        restarted = PgProducerIdService(store, block_size=10)  # a broker restarted: new blocks
        await take(restarted, 5)
        assert len(ids) == len(set(ids)) == 75
        assert min(ids[-5:]) > max(ids[:-5])  # the restart skips what the others reserved

    asyncio.run(main())


def test_concurrent_block_reservations_never_overlap(pg_database):
    async def main() -> list[range]:
        store = await prepare(pg_database)
        return list(await asyncio.gather(*(take_block(store, 100) for _ in range(8))))

    blocks = asyncio.run(main())
    taken = [pid for block in blocks for pid in block]
    assert len(taken) == len(set(taken)) == 800


def test_next_id_without_a_block_is_a_retriable_error(pg_database):
    async def main() -> None:
        store = await prepare(pg_database)
        service = PgProducerIdService(store, block_size=2)
        with pytest.raises(CoordinatorNotAvailableError):
            service.next_id()
        await service.ready()
        assert service.next_id() == 0

    asyncio.run(main())
