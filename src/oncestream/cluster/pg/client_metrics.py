"""KIP-714 ClientMetrics subscriptions in PostgreSQL (table ``client_metrics``), with the interface
of the single broker's file store (broker/telemetry/subscriptions.py ``FileClientMetricsStore``:
``save(configs)``), so the IncrementalAlterConfigs handler stays unchanged.

Kafka stores ClientMetrics resources cluster-wide; each broker resolves the subscriptions of the
clients connected to it. Every broker holds a snapshot of the table, reloaded on NOTIFY
``client_metrics``, on reconnection and by a poll; changes are written by difference against the
snapshot (cluster/pg/keyed_rows.py), one row per resource, under ``telemetry.config_lock``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from oncestream.cluster.pg.keyed_rows import Key, KeyedRowsStore
from oncestream.cluster.pg.store import Conn
from oncestream.errors import StorageError

ClientMetricsConfigs = Mapping[str, Mapping[str, str]]


class PgClientMetricsStore(KeyedRowsStore[ClientMetricsConfigs]):
    """The cluster's ClientMetrics resources: rows name -> configs (JSON text)."""

    UPSERT = ("INSERT INTO client_metrics (name, configs) VALUES (%s, %s) "
              "ON CONFLICT (name) DO UPDATE SET configs = EXCLUDED.configs")
    DELETE = "DELETE FROM client_metrics WHERE name = %s"
    PAYLOAD = "client_metrics"

    @staticmethod
    def rows(value: ClientMetricsConfigs) -> dict[Key, str]:
        # An emptied resource is gone, as in the file store.
        return {(name,): json.dumps(dict(configs), sort_keys=True) for name, configs in value.items() if configs}

    @staticmethod
    async def read_all(conn: Conn) -> ClientMetricsConfigs:
        cursor = await conn.execute("SELECT name, configs FROM client_metrics")
        out: dict[str, dict[str, str]] = {}
        for name, configs in await cursor.fetchall():
            try:
                out[str(name)] = {str(k): str(v) for k, v in json.loads(str(configs)).items()}
            except (ValueError, AttributeError) as exc:
                raise StorageError(f"client_metrics row {name!r} is unreadable: {exc}") from exc
        return out
