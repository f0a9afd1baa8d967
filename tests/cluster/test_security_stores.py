"""ACLs and SCRAM credentials in PostgreSQL (cluster/pg/acls.py, cluster/pg/scram.py), with the
file stores' interfaces: two stores on one database stand for two brokers; a change made through
one reaches the other's authorizer or SASL snapshot by NOTIFY (the poll interval is set far beyond
the test's waits, so only the notification can explain it), and concurrent changes from brokers
with stale snapshots both survive."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import pytest

from oncestream.authz.authorizer import StandardAuthorizer
from oncestream.broker.sasl.scram import MECHANISMS, ScramCredential, make_credential
from oncestream.cluster.pg.acls import PgAclStore
from oncestream.cluster.pg.errors import SecurityStoreWriteError
from oncestream.cluster.pg.scram import PgScramCredentialStore
from oncestream.cluster.pg.store import MetadataStore, MetadataStoreConfig
from oncestream.protocol.acl import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType

NO_POLL_MS = 600_000  # the watchers' poll fallback never fires within a test


def _acl(topic: str, principal: str = "User:alice") -> AclBinding:
    return AclBinding(ResourceType.TOPIC, topic, PatternType.LITERAL, principal, "*", AclOperation.READ,
                      AclPermissionType.ALLOW)


@asynccontextmanager
async def _watching(watch: Coroutine[Any, Any, None], *stores: PgAclStore | PgScramCredentialStore[Any],
                    ) -> AsyncIterator[None]:
    """Run a store's ``watch`` for the block; then stop it and close every store."""
    task = asyncio.ensure_future(watch)
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        for store in stores:
            await store.store.close()


async def _until(predicate: Callable[[], bool], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not reached within {timeout_s} s")
        await asyncio.sleep(0.02)


def test_acl_changes_of_two_brokers_with_stale_snapshots_both_survive(pg_database):
    """save() receives a whole set; writing it whole would let broker B undo broker A's change."""

    async def main() -> list[AclBinding]:
        a = await PgAclStore.open(await MetadataStore.open(pg_database))
        b = await PgAclStore.open(await MetadataStore.open(pg_database))
        try:
            await asyncio.to_thread(a.save, [*a.load(), _acl("x")])
            await asyncio.to_thread(b.save, [*b.load(), _acl("y")])  # b has not seen x
            await asyncio.to_thread(a.save, [acl for acl in a.load() if acl != _acl("x")] + [_acl("z")])
            await b.reload()
            return b.load()
        finally:
            await a.store.close()
            await b.store.close()

    assert asyncio.run(main()) == sorted([_acl("y"), _acl("z")])


def test_an_acl_change_reaches_another_brokers_authorizer_by_notify(pg_database):
    async def main() -> None:
        a = await PgAclStore.open(await MetadataStore.open(pg_database))
        b = await PgAclStore.open(await MetadataStore.open(pg_database))
        authorizer = StandardAuthorizer(b.load())
        async with _watching(b.watch(authorizer, asyncio.Lock(), poll_interval_ms=NO_POLL_MS), a, b):
            # The watcher's LISTEN starts asynchronously: repeat the change until it is heard.
            deadline = time.monotonic() + 30
            while _acl("t1") not in authorizer.acls():
                assert time.monotonic() < deadline, "the change never reached the other broker"
                await asyncio.to_thread(a.save, [])  # a no-op save writes and notifies nothing
                await asyncio.to_thread(a.save, [_acl("t1")])
                await asyncio.sleep(0.2)
            assert authorizer.authorize("User:alice", "10.0.0.1", AclOperation.READ, ResourceType.TOPIC, "t1")
            await asyncio.to_thread(a.save, [])
            await _until(lambda: authorizer.acls() == [])
            assert not authorizer.authorize("User:alice", "10.0.0.1", AclOperation.READ, ResourceType.TOPIC, "t1")

    asyncio.run(main())


def test_scram_credentials_reach_another_broker_and_deletions_apply(pg_database):
    sha256, sha512 = MECHANISMS["SCRAM-SHA-256"], MECHANISMS["SCRAM-SHA-512"]
    alice256 = make_credential(sha256, "alice-secret", 4096)
    alice512 = make_credential(sha512, "alice-secret", 4096)
    bob256 = make_credential(sha256, "bob-secret", 4096)

    async def main() -> None:
        a = await PgScramCredentialStore.open(await MetadataStore.open(pg_database), ScramCredential)
        b = await PgScramCredentialStore.open(await MetadataStore.open(pg_database), ScramCredential)
        async with _watching(b.watch(poll_interval_ms=NO_POLL_MS), a, b):
            deadline = time.monotonic() + 30
            while b.get("alice", sha256.name) is None:
                assert time.monotonic() < deadline, "the credential never reached the other broker"
                a.apply([("alice", sha256.name, alice256), ("alice", sha512.name, alice512)], [])
                await asyncio.sleep(0.2)
            assert b.get("alice", sha256.name) == alice256  # salt, keys and iterations as written
            await a.apply_async([("bob", sha256.name, bob256)], [("alice", sha512.name)])
            await _until(lambda: b.get("bob", sha256.name) == bob256)
            assert b.get("alice", sha512.name) is None
            a.apply([], [("alice", sha256.name)])
            await _until(lambda: "alice" not in b.users())
            assert a.users() == b.users() == {"bob": {sha256.name: bob256}}

    asyncio.run(main())


def test_changes_fail_as_oserror_while_postgres_is_down_and_watchers_catch_up_after(postgres_factory):
    """While PostgreSQL is down a change is refused (an OSError, so the handlers answer
    KAFKA_STORAGE_ERROR) and the snapshot stays; after the restart the watcher of the other broker
    reloads on reconnection and sees what was written since."""
    server = postgres_factory()
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute("CREATE DATABASE security")
    url = server.url("security")
    config = MetadataStoreConfig(retry_timeout_ms=1_000, connect_timeout_ms=2_000)

    async def main() -> None:
        a = await PgAclStore.open(await MetadataStore.open(url, config))
        b = await PgAclStore.open(await MetadataStore.open(url, config))
        authorizer = StandardAuthorizer(b.load())
        async with _watching(b.watch(authorizer, asyncio.Lock(), poll_interval_ms=NO_POLL_MS), a, b):
            await asyncio.to_thread(server.stop)
            with pytest.raises(SecurityStoreWriteError):
                await asyncio.to_thread(a.save, [_acl("lost")])
            assert a.load() == []
            await asyncio.to_thread(server.start)
            await asyncio.to_thread(a.save, [_acl("after")])
            # b heard nothing (its LISTEN was down, or reconnected before or after the change):
            # either the NOTIFY or the reload on reconnection brings it.
            await _until(lambda: authorizer.acls() == [_acl("after")], 60)

    asyncio.run(main())
