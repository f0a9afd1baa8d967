"""Leases of coordinator partitions in PostgreSQL, with epochs that fence every coordinator write.

A coordinator partition (a partition of ``__consumer_offsets``, ``__transaction_state`` or
``__share_group_state``) is a *resource* named ``'<topic>/<partition>'``. Its row in
``coordinator_leases`` (leases_schema.py) names the owner (node id and incarnation) and an epoch.
The lease holds while the owner's *broker* lease holds (its ``brokers`` row, same incarnation,
``lease_expires_at`` after PostgreSQL's clock): one broker heartbeat renews every lease it holds,
and a broker that stops heartbeating loses all of them at once, by PostgreSQL's clock only.

Who takes what (``acquire``), a rule every broker computes alike from the same table:
rendezvous hashing over the live brokers. For each resource, the *preferred* owner is the live
broker whose ``blake2b(resource, node_id)`` is highest. A broker takes a free resource (no
owner, or an owner whose broker lease expired or was deregistered, or an older incarnation)
only if it is that resource's preferred owner, bumping the epoch; it reports the resources it
holds but no longer prefers (``LeaseRound.surplus``: a broker joined), which its keeper unloads
and ``release``s so that the preferred broker takes them on its next round. With a stable set of
live brokers this converges in two rounds to the rendezvous assignment: each resource owned by
exactly one live broker, about ``n / live`` each (rendezvous hashing moves only the resources
of the broker that joined or left), and a dead broker's resources spread over all survivors.

Fencing (``fenced``): every coordinator write runs, in the SAME transaction, a
``SELECT ... FOR SHARE`` of its lease row that matches only while the row still carries the
writer's epoch and incarnation and the owner's broker lease is alive (``clock_timestamp()``).
The share lock makes a takeover (an UPDATE of that row) wait until the write committed or rolled
back, so a new owner's load sees every write the old owner committed, and a write that started
after the takeover finds another epoch and raises ``LeaseLostError`` (the coordinator answers
NOT_COORDINATOR and unloads the partition). ``acquire`` skips rows locked by an in-flight write
(``SKIP LOCKED``) rather than wait behind a paused writer; such a writer's transaction is ended by
``idle_in_transaction_session_timeout`` (set per write, see ``fenced``), and the next round takes
the lease.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import psycopg

from oncestream.errors import NotCoordinatorError


class LeaseLostError(NotCoordinatorError):
    """The writer no longer holds the lease of a coordinator partition (another epoch owns it, or
    its broker lease expired): nothing was written; answer NOT_COORDINATOR and unload it."""


class BrokerIdentity(Protocol):
    """Who holds leases: a broker registration (cluster/pg BrokerRegistry's ``Registration``)."""

    @property
    def node_id(self) -> int:
        """The broker's node id."""
        ...

    @property
    def incarnation(self) -> uuid.UUID:
        """The registration's unique id: a restarted broker is a new incarnation."""
        ...


class TransactionSource(Protocol):
    """Opens one PostgreSQL transaction (cluster/pg MetadataStore's ``transaction()``)."""

    def transaction(self) -> AbstractAsyncContextManager[psycopg.AsyncConnection[Any]]:
        """An async context manager yielding a connection inside one transaction (committed on
        a clean exit, rolled back on an exception)."""
        ...


@dataclass(frozen=True)
class Lease:
    """A lease held: the resource, its epoch and the holder's identity (what writes carry)."""

    resource: str
    epoch: int
    node_id: int
    incarnation: uuid.UUID


@dataclass(frozen=True)
class LeaseRound:
    """What one ``acquire`` round found: the leases held now, those of them to hand off, and
    the live owner of every resource that has one (a FindCoordinator cache until the next round)."""

    held: dict[str, Lease]
    surplus: frozenset[str]
    owners: dict[str, int]
    live_node_ids: tuple[int, ...]


def resource_name(topic: str, partition: int) -> str:
    """The lease resource of a coordinator partition: ``'<topic>/<partition>'``."""
    return f"{topic}/{partition}"


def preferred_owner(resource: str, live_node_ids: Iterable[int]) -> int | None:
    """The rendezvous-hashing owner of ``resource`` among ``live_node_ids`` (None if empty)."""
    best: tuple[bytes, int] | None = None
    for node_id in live_node_ids:
        score = hashlib.blake2b(f"{resource}\x00{node_id}".encode(), digest_size=16).digest()
        if best is None or (score, node_id) > best:
            best = (score, node_id)
    return None if best is None else best[1]


# NOTIFY channel of freed leases (a wake-up only: the round re-reads the table).
LEASES_CHANNEL = "oncestream_leases"

# The lease row of a resource if the writer still holds it: same epoch and incarnation, and the
# owner's broker lease alive now. FOR SHARE OF l: a takeover waits for this transaction. The
# same round trip sets the transaction's idle timeout (unchanged when none is given).
_FENCE_SQL = """
SELECT l.epoch,
       set_config('idle_in_transaction_session_timeout',
                  COALESCE(%(idle_timeout)s, current_setting('idle_in_transaction_session_timeout')), true)
FROM coordinator_leases l
JOIN brokers b ON b.node_id = l.owner_node_id AND b.incarnation = l.owner_incarnation
WHERE l.resource = %(resource)s AND l.epoch = %(epoch)s AND l.owner_incarnation = %(incarnation)s
  AND b.lease_expires_at > clock_timestamp()
FOR SHARE OF l
"""

_LIVE_BROKERS_SQL = """
SELECT node_id, incarnation FROM brokers WHERE lease_expires_at > clock_timestamp() ORDER BY node_id
"""

# Free rows among the candidates, locked for the takeover; rows an in-flight write holds are
# skipped (taken next round) rather than waited for.
_TAKE_SQL = """
WITH free AS (
    SELECT l.resource FROM coordinator_leases l
    LEFT JOIN brokers b ON b.node_id = l.owner_node_id AND b.incarnation = l.owner_incarnation
        AND b.lease_expires_at > clock_timestamp()
    WHERE l.resource = ANY(%(candidates)s) AND b.node_id IS NULL
    FOR UPDATE OF l SKIP LOCKED
)
UPDATE coordinator_leases l
SET owner_node_id = %(node_id)s, owner_incarnation = %(incarnation)s, epoch = l.epoch + 1, changed_at = now()
FROM free WHERE l.resource = free.resource
"""

_HELD_SQL = """
SELECT resource, epoch FROM coordinator_leases
WHERE owner_node_id = %s AND owner_incarnation = %s AND resource = ANY(%s)
"""

_OWNERS_SQL = """
SELECT l.resource, l.owner_node_id FROM coordinator_leases l
JOIN brokers b ON b.node_id = l.owner_node_id AND b.incarnation = l.owner_incarnation
WHERE l.resource = ANY(%s) AND b.lease_expires_at > clock_timestamp()
"""


async def fenced(conn: psycopg.AsyncConnection[Any], resource: str, epoch: int, incarnation: uuid.UUID,
                 *, idle_timeout_ms: int | None = None) -> None:
    """Check, inside the caller's transaction and before its writes, that the writer still holds
    ``resource`` at ``epoch``; raise ``LeaseLostError`` otherwise (roll the transaction back).

    The lease row stays share-locked until the transaction ends, so no takeover can slip between
    this check and the commit. ``idle_timeout_ms`` bounds how long a writer that stalls inside
    the transaction (a paused process) keeps that lock: PostgreSQL ends its session after that
    long idle in the transaction (``idle_in_transaction_session_timeout``, this transaction only).
    """
    timeout = None if idle_timeout_ms is None else str(int(idle_timeout_ms))
    cursor = await conn.execute(_FENCE_SQL, {"resource": resource, "epoch": epoch, "incarnation": incarnation,
                                             "idle_timeout": timeout})
    if await cursor.fetchone() is None:
        raise LeaseLostError(f"the lease of {resource} at epoch {epoch} is no longer held by incarnation {incarnation}")


class CoordinatorLeases:
    """Acquire, hand off and look up leases of coordinator partitions (see module docstring)."""

    def __init__(self, store: TransactionSource) -> None:
        self._store = store

    async def acquire(self, me: BrokerIdentity, resources: Sequence[str]) -> LeaseRound:
        """One round for broker ``me`` over ``resources``: take the free ones it prefers (epoch
        bumped), and report every lease it holds and which of them it should hand off. Holds
        nothing if ``me``'s broker lease has expired."""
        names = sorted(set(resources))
        async with self._store.transaction() as conn:
            await conn.execute(
                "INSERT INTO coordinator_leases (resource) SELECT unnest(%s::text[]) ON CONFLICT DO NOTHING",
                (names,))
            cursor = await conn.execute(_LIVE_BROKERS_SQL)
            live = [(int(row[0]), row[1]) for row in await cursor.fetchall()]
            if (me.node_id, me.incarnation) not in live:
                return LeaseRound({}, frozenset(), {}, tuple(sorted({node_id for node_id, _ in live})))
            live_ids = sorted({node_id for node_id, _ in live})
            preferred = {name: preferred_owner(name, live_ids) for name in names}
            candidates = [name for name in names if preferred[name] == me.node_id]
            if candidates:
                await conn.execute(_TAKE_SQL, {"candidates": candidates, "node_id": me.node_id,
                                               "incarnation": me.incarnation})
            cursor = await conn.execute(_HELD_SQL, (me.node_id, me.incarnation, names))
            held = {str(row[0]): Lease(str(row[0]), int(row[1]), me.node_id, me.incarnation)
                    for row in await cursor.fetchall()}
            cursor = await conn.execute(_OWNERS_SQL, (names,))
            owners = {str(row[0]): int(row[1]) for row in await cursor.fetchall()}
        surplus = frozenset(name for name in held if preferred[name] != me.node_id)
        return LeaseRound(held, surplus, owners, tuple(live_ids))

    async def release(self, me: BrokerIdentity, resources: Iterable[str] | None = None) -> None:
        """Give up ``me``'s leases (all of them by default): on SIGTERM or to hand a surplus
        resource to its preferred owner, which takes it at its next round. Unload first."""
        async with self._store.transaction() as conn:
            if resources is None:
                await conn.execute(
                    "UPDATE coordinator_leases SET owner_node_id = NULL, owner_incarnation = NULL, changed_at = now()"
                    " WHERE owner_node_id = %s AND owner_incarnation = %s", (me.node_id, me.incarnation))
            else:
                await conn.execute(
                    "UPDATE coordinator_leases SET owner_node_id = NULL, owner_incarnation = NULL, changed_at = now()"
                    " WHERE owner_node_id = %s AND owner_incarnation = %s AND resource = ANY(%s)",
                    (me.node_id, me.incarnation, sorted(set(resources))))

    async def announce(self) -> None:
        """NOTIFY ``LEASES_CHANNEL``: leases were freed (a broker released them and deregistered),
        so every keeper listening runs a round now instead of at its next interval."""
        async with self._store.transaction() as conn:
            await conn.execute("SELECT pg_notify(%s, '')", (LEASES_CHANNEL,))

    async def owners(self, resources: Iterable[str]) -> dict[str, int]:
        """The live owner's node id of each resource that has one (FindCoordinator)."""
        async with self._store.transaction() as conn:
            cursor = await conn.execute(_OWNERS_SQL, (sorted(set(resources)),))
            return {str(row[0]): int(row[1]) for row in await cursor.fetchall()}

    async def owner_of(self, resource: str) -> int | None:
        """The node id of the live owner of ``resource``, or None (answer COORDINATOR_NOT_AVAILABLE)."""
        return (await self.owners([resource])).get(resource)

    async def live_node_ids(self) -> list[int]:
        """Node ids of the brokers whose lease is alive by PostgreSQL's clock."""
        async with self._store.transaction() as conn:
            cursor = await conn.execute(_LIVE_BROKERS_SQL)
            return sorted({int(row[0]) for row in await cursor.fetchall()})

    async def preferred_owner_of(self, resource: str) -> int | None:
        """The live broker that will take ``resource`` when it has no owner (FindCoordinator may
        name it while the lease is free: the client retries there until it has loaded)."""
        return preferred_owner(resource, await self.live_node_ids())
