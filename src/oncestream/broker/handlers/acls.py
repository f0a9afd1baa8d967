"""CreateAcls (30), DescribeAcls (29), DeleteAcls (31), v1-v3 (kio has no v0 schemas; Kafka 4
dropped v0 too).

Without an authorizer every answer is SECURITY_DISABLED, as Kafka answers. Create and Delete
need ALTER on the cluster, Describe needs DESCRIBE on it (CLUSTER_AUTHORIZATION_FAILED
otherwise). A change is written to the ACL file (authz/store.py) before the authorizer applies
it and before the answer leaves: what a client was told exists survives a crash.
"""

from __future__ import annotations

import asyncio
import datetime
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from oncestream.broker.authorize import Op, Res, authorize
from oncestream.broker.state import BrokerState
from oncestream.errors import OnceStreamError
from oncestream.protocol import api_keys as k
from oncestream.protocol.acl import AclBinding, AclBindingFilter, binding_from_wire
from oncestream.protocol.codec import RequestHeader, build
from oncestream.protocol.schemas import response_module

if TYPE_CHECKING:
    from oncestream.protocol.request_types import CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest

_ZERO = datetime.timedelta(0)


async def _persist(state: BrokerState, acls: list[AclBinding]) -> None:
    """Write the whole new ACL set durably, off the event loop."""
    await asyncio.get_running_loop().run_in_executor(state.disk_executor, state.acl_store.save, acls)


async def handle_create(state: BrokerState, header: RequestHeader, request: CreateAclsRequest) -> object:
    m = response_module(k.CREATE_ACLS, header.api_version)

    def result(code: ErrorCode, message: str | None = None) -> Any:
        return build(m.AclCreationResult, error_code=code, error_message=message)

    authorizer = state.authorizer
    if authorizer is None:
        answers = [result(ErrorCode.security_disabled, "no authorizer is configured") for _ in request.creations]
    elif not authorize(state, Op.ALTER, Res.CLUSTER):
        answers = [result(ErrorCode.cluster_authorization_failed) for _ in request.creations]
    else:
        answers, valid = [], []
        for c in request.creations:
            try:
                valid.append(binding_from_wire(c.resource_type, c.resource_name, c.resource_pattern_type,
                                               c.principal, c.host, c.operation, c.permission_type))
                answers.append(result(ErrorCode.none))
            except OnceStreamError as exc:
                answers.append(result(exc.code, str(exc)))
        if valid:
            async with state.acl_write_lock:
                current = authorizer.acls()
                new = sorted(set(current) | set(valid))
                try:
                    if len(new) != len(current):
                        await _persist(state, new)
                except OSError as exc:
                    answers = [a if a.error_code != ErrorCode.none else
                               result(ErrorCode.kafka_storage_error, f"ACLs not stored: {exc}") for a in answers]
                else:
                    for acl in valid:
                        authorizer.add(acl)
    return build(m.CreateAclsResponse, throttle_time=_ZERO, results=tuple(answers))


def _filter_of(f: Any, name_attr: str = "resource_name_filter") -> AclBindingFilter:
    return AclBindingFilter.from_wire(f.resource_type_filter, getattr(f, name_attr), f.pattern_type_filter,
                                      f.principal_filter, f.host_filter, f.operation, f.permission_type)


def handle_describe(state: BrokerState, header: RequestHeader, request: DescribeAclsRequest) -> object:
    m = response_module(k.DESCRIBE_ACLS, header.api_version)

    def answer(code: ErrorCode, message: str | None = None, resources: tuple[Any, ...] = ()) -> Any:
        return build(m.DescribeAclsResponse, throttle_time=_ZERO, error_code=code, error_message=message,
                     resources=resources)

    if state.authorizer is None:
        return answer(ErrorCode.security_disabled, "no authorizer is configured")
    if not authorize(state, Op.DESCRIBE, Res.CLUSTER):
        return answer(ErrorCode.cluster_authorization_failed)
    try:
        acl_filter = _filter_of(request)
    except OnceStreamError as exc:
        return answer(exc.code, str(exc))
    by_resource: dict[tuple[Any, ...], list[AclBinding]] = {}
    for acl in state.authorizer.matching(acl_filter):
        by_resource.setdefault((acl.resource_type, acl.resource_name, acl.pattern_type), []).append(acl)
    resources = tuple(
        build(m.DescribeAclsResource, resource_type=int(rtype), resource_name=name, pattern_type=int(ptype),
              acls=tuple(build(m.AclDescription, principal=a.principal, host=a.host, operation=int(a.operation),
                               permission_type=int(a.permission)) for a in acls))
        for (rtype, name, ptype), acls in by_resource.items()
    )
    return answer(ErrorCode.none, None, resources)


async def handle_delete(state: BrokerState, header: RequestHeader, request: DeleteAclsRequest) -> object:
    m = response_module(k.DELETE_ACLS, header.api_version)

    def filter_result(code: ErrorCode, message: str | None = None, matching: tuple[Any, ...] = ()) -> Any:
        return build(m.DeleteAclsFilterResult, error_code=code, error_message=message, matching_acls=matching)

    authorizer = state.authorizer
    if authorizer is None:
        results = [filter_result(ErrorCode.security_disabled, "no authorizer is configured") for _ in request.filters]
        return build(m.DeleteAclsResponse, throttle_time=_ZERO, filter_results=tuple(results))
    if not authorize(state, Op.ALTER, Res.CLUSTER):
        results = [filter_result(ErrorCode.cluster_authorization_failed) for _ in request.filters]
        return build(m.DeleteAclsResponse, throttle_time=_ZERO, filter_results=tuple(results))
    async with state.acl_write_lock:
        per_filter: list[tuple[ErrorCode, str | None, list[AclBinding]]] = []
        doomed: set[AclBinding] = set()
        for f in request.filters:
            try:
                matched = authorizer.matching(_filter_of(f))
            except OnceStreamError as exc:
                per_filter.append((exc.code, str(exc), []))
                continue
            per_filter.append((ErrorCode.none, None, matched))
            doomed.update(matched)
        if doomed:
            try:
                await _persist(state, [acl for acl in authorizer.acls() if acl not in doomed])
            except OSError as exc:
                per_filter = [(ErrorCode.kafka_storage_error, f"ACLs not stored: {exc}", [])
                              if code == ErrorCode.none else (code, msg, []) for code, msg, _ in per_filter]
                doomed = set()
            for acl in doomed:
                authorizer.remove(acl)
    results = [
        filter_result(code, message, tuple(
            build(m.DeleteAclsMatchingAcl, error_code=ErrorCode.none, error_message=None,
                  resource_type=int(a.resource_type), resource_name=a.resource_name, pattern_type=int(a.pattern_type),
                  principal=a.principal, host=a.host, operation=int(a.operation), permission_type=int(a.permission))
            for a in matched))
        for code, message, matched in per_filter
    ]
    return build(m.DeleteAclsResponse, throttle_time=_ZERO, filter_results=tuple(results))
