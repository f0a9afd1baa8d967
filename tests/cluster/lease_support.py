"""Helpers of the lease tests: the real MetadataStore and BrokerRegistry (cluster/pg) around a
test body, and broker registrations by node id."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from oncestream.cluster.pg.brokers import BrokerRegistry, Registration
from oncestream.cluster.pg.errors import BrokerFencedError
from oncestream.cluster.pg.store import MetadataStore


def run_cluster(url: str, body: Callable[[MetadataStore], Awaitable[None]]) -> None:
    """Open the store on ``url`` (applying the schema), run ``body``, close the store."""

    async def main() -> None:
        store = await MetadataStore.open(url)
        try:
            await body(store)
        finally:
            await store.close()

    asyncio.run(main())


async def register(store: MetadataStore, node_id: int, session_timeout_ms: int) -> Registration:
    """Register broker ``node_id`` (a new incarnation) with a lease ``session_timeout_ms`` long."""
    return await BrokerRegistry(store).register(node_id, "127.0.0.1", 9092 + node_id, None, session_timeout_ms)


async def heartbeat(store: MetadataStore, reg: Registration) -> bool:
    """Extend ``reg``'s lease; False if it had expired (by PostgreSQL's clock)."""
    try:
        await BrokerRegistry(store).heartbeat(reg)
    except BrokerFencedError:
        return False
    return True


async def lease_alive(store: MetadataStore, reg: Registration) -> bool:
    """Whether ``reg``'s broker lease holds now by PostgreSQL's clock."""
    return reg.node_id in {b.node_id for b in await BrokerRegistry(store).live_brokers()}


async def expire(store: MetadataStore, node_id: int) -> None:
    """The broker died: its lease ends now by PostgreSQL's clock (what its silence leads to)."""
    async with store.transaction() as conn:
        await conn.execute("UPDATE brokers SET lease_expires_at = clock_timestamp() WHERE node_id = %s", (node_id,))
