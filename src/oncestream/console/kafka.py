"""The console's one way to the cluster: our client's ``Admin`` (and, for messages, a
``Consumer``/``Producer`` per request), wrapped in coroutines for the pages.

The client's calls block (each waits for its broker answers), so every one runs in a worker
thread (``anyio.to_thread``) and the event loop keeps serving other requests. The cluster
credentials (``--command-config``) are used here only; pages get plain data classes.

Pages of other areas reach the Admin through ``run``:
``await state(request).kafka.run(lambda admin: admin.list_transactions())``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from anyio import to_thread

from oncestream.client import Admin, KafkaError, KafkaException, NewTopic, Producer
from oncestream.client.common.list_offsets import EARLIEST, LATEST
from oncestream.console.browse import BrowseRequest, BrowseResult, read
from oncestream.console.settings import ConsoleSettings

T = TypeVar("T")

UNKNOWN_TOPIC_OR_PARTITION = 3  # Kafka's error code

# Bounds of one admin call made for a page (seconds): a dead broker shows as an error, not a hang.
ADMIN_TIMEOUT_S = 15.0
# How long a produced message may take to be acknowledged before the page reports a failure.
PRODUCE_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class Produced:
    """Where a produced message landed."""

    topic: str
    partition: int
    offset: int


@dataclass(frozen=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None


@dataclass(frozen=True)
class ClusterOverview:
    """What the Overview page shows."""

    cluster_id: str | None
    controller_id: int
    brokers: list[BrokerInfo]
    topic_count: int
    partition_count: int
    internal_topic_count: int


@dataclass(frozen=True)
class TopicSummary:
    """A row of the topics list: ``messages`` is the sum of end - start offsets (records,
    control records of transactions included), ``size_bytes`` from DescribeLogDirs (None when the
    cluster does not answer it), ``rate_per_s`` the growth of the end offsets per second since the
    page's previous look (None before a second look)."""

    name: str
    partitions: int
    messages: int
    size_bytes: int | None
    internal: bool
    end_offsets: int = 0   # the sum of the partitions' end offsets (rates: console/rates.py)
    rate_per_s: float | None = None   # filled by the topics page from two looks


@dataclass(frozen=True)
class PartitionState:
    """One partition of a topic page: leader, replicas, and its offsets. ``lso`` (last stable
    offset) is ListOffsets(latest) under read_committed: below ``end`` while a transaction is open."""

    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]
    start: int
    end: int
    lso: int
    size_bytes: int | None = None


@dataclass(frozen=True)
class TopicDetail:
    name: str
    internal: bool
    partitions: list[PartitionState]
    configs: dict[str, str | None] = field(default_factory=dict)
    topic_id: str | None = None


