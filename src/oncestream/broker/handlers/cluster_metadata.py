"""Metadata (key 3) in cluster mode: the live brokers, the cluster id and the topics of PostgreSQL.

Every broker answers the same for the same catalog and the same live brokers: the brokers come
from the registry (ordered by node id), the topics from the catalog, each partition's leader from
rendezvous hashing over the live brokers (broker/cluster_leaders.py), its replicas and ISR that
one broker (durability is the object store's, not a replica set's). The controller is the live
broker with the lowest node id. Auto-creation creates the topic in the catalog, as CreateTopics.

The coordinators' internal topics (``__consumer_offsets``, ``__transaction_state``) are listed as
internal with the partition count the coordinators hash over, as the single broker lists them; the
leader of each of their partitions is its coordinator (ClusterNode.partition_leader).
"""

from __future__ import annotations

import datetime
import uuid
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from oncestream.broker.authorize import Op, Res, authorize, authorized_operations
from oncestream.broker.cluster_node import ClusterNode, TopicMeta
from oncestream.broker.connection_context import current_session
from oncestream.broker.state import BrokerState
from oncestream.errors import OnceStreamError
from oncestream.protocol.acl import CLUSTER_NAME
from oncestream.protocol.api_keys import METADATA
from oncestream.protocol.codec import RequestHeader, build
from oncestream.protocol.schemas import response_module

if TYPE_CHECKING:
    from oncestream.protocol.request_types import MetadataRequest

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
_NIL_UUID = uuid.UUID(int=0)


async def handle(state: BrokerState, node: ClusterNode, header: RequestHeader, request: MetadataRequest) -> object:
    m = response_module(METADATA, header.api_version)
    live = await node.live_brokers()
    requested = request.topics
    every = requested is None or (header.api_version == 0 and not requested)
    topics = await node.topics(None if every else [t.name for t in requested or () if t.name is not None],
                               with_internal=True)
    names: list[str | None]
    if every:
        names = [name for name in sorted(topics) if authorize(state, Op.DESCRIBE, Res.TOPIC, name)]
    else:
        by_id: dict[uuid.UUID, str] = {}
        if any(t.name is None for t in requested or ()):
            by_id = {info.topic_id: name for name, info in (await node.topics(None, with_internal=True)).items()}
        names = []
        for t in requested or ():
            name: str | None = t.name
            topic_id = getattr(t, "topic_id", None)  # v10+ (KIP-516) may name a topic by id only
            if name is None and topic_id is not None:
                name = by_id.get(topic_id)
                if name is not None:
                    topics.update(await node.topics([name], with_internal=True))
            names.append(name)
    auto_create = state.config.auto_create_topics_enable and getattr(request, "allow_auto_topic_creation", True)
    want_ops = getattr(request, "include_topic_authorized_operations", False)
    live_ids = [b.node_id for b in live]
    out = []
    for name in names:
        info: TopicMeta | None = topics.get(name) if name is not None else None
        error = ErrorCode.none
        if name is not None and not authorize(state, Op.DESCRIBE, Res.TOPIC, name):
            info, error = None, ErrorCode.topic_authorization_failed
        elif info is None and name is not None and auto_create and name not in INTERNAL_TOPICS:
            if not (authorize(state, Op.CREATE, Res.CLUSTER) or authorize(state, Op.CREATE, Res.TOPIC, name)):
                error = ErrorCode.topic_authorization_failed
            else:
                try:
                    info = await node.create_topic(name, state.config.num_partitions, {})
                except OnceStreamError as exc:
                    if exc.code != ErrorCode.topic_already_exists:
                        error = exc.code
                    else:  # another broker created it meanwhile
                        info = (await node.topics([name])).get(name)
        if info is None or name is None:
            out.append(build(m.MetadataResponseTopic, error_code=error if error != ErrorCode.none
                             else ErrorCode.unknown_topic_or_partition, name=name, topic_id=_NIL_UUID,
                             is_internal=False, partitions=()))
            continue
        out.append(build(
            m.MetadataResponseTopic, error_code=ErrorCode.none, name=name, topic_id=info.topic_id,
            is_internal=info.internal, partitions=tuple(_partition(m, node, info, p, live_ids)
                                                        for p in range(info.num_partitions)),
            topic_authorized_operations=authorized_operations(state, Res.TOPIC, name, requested=want_ops)))
    listener = current_session().listener_name  # each broker's endpoint of the listener asked on
    brokers = tuple(build(m.MetadataResponseBroker, node_id=b.node_id, host=b.endpoint_for(listener)[0],
                          port=b.endpoint_for(listener)[1], rack=b.rack) for b in live)
    return build(
        m.MetadataResponse,
        throttle_time=datetime.timedelta(0),
        brokers=brokers,
        cluster_id=node.cluster_id,
        controller_id=live_ids[0] if live_ids else node.node_id,
        topics=tuple(out),
        cluster_authorized_operations=authorized_operations(
            state, Res.CLUSTER, CLUSTER_NAME, requested=getattr(request, "include_cluster_authorized_operations", False)),
    )


def _partition(m: Any, node: ClusterNode, topic: TopicMeta, partition: int, live_ids: list[int]) -> object:
    leader = node.partition_leader(topic, partition, live_ids)
    return build(m.MetadataResponsePartition, error_code=ErrorCode.none, partition_index=partition,
                 leader_id=leader, leader_epoch=0, replica_nodes=(leader,), isr_nodes=(leader,), offline_replicas=())
