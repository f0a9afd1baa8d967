"""``oncestream cluster status``: what PostgreSQL says about a cluster, read in one snapshot.

Read-only (a REPEATABLE READ, READ ONLY transaction; the schema is not applied): the cluster id,
every registered broker with its lease (live, or expired how long ago, by PostgreSQL's clock),
the coordinator leases (owner and epoch), the topics and partitions, the batches committed, and
the objects by state (uploading, live, deleting: the garbage collector's backlog, and how many
are consolidated segments), and the consolidation lag (cluster/diskless/consolidation_status.py:
the partitions with the most batches not yet in a consolidated object).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import psycopg

from oncestream.broker.cluster_settings import redacted
from oncestream.cluster.diskless.consolidation_status import ConsolidationStatus, read_consolidation_status

# Lagging partitions listed one by one (the total counts them all).
LAGGING_SHOWN = 10


class ClusterStatusError(Exception):
    """The database cannot be read, or holds no cluster."""


@dataclass(frozen=True)
class BrokerRow:
    node_id: int
    host: str
    port: int
    broker_epoch: int
    live: bool
    lease_ms: int  # ms until the lease expires (live) or since it expired (not live)


@dataclass(frozen=True)
class LeaseRow:
    resource: str
    owner_node_id: int | None
    epoch: int


@dataclass
class ClusterStatus:
    cluster_id: str
    brokers: list[BrokerRow] = field(default_factory=list)
    leases: list[LeaseRow] = field(default_factory=list)
    topics: int = 0
    partitions: int = 0
    batches: int = 0
    objects: dict[str, tuple[int, int]] = field(default_factory=dict)  # state -> (count, bytes)
    consolidation: ConsolidationStatus | None = None

    def lines(self) -> list[str]:
        """The report, one line per fact."""
        out = [f"cluster {self.cluster_id}"]
        live = [b for b in self.brokers if b.live]
        out.append(f"brokers: {len(live)} live of {len(self.brokers)} registered")
        for b in self.brokers:
            held = f"lease {b.lease_ms} ms left" if b.live else f"expired {b.lease_ms} ms ago"
            out.append(f"  node {b.node_id} {b.host}:{b.port} epoch {b.broker_epoch} "
                       f"{'live' if b.live else 'gone'} ({held})")
        owned = [lease for lease in self.leases if lease.owner_node_id is not None]
        out.append(f"coordinator leases: {len(owned)} owned of {len(self.leases)}")
        for lease in self.leases:
            owner = f"node {lease.owner_node_id}" if lease.owner_node_id is not None else "no owner"
            out.append(f"  {lease.resource}: {owner}, epoch {lease.epoch}")
        out.append(f"topics: {self.topics}, partitions: {self.partitions}, batches: {self.batches}")
        consolidated = {c.state: c.consolidated for c in self.consolidation.objects} if self.consolidation else {}
        for state in ("uploading", "live", "deleting"):
            count, size = self.objects.get(state, (0, 0))
            out.append(f"objects {state}: {count} ({size} bytes, {consolidated.get(state, 0)} consolidated)")
        if self.consolidation is not None:
            lagging = self.consolidation.lagging
            out.append(f"consolidation lag: {self.consolidation.unconsolidated_batches} batches"
                       f" in {len(lagging)} partitions")
            for lag in lagging[:LAGGING_SHOWN]:
                age = "" if lag.oldest_age_ms is None else f", oldest {lag.oldest_age_ms} ms"
                out.append(f"  {lag.topic}-{lag.partition}: {lag.batches} batches ({lag.bytes} bytes{age})")
        return out


async def read_cluster_status(url: str, connect_timeout_ms: int = 10_000) -> ClusterStatus:
    """The status of the cluster whose metadata store ``url`` names; ClusterStatusError in words."""
    where = redacted(url)
    try:
        conn = await psycopg.AsyncConnection.connect(url, connect_timeout=max(2, connect_timeout_ms // 1000))
    except psycopg.Error as exc:
        raise ClusterStatusError(f"metadata store {where}: cannot connect: {_first_line(exc)}") from None
    try:
        await conn.set_isolation_level(psycopg.IsolationLevel.REPEATABLE_READ)
        await conn.set_read_only(True)
        async with conn.transaction():
            return await _read(conn)
    except psycopg.errors.UndefinedTable:
        raise ClusterStatusError(f"metadata store {where}: no cluster here (no broker ever started on it)") from None
    except psycopg.Error as exc:
        raise ClusterStatusError(f"metadata store {where}: {_first_line(exc)}") from None
    finally:
        await conn.close()


async def _rows(conn: psycopg.AsyncConnection[Any], sql: str) -> list[tuple[Any, ...]]:
    cursor = await conn.execute(sql)
    return list(await cursor.fetchall())


async def _read(conn: psycopg.AsyncConnection[Any]) -> ClusterStatus:
    ids = await _rows(conn, "SELECT value FROM cluster_meta WHERE key = 'cluster.id'")
    status = ClusterStatus(cluster_id=str(ids[0][0]) if ids else "(none yet)")
    for node_id, host, port, epoch, live, lease_ms in await _rows(conn, """
            SELECT node_id, host, port, broker_epoch, lease_expires_at > clock_timestamp(),
                   abs(extract(epoch FROM lease_expires_at - clock_timestamp()) * 1000)::bigint
              FROM brokers ORDER BY node_id"""):
        status.brokers.append(BrokerRow(int(node_id), str(host), int(port), int(epoch), bool(live), int(lease_ms)))
    for resource, owner, epoch in await _rows(
            conn, "SELECT resource, owner_node_id, epoch FROM coordinator_leases ORDER BY resource"):
        status.leases.append(LeaseRow(str(resource), None if owner is None else int(owner), int(epoch)))
    counts = await _rows(conn, """
            SELECT (SELECT count(*) FROM topics), (SELECT count(*) FROM partitions),
                   (SELECT count(*) FROM batches)""")
    status.topics, status.partitions, status.batches = (int(v) for v in counts[0])
    for state, count, size in await _rows(
            conn, "SELECT state, count(*), coalesce(sum(size_bytes), 0) FROM objects GROUP BY state"):
        status.objects[str(state)] = (int(count), int(size))
    # The lag is counted over every partition (the CLI lists the first LAGGING_SHOWN).
    status.consolidation = await read_consolidation_status(conn, limit=2**31 - 1)
    return status


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
