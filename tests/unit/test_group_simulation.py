"""Seeded random client traffic against the coordinator: invariants hold after every step, every
delayed JoinGroup/SyncGroup is answered exactly once, and the log always replays to the state
the coordinator holds (deterministic simulation in the sans-io style)."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field

import pytest
from kio.schema.errors import ErrorCode

from oncestream.coordinator.group import (
    GroupCoordinator,
    GroupCoordinatorConfig,
    GroupState,
    JoinResult,
    LeavingMember,
    OffsetAndMetadata,
    OffsetDeleteRequest,
    PartitionOffsetCommit,
    SyncResult,
    TopicPartition,
)
from oncestream.coordinator.group.consumer_protocol import encode_subscription
from oncestream.coordinator.group.records import GroupSnapshot
from tests.support.group_harness import Captured, GroupHarness

E = ErrorCode
S = GroupState
GROUPS = ("alpha", "beta", "gamma")
TOPICS = ("orders", "payments")
PROTOCOL_CHOICES = (
    (("range", encode_subscription(["orders"])),),
    (("range", encode_subscription(["orders", "payments"])), ("roundrobin", b"")),
    (("roundrobin", b""), ("range", encode_subscription(["payments"]))),
    (("roundrobin", b"only"),),
)


@dataclass
class Client:
    """A consumer as the simulation drives it."""

    group: str
    client_id: str
    instance_id: str | None
    member_id: str = ""
    generation: int = -1
    join_result: JoinResult | None = None
    synced_generation: int = -1
    joins: list[Captured[JoinResult]] = field(default_factory=list)
    syncs: list[Captured[SyncResult]] = field(default_factory=list)
    # The answers already learnt from (by identity: a Captured stays in joins/syncs).
    absorbed: set[int] = field(default_factory=set)

    def absorb(self) -> None:
        """Learn from the answers that arrived."""
        for join in self.joins:
            if not join.done or id(join) in self.absorbed:
                continue
            self.absorbed.add(id(join))
            result = join.result
            if result.error == E.none:
                self.member_id, self.generation = result.member_id, result.generation_id
                self.join_result = result
            elif result.error == E.member_id_required:
                self.member_id = result.member_id
            elif result.error in (E.unknown_member_id, E.fenced_instance_id):
                self.reset()
        for sync in self.syncs:
            if sync.done and id(sync) not in self.absorbed:
                self.absorbed.add(id(sync))
                self.on_error(sync.result.error)

    def reset(self) -> None:
        self.member_id, self.generation, self.join_result = "", -1, None

    def on_error(self, error: ErrorCode) -> None:
        """React like a real consumer: forget the member id, or just the generation."""
        if error in (E.unknown_member_id, E.fenced_instance_id):
            self.reset()
        elif error in (E.illegal_generation, E.rebalance_in_progress):
            self.join_result = None


def check_invariants(coordinator: GroupCoordinator) -> None:
    for group_id in coordinator.group_ids():
        group = coordinator._rt.groups[group_id]
        assert group.state is not S.DEAD
        if group.members:
            assert group.leader_id in group.members
            assert group.protocol_type is not None
        else:
            assert group.leader_id is None
        for instance_id, member_id in group.static_members.items():
            assert group.members[member_id].group_instance_id == instance_id
        assert len(group.static_members) == sum(m.is_static for m in group.members.values())
        assert (group.join_timer is not None) == (group.state is S.PREPARING_REBALANCE)
        assert group.pending_sync_members <= set(group.members)
        if group.pending_sync_members:
            assert group.sync_timer is not None
        for member in group.members.values():
            if member.is_awaiting_join:
                assert group.state is S.PREPARING_REBALANCE
            if member.is_awaiting_sync:
                assert group.state is S.COMPLETING_REBALANCE
        if group.state in (S.COMPLETING_REBALANCE, S.STABLE):
            assert group.protocol_name is not None
            assert group.generation_id > 0
            for member in group.members.values():
                assert group.protocol_name in member.protocol_names()
        assert not set(group.pending_members) & set(group.members)


DurableGroup = tuple[
    GroupSnapshot | None, dict[TopicPartition, OffsetAndMetadata], dict[int, dict[TopicPartition, OffsetAndMetadata]]
]


def durable_view(coordinator: GroupCoordinator) -> dict[str, DurableGroup]:
    """What must come back after a restart: metadata of settled groups, all offsets."""
    view: dict[str, DurableGroup] = {}
    for group_id in coordinator.group_ids():
        state = coordinator.group_state(group_id)
        snapshot = coordinator.group_snapshot(group_id)
        assert snapshot is not None
        settled = state is S.STABLE or (state is S.EMPTY and snapshot.generation_id > 0)
        offsets = coordinator.committed_offsets(group_id)
        pending = coordinator.pending_txn_offsets(group_id)
        if settled or offsets or pending:
            view[group_id] = (snapshot if settled else None, offsets, pending)
    return view


def run_simulation(seed: int, steps: int) -> None:
    rng = random.Random(seed)
    counter = itertools.count(1)
    coordinator = GroupCoordinator(
        GroupCoordinatorConfig(
            offsets_topic_partitions=3,
            group_initial_rebalance_delay_ms=rng.choice([0, 50, 500]),
            group_max_size=rng.choice([3, 100]),
            offsets_retention_ms=60_000,
            offsets_retention_check_interval_ms=5_000,
        ),
        member_id_suffix=lambda: str(next(counter)),
    )
    h = GroupHarness(coordinator)
    clients: list[Client] = []
    captured_all: list[Captured] = []
    now = 0

    def new_client() -> Client:
        static = rng.random() < 0.3
        n = len(clients)
        client = Client(
            group=rng.choice(GROUPS),
            client_id=f"c{n}",
            instance_id=f"inst-{rng.randrange(4)}" if static else None,
        )
        clients.append(client)
        return client

    for _ in range(steps):
        now += rng.choice([0, 1, 10, 100, 500, 2_000, 7_000])
        for client in clients:
            client.absorb()
        action = rng.random()
        if clients and (len(clients) >= 8 or rng.random() < 0.9):
            client = rng.choice(clients)
        else:
            client = new_client()
        wants_sync = (
            client.join_result is not None and client.synced_generation != client.generation
        )
        if wants_sync and rng.random() < 0.6:
            action = 0.4  # a well-behaved client syncs right after its JoinGroup answer
        if action < 0.3:
            join = h.join(
                client.group,
                client.member_id,
                now_ms=now,
                instance_id=client.instance_id,
                client_id=client.client_id,
                protocols=rng.choice(PROTOCOL_CHOICES),
                api_version=rng.choice([3, 4, 9]),
                session_timeout_ms=rng.choice([6_000, 10_000]),
                rebalance_timeout_ms=rng.choice([6_000, 20_000]),
            )
            client.joins.append(join)
            captured_all.append(join)
        elif action < 0.5 and client.join_result is not None:
            result = client.join_result
            assignments = None
            if result.leader_id == client.member_id and not result.skip_assignment:
                assignments = {m.member_id: m.member_id.encode() for m in result.members}
            sync = h.sync(
                client.group,
                client.member_id,
                client.generation,
                now_ms=now,
                instance_id=client.instance_id,
                assignments=assignments,
            )
            client.syncs.append(sync)
            client.synced_generation = client.generation
            captured_all.append(sync)
        elif action < 0.7:
            error = h.heartbeat(
                client.group,
                client.member_id,
                client.generation,
                now_ms=now,
                instance_id=client.instance_id,
            )
            client.on_error(error)
        elif action < 0.75:
            h.leave(client.group, LeavingMember(client.member_id, client.instance_id), now_ms=now)
        elif action < 0.85:
            tp = TopicPartition(rng.choice(TOPICS), rng.randrange(2))
            if rng.random() < 0.5:
                h.commit(
                    client.group,
                    {tp: rng.randrange(1_000)},
                    now_ms=now,
                    member_id=client.member_id,
                    generation_id=client.generation,
                    instance_id=client.instance_id,
                )
            else:
                h.commit(client.group, {tp: rng.randrange(1_000)}, now_ms=now)
        elif action < 0.9:
            pid = rng.randrange(3)
            if rng.random() < 0.5:
                tp = TopicPartition(rng.choice(TOPICS), rng.randrange(2))
                _, writes = coordinator.add_pending_txn_offsets(
                    client.group, pid, {tp: PartitionOffsetCommit(rng.randrange(1_000))}, now
                )
            else:
                writes = coordinator.complete_pending_txn_offsets(
                    client.group, pid, rng.random() < 0.7, now
                )
            h.log.append(writes)
        elif action < 0.93:
            _, writes = coordinator.delete_groups([client.group], now)
            h.log.append(writes)
        elif action < 0.95:
            request = OffsetDeleteRequest(client.group, (TopicPartition(rng.choice(TOPICS), 0),))
            _, writes = coordinator.delete_offsets(request, now)
            h.log.append(writes)
        else:
            h.tick(now)
        for captured in captured_all:
            assert len(captured.results) <= 1, "a response was delivered twice"
        check_invariants(coordinator)

    # Let every timer run out: no request may be left unanswered.
    for _ in range(20):
        now += 60_000
        h.tick(now)
    assert all(c.done for c in captured_all), "a JoinGroup/SyncGroup was never answered"
    for captured in captured_all:
        assert len(captured.results) == 1
    check_invariants(coordinator)

    restarted = GroupCoordinator(coordinator.config)
    restarted.load(h.log.records(), now_ms=now)
    reloaded = durable_view(restarted)
    expected = durable_view(coordinator)
    # Groups still rebalancing are stored as of their last settled generation; compare the rest.
    for group_id, (snapshot, offsets, pending) in expected.items():
        assert group_id in reloaded
        got_snapshot, got_offsets, got_pending = reloaded[group_id]
        assert (got_offsets, got_pending) == (offsets, pending)
        if snapshot is not None:
            assert got_snapshot == snapshot
    assert set(reloaded) <= set(coordinator.group_ids())


@pytest.mark.parametrize("seed", range(12))
def test_random_traffic_keeps_invariants_and_replays_from_the_log(seed: int) -> None:
    run_simulation(seed, steps=400)
