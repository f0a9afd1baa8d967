"""ACLs in PostgreSQL (table ``acls``), with the public interface of the single broker's file store
(authz/store.py ``AclStore``: ``load()`` and ``save(acls)``), so the ACL handlers stay unchanged.

How every broker answers the same: see cluster/pg/security_changes.py (an in-memory snapshot per
broker, reloaded on NOTIFY ``acls``, on reconnection and by a poll). ``watch(authorizer, lock)``
keeps a ``StandardAuthorizer`` equal to the stored set.

``save(acls)`` receives the whole new set, computed by the handler from the authorizer's set plus
or minus the request's bindings. In a cluster another broker may have changed the stored set
meanwhile, so writing the whole set would undo its change; ``save`` therefore writes only the
difference between ``acls`` and the set the authorizer was last given (this store's snapshot):
inserts of the added bindings, deletes of the removed ones. That is right as long as the snapshot
and the authorizer change together and never during a handler's change: the handlers hold
``acl_write_lock`` from reading the authorizer to persisting, and ``watch`` takes the same lock to
reload the snapshot and update the authorizer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from oncestream.authz.authorizer import StandardAuthorizer
from oncestream.cluster.pg.security_changes import DEFAULT_POLL_INTERVAL_MS, watch_changes, write_now
from oncestream.cluster.pg.store import Conn, MetadataStore
from oncestream.protocol.acl import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType

ACLS_PAYLOAD = "acls"

_COLUMNS = "resource_type, resource_name, pattern_type, principal, host, operation, permission"
_INSERT = f"INSERT INTO acls ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING"
_DELETE = (f"DELETE FROM acls WHERE ({_COLUMNS}) = (%s, %s, %s, %s, %s, %s, %s)")


def _key(acl: AclBinding) -> tuple[int, str, int, str, str, int, int]:
    return (int(acl.resource_type), acl.resource_name, int(acl.pattern_type), acl.principal, acl.host,
            int(acl.operation), int(acl.permission))


async def _read_all(conn: Conn) -> list[AclBinding]:
    cursor = await conn.execute(f"SELECT {_COLUMNS} FROM acls")
    return sorted(AclBinding(ResourceType(r[0]), str(r[1]), PatternType(r[2]), str(r[3]), str(r[4]),
                             AclOperation(r[5]), AclPermissionType(r[6]))
                  for r in await cursor.fetchall())


class PgAclStore:
    """The cluster's ACLs: an in-memory snapshot of the ``acls`` table, changed by difference."""

    def __init__(self, store: MetadataStore, acls: Iterable[AclBinding] = ()) -> None:
        """Use ``PgAclStore.open`` (which loads the snapshot)."""
        self.store = store
        self._snapshot: frozenset[AclBinding] = frozenset(acls)

    @classmethod
    async def open(cls, store: MetadataStore) -> PgAclStore:
        """The store with its snapshot loaded (MetadataStoreUnavailableError if PostgreSQL is down)."""
        acls = await store.run(_read_all)
        return cls(store, acls)

    def load(self) -> list[AclBinding]:
        """The snapshot of the stored ACLs (as ``AclStore.load``)."""
        return sorted(self._snapshot)

    def save(self, acls: list[AclBinding]) -> None:
        """Make the stored set differ from the snapshot as ``acls`` does: insert what ``acls`` adds,
        delete what it removes, in one transaction, then notify the other brokers. Synchronous, as
        ``AclStore.save`` (the handler calls it on its disk executor); ``SecurityStoreWriteError``
        (an OSError) when it could not be written."""
        new = frozenset(acls)
        added = sorted(new - self._snapshot)
        removed = sorted(self._snapshot - new)
        if added or removed:
            write_now(self.store, [(_DELETE, [_key(a) for a in removed]), (_INSERT, [_key(a) for a in added])],
                      ACLS_PAYLOAD)
        self._snapshot = new

    async def reload(self) -> tuple[list[AclBinding], list[AclBinding]]:
        """Replace the snapshot with the stored set; the bindings it (added, removed)."""
        stored = frozenset(await self.store.run(_read_all))
        added, removed = sorted(stored - self._snapshot), sorted(self._snapshot - stored)
        self._snapshot = stored
        return added, removed

    async def watch(self, authorizer: StandardAuthorizer, lock: asyncio.Lock,
                    poll_interval_ms: int = DEFAULT_POLL_INTERVAL_MS) -> None:
        """Keep ``authorizer`` equal to the stored ACLs until cancelled: on each change notified
        by any broker (and on reconnection, and every ``poll_interval_ms``) reload the snapshot and
        apply the difference to the authorizer, holding ``lock`` (the broker's ``acl_write_lock``)
        so no handler's change interleaves."""

        async def reload_into_authorizer() -> None:
            async with lock:
                added, removed = await self.reload()
                for acl in removed:
                    authorizer.remove(acl)
                for acl in added:
                    authorizer.add(acl)

        await watch_changes(self.store, ACLS_PAYLOAD, reload_into_authorizer, poll_interval_ms)
