"""KIP-554 DescribeUserScramCredentials / AlterUserScramCredentials handler rules: per-user
errors as Kafka gives them, nothing stored for a refused user, never a password."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from kio.schema.alter_user_scram_credentials.v0.response import AlterUserScramCredentialsResponse
from kio.schema.describe_user_scram_credentials.v0.response import DescribeUserScramCredentialsResponse
from kio.schema.errors import ErrorCode

from oncestream.broker.handlers import scram_admin
from oncestream.broker.sasl.credentials import ScramCredentialStore
from oncestream.protocol.api_keys import ALTER_USER_SCRAM_CREDENTIALS, DESCRIBE_USER_SCRAM_CREDENTIALS
from oncestream.protocol.codec import RequestHeader
from oncestream.protocol.schemas import request_module
from tests.support.narrow import of_type

SHA256, SHA512 = 1, 2


def _state(tmp_path):
    return SimpleNamespace(scram_store=ScramCredentialStore.open(tmp_path), authorizer=None)


def _alter(state, upserts=(), deletions=()):
    m = request_module(ALTER_USER_SCRAM_CREDENTIALS, 0)
    request = m.AlterUserScramCredentialsRequest(
        upsertions=tuple(m.ScramCredentialUpsertion(name=n, mechanism=mech, iterations=i, salt=b"salt",
                                                    salted_password=b"x" * 64) for n, mech, i in upserts),
        deletions=tuple(m.ScramCredentialDeletion(name=n, mechanism=mech) for n, mech in deletions))
    header = RequestHeader(ALTER_USER_SCRAM_CREDENTIALS, 0, 1, None, 0)
    response = of_type(asyncio.run(scram_admin.handle_alter(state, header, request)), AlterUserScramCredentialsResponse)
    return {r.user: r.error_code for r in response.results}


def _describe(state, names):
    m = request_module(DESCRIBE_USER_SCRAM_CREDENTIALS, 0)
    users = None if names is None else tuple(m.UserName(name=n) for n in names)
    header = RequestHeader(DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 1, None, 0)
    response = of_type(scram_admin.handle_describe(state, header, m.DescribeUserScramCredentialsRequest(users=users)),
                       DescribeUserScramCredentialsResponse)
    return {r.user: (r.error_code, [(int(i.mechanism), i.iterations) for i in r.credential_infos])
            for r in response.results}


def test_alter_validates_per_user_and_stores_only_accepted(tmp_path):
    state = _state(tmp_path)
    assert _alter(state, upserts=[("ok", SHA512, 8192), ("low", SHA256, 4095), ("high", SHA256, 16385),
                                  ("mech", 9, 4096), ("", SHA256, 4096), ("twice", SHA256, 4096),
                                  ("twice", SHA256, 5000)],
                  deletions=[("ghost", SHA256)]) == {
        "ok": ErrorCode.none, "low": ErrorCode.unacceptable_credential,
        "high": ErrorCode.unacceptable_credential, "mech": ErrorCode.unsupported_sasl_mechanism,
        "": ErrorCode.unacceptable_credential, "twice": ErrorCode.duplicate_resource,
        "ghost": ErrorCode.resource_not_found}
    assert _describe(state, None) == {"ok": (ErrorCode.none, [(SHA512, 8192)])}
    assert set(ScramCredentialStore.open(tmp_path).users()) == {"ok"}  # durable


def test_describe_unknown_and_duplicate_users(tmp_path):
    state = _state(tmp_path)
    _alter(state, upserts=[("amy", SHA256, 4096), ("amy", SHA512, 4096)])
    got = _describe(state, ["amy", "nobody", "dup", "dup"])
    assert got["amy"] == (ErrorCode.none, [(SHA256, 4096), (SHA512, 4096)])
    assert got["nobody"][0] == ErrorCode.resource_not_found
    assert got["dup"][0] == ErrorCode.duplicate_resource
    assert _alter(state, deletions=[("amy", SHA256)]) == {"amy": ErrorCode.none}
    assert _describe(state, ["amy"])["amy"] == (ErrorCode.none, [(SHA512, 4096)])


def _as(principal: str) -> None:
    """Run the next handler calls as ``principal`` (what SASL sets on a real connection)."""
    from oncestream.broker.connection_context import start_session
    start_session(("127.0.0.1", 5555), listener_name="SASL", security_protocol="SASL_PLAINTEXT").principal = principal


def test_kip554_needs_describe_and_alter_on_the_cluster(tmp_path):
    """As Kafka: DESCRIBE on CLUSTER to describe, ALTER on CLUSTER to alter; a refusal is
    CLUSTER_AUTHORIZATION_FAILED for every user named and stores nothing."""
    import contextvars

    from oncestream.authz.authorizer import StandardAuthorizer
    from oncestream.protocol.acl import (
        CLUSTER_NAME,
        AclBinding,
        AclOperation,
        AclPermissionType,
        PatternType,
        ResourceType,
    )

    state = _state(tmp_path)
    _alter(state, upserts=[("amy", SHA256, 4096)])  # no authorizer yet: allowed
    state.authorizer = StandardAuthorizer([AclBinding(
        ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL, "User:alice", "*", AclOperation.DESCRIBE,
        AclPermissionType.ALLOW)], super_users=["User:admin"])

    def as_alice() -> tuple[dict, dict]:
        _as("User:alice")
        return _describe(state, ["amy"]), _alter(state, upserts=[("eve", SHA256, 4096)], deletions=[("amy", SHA256)])

    described, altered = contextvars.copy_context().run(as_alice)
    assert described == {"amy": (ErrorCode.none, [(SHA256, 4096)])}
    assert altered == {"eve": ErrorCode.cluster_authorization_failed, "amy": ErrorCode.cluster_authorization_failed}
    assert set(state.scram_store.users()) == {"amy"}

    def as_bob() -> dict:
        _as("User:bob")
        return _describe(state, ["amy", "amy"])

    assert contextvars.copy_context().run(as_bob) == {"amy": (ErrorCode.cluster_authorization_failed, [])}

    def as_admin() -> dict:
        _as("User:admin")
        return _alter(state, deletions=[("amy", SHA256)])

    assert contextvars.copy_context().run(as_admin) == {"amy": ErrorCode.none}
    assert state.scram_store.users() == {}
