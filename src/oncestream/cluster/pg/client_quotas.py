"""Client quota configs in PostgreSQL (table ``client_quotas``), with the interface of the single
broker's file store (broker/quotas/store.py ``FileClientQuotaStore``: ``save(configs)``), so the
AlterClientQuotas handler stays unchanged.

Kafka stores quota configs cluster-wide and enforces them per broker: every broker keeps the
configs in memory (``state.client_quotas.configs``, read on every produce/fetch) and meters its own
traffic against them. How every broker comes to the same configs: as ACLs
(cluster/pg/security_changes.py), an in-memory snapshot per broker, reloaded on NOTIFY
``client_quotas``, on reconnection and by a poll.

``save(configs)`` receives the whole new configs, computed by the handler from the installed ones.
Another broker may have changed the table meanwhile, so ``save`` writes only the difference
between ``configs`` and this store's snapshot (the configs last installed): upserts of changed
(entity, key) values, deletes of removed ones. The handler holds ``client_quota_lock`` from
reading the installed configs to installing the new ones, and ``watch`` takes the same lock to
reload the snapshot and install it, so the snapshot and the installed configs change together.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

from oncestream.broker.quotas.entities import ClientQuotaConfigs, QuotaEntity
from oncestream.cluster.pg.security_changes import DEFAULT_POLL_INTERVAL_MS, watch_changes, write_now
from oncestream.cluster.pg.store import Conn, MetadataStore
from oncestream.errors import InvalidRequestError, StorageError

CLIENT_QUOTAS_PAYLOAD = "client_quotas"

_UPSERT = ("INSERT INTO client_quotas (entity, quota_key, value) VALUES (%s, %s, %s) "
           "ON CONFLICT (entity, quota_key) DO UPDATE SET value = EXCLUDED.value")
_DELETE = "DELETE FROM client_quotas WHERE entity = %s AND quota_key = %s"


def entity_text(entity: QuotaEntity) -> str:
    """The entity's canonical text (its parts in Kafka's order; the default entity's name null)."""
    return json.dumps(entity.parts())


def _entity_of(text: str) -> QuotaEntity:
    try:
        return QuotaEntity.from_parts((str(kind), None if name is None else str(name)) for kind, name in json.loads(text))
    except (ValueError, TypeError, InvalidRequestError) as exc:
        raise StorageError(f"client_quotas row with entity {text!r} is unreadable: {exc}") from exc


def _flat(configs: ClientQuotaConfigs) -> dict[tuple[str, str], float]:
    return {(entity_text(entity), key): value
            for entity, values in configs.entries().items() for key, value in values.items()}


async def _read_all(conn: Conn) -> ClientQuotaConfigs:
    cursor = await conn.execute("SELECT entity, quota_key, value FROM client_quotas")
    entries: dict[QuotaEntity, dict[str, float]] = {}
    for entity, key, value in await cursor.fetchall():
        entries.setdefault(_entity_of(str(entity)), {})[str(key)] = float(value)
    return ClientQuotaConfigs(entries)


class PgClientQuotaStore:
    """The cluster's client quota configs: a snapshot of the ``client_quotas`` table, changed by difference."""

    def __init__(self, store: MetadataStore, configs: ClientQuotaConfigs | None = None) -> None:
        """Use ``PgClientQuotaStore.open`` (which loads the snapshot)."""
        self.store = store
        self._snapshot = configs if configs is not None else ClientQuotaConfigs()

    @classmethod
    async def open(cls, store: MetadataStore) -> PgClientQuotaStore:
        """The store with its snapshot loaded (MetadataStoreUnavailableError if PostgreSQL is down)."""
        return cls(store, await store.run(_read_all))

    def load(self) -> ClientQuotaConfigs:
        """The snapshot of the stored configs."""
        return self._snapshot

    def save(self, configs: ClientQuotaConfigs) -> None:
        """Make the stored configs differ from the snapshot as ``configs`` does, in one
        transaction, then notify the other brokers. Synchronous (the handler calls it on its disk
        executor); ``SecurityStoreWriteError`` (an OSError) when it could not be written."""
        old, new = _flat(self._snapshot), _flat(configs)
        upserts = [(entity, key, value) for (entity, key), value in sorted(new.items()) if old.get((entity, key)) != value]
        deletes = [key for key in sorted(old) if key not in new]
        if upserts or deletes:
            write_now(self.store, [(_DELETE, deletes), (_UPSERT, upserts)], CLIENT_QUOTAS_PAYLOAD)
        self._snapshot = configs

    async def reload(self) -> bool:
        """Replace the snapshot with the stored configs; whether they differ from it."""
        stored = await self.store.run(_read_all)
        changed = _flat(stored) != _flat(self._snapshot)
        self._snapshot = stored
        return changed

    async def watch(self, install: Callable[[ClientQuotaConfigs], None], lock: asyncio.Lock,
                    poll_interval_ms: int = DEFAULT_POLL_INTERVAL_MS) -> None:
        """Keep the broker's configs equal to the stored ones until cancelled: on each change any
        broker notifies (and on reconnection, and every ``poll_interval_ms``) reload the snapshot
        and ``install`` it when it changed, holding ``lock`` (the broker's ``client_quota_lock``)."""

        async def reload_and_install() -> None:
            async with lock:
                if await self.reload():
                    install(self._snapshot)

        await watch_changes(self.store, CLIENT_QUOTAS_PAYLOAD, reload_and_install, poll_interval_ms)
