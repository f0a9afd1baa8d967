"""ACL bindings, binding filters and resource patterns, with Kafka's wire codes.

The numbers are Kafka's (``ResourceType``, ``PatternType``, ``AclOperation``,
``AclPermissionType`` in ``org.apache.kafka.common``): they travel in CreateAcls/DescribeAcls/
DeleteAcls and in the KIP-430 authorized-operations bit fields (bit ``1 << operation``).
One home below both sides, as Kafka's ``org.apache.kafka.common.acl``: the broker's authorizer
(``oncestream.authz``) and the client's admin (``client.admin.admin_acls``) import them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any, TypeVar

from oncestream.errors import InvalidRequestError

E = TypeVar("E", bound=IntEnum)

WILDCARD_RESOURCE = "*"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"
CLUSTER_NAME = "kafka-cluster"


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# The operations KIP-430 reports per resource type (Kafka's supported operations per type).
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE,
                         AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS,
                         AclOperation.ALTER_CONFIGS),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE,
                         AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS),
    ResourceType.CLUSTER: (AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                           AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                           AclOperation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE, AclOperation.TWO_PHASE_COMMIT),
}


@dataclass(frozen=True, order=True)
class AclBinding:
    """One ACL: who (principal, host) may or may not (permission) do what (operation) on which
    resources (type, pattern type, name)."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    def to_json(self) -> dict[str, Any]:
        return {"resource_type": int(self.resource_type), "resource_name": self.resource_name,
                "pattern_type": int(self.pattern_type), "principal": self.principal, "host": self.host,
                "operation": int(self.operation), "permission": int(self.permission)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> AclBinding:
        return cls(ResourceType(d["resource_type"]), str(d["resource_name"]), PatternType(d["pattern_type"]),
                   str(d["principal"]), str(d["host"]), AclOperation(d["operation"]),
                   AclPermissionType(d["permission"]))


def _enum(cls: type[E], value: int) -> E:
    """``value`` as a member of ``cls``; ``UNKNOWN`` for a value the enum does not have."""
    try:
        return cls(value)
    except ValueError:
        return cls["UNKNOWN"]


def binding_from_wire(resource_type: int, resource_name: str, pattern_type: int, principal: str, host: str,
                      operation: int, permission: int) -> AclBinding:
    """A binding to create, validated as Kafka's controller validates new ACLs; raises
    ``InvalidRequestError`` (INVALID_REQUEST) for anything that is a filter, not a binding."""
    rtype = _enum(ResourceType, resource_type)
    ptype = _enum(PatternType, pattern_type)
    op = _enum(AclOperation, operation)
    perm = _enum(AclPermissionType, permission)
    if rtype in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise InvalidRequestError(f"invalid resource type {resource_type}")
    if ptype not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidRequestError(f"invalid pattern type {pattern_type}: only LITERAL and PREFIXED ACLs exist")
    if op in (AclOperation.UNKNOWN, AclOperation.ANY):
        raise InvalidRequestError(f"invalid operation {operation}")
    if perm not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        raise InvalidRequestError(f"invalid permission type {permission}")
    if not resource_name:
        raise InvalidRequestError("resource name must not be empty")
    if rtype == ResourceType.CLUSTER and (ptype != PatternType.LITERAL or resource_name != CLUSTER_NAME):
        raise InvalidRequestError(f"the only cluster resource is the literal {CLUSTER_NAME!r}")
    kind, sep, name = principal.partition(":")
    if not sep or not kind or not name:
        raise InvalidRequestError(f"principal {principal!r} is not of the form Type:name")
    if not host:
        raise InvalidRequestError("host must not be empty (use '*' for any host)")
    return AclBinding(rtype, resource_name, ptype, principal, host, op, perm)


@dataclass(frozen=True)
class AclBindingFilter:
    """What DescribeAcls/DeleteAcls select: ANY matches every value, None every name, principal
    or host; the MATCH pattern type selects the ACLs that would apply to ``resource_name``."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    @classmethod
    def from_wire(cls, resource_type: int, resource_name: str | None, pattern_type: int, principal: str | None,
                  host: str | None, operation: int, permission: int) -> AclBindingFilter:
        """A filter from a request; ``InvalidRequestError`` when a field is UNKNOWN."""
        f = cls(_enum(ResourceType, resource_type), resource_name, _enum(PatternType, pattern_type), principal, host,
                _enum(AclOperation, operation), _enum(AclPermissionType, permission))
        if ResourceType.UNKNOWN in (f.resource_type,) or f.pattern_type == PatternType.UNKNOWN \
                or f.operation == AclOperation.UNKNOWN or f.permission == AclPermissionType.UNKNOWN:
            raise InvalidRequestError("filter holds an UNKNOWN resource type, pattern type, operation or permission")
        return f

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type not in (ResourceType.ANY, acl.resource_type):
            return False
        if not self._pattern_matches(acl):
            return False
        return ((self.principal is None or self.principal == acl.principal)
                and (self.host is None or self.host == acl.host)
                and self.operation in (AclOperation.ANY, acl.operation)
                and self.permission in (AclPermissionType.ANY, acl.permission))

    def _pattern_matches(self, acl: AclBinding) -> bool:
        # Kafka's ResourcePatternFilter.matches.
        ptype = self.pattern_type
        if ptype not in (PatternType.ANY, PatternType.MATCH) and ptype != acl.pattern_type:
            return False
        if self.resource_name is None:
            return True
        if ptype in (PatternType.ANY, acl.pattern_type):
            return self.resource_name == acl.resource_name
        if acl.pattern_type == PatternType.LITERAL:  # MATCH
            return acl.resource_name in (self.resource_name, WILDCARD_RESOURCE)
        return self.resource_name.startswith(acl.resource_name)
