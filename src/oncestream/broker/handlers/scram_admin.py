"""DescribeUserScramCredentials (key 50) and AlterUserScramCredentials (key 51), KIP-554.

Upsertions carry the salt and SaltedPassword (the client runs PBKDF2); the broker derives and
stores StoredKey and ServerKey only. Every accepted change is in the durable store
(``broker/sasl/credentials.py``; in cluster mode PostgreSQL's, cluster/pg/scram.py, written
without blocking the event loop) before it is acknowledged.

With an authorizer, describing needs DESCRIBE and altering ALTER on the CLUSTER resource (as
Kafka's handlers); a refused request answers CLUSTER_AUTHORIZATION_FAILED for every user named.
"""

from __future__ import annotations

import datetime
from collections import Counter
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from oncestream.broker.authorize import Op, Res, authorize
from oncestream.broker.sasl.scram import (
    MAX_ITERATIONS,
    MECHANISM_BY_TYPE,
    MIN_ITERATIONS,
    TYPE_BY_NAME,
    ScramCredential,
    credential_from_salted_password,
)
from oncestream.broker.state import BrokerState
from oncestream.cluster.pg.errors import MetadataStoreError
from oncestream.cluster.pg.scram import PgScramCredentialStore
from oncestream.protocol.api_keys import ALTER_USER_SCRAM_CREDENTIALS, DESCRIBE_USER_SCRAM_CREDENTIALS
from oncestream.protocol.codec import RequestHeader, build
from oncestream.protocol.schemas import response_module

if TYPE_CHECKING:
    from oncestream.protocol.request_types import AlterUserScramCredentialsRequest, DescribeUserScramCredentialsRequest


def handle_describe(state: BrokerState, header: RequestHeader, request: DescribeUserScramCredentialsRequest) -> object:
    m = response_module(DESCRIBE_USER_SCRAM_CREDENTIALS, header.api_version)
    if not authorize(state, Op.DESCRIBE, Res.CLUSTER):
        refused = ErrorCode.cluster_authorization_failed
        return build(m.DescribeUserScramCredentialsResponse, throttle_time=datetime.timedelta(0),
                     error_code=refused, error_message=None, results=tuple(
                         build(m.DescribeUserScramCredentialsResult, user=name, error_code=refused,
                               error_message=None, credential_infos=())
                         for name in dict.fromkeys(u.name for u in request.users or ())))
    users = state.scram_store.users()
    names = [u.name for u in request.users] if request.users else sorted(users)
    counts = Counter(names)
    results = []
    for name in dict.fromkeys(names):
        if counts[name] > 1:
            results.append(build(m.DescribeUserScramCredentialsResult, user=name, error_code=ErrorCode.duplicate_resource,
                                 error_message=f"Cannot describe SCRAM credentials for the same user twice: {name}",
                                 credential_infos=()))
        elif name not in users:
            results.append(build(m.DescribeUserScramCredentialsResult, user=name, error_code=ErrorCode.resource_not_found,
                                 error_message=f"Attempt to describe a user credential that does not exist: {name}",
                                 credential_infos=()))
        else:
            infos = tuple(build(m.CredentialInfo, mechanism=TYPE_BY_NAME[mech], iterations=cred.iterations)
                          for mech, cred in sorted(users[name].items()))
            results.append(build(m.DescribeUserScramCredentialsResult, user=name, error_code=ErrorCode.none,
                                 error_message=None, credential_infos=infos))
    return build(m.DescribeUserScramCredentialsResponse, throttle_time=datetime.timedelta(0),
                 error_code=ErrorCode.none, error_message=None, results=tuple(results))


def _user_error(state: BrokerState, user: str, entries: list[Any]) -> tuple[ErrorCode, str] | None:
    """Kafka's per-user validation of one AlterUserScramCredentials request."""
    if not user:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    seen: set[int] = set()
    for kind, entry in entries:
        if entry.mechanism not in MECHANISM_BY_TYPE:
            return ErrorCode.unsupported_sasl_mechanism, f"Unknown SCRAM mechanism {entry.mechanism}"
        if entry.mechanism in seen:
            return ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request"
        seen.add(entry.mechanism)
        if kind == "upsert":
            if not MIN_ITERATIONS <= entry.iterations <= MAX_ITERATIONS:
                return (ErrorCode.unacceptable_credential,
                        f"Iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}")
            if not entry.salt or not entry.salted_password:
                return ErrorCode.unacceptable_credential, "Salt and salted password must not be empty"
        elif state.scram_store.get(user, MECHANISM_BY_TYPE[entry.mechanism].name) is None:
            return ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist"
    return None


async def handle_alter(state: BrokerState, header: RequestHeader, request: AlterUserScramCredentialsRequest) -> object:
    m = response_module(ALTER_USER_SCRAM_CREDENTIALS, header.api_version)
    by_user: dict[str, list[Any]] = {}
    for d in request.deletions:
        by_user.setdefault(d.name, []).append(("delete", d))
    for u in request.upsertions:
        by_user.setdefault(u.name, []).append(("upsert", u))
    if not authorize(state, Op.ALTER, Res.CLUSTER):
        return build(m.AlterUserScramCredentialsResponse, throttle_time=datetime.timedelta(0), results=tuple(
            build(m.AlterUserScramCredentialsResult, user=user, error_code=ErrorCode.cluster_authorization_failed,
                  error_message=None) for user in by_user))
    errors: dict[str, tuple[ErrorCode, str]] = {}
    upserts: list[tuple[str, str, ScramCredential]] = []
    deletions: list[tuple[str, str]] = []
    for user, entries in by_user.items():
        error = _user_error(state, user, entries)
        if error is not None:
            errors[user] = error
            continue
        for kind, entry in entries:
            mechanism = MECHANISM_BY_TYPE[entry.mechanism]
            if kind == "delete":
                deletions.append((user, mechanism.name))
            else:
                upserts.append((user, mechanism.name, credential_from_salted_password(
                    mechanism, bytes(entry.salted_password), bytes(entry.salt), int(entry.iterations))))
    if upserts or deletions:
        store = state.scram_store
        try:
            if isinstance(store, PgScramCredentialStore):  # cluster mode: without blocking the loop
                await store.apply_async(upserts, deletions)
            else:
                store.apply(upserts, deletions)
        except (OSError, MetadataStoreError) as exc:
            for user in {*(u for u, _, _ in upserts), *(u for u, _ in deletions)}:
                errors[user] = (ErrorCode.kafka_storage_error, f"credential store not written: {exc}")
    results = tuple(
        build(m.AlterUserScramCredentialsResult, user=user,
              error_code=errors[user][0] if user in errors else ErrorCode.none,
              error_message=errors[user][1] if user in errors else None)
        for user in by_user)
    return build(m.AlterUserScramCredentialsResponse, throttle_time=datetime.timedelta(0), results=results)
