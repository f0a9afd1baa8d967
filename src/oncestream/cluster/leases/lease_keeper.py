"""The periodic lease round of a broker: acquire, hand off and lose coordinator partitions, and
tell the coordinators (load on acquire, unload on loss).

A round (``run_round``): ``CoordinatorLeases.acquire`` over every partition of every coordinator's
internal topic; partitions held now with an epoch not yet loaded are loaded (a new epoch means the
lease was lost and taken again: reloaded); partitions loaded but no longer held are unloaded (the
broker lease expired and another broker took them, or it deregistered); surplus partitions (a
broker joined and prefers them) are unloaded first, then released, so the preferred broker takes
them on its next round. ``run`` repeats this every ``interval_ms`` (the broker's heartbeat interval
is a good value: takeover then follows an owner's death within session timeout + interval).

If a round fails (PostgreSQL unreachable) the partitions stay loaded while they may still be held:
their writes are fenced anyway, so a stale owner can write nothing. Once no round has succeeded for
``session_timeout_ms`` (the broker's monotonic clock: a lower bound of the time PostgreSQL saw go
by), every partition is unloaded, so a cut-off broker stops answering from state another broker
may already be changing. (Only this early unload reads the broker's clock, and unloading early
is always safe; who holds a lease is decided by PostgreSQL's clock alone.) ``stop`` (SIGTERM)
unloads everything and releases every lease.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from oncestream.async_wait import wait_event
from oncestream.cluster.leases.coordinator_leases import (
    BrokerIdentity,
    CoordinatorLeases,
    Lease,
    preferred_owner,
    resource_name,
)

log = logging.getLogger(__name__)


class CoordinatorPartitions(Protocol):
    """A coordinator whose partitions are owned through leases (GroupService, TxnService)."""

    @property
    def topic_name(self) -> str:
        """Its internal topic."""
        ...

    @property
    def num_partitions(self) -> int:
        """Partitions of its internal topic."""
        ...

    async def load_partition(self, partition: int, lease: Lease) -> None:
        """The lease of ``partition`` is held: load it (appends carry ``lease``)."""
        ...

    def unload_partition(self, partition: int) -> None:
        """The lease of ``partition`` is lost or handed off: stop serving it at once."""
        ...


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class LeaseKeeper:
    """Runs the lease rounds of one broker registration for its coordinators."""

    def __init__(self, leases: CoordinatorLeases, me: BrokerIdentity, coordinators: Sequence[CoordinatorPartitions],
                 *, interval_ms: int, session_timeout_ms: int, mono_ms: Callable[[], int] = _monotonic_ms) -> None:
        self._leases = leases
        self._me = me
        self._mono_ms = mono_ms
        self._interval_ms = interval_ms
        self._session_timeout_ms = session_timeout_ms
        self._by_resource: dict[str, tuple[CoordinatorPartitions, int]] = {
            resource_name(c.topic_name, p): (c, p) for c in coordinators for p in range(c.num_partitions)
        }
        self._loaded: dict[str, Lease] = {}
        self._owners: dict[str, int] = {}
        self._live_node_ids: tuple[int, ...] = ()
        self._last_success_ms: int | None = None
        self._wake = asyncio.Event()

    @property
    def node_id(self) -> int:
        """The node id of the registration whose leases this keeper holds."""
        return self._me.node_id

    @property
    def loaded(self) -> dict[str, Lease]:
        """The leases whose partitions are loaded now."""
        return dict(self._loaded)

    def coordinator_node(self, topic: str, partition: int) -> int | None:
        """FindCoordinator's answer for a partition of an internal topic, from the last round:
        this broker if it has the partition loaded; else its live owner; else the broker that
        will take it (rendezvous over the live brokers; the client retries there until it has
        loaded); None when no broker is known to be live (COORDINATOR_NOT_AVAILABLE). At most one
        round stale: a client sent to a former owner hears NOT_COORDINATOR and asks again."""
        resource = resource_name(topic, partition)
        if resource in self._loaded:
            return self._me.node_id
        owner = self._owners.get(resource)
        if owner is not None and owner != self._me.node_id:
            return owner
        return preferred_owner(resource, self._live_node_ids)

    def wake(self) -> None:
        """Run the next round now (e.g. a lease was released elsewhere)."""
        self._wake.set()

    async def run_round(self) -> None:
        """One round (see module docstring); raises what PostgreSQL raised."""
        started_ms = self._mono_ms()
        rnd = await self._leases.acquire(self._me, list(self._by_resource))
        self._last_success_ms = started_ms
        self._owners = {r: node_id for r, node_id in rnd.owners.items() if r not in rnd.surplus}
        self._live_node_ids = rnd.live_node_ids
        for resource in [r for r in self._loaded if r not in rnd.held or r in rnd.surplus]:
            self._unload(resource)
        if rnd.surplus:
            await self._leases.release(self._me, rnd.surplus)
        for resource, lease in sorted(rnd.held.items()):
            if resource in rnd.surplus:
                continue
            current = self._loaded.get(resource)
            if current is not None and current.epoch == lease.epoch:
                continue
            if current is not None:
                self._unload(resource)
            coordinator, partition = self._by_resource[resource]
            try:
                await coordinator.load_partition(partition, lease)
            except Exception:
                log.exception("cannot load %s; retried next round", resource)
                coordinator.unload_partition(partition)
                continue
            self._loaded[resource] = lease
            log.info("loaded coordinator partition %s at lease epoch %d", resource, lease.epoch)

    def _unload(self, resource: str) -> None:
        coordinator, partition = self._by_resource[resource]
        coordinator.unload_partition(partition)
        self._loaded.pop(resource, None)
        log.info("unloaded coordinator partition %s", resource)

    def unload_all(self) -> None:
        """Stop serving every partition (the broker lease may be gone)."""
        for resource in list(self._loaded):
            self._unload(resource)

    async def run(self) -> None:
        """Rounds every ``interval_ms`` until cancelled."""
        while True:
            try:
                await self.run_round()
            except Exception as exc:  # PostgreSQL down: keep serving while the leases may hold
                log.warning("coordinator lease round failed: %s", exc, exc_info=True)
                last = self._last_success_ms
                if last is not None and self._mono_ms() - last >= self._session_timeout_ms and self._loaded:
                    log.warning("no lease round succeeded for %d ms: unloading every coordinator partition",
                                self._session_timeout_ms)
                    self.unload_all()
            self._wake.clear()
            # Not asyncio.wait_for: on 3.11 it can swallow the shutdown's cancellation (async_wait).
            await wait_event(self._wake, self._interval_ms / 1000)

    async def stop(self) -> None:
        """SIGTERM: unload every partition, then release every lease (before deregistering)."""
        self.unload_all()
        await self._leases.release(self._me)
