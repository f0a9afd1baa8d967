"""A PostgreSQL table of keyed rows kept as an in-memory snapshot on every broker and changed by
difference: the shared part of the client quota and client-metrics stores
(broker/quotas/cluster_store.py, cluster/pg/client_metrics.py).

The single broker's stores take the whole new value in ``save``; in a cluster another broker may
have changed the table meanwhile, so writing it whole would undo that change. ``save`` therefore
writes only the difference between the new value and the snapshot (the value last installed):
upserts of the changed rows, deletes of the removed ones, in one transaction ending with a NOTIFY
(cluster/pg/security_changes.py). The handler holds a lock from reading the installed value to
installing the new one, and ``watch`` takes the same lock to reload the snapshot and install it,
so the snapshot and the installed value change together.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Generic, Self, TypeVar

from oncestream.cluster.pg.security_changes import DEFAULT_POLL_INTERVAL_MS, watch_changes, write_now
from oncestream.cluster.pg.store import Conn, MetadataStore

T = TypeVar("T")
Key = tuple[Hashable, ...]


class KeyedRowsStore(Generic[T]):
    """A snapshot of type ``T`` over a table whose rows are ``key + (value,)``; subclasses say how
    a ``T`` flattens to rows (``rows``), how the table reads back (``read_all``), the statements and
    the NOTIFY payload."""

    UPSERT: str  # parameters: key columns, then the value
    DELETE: str  # parameters: key columns
    PAYLOAD: str

    def __init__(self, store: MetadataStore, snapshot: T) -> None:
        """Use ``open`` (which loads the snapshot)."""
        self.store = store
        self._snapshot = snapshot

    @staticmethod
    def rows(value: T) -> dict[Key, Any]:
        """``value`` as the table's rows: key columns -> value column."""
        raise NotImplementedError

    @staticmethod
    async def read_all(conn: Conn) -> T:
        """The stored value."""
        raise NotImplementedError

    @classmethod
    async def open(cls, store: MetadataStore) -> Self:
        """The store with its snapshot loaded (MetadataStoreUnavailableError if PostgreSQL is down)."""
        return cls(store, await store.run(cls.read_all))

    def load(self) -> T:
        """The snapshot of the stored value."""
        return self._snapshot

    def save(self, value: T) -> None:
        """Make the table differ from the snapshot as ``value`` does, in one transaction, then
        notify the other brokers. Synchronous (handlers call it on their disk executor);
        ``SecurityStoreWriteError`` (an OSError) when it could not be written."""
        old, new = self.rows(self._snapshot), self.rows(value)
        upserts: Sequence[Sequence[Any]] = [(*key, row) for key, row in new.items() if old.get(key, _MISSING) != row]
        deletes: Sequence[Sequence[Any]] = [key for key in old if key not in new]
        if upserts or deletes:
            write_now(self.store, [(self.DELETE, deletes), (self.UPSERT, upserts)], self.PAYLOAD)
        self._snapshot = value

    async def reload(self) -> bool:
        """Replace the snapshot with the stored value; whether it differs from the snapshot."""
        stored = await self.store.run(self.read_all)
        changed = self.rows(stored) != self.rows(self._snapshot)
        self._snapshot = stored
        return changed

    async def refresh(self, install: Callable[[T], None]) -> None:
        """Reload the snapshot and ``install`` it when it changed (the caller holds the handler's
        lock): for a reader that must see a change another broker made a moment ago, before
        its notification arrives."""
        if await self.reload():
            install(self._snapshot)

    async def watch(self, install: Callable[[T], None], lock: asyncio.Lock,
                    poll_interval_ms: int = DEFAULT_POLL_INTERVAL_MS) -> None:
        """Keep the broker's value equal to the stored one until cancelled: on each change any
        broker notifies (and on reconnection, and every ``poll_interval_ms``) reload the snapshot
        and ``install`` it when it changed, holding ``lock`` (the handler's lock)."""

        async def reload_and_install() -> None:
            async with lock:
                await self.refresh(install)

        await watch_changes(self.store, self.PAYLOAD, reload_and_install, poll_interval_ms)


_MISSING = object()
