"""Metadata (key 3): one broker that leads every partition; auto-creates topics when allowed."""

from __future__ import annotations

import datetime
import uuid
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from oncestream.broker.authorize import Op, Res, authorize, authorized_operations
from oncestream.broker.connection_context import current_session
from oncestream.broker.handlers import cluster_metadata
from oncestream.broker.state import BrokerState
from oncestream.broker.topic_creation import auto_create_topic
from oncestream.errors import OnceStreamError
from oncestream.protocol.acl import CLUSTER_NAME
from oncestream.protocol.api_keys import METADATA
from oncestream.protocol.codec import RequestHeader, build
from oncestream.protocol.schemas import response_module

if TYPE_CHECKING:
    from oncestream.protocol.request_types import MetadataRequest

INTERNAL_TOPICS = cluster_metadata.INTERNAL_TOPICS


async def handle(state: BrokerState, header: RequestHeader, request: MetadataRequest) -> object:
    if state.cluster is not None:  # cluster mode: brokers and topics from PostgreSQL
        return await cluster_metadata.handle(state, state.cluster, header, request)
    m = response_module(METADATA, header.api_version)
    node_id = state.config.node_id
    topics = state.logs.topics()
    requested = request.topics
    names: list[str | None]
    if requested is None or (header.api_version == 0 and not requested):
        # All topics: only those the principal may DESCRIBE, as Kafka lists them.
        names = [name for name in sorted(topics) if authorize(state, Op.DESCRIBE, Res.TOPIC, name)]
    else:
        by_id = {info.topic_id: name for name, info in topics.items()}
        names = []
        for t in requested:
            name: str | None = t.name
            topic_id = getattr(t, "topic_id", None)  # v10+ (KIP-516) may name a topic by id only
            if name is None and topic_id is not None:
                name = by_id.get(topic_id)
            names.append(name)
    auto_create = state.config.auto_create_topics_enable and getattr(
        request, "allow_auto_topic_creation", True
    )
    want_ops = getattr(request, "include_topic_authorized_operations", False)
    out = []
    for name in names:
        info = topics.get(name) if name is not None else None
        error = ErrorCode.none
        if name is not None and not authorize(state, Op.DESCRIBE, Res.TOPIC, name):
            # The same answer whether the topic exists or not: no existence leak.
            info, error = None, ErrorCode.topic_authorization_failed
        elif info is None and name is not None and auto_create and name not in INTERNAL_TOPICS:
            if not (authorize(state, Op.CREATE, Res.CLUSTER) or authorize(state, Op.CREATE, Res.TOPIC, name)):
                error = ErrorCode.topic_authorization_failed  # Kafka: auto-creation needs CREATE
            elif state.partition_budget_error(state.config.num_partitions) is not None:
                error = ErrorCode.policy_violation
            else:
                try:
                    # Off the event loop (issue 10): file creation and fsyncs run on disk threads.
                    info = await auto_create_topic(state, name, state.config.num_partitions, {})
                    topics = state.logs.topics()
                except OnceStreamError as exc:
                    error = exc.code
        if info is None or name is None:  # (a topic found is always found by a name)
            if error == ErrorCode.none:
                error = ErrorCode.unknown_topic_or_partition
            out.append(
                build(
                    m.MetadataResponseTopic,
                    error_code=error,
                    name=name,
                    topic_id=uuid.UUID(int=0),
                    is_internal=False,
                    partitions=(),
                )
            )
            continue
        partitions = tuple(
            build(
                m.MetadataResponsePartition,
                error_code=ErrorCode.none,
                partition_index=p,
                leader_id=node_id,
                leader_epoch=0,
                replica_nodes=(node_id,),
                isr_nodes=(node_id,),
                offline_replicas=(),
            )
            for p in range(info.num_partitions)
        )
        out.append(
            build(
                m.MetadataResponseTopic,
                error_code=ErrorCode.none,
                name=name,
                topic_id=info.topic_id,
                is_internal=name in INTERNAL_TOPICS,
                partitions=partitions,
                topic_authorized_operations=authorized_operations(state, Res.TOPIC, name, requested=want_ops),
            )
        )
    # The endpoint of the listener this request came in on, as Kafka answers.
    host, port = state.config.advertised_for(current_session().listener_name)
    return build(
        m.MetadataResponse,
        throttle_time=datetime.timedelta(0),
        brokers=(build(m.MetadataResponseBroker, node_id=node_id, host=host, port=port, rack=None),),
        cluster_id=state.cluster_id,
        controller_id=node_id,
        topics=tuple(out),
        cluster_authorized_operations=authorized_operations(  # v8-v10 (KIP-430)
            state, Res.CLUSTER, CLUSTER_NAME, requested=getattr(request, "include_cluster_authorized_operations", False)),
    )
