"""The one helper every handler calls to authorize a request: reads the connection's principal
and peer host (``connection_context``) and asks the broker's authorizer. Without
``authorizer.class.name`` there is no authorizer and everything is allowed, as in Kafka."""

from __future__ import annotations

from collections.abc import Iterable

from oncestream.authz.authorizer import AUTHORIZED_OPERATIONS_OMITTED
from oncestream.broker.connection_context import current_session
from oncestream.broker.state import BrokerState
from oncestream.protocol.acl import CLUSTER_NAME, SUPPORTED_OPERATIONS, AclOperation, ResourceType

Op = AclOperation
Res = ResourceType


def authorize(state: BrokerState, op: AclOperation, rtype: ResourceType, name: str = CLUSTER_NAME) -> bool:
    """May the current connection perform ``op`` on the resource (the cluster by default)?"""
    authorizer = state.authorizer
    if authorizer is None:
        return True
    session = current_session()
    return authorizer.authorize(session.principal, session.peer_host, op, rtype, name)


def authorize_any(state: BrokerState, op: AclOperation, rtype: ResourceType) -> bool:
    """Is ``op`` allowed on at least one resource of ``rtype`` (Kafka's authorizeByResourceType)?"""
    authorizer = state.authorizer
    if authorizer is None:
        return True
    session = current_session()
    return authorizer.authorize_any(session.principal, session.peer_host, op, rtype)


def authorized_names(state: BrokerState, op: AclOperation, rtype: ResourceType, names: Iterable[str]) -> set[str]:
    """The names among ``names`` on which ``op`` is allowed."""
    return {name for name in names if authorize(state, op, rtype, name)}


def authorized_operations(state: BrokerState, rtype: ResourceType, name: str, *, requested: bool) -> int:
    """KIP-430's ``authorized_operations`` field: the allowed operations' bit field when the client
    asked for it, else the 'omitted' value (INT32_MIN)."""
    if not requested:
        return AUTHORIZED_OPERATIONS_OMITTED
    authorizer = state.authorizer
    if authorizer is None:
        bits = 0
        for op in SUPPORTED_OPERATIONS.get(rtype, ()):
            bits |= 1 << int(op)
        return bits
    session = current_session()
    return authorizer.authorized_operations(session.principal, session.peer_host, rtype, name)
