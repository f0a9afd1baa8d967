"""The coordinators of a cluster broker, assembled: group and transaction services whose state is
in PostgreSQL, the lease keeper that gives them their partitions, and FindCoordinator's answer.

What the broker does with it (docs/cluster-coordinators.md):

- ``await ClusterCoordinators.open(store, props, ...)`` before the server starts; the broker state
  uses ``.groups`` and ``.transactions`` in place of the single broker's services (the server's
  timer tasks run them as before);
- ``run(registration)`` as a background task once the broker is registered: lease rounds every
  ``interval_ms`` and at every announcement on ``oncestream_leases``;
- on SIGTERM: ``await stop()`` (every partition unloaded, every lease released), deregister,
  then ``await announce()`` so the other brokers take the partitions over at once;
- FindCoordinator: ``coordinator_node(key_type, key)`` (None: COORDINATOR_NOT_AVAILABLE).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from oncestream.broker.group_service import OFFSETS_TOPIC, GroupService
from oncestream.broker.txn_service import TRANSACTION_STATE_TOPIC, TxnMarkerWriter, TxnService
from oncestream.cluster.leases.coordinator_leases import (
    LEASES_CHANNEL,
    BrokerIdentity,
    CoordinatorLeases,
    Lease,
    resource_name,
)
from oncestream.cluster.leases.lease_keeper import LeaseKeeper
from oncestream.cluster.leases.pg_internal_topic import PgInternalTopic
from oncestream.cluster.leases.producer_id_blocks import PgProducerIdService
from oncestream.cluster.pg.store import MetadataStore
from oncestream.coordinator.group.consumer.records import TopicMetadata
from oncestream.errors import CoordinatorInvariantError

log = logging.getLogger("oncestream.broker")

# FindCoordinator key types (KIP-98 added 1 for transactions; 2 = share is not on leases yet).
GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1


class ClusterCoordinators:
    """Group and transaction coordinators on leases (see module docstring)."""

    def __init__(self, store: MetadataStore, groups: GroupService, transactions: TxnService, *,
                 interval_ms: int, session_timeout_ms: int) -> None:
        self.store = store
        self.groups = groups
        self.transactions = transactions
        self.leases = CoordinatorLeases(store)
        self._interval_ms = interval_ms
        self._session_timeout_ms = session_timeout_ms
        self._keeper: LeaseKeeper | None = None

    @classmethod
    async def open(cls, store: MetadataStore, props: dict[str, str], now_ms: Callable[[], int],
                   mono_ms: Callable[[], int], *, producer_ids: PgProducerIdService, markers: TxnMarkerWriter,
                   topics: Callable[[], dict[str, TopicMetadata]],
                   on_marker: Callable[[str, int], None] = lambda topic, partition: None,
                   interval_ms: int, session_timeout_ms: int) -> ClusterCoordinators:
        """The services on the cluster's internal topics (partition counts as the first broker
        stored them). ``topics`` lists the catalog's topics synchronously (a cached snapshot: the
        KIP-848 assignors call it); ``interval_ms`` is the lease round interval (the heartbeat
        interval), ``session_timeout_ms`` the broker session timeout (it also bounds how long a
        paused writer may hold a lease row)."""
        offsets = await PgInternalTopic.open(store, OFFSETS_TOPIC, int(props.get("offsets.topic.num.partitions", "10")),
                                             idle_timeout_ms=session_timeout_ms)
        state = await PgInternalTopic.open(
            store, TRANSACTION_STATE_TOPIC, int(props.get("transaction.state.log.num.partitions", "10")),
            idle_timeout_ms=session_timeout_ms)
        groups = GroupService(None, props, now_ms, mono_ms, offsets_log=offsets, topics=topics)
        transactions = TxnService(None, groups, props, now_ms, producer_ids.next_id, on_marker=on_marker,
                                  mono_ms=mono_ms, producer_ids_ready=producer_ids.ready,
                                  state_log=state, markers=markers)
        return cls(store, groups, transactions, interval_ms=interval_ms, session_timeout_ms=session_timeout_ms)

    @property
    def keeper(self) -> LeaseKeeper | None:
        """The lease keeper of the running registration (None before ``run``)."""
        return self._keeper

    async def run(self, registration: BrokerIdentity) -> None:
        """Lease rounds for ``registration`` until cancelled (a new registration after a fence
        needs a new ``run``: the old one's partitions are unloaded first)."""
        if self._keeper is not None:
            self._keeper.unload_all()
        keeper = LeaseKeeper(self.leases, registration, [self.groups, self.transactions],
                             interval_ms=self._interval_ms, session_timeout_ms=self._session_timeout_ms)
        self._keeper = keeper
        listener = asyncio.get_running_loop().create_task(self._wake_on_announcements(keeper))
        try:
            await keeper.run()
        finally:
            listener.cancel()

    async def _wake_on_announcements(self, keeper: LeaseKeeper) -> None:
        async for _payload in self.store.listen(LEASES_CHANNEL):  # '' after a reconnection too
            keeper.wake()

    async def stop(self) -> None:
        """SIGTERM, before deregistering: unload every partition and release every lease."""
        if self._keeper is not None:
            await self._keeper.stop()

    async def announce(self) -> None:
        """After deregistering: wake every other broker's keeper to take the partitions over."""
        await self.leases.announce()

    def offsets_owner(self, partition: int) -> int | None:
        """The node that coordinates ``__consumer_offsets`` partition ``partition`` (the marker
        writer forwards transaction markers there); None when none is known."""
        return None if self._keeper is None else self._keeper.coordinator_node(OFFSETS_TOPIC, partition)

    def group_lease(self, group_id: str) -> Lease | None:
        """This broker's lease of the ``__consumer_offsets`` partition of ``group_id`` when it
        coordinates the group (what its writes for the group are fenced by), else None."""
        if self._keeper is None:
            return None
        partition = self.groups.coordinator.partition_for(group_id)
        return self._keeper.loaded.get(resource_name(OFFSETS_TOPIC, partition))

    async def transaction_partitions_to_list(self) -> frozenset[int] | None:
        """The ``__transaction_state`` partitions this broker answers ListTransactions for: those
        whose lease PostgreSQL names it the live owner of, read now (not from the last round). None
        when the listing of the cluster cannot be complete yet: a partition has no live owner (its
        broker died and no survivor has taken its lease: one lease round), or this broker took a
        lease it has not loaded. Then the answer is COORDINATOR_LOAD_IN_PROGRESS, as Kafka answers
        for partitions being loaded, and clients retry; this broker's keeper runs a round at once,
        so the takeover does not wait for its interval. Raises what the metadata store raises."""
        if self._keeper is None:
            return None
        topic = TRANSACTION_STATE_TOPIC
        resources = {resource_name(topic, p): p for p in range(self.transactions.num_partitions)}
        owners = await self.leases.owners(resources)
        me = self._keeper.node_id
        loaded = self._keeper.loaded
        if any(owners.get(r) is None or (owners[r] == me and r not in loaded) for r in resources):
            self._keeper.wake()
            return None
        return frozenset(p for r, p in resources.items() if owners[r] == me)

    def coordinator_node(self, key_type: int, key: str) -> int | None:
        """FindCoordinator: the node id of the coordinator of ``key`` (a group id or a
        transactional id), from the last lease round; None when none is known."""
        if self._keeper is None:
            return None
        if key_type == GROUP_KEY_TYPE:
            return self._keeper.coordinator_node(OFFSETS_TOPIC, self.groups.coordinator.partition_for(key))
        if key_type == TRANSACTION_KEY_TYPE:
            return self._keeper.coordinator_node(TRANSACTION_STATE_TOPIC, self.transactions.partition_for(key))
        raise CoordinatorInvariantError(f"no coordinator on leases for key type {key_type}")
