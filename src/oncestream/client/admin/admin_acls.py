"""The ACL methods of ``Admin`` (CreateAcls, DescribeAcls, DeleteAcls), shaped like
confluent-kafka's AdminClient: the same ``AclBinding`` / ``AclBindingFilter`` field order and
enum names, but, as the rest of ``Admin``, returning results instead of futures. The binding
types are the ones the broker uses (``oncestream.protocol.acl``), re-exported here."""

from __future__ import annotations

from collections.abc import Coroutine, Iterable
from typing import Any, TypeVar

from oncestream.client.common.cluster import Cluster
from oncestream.client.common.errors import BrokerResponseError, KafkaError
from oncestream.protocol.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from oncestream.protocol.api_keys import CREATE_ACLS, DELETE_ACLS, DESCRIBE_ACLS
from oncestream.protocol.codec import build

T = TypeVar("T")

ResourcePatternType = PatternType  # confluent-kafka's name

__all__ = ["AclAdmin", "AclBinding", "AclBindingFilter", "AclOperation", "AclPermissionType",
           "ResourcePatternType", "ResourceType"]


def _binding(resource_type: int, name: str, pattern_type: int, principal: str, host: str, operation: int,
             permission: int) -> AclBinding:
    return AclBinding(ResourceType(resource_type), name, PatternType(pattern_type), principal, host,
                      AclOperation(operation), AclPermissionType(permission))


class AclAdmin:
    """Mixed into ``Admin``; uses its ``_run`` and ``_controller``."""

    _cluster: Cluster

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float | None) -> T:  # provided by Admin
        raise NotImplementedError

    async def _controller(self) -> int | None:  # provided by Admin
        raise NotImplementedError

    def create_acls(self, acls: Iterable[AclBinding], timeout: float | None = None) -> dict[AclBinding, KafkaError | None]:
        """Create each binding; per binding None (created, or already there) or the error
        (CLUSTER_AUTHORIZATION_FAILED without ALTER on the cluster, INVALID_REQUEST, ...)."""
        wanted = list(acls)

        async def run() -> dict[AclBinding, KafkaError | None]:
            def make(m: Any, version: int) -> Any:
                return build(m.CreateAclsRequest, creations=tuple(
                    build(m.AclCreation, resource_type=int(a.resource_type), resource_name=a.resource_name,
                          resource_pattern_type=int(a.pattern_type), principal=a.principal, host=a.host,
                          operation=int(a.operation), permission_type=int(a.permission))
                    for a in wanted))

            response = await self._cluster.send(await self._controller(), CREATE_ACLS, make, min_version=1)
            return {a: None if not r.error_code else KafkaError(int(r.error_code), r.error_message or None)
                    for a, r in zip(wanted, response.results)}

        return self._run(run(), timeout)

    def describe_acls(self, acl_filter: AclBindingFilter, timeout: float | None = None) -> list[AclBinding]:
        """The bindings the filter selects; raises ``KafkaException`` when the broker refuses
        (e.g. CLUSTER_AUTHORIZATION_FAILED without DESCRIBE on the cluster)."""

        async def run() -> list[AclBinding]:
            def make(m: Any, version: int) -> Any:
                f = acl_filter
                return build(m.DescribeAclsRequest, resource_type_filter=int(f.resource_type),
                             resource_name_filter=f.resource_name, pattern_type_filter=int(f.pattern_type),
                             principal_filter=f.principal, host_filter=f.host, operation=int(f.operation),
                             permission_type=int(f.permission))

            response = await self._cluster.send(await self._controller(), DESCRIBE_ACLS, make, min_version=1)
            if response.error_code:
                raise BrokerResponseError(int(response.error_code), response.error_message or "")
            return [_binding(r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation,
                             a.permission_type) for r in response.resources for a in r.acls]

        return self._run(run(), timeout)

    def delete_acls(self, filters: Iterable[AclBindingFilter],
                    timeout: float | None = None) -> dict[AclBindingFilter, list[AclBinding] | KafkaError]:
        """Delete what each filter selects; per filter the deleted bindings or the error."""
        wanted = list(filters)

        async def run() -> dict[AclBindingFilter, list[AclBinding] | KafkaError]:
            def make(m: Any, version: int) -> Any:
                return build(m.DeleteAclsRequest, filters=tuple(
                    build(m.DeleteAclsFilter, resource_type_filter=int(f.resource_type),
                          resource_name_filter=f.resource_name, pattern_type_filter=int(f.pattern_type),
                          principal_filter=f.principal, host_filter=f.host, operation=int(f.operation),
                          permission_type=int(f.permission))
                    for f in wanted))

            response = await self._cluster.send(await self._controller(), DELETE_ACLS, make, min_version=1)
            out: dict[AclBindingFilter, list[AclBinding] | KafkaError] = {}
            for f, r in zip(wanted, response.filter_results):
                if r.error_code:
                    out[f] = KafkaError(int(r.error_code), r.error_message or None)
                else:
                    out[f] = [_binding(a.resource_type, a.resource_name, a.pattern_type, a.principal, a.host,
                                       a.operation, a.permission_type) for a in r.matching_acls]
            return out

        return self._run(run(), timeout)
