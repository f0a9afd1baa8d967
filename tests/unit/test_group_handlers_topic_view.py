"""The group handlers on a broker whose topic view lags the catalog, as a cluster broker's does
(broker/cluster_node.py: a snapshot refreshed every second, ``learn_topics`` for what a request
names): a classic member's JoinGroup and a consumer-protocol member's heartbeat make the view hold
the topics they name before the coordinator resolves them.

The regression (cluster mode, issue 22): a classic member with cooperative-sticky owned every
partition of a topic created through another broker since the coordinator's last refresh; a
consumer-protocol member joined and the online upgrade, not finding the topic in the view,
recorded the classic member as owning nothing. At the next refresh the consumer member was given
partitions the classic member still held, and the classic member's rejoin was answered at the new
epoch with nothing to revoke."""

from __future__ import annotations

import asyncio
import datetime
import uuid
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from oncestream.broker.cluster_node import ClusterNode, TopicMeta
from oncestream.broker.cluster_settings import ClusterSettings
from oncestream.broker.config import BrokerConfig
from oncestream.broker.group_service import GroupService
from oncestream.broker.handlers import consumer_groups, groups
from oncestream.broker.state import BrokerState
from oncestream.coordinator.group.consumer.records import TopicMetadata
from oncestream.log.config import LogConfig
from oncestream.log.manager import LogManager
from oncestream.protocol import api_keys as k
from oncestream.protocol.codec import RequestHeader
from oncestream.protocol.consumer_protocol import Assignment, Subscription, encode_assignment, encode_subscription
from oncestream.protocol.schemas import request_module

TOPIC = "orders"
GROUP = "g"
EVERY = [0, 1, 2, 3]
WAIT_S = 10.0


class LaggingTopicView:
    """The part of a cluster node the group handlers use, over the broker's own logs as the
    catalog: ``topic_snapshot`` as of the last ``refresh_snapshot``, ``learn_topics`` reading the
    named topics it lacks (ClusterNode's contract)."""

    def __init__(self, catalog: LogManager) -> None:
        self._catalog = catalog
        self._snapshot: dict[str, TopicMetadata] = {}

    def _read(self) -> dict[str, TopicMetadata]:
        return {name: TopicMetadata(info.topic_id, name, info.num_partitions)
                for name, info in self._catalog.topics().items()}

    def topic_snapshot(self) -> dict[str, TopicMetadata]:
        return self._snapshot

    async def refresh_snapshot(self) -> None:
        self._snapshot = self._read()

    async def learn_topics(self, names: list[str]) -> None:
        found = {name: meta for name, meta in self._read().items() if name in names}
        self._snapshot = {**self._snapshot, **found}


def _header(api_key: int, version: int) -> RequestHeader:
    return RequestHeader(api_key, version, 1, "test", 0)


def _state(data_dir: Path) -> tuple[BrokerState, LaggingTopicView]:
    state = BrokerState(data_dir, BrokerConfig.from_properties("127.0.0.1", 0, {"group.initial.rebalance.delay.ms": "0"}))
    view = LaggingTopicView(state.logs)  # refreshed before TOPIC existed
    state.logs.create_topic(TOPIC, len(EVERY), {}, now_ms=state.now_ms())
    state.cluster = view  # type: ignore[assignment]  # the handlers' view of a cluster node
    state.groups = GroupService(state.logs, state.config.raw, state.now_ms, state.mono_ms,
                                topics=lambda: dict(view.topic_snapshot()))
    return state, view


def _cooperative_metadata(owned: list[int]) -> bytes:
    return encode_subscription(Subscription(topics=[TOPIC], owned_partitions=[(TOPIC, owned)] if owned else [],
                                            version=1))


async def _join(state: BrokerState, member_id: str, owned: list[int]) -> Any:
    m = request_module(k.JOIN_GROUP, 5)
    request = m.JoinGroupRequest(
        group_id=GROUP, session_timeout=datetime.timedelta(seconds=30), rebalance_timeout=datetime.timedelta(seconds=30),
        member_id=member_id, group_instance_id=None, protocol_type="consumer",
        protocols=(m.JoinGroupRequestProtocol(name="cooperative-sticky", metadata=_cooperative_metadata(owned)),))
    return await asyncio.wait_for(groups.handle_join_group(state, _header(k.JOIN_GROUP, 5), request), WAIT_S)


async def _sync(state: BrokerState, member_id: str, generation: int, assign: list[int] | None) -> Any:
    m = request_module(k.SYNC_GROUP, 3)
    assignments = () if assign is None else (m.SyncGroupRequestAssignment(
        member_id=member_id, assignment=encode_assignment(Assignment(partitions=[(TOPIC, assign)], version=1))),)
    request = m.SyncGroupRequest(group_id=GROUP, generation_id=generation, member_id=member_id, group_instance_id=None,
                                 assignments=assignments)
    return await asyncio.wait_for(groups.handle_sync_group(state, _header(k.SYNC_GROUP, 3), request), WAIT_S)


