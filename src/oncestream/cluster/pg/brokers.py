"""The broker registry: which brokers are live, by a lease in PostgreSQL (table ``brokers``).

A broker registers its node id with a fresh ``incarnation`` (a uuid of this process) and a lease of
``session_timeout_ms``; it heartbeats to extend the lease. Every expiry is judged by PostgreSQL's
clock (``clock_timestamp()``), never a broker's, so brokers with skewed clocks agree.

State of one node id's row, and who may change it:

    live (lease_expires_at > clock)  --heartbeat by the same incarnation-->  live (extended)
    live                             --deregister by the same incarnation--> expired (at once)
    live                             --time passes-------------------------> expired
    expired                          --register by any incarnation---------> live (new incarnation,
                                                                              broker_epoch + 1)
    live                             --register by another incarnation-----> refused (NodeIdInUseError)

A heartbeat succeeds only ``WHERE incarnation = mine AND lease_expires_at > clock``: a broker paused
past its lease (SIGSTOP, a long GC, a partition) cannot extend it when it wakes up, even if nobody
took its id over meanwhile; it gets ``BrokerFencedError`` and must stop acting for the cluster and
register again (a new incarnation and broker epoch). Writes of other areas that must be fenced by a
live registration call ``check_registration_alive(conn, registration)`` in their own transaction.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from oncestream.cluster.pg.errors import BrokerFencedError, NodeIdInUseError
from oncestream.cluster.pg.store import Conn, MetadataStore

# The lease interval from a millisecond count, computed by PostgreSQL.
_LEASE = "clock_timestamp() + make_interval(secs => %(session_ms)s / 1000.0)"


@dataclass(frozen=True)
class Registration:
    """This broker's claim on its node id: valid while its lease is alive in PostgreSQL."""

    node_id: int
    incarnation: uuid.UUID
    # Grows at every registration of the node id (Kafka's broker epoch).
    broker_epoch: int
    session_timeout_ms: int


@dataclass(frozen=True)
class BrokerInfo:
    """A live broker as Metadata and DescribeCluster list it."""

    node_id: int
    host: str
    port: int
    rack: str | None
    listeners: tuple[dict[str, Any], ...]
    broker_epoch: int
    incarnation: uuid.UUID


@dataclass(frozen=True)
class RegistrationRow:
    """A row of ``brokers``, live or not (for ``oncestream cluster status``)."""

    broker: BrokerInfo
    # Milliseconds until the lease ends by PostgreSQL's clock; zero or negative once it has.
    lease_remaining_ms: int
    registered_at: datetime

    @property
    def live(self) -> bool:
        """Whether the lease was alive when the row was read."""
        return self.lease_remaining_ms > 0


_REGISTER_SQL = f"""
INSERT INTO brokers AS b (node_id, incarnation, broker_epoch, host, port, rack, listeners,
                          session_timeout_ms, lease_expires_at, registered_at)
VALUES (%(node_id)s, %(incarnation)s, 1, %(host)s, %(port)s, %(rack)s, %(listeners)s,
        %(session_ms)s, {_LEASE}, clock_timestamp())
ON CONFLICT (node_id) DO UPDATE SET
    incarnation = EXCLUDED.incarnation, broker_epoch = b.broker_epoch + 1, host = EXCLUDED.host,
    port = EXCLUDED.port, rack = EXCLUDED.rack, listeners = EXCLUDED.listeners,
    session_timeout_ms = EXCLUDED.session_timeout_ms, lease_expires_at = EXCLUDED.lease_expires_at,
    registered_at = EXCLUDED.registered_at
WHERE b.lease_expires_at <= clock_timestamp() OR b.incarnation = EXCLUDED.incarnation
RETURNING broker_epoch
"""

_HOLDER_SQL = """
SELECT host, port, incarnation,
       greatest(0, extract(epoch FROM lease_expires_at - clock_timestamp()) * 1000)::bigint
FROM brokers WHERE node_id = %s
"""


