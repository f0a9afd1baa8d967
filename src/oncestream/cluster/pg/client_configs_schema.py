"""Tables of client quota configs (broker/quotas/cluster_store.py; KIP-546), ClientMetrics
subscriptions (cluster/pg/client_metrics.py; KIP-714) and share-group configs (the same module;
KIP-932's GROUP config resources).

A quota is one row per (entity, quota key): ``entity`` is the entity's canonical text (the JSON
list of its (type, name) parts in Kafka's order, a null name for the default entity), so two
brokers altering different keys or entities never overwrite each other's rows.
"""

from __future__ import annotations

from oncestream.cluster.pg.schema_step import SchemaStep

STEPS: tuple[SchemaStep, ...] = (
    SchemaStep("0005_client_quotas", """
CREATE TABLE client_quotas (
    entity text NOT NULL,
    quota_key text NOT NULL,
    value double precision NOT NULL,
    PRIMARY KEY (entity, quota_key)
);
"""),
    # One row per KIP-714 ClientMetrics resource (cluster/pg/client_metrics.py): its configs as
    # JSON text (metrics, interval.ms, match), validated by the broker that wrote them.
    SchemaStep("0006_client_metrics", """
CREATE TABLE client_metrics (
    name text PRIMARY KEY,
    configs text NOT NULL
);
"""),
    # One row per share group with configs set (IncrementalAlterConfigs of a GROUP resource:
    # share.auto.offset.reset, share.isolation.level), as JSON text, validated by the writer.
    SchemaStep("0007_group_configs", """
CREATE TABLE group_configs (
    name text PRIMARY KEY,
    configs text NOT NULL
);
"""),
)
