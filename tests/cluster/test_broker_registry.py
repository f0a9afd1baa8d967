"""BrokerRegistry (cluster/pg/brokers.py) against a real PostgreSQL: leases judged by PostgreSQL's
clock, a broker paused past its lease refused when it heartbeats, takeover of expired node ids.

Pauses are real sleeps past short session timeouts (PostgreSQL's clock cannot be injected)."""

from __future__ import annotations

import asyncio
import time

import pytest

from oncestream.cluster.pg.brokers import BrokerRegistry, check_registration_alive
from oncestream.cluster.pg.errors import BrokerFencedError, NodeIdInUseError
from oncestream.cluster.pg.store import MetadataStore

SESSION_MS = 2_500  # a stall of the loaded machine between two heartbeats must stay below it


async def _registry(url: str) -> BrokerRegistry:
    return BrokerRegistry(await MetadataStore.open(url))


async def _live_ids(registry: BrokerRegistry) -> list[int]:
    return [b.node_id for b in await registry.live_brokers()]


def test_register_lists_live_brokers_and_refuses_a_live_node_id(pg_database):
    async def main() -> None:
        registry = await _registry(pg_database)
        try:
            one = await registry.register(1, "h1", 9092, "rack-a", 30_000,
                                          listeners=[{"name": "PLAINTEXT", "host": "h1", "port": 9092}])
            await registry.register(2, "h2", 9093, None, 30_000)
            brokers = await registry.live_brokers()
            assert [(b.node_id, b.host, b.port, b.rack) for b in brokers] == [(1, "h1", 9092, "rack-a"),
                                                                               (2, "h2", 9093, None)]
            assert brokers[0].listeners == ({"name": "PLAINTEXT", "host": "h1", "port": 9092},)
            assert brokers[0].incarnation == one.incarnation
            with pytest.raises(NodeIdInUseError, match="node id 1 is held by a live broker at h1:9092"):
                await registry.register(1, "elsewhere", 9999, None, 30_000)
            assert [b.host for b in await registry.live_brokers()] == ["h1", "h2"]  # untouched
            # Brokers racing for one free node id: exactly one gets it.
            raced = await asyncio.gather(*(registry.register(7, f"r{i}", 9092, None, 30_000) for i in range(4)),
                                         return_exceptions=True)
            winners = [r for r in raced if not isinstance(r, BaseException)]
            assert len(winners) == 1
            assert all(isinstance(r, NodeIdInUseError) for r in raced if isinstance(r, BaseException))
        finally:
            await registry.store.close()

    asyncio.run(main())


def test_heartbeats_keep_a_lease_and_a_broker_paused_past_it_is_fenced(pg_database):
    async def main() -> None:
        registry = await _registry(pg_database)
        try:
            reg = await registry.register(1, "h1", 9092, None, SESSION_MS)
            # Heartbeats for 1.5 sessions keep the broker live throughout.
            end = time.monotonic() + 1.5 * SESSION_MS / 1000
            while time.monotonic() < end:
                await registry.heartbeat(reg)
                assert await _live_ids(registry) == [1]
                await asyncio.sleep(0.2)
            # Paused past its lease: it leaves the live set by PostgreSQL's clock ...
            await asyncio.sleep(SESSION_MS / 1000 + 0.5)
            assert await _live_ids(registry) == []
            # ... and when it wakes up, it cannot extend the lease though nobody took its id.
            with pytest.raises(BrokerFencedError, match="lease expired"):
                await registry.heartbeat(reg)
            assert await _live_ids(registry) == []
            async with registry.store.transaction() as conn:
                with pytest.raises(BrokerFencedError):
                    await check_registration_alive(conn, reg)
            # It must register again: a new incarnation and a higher broker epoch.
            again = await registry.register(1, "h1", 9092, None, SESSION_MS)
            assert again.incarnation != reg.incarnation
            assert again.broker_epoch == reg.broker_epoch + 1
            async with registry.store.transaction() as conn:
                await check_registration_alive(conn, again)
        finally:
            await registry.store.close()

    asyncio.run(main())


def test_an_expired_node_id_is_taken_over_and_the_old_incarnation_fenced(pg_database):
    async def main() -> None:
        registry = await _registry(pg_database)
        try:
            old = await registry.register(3, "old", 9092, None, SESSION_MS)  # then SIGKILLed: no heartbeats
            started = time.monotonic()
            new = await registry.register(3, "new", 9093, None, 30_000, takeover_wait_ms=30_000)
            assert time.monotonic() - started > 0.5  # it waited for the old lease to run out
            assert new.broker_epoch == old.broker_epoch + 1
            assert [(b.node_id, b.host) for b in await registry.live_brokers()] == [(3, "new")]
            with pytest.raises(BrokerFencedError, match="another incarnation"):
                await registry.heartbeat(old)
            await registry.heartbeat(new)
        finally:
            await registry.store.close()

    asyncio.run(main())


def test_deregister_ends_the_lease_at_once(pg_database):
    async def main() -> None:
        registry = await _registry(pg_database)
        try:
            reg = await registry.register(5, "h5", 9092, None, 60_000)
            await registry.deregister(reg)
            assert await _live_ids(registry) == []
            with pytest.raises(BrokerFencedError):
                await registry.heartbeat(reg)
            # The node id is free at once (no waiting for the 60 s session).
            await registry.register(6, "h6", 9092, None, 60_000)
            rows = await registry.all_registrations()
            assert [(r.broker.node_id, r.live) for r in rows] == [(5, False), (6, True)]
            assert rows[0].lease_remaining_ms <= 0 < rows[1].lease_remaining_ms <= 60_000
            again = await registry.register(5, "h5", 9092, None, 60_000)
            assert again.broker_epoch == reg.broker_epoch + 1
        finally:
            await registry.store.close()

    asyncio.run(main())
