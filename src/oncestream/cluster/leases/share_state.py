"""Share-partition state (KIP-932) in PostgreSQL, owned by one broker at a time through a lease.

In cluster mode a share-partition (group id, topic id, partition) is served by exactly one broker:
the one Metadata names leader of the topic-partition (broker/cluster_leaders.py), so that
ShareFetch and ShareAcknowledge, which clients send to the leader, reach the broker holding the
in-flight record states. That broker holds the share-partition's lease, a row of
``coordinator_leases`` named by ``share_resource`` (one per share-partition: a lease per state
partition of ``__share_group_state`` would put share-partitions of different leaders under one
owner), with the same epochs and the same ``fenced`` check as the group and transaction
coordinators (coordinator_leases.py).

- ``take(me, key)``: the lease, if it is free (no owner, or its owner's broker lease expired or was
  deregistered) or already ``me``'s; a takeover bumps the epoch and waits for every fenced write
  of the former owner to end, so the ``load`` that follows sees everything it committed.
- ``load(key)``: the persisted snapshot (None: the share-partition has no state yet). Records
  that were acquired come back AVAILABLE with their delivery count (SharePartition.apply_persisted),
  so in-flight records are delivered again and acknowledged ones never are.
- ``save(lease, key, value)`` / ``delete(lease, key)``: one transaction, ``fenced`` first: a
  former owner paused past its lease writes nothing (``LeaseLostError``). A save replaces only
  an older snapshot (a lower ``snapshot_epoch``): the owner takes its snapshots in epoch order,
  but the saves of concurrent requests on one share-partition (two members' acknowledgements,
  the periodic save, a hand-over) commit in any order, and the last to commit must not put back
  a snapshot without the acknowledgements a newer one carried and its request already promised.
  The newer snapshot holds all that the older one did, so the older save has nothing to add.
- ``release(me, keys)``: hand share-partitions over (leadership moved, or SIGTERM).
- ``overwrite(coordinator, writes)``: the group's coordinator changes the state of an empty
  share group (AlterShareGroupOffsets, DeleteShareGroupOffsets, DeleteGroups) through the owners'
  fencing rules, as Kafka's share coordinator bumps the state epoch so that the share-partition
  leader's next write is fenced (FENCED_STATE_EPOCH) and it reloads: in one transaction fenced by
  the coordinator's own lease (of the group's ``__consumer_offsets`` partition, which holds its
  membership), each share-partition's lease row is locked for update, which waits for the
  owner's in-flight fenced write, then its epoch bumped and its owner cleared, and the snapshot
  replaced or deleted. The former owner's next write finds another epoch (``LeaseLostError``):
  nothing of its stale copy is written; it unloads the share-partition, and the next ShareFetch
  takes the lease again and loads what the coordinator wrote. ``lost(me, leases)`` lets an owner
  notice such a change before its next write.

The table (share_state_schema.py) keeps the latest snapshot per share-partition.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import psycopg

from oncestream.cluster.leases.coordinator_leases import (
    BrokerIdentity,
    CoordinatorLeases,
    Lease,
    TransactionSource,
    fenced,
)
from oncestream.coordinator.share.records import SNAPSHOT_TYPE, ShareStateValue, decode_value, encode_value

SHARE_STATE_RESOURCE_PREFIX = "__share_group_state"
SharePartitionKey = tuple[str, uuid.UUID, int]  # (group id, topic id, partition)

# Take the lease if it is free, for a live ``me`` only; rows locked by an in-flight fenced write
# are skipped (the caller answers a retriable error and tries again) rather than waited for.
_TAKE_SQL = """
WITH free AS (
    SELECT l.resource FROM coordinator_leases l
    LEFT JOIN brokers b ON b.node_id = l.owner_node_id AND b.incarnation = l.owner_incarnation
        AND b.lease_expires_at > clock_timestamp()
    WHERE l.resource = %(resource)s AND b.node_id IS NULL
      AND EXISTS (SELECT 1 FROM brokers me WHERE me.node_id = %(node_id)s
                  AND me.incarnation = %(incarnation)s AND me.lease_expires_at > clock_timestamp())
    FOR UPDATE OF l SKIP LOCKED
)
UPDATE coordinator_leases l
SET owner_node_id = %(node_id)s, owner_incarnation = %(incarnation)s, epoch = l.epoch + 1, changed_at = now()
FROM free WHERE l.resource = free.resource
"""

_MINE_SQL = """
SELECT epoch FROM coordinator_leases WHERE resource = %s AND owner_node_id = %s AND owner_incarnation = %s
"""

_UPSERT_SQL = """
INSERT INTO share_partition_state (group_id, topic_id, partition, snapshot_epoch, state)
VALUES (%s, %s, %s, %s, %s)
ON CONFLICT (group_id, topic_id, partition)
DO UPDATE SET snapshot_epoch = EXCLUDED.snapshot_epoch, state = EXCLUDED.state, written_at = now()
"""
# The owner's save: ``_UPSERT_SQL`` that keeps a newer snapshot (see ``save``). The coordinator's
# ``overwrite`` replaces whatever is there (it starts the epochs again; the owner reloads it).
_SAVE_SQL = _UPSERT_SQL.rstrip() + "\nWHERE share_partition_state.snapshot_epoch < EXCLUDED.snapshot_epoch\n"


def share_resource(key: SharePartitionKey) -> str:
    """The lease resource of a share-partition: ``'__share_group_state/<group>/<topic id>/<partition>'``."""
    group_id, topic_id, partition = key
    return f"{SHARE_STATE_RESOURCE_PREFIX}/{group_id}/{topic_id}/{partition}"


class PgShareState:
    """Leases and persisted snapshots of share-partitions (see module docstring).

    ``idle_timeout_ms`` bounds how long a writer stalled inside its transaction keeps the lease
    row share-locked (the broker session timeout, as for the coordinators)."""

    def __init__(self, store: TransactionSource, *, idle_timeout_ms: int | None = None) -> None:
        self._store = store
        self._leases = CoordinatorLeases(store)
        self._idle_timeout_ms = idle_timeout_ms

    async def take(self, me: BrokerIdentity, key: SharePartitionKey) -> Lease | None:
        """``me``'s lease of ``key``, taken now if it was free; None while another live broker
        holds it (or an in-flight write of a former owner locks the row, or ``me`` expired)."""
        resource = share_resource(key)
        async with self._store.transaction() as conn:
            await conn.execute("INSERT INTO coordinator_leases (resource) VALUES (%s) ON CONFLICT DO NOTHING",
                               (resource,))
            await conn.execute(_TAKE_SQL, {"resource": resource, "node_id": me.node_id, "incarnation": me.incarnation})
            cursor = await conn.execute(_MINE_SQL, (resource, me.node_id, me.incarnation))
            row = await cursor.fetchone()
        return None if row is None else Lease(resource, int(row[0]), me.node_id, me.incarnation)

    async def release(self, me: BrokerIdentity, keys: Iterable[SharePartitionKey]) -> None:
        """Give up ``me``'s leases of ``keys`` (unload them first): the next leader takes them."""
        await self._leases.release(me, [share_resource(key) for key in keys])

    async def load(self, key: SharePartitionKey) -> ShareStateValue | None:
        """The persisted snapshot of ``key`` (None if it has none). Call after ``take``."""
        group_id, topic_id, partition = key
        async with self._store.transaction() as conn:
            cursor = await conn.execute(
                "SELECT state FROM share_partition_state WHERE group_id = %s AND topic_id = %s AND partition = %s",
                (group_id, topic_id, partition))
            row = await cursor.fetchone()
        return None if row is None else decode_value(SNAPSHOT_TYPE, bytes(row[0]))

    async def load_group(self, group_id: str) -> dict[SharePartitionKey, ShareStateValue]:
        """Every persisted snapshot of ``group_id`` (DescribeShareGroupOffsets: any broker reads them)."""
        async with self._store.transaction() as conn:
            cursor = await conn.execute(
                "SELECT topic_id, partition, state FROM share_partition_state WHERE group_id = %s", (group_id,))
            rows = await cursor.fetchall()
        return {(group_id, row[0], int(row[1])): decode_value(SNAPSHOT_TYPE, bytes(row[2])) for row in rows}

    async def save(self, lease: Lease, key: SharePartitionKey, value: ShareStateValue) -> None:
        """Replace the snapshot of ``key`` unless a newer one (a higher snapshot epoch) is
        there already, fenced by ``lease`` (``LeaseLostError``: nothing written)."""
        self._check(lease, key)
        group_id, topic_id, partition = key
        async with self._store.transaction() as conn:
            await self._fence(conn, lease)
            await conn.execute(_SAVE_SQL, (group_id, topic_id, partition, value.snapshot_epoch,
                                             encode_value(SNAPSHOT_TYPE, value)))

    async def delete(self, lease: Lease, key: SharePartitionKey) -> None:
        """Forget the state of ``key`` (DeleteShareGroupOffsets), fenced by ``lease``."""
        self._check(lease, key)
        group_id, topic_id, partition = key
        async with self._store.transaction() as conn:
            await self._fence(conn, lease)
            await conn.execute(
                "DELETE FROM share_partition_state WHERE group_id = %s AND topic_id = %s AND partition = %s",
                (group_id, topic_id, partition))

    async def overwrite(self, coordinator: Lease, writes: Mapping[SharePartitionKey, ShareStateValue | None]) -> None:
        """Replace (a value) or delete (None) these snapshots for the group's coordinator, taking
        the share-partitions' leases from their owners (see the module docstring); fenced by
        ``coordinator``, the lease of the group's ``__consumer_offsets`` partition
        (``LeaseLostError``: nothing written)."""
        if not writes:
            return
        resources = sorted(share_resource(key) for key in writes)
        async with self._store.transaction() as conn:
            await self._fence(conn, coordinator)
            await conn.execute("INSERT INTO coordinator_leases (resource) SELECT unnest(%s::text[]) ON CONFLICT DO NOTHING",
                               (resources,))
            # Locked in one order, so two coordinators' overwrites never wait for each other crosswise.
            await conn.execute("SELECT resource FROM coordinator_leases WHERE resource = ANY(%s) ORDER BY resource "
                               "FOR UPDATE", (resources,))
            await conn.execute("UPDATE coordinator_leases SET owner_node_id = NULL, owner_incarnation = NULL, "
                               "epoch = epoch + 1, changed_at = now() WHERE resource = ANY(%s)", (resources,))
            for key, value in writes.items():
                group_id, topic_id, partition = key
                if value is None:
                    await conn.execute("DELETE FROM share_partition_state "
                                       "WHERE group_id = %s AND topic_id = %s AND partition = %s",
                                       (group_id, topic_id, partition))
                else:
                    await conn.execute(_UPSERT_SQL, (group_id, topic_id, partition, value.snapshot_epoch,
                                                     encode_value(SNAPSHOT_TYPE, value)))

    async def lost(self, me: BrokerIdentity, leases: Iterable[Lease]) -> set[str]:
        """The resources of ``leases`` that ``me`` no longer holds at their epoch (an overwrite
        took them, or its broker lease was fenced): their copies are stale."""
        held = {lease.resource: lease.epoch for lease in leases}
        if not held:
            return set()
        async with self._store.transaction() as conn:
            cursor = await conn.execute(
                "SELECT resource, epoch FROM coordinator_leases WHERE resource = ANY(%s) "
                "AND owner_node_id = %s AND owner_incarnation = %s", (sorted(held), me.node_id, me.incarnation))
            still = {str(row[0]): int(row[1]) for row in await cursor.fetchall()}
        return {resource for resource, epoch in held.items() if still.get(resource) != epoch}

    async def _fence(self, conn: psycopg.AsyncConnection[Any], lease: Lease) -> None:
        await fenced(conn, lease.resource, lease.epoch, lease.incarnation, idle_timeout_ms=self._idle_timeout_ms)

    @staticmethod
    def _check(lease: Lease, key: SharePartitionKey) -> None:
        if lease.resource != share_resource(key):
            raise ValueError(f"the lease of {lease.resource} does not cover share-partition {share_resource(key)}")
