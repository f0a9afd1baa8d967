"""DescribeCluster (key 60, KIP-700): the brokers and the cluster id, as Metadata lists them.

The single broker answers itself; a broker of a cluster the live brokers of PostgreSQL (each
with its endpoint of the listener the request came in on), the controller being the live broker
with the lowest node id, as its Metadata answers. Endpoint type 2 (controllers, KIP-919) is
UNSUPPORTED_ENDPOINT_TYPE: there are no controllers to describe.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from oncestream.broker.authorize import Res, authorized_operations
from oncestream.broker.connection_context import current_session
from oncestream.broker.state import BrokerState
from oncestream.protocol.acl import CLUSTER_NAME
from oncestream.protocol.api_keys import DESCRIBE_CLUSTER
from oncestream.protocol.codec import RequestHeader, build
from oncestream.protocol.schemas import response_module

if TYPE_CHECKING:
    from oncestream.protocol.request_types import DescribeClusterRequest

BROKERS_ENDPOINT_TYPE = 1


async def handle(state: BrokerState, header: RequestHeader, request: DescribeClusterRequest) -> object:
    m = response_module(DESCRIBE_CLUSTER, header.api_version)
    listener = current_session().listener_name
    endpoint_type = getattr(request, "endpoint_type", BROKERS_ENDPOINT_TYPE)
    extra = {"endpoint_type": endpoint_type} if header.api_version >= 1 else {}
    if endpoint_type != BROKERS_ENDPOINT_TYPE:
        return build(m.DescribeClusterResponse, throttle_time=datetime.timedelta(0),
                     error_code=ErrorCode.unsupported_endpoint_type,
                     error_message=f"endpoint type {endpoint_type}: only brokers (1) are described",
                     cluster_id=state.cluster_id, brokers=(), **extra)
    if state.cluster is not None:
        live = await state.cluster.live_brokers()
        brokers = tuple(build(m.DescribeClusterBroker, broker_id=b.node_id, host=b.endpoint_for(listener)[0],
                              port=b.endpoint_for(listener)[1], rack=b.rack) for b in live)
        controller = live[0].node_id if live else state.config.node_id
        cluster_id = state.cluster.cluster_id
    else:
        host, port = state.config.advertised_for(listener)
        brokers = (build(m.DescribeClusterBroker, broker_id=state.config.node_id, host=host, port=port, rack=None),)
        controller, cluster_id = state.config.node_id, state.cluster_id
    return build(
        m.DescribeClusterResponse, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none,
        error_message=None, cluster_id=cluster_id, controller_id=controller, brokers=brokers,
        cluster_authorized_operations=authorized_operations(
            state, Res.CLUSTER, CLUSTER_NAME, requested=request.include_cluster_authorized_operations),
        **extra)