class ConsoleKafka:
    """The cluster as the console sees it (one ``Admin``, created at first use so the console
    starts while the cluster is down)."""

    def __init__(self, settings: ConsoleSettings) -> None:
        self.settings = settings
        self._admin: Admin | None = None
        self._producer: Producer | None = None
        self._lock = threading.Lock()
        self._produce_lock = threading.Lock()
        self._closed = False

    def client_conf(self, **extra: Any) -> dict[str, Any]:
        """Client properties for a consumer or producer of this console."""
        return self.settings.client_conf(**extra)

    def admin(self) -> Admin:
        """The shared ``Admin`` (blocking; call from a worker thread)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the console is shutting down")
            if self._admin is None:
                self._admin = Admin(self.client_conf())
            return self._admin

    async def run(self, call: Callable[[Admin], T]) -> T:
        """``call(admin)`` in a worker thread."""
        return await to_thread.run_sync(lambda: call(self.admin()))

    async def blocking(self, call: Callable[[], T]) -> T:
        """Any blocking client work (a consumer's or producer's) in a worker thread."""
        return await to_thread.run_sync(call)

    async def aclose(self) -> None:
        with self._lock:
            self._closed = True
            admin, self._admin = self._admin, None
            producer, self._producer = self._producer, None
        if admin is not None:
            await to_thread.run_sync(admin.close)
        if producer is not None:
            await to_thread.run_sync(lambda: producer.close(PRODUCE_TIMEOUT_S))

    # --- messages -------------------------------------------------------------------------------

    async def browse(self, request: BrowseRequest) -> BrowseResult:
        """Records of one partition (``console.browse``)."""
        return await self.run(lambda admin: read(admin, self.client_conf, request))

    async def produce(self, topic: str, partition: int | None, key: bytes | None, value: bytes | None,
                      headers: list[tuple[str, bytes]]) -> Produced:
        """One message, idempotent with acks=all; returns where it landed (KafkaException on refusal)."""
        return await to_thread.run_sync(lambda: self._produce(topic, partition, key, value, headers))

    def _produce(self, topic: str, partition: int | None, key: bytes | None, value: bytes | None,
                 headers: list[tuple[str, bytes]]) -> Produced:
        with self._lock:
            if self._closed:
                raise RuntimeError("the console is shutting down")
            if self._producer is None:
                self._producer = Producer(self.client_conf(**{"acks": "all", "enable.idempotence": True}))
            producer = self._producer
        outcome: list[tuple[KafkaError | None, Any]] = []
        with self._produce_lock:  # one message at a time: its delivery report is the one we wait for
            producer.produce(topic, value=value, key=key, partition=-1 if partition is None else partition,
                             headers=headers or None, on_delivery=lambda err, msg: outcome.append((err, msg)))
            producer.flush(PRODUCE_TIMEOUT_S)
        if not outcome:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"not acknowledged within {PRODUCE_TIMEOUT_S:.0f} s"))
        error, message = outcome[0]
        if error is not None:
            raise KafkaException(error)
        return Produced(topic, message.partition(), message.offset())

    # --- cluster and topics ---------------------------------------------------------------------

    async def overview(self) -> ClusterOverview:
        return await self.run(_overview)

    async def topics(self) -> list[TopicSummary]:
        return await self.run(_topic_summaries)

    async def topic(self, name: str) -> TopicDetail:
        return await self.run(lambda admin: _topic_detail(admin, name))

    async def create_topic(self, name: str, partitions: int, replication_factor: int,
                           configs: Mapping[str, str]) -> None:
        def create(admin: Admin) -> None:
            result = admin.create_topics([NewTopic(name, partitions, replication_factor, dict(configs))],
                                         timeout=ADMIN_TIMEOUT_S)
            _raise_first(result)
        await self.run(create)

    async def delete_topic(self, name: str) -> None:
        await self.run(lambda admin: _raise_first(admin.delete_topics([name], timeout=ADMIN_TIMEOUT_S)))

    async def alter_topic_configs(self, name: str, changes: Mapping[str, str | None]) -> None:
        """Set (a value) or delete (None: back to the default) configs of topic ``name``."""
        await self.run(lambda admin: admin.incremental_alter_topic_configs(name, changes, timeout=ADMIN_TIMEOUT_S))


def _raise_first(result: Mapping[str, Any]) -> None:
    for error in result.values():
        if error is not None:
            raise KafkaException(error)


def _overview(admin: Admin) -> ClusterOverview:
    cluster = admin.describe_cluster(timeout=ADMIN_TIMEOUT_S)
    names = admin.list_topics(timeout=ADMIN_TIMEOUT_S, include_internal=True)
    described = admin.describe_topics(names, timeout=ADMIN_TIMEOUT_S) if names else {}
    brokers = [BrokerInfo(node, host, port, cluster.racks.get(node)) for node, host, port in cluster.nodes]
    return ClusterOverview(cluster.cluster_id, cluster.controller_id, brokers, len(described),
                           sum(len(d.partitions) for d in described.values()),
                           sum(1 for d in described.values() if d.is_internal))


def _offsets(admin: Admin, partitions: list[tuple[str, int]], *, committed: bool = False) -> dict[tuple[str, int], int]:
    if not partitions:
        return {}
    return admin.list_offsets(dict.fromkeys(partitions, LATEST), read_committed=committed, timeout=ADMIN_TIMEOUT_S)


def _starts(admin: Admin, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    if not partitions:
        return {}
    return admin.list_offsets(dict.fromkeys(partitions, EARLIEST), timeout=ADMIN_TIMEOUT_S)


def _sizes(admin: Admin, topics: Mapping[str, list[int]]) -> dict[tuple[str, int], int] | None:
    """Bytes per partition (the leaders' and followers' replicas: the largest replica counts),
    None when DescribeLogDirs is refused or not served (a cluster without it)."""
    if not topics:
        return {}
    try:
        dirs = admin.describe_log_dirs(topic_partitions=topics, timeout=ADMIN_TIMEOUT_S)
    except (KafkaException, NotImplementedError, ValueError):
        return None
    sizes: dict[tuple[str, int], int] = {}
    for by_path in dirs.values():
        for description in by_path.values():
            if description.error is not None or description.is_remote:
                continue
            for tp, replica in description.replica_infos.items():
                sizes[tp] = max(sizes.get(tp, 0), replica.size)
    return sizes


def _topic_summaries(admin: Admin) -> list[TopicSummary]:
    names = admin.list_topics(timeout=ADMIN_TIMEOUT_S, include_internal=True)
    described = admin.describe_topics(names, timeout=ADMIN_TIMEOUT_S) if names else {}
    partitions = [(name, p.id) for name, d in described.items() if d.error is None for p in d.partitions]
    starts, ends = _starts(admin, partitions), _offsets(admin, partitions)
    sizes = _sizes(admin, {name: [p.id for p in d.partitions] for name, d in described.items() if d.error is None})
    out = []
    for name in sorted(described):
        d = described[name]
        tps = [(name, p.id) for p in d.partitions]
        messages = sum(max(0, ends.get(tp, 0) - starts.get(tp, 0)) for tp in tps)
        size = None if sizes is None else sum(sizes.get(tp, 0) for tp in tps)
        out.append(TopicSummary(name, len(d.partitions), messages, size, d.is_internal,
                                sum(ends.get(tp, 0) for tp in tps)))
    return out


def _topic_detail(admin: Admin, name: str) -> TopicDetail:
    described = admin.describe_topics([name], timeout=ADMIN_TIMEOUT_S).get(name)
    if described is None or (described.error is not None and described.error.code() == UNKNOWN_TOPIC_OR_PARTITION):
        raise LookupError(f"no topic {name!r}")
    if described.error is not None:
        raise KafkaException(described.error)
    tps = [(name, p.id) for p in described.partitions]
    starts, ends, lsos = _starts(admin, tps), _offsets(admin, tps), _offsets(admin, tps, committed=True)
    sizes = _sizes(admin, {name: [p for _, p in tps]}) or {}
    partitions = [PartitionState(p.id, p.leader, list(p.replicas), list(p.isrs), starts.get((name, p.id), -1),
                                 ends.get((name, p.id), -1), lsos.get((name, p.id), -1), sizes.get((name, p.id)))
                  for p in described.partitions]
    configs = admin.describe_topic_configs([name], timeout=ADMIN_TIMEOUT_S).get(name, {})
    return TopicDetail(name, described.is_internal, partitions, dict(sorted(configs.items())),
                       str(described.topic_id) if described.topic_id else None)
