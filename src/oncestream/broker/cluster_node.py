"""A broker's place in a cluster: ``BrokerState.cluster`` in cluster mode (docs/cluster.md).

``ClusterNode`` holds what a broker of a cluster reaches beyond its own process: the metadata
store (PostgreSQL), the object store, the catalog of topics, this broker's registration and the
live brokers. The handlers that differ in cluster mode (Metadata, topics admin, configs of topics,
Produce, Fetch, ListOffsets, DeleteRecords) branch on ``state.cluster is not None`` and call
through it; every other handler serves from the per-process scratch state as before.

Registration (cluster/pg BrokerRegistry): at start, after the listeners are bound (the address
registered is the one bound); a heartbeat every ``broker.heartbeat.interval.ms`` renews the lease,
which PostgreSQL's clock expires after ``broker.session.timeout.ms`` without one. A heartbeat
refused as fenced (the lease had expired: the broker was paused, or PostgreSQL was unreachable
for longer than the session) re-registers with a new incarnation rather than exiting: nothing a
broker serves for Produce or Fetch depends on its lease (offsets are assigned in PostgreSQL's
transactions, idempotence is checked there), so a broker that comes back may serve again at
once. SIGTERM deregisters before the process ends, so the broker leaves Metadata at once.

Live brokers are read from PostgreSQL at most every ``LIVE_BROKERS_MAX_AGE_MS`` (Metadata asks
often; a broker whose lease expired leaves the answer within its session timeout plus that).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from oncestream.broker.cluster_leaders import leader_of
from oncestream.broker.cluster_settings import DEFAULT_SESSION_TIMEOUT_MS, ClusterSettings
from oncestream.broker.internal_topic import INTERNAL_TOPIC_CONFIGS
from oncestream.broker.peer_requests import PeerRequests
from oncestream.cluster.diskless.append_pipeline import DisklessAppendConfig, DisklessAppender
from oncestream.cluster.diskless.commit import DEFAULT_DELETE_GRACE_MS
from oncestream.cluster.diskless.consolidation import ConsolidationConfig, ConsolidationJob
from oncestream.cluster.diskless.log_start_moves import delete_records
from oncestream.cluster.diskless.object_cache import ObjectRangeCache
from oncestream.cluster.diskless.object_gc import ObjectGarbageCollector
from oncestream.cluster.diskless.orphans import OrphanSweeper
from oncestream.cluster.diskless.partition_rows import partition_producers
from oncestream.cluster.diskless.read_path import DisklessReader
from oncestream.cluster.diskless.retention import RetentionDefaults, RetentionEnforcer
from oncestream.cluster.diskless.wakeups import AppendWakeups
from oncestream.cluster.pg.brokers import BrokerInfo, BrokerRegistry, Registration
from oncestream.cluster.pg.catalog import CATALOG_CHANNEL, Catalog, TopicInfo
from oncestream.cluster.pg.errors import BrokerFencedError, MetadataStoreError
from oncestream.cluster.pg.store import Conn, MetadataStore
from oncestream.coordinator.group.consumer.records import TopicMetadata
from oncestream.errors import InvalidConfigError, OnceStreamError, UnknownTopicOrPartitionError
from oncestream.log.config import LogConfig
from oncestream.log.producer_state import ProducerStateInfo
from oncestream.remote.object_store import ObjectStore

if TYPE_CHECKING:
    from oncestream.broker.cluster_coordinators import ClusterCoordinators

log = logging.getLogger("oncestream.broker.cluster")

LIVE_BROKERS_MAX_AGE_MS = 500
# How stale a topic's id, partition count and configs may be on the produce and fetch paths
# (a topic created elsewhere is looked up at once; a deletion or new partitions show within this).
TOPIC_CACHE_MAX_AGE_MS = 1000
# Up to this many topics are looked up one by one; more, all at once.
FEW_TOPICS = 8
COMMIT_INTERVAL_KEY = "diskless.append.commit.interval.ms"
BUFFER_MAX_BYTES_KEY = "diskless.append.buffer.max.bytes"
# How long an object no batch points at any more is kept for fetches holding old coordinates.
DELETE_GRACE_KEY = "diskless.object.delete.grace.ms"
GC_INTERVAL_KEY = "diskless.gc.interval.ms"
DEFAULT_GC_INTERVAL_MS = 30_000
# The key prefix of every diskless object this broker writes (produce objects, consolidated
# segments) inside the object store's own prefix (s3://BUCKET/PREFIX); the orphan sweeper lists it.
OBJECT_KEY_PREFIX = ""

def _non_negative_key(props: dict[str, str], key: str, default: int) -> int:
    try:
        value = int(props.get(key, default))
    except ValueError:
        raise InvalidConfigError(f"{key}={props.get(key)!r}: not a non-negative integer") from None
    if value < 0:
        raise InvalidConfigError(f"{key}={value}: must be >= 0")
    return value


def append_config(props: dict[str, str], session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS) -> DisklessAppendConfig:
    """The appender's bounds from the broker's ``diskless.append.*`` properties; a commit stalled
    inside its transaction (the broker paused) holds its partitions at most ``session_timeout_ms``."""
    defaults = DisklessAppendConfig()
    return DisklessAppendConfig(
        commit_interval_ms=_non_negative_key(props, COMMIT_INTERVAL_KEY, defaults.commit_interval_ms),
        buffer_max_bytes=_non_negative_key(props, BUFFER_MAX_BYTES_KEY, defaults.buffer_max_bytes),
        delete_grace_ms=_non_negative_key(props, DELETE_GRACE_KEY, DEFAULT_DELETE_GRACE_MS),
        commit_idle_timeout_ms=session_timeout_ms)


def consolidation_config(props: dict[str, str]) -> ConsolidationConfig:
    """The consolidation job's settings from the broker's ``diskless.consolidation.*`` properties
    (docs/cluster-consolidation.md); InvalidConfigError for a bad value."""
    try:
        return ConsolidationConfig.from_broker_configs(props)
    except ValueError as exc:
        raise InvalidConfigError(f"diskless.consolidation: {exc}") from None


def _log_end(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("coordinator lease rounds ended: %s", task.exception())


def _meta(info: TopicInfo) -> TopicMeta:
    return TopicMeta(info.name, info.topic_id, info.num_partitions, info.internal, dict(info.configs))


def _endpoints(broker: BrokerInfo) -> dict[str, tuple[str, int]]:
    out: dict[str, tuple[str, int]] = {}
    for item in broker.listeners:
        name, host, port = item.get("name"), item.get("host"), item.get("port")
        if isinstance(name, str) and isinstance(host, str) and isinstance(port, int):
            out[name] = (host, port)
    return out


@dataclass(frozen=True)
class TopicMeta:
    """A topic of the catalog as the handlers see it."""

    name: str
    topic_id: uuid.UUID
    num_partitions: int
    internal: bool
    configs: dict[str, str]


@dataclass(frozen=True)
class PartitionLookup:
    """The catalog's topics a request names, read once per request (or why they could not be)."""

    topics: dict[str, TopicMeta]
    error: OnceStreamError | None = None

    def require(self, topic: str, partition: int) -> TopicMeta:
        """The topic of an existing partition; the catalog's error, or UNKNOWN_TOPIC_OR_PARTITION."""
        if self.error is not None:
            raise self.error
        info = self.topics.get(topic)
        if info is None or not 0 <= partition < info.num_partitions:
            raise UnknownTopicOrPartitionError(f"no partition {topic}-{partition}")
        return info


