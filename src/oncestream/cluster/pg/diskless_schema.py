"""Tables of diskless topics (step ``0101_diskless``), as CLUSTER-PLAN.md lists them.

Owned by the diskless write side (``cluster/diskless``), kept here beside the other areas' schema
modules because ``all_steps`` must list it and ``cluster/diskless`` imports ``cluster/pg`` (the
store): a schema module inside ``cluster/diskless`` would make the two packages import each other.

- ``objects``: every produce object the brokers uploaded. 'uploading' is recorded BEFORE the PUT
  (an upload whose commit never happened is found and collected), 'live' in the commit
  transaction, 'deleting' once no batch row points at it (``delete_after`` = now() + a grace
  longer than any fetch); the garbage collector deletes the object, then the row.
- ``batches``: one row per committed record batch: its offsets, where its bytes are (a byte range
  of an object, or ``inline_bytes`` for a transaction marker) and the facts producer state,
  read_committed and ListOffsets need. The stored bytes are the producer's batch (LogAppendTime
  applied before upload); the reader patches the base offset (bytes 0-7, outside the CRC).
- ``producer_states``: the idempotent producer's last five batches per partition
  (``recent_batches`` = [[base_seq, last_seq, base_offset, last_offset, ts_ms], ...]) and the first
  offset of its open transaction there (the LSO input); from step ``0103_producer_coordinator_epoch``
  on, the coordinator epoch of its last transaction marker there (-1: none yet), which
  DescribeProducers reports.
- ``aborted_txns``: the range of every aborted transaction, keyed by its ABORT marker's offset.

LSO of a partition = min(txn_first_offset) over its producer_states, else
partitions.high_watermark (the next offset to assign: every committed batch is durable, HW = LEO).
"""

from __future__ import annotations

from oncestream.cluster.pg.schema_step import SchemaStep

STEPS: tuple[SchemaStep, ...] = (
    SchemaStep("0101_diskless", """
CREATE TABLE objects (
    object_key text PRIMARY KEY,
    state text NOT NULL CHECK (state IN ('uploading', 'live', 'deleting')),
    size_bytes bigint NOT NULL,
    created_by int NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    delete_after timestamptz
);
CREATE INDEX objects_by_state ON objects (state, created_at);
CREATE TABLE batches (
    topic_id uuid NOT NULL,
    partition int NOT NULL,
    base_offset bigint NOT NULL,
    last_offset bigint NOT NULL,
    object_key text NULL REFERENCES objects (object_key),
    inline_bytes bytea NULL,
    byte_offset bigint NOT NULL,
    byte_size int NOT NULL,
    producer_id bigint NOT NULL,
    producer_epoch smallint NOT NULL,
    base_sequence int NOT NULL,
    last_sequence int NOT NULL,
    is_transactional bool NOT NULL,
    is_control bool NOT NULL,
    timestamp_type smallint NOT NULL,
    max_timestamp_ms bigint NOT NULL,
    append_time_ms bigint NOT NULL,
    PRIMARY KEY (topic_id, partition, base_offset),
    FOREIGN KEY (topic_id, partition) REFERENCES partitions (topic_id, partition) ON DELETE CASCADE,
    CHECK ((object_key IS NULL) <> (inline_bytes IS NULL))
);
CREATE INDEX batches_by_object ON batches (object_key);
CREATE TABLE producer_states (
    topic_id uuid NOT NULL,
    partition int NOT NULL,
    producer_id bigint NOT NULL,
    producer_epoch smallint NOT NULL,
    recent_batches jsonb NOT NULL,
    txn_first_offset bigint NULL,
    last_timestamp_ms bigint NOT NULL,
    PRIMARY KEY (topic_id, partition, producer_id),
    FOREIGN KEY (topic_id, partition) REFERENCES partitions (topic_id, partition) ON DELETE CASCADE
);
CREATE TABLE aborted_txns (
    topic_id uuid NOT NULL,
    partition int NOT NULL,
    producer_id bigint NOT NULL,
    first_offset bigint NOT NULL,
    last_offset bigint NOT NULL,
    PRIMARY KEY (topic_id, partition, last_offset),
    FOREIGN KEY (topic_id, partition) REFERENCES partitions (topic_id, partition) ON DELETE CASCADE
);
"""),
    SchemaStep("0103_producer_coordinator_epoch", """
ALTER TABLE producer_states ADD COLUMN coordinator_epoch int NOT NULL DEFAULT -1;
"""),
)
