"""Leases of coordinator partitions against the real PostgreSQL: spread, takeover, handoff."""

from __future__ import annotations

import asyncio

import pytest

from oncestream.cluster.leases.coordinator_leases import (
    LEASES_CHANNEL,
    CoordinatorLeases,
    preferred_owner,
    resource_name,
)
from oncestream.cluster.pg.brokers import BrokerRegistry
from oncestream.cluster.pg.store import MetadataStore
from tests.cluster.lease_support import heartbeat, lease_alive, register, run_cluster

RESOURCES = [resource_name("__consumer_offsets", p) for p in range(12)]
LONG_MS = 600000


async def wait_expired(store: MetadataStore, reg) -> None:
    """Sleep until ``reg``'s broker lease has expired by PostgreSQL's clock (bounded)."""
    for _ in range(200):
        if not await lease_alive(store, reg):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the broker lease did not expire within 10 s")


def test_three_brokers_converge_on_the_rendezvous_assignment(pg_database):
    async def main(store: MetadataStore) -> None:
        leases = CoordinatorLeases(store)
        regs = [await register(store, node_id, LONG_MS) for node_id in (1, 2, 3)]
        # All three are live from the start, so each takes only the resources it prefers.
        for _ in range(3):
            rounds = await asyncio.gather(*(leases.acquire(reg, RESOURCES) for reg in regs))
            for reg, rnd in zip(regs, rounds, strict=True):
                if rnd.surplus:
                    await leases.release(reg, rnd.surplus)
        owners = await leases.owners(RESOURCES)
        assert sorted(owners) == sorted(RESOURCES)  # every resource owned
        for resource in RESOURCES:
            assert owners[resource] == preferred_owner(resource, [1, 2, 3])
        assert len(set(owners.values())) == 3  # spread over the three brokers
        final = await asyncio.gather(*(leases.acquire(reg, RESOURCES) for reg in regs))
        held = [set(rnd.held) for rnd in final]
        assert sum(len(h) for h in held) == len(RESOURCES)  # exactly one owner each
        assert all(not rnd.surplus for rnd in final)
        assert all(lease.epoch == 1 for rnd in final for lease in rnd.held.values())

    run_cluster(pg_database, main)


def test_a_joining_broker_gets_its_share_handed_off(pg_database):
    async def main(store: MetadataStore) -> None:
        leases = CoordinatorLeases(store)
        first = await register(store, 1, LONG_MS)
        alone = await leases.acquire(first, RESOURCES)
        assert set(alone.held) == set(RESOURCES)
        assert not alone.surplus
        second = await register(store, 2, LONG_MS)
        nothing = await leases.acquire(second, RESOURCES)
        assert nothing.held == {}  # everything is held by a live broker
        handoff = await leases.acquire(first, RESOURCES)
        expected = {r for r in RESOURCES if preferred_owner(r, [1, 2]) == 2}
        assert expected
        assert handoff.surplus == expected
        await leases.release(first, handoff.surplus)
        taken = await leases.acquire(second, RESOURCES)
        assert set(taken.held) == expected
        assert all(lease.epoch == 2 for lease in taken.held.values())  # a change of owner bumps it
        assert await leases.owner_of(sorted(expected)[0]) == 2

    run_cluster(pg_database, main)


def test_takeover_after_expiry_moves_ownership_and_bumps_the_epoch(pg_database):
    async def main(store: MetadataStore) -> None:
        leases = CoordinatorLeases(store)
        short = await register(store, 1, 500)
        before = await leases.acquire(short, RESOURCES)
        assert set(before.held) == set(RESOURCES)
        survivor = await register(store, 2, LONG_MS)
        assert (await leases.acquire(survivor, RESOURCES)).held == {}  # 1 is alive and holds them
        await wait_expired(store, short)
        assert await leases.owner_of(RESOURCES[0]) is None  # no live owner by PostgreSQL's clock
        after = await leases.acquire(survivor, RESOURCES)
        assert set(after.held) == set(RESOURCES)
        for resource in RESOURCES:
            assert after.held[resource].epoch == before.held[resource].epoch + 1
        assert await leases.owner_of(RESOURCES[0]) == 2
        # The former owner can neither extend its lease nor hold anything any more.
        assert not await heartbeat(store, short)
        assert (await leases.acquire(short, RESOURCES)).held == {}
        # A restart of node 1 is a new incarnation: it takes its preferred share back by handoff.
        restarted = await register(store, 1, LONG_MS)
        handoff = await leases.acquire(survivor, RESOURCES)
        await leases.release(survivor, handoff.surplus)
        back = await leases.acquire(restarted, RESOURCES)
        assert set(back.held) == handoff.surplus
        assert all(lease.epoch == before.held[r].epoch + 2 for r, lease in back.held.items())

    run_cluster(pg_database, main)


