"""Group and transaction coordinators owning only the partitions whose lease their broker holds,
against the real PostgreSQL: takeover after a broker's death, a dead owner's writes refused, a
KIP-939 prepared transaction completed by another broker."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from kio.schema.errors import ErrorCode

from oncestream.broker.group_service import GroupService
from oncestream.broker.txn_service import TxnService
from oncestream.cluster.leases.coordinator_leases import CoordinatorLeases, Lease, TransactionSource, fenced
from oncestream.cluster.leases.lease_keeper import LeaseKeeper
from oncestream.cluster.leases.pg_internal_topic import PgInternalTopic
from oncestream.cluster.leases.producer_id_blocks import PgProducerIdService
from oncestream.coordinator.group.messages import OffsetCommitRequest, OffsetFetchRequest, PartitionOffsetCommit
from oncestream.coordinator.txn import MarkerJob
from oncestream.topic_partition import TopicPartition
from tests.cluster.lease_support import PgTransactions, prepare, register

LONG_MS = 600000
PROPS = {
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.num.partitions": "4",
    "transaction.two.phase.commit.enable": "true",
}
TP = TopicPartition("orders", 0)
_clock = itertools.count(1_700_000_000_000, 10)


def now_ms() -> int:
    return next(_clock)


async def expire(store: PgTransactions, node_id: int) -> None:
    """The broker died: its lease ends now by PostgreSQL's clock (what its silence leads to)."""
    async with store.transaction() as conn:
        await conn.execute("UPDATE brokers SET lease_expires_at = clock_timestamp() WHERE node_id = %s", (node_id,))


async def records(store: PgTransactions) -> list[tuple[Any, ...]]:
    async with store.transaction() as conn:
        cursor = await conn.execute('SELECT * FROM coordinator_records ORDER BY topic, partition, "offset"')
        return list(await cursor.fetchall())


class RecordingMarkers:
    """The marker seam as cluster/diskless implements it: fenced by the coordinator's lease in
    the marker transaction (here the "marker" is a row of a test table)."""

    def __init__(self, store: TransactionSource) -> None:
        self.store = store
        self.fail = False
        self.jobs: list[tuple[MarkerJob, Lease]] = []

    async def write_markers(self, job: MarkerJob, lease: Lease) -> bool:
        if self.fail:
            return False
        async with self.store.transaction() as conn:
            await fenced(conn, lease.resource, lease.epoch, lease.incarnation)
            await conn.execute("CREATE TABLE IF NOT EXISTS test_markers (producer_id bigint, commit bool, epoch bigint)")
            await conn.execute("INSERT INTO test_markers VALUES (%s, %s, %s)",
                               (job.producer_id, job.commit, job.coordinator_epoch))
        self.jobs.append((job, lease))
        return True


class Broker:
    """The coordinators of one cluster broker and its lease keeper."""

    def __init__(self, store: PgTransactions, reg: Any) -> None:
        self.groups = GroupService(None, PROPS, now_ms, offsets_log=PgInternalTopic(store, "__consumer_offsets", 4),
                                   topics=dict)
        self.markers = RecordingMarkers(store)
        self.producer_ids = PgProducerIdService(store, block_size=10)
        self.txns = TxnService(None, self.groups, PROPS, now_ms, self.producer_ids.next_id,
                               state_log=PgInternalTopic(store, "__transaction_state", 4), markers=self.markers)
        self.keeper = LeaseKeeper(CoordinatorLeases(store), reg, [self.groups, self.txns],
                                  interval_ms=100, session_timeout_ms=LONG_MS)

    async def commit(self, group_id: str, offset: int) -> ErrorCode:
        result, writes = self.groups.coordinator.commit_offsets(
            OffsetCommitRequest(group_id, {TP: PartitionOffsetCommit(offset)}), now_ms())
        return (await self.groups.finish_async(group_id, result, writes)).partitions[TP]

    def committed(self, group_id: str) -> int:
        result = self.groups.coordinator.fetch_offsets(OffsetFetchRequest(group_id, (TP,)), now_ms())
        assert result.error == ErrorCode.none
        return result.partitions[TP].offset

    async def call(self, tid: str, fn: Any) -> Any:
        await self.producer_ids.ready()
        return await self.txns.call_async(tid, fn)