@dataclass(frozen=True)
class BrokerAddress:
    """A live broker as Metadata and DescribeCluster list it."""

    node_id: int
    host: str
    port: int
    rack: str | None
    # Advertised (host, port) by listener name, for answering on the listener a request came in on.
    endpoints: dict[str, tuple[str, int]]

    def endpoint_for(self, listener_name: str) -> tuple[str, int]:
        """The endpoint of ``listener_name``; the default one for a listener it does not have."""
        return self.endpoints.get(listener_name, (self.host, self.port))


class ClusterNode:
    """This broker's view of the cluster (see the module docstring)."""

    def __init__(self, settings: ClusterSettings, store: MetadataStore, object_store: ObjectStore,
                 broker_props: dict[str, str], *, log_defaults: LogConfig, check_interval_ms: int) -> None:
        """``log_defaults``: the broker's topic defaults (retention of topics without their own);
        ``check_interval_ms``: how often retention runs (log.retention.check.interval.ms)."""
        self.settings = settings
        self.store = store
        self.object_store = object_store
        self.catalog = Catalog(store)
        self.registry = BrokerRegistry(store)
        self.registration: Registration | None = None
        self.cluster_id = ""
        self._host = ""
        self._port = 0
        self._rack: str | None = None
        self._listeners: tuple[dict[str, object], ...] = ()
        self._live: tuple[BrokerAddress, ...] = ()
        self._live_read_s = -1.0
        self._leaving = False
        # Coordinators on leases (broker/cluster_coordinators.py), once attached; their lease
        # rounds run for the current registration (restarted when the broker registers again).
        self.coordinators: ClusterCoordinators | None = None
        # Requests to other brokers (transaction markers, KIP-890 implicit adds); set by cluster_run.
        self.peers: PeerRequests | None = None
        self._coordinator_task: asyncio.Task[None] | None = None
        self._snapshot: dict[str, TopicMeta] = {}
        # The diskless paths; their tasks run from start_serving on.
        self.appender = DisklessAppender(
            store, object_store, broker_id=settings.node_id, key_prefix=OBJECT_KEY_PREFIX,
            config=append_config(broker_props, settings.session_timeout_ms))
        self.reader = DisklessReader(store, ObjectRangeCache(object_store))
        self.wakeups = AppendWakeups(store, store)
        # Retention by time and size of every diskless partition, a bounded round at a time; every
        # broker runs it (a move is one transaction with the partition locked, so rounds of several
        # brokers only repeat work, never undo it).
        self.delete_grace_ms = _non_negative_key(broker_props, DELETE_GRACE_KEY, DEFAULT_DELETE_GRACE_MS)
        self.retention = RetentionEnforcer(store, defaults=RetentionDefaults(
            retention_ms=log_defaults.retention_ms, retention_bytes=log_defaults.retention_bytes),
            check_interval_ms=check_interval_ms, delete_grace_ms=self.delete_grace_ms)
        # Objects nobody can read any more (abandoned uploads, released by retention, DeleteRecords
        # or a deleted topic) deleted after the grace; every broker collects (rows claimed with
        # SKIP LOCKED), so a dead broker's abandoned uploads are collected by the others.
        self.gc = ObjectGarbageCollector(store, object_store, delete_grace_ms=self.delete_grace_ms)
        self._gc_interval_ms = _non_negative_key(broker_props, GC_INTERVAL_KEY, DEFAULT_GC_INTERVAL_MS)
        self._gc_stop = asyncio.Event()
        # Consolidation of small produce objects into per-partition segments, and the sweep of
        # objects with no row (docs/cluster-consolidation.md): every broker runs both (partitions
        # are claimed by lease, orphans with SKIP LOCKED; correctness rests on the swap's checks).
        self.consolidation = ConsolidationJob(store, object_store, broker_id=settings.node_id,
                                              key_prefix=OBJECT_KEY_PREFIX, config=consolidation_config(broker_props))
        self.orphans = OrphanSweeper(store, object_store, key_prefix=OBJECT_KEY_PREFIX)
        self._serving = False
        self._topic_cache: dict[str, tuple[float, TopicMeta]] = {}
        self._internal: dict[str, TopicMeta] = {}
        self._internal_read_s = -1.0
        self._config_cache: dict[str, tuple[TopicMeta, LogConfig, LogConfig]] = {}

    @property
    def node_id(self) -> int:
        return self.settings.node_id

    async def join(self, host: str, port: int, rack: str | None, listeners: Sequence[dict[str, object]]) -> None:
        """Read the cluster id and register this broker at ``host:port`` (its advertised address;
        ``listeners``: every listener's advertised endpoint by name). The previous life of this
        node id (killed before its lease ran out) is waited out for up to one session timeout."""
        self.cluster_id = await self.catalog.cluster_id()
        self._host, self._port, self._rack, self._listeners = host, port, rack, tuple(listeners)
        await self._register(takeover_wait_ms=self.settings.session_timeout_ms + self.settings.heartbeat_interval_ms)

    async def _register(self, takeover_wait_ms: int = 0) -> None:
        self.registration = await self.registry.register(
            self.node_id, self._host, self._port, self._rack, self.settings.session_timeout_ms,
            listeners=self._listeners, takeover_wait_ms=takeover_wait_ms)
        self._live_read_s = -1.0
        self._run_coordinators()
        log.info("registered as node %d at %s:%d in cluster %s", self.node_id, self._host, self._port, self.cluster_id)

    def _run_coordinators(self) -> None:
        """(Re)start the coordinators' lease rounds for the current registration."""
        if self.coordinators is None or self.registration is None:
            return
        if self._coordinator_task is not None:
            self._coordinator_task.cancel()
        self._coordinator_task = asyncio.get_running_loop().create_task(
            self.coordinators.run(self.registration), name="coordinator-leases")
        self._coordinator_task.add_done_callback(_log_end)

    async def heartbeat_loop(self) -> None:
        """Renew the lease every heartbeat interval until cancelled; re-register when fenced."""
        interval_s = self.settings.heartbeat_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            if self._leaving or self.registration is None:
                continue
            try:
                await self.registry.heartbeat(self.registration)
            except BrokerFencedError as exc:
                log.warning("node %d: heartbeat fenced (%s); registering again", self.node_id, exc)
                try:
                    await self._register()
                except MetadataStoreError as again:
                    log.warning("node %d: registering again failed (%s); retrying at the next heartbeat",
                                self.node_id, again)
            except MetadataStoreError as exc:
                # PostgreSQL unreachable: keep trying; the lease expires on PostgreSQL's clock and
                # the next heartbeat that reaches it is fenced and re-registers.
                log.warning("node %d: heartbeat failed (%s)", self.node_id, exc)
            except Exception:  # a loop that ended would leave the broker unregistered for good
                log.exception("node %d: heartbeat round failed unexpectedly; retrying at the next heartbeat",
                              self.node_id)

    async def leave(self) -> None:
        """Deregister (a clean stop): other brokers stop listing this one at once."""
        self._leaving = True
        if self.registration is None:
            return
        if self.coordinators is not None:  # release the coordinator leases before the registration
            try:
                await self.coordinators.stop()
            except MetadataStoreError as exc:
                log.warning("node %d: releasing coordinator leases failed (%s)", self.node_id, exc)
            if self._coordinator_task is not None:
                self._coordinator_task.cancel()
        try:
            await self.registry.deregister(self.registration)
            log.info("node %d deregistered", self.node_id)
        except MetadataStoreError as exc:
            log.warning("node %d: deregistering failed (%s); its lease expires by itself", self.node_id, exc)
        if self.coordinators is not None:
            try:
                await self.coordinators.announce()  # the others take the partitions over at once
            except MetadataStoreError as exc:
                log.warning("node %d: announcing the handover failed (%s)", self.node_id, exc)

    def cached_live_brokers(self) -> tuple[BrokerAddress, ...]:
        """The live brokers as last read (for answers that cannot wait, e.g. FindCoordinator)."""
        return self._live

    async def live_brokers(self) -> tuple[BrokerAddress, ...]:
        """The live brokers (this one included while registered), ordered by node id; read from
        PostgreSQL when the cached list is older than ``LIVE_BROKERS_MAX_AGE_MS``."""
        now_s = time.monotonic()
        if self._live_read_s < 0 or (now_s - self._live_read_s) * 1000 >= LIVE_BROKERS_MAX_AGE_MS:
            rows: Sequence[BrokerInfo] = await self.registry.live_brokers()
            self._live = tuple(sorted((BrokerAddress(b.node_id, b.host, b.port, b.rack, _endpoints(b)) for b in rows),
                                      key=lambda b: b.node_id))
            self._live_read_s = now_s
        return self._live

    def leader_of(self, topic_id: uuid.UUID, partition: int, live_ids: Sequence[int]) -> int:
        """The broker Metadata names as the partition's leader (broker/cluster_leaders.py); this
        broker when none is live (it serves the partition all the same)."""
        if not live_ids:
            return self.node_id
        return leader_of(topic_id, partition, live_ids)

    # -- the catalog (cluster/pg), as the handlers need it ------------------------------------
    async def topics(self, names: Sequence[str] | None, *, fresh: bool = True,
                     with_internal: bool = False) -> dict[str, TopicMeta]:
        """The topics named (all when None) that exist, by name. ``fresh=False`` (Produce, Fetch)
        may answer from a cache up to ``TOPIC_CACHE_MAX_AGE_MS`` old for topics found before; a
        topic not cached is always looked up. ``with_internal`` (Metadata, the topic admin APIs)
        adds the coordinators' internal topics (``internal_topics``); Produce, Fetch and the
        group assignors never see them, as their records are not diskless batches."""
        found = await self._catalog_topics(names, fresh=fresh)
        if with_internal:
            wanted = None if names is None else set(names)
            found.update({name: meta for name, meta in (await self.internal_topics()).items()
                          if wanted is None or name in wanted})
        return found

    async def internal_topics_among(self, names: Iterable[str]) -> dict[str, TopicMeta]:
        """The coordinators' internal topics among ``names`` (Fetch, ListOffsets: read from their
        rows, broker/cluster_internal_reads.py); looked up only when a name could be one, and {}
        when PostgreSQL fails (the partitions then answer the catalog lookup's error)."""
        wanted = {name for name in names if name.startswith("__")}
        if not wanted:
            return {}
        try:
            return {name: meta for name, meta in (await self.internal_topics()).items() if name in wanted}
        except OnceStreamError:
            return {}

    async def internal_topics(self) -> dict[str, TopicMeta]:
        """``__consumer_offsets`` and ``__transaction_state`` with the partition count the
        coordinators use (Catalog.internal_topics), re-read at most every
        ``TOPIC_CACHE_MAX_AGE_MS`` (a count never changes once stored)."""
        now_s = time.monotonic()
        if self._internal_read_s < 0 or (now_s - self._internal_read_s) * 1000 >= TOPIC_CACHE_MAX_AGE_MS:
            self._internal = {name: TopicMeta(info.name, info.topic_id, info.num_partitions, True,
                                              dict(INTERNAL_TOPIC_CONFIGS))
                              for name, info in (await self.catalog.internal_topics()).items()}
            self._internal_read_s = now_s
        return dict(self._internal)

    def partition_leader(self, topic: TopicMeta, partition: int, live_ids: Sequence[int]) -> int:
        """The broker Metadata names as the partition's leader: for an internal topic its
        coordinator (the lease keeper's answer, as FindCoordinator's) when that broker is live,
        else the hashed leader (``leader_of``)."""
        keeper = self.coordinators.keeper if topic.internal and self.coordinators is not None else None
        coordinator = keeper.coordinator_node(topic.name, partition) if keeper is not None else None
        if coordinator is not None and coordinator in live_ids:
            return coordinator
        return self.leader_of(topic.topic_id, partition, live_ids)

    async def _catalog_topics(self, names: Sequence[str] | None, *, fresh: bool) -> dict[str, TopicMeta]:
        now_s = time.monotonic()
        if not fresh and names is not None:
            cached = {name: self._topic_cache.get(name) for name in names}
            if all(entry is not None and (now_s - entry[0]) * 1000 < TOPIC_CACHE_MAX_AGE_MS
                   for entry in cached.values()):
                return {name: entry[1] for name, entry in cached.items() if entry is not None}
        described: list[TopicInfo]
        if names is None or len(set(names)) > FEW_TOPICS:
            wanted = None if names is None else set(names)
            described = [t for t in (await self.catalog.topics()).values() if wanted is None or t.name in wanted]
        else:
            described = [t for t in [await self.catalog.topic(name) for name in sorted(set(names))] if t is not None]
        found = {t.name: _meta(t) for t in described}
        for name, meta in found.items():
            self._topic_cache[name] = (now_s, meta)
        for name in names or ():
            if name not in found:
                self._topic_cache.pop(name, None)
        return found

    def topic_snapshot(self) -> dict[str, TopicMeta]:
        """Every topic as last read by ``topic_refresh_loop`` (synchronous callers: offset
        commits' partition check, the consumer group assignors)."""
        return self._snapshot

    def topic_metadata_view(self) -> dict[str, TopicMetadata]:
        """``topic_snapshot`` as the group coordinator's TopicMetadata."""
        return {name: TopicMetadata(meta.topic_id, name, meta.num_partitions) for name, meta in self._snapshot.items()}

    async def topic_refresh_loop(self) -> None:
        """Re-read every topic and the live brokers every ``TOPIC_CACHE_MAX_AGE_MS`` until cancelled."""
        while True:
            try:
                await self.refresh_snapshot()
                await self.live_brokers()
            except MetadataStoreError as exc:
                log.warning("node %d: reading the catalog failed (%s)", self.node_id, exc)
            await asyncio.sleep(TOPIC_CACHE_MAX_AGE_MS / 1000)

    async def catalog_change_loop(self) -> None:
        """Forget cached topics as soon as another broker changes them (the catalog's NOTIFY,
        ``topic:<name>``; ``''`` after a reconnection: everything), so a config altered or a
        topic deleted through one broker applies on this one at its next request rather than
        up to ``TOPIC_CACHE_MAX_AGE_MS`` later. The age bound stays the fallback for a lost
        notification. Runs until cancelled."""
        async for payload in self.store.listen(CATALOG_CHANNEL):
            kind, _sep, name = payload.partition(":")
            if kind == "topic" and name:
                self._topic_cache.pop(name, None)
                self._config_cache.pop(name, None)
            elif not payload:
                self._topic_cache.clear()
                self._config_cache.clear()

    async def learn_topics(self, names: Sequence[str]) -> None:
        """Read the named topics that ``topic_snapshot`` lacks (or holds with fewer partitions
        than a request may name) into it, so a synchronous check right after a topic was created
        through another broker does not refuse it for up to ``TOPIC_CACHE_MAX_AGE_MS``."""
        missing = sorted({name for name in names if name not in self._snapshot})
        if not missing:
            return
        found = await self.topics(missing)
        if found:
            self._snapshot = {**self._snapshot, **found}

    async def refresh_snapshot(self) -> None:
        """Read every topic into ``topic_snapshot``. A topic ``learn_topics`` added while the
        read was in flight stays: it may have been created after the read's snapshot was taken,
        and dropping it would hide it from the group coordinator until the next refresh."""
        before = self._snapshot
        found = await self.topics(None)
        learned = {name: meta for name, meta in self._snapshot.items() if name not in before and name not in found}
        self._snapshot = {**found, **learned}

    async def lookup(self, names: Sequence[str]) -> PartitionLookup:
        """``topics(names, fresh=False)`` for a produce, fetch or offsets request: a PostgreSQL
        failure becomes every partition's (retriable) error instead of the request's."""
        try:
            return PartitionLookup(await self.topics(names, fresh=False))
        except OnceStreamError as exc:
            return PartitionLookup({}, exc)

    async def log_config(self, defaults: LogConfig, topic: str) -> LogConfig:
        """The topic's log settings: its configs in the catalog over the broker's ``defaults`` (as
        cached by ``topics(fresh=False)``); UnknownTopicOrPartitionError when it is gone."""
        meta = (await self.topics([topic], fresh=False)).get(topic)
        if meta is None:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
        entry = self._config_cache.get(topic)
        if entry is None or entry[0] is not meta or entry[1] is not defaults:
            entry = (meta, defaults, LogConfig.from_topic_configs(meta.configs, defaults))
            self._config_cache[topic] = entry
        return entry[2]

    async def create_topic(self, name: str, num_partitions: int, configs: dict[str, str]) -> TopicMeta:
        """Create ``name`` in the catalog; OnceStreamError (TOPIC_ALREADY_EXISTS...) otherwise."""
        return _meta(await self.catalog.create_topic(name, num_partitions, configs))

    async def set_topic_configs(self, name: str, overrides: dict[str, str]) -> None:
        """Make ``overrides`` the topic's config overrides in the catalog (validated by the caller).
        The whole set is written: two brokers altering one topic at once keep the later set."""
        await self.catalog.alter_topic_configs(name, overrides, replace_all=True)
        self._topic_cache.pop(name, None)

    async def delete_topic(self, name: str) -> None:
        """Delete ``name`` from the catalog (UNKNOWN_TOPIC_OR_PARTITION when it is not there)."""
        await self.catalog.delete_topic(name)
        self._topic_cache.pop(name, None)

    async def create_partitions(self, name: str, count: int) -> None:
        """Grow ``name`` to ``count`` partitions in the catalog."""
        await self.catalog.create_partitions(name, count)
        self._topic_cache.pop(name, None)

    # -- the diskless write and read paths (cluster/diskless) ---------------------------------
    def start_serving(self) -> None:
        """Start the appender's and the wake-ups' tasks (on the running loop)."""
        self.appender.start()
        self.wakeups.start()
        self.retention.start()
        self.consolidation.start()
        self.orphans.start()
        self._serving = True

    async def delete_records(self, topic_id: uuid.UUID, partition: int, offset: int) -> int:
        """DeleteRecords of one partition (``-1``: up to the high watermark); the log start after."""
        async def move(conn: Conn) -> int:
            moved = await delete_records(conn, topic_id, partition, offset, delete_grace_ms=self.delete_grace_ms)
            return moved.log_start_offset

        low = await self.store.run(move)
        self.reader.coordinates.forget((topic_id, partition))  # cached rows below the new start
        return low

    async def producer_states(self, partitions: Sequence[tuple[str, int]]
                              ) -> dict[tuple[str, int], list[ProducerStateInfo] | OnceStreamError]:
        """DescribeProducers: every producer each partition remembers, from ``producer_states`` in
        PostgreSQL (what the commits and the transaction markers stored: epoch, last sequence, last
        timestamp, coordinator epoch, the first offset of its open transaction); a partition that
        does not exist, or a PostgreSQL failure, maps to its error."""
        lookup = await self.lookup(sorted({topic for topic, _p in partitions}))
        out: dict[tuple[str, int], list[ProducerStateInfo] | OnceStreamError] = {}
        keys: dict[tuple[str, int], tuple[uuid.UUID, int]] = {}
        for topic, partition in partitions:
            try:
                keys[(topic, partition)] = (lookup.require(topic, partition).topic_id, partition)
            except OnceStreamError as exc:
                out[(topic, partition)] = exc
        if not keys:
            return out
        try:
            rows = await self.store.run(lambda conn: partition_producers(conn, keys.values()))
        except OnceStreamError as exc:
            return {**out, **{key: exc for key in keys}}
        for key, stored in keys.items():
            out[key] = [ProducerStateInfo(e.producer_id, e.epoch, e.last_seq, e.last_timestamp_ms, e.coordinator_epoch,
                                          e.current_txn_first_offset) for e in rows[stored]]
        return out

    async def gc_loop(self) -> None:
        """The object garbage collector's rounds every ``diskless.gc.interval.ms`` until cancelled."""
        await self.gc.run_every(self._gc_interval_ms, self._gc_stop)

    def appended(self, topic_id: uuid.UUID, partition: int) -> None:
        """This broker committed to the partition: wake its own long polls at once (other
        brokers' are woken by the commit's NOTIFY)."""
        self.wakeups.notify_local({(topic_id, partition)})

    async def wait_for_appends(self, seen: dict[tuple[uuid.UUID, int], int], timeout_s: float) -> None:
        """Return when one of ``seen``'s partitions may have moved past the high watermark seen,
        or after ``timeout_s``."""
        if not seen:
            await asyncio.sleep(timeout_s)
            return
        await self.wakeups.wait(seen, max(1, int(timeout_s * 1000)))

    async def close(self) -> None:
        """Stop the diskless paths (buffered produce answered with a retriable error), then the pool."""
        try:
            if self._coordinator_task is not None:
                self._coordinator_task.cancel()
            if self._serving:
                await self.consolidation.close()
                await self.orphans.close()
                await self.retention.close()
                await self.appender.close()
                await self.wakeups.close()
        finally:
            await self.store.close()
