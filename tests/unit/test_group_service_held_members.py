"""A consumer-group member's session does not run out while the broker holds one of its requests.

Cluster mode persists a commit with a PostgreSQL transaction queued behind the broker's other
appends, and the broker reads a connection's next request only after answering the current one,
so the member's heartbeats wait unread behind a slow commit. Before ``GroupService.holding`` the
group's timers fenced such a member once the wait outlasted its session, and its next commit was
answered UNKNOWN_MEMBER_ID (the flaky KIP-848 cluster interop test). Here the offsets topic is in
memory and its appends wait on an event: the seam that makes the wait as long as a test needs,
with a clock the test moves.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable, Sequence

from kio.schema.errors import ErrorCode

from oncestream.broker.group_service import GroupService
from oncestream.cluster.leases.coordinator_leases import Lease
from oncestream.coordinator.group.consumer.messages import ConsumerHeartbeatRequest
from oncestream.coordinator.group.consumer.records import TopicMetadata
from oncestream.coordinator.group.messages import OffsetCommitRequest, PartitionOffsetCommit
from oncestream.topic_partition import TopicPartition

TOPIC, GROUP, MEMBER = "orders", "held-group", "member-a"
TOPIC_ID = uuid.uuid4()
SESSION_MS = 6000
PROPS = {"offsets.topic.num.partitions": "1", "group.consumer.session.timeout.ms": str(SESSION_MS),
         "group.consumer.min.session.timeout.ms": "1000", "group.consumer.heartbeat.interval.ms": "300",
         "group.consumer.min.heartbeat.interval.ms": "100"}


class GatedOffsetsTopic:
    """``__consumer_offsets`` in memory (one partition); an append waits while ``gate`` is clear."""

    name = "__consumer_offsets"
    num_partitions = 1

    def __init__(self) -> None:
        self.records: list[tuple[bytes, bytes | None]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.waiting = asyncio.Event()
        self._leases: dict[int, Lease] = {}

    async def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]], now_ms: int) -> None:
        self.waiting.set()
        await self.gate.wait()
        self.records.extend(records)

    async def read_records(self, partitions: Iterable[int] | None = None) -> list[tuple[int, int, bytes, bytes | None]]:
        return [(0, offset, key, value) for offset, (key, value) in enumerate(self.records)]

    async def read_all(self, partitions: Iterable[int] | None = None) -> list[tuple[bytes, bytes | None]]:
        return list(self.records)

    def own(self, partition: int, lease: Lease) -> None:
        self._leases[partition] = lease

    def disown(self, partition: int) -> None:
        self._leases.pop(partition, None)

    def lease_of(self, partition: int) -> Lease | None:
        return self._leases.get(partition)


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


async def _commit(svc: GroupService, clock: Clock, epoch: int, offset: int) -> ErrorCode:
    """OffsetCommit as handlers/groups.py serves it: validate, then persist holding the member."""
    request = OffsetCommitRequest(GROUP, {TopicPartition(TOPIC, 0): PartitionOffsetCommit(offset)},
                                  member_id=MEMBER, generation_id=epoch)
    result, writes = svc.coordinator.commit_offsets(request, clock(), mono_ms=clock(), api_version=9)
    with svc.holding(GROUP, MEMBER):
        result = await svc.finish_async(GROUP, result, writes, wake_timers=False)
    return result.partitions[TopicPartition(TOPIC, 0)]


def _tick(svc: GroupService, clock: Clock) -> None:
    """What the timer task does first (its records would queue behind the held append)."""
    svc.coordinator.tick(clock(), mono_ms=clock())


def _members(svc: GroupService, clock: Clock) -> set[str]:
    described = svc.coordinator.consumer_group_describe([GROUP], clock(), mono_ms=clock())
    return {m.member_id for group in described for m in group.members}


def test_a_member_is_not_fenced_while_its_commit_waits_for_the_append() -> None:
    async def run() -> None:
        clock = Clock()
        topic = GatedOffsetsTopic()
        svc = GroupService(None, PROPS, clock, clock, offsets_log=topic,
                           topics=lambda: {TOPIC: TopicMetadata(TOPIC_ID, TOPIC, 1)})
        await svc.load_partition(0, Lease("__consumer_offsets/0", 1, 1, uuid.uuid4()))
        joined, writes = svc.coordinator.consumer_group_heartbeat(ConsumerHeartbeatRequest(
            GROUP, MEMBER, 0, rebalance_timeout_ms=300_000, subscribed_topic_names=(TOPIC,), owned={}),
            clock(), mono_ms=clock())
        joined = await svc.finish_async(GROUP, joined, writes)
        assert joined.error == ErrorCode.none
        epoch = joined.member_epoch

        topic.gate.clear()  # PostgreSQL is slow: the commit's append waits
        topic.waiting.clear()
        commit = asyncio.create_task(_commit(svc, clock, epoch, 1))
        await topic.waiting.wait()
        clock.ms += 3 * SESSION_MS  # no heartbeat is read meanwhile: it waits behind the commit
        _tick(svc, clock)
        assert _members(svc, clock) == {MEMBER}, "fenced while the broker held its commit"
        topic.gate.set()
        assert await commit == ErrorCode.none

        clock.ms += SESSION_MS - 1  # the answered commit gave it a full session
        _tick(svc, clock)
        assert await _commit(svc, clock, epoch, 2) == ErrorCode.none

        clock.ms += SESSION_MS + 1  # silent for a whole session, nothing held: fenced as before
        _tick(svc, clock)
        assert _members(svc, clock) == set()
        assert await _commit(svc, clock, epoch, 3) == ErrorCode.unknown_member_id

    asyncio.run(run())
