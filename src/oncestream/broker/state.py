"""Everything a request handler may touch: logs, id allocation, notifier, flusher, identity.

Handlers receive a ``BrokerState`` and never reach for files, sockets or the clock themselves.
Two clocks enter here and are passed on into the sans-io core: ``now_ms()`` (wall clock) for
timestamps written into records, ``mono_ms()`` (monotonic) for every timeout, session and
expiry deadline, so a wall-clock step cannot expire sessions or transactions early or late.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import fcntl
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from oncestream.authz.authorizer import StandardAuthorizer, parse_super_users
from oncestream.authz.store import AclStore
from oncestream.broker import share_group_configs
from oncestream.broker.config import BrokerConfig
from oncestream.broker.dynamic_config import DynamicBrokerConfigs
from oncestream.broker.flusher import GroupCommitFlusher
from oncestream.broker.group_service import GroupService
from oncestream.broker.metrics.recorder import BrokerMetrics
from oncestream.broker.notify import AppendNotifier
from oncestream.broker.principal import load_principal_builder
from oncestream.broker.producer_id_service import ProducerIdService, ProducerIdSource
from oncestream.broker.quotas.managers import ClientQuotaManagers, QuotaWindow
from oncestream.broker.quotas.store import ClientQuotaStore, FileClientQuotaStore, load_client_quotas
from oncestream.broker.sasl.credentials import ScramCredentials, ScramCredentialStore
from oncestream.broker.sasl.exchange import SaslSettings
from oncestream.broker.seams import BrokerSeams
from oncestream.broker.share_service import ShareService
from oncestream.broker.telemetry.service import ClientTelemetry
from oncestream.broker.txn_service import TxnService
from oncestream.cluster.pg.acls import PgAclStore
from oncestream.coordinator.producer_ids import ProducerIdManager
from oncestream.durable_files import write_file_atomically
from oncestream.errors import StorageError
from oncestream.log.config import LogConfig
from oncestream.log.descriptors import SegmentDescriptors
from oncestream.log.file_removal import FileRemoval
from oncestream.log.flush_job import FdatasyncFn
from oncestream.log.manager import LogManager
from oncestream.log.partition_log import PartitionLog
from oncestream.remote.manager import RemoteLogManager
from oncestream.remote.object_store import open_object_store
from oncestream.remote.reader import RemotePartition, RemoteReads, remote_partition

if TYPE_CHECKING:
    from oncestream.broker.cluster_node import ClusterNode
    from oncestream.broker.cluster_shares import ClusterShares

log = logging.getLogger(__name__)


def _run_removal(removal: FileRemoval) -> None:
    try:
        removal.run()
    except StorageError as exc:
        # Out of the log already; a file left behind is reopened at the next start and deleted
        # again there (below the durable log start, or expired by retention).
        log.error("removing deleted segment files failed: %s", exc)


def wall_clock_ms() -> int:
    """Wall-clock ms since the epoch: only for timestamps that are persisted."""
    return int(time.time() * 1000)


def monotonic_clock_ms() -> int:
    """Monotonic ms (arbitrary origin): for deadlines; never persisted."""
    return time.monotonic_ns() // 1_000_000


def _load_cluster_id(data_dir: Path) -> str:
    """A cluster id created once per data directory (Kafka keeps it in meta.properties)."""
    path = data_dir / "meta.properties"
    if path.exists():
        for line in path.read_text().splitlines():
            if line.startswith("cluster.id="):
                return line.split("=", 1)[1].strip()
    cluster_id = uuid.uuid4().hex[:22]
    # Durable before any log is written: a cluster id lost in a power cut would change it.
    write_file_atomically(path, f"version=1\ncluster.id={cluster_id}\n".encode())
    return cluster_id


class DataDirInUseError(Exception):
    """Another live process holds the data directory's lock."""


class DataDirLock:
    """An exclusive ``flock`` on ``DATA_DIR/.lock`` for the broker's lifetime.

    Two brokers appending to the same segment files would interleave batches and corrupt the log;
    the lock makes the second one refuse to start. ``flock`` is released by the kernel when the
    holder dies, so a SIGKILLed broker never leaves a stale lock behind."""

    def __init__(self, data_dir: Path) -> None:
        path = data_dir / ".lock"
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # O_CLOEXEC: Python's default
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self._fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(self._fd)
            raise DataDirInUseError(
                f"data directory {data_dir} is in use by another broker (pid {holder})") from None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = -1


