"""The table of share-partition state (KIP-932) in cluster mode (owned by cluster/leases).

``share_partition_state``: the latest snapshot of each share-partition, one row per
(group id, topic id, partition): the ShareSnapshot value of ``__share_group_state`` as
coordinator/share/records.py encodes it (start offset, in-flight batches with their states and
delivery counts), with the snapshot epoch. A write replaces the row in a transaction fenced by the
share-partition's lease (``coordinator_leases`` row ``'__share_group_state/<group>/<topic id>/<partition>'``,
see share_state.py); DeleteShareGroupOffsets deletes it.

Why the latest snapshot rather than an append-only table of deltas (what the single broker's
``__share_group_state`` topic holds): a persist is then one upsert, the same single round trip
as appending a delta, a load is one indexed read, and nothing needs pruning. A snapshot is bounded
by ``group.share.partition.max.record.locks`` in-flight records, encoded as ranges (batches of
records with one state and delivery count), so rewriting it costs a few kilobytes at most.
"""

from __future__ import annotations

# (name, sql) pairs, wrapped in SchemaStep by cluster/pg/schema.py (no import cycle).
STEPS: tuple[tuple[str, str], ...] = (
    ("0301_share_partition_state", """
CREATE TABLE share_partition_state (
    group_id text NOT NULL,
    topic_id uuid NOT NULL,
    partition int NOT NULL,
    snapshot_epoch int NOT NULL,
    state bytea NOT NULL,
    written_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (group_id, topic_id, partition)
);
"""),
)