def test_group_partitions_move_to_the_survivor_with_their_committed_offsets(pg_database):
    async def main() -> None:
        store = await prepare(pg_database)
        first = Broker(store, await register(store, 1, LONG_MS))
        await first.keeper.run_round()  # alone: every partition
        assert len(first.keeper.loaded) == 8
        assert await first.commit("g", 42) == ErrorCode.none

        second = Broker(store, await register(store, 2, LONG_MS))
        await second.keeper.run_round()
        assert second.groups.coordinator_error("g") == ErrorCode.not_coordinator  # 1 is alive and holds it
        await expire(store, 1)
        await second.keeper.run_round()
        assert second.groups.coordinator_error("g") is None
        assert second.committed("g") == 42  # what the first owner committed

        # The first broker, unaware it is dead, commits again: refused, and it stops serving.
        assert await first.commit("g", 99) == ErrorCode.coordinator_not_available
        assert first.groups.coordinator_error("g") == ErrorCode.not_coordinator
        assert second.committed("g") == 42
        await first.keeper.run_round()  # its broker lease is gone: it holds nothing
        assert first.keeper.loaded == {}

    asyncio.run(main())


def test_a_prepared_two_phase_transaction_survives_every_brokers_death(pg_database):
    async def main() -> None:
        store = await prepare(pg_database)
        first = Broker(store, await register(store, 1, LONG_MS))
        await first.keeper.run_round()
        init = await first.call("tx", lambda c, now: c.init_producer_id("tx", 60000, now, enable_2pc=True))
        assert init.error == ErrorCode.none
        added = await first.call("tx", lambda c, now: c.add_partitions("tx", init.producer_id, init.producer_epoch,
                                                                       [TP], now))
        assert added.error == ErrorCode.none
        await expire(store, 1)  # every broker is dead; the transaction is prepared (KIP-939)

        second = Broker(store, await register(store, 2, LONG_MS))
        await second.keeper.run_round()
        lease = second.keeper.loaded[f"__transaction_state/{second.txns.partition_for('tx')}"]
        assert lease.epoch == 2  # taken over
        recovered = await second.call("tx", lambda c, now: c.init_producer_id(
            "tx", 60000, now, enable_2pc=True, keep_prepared_txn=True))
        assert (recovered.ongoing_txn_producer_id, recovered.ongoing_txn_producer_epoch) == (
            init.producer_id, init.producer_epoch)
        ended = await second.call("tx", lambda c, now: c.end_txn("tx", recovered.producer_id,
                                                                 recovered.producer_epoch, True, now))
        assert ended.error == ErrorCode.none
        ((job, used),) = second.markers.jobs
        assert (job.producer_id, job.commit, job.partitions) == (init.producer_id, True, (TP,))
        assert job.coordinator_epoch == lease.epoch == used.epoch
        (description,) = second.txns.coordinator_for("tx").describe_transactions(["tx"])
        assert description.state == "CompleteCommit"
        # The dead first broker, unaware, fences the (long finished) transaction: nothing is written.
        stored = await records(store)
        assert first.txns.coordinator_error("tx") is None  # it does not know it is dead...
        late = await first.call("tx", lambda c, now: c.init_producer_id("tx", 60000, now, enable_2pc=True))
        assert late is None or late.error == ErrorCode.concurrent_transactions  # answered before its write
        assert first.txns.coordinator_error("tx") == ErrorCode.not_coordinator  # ...its write was refused
        assert await records(store) == stored

    asyncio.run(main())


def test_a_commit_decided_before_the_owner_died_is_finished_by_the_next_owner(pg_database):
    async def main() -> None:
        store = await prepare(pg_database)
        first = Broker(store, await register(store, 1, LONG_MS))
        await first.keeper.run_round()
        init = await first.call("tx", lambda c, now: c.init_producer_id("tx", 60000, now))
        await first.call("tx", lambda c, now: c.add_partitions("tx", init.producer_id, init.producer_epoch, [TP], now))
        first.markers.fail = True  # PrepareCommit is durable, no marker gets written
        ended = await first.call("tx", lambda c, now: c.end_txn("tx", init.producer_id, init.producer_epoch, True, now))
        assert ended.error == ErrorCode.none  # the outcome is decided
        await expire(store, 1)

        second = Broker(store, await register(store, 2, LONG_MS))
        await second.keeper.run_round()  # the load resumes the commit
        ((job, lease),) = second.markers.jobs
        assert (job.producer_id, job.commit, job.coordinator_epoch) == (init.producer_id, True, lease.epoch)
        (description,) = second.txns.coordinator_for("tx").describe_transactions(["tx"])
        assert description.state == "CompleteCommit"

    asyncio.run(main())