class BrokerState:
    """The broker's shared state; built once at start-up, closed once at shutdown."""

    # fsync rounds of different partitions may overlap; a few threads keep one slow partition
    # from queueing the others behind it without letting disk work take every core.
    DISK_THREADS = 4
    CODEC_THREADS = 2

    def __init__(self, data_dir: Path, config: BrokerConfig, clock_ms: Callable[[], int] = wall_clock_ms,
                 mono_clock_ms: Callable[[], int] = monotonic_clock_ms, *, fdatasync: FdatasyncFn | None = None,
                 seams: BrokerSeams | None = None, producer_ids: ProducerIdSource | None = None) -> None:
        """``clock_ms`` is the wall clock (record timestamps), ``mono_clock_ms`` the monotonic one
        (timeouts, sessions); ``fdatasync`` replaces ``os.fdatasync`` in the group-commit rounds
        (tests observe, delay or fail the disk); ``seams`` are the other injected interfaces
        (principal builder, transaction step observer, internal-topic appender; broker/seams.py);
        ``producer_ids`` replaces the data directory's producer id blocks (cluster mode: blocks
        from PostgreSQL)."""
        data_dir.mkdir(parents=True, exist_ok=True)
        self._lock = DataDirLock(data_dir)  # before anything reads or writes the directory
        try:
            self.data_dir = data_dir
            self.config = config
            seams = seams or BrokerSeams()
            # Who each connection is (principal.builder.class, or the one a caller passes in;
            # broker/principal.py). A class that cannot be loaded fails the start here.
            self.principal_builder = seams.principal_builder or load_principal_builder(config.raw)
            # Who moves TLS connections' bytes after the handshake (None: tls_pump's default).
            self.tls_byte_pump = seams.tls_byte_pump
            self.now_ms = clock_ms
            self.mono_ms = mono_clock_ms
            self.cluster_id = _load_cluster_id(data_dir)
            # Dynamic broker configs (IncrementalAlterConfigs on a BROKER resource) over the static
            # ones; the topic defaults follow the effective properties (broker/dynamic_config.py).
            self.dynamic_configs = DynamicBrokerConfigs.load(data_dir, config.node_id, config.raw)
            self.log_config = LogConfig.from_broker_configs(self.dynamic_configs.effective())
            self.dynamic_config_lock = asyncio.Lock()  # one broker config change persisted at a time
            # Client quotas (KIP-13/124/546/599; broker/quotas/): durable values, monotonic measurements.
            self.client_quotas = ClientQuotaManagers(
                load_client_quotas(data_dir), self.mono_ms, QuotaWindow.from_properties(config.raw),
                QuotaWindow.from_properties(config.raw, prefix="controller."))
            self.client_quota_lock = asyncio.Lock()  # one quota change persisted at a time
            # Where quota changes persist (cluster mode: PostgreSQL, broker/cluster_security.py).
            self.client_quota_store: ClientQuotaStore = FileClientQuotaStore(data_dir, lambda: self.disk_fsync)
            # KIP-714 client metrics: ClientMetrics subscriptions, client instances, pushed values.
            self.telemetry = ClientTelemetry(data_dir, config.raw, self.mono_ms)
            self.logs = LogManager.open(data_dir / "logs", self.log_config, self.now_ms(),
                                        descriptors=SegmentDescriptors.from_properties(config.raw))
            self.notifier = AppendNotifier()
            self.metrics = BrokerMetrics()  # records nothing; BrokerServer installs Prometheus's (metrics.listen)
            # The durable SCRAM credentials (one store for the broker) and, per listener, the SASL
            # mechanisms and PLAIN users (listener.name.<l>.* overrides, broker/sasl/).
            self.scram_store: ScramCredentials = ScramCredentialStore.open(data_dir)
            self._sasl_by_listener = {
                listener.name: SaslSettings.from_properties(data_dir, listener.name, config.raw, self.scram_store)
                for listener in config.all_listeners
            }
            # Slow disk work runs here, never on the event loop (the loop awaits its result).
            self.disk_executor = ThreadPoolExecutor(self.DISK_THREADS, thread_name_prefix="oncestream-disk")
            self.flusher = GroupCommitFlusher(self.disk_executor, fdatasync=fdatasync)
            self.disk_fsync = fdatasync  # None: os's; the other fsyncs moved to disk_executor use it too
            # Producer id blocks are written on the disk threads (broker/producer_id_service.py).
            self.producer_ids: ProducerIdSource = producer_ids or ProducerIdService(
                ProducerIdManager(data_dir), self.disk_executor, fdatasync)
            # CPU work that releases the GIL and must not stall the loop: recompressing produced
            # batches to a topic's compression.type (log/recompression.py).
            self.codec_executor = ThreadPoolExecutor(self.CODEC_THREADS, thread_name_prefix="oncestream-codec")
            self.groups = GroupService(self.logs, config.raw, self.now_ms, self.mono_ms,
                                       appender=seams.internal_appender)
            self.transactions = TxnService(
                self.logs, self.groups, config.raw, self.now_ms, self.producer_ids.next_id,
                on_marker=self.notifier.notify, mono_ms=self.mono_ms,
                producer_ids_ready=self.producer_ids.ready,
                steps=seams.txn_steps, appender=seams.internal_appender,
            )
            # KIP-932 share groups: membership, share sessions, share-partition state (durable in
            # __share_group_state; broker/share_service.py).
            self.shares = ShareService(self.logs, config.raw, self.now_ms, self.mono_ms,
                                       appender=seams.internal_appender, on_available=self.notifier.notify,
                                       group_configs=share_group_configs.load(data_dir),
                                       group_config_store=share_group_configs.FileGroupConfigStore(data_dir))
            # Tiered storage (issue 21): the RemoteLogManager when remote.log.storage.system.enable;
            # its journals are replayed here, before anything is served (remote/manager.py).
            # Cluster mode (docs/cluster.md): the metadata store, object store and registration;
            # None for the single broker. Set by the cluster runner (broker/cluster_run.py) before
            # anything is served; the handlers that differ branch on it.
            self.cluster: ClusterNode | None = None
            # Cluster mode: the share-partitions this broker owns, their state in PostgreSQL
            # (broker/cluster_shares.py); None for the single broker.
            self.cluster_shares: ClusterShares | None = None
            self.remote: RemoteLogManager | None = None
            # Reads below the local log start (remote/reader.py); None: tiered storage is off.
            self.remote_reads: RemoteReads | None = None
            remote_config = config.remote_log
            if remote_config.enabled:
                store = seams.object_store or open_object_store(remote_config.storage_uri, os.environ)
                self.remote = RemoteLogManager(
                    remote_config, store, data_dir, self.logs, now_ms=self.now_ms, mono_ms=self.mono_ms,
                    remove_files=self.remove_deleted_files_in_background,
                    request_flush=self.flusher.flush_in_background, fsync=fdatasync)
                self.remote_reads = RemoteReads(
                    store, self._remote_partition, reader_threads=remote_config.reader_threads,
                    index_cache_bytes=remote_config.index_cache_bytes,
                    fetch_max_wait_ms=remote_config.fetch_max_wait_ms)
                log.info("tiered storage enabled: object store %s", store.description)
            # ACLs (issue 14): None without authorizer.class.name, and then everything is allowed.
            # In cluster mode the ACLs, SCRAM credentials and dynamic broker configs are
            # PostgreSQL's (broker/cluster_security.py replaces these stores before serving).
            self.acl_store: AclStore | PgAclStore = AclStore(data_dir)
            self.authorizer: StandardAuthorizer | None = None
            self.acl_write_lock = asyncio.Lock()  # one ACL change persisted at a time, in order
            if config.authorizer_class_name:
                self.authorizer = StandardAuthorizer(
                    self.acl_store.load(), super_users=parse_super_users(config.super_users),
                    allow_everyone_if_no_acl_found=config.allow_everyone_if_no_acl_found)
        except BaseException:
            self._lock.release()
            raise

    def _remote_partition(self, topic: str, partition: int) -> RemotePartition:
        """A snapshot of the partition's readable remote segments, for the remote reader."""
        info = self.logs.topics().get(topic)
        metadata = self.remote.metadata(topic, partition) if self.remote is not None else None
        if info is None or metadata is None:
            return remote_partition(topic, uuid.UUID(int=0), partition, None)
        return remote_partition(topic, info.topic_id, partition, metadata)

    def apply_dynamic_configs(self, configs: DynamicBrokerConfigs) -> None:
        """Install new dynamic broker configs (already durable): the topic defaults they supply
        apply to every topic without its own override from the next append, read or tick."""
        log_config = LogConfig.from_broker_configs(configs.effective())
        self.dynamic_configs = configs
        self.log_config = log_config
        self.logs.rebase_configs(log_config)

    def sasl_for(self, listener_name: str) -> SaslSettings:
        """The SASL settings of ``listener_name``; the default (first) listener's for a name the
        broker does not have (requests handled outside any connection, e.g. in unit tests)."""
        settings = self._sasl_by_listener.get(listener_name)
        if settings is None:
            settings = next(iter(self._sasl_by_listener.values()))
        return settings

    async def learn_topics(self, names: Iterable[str]) -> None:
        """Before ``partition_exists`` checks: in cluster mode, topics this broker has not seen
        yet are read from the catalog (a no-op on the single broker, whose logs are the truth)."""
        if self.cluster is not None:
            await self.cluster.learn_topics([name for name in names if name])

    def topic_names_by_id(self) -> dict[uuid.UUID, str]:
        """Every topic's name by its id (requests and assignments that name topics by id); in
        cluster mode the catalog's snapshot (``learn_topics`` reads what it lacks)."""
        if self.cluster is not None:
            return {meta.topic_id: name for name, meta in self.cluster.topic_snapshot().items()}
        return {info.topic_id: name for name, info in self.logs.topics().items()}

    async def learn_topic_ids(self, topic_ids: Iterable[uuid.UUID | None]) -> None:
        """In cluster mode, re-read the catalog into ``topic_names_by_id`` when it lacks one of
        ``topic_ids``: a topic created through another broker since the last refresh would else be
        UNKNOWN_TOPIC_ID to a request that names it by id (OffsetCommit/OffsetFetch v10) for up
        to ``TOPIC_CACHE_MAX_AGE_MS``. Only an id the snapshot lacks costs a read."""
        if self.cluster is None:
            return
        known = self.topic_names_by_id()
        if any(topic_id is not None and topic_id not in known for topic_id in topic_ids):
            await self.cluster.refresh_snapshot()

    def partition_exists(self, topic: str, partition: int) -> bool:
        """Whether ``topic`` exists and has ``partition``: offset commits (plain and
        transactional) for anything else are refused with UNKNOWN_TOPIC_OR_PARTITION, as Kafka's
        KafkaApis refuses them against its metadata cache (in cluster mode: the catalog's snapshot)."""
        if self.cluster is not None:
            meta = self.cluster.topic_snapshot().get(topic)
            return meta is not None and 0 <= partition < meta.num_partitions
        info = self.logs.topics().get(topic)
        return info is not None and 0 <= partition < info.num_partitions

    def partition_budget_error(self, new_partitions: int) -> str | None:
        """Why adding ``new_partitions`` would exceed ``oncestream.max.partitions`` (the most
        partitions this broker holds, internal topics included), or None if it would not."""
        if self.cluster is not None:  # cluster mode: partitions cost PostgreSQL rows, not files here
            return None
        # Creations still making their files count: CreateTopics requests now overlap.
        held = sum(info.num_partitions for info in self.logs.topics().values()) + self.logs.partitions_being_created()
        if held + new_partitions > self.config.max_partitions:
            return (f"this broker holds {held} partitions; {new_partitions} more would exceed "
                    f"oncestream.max.partitions={self.config.max_partitions}")
        return None

    def tick(self) -> None:
        """Periodic housekeeping: retention, producer-id expiry, and the flushes and file
        removals that are due (on the disk threads, not awaited)."""
        try:
            self.logs.tick(self.now_ms(), defer_removal=True)
        finally:
            for removal in self.logs.take_file_removals():
                self._remove_in_background(removal)
            for partition_log in self.logs.logs_wanting_flush():
                self.flusher.flush_in_background(partition_log)

    async def remove_deleted_files(self, partition_log: PartitionLog) -> None:
        """Unlink the files of ``partition_log``'s deleted segments on the disk threads; a
        failure is logged (see ``_run_removal``)."""
        removal = partition_log.take_file_removal()
        if removal is None:
            return
        running = self._remove_in_background(removal)
        if running is not None:
            await asyncio.shield(asyncio.wrap_future(running))

    def remove_deleted_files_in_background(self, partition_log: PartitionLog) -> None:
        """``remove_deleted_files`` that nobody waits for."""
        removal = partition_log.take_file_removal()
        if removal is not None:
            self._remove_in_background(removal)

    def _remove_in_background(self, removal: FileRemoval) -> concurrent.futures.Future[None] | None:
        try:
            running = self.disk_executor.submit(_run_removal, removal)
        except RuntimeError:  # the disk threads are shut down: the broker is stopping
            _run_removal(removal)
            return None
        return running

    def close(self) -> None:
        try:
            # A running fsync round must end before close() writes the clean-shutdown marker:
            # its segments' dirty marks are already cleared, so close() would not sync them.
            if self.remote is not None:  # its steps read segment files and write checkpoints
                self.remote.close()
            self.disk_executor.shutdown(wait=True)
            self.codec_executor.shutdown(wait=True)
            if self.remote_reads is not None:
                self.remote_reads.close()
            self.logs.close()
        finally:
            self._lock.release()
