"""Kafka's StandardAuthorizer decision, as a pure object over a set of ACL bindings.

The rules (``org.apache.kafka.metadata.authorizer.StandardAuthorizerData``):

- a principal named in ``super.users`` may do everything;
- the ACLs that apply to a resource are its LITERAL ones, the LITERAL ``*`` ones and the
  PREFIXED ones whose name starts the resource's name;
- of those, an ACL matches a request when its principal is the request's or ``User:*``, its
  host the peer's or ``*``, and its operation the requested one or ALL; an ALLOW ACL also
  matches the operations it implies (DESCRIBE by READ, WRITE, DELETE and ALTER;
  DESCRIBE_CONFIGS by ALTER_CONFIGS);
- any matching DENY refuses, whatever ALLOWs say (deny wins);
- otherwise a matching ALLOW permits; with no ACL at all on the resource,
  ``allow.everyone.if.no.acl.found`` decides (false by default).
"""

from __future__ import annotations

from collections.abc import Iterable

from oncestream.protocol.acl import (
    SUPPORTED_OPERATIONS,
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

# The ALLOW operations that grant each operation besides itself and ALL.
_IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset({AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
                                      AclOperation.ALTER}),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.ALTER_CONFIGS}),
}

# KIP-430: the value of authorized_operations when the client did not ask for it.
AUTHORIZED_OPERATIONS_OMITTED = -2147483648

_Key = tuple[ResourceType, PatternType, str]


def parse_super_users(value: str) -> frozenset[str]:
    """``super.users``: principals separated by ';' (``User:admin;User:bob``)."""
    return frozenset(p.strip() for p in value.split(";") if p.strip())


class StandardAuthorizer:
    """ACL decisions for principals and hosts; holds the current ACLs, indexed by resource."""

    def __init__(self, acls: Iterable[AclBinding] = (), *, super_users: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._by_resource: dict[_Key, set[AclBinding]] = {}
        self._count_by_type: dict[ResourceType, int] = {}
        for acl in acls:
            self.add(acl)

    # --- the ACL set --------------------------------------------------------------------------

    def acls(self) -> list[AclBinding]:
        """Every ACL, in a stable order."""
        return sorted(acl for group in self._by_resource.values() for acl in group)

    def add(self, acl: AclBinding) -> bool:
        """Add one ACL; False if it was already there (creating an existing ACL is a no-op)."""
        group = self._by_resource.setdefault((acl.resource_type, acl.pattern_type, acl.resource_name), set())
        if acl in group:
            return False
        group.add(acl)
        self._count_by_type[acl.resource_type] = self._count_by_type.get(acl.resource_type, 0) + 1
        return True

    def remove(self, acl: AclBinding) -> bool:
        key = (acl.resource_type, acl.pattern_type, acl.resource_name)
        group = self._by_resource.get(key)
        if group is None or acl not in group:
            return False
        group.discard(acl)
        if not group:
            del self._by_resource[key]
        self._count_by_type[acl.resource_type] -= 1
        return True

    def matching(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """The ACLs a DescribeAcls/DeleteAcls filter selects."""
        return [acl for acl in self.acls() if acl_filter.matches(acl)]

    # --- decisions ----------------------------------------------------------------------------

    def _applicable(self, rtype: ResourceType, name: str) -> list[AclBinding]:
        found: list[AclBinding] = list(self._by_resource.get((rtype, PatternType.LITERAL, name), ()))
        if name != WILDCARD_RESOURCE:
            found.extend(self._by_resource.get((rtype, PatternType.LITERAL, WILDCARD_RESOURCE), ()))
        # Every prefix of the name (the empty one too): bounded by the name's length, not by
        # how many PREFIXED ACLs exist.
        for end in range(len(name) + 1):
            found.extend(self._by_resource.get((rtype, PatternType.PREFIXED, name[:end]), ()))
        return found

    def is_super_user(self, principal: str) -> bool:
        return principal in self.super_users

    def authorize(self, principal: str, host: str, operation: AclOperation, rtype: ResourceType, name: str) -> bool:
        """May ``principal`` connected from ``host`` perform ``operation`` on the resource?"""
        if principal in self.super_users:
            return True
        applicable = self._applicable(rtype, name)
        allowed = False
        for acl in applicable:
            if acl.principal not in (principal, WILDCARD_PRINCIPAL) or acl.host not in (host, WILDCARD_HOST):
                continue
            if acl.permission == AclPermissionType.DENY:
                if acl.operation in (operation, AclOperation.ALL):
                    return False  # deny wins
            elif (acl.operation in (operation, AclOperation.ALL)
                  or acl.operation in _IMPLIED_BY.get(operation, ())):
                allowed = True
        if allowed:
            return True
        return not applicable and self.allow_everyone_if_no_acl_found

    def authorized_operations(self, principal: str, host: str, rtype: ResourceType, name: str) -> int:
        """KIP-430: the bit field (``1 << operation``) of the operations allowed on the resource."""
        bits = 0
        for op in SUPPORTED_OPERATIONS.get(rtype, ()):
            if self.authorize(principal, host, op, rtype, name):
                bits |= 1 << int(op)
        return bits

    def authorize_any(self, principal: str, host: str, operation: AclOperation, rtype: ResourceType) -> bool:
        """Kafka's ``authorizeByResourceType``: is ``operation`` allowed on at least one resource
        of the type (an ALLOW that no DENY of the same principal covers)? An idempotent producer
        needs WRITE on some topic (KIP-679, Kafka 3.0)."""
        if principal in self.super_users:
            return True
        allows: list[AclBinding] = []
        denies: list[AclBinding] = []
        for (key_type, _, _), group in self._by_resource.items():
            if key_type != rtype:
                continue
            for acl in group:
                if (acl.principal not in (principal, WILDCARD_PRINCIPAL) or acl.host not in (host, WILDCARD_HOST)
                        or acl.operation not in (operation, AclOperation.ALL)):
                    continue
                (denies if acl.permission == AclPermissionType.DENY else allows).append(acl)
        if any(d.pattern_type == PatternType.LITERAL and d.resource_name == WILDCARD_RESOURCE for d in denies):
            return False
        deny_prefixes = [d.resource_name for d in denies if d.pattern_type == PatternType.PREFIXED]
        deny_literals = {d.resource_name for d in denies if d.pattern_type == PatternType.LITERAL}
        for allow in allows:
            if any(allow.resource_name.startswith(prefix) for prefix in deny_prefixes):
                continue
            if allow.pattern_type == PatternType.LITERAL and allow.resource_name in deny_literals:
                continue
            return True
        if allows or denies:
            return False
        return self.allow_everyone_if_no_acl_found and not self._count_by_type.get(rtype, 0)
