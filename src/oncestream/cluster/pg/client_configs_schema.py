"""Tables of client quota configs (cluster/pg/client_quotas.py; KIP-546).

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
)
