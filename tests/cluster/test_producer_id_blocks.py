"""Producer ids from PostgreSQL: unique across allocators and restarts."""

from __future__ import annotations

import asyncio

import pytest

from oncestream.cluster.leases.producer_id_blocks import PgProducerIdService, take_block
from oncestream.cluster.pg.store import MetadataStore
from oncestream.errors import CoordinatorNotAvailableError
from tests.cluster.lease_support import run_cluster


def test_producer_ids_are_unique_across_two_allocators_and_a_restart(pg_database):
    async def main(store: MetadataStore) -> None:
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

    run_cluster(pg_database, main)


def test_concurrent_block_reservations_never_overlap(pg_database):
    blocks: list[range] = []

    async def main(store: MetadataStore) -> None:
        blocks.extend(await asyncio.gather(*(take_block(store, 100) for _ in range(8))))

    run_cluster(pg_database, main)
    taken = [pid for block in blocks for pid in block]
    assert len(taken) == len(set(taken)) == 800


def test_next_id_without_a_block_is_a_retriable_error(pg_database):
    async def main(store: MetadataStore) -> None:
        service = PgProducerIdService(store, block_size=2)
        with pytest.raises(CoordinatorNotAvailableError):
            service.next_id()
        await service.ready()
        assert service.next_id() == 0

    run_cluster(pg_database, main)
