"""SCRAM credentials in PostgreSQL (table ``scram_credentials``), with the public interface of the
single broker's file store (broker/sasl/credentials.py ``ScramCredentialStore``: ``get``,
``users``, ``apply``), so the SASL exchange and the credential handlers stay unchanged.

How every broker answers the same: see cluster/pg/security_changes.py (an in-memory snapshot per
broker, reloaded on NOTIFY ``scram``, on reconnection and by a poll; ``watch()`` runs that).
A SASL exchange reads the snapshot and never waits for PostgreSQL.

The credential type belongs to the broker layer, above this one, so the store is generic over it:
the broker passes its ``ScramCredential`` class as ``make_credential`` (any class with ``salt``,
``stored_key``, ``server_key`` and ``iterations`` fields constructed by keyword).

``apply`` is synchronous, as the file store's is, and the handler calls it on the event loop: it
blocks the loop for one PostgreSQL round trip (bounded by the connect timeout and
security_changes.WRITE_TIMEOUT_MS). Credential changes are rare admin operations; ``apply_async``
does the same without blocking, for a caller that can await.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, Protocol, TypeVar

from oncestream.cluster.pg.security_changes import (
    DEFAULT_POLL_INTERVAL_MS,
    SECURITY_CHANNEL,
    watch_changes,
    write_now,
)
from oncestream.cluster.pg.store import Conn, MetadataStore

SCRAM_PAYLOAD = "scram"


class ScramCredentialFields(Protocol):
    """What the store reads from a credential (the broker's ``ScramCredential`` has these)."""

    @property
    def salt(self) -> bytes: ...
    @property
    def stored_key(self) -> bytes: ...
    @property
    def server_key(self) -> bytes: ...
    @property
    def iterations(self) -> int: ...


C = TypeVar("C", bound=ScramCredentialFields)
Users = dict[str, dict[str, C]]

_UPSERT = ("INSERT INTO scram_credentials (user_name, mechanism, salt, stored_key, server_key, iterations)"
           " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (user_name, mechanism) DO UPDATE SET"
           " salt = EXCLUDED.salt, stored_key = EXCLUDED.stored_key, server_key = EXCLUDED.server_key,"
           " iterations = EXCLUDED.iterations")
_DELETE = "DELETE FROM scram_credentials WHERE user_name = %s AND mechanism = %s"
_SELECT = "SELECT user_name, mechanism, salt, stored_key, server_key, iterations FROM scram_credentials"


# Builds a credential from its stored fields, by keyword: salt, stored_key, server_key, iterations
# (the broker's ``ScramCredential`` class).
CredentialFactory = Callable[..., C]


class PgScramCredentialStore(Generic[C]):
    """user -> mechanism -> credential: an in-memory snapshot of ``scram_credentials``."""

    def __init__(self, store: MetadataStore, make_credential: CredentialFactory[C], users: Users[C]) -> None:
        """Use ``PgScramCredentialStore.open`` (which loads the snapshot)."""
        self.store = store
        self._make = make_credential
        self._users = users

    @classmethod
    async def open(cls, store: MetadataStore, make_credential: CredentialFactory[C]) -> PgScramCredentialStore[C]:
        """The store with its snapshot loaded (MetadataStoreUnavailableError if PostgreSQL is down)."""
        self = cls(store, make_credential, {})
        await self.reload()
        return self

    def get(self, user: str, mechanism: str) -> C | None:
        """The credential of ``user`` for ``mechanism``, or None (from the snapshot)."""
        return self._users.get(user, {}).get(mechanism)

    def users(self) -> Users[C]:
        """A copy of every user's credentials, by mechanism name."""
        return {user: dict(mechs) for user, mechs in self._users.items()}

    def apply(self, upserts: list[tuple[str, str, C]], deletions: list[tuple[str, str]]) -> None:
        """Write the changes in one transaction (deletions first, as the file store applies them),
        notify the other brokers, and take the stored credentials as the new snapshot; on a
        failure (``SecurityStoreWriteError``, an OSError) the snapshot is unchanged."""
        if not upserts and not deletions:
            return
        self._users = self._users_of(write_now(self.store, _rows(upserts, deletions), SCRAM_PAYLOAD,
                                               read_query=_SELECT))

    async def apply_async(self, upserts: list[tuple[str, str, C]], deletions: list[tuple[str, str]]) -> None:
        """``apply`` without blocking the event loop (retried by the store; idempotent, so an
        unknown commit outcome is resolved by applying again). MetadataStoreError on failure."""
        if not upserts and not deletions:
            return

        async def write(conn: Conn) -> Users[C]:
            for query, rows in _rows(upserts, deletions):
                if rows:
                    async with conn.cursor() as cursor:
                        await cursor.executemany(query, rows)
            await conn.execute("SELECT pg_notify(%s, %s)", (SECURITY_CHANNEL, SCRAM_PAYLOAD))
            return await self._read(conn)

        async def again(conn: Conn) -> Users[C] | None:
            return None

        self._users = await self.store.run(write, read_back=again)

    async def reload(self) -> None:
        """Replace the snapshot with the stored credentials."""
        self._users = await self.store.run(self._read)

    async def _read(self, conn: Conn) -> Users[C]:
        cursor = await conn.execute(_SELECT)
        return self._users_of(await cursor.fetchall())

    def _users_of(self, rows: Iterable[Sequence[Any]]) -> Users[C]:
        users: Users[C] = {}
        for user, mechanism, salt, stored_key, server_key, iterations in rows:
            users.setdefault(str(user), {})[str(mechanism)] = self._make(
                salt=bytes(salt), stored_key=bytes(stored_key), server_key=bytes(server_key),
                iterations=int(iterations))
        return users

    async def watch(self, poll_interval_ms: int = DEFAULT_POLL_INTERVAL_MS) -> None:
        """Keep the snapshot equal to the stored credentials until cancelled (reloaded on each
        change notified by any broker, on reconnection and every ``poll_interval_ms``)."""
        await watch_changes(self.store, SCRAM_PAYLOAD, self.reload, poll_interval_ms)


def _rows(upserts: list[tuple[str, str, C]], deletions: list[tuple[str, str]],
          ) -> list[tuple[str, list[tuple[object, ...]]]]:
    return [(_DELETE, [(user, mech) for user, mech in deletions]),
            (_UPSERT, [(user, mech, c.salt, c.stored_key, c.server_key, c.iterations) for user, mech, c in upserts])]

