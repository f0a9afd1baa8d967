"""Tables of the catalog (cluster/pg/catalog.py): the cluster's identity, topics, partitions and
their log state, topic configs, dynamic broker configs. (Owned by the catalog; the brokers and their
leases are in registry_schema.py; other areas add their own schema modules.)

Deleting a ``topics`` row cascades to its ``partitions`` and ``topic_configs`` (and, through
``partitions``, to the diskless area's per-partition rows); the objects those rows pointed at are
the diskless garbage collector's to find and delete."""

from __future__ import annotations

from oncestream.cluster.pg.schema_step import SchemaStep

STEPS: tuple[SchemaStep, ...] = (
    SchemaStep("0001_catalog", """
CREATE TABLE cluster_meta (
    key text PRIMARY KEY,
    value text NOT NULL
);
INSERT INTO cluster_meta (key, value)
    VALUES ('cluster.id', left(replace(gen_random_uuid()::text, '-', ''), 22))
    ON CONFLICT DO NOTHING;
CREATE TABLE topics (
    topic_id uuid PRIMARY KEY,
    name text NOT NULL UNIQUE,
    num_partitions int NOT NULL CHECK (num_partitions > 0),
    internal boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE partitions (
    topic_id uuid NOT NULL REFERENCES topics (topic_id) ON DELETE CASCADE,
    partition int NOT NULL,
    log_start_offset bigint NOT NULL DEFAULT 0,
    high_watermark bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (topic_id, partition)
);
CREATE TABLE topic_configs (
    topic_id uuid NOT NULL REFERENCES topics (topic_id) ON DELETE CASCADE,
    key text NOT NULL,
    value text NOT NULL,
    PRIMARY KEY (topic_id, key)
);
"""),
    SchemaStep("0003_broker_configs", """
CREATE TABLE broker_configs (
    node_id int NOT NULL CHECK (node_id >= -1),   -- -1: the cluster-wide default
    key text NOT NULL,
    value text NOT NULL,
    PRIMARY KEY (node_id, key)
);
"""),
)
