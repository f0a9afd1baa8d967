"""KIP-714 ClientMetrics subscriptions (table ``client_metrics``) and KIP-932 share-group configs
(table ``group_configs``) in PostgreSQL, with the interface of the single broker's file stores
(broker/telemetry/subscriptions.py ``FileClientMetricsStore``, broker/share_group_configs.py
``FileGroupConfigStore``: ``save(configs)``), so the IncrementalAlterConfigs handler stays unchanged.
Both are named resources whose configs are a map of strings: one row per resource, the map as JSON.

Kafka stores ClientMetrics resources cluster-wide; each broker resolves the subscriptions of the
clients connected to it. Every broker holds a snapshot of the table, reloaded on NOTIFY
``client_metrics``, on reconnection and by a poll; changes are written by difference against the
snapshot (cluster/pg/keyed_rows.py), one row per resource, under ``telemetry.config_lock``
(ClientMetrics) or ``shares.group_config_lock`` (share groups). Kafka keeps both in its metadata
log; every broker applies a share group's configs when it starts one of its share-partitions
(``share.auto.offset.reset``) or fetches for it (``share.isolation.level``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from oncestream.cluster.pg.keyed_rows import Key, KeyedRowsStore
from oncestream.cluster.pg.store import Conn
from oncestream.errors import StorageError

NamedConfigs = Mapping[str, Mapping[str, str]]


class NamedConfigsStore(KeyedRowsStore[NamedConfigs]):
    """Named resources' configs: rows name -> configs (JSON text) of table ``TABLE``, whose
    statements the subclasses spell out (UPSERT, DELETE, PAYLOAD)."""

    TABLE: str

    @staticmethod
    def rows(value: NamedConfigs) -> dict[Key, str]:
        # An emptied resource is gone, as in the file stores.
        return {(name,): json.dumps(dict(configs), sort_keys=True) for name, configs in value.items() if configs}

    @classmethod
    async def read_all(cls, conn: Conn) -> NamedConfigs:
        cursor = await conn.execute(f"SELECT name, configs FROM {cls.TABLE}")
        out: dict[str, dict[str, str]] = {}
        for name, configs in await cursor.fetchall():
            try:
                out[str(name)] = {str(k): str(v) for k, v in json.loads(str(configs)).items()}
            except (ValueError, AttributeError) as exc:
                raise StorageError(f"{cls.TABLE} row {name!r} is unreadable: {exc}") from exc
        return out


class PgClientMetricsStore(NamedConfigsStore):
    """The cluster's ClientMetrics resources: rows name -> configs (JSON text)."""

    TABLE = "client_metrics"
    UPSERT = ("INSERT INTO client_metrics (name, configs) VALUES (%s, %s) "
              "ON CONFLICT (name) DO UPDATE SET configs = EXCLUDED.configs")
    DELETE = "DELETE FROM client_metrics WHERE name = %s"
    PAYLOAD = "client_metrics"


class PgGroupConfigStore(NamedConfigsStore):
    """The cluster's share-group configs (GROUP config resources): rows group id -> configs."""

    TABLE = "group_configs"
    UPSERT = ("INSERT INTO group_configs (name, configs) VALUES (%s, %s) "
              "ON CONFLICT (name) DO UPDATE SET configs = EXCLUDED.configs")
    DELETE = "DELETE FROM group_configs WHERE name = %s"
    PAYLOAD = "group_configs"