async def _consumer_heartbeat(state: BrokerState, member_id: str, epoch: int) -> Any:
    m = request_module(k.CONSUMER_GROUP_HEARTBEAT, 0)
    request = m.ConsumerGroupHeartbeatRequest(
        group_id=GROUP, member_id=member_id, member_epoch=epoch, instance_id=None, rack_id=None,
        rebalance_timeout=datetime.timedelta(seconds=30), subscribed_topic_names=(TOPIC,) if epoch == 0 else None,
        server_assignor=None, topic_partitions=())
    return await asyncio.wait_for(consumer_groups.handle_consumer_group_heartbeat(
        state, _header(k.CONSUMER_GROUP_HEARTBEAT, 0), request), WAIT_S)


def _assigned(response: Any) -> set[int]:
    if response.assignment is None:
        return set()
    return {p for tp in response.assignment.topic_partitions for p in tp.partitions}


def test_an_online_upgrade_keeps_the_partitions_a_classic_member_owns_of_a_topic_the_view_lacked(tmp_path):
    """The classic member (cooperative-sticky) owns all four partitions; a consumer-protocol
    member joins, the view refreshes, the consumer member heartbeats again: it gets nothing the
    classic member still owns, and the classic member's rejoin keeps its generation while it
    revokes half (the two-step cooperative hand-over)."""
    state, view = _state(tmp_path)

    async def scenario() -> None:
        timers = asyncio.get_running_loop().create_task(state.groups.run_timers())
        try:
            first = await _join(state, "", [])
            assert first.error_code == ErrorCode.member_id_required
            classic_id = first.member_id
            joined = await _join(state, classic_id, [])
            assert (joined.error_code, joined.leader) == (ErrorCode.none, classic_id)
            synced = await _sync(state, classic_id, joined.generation_id, EVERY)
            assert synced.error_code == ErrorCode.none  # the classic member owns every partition

            modern = await _consumer_heartbeat(state, str(uuid.uuid4()), 0)
            assert modern.error_code == ErrorCode.none
            await view.refresh_snapshot()  # the periodic refresh: the catalog's topics
            modern = await _consumer_heartbeat(state, modern.member_id, modern.member_epoch)
            assert modern.error_code == ErrorCode.none
            assert _assigned(modern) == set(), "the consumer member got partitions the classic member still owns"

            rejoined = await _join(state, classic_id, EVERY)
            assert rejoined.error_code == ErrorCode.none
            assert rejoined.generation_id == joined.generation_id, "the rejoin skipped the revocation"
            kept = await _sync(state, classic_id, rejoined.generation_id, None)
            assert kept.error_code == ErrorCode.none
        finally:
            timers.cancel()

    asyncio.run(scenario())


def test_a_topic_learned_while_a_refresh_reads_the_catalog_stays_in_the_snapshot():
    """ClusterNode.refresh_snapshot replaces the snapshot with what its read found; a topic
    ``learn_topics`` added meanwhile (created after that read began) must not vanish again, or the
    group coordinator loses sight of it until the next refresh (the regression above, narrowed
    to one second)."""
    unused: Any = object()  # neither PostgreSQL nor the object store is reached: ``topics`` is replaced
    node = ClusterNode(ClusterSettings("postgresql://user@localhost/db", "file:///unused", 1), unused, unused, {},
                       log_defaults=LogConfig(), check_interval_ms=1000)
    old = TopicMeta("old", uuid.uuid4(), 1, False, {})
    new = TopicMeta(TOPIC, uuid.uuid4(), len(EVERY), False, {})
    catalog_when_read_began = {"old": old}

    async def scenario() -> None:
        reading = asyncio.Event()
        answer = asyncio.Event()

        async def topics(names: list[str] | None, **_: Any) -> dict[str, TopicMeta]:
            if names is None:  # the refresh's read: the catalog as it was when it began
                snapshot = dict(catalog_when_read_began)
                reading.set()
                await answer.wait()
                return snapshot
            return {name: meta for name, meta in {"old": old, TOPIC: new}.items() if name in names}

        node.topics = topics  # type: ignore[method-assign,assignment]  # the catalog's reads
        refresh = asyncio.get_running_loop().create_task(node.refresh_snapshot())
        await asyncio.wait_for(reading.wait(), WAIT_S)
        await node.learn_topics([TOPIC])  # a JoinGroup naming the topic just created
        assert TOPIC in node.topic_snapshot()
        answer.set()
        await asyncio.wait_for(refresh, WAIT_S)
        assert set(node.topic_snapshot()) == {"old", TOPIC}

    asyncio.run(scenario())
