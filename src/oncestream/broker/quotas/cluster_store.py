"""Client quota configs in PostgreSQL (table ``client_quotas``), with the interface of the single
broker's file store (broker/quotas/store.py ``FileClientQuotaStore``: ``save(configs)``), so the
AlterClientQuotas handler stays unchanged.

Kafka stores quota configs cluster-wide and enforces them per broker: every broker keeps the
configs in memory (``state.client_quotas.configs``, read on every produce/fetch) and meters its own
traffic against them. Every broker holds a snapshot of the table, reloaded on NOTIFY
``client_quotas``, on reconnection and by a poll; changes are written by difference against the
snapshot (cluster/pg/keyed_rows.py), under ``client_quota_lock``.
"""

from __future__ import annotations

import json

from oncestream.broker.quotas.entities import ClientQuotaConfigs, QuotaEntity
from oncestream.cluster.pg.keyed_rows import Key, KeyedRowsStore
from oncestream.cluster.pg.store import Conn
from oncestream.errors import InvalidRequestError, StorageError


def entity_text(entity: QuotaEntity) -> str:
    """The entity's canonical text (its parts in Kafka's order; the default entity's name null)."""
    return json.dumps(entity.parts())


def _entity_of(text: str) -> QuotaEntity:
    try:
        return QuotaEntity.from_parts((str(kind), None if name is None else str(name)) for kind, name in json.loads(text))
    except (ValueError, TypeError, InvalidRequestError) as exc:
        raise StorageError(f"client_quotas row with entity {text!r} is unreadable: {exc}") from exc


class PgClientQuotaStore(KeyedRowsStore[ClientQuotaConfigs]):
    """The cluster's client quota configs: rows (entity, quota key) -> value."""

    UPSERT = ("INSERT INTO client_quotas (entity, quota_key, value) VALUES (%s, %s, %s) "
              "ON CONFLICT (entity, quota_key) DO UPDATE SET value = EXCLUDED.value")
    DELETE = "DELETE FROM client_quotas WHERE entity = %s AND quota_key = %s"
    PAYLOAD = "client_quotas"

    @staticmethod
    def rows(value: ClientQuotaConfigs) -> dict[Key, float]:
        return {(entity_text(entity), key): quota
                for entity, values in value.entries().items() for key, quota in values.items()}

    @staticmethod
    async def read_all(conn: Conn) -> ClientQuotaConfigs:
        cursor = await conn.execute("SELECT entity, quota_key, value FROM client_quotas")
        entries: dict[QuotaEntity, dict[str, float]] = {}
        for entity, key, value in await cursor.fetchall():
            entries.setdefault(_entity_of(str(entity)), {})[str(key)] = float(value)
        return ClientQuotaConfigs(entries)