class BrokerRegistry:
    """Register, heartbeat, deregister and list brokers (rows of ``brokers``)."""

    # Polling interval while waiting for a previous incarnation's lease to run out.
    TAKEOVER_POLL_MS = 200

    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    async def register(self, node_id: int, host: str, port: int, rack: str | None, session_timeout_ms: int,
                       *, listeners: Sequence[dict[str, Any]] = (), takeover_wait_ms: int = 0) -> Registration:
        """Claim ``node_id`` with a new incarnation and a lease of ``session_timeout_ms``.

        An expired holder is taken over (broker epoch + 1). A live one (another process, or this
        node's previous life killed before its lease ran out) is waited out for up to
        ``takeover_wait_ms``, then ``NodeIdInUseError`` says who holds it and for how long."""
        if session_timeout_ms <= 0:
            raise ValueError(f"session_timeout_ms must be positive, got {session_timeout_ms}")
        incarnation = uuid.uuid4()
        params = {"node_id": node_id, "incarnation": incarnation, "host": host, "port": port, "rack": rack,
                  "listeners": json.dumps(list(listeners)), "session_ms": session_timeout_ms}
        deadline = time.monotonic() + takeover_wait_ms / 1000

        async def claim(conn: Conn) -> int | tuple[str, int, uuid.UUID, int]:
            cursor = await conn.execute(_REGISTER_SQL, params)
            row = await cursor.fetchone()
            if row is not None:
                return int(row[0])
            cursor = await conn.execute(_HOLDER_SQL, (node_id,))
            holder = await cursor.fetchone()
            if holder is None:  # deleted between the two statements: try again
                return (host, port, incarnation, 0)
            return (str(holder[0]), int(holder[1]), holder[2], int(holder[3]))

        async def claimed_before(conn: Conn) -> int | None:
            # A claim whose commit outcome is unknown committed iff the row names our incarnation.
            cursor = await conn.execute("SELECT broker_epoch FROM brokers WHERE node_id = %s AND incarnation = %s",
                                        (node_id, incarnation))
            row = await cursor.fetchone()
            return int(row[0]) if row is not None else None

        while True:
            outcome = await self.store.run(claim, read_back=claimed_before)
            if isinstance(outcome, int):
                return Registration(node_id, incarnation, outcome, session_timeout_ms)
            holder_host, holder_port, holder_incarnation, remaining_ms = outcome
            left_s = deadline - time.monotonic()
            if left_s <= 0:
                raise NodeIdInUseError(
                    f"node id {node_id} is held by a live broker at {holder_host}:{holder_port} (incarnation "
                    f"{holder_incarnation}) whose lease runs for another {remaining_ms} ms; another broker "
                    "may be configured with the same node.id")
            await asyncio.sleep(min(left_s, max(remaining_ms, self.TAKEOVER_POLL_MS) / 1000,
                                    self.TAKEOVER_POLL_MS / 1000 * 5))

    async def heartbeat(self, registration: Registration, *, retry_timeout_ms: int | None = None) -> datetime:
        """Extend the lease by ``session_timeout_ms`` from now (PostgreSQL's clock); the new
        expiry. ``BrokerFencedError`` when the lease had already expired or another incarnation
        holds the node id: the broker must stop acting for the cluster and register again.
        Retries are bounded by ``retry_timeout_ms``, by default the store's bound or the session
        timeout if shorter (past it the answer is known: fenced)."""
        if retry_timeout_ms is None:
            retry_timeout_ms = min(self.store.config.retry_timeout_ms, registration.session_timeout_ms)

        async def extend(conn: Conn) -> datetime:
            cursor = await conn.execute(
                f"UPDATE brokers SET lease_expires_at = {_LEASE}"
                " WHERE node_id = %(node_id)s AND incarnation = %(incarnation)s"
                " AND lease_expires_at > clock_timestamp() RETURNING lease_expires_at",
                {"node_id": registration.node_id, "incarnation": registration.incarnation,
                 "session_ms": registration.session_timeout_ms})
            row = await cursor.fetchone()
            if row is None:
                raise await _fenced(conn, registration)
            expires: datetime = row[0]
            return expires

        async def extend_again(conn: Conn) -> datetime | None:
            return None  # an extension whose outcome is unknown is simply made again (it is idempotent)

        return await self.store.run(extend, read_back=extend_again, retry_timeout_ms=retry_timeout_ms)

    async def deregister(self, registration: Registration) -> None:
        """End the lease at once (a clean shutdown): the broker leaves ``live_brokers`` now and its
        node id is free. A registration already expired or taken over is left alone."""

        async def end(conn: Conn) -> None:
            await conn.execute(
                "UPDATE brokers SET lease_expires_at = clock_timestamp()"
                " WHERE node_id = %s AND incarnation = %s AND lease_expires_at > clock_timestamp()",
                (registration.node_id, registration.incarnation))

        async def ended(conn: Conn) -> None:
            return None  # ending again is harmless

        await self.store.run(end, read_back=ended)

    async def live_brokers(self) -> list[BrokerInfo]:
        """The brokers whose lease has not expired by PostgreSQL's clock, by node id."""

        async def read(conn: Conn) -> list[BrokerInfo]:
            cursor = await conn.execute(
                "SELECT node_id, host, port, rack, listeners, broker_epoch, incarnation FROM brokers"
                " WHERE lease_expires_at > clock_timestamp() ORDER BY node_id")
            return [BrokerInfo(int(r[0]), str(r[1]), int(r[2]), r[3], tuple(r[4]), int(r[5]), r[6])
                    for r in await cursor.fetchall()]

        return await self.store.run(read)

    async def all_registrations(self) -> list[RegistrationRow]:
        """Every node id ever registered, live or not, with its lease's remaining time, by node id."""

        async def read(conn: Conn) -> list[RegistrationRow]:
            cursor = await conn.execute(
                "SELECT node_id, host, port, rack, listeners, broker_epoch, incarnation,"
                " floor(extract(epoch FROM lease_expires_at - clock_timestamp()) * 1000)::bigint, registered_at"
                " FROM brokers ORDER BY node_id")
            return [RegistrationRow(BrokerInfo(int(r[0]), str(r[1]), int(r[2]), r[3], tuple(r[4]), int(r[5]), r[6]),
                                    int(r[7]), r[8])
                    for r in await cursor.fetchall()]

        return await self.store.run(read)


