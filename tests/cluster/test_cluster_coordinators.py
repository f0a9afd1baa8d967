"""Group and transaction coordinators owning only the partitions whose lease their broker holds,
against the real PostgreSQL: takeover after a broker's death, a dead owner's writes refused, a
KIP-939 prepared transaction completed by another broker."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from oncestream.broker.group_service import GroupService
from oncestream.broker.txn_service import TxnService
from oncestream.cluster.leases.coordinator_leases import CoordinatorLeases, Lease, TransactionSource, fenced
from oncestream.cluster.leases.lease_keeper import LeaseKeeper
from oncestream.cluster.leases.pg_internal_topic import PgInternalTopic
from oncestream.cluster.leases.producer_id_blocks import PgProducerIdService
from oncestream.cluster.pg.store import MetadataStore
from oncestream.coordinator.group.messages import OffsetCommitRequest, OffsetFetchRequest, PartitionOffsetCommit
from oncestream.coordinator.txn import MarkerJob
from oncestream.topic_partition import TopicPartition
from tests.cluster.lease_support import expire, register, run_cluster

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


async def records(store: MetadataStore) -> list[tuple[Any, ...]]:
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

    def __init__(self, store: MetadataStore, reg: Any, topics: Any = dict) -> None:
        self.groups = GroupService(None, PROPS, now_ms, offsets_log=PgInternalTopic(store, "__consumer_offsets", 4),
                                   topics=topics)
        self.markers = RecordingMarkers(store)
        self.producer_ids = PgProducerIdService(store, block_size=10)
        self.txns = TxnService(None, self.groups, PROPS, now_ms, self.producer_ids.next_id,
                               state_log=PgInternalTopic(store, "__transaction_state", 4), markers=self.markers)
        self.keeper = LeaseKeeper(CoordinatorLeases(store), reg, [self.groups, self.txns],
                                  interval_ms=100, session_timeout_ms=LONG_MS)

    @classmethod
    async def started(cls, store: MetadataStore, node_id: int, topics: Any = dict) -> Broker:
        """Broker ``node_id`` registered, after its first lease round."""
        broker = cls(store, await register(store, node_id, LONG_MS), topics)
        await broker.keeper.run_round()
        return broker

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

    async def begin(self, tid: str) -> Any:
        """A transaction of ``tid`` with TP added (Ongoing); the InitProducerId answer."""
        init = await self.call(tid, lambda c, now: c.init_producer_id(tid, 60000, now))
        added = await self.call(tid, lambda c, now: c.add_partitions(tid, init.producer_id, init.producer_epoch,
                                                                     [TP], now))
        assert added.error == ErrorCode.none
        return init


def test_group_partitions_move_to_the_survivor_with_their_committed_offsets(pg_database):
    async def main(store: MetadataStore) -> None:
        first = await Broker.started(store, 1)
        assert len(first.keeper.loaded) == 8
        assert await first.commit("g", 42) == ErrorCode.none

        second = await Broker.started(store, 2)
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

    run_cluster(pg_database, main)


def test_a_prepared_two_phase_transaction_survives_every_brokers_death(pg_database):
    async def main(store: MetadataStore) -> None:
        first = await Broker.started(store, 1)
        init = await first.call("tx", lambda c, now: c.init_producer_id("tx", 60000, now, enable_2pc=True))
        assert init.error == ErrorCode.none
        added = await first.call("tx", lambda c, now: c.add_partitions("tx", init.producer_id, init.producer_epoch,
                                                                       [TP], now))
        assert added.error == ErrorCode.none
        await expire(store, 1)  # every broker is dead; the transaction is prepared (KIP-939)

        second = await Broker.started(store, 2)
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

    run_cluster(pg_database, main)


def test_a_commit_decided_before_the_owner_died_is_finished_by_the_next_owner(pg_database):
    async def main(store: MetadataStore) -> None:
        first = await Broker.started(store, 1)
        init = await first.begin("tx")
        first.markers.fail = True  # PrepareCommit is durable, no marker gets written
        ended = await first.call("tx", lambda c, now: c.end_txn("tx", init.producer_id, init.producer_epoch, True, now))
        assert ended.error == ErrorCode.none  # the outcome is decided
        await expire(store, 1)

        second = await Broker.started(store, 2)
        ((job, lease),) = second.markers.jobs
        assert (job.producer_id, job.commit, job.coordinator_epoch) == (init.producer_id, True, lease.epoch)
        (description,) = second.txns.coordinator_for("tx").describe_transactions(["tx"])
        assert description.state == "CompleteCommit"

    run_cluster(pg_database, main)


class CommitThenBreak:
    """A PgInternalTopic whose next append commits and then reports a broken connection: the
    outcome the caller cannot know (connection lost after COMMIT was sent)."""

    def __init__(self, inner: PgInternalTopic) -> None:
        self.inner = inner
        self.name = inner.name
        self.num_partitions = inner.num_partitions
        self.break_next = False

    async def append(self, partition: int, records: Any, now_ms: int) -> None:
        await self.inner.append(partition, records, now_ms)
        if self.break_next:
            self.break_next = False
            raise OSError("connection lost after COMMIT")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def wait_served(error_of: Any) -> None:
    for _ in range(200):
        if error_of() is None:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the partition was not reloaded within 10 s")


def test_an_append_of_unknown_outcome_is_resolved_by_reading_back(pg_database):
    async def main(store: MetadataStore) -> None:
        reg = await register(store, 1, LONG_MS)
        broker = Broker(store, reg)
        offsets = CommitThenBreak(PgInternalTopic(store, "__consumer_offsets", 4))
        state = CommitThenBreak(PgInternalTopic(store, "__transaction_state", 4))
        broker.groups = GroupService(None, PROPS, now_ms, offsets_log=offsets, topics=dict)
        broker.txns = TxnService(None, broker.groups, PROPS, now_ms, broker.producer_ids.next_id,
                                 state_log=state, markers=broker.markers)
        broker.keeper = LeaseKeeper(CoordinatorLeases(store), reg,
                                    [broker.groups, broker.txns], interval_ms=100, session_timeout_ms=LONG_MS)
        await broker.keeper.run_round()
        timers = asyncio.get_running_loop().create_task(broker.groups.run_timers())
        try:
            offsets.break_next = True
            assert await broker.commit("g", 7) == ErrorCode.coordinator_not_available  # not promised...
            assert broker.groups.coordinator_error("g") == ErrorCode.coordinator_load_in_progress
            await wait_served(lambda: broker.groups.coordinator_error("g"))
            assert broker.committed("g") == 7  # ...but it was committed, and that is what is served
        finally:
            timers.cancel()

        state.break_next = True
        assert await broker.call("tx", lambda c, now: c.init_producer_id("tx", 60000, now)) is None
        await wait_served(lambda: broker.txns.coordinator_error("tx"))
        (stored,) = broker.txns.describe_transactions(["tx"])
        assert (stored.error, stored.state, stored.producer_epoch) == (ErrorCode.none, "Empty", 0)
        again = await broker.call("tx", lambda c, now: c.init_producer_id("tx", 60000, now))
        assert (again.error, again.producer_id, again.producer_epoch) == (ErrorCode.none, stored.producer_id, 1)

    run_cluster(pg_database, main)


def test_transactional_offsets_become_visible_when_the_transaction_commits(pg_database):
    async def main(store: MetadataStore) -> None:
        broker = await Broker.started(store, 1)
        init = await broker.call("tx", lambda c, now: c.init_producer_id("tx", 60000, now))
        pid, epoch = init.producer_id, init.producer_epoch
        added = await broker.call("tx", lambda c, now: c.add_offsets("tx", pid, epoch, "g", now))
        assert added.error == ErrorCode.none
        staged = await broker.txns.stage_offsets_async("g", pid, {TP: PartitionOffsetCommit(5)})
        assert staged.partitions == {TP: ErrorCode.none}
        assert broker.committed("g") == -1  # invisible until the commit
        ended = await broker.call("tx", lambda c, now: c.end_txn("tx", pid, epoch, True, now))
        assert ended.error == ErrorCode.none
        assert broker.committed("g") == 5
        assert broker.markers.jobs == []  # the offsets partition is local: no marker went out

        # And it is durable: another broker taking over after this one's death serves it.
        survivor = Broker(store, await register(store, 2, LONG_MS))
        await expire(store, 1)
        await survivor.keeper.run_round()
        assert survivor.committed("g") == 5

    run_cluster(pg_database, main)


def test_a_kip848_consumer_group_keeps_its_epoch_and_assignment_across_a_takeover(pg_database):
    from oncestream.coordinator.group.consumer.messages import ConsumerHeartbeatRequest
    from oncestream.coordinator.group.consumer.records import TopicMetadata

    orders = TopicMetadata(uuid.uuid4(), "orders", 3)

    def topics() -> dict[str, TopicMetadata]:
        return {"orders": orders}

    async def heartbeat(broker: Broker, request: ConsumerHeartbeatRequest) -> Any:
        result, writes = broker.groups.coordinator.consumer_group_heartbeat(request, now_ms())
        return await broker.groups.finish_async(request.group_id, result, writes)

    async def main(store: MetadataStore) -> None:
        first = await Broker.started(store, 1, topics)
        joined = await heartbeat(first, ConsumerHeartbeatRequest(
            "cg", "member-1", 0, rebalance_timeout_ms=30000, subscribed_topic_names=("orders",), owned={}))
        assert joined.error == ErrorCode.none
        assert joined.assignment == {orders.topic_id: frozenset({0, 1, 2})}
        await expire(store, 1)

        second = await Broker.started(store, 2, topics)
        again = await heartbeat(second, ConsumerHeartbeatRequest(
            "cg", "member-1", joined.member_epoch, owned={orders.topic_id: frozenset({0, 1, 2})}))
        assert (again.error, again.member_epoch) == (ErrorCode.none, joined.member_epoch)
        (described,) = second.groups.coordinator.list_groups().groups
        assert described.group_id == "cg"

    run_cluster(pg_database, main)


def test_another_area_reads_the_persisted_transaction_and_holds_off_its_next_step(pg_database):
    from oncestream.cluster.leases.txn_state import stored_transaction

    async def main(store: MetadataStore) -> None:
        broker = await Broker.started(store, 1)
        init = await broker.begin("tx")
        async with store.transaction() as conn:  # e.g. the diskless commit of a transactional batch
            assert await stored_transaction(conn, "nobody", 4) is None
            stored = await stored_transaction(conn, "tx", 4)
            assert stored is not None
            assert (stored.state.name, stored.producer_id, stored.partitions) == ("ONGOING", init.producer_id,
                                                                                   frozenset({TP}))
            ending = asyncio.get_running_loop().create_task(broker.call(
                "tx", lambda c, now: c.end_txn("tx", init.producer_id, init.producer_epoch, True, now)))
            await asyncio.wait({ending}, timeout=0.5)
            assert not ending.done()  # PrepareCommit waits for the reader's transaction
        async with asyncio.timeout(10):
            assert (await ending).error == ErrorCode.none
        ((job, _lease),) = broker.markers.jobs
        assert job.partitions == (TP,)

    run_cluster(pg_database, main)
