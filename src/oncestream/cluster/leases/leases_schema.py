"""Tables of coordinator leases, coordinator records and producer-id blocks (owned by cluster/leases).

``coordinator_leases``: one row per coordinator partition (``resource`` = ``'<topic>/<partition>'``,
e.g. ``'__consumer_offsets/7'``). A lease is held while its owner's broker lease is alive: the
``brokers`` row with the same node id and incarnation has ``lease_expires_at > now()``, so one
broker heartbeat renews all its leases. ``epoch`` grows at every change of owner; a row with no
owner is free.

``coordinator_topics``: the partition count of each internal topic, fixed by the first broker that
opened it (coordinators map keys onto partitions, so every broker must use the same count).

``coordinator_records``: the internal compacted topics (``__consumer_offsets``,
``__transaction_state``, ``__share_group_state``) as the compaction would leave them: the latest
value per key (a tombstone deletes the row), each with the offset it was appended at.
``coordinator_partitions.next_offset`` is the next offset of each internal partition (offsets only
grow, even when keys are deleted).

``producer_id_allocation``: one row, the first producer id no broker has been given yet. A broker
takes a block by ``UPDATE ... SET next_id = next_id + size RETURNING``: committed blocks never
overlap, and a block whose commit outcome is unknown is simply never used (skipped, not reused).
"""

from __future__ import annotations

# (name, sql) pairs that cluster/pg/schema.py wraps in its SchemaStep: plain data, so that this
# package does not import cluster/pg, which imports this module (no cycle between the packages).
STEPS: tuple[tuple[str, str], ...] = (
    ("0201_coordinator_leases", """
CREATE TABLE coordinator_leases (
    resource text PRIMARY KEY,
    owner_node_id int NULL,
    owner_incarnation uuid NULL,
    epoch bigint NOT NULL DEFAULT 0,
    changed_at timestamptz NOT NULL DEFAULT now(),
    CHECK ((owner_node_id IS NULL) = (owner_incarnation IS NULL))
);
CREATE INDEX coordinator_leases_owner ON coordinator_leases (owner_node_id, owner_incarnation);
CREATE TABLE coordinator_topics (
    topic text PRIMARY KEY,
    num_partitions int NOT NULL CHECK (num_partitions > 0)
);
CREATE TABLE coordinator_partitions (
    topic text NOT NULL,
    partition int NOT NULL,
    next_offset bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (topic, partition)
);
CREATE TABLE coordinator_records (
    topic text NOT NULL,
    partition int NOT NULL,
    key bytea NOT NULL,
    value bytea NOT NULL,
    "offset" bigint NOT NULL,
    PRIMARY KEY (topic, partition, key)
);
CREATE TABLE producer_id_allocation (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    next_id bigint NOT NULL CHECK (next_id >= 0)
);
INSERT INTO producer_id_allocation (singleton, next_id) VALUES (true, 0);
"""),
    # Fetch of an internal topic (internal_reads.py) reads a partition's rows by offset.
    ("0202_coordinator_records_by_offset", """
CREATE INDEX coordinator_records_by_offset ON coordinator_records (topic, partition, "offset");
"""),
)
