"""DescribeClientQuotas (key 48) and AlterClientQuotas (key 49), KIP-546.

With an authorizer, describing needs DESCRIBE_CONFIGS and altering ALTER_CONFIGS on the CLUSTER
(Kafka's handlers); a refused describe answers CLUSTER_AUTHORIZATION_FAILED, a refused alter
answers it for every entry. An invalid entity, key or value answers INVALID_REQUEST for its
entry with Kafka's message; the other entries are applied. Accepted changes are in
``state.client_quota_store`` (``client-quotas.json``, broker/quotas/store.py, on the disk threads;
PostgreSQL in cluster mode) before they are answered,
and every connection is measured against them from then on. One change at a time
(``BrokerState.client_quota_lock``): each starts from the values the previous one left.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from oncestream.broker.authorize import Op, Res, authorize
from oncestream.broker.disk_step import run_disk_step
from oncestream.broker.quotas.entities import ClientQuotaConfigs, QuotaEntity, QuotaOp
from oncestream.broker.state import BrokerState
from oncestream.errors import InvalidRequestError
from oncestream.protocol.api_keys import ALTER_CLIENT_QUOTAS, DESCRIBE_CLIENT_QUOTAS
from oncestream.protocol.codec import RequestHeader, build
from oncestream.protocol.schemas import response_module

if TYPE_CHECKING:
    from oncestream.protocol.request_types import AlterClientQuotasRequest, DescribeClientQuotasRequest

_ZERO = datetime.timedelta(0)


def handle_describe(state: BrokerState, header: RequestHeader, request: DescribeClientQuotasRequest) -> object:
    m = response_module(DESCRIBE_CLIENT_QUOTAS, header.api_version)
    if not authorize(state, Op.DESCRIBE_CONFIGS, Res.CLUSTER):
        return build(m.DescribeClientQuotasResponse, throttle_time=_ZERO, error_code=ErrorCode.cluster_authorization_failed,
                     error_message=None, entries=None)
    try:
        found = state.client_quotas.configs.describe(
            ((c.entity_type, int(c.match_type), c.match) for c in request.components), bool(request.strict))
    except InvalidRequestError as exc:
        return build(m.DescribeClientQuotasResponse, throttle_time=_ZERO, error_code=ErrorCode.invalid_request,
                     error_message=str(exc), entries=None)
    entries = tuple(
        build(m.EntryData,
              entity=tuple(build(m.EntityData, entity_type=kind, entity_name=name) for kind, name in entity.parts()),
              values=tuple(build(m.ValueData, key=key, value=value) for key, value in sorted(values.items())))
        for entity, values in found)
    return build(m.DescribeClientQuotasResponse, throttle_time=_ZERO, error_code=ErrorCode.none, error_message=None,
                 entries=entries)


async def handle_alter(state: BrokerState, header: RequestHeader, request: AlterClientQuotasRequest) -> object:
    m = response_module(ALTER_CLIENT_QUOTAS, header.api_version)
    allowed = authorize(state, Op.ALTER_CONFIGS, Res.CLUSTER)
    answers: list[tuple[Any, ErrorCode, str | None]] = []
    async with state.client_quota_lock:
        configs: ClientQuotaConfigs = state.client_quotas.configs
        changed = False
        for entry in request.entries:
            if not allowed:
                answers.append((entry.entity, ErrorCode.cluster_authorization_failed, None))
                continue
            try:
                entity = QuotaEntity.from_parts((e.entity_type, e.entity_name) for e in entry.entity)
                configs = configs.altered(entity, (QuotaOp(op.key, float(op.value), bool(op.remove)) for op in entry.ops))
            except InvalidRequestError as exc:
                answers.append((entry.entity, ErrorCode.invalid_request, str(exc)))
                continue
            changed = True
            answers.append((entry.entity, ErrorCode.none, None))
        if changed and not request.validate_only:
            final = configs

            def install() -> None:
                state.client_quotas.configs = final

            await run_disk_step(state, lambda: state.client_quota_store.save(final),
                                install, lambda: None, "client quota change")
    return build(m.AlterClientQuotasResponse, throttle_time=_ZERO, entries=tuple(
        build(m.EntryData, error_code=code, error_message=message,
              entity=tuple(build(m.EntityData, entity_type=e.entity_type, entity_name=e.entity_name) for e in entity))
        for entity, code, message in answers))
