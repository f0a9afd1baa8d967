"""The internal compacted topics as rows of PostgreSQL, every append fenced by its lease epoch.

In cluster mode the coordinators' records (``__consumer_offsets``, ``__transaction_state``,
``__share_group_state``) live in ``coordinator_records`` (leases_schema.py): one row per
(topic, partition, key) holding the latest value and the offset it was appended at. The topics
are compacted, so that row is exactly what compaction keeps, and a tombstone deletes the row
(a loader that replays the rows in offset order rebuilds what it would from the compacted log;
compaction would also drop the tombstone after ``delete.retention.ms``). Offsets of a partition
come from ``coordinator_partitions.next_offset`` and only grow.

Each ``append`` is one PostgreSQL transaction that first runs ``fenced`` on the partition's lease
(the epoch the coordinator loaded the partition with) and then writes: a former owner, paused
past its lease, writes nothing and gets ``LeaseLostError``.

Why the appends are async, and how the services use them: the single broker appends to its local
log synchronously (page cache, ``broker/internal_topic.InternalTopic``) and its coordinators'
drivers (group_service, txn_service, share_service) rely on that: call, persist, answer, with
nothing in between. A PostgreSQL round trip must not block the event loop, so this class has the
same shape as ``InternalTopic`` with ``append`` and ``read_*`` as coroutines
(``broker/internal_topic.AsyncInternalTopic``), and the drivers gained ``*_async`` twins of their
persisting entry points that await it. The twins fall through to the synchronous path when the
topic is the local ``InternalTopic``, so the single broker behaves exactly as before; the
alternative (a sync facade over a thread and a blocking connection) would stall the whole broker
for the length of a PostgreSQL restart.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from oncestream.cluster.leases.coordinator_leases import Lease, LeaseLostError, TransactionSource, fenced, resource_name
from oncestream.errors import UnknownTopicOrPartitionError

# How long a write transaction may sit idle (a paused broker) before PostgreSQL ends it and
# releases the lease row it share-locks (coordinator_leases.fenced).
DEFAULT_IDLE_TIMEOUT_MS = 10000

_UPSERT_SQL = """
INSERT INTO coordinator_records (topic, partition, key, value, "offset")
SELECT %s, %s, t.key, t.value, t.off FROM unnest(%s::bytea[], %s::bytea[], %s::bigint[]) AS t(key, value, off)
ON CONFLICT (topic, partition, key) DO UPDATE SET value = EXCLUDED.value, "offset" = EXCLUDED."offset"
"""

_NEXT_OFFSET_SQL = """
INSERT INTO coordinator_partitions (topic, partition, next_offset) VALUES (%s, %s, %s)
ON CONFLICT (topic, partition) DO UPDATE SET next_offset = coordinator_partitions.next_offset + EXCLUDED.next_offset
RETURNING next_offset
"""


async def internal_topic_partitions(store: TransactionSource, name: str, configured: int) -> int:
    """The partition count of internal topic ``name``: the one stored by the first broker that
    opened it, else ``configured`` (stored now). As with the local log, an existing topic keeps
    its count: coordinators map keys onto partitions, so every broker must agree on it."""
    if configured <= 0:
        raise UnknownTopicOrPartitionError(f"{name} needs at least one partition, got {configured}")
    async with store.transaction() as conn:
        await conn.execute(
            "INSERT INTO coordinator_topics (topic, num_partitions) VALUES (%s, %s) ON CONFLICT DO NOTHING",
            (name, configured))
        cursor = await conn.execute("SELECT num_partitions FROM coordinator_topics WHERE topic = %s", (name,))
        row = await cursor.fetchone()
    if row is None:
        raise UnknownTopicOrPartitionError(f"{name} has no partition count")  # unreachable: inserted above
    return int(row[0])


class PgInternalTopic:
    """One internal compacted topic in ``coordinator_records``; appends fenced per partition.

    The owner of the coordinator tells it which partitions it holds and at which lease
    (``own``/``disown``, from the lease keeper's load and unload); an append to a partition not
    held raises ``LeaseLostError`` without touching PostgreSQL.
    """

    def __init__(self, store: TransactionSource, name: str, num_partitions: int, *,
                 idle_timeout_ms: int = DEFAULT_IDLE_TIMEOUT_MS) -> None:
        self.name = name
        self.num_partitions = num_partitions
        self._store = store
        self._idle_timeout_ms = idle_timeout_ms
        self._leases: dict[int, Lease] = {}

    @classmethod
    async def open(cls, store: TransactionSource, name: str, configured_partitions: int, *,
                   idle_timeout_ms: int = DEFAULT_IDLE_TIMEOUT_MS) -> PgInternalTopic:
        """The topic with the cluster's partition count (``internal_topic_partitions``)."""
        num_partitions = await internal_topic_partitions(store, name, configured_partitions)
        return cls(store, name, num_partitions, idle_timeout_ms=idle_timeout_ms)

    def resource(self, partition: int) -> str:
        """The lease resource of one partition of this topic."""
        return resource_name(self.name, partition)

    def own(self, partition: int, lease: Lease) -> None:
        """Appends to ``partition`` carry ``lease`` from now on."""
        self._check_partition(partition)
        self._leases[partition] = lease

    def disown(self, partition: int) -> None:
        """Appends to ``partition`` are refused from now on."""
        self._leases.pop(partition, None)

    def lease_of(self, partition: int) -> Lease | None:
        """The lease appends to ``partition`` carry, if held."""
        return self._leases.get(partition)

    def _check_partition(self, partition: int) -> None:
        if not 0 <= partition < self.num_partitions:
            raise UnknownTopicOrPartitionError(f"{self.name} has no partition {partition}")

    async def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]], now_ms: int) -> None:
        """Append records (in order; a later record of a key replaces an earlier one, a ``None``
        value deletes the key) in one transaction fenced by the partition's lease. ``now_ms`` is
        accepted for InternalTopic's signature (rows carry no timestamp)."""
        self._check_partition(partition)
        lease = self._leases.get(partition)
        if lease is None:
            raise LeaseLostError(f"{self.resource(partition)} is not held by this broker")
        if not records:
            return
        async with self._store.transaction() as conn:
            await fenced(conn, lease.resource, lease.epoch, lease.incarnation, idle_timeout_ms=self._idle_timeout_ms)
            cursor = await conn.execute(_NEXT_OFFSET_SQL, (self.name, partition, len(records)))
            row = await cursor.fetchone()
            if row is None:
                raise LeaseLostError(f"no offset for {self.resource(partition)}")  # unreachable: RETURNING
            base_offset = int(row[0]) - len(records)
            latest: dict[bytes, tuple[int, bytes | None]] = {}
            for index, (key, value) in enumerate(records):
                latest[key] = (base_offset + index, value)
            upserts = [(k, v, o) for k, (o, v) in latest.items() if v is not None]
            deletes = [k for k, (_o, v) in latest.items() if v is None]
            if upserts:
                await conn.execute(_UPSERT_SQL, (self.name, partition, [k for k, _v, _o in upserts],
                                                 [v for _k, v, _o in upserts], [o for _k, _v, o in upserts]))
            if deletes:
                await conn.execute(
                    "DELETE FROM coordinator_records WHERE topic = %s AND partition = %s AND key = ANY(%s::bytea[])",
                    (self.name, partition, deletes))

    async def read_records(self, partitions: Iterable[int] | None = None) -> list[tuple[int, int, bytes, bytes | None]]:
        """(partition, offset, key, value) of every record kept, in offset order per partition."""
        wanted = list(range(self.num_partitions)) if partitions is None else sorted(set(partitions))
        async with self._store.transaction() as conn:
            cursor = await conn.execute(
                'SELECT partition, "offset", key, value FROM coordinator_records'
                ' WHERE topic = %s AND partition = ANY(%s) ORDER BY partition, "offset"',
                (self.name, wanted))
            rows: list[Any] = await cursor.fetchall()
        return [(int(r[0]), int(r[1]), bytes(r[2]), bytes(r[3])) for r in rows]

    async def read_all(self, partitions: Iterable[int] | None = None) -> list[tuple[bytes, bytes | None]]:
        """Every kept (key, value) record of the given partitions in offset order."""
        return [(key, value) for _p, _o, key, value in await self.read_records(partitions)]
