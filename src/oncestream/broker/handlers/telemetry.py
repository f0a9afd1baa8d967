"""GetTelemetrySubscriptions (71), PushTelemetry (72) and ListConfigResources (74): KIP-714 client
metrics (rules in ``broker/telemetry/manager.py``) and KIP-1142's listing of config resources.

A client is matched on the client.id of its request header, the software name and version of its
ApiVersions request, and its source address and port. An accepted push is decompressed, decoded
(OTLP MetricsData) and its values recorded for ``/metrics``; a payload that does not decompress or
decode answers INVALID_RECORD, as Kafka's exporter failure does not (Kafka answers NONE and logs):
here the client learns its payload was dropped.
"""

from __future__ import annotations

import datetime
import logging
import uuid
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from oncestream.broker.authorize import Op, Res, authorize
from oncestream.broker.connection_context import current_session
from oncestream.broker.state import BrokerState
from oncestream.broker.telemetry import otlp
from oncestream.broker.telemetry.manager import ACCEPTED_COMPRESSION_TYPES, TelemetryRequestError
from oncestream.broker.telemetry.subscriptions import ClientMetadata
from oncestream.errors import OnceStreamError
from oncestream.protocol.api_keys import GET_TELEMETRY_SUBSCRIPTIONS, LIST_CONFIG_RESOURCES, PUSH_TELEMETRY
from oncestream.protocol.codec import RequestHeader, build
from oncestream.protocol.compression import COMPRESSION_NONE, decompress
from oncestream.protocol.config_resources import RESOURCE_BROKER, RESOURCE_CLIENT_METRICS, RESOURCE_GROUP, RESOURCE_TOPIC
from oncestream.protocol.schemas import response_module

if TYPE_CHECKING:
    from oncestream.protocol.request_types import (
        GetTelemetrySubscriptionsRequest,
        ListConfigResourcesRequest,
        PushTelemetryRequest,
    )

log = logging.getLogger(__name__)
_ZERO = datetime.timedelta(0)


def _metadata(header: RequestHeader):  # type: ignore[no-untyped-def]
    session = current_session()

    def of(instance_id: uuid.UUID) -> ClientMetadata:
        return ClientMetadata(
            client_instance_id=str(instance_id), client_id=header.client_id or "",
            client_software_name=session.client_software_name or "",
            client_software_version=session.client_software_version or "",
            client_source_address=session.peer_host, client_source_port=str(session.peer_port or ""))
    return of


def handle_get_subscriptions(state: BrokerState, header: RequestHeader,
                             request: GetTelemetrySubscriptionsRequest) -> object:
    m = response_module(GET_TELEMETRY_SUBSCRIPTIONS, header.api_version)
    try:
        instance = state.telemetry.manager.get_subscriptions(request.client_instance_id, _metadata(header))
    except TelemetryRequestError as exc:
        return build(m.GetTelemetrySubscriptionsResponse, throttle_time=_ZERO, error_code=exc.code,
                     client_instance_id=request.client_instance_id or uuid.UUID(int=0), subscription_id=0,
                     accepted_compression_types=(), push_interval=_ZERO, telemetry_max_bytes=0,
                     delta_temporality=True, requested_metrics=())
    sub = instance.subscription
    return build(
        m.GetTelemetrySubscriptionsResponse, throttle_time=_ZERO, error_code=ErrorCode.none,
        client_instance_id=instance.instance_id, subscription_id=sub.subscription_id,
        accepted_compression_types=ACCEPTED_COMPRESSION_TYPES,
        push_interval=datetime.timedelta(milliseconds=sub.interval_ms),
        telemetry_max_bytes=state.telemetry.manager.max_bytes, delta_temporality=True,
        requested_metrics=sub.metrics)


def handle_push(state: BrokerState, header: RequestHeader, request: PushTelemetryRequest) -> object:
    m = response_module(PUSH_TELEMETRY, header.api_version)
    telemetry = state.telemetry
    code = ErrorCode.none
    try:
        accepted = telemetry.manager.push(request.client_instance_id, _metadata(header), request.subscription_id,
                                          request.compression_type, bytes(request.metrics), request.terminating)
        if accepted.payload:
            raw = accepted.payload if accepted.compression_type == COMPRESSION_NONE else \
                decompress(accepted.compression_type, accepted.payload)
            _resource, points = otlp.decode(raw)
            meta = accepted.instance.metadata
            telemetry.received.record({
                "client_id": meta.client_id, "client_instance_id": meta.client_instance_id,
                "client_software_name": meta.client_software_name,
                "client_software_version": meta.client_software_version}, points, accepted.instance.expiry_ms())
    except TelemetryRequestError as exc:
        code = exc.code
        log.debug("PushTelemetry refused: %s", exc)
    except (OnceStreamError, ValueError, OSError) as exc:  # a payload that does not decompress / decode
        code = ErrorCode.invalid_record
        log.info("PushTelemetry payload dropped: %s", exc)
    telemetry.manager.expire()
    return build(m.PushTelemetryResponse, throttle_time=_ZERO, error_code=code)


# The types ListConfigResources v1 takes (Kafka's supportedResourceTypes); another type answers
# UNSUPPORTED_VERSION. BROKER_LOGGER is accepted and lists nothing: this broker has no such resource.
_RESOURCE_BROKER_LOGGER = 8
_LISTABLE = (RESOURCE_TOPIC, RESOURCE_BROKER, _RESOURCE_BROKER_LOGGER, RESOURCE_CLIENT_METRICS, RESOURCE_GROUP)


def handle_list_config_resources(state: BrokerState, header: RequestHeader, request: ListConfigResourcesRequest) -> object:
    """v0 (ListClientMetricsResources) lists ClientMetrics resources; v1 the asked types. Needs
    DESCRIBE_CONFIGS on the cluster (Kafka's handler)."""
    m = response_module(LIST_CONFIG_RESOURCES, header.api_version)
    if not authorize(state, Op.DESCRIBE_CONFIGS, Res.CLUSTER):
        return build(m.ListConfigResourcesResponse, throttle_time=_ZERO,
                     error_code=ErrorCode.cluster_authorization_failed, config_resources=())
    types = tuple(getattr(request, "resource_types", ()) or ()) if header.api_version >= 1 else (RESOURCE_CLIENT_METRICS,)
    if header.api_version >= 1 and not types:
        types = _LISTABLE
    if any(t not in _LISTABLE for t in types):
        return build(m.ListConfigResourcesResponse, throttle_time=_ZERO, error_code=ErrorCode.unsupported_version,
                     config_resources=())
    found: list[tuple[int, str]] = []
    for kind in types:
        if kind == RESOURCE_CLIENT_METRICS:
            found += [(kind, name) for name in state.telemetry.manager.resource_names()]
        elif kind == RESOURCE_TOPIC:
            found += [(kind, name) for name in sorted(state.logs.topics())]
        elif kind == RESOURCE_BROKER:
            found.append((kind, str(state.config.node_id)))
        elif kind == RESOURCE_GROUP:
            found += [(kind, name) for name, configs in sorted(state.shares.group_configs.items()) if configs]
    if header.api_version == 0:
        resources = tuple(build(m.ConfigResource, resource_name=name) for _kind, name in found)
    else:
        resources = tuple(build(m.ConfigResource, resource_name=name, resource_type=kind) for kind, name in found)
    return build(m.ListConfigResourcesResponse, throttle_time=_ZERO, error_code=ErrorCode.none,
                 config_resources=resources)