def test_a_deregistered_owners_leases_are_free_at_once(pg_database):
    async def main(store: MetadataStore) -> None:
        leases = CoordinatorLeases(store)
        leaving = await register(store, 1, LONG_MS)
        staying = await register(store, 2, LONG_MS)
        for reg in (leaving, staying, leaving):
            rnd = await leases.acquire(reg, RESOURCES)
            await leases.release(reg, rnd.surplus)
        await leases.acquire(staying, RESOURCES)
        await BrokerRegistry(store).deregister(leaving)  # SIGTERM
        taken = await leases.acquire(staying, RESOURCES)
        assert set(taken.held) == set(RESOURCES)

    run_cluster(pg_database, main)


@pytest.mark.parametrize("size", [1, 3])
def test_concurrent_rounds_never_give_a_resource_two_owners(pg_database, size):
    async def main(store: MetadataStore) -> None:
        leases = CoordinatorLeases(store)
        regs = [await register(store, node_id, LONG_MS) for node_id in range(1, size + 1)]
        for _ in range(4):
            rounds = await asyncio.gather(*(leases.acquire(reg, RESOURCES) for reg in regs * 2))
            seen: dict[str, int] = {}
            for reg, rnd in zip(regs * 2, rounds, strict=True):
                for resource in rnd.held:
                    assert seen.setdefault(resource, reg.node_id) == reg.node_id
            for reg, rnd in zip(regs, rounds, strict=False):
                await leases.release(reg, rnd.surplus)

    run_cluster(pg_database, main)


def test_the_keeper_answers_find_coordinator_from_its_last_round(pg_database):
    async def main(store: MetadataStore) -> None:
        from oncestream.cluster.leases.lease_keeper import LeaseKeeper

        class Partitions:
            topic_name = "__consumer_offsets"
            num_partitions = 12

            def __init__(self) -> None:
                self.loaded: set[int] = set()

            async def load_partition(self, partition, lease) -> None:
                self.loaded.add(partition)

            def unload_partition(self, partition) -> None:
                self.loaded.discard(partition)

        leases = CoordinatorLeases(store)
        regs = [await register(store, node_id, LONG_MS) for node_id in (1, 2)]
        parts = [Partitions(), Partitions()]
        keepers = [LeaseKeeper(leases, reg, [p], interval_ms=100, session_timeout_ms=LONG_MS)
                   for reg, p in zip(regs, parts, strict=True)]
        assert keepers[0].coordinator_node("__consumer_offsets", 0) is None  # no round yet: unknown
        for _ in range(2):
            for keeper in keepers:
                await keeper.run_round()
        assert parts[0].loaded | parts[1].loaded == set(range(12))
        assert not parts[0].loaded & parts[1].loaded
        for partition in range(12):
            answer = {keeper.coordinator_node("__consumer_offsets", partition) for keeper in keepers}
            assert answer == {1 if partition in parts[0].loaded else 2}  # both brokers agree
        await keepers[0].stop()  # SIGTERM: unload, release
        assert parts[0].loaded == set()
        await BrokerRegistry(store).deregister(regs[0])  # then deregister
        listener = store.listen(LEASES_CHANNEL)
        woken = asyncio.get_running_loop().create_task(anext(listener))
        async with asyncio.timeout(10):
            while not woken.done():  # announced until the listener (connecting meanwhile) hears it
                await leases.announce()  # and tell the others
                await asyncio.wait({woken}, timeout=0.1)
        assert woken.result() == ""  # what wakes the other keepers (keeper.wake) in the broker
        await listener.aclose()
        await keepers[1].run_round()
        assert parts[1].loaded == set(range(12))

    run_cluster(pg_database, main)
