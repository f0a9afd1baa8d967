"""Tables of the broker registry (cluster/pg/brokers.py): one row per node id.

``brokers`` is read by other areas too (coordinator leases check that their owner's registration is
alive: ``node_id``, ``incarnation`` and ``lease_expires_at > clock_timestamp()``); its columns are
an interface, changed only by a new step. A row outlives its broker: ``broker_epoch`` keeps growing
across registrations of the same node id, and ``lease_expires_at`` in the past means "not live".
"""

from __future__ import annotations

from oncestream.cluster.pg.schema_step import SchemaStep

STEPS: tuple[SchemaStep, ...] = (
    SchemaStep("0002_brokers", """
CREATE TABLE brokers (
    node_id int PRIMARY KEY CHECK (node_id >= 0),
    incarnation uuid NOT NULL,
    broker_epoch bigint NOT NULL,
    host text NOT NULL,
    port int NOT NULL CHECK (port > 0 AND port < 65536),
    rack text NULL,
    listeners jsonb NOT NULL DEFAULT '[]',
    session_timeout_ms int NOT NULL CHECK (session_timeout_ms > 0),
    lease_expires_at timestamptz NOT NULL,
    registered_at timestamptz NOT NULL
);
CREATE INDEX brokers_lease ON brokers (lease_expires_at);
"""),
)
