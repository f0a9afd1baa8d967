"""ClusterCoordinators as a broker runs them: two brokers split the coordinator partitions, agree
on FindCoordinator, and a SIGTERM hands everything to the survivor at once (by the announcement,
not the round interval)."""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from oncestream.broker.cluster_coordinators import GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE, ClusterCoordinators
from oncestream.cluster.leases.producer_id_blocks import PgProducerIdService
from oncestream.cluster.pg.brokers import BrokerRegistry
from oncestream.cluster.pg.store import MetadataStore
from oncestream.coordinator.group.messages import OffsetCommitRequest, OffsetFetchRequest, PartitionOffsetCommit
from tests.cluster.lease_support import register, run_cluster
from tests.cluster.test_cluster_coordinators import LONG_MS, PROPS, TP, RecordingMarkers, now_ms

ROUND_MS = 60000  # longer than any wait below: a takeover seen here came from the announcement


async def open_coordinators(store: MetadataStore) -> ClusterCoordinators:
    return await ClusterCoordinators.open(
        store, PROPS, now_ms, now_ms, producer_ids=PgProducerIdService(store), markers=RecordingMarkers(store),
        topics=dict, interval_ms=ROUND_MS, session_timeout_ms=LONG_MS)


async def loaded(coordinators: ClusterCoordinators) -> int:
    keeper = coordinators.keeper
    return 0 if keeper is None else len(keeper.loaded)


async def wait_for(condition, what: str) -> None:
    for _ in range(500):  # polling a condition of two brokers' tasks, bounded at 10 s
        if await condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{what} did not happen within 10 s")


def test_two_brokers_split_the_partitions_and_a_sigterm_hands_off_at_once(pg_database):
    async def main(store: MetadataStore) -> None:
        registry = BrokerRegistry(store)
        regs = [await register(store, 1, LONG_MS), await register(store, 2, LONG_MS)]
        brokers = [await open_coordinators(store), await open_coordinators(store)]
        tasks = [asyncio.get_running_loop().create_task(b.run(r)) for b, r in zip(brokers, regs, strict=True)]
        try:
            async def split() -> bool:
                return await loaded(brokers[0]) + await loaded(brokers[1]) == 8

            await wait_for(split, "the first rounds")
            assert await loaded(brokers[0]) > 0  # both got a share
            assert await loaded(brokers[1]) > 0
            for key_type in (GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE):
                for key in ("g", "h", "tx-1", "tx-2"):
                    answers = {b.coordinator_node(key_type, key) for b in brokers}
                    assert len(answers) == 1  # every broker names the same coordinator
                    assert answers <= {1, 2}
            owner = brokers[0].coordinator_node(GROUP_KEY_TYPE, "g")
            leaving, staying = (brokers[0], brokers[1]) if owner == 1 else (brokers[1], brokers[0])
            result, writes = leaving.groups.coordinator.commit_offsets(
                OffsetCommitRequest("g", {TP: PartitionOffsetCommit(11)}), now_ms())
            assert (await leaving.groups.finish_async("g", result, writes)).partitions[TP] == ErrorCode.none

            # SIGTERM of the owner: unload and release, deregister, announce.
            await leaving.stop()
            await registry.deregister(regs[0] if owner == 1 else regs[1])

            async def taken() -> bool:
                if await loaded(staying) == 8:
                    return True
                # Announced until heard: a NOTIFY sent before the survivor's LISTEN reached the
                # server would be lost (the round interval is the fallback, far beyond this wait).
                await leaving.announce()
                return False

            await wait_for(taken, "the takeover")
            assert staying.coordinator_node(GROUP_KEY_TYPE, "g") == (2 if owner == 1 else 1)
            fetched = staying.groups.coordinator.fetch_offsets(OffsetFetchRequest("g", (TP,)), now_ms())
            assert fetched.partitions[TP].offset == 11
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    run_cluster(pg_database, main)