async def check_registration_alive(conn: Conn, registration: Registration) -> None:
    """Inside another area's transaction: ``BrokerFencedError`` unless ``registration`` still holds
    its node id with a live lease. Locks the row (FOR SHARE) so the lease cannot be taken over before
    the caller's transaction commits."""
    cursor = await conn.execute(
        "SELECT 1 FROM brokers WHERE node_id = %s AND incarnation = %s AND lease_expires_at > clock_timestamp()"
        " FOR SHARE", (registration.node_id, registration.incarnation))
    if await cursor.fetchone() is None:
        raise await _fenced(conn, registration)


async def _fenced(conn: Conn, registration: Registration) -> BrokerFencedError:
    """The error for a registration that no longer holds its node id, saying why."""
    cursor = await conn.execute("SELECT incarnation, lease_expires_at <= clock_timestamp() FROM brokers"
                                " WHERE node_id = %s", (registration.node_id,))
    row = await cursor.fetchone()
    if row is None:
        why = "its row is gone"
    elif row[0] != registration.incarnation:
        why = f"another incarnation ({row[0]}) registered it"
    else:
        why = "its lease expired by PostgreSQL's clock"
    return BrokerFencedError(
        f"broker {registration.node_id} (incarnation {registration.incarnation}, epoch {registration.broker_epoch}) "
        f"is fenced: {why}; it must register again")
