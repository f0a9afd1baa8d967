"""Tables of diskless consolidation (step ``0102_consolidation``).

Owned by consolidation (``cluster/diskless/consolidation``, ``orphans``), kept here beside the
other areas' schema modules for the reason ``diskless_schema`` gives (no import cycle between
``cluster/pg`` and ``cluster/diskless``).

- ``consolidation_leases``: which job instance is consolidating a partition, until when
  (PostgreSQL's clock). A claim succeeds only on a free or expired lease, so several brokers
  running the job at once do not do the same work twice; the swap's own checks make a double
  run harmless anyway (see ``consolidation``).
- ``diskless_orphans``: objects found in the store under the diskless prefix with no ``objects``
  row, and when they were first seen; they are deleted once seen longer ago than the orphan grace
  (deletion recorded first, performed after, row last).
"""

from __future__ import annotations

from oncestream.cluster.pg.schema_step import SchemaStep

STEPS: tuple[SchemaStep, ...] = (
    SchemaStep("0102_consolidation", """
CREATE TABLE consolidation_leases (
    topic_id uuid NOT NULL,
    partition int NOT NULL,
    holder text NOT NULL,
    lease_until timestamptz NOT NULL,
    PRIMARY KEY (topic_id, partition),
    FOREIGN KEY (topic_id, partition) REFERENCES partitions (topic_id, partition) ON DELETE CASCADE
);
CREATE TABLE diskless_orphans (
    object_key text PRIMARY KEY,
    first_seen_at timestamptz NOT NULL DEFAULT now()
);
"""),
)
