"""``Admin``: an AdminClient-like, synchronous API returning plain results.

Topics (create/delete/describe, configs), groups (``admin_groups.py``: list, describe, delete,
offsets of classic, consumer and share groups) and
transactions (KIP-664: list, describe, describe producers, abort a hanging transaction with
WriteTxnMarkers), ACLs (``admin_acls.py``), log directories (``admin_log_dirs.py``),
client quotas (``admin_quotas.py``), KIP-714 ClientMetrics subscriptions (``admin_client_metrics.py``).
Each method returns per-item results (a ``KafkaError`` or None for failures)
instead of futures; calls that fail as a whole raise ``KafkaException``.
"""

from __future__ import annotations

import asyncio
import datetime
import struct
import uuid
from collections.abc import Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from oncestream.client.admin.admin_acls import AclAdmin
from oncestream.client.admin.admin_client_metrics import ClientMetricsAdmin
from oncestream.client.admin.admin_groups import GroupAdmin
from oncestream.client.admin.admin_groups import error_or_none as _error
from oncestream.client.admin.admin_log_dirs import LogDirAdmin
from oncestream.client.admin.admin_quotas import QuotaAdmin
from oncestream.client.common.cluster import COORDINATOR_TRANSACTION, Cluster
from oncestream.client.common.config import resolve
from oncestream.client.common.errors import (
    _INVALID_ARG,
    _TIMED_OUT,
    BrokerResponseError,
    ConnectionLostError,
    KafkaError,
    KafkaException,
    RequestTimedOutError,
)
from oncestream.client.common.io_thread import IoThread
from oncestream.client.common.list_offsets import list_offsets
from oncestream.client.common.message import TopicPartition
from oncestream.protocol.api_keys import (
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_TOPICS,
    DESCRIBE_CONFIGS,
    DESCRIBE_PRODUCERS,
    DESCRIBE_TRANSACTIONS,
    INIT_PRODUCER_ID,
    LIST_TRANSACTIONS,
    METADATA,
    WRITE_TXN_MARKERS,
)
from oncestream.protocol.codec import build
from oncestream.protocol.config_resources import RESOURCE_BROKER, RESOURCE_TOPIC
from oncestream.protocol.varint import read_uvarint

T = TypeVar("T")
# A coordinator error after which Kafka's admin client looks the coordinator up again and retries.
_COORDINATOR_MOVING = frozenset({int(ErrorCode.coordinator_load_in_progress), int(ErrorCode.not_coordinator),
                                 int(ErrorCode.coordinator_not_available)})

_ZERO_UUID = uuid.UUID(int=0)
# Transaction timeout sent with a fencing InitProducerId (Kafka's fenceProducers default).
_FENCE_TXN_TIMEOUT_MS = 60_000


@dataclass
class NewTopic:
    """A topic to create."""

    topic: str
    num_partitions: int = 1
    replication_factor: int = 1
    config: dict[str, str] = field(default_factory=dict)


@dataclass
class PartitionInfo:
    """One partition of a described topic."""

    id: int
    leader: int
    replicas: list[int]
    isrs: list[int]


@dataclass
class TopicDescription:
    """Metadata of one topic."""

    name: str
    partitions: list[PartitionInfo]
    is_internal: bool = False
    error: KafkaError | None = None
    topic_id: uuid.UUID | None = None  # Metadata v10+; None from older brokers


@dataclass
class ClusterDescription:
    """The cluster as Metadata v2+ describes it (confluent-kafka's ``DescribeClusterResult``)."""

    cluster_id: str | None          # None: the broker answers Metadata below v2 (no cluster id)
    controller_id: int              # -1 when the broker names none
    nodes: list[tuple[int, str, int]] = field(default_factory=list)   # (node id, host, port)
    racks: dict[int, str | None] = field(default_factory=dict)        # node id -> rack (None: no rack)


@dataclass
class TransactionListing:
    """One transactional id from ListTransactions."""

    transactional_id: str
    producer_id: int
    state: str


@dataclass
class TransactionDescription:
    """A described transaction (DescribeTransactions)."""

    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int
    partitions: list[TopicPartition]
    error: KafkaError | None = None


@dataclass
class ProducerState:
    """An active producer of a partition (DescribeProducers)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp_ms: int
    coordinator_epoch: int
    current_txn_start_offset: int


@dataclass
class AbortTransactionSpec:
    """What KIP-664's abortTransaction needs: the partition and the open transaction's producer
    (id, epoch, coordinator epoch; -1 lets ``abort_transaction`` look them up)."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int = -1
    coordinator_epoch: int = -1


def _td(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)


def _ms(value: Any) -> int:
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    return int(value)


def decode_describe_transactions_v0(body: bytes | memoryview, pos: int) -> list[TransactionDescription]:
    """DescribeTransactions v0 response, read by hand: kio refuses the -1 start time that an
    Empty (or unknown) transactional id legitimately carries."""
    reader = _FlexibleReader(body, pos)
    reader.int32()  # throttle time
    out = []
    for _ in range(reader.compact_count()):
        code = reader.int16()
        tid = reader.compact_string() or ""
        state = reader.compact_string() or ""
        timeout_ms = reader.int32()
        start_ms = reader.int64()
        producer_id = reader.int64()
        epoch = reader.int16()
        partitions = []
        for _t in range(reader.compact_count()):
            topic = reader.compact_string() or ""
            partitions += [TopicPartition(topic, reader.int32()) for _p in range(reader.compact_count())]
            reader.skip_tags()
        reader.skip_tags()
        out.append(TransactionDescription(tid, state, producer_id, epoch, timeout_ms, start_ms,
                                          partitions, _error(code)))
    return out


class _FlexibleReader:
    """Just enough of the flexible (compact) encoding for hand-decoded responses."""

    def __init__(self, data: bytes | memoryview, pos: int) -> None:
        self.data, self.pos = data, pos

    def _fixed(self, fmt: str, size: int) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return int(value)

    def int16(self) -> int:
        return self._fixed(">h", 2)

    def int32(self) -> int:
        return self._fixed(">i", 4)

    def int64(self) -> int:
        return self._fixed(">q", 8)

    def uvarint(self) -> int:
        value, self.pos = read_uvarint(self.data, self.pos)
        return value

    def compact_count(self) -> int:
        return max(self.uvarint() - 1, 0)

    def compact_string(self) -> str | None:
        n = self.uvarint() - 1
        if n < 0:
            return None
        text = bytes(self.data[self.pos : self.pos + n]).decode()
        self.pos += n
        return text

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.pos += self.uvarint()


class Admin(AclAdmin, GroupAdmin, LogDirAdmin, QuotaAdmin, ClientMetricsAdmin):
    """Administrative operations against a Kafka-protocol cluster."""

    def __init__(self, conf: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        merged = dict(conf or {})
        merged.update(kwargs)
        self._conf = c = resolve(merged, "admin")
        self._timeout_s = c["request.timeout.ms"] / 1000
        self._retry_backoff_s = c["retry.backoff.ms"] / 1000
        self._cluster = Cluster.from_config(c, allow_auto_create_topics=False)
        self._io = IoThread("oncestream-admin")
        self._io.run(self._start(), 10)
        self._closed = False

    async def _start(self) -> None:
        self._cluster.start()

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float | None) -> T:
        timeout_s = self._timeout_s * 2 if timeout is None or timeout < 0 else timeout
        try:
            return self._io.run(coro, timeout_s)
        except TimeoutError:
            raise KafkaException(KafkaError(_TIMED_OUT, "admin operation timed out", retriable=True)) from None
        except (ConnectionLostError, RequestTimedOutError) as exc:
            raise KafkaException(KafkaError(-195, str(exc), retriable=True)) from None
        except BrokerResponseError as exc:
            raise KafkaException(KafkaError(exc.code, str(exc))) from None

    async def _controller(self) -> int | None:
        """Node for topic administration: the controller if known, else any broker."""
        await self._cluster.refresh()
        controller = self._cluster.controller_id
        return controller if controller >= 0 else None

    async def _all_brokers(self) -> list[int]:
        await self._cluster.refresh()
        return [n for n in self._cluster.nodes if n >= 0] or [None]  # type: ignore[list-item]

    # --- topics -------------------------------------------------------------------------------

    def create_topics(self, new_topics: Iterable[NewTopic], timeout: float | None = None,
                      validate_only: bool = False) -> dict[str, KafkaError | None]:
        """CreateTopics; per topic None (created) or the error (e.g. TOPIC_ALREADY_EXISTS)."""
        topics = list(new_topics)

        async def run() -> dict[str, KafkaError | None]:
            def make(m: Any, version: int) -> Any:
                return build(
                    m.CreateTopicsRequest,
                    topics=tuple(
                        build(
                            m.CreatableTopic,
                            name=t.topic,
                            num_partitions=t.num_partitions,
                            replication_factor=t.replication_factor,
                            assignments=(),
                            configs=tuple(build(m.CreatableTopicConfig, name=k, value=str(v))
                                          for k, v in (t.config or {}).items()),
                        )
                        for t in topics
                    ),
                    timeout=_td(int((timeout or 30) * 1000)),
                    validate_only=validate_only,
                )

            response = await self._cluster.send(await self._controller(), CREATE_TOPICS, make)
            result = {t.name: _error(int(t.error_code), getattr(t, "error_message", None))
                      for t in response.topics}
            await self._cluster.refresh([t.topic for t in topics])
            return result

        return self._run(run(), timeout)

    def delete_topics(self, topics: Iterable[str], timeout: float | None = None) -> dict[str, KafkaError | None]:
        """DeleteTopics; per topic None or the error."""
        names = list(topics)

        async def run() -> dict[str, KafkaError | None]:
            def make(m: Any, version: int) -> Any:
                return build(
                    m.DeleteTopicsRequest,
                    topic_names=tuple(names),
                    topics=tuple(build(m.DeleteTopicState, name=n, topic_id=_ZERO_UUID) for n in names)
                    if hasattr(m, "DeleteTopicState") else (),
                    timeout=_td(int((timeout or 30) * 1000)),
                )

            response = await self._cluster.send(await self._controller(), DELETE_TOPICS, make)
            return {r.name: _error(int(r.error_code), getattr(r, "error_message", None))
                    for r in response.responses}

        return self._run(run(), timeout)

    def create_partitions(self, new_counts: Mapping[str, int], timeout: float | None = None,
                          validate_only: bool = False) -> dict[str, KafkaError | None]:
        """CreatePartitions: grow each topic to the given total partition count; per topic None or
        the error (INVALID_PARTITIONS when the count is not larger, UNKNOWN_TOPIC_OR_PARTITION)."""
        counts = dict(new_counts)

        async def run() -> dict[str, KafkaError | None]:
            def make(m: Any, version: int) -> Any:
                return build(
                    m.CreatePartitionsRequest,
                    topics=tuple(build(m.CreatePartitionsTopic, name=name, count=count, assignments=None)
                                 for name, count in counts.items()),
                    timeout=_td(int((timeout or 30) * 1000)),
                    validate_only=validate_only,
                )

            response = await self._cluster.send(await self._controller(), CREATE_PARTITIONS, make)
            result = {r.name: _error(int(r.error_code), getattr(r, "error_message", None))
                      for r in response.results}
            await self._cluster.refresh(list(counts))
            return result

        return self._run(run(), timeout)

    def list_topics(self, timeout: float | None = None, include_internal: bool = False) -> list[str]:
        """Names of all topics."""
        async def run() -> list[str]:
            await self._cluster.refresh(all_topics=True)
            return sorted(n for n, info in self._cluster.topics.items()
                          if info.error == 0 and (include_internal or not info.is_internal))

        return self._run(run(), timeout)

    def describe_cluster(self, timeout: float | None = None) -> ClusterDescription:
        """Cluster id, controller and brokers, from one Metadata request naming no topic (the
        cluster id is Metadata v2+'s ``cluster_id``, what librdkafka reports as
        ``list_topics().cluster_id``)."""
        async def run() -> ClusterDescription:
            def make(m: Any, version: int) -> Any:
                return build(m.MetadataRequest, topics=(), allow_auto_topic_creation=False,
                             include_cluster_authorized_operations=False,
                             include_topic_authorized_operations=False)

            response = await self._cluster.send(None, METADATA, make, min_version=1)
            self._cluster.apply_metadata(response)
            nodes = sorted((b.node_id, b.host, b.port) for b in response.brokers)
            racks = {int(b.node_id): getattr(b, "rack", None) for b in response.brokers}
            return ClusterDescription(getattr(response, "cluster_id", None),
                                      int(getattr(response, "controller_id", -1)), nodes, racks)

        return self._run(run(), timeout)

    def describe_topics(self, topics: Iterable[str], timeout: float | None = None) -> dict[str, TopicDescription]:
        """Partitions, leaders, replicas and ISRs of each topic (Metadata)."""
        names = list(topics)

        async def run() -> dict[str, TopicDescription]:
            def make(m: Any, version: int) -> Any:
                return build(
                    m.MetadataRequest,
                    topics=tuple(build(m.MetadataRequestTopic, name=n, topic_id=_ZERO_UUID) for n in names),
                    allow_auto_topic_creation=False,
                    include_cluster_authorized_operations=False,
                    include_topic_authorized_operations=False,
                )

            response = await self._cluster.send(None, 3, make, min_version=1)
            self._cluster.apply_metadata(response)
            out = {}
            for t in response.topics:
                parts = [PartitionInfo(p.partition_index, p.leader_id, list(p.replica_nodes), list(p.isr_nodes))
                         for p in sorted(t.partitions, key=lambda p: p.partition_index)]
                out[t.name] = TopicDescription(t.name, parts, bool(getattr(t, "is_internal", False)),
                                               _error(int(t.error_code)), getattr(t, "topic_id", None))
            return out

        return self._run(run(), timeout)

    def describe_configs(self, topics: Iterable[str] = (), brokers: Iterable[int] = (),
                         timeout: float | None = None) -> dict[str, dict[str, str | None]]:
        """Config values of topics (by name) and brokers (by id, keyed ``"broker:<id>"``)."""
        resources = [(RESOURCE_TOPIC, t) for t in topics] + [(RESOURCE_BROKER, str(b)) for b in brokers]

        async def run() -> dict[str, dict[str, str | None]]:
            def make(m: Any, version: int) -> Any:
                return build(
                    m.DescribeConfigsRequest,
                    resources=tuple(build(m.DescribeConfigsResource, resource_type=rt, resource_name=name,
                                          configuration_keys=None) for rt, name in resources),
                    include_synonyms=False,
                    include_documentation=False,
                )

            response = await self._cluster.send(None, DESCRIBE_CONFIGS, make)
            out: dict[str, dict[str, str | None]] = {}
            for r in response.results:
                if r.error_code:
                    raise BrokerResponseError(int(r.error_code), r.error_message or "")
                key = r.resource_name if r.resource_type == RESOURCE_TOPIC else f"broker:{r.resource_name}"
                out[key] = {c.name: c.value for c in r.configs}
            return out

        return self._run(run(), timeout)

    def incremental_alter_topic_configs(self, topic: str, configs: Mapping[str, str | None], *,
                                        validate_only: bool = False, timeout: float | None = None) -> None:
        """IncrementalAlterConfigs of one topic: set each config given a value, delete (back to the
        broker's default) each given None; ``KafkaException`` with the broker's code and reason on
        refusal (e.g. INVALID_CONFIG for an unknown name or a bad value)."""
        self._incremental_alter_configs(RESOURCE_TOPIC, topic, configs, validate_only, timeout)

    def describe_topic_configs(self, topics: Iterable[str], timeout: float | None = None) -> dict[str, dict[str, str | None]]:
        """Shorthand for ``describe_configs(topics=...)``."""
        return self.describe_configs(topics=topics, timeout=timeout)

    # --- groups -------------------------------------------------------------------------------

    def list_offsets(self, partitions: Mapping[tuple[str, int], int], *, read_committed: bool = False,
                     timeout: float | None = None) -> dict[tuple[str, int], int]:
        """ListOffsets: (topic, partition) -> spec (-2 earliest, -1 latest, -4 earliest local and
        -5 latest tiered of tiered storage (``list_offsets.EARLIEST_LOCAL`` / ``LATEST_TIERED``),
        or a timestamp)."""
        async def run() -> dict[tuple[str, int], int]:
            answers = await list_offsets(self._cluster, dict(partitions), read_committed=read_committed,
                                         retry_backoff_s=self._retry_backoff_s)
            out = {}
            for tp, (offset, _ts, code) in answers.items():
                if code:
                    raise BrokerResponseError(code, f"ListOffsets {tp}")
                out[tp] = offset
            return out

        return self._run(run(), timeout)

    # --- transactions (KIP-664) ---------------------------------------------------------------

    def list_transactions(self, states: Iterable[str] = (), producer_ids: Iterable[int] = (),
                          timeout: float | None = None) -> list[TransactionListing]:
        """Every transactional id known to any broker, optionally filtered.

        Each broker lists only the coordinators it hosts, so the answer is complete only when
        every live broker answered: a broker of the metadata that cannot be reached (a dead one
        stays in Metadata until its session expires, then its coordinators move) or answers a
        retriable error (COORDINATOR_LOAD_IN_PROGRESS while it loads coordinators it took over)
        makes the whole listing start again from fresh metadata after ``retry.backoff.ms``, until
        ``timeout``. No broker reachable at all still fails at once."""
        state_filters, pid_filters = tuple(states), tuple(producer_ids)

        def make(m: Any, version: int) -> Any:
            return build(m.ListTransactionsRequest, state_filters=state_filters,
                         producer_id_filters=pid_filters, duration_filter=-1)

        async def listing(nodes: list[int]) -> list[TransactionListing]:
            out = []
            for node in nodes:
                response = await self._cluster.send(node, LIST_TRANSACTIONS, make)
                if response.error_code:
                    raise BrokerResponseError(int(response.error_code))
                out += [TransactionListing(t.transactional_id, t.producer_id, t.transaction_state)
                        for t in response.transaction_states]
            return sorted(out, key=lambda t: t.transactional_id)

        async def run() -> list[TransactionListing]:
            while True:
                nodes = await self._all_brokers()   # no broker reachable at all: fails at once
                try:
                    return await listing(nodes)
                except (ConnectionLostError, RequestTimedOutError):
                    pass
                except BrokerResponseError as exc:
                    if not exc.retriable:
                        raise
                await asyncio.sleep(self._retry_backoff_s)

        return self._run(run(), timeout)

    def describe_transactions(self, transactional_ids: Iterable[str],
                              timeout: float | None = None) -> dict[str, TransactionDescription]:
        """State, producer, timeout and partitions of each transactional id.

        Asked of each id's coordinator, again after a new lookup (``retry.backoff.ms`` apart,
        until ``timeout``) while it answers NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or
        COORDINATOR_LOAD_IN_PROGRESS or cannot be reached, as Kafka's admin client does: on a
        cluster the coordinator of a dead broker's ids is found again once a survivor took them."""
        ids = list(transactional_ids)

        async def describe(tid: str) -> TransactionDescription:
            def make(m: Any, version: int) -> Any:
                return build(m.DescribeTransactionsRequest, transactional_ids=(tid,))

            while True:
                try:
                    node = await self._cluster.coordinator(tid, COORDINATOR_TRANSACTION)
                    states: list[TransactionDescription] = await self._cluster.send(
                        node, DESCRIBE_TRANSACTIONS, make, max_version=0, decoder=decode_describe_transactions_v0)
                except (ConnectionLostError, RequestTimedOutError):
                    pass
                except BrokerResponseError as exc:  # FindCoordinator's own error
                    if not exc.retriable:
                        raise
                else:
                    error = states[0].error
                    if error is None or error.code() not in _COORDINATOR_MOVING:
                        return states[0]
                self._cluster.forget_coordinator(tid, COORDINATOR_TRANSACTION)
                await asyncio.sleep(self._retry_backoff_s)

        async def run() -> dict[str, TransactionDescription]:
            results = await asyncio.gather(*(describe(t) for t in ids))
            return {d.transactional_id: d for d in results}

        return self._run(run(), timeout)

    def describe_producers(self, partitions: Iterable[TopicPartition],
                           timeout: float | None = None) -> dict[tuple[str, int], list[ProducerState]]:
        """Active producers of each partition (asked from the partition leader)."""
        wanted = [(tp.topic, tp.partition) for tp in partitions]

        async def run() -> dict[tuple[str, int], list[ProducerState]]:
            await self._cluster.refresh({t for t, _ in wanted})
            by_node: dict[int, list[tuple[str, int]]] = {}
            for tp in wanted:  # an unknown leader is waited for (the client's partition retry rule)
                node = await self._cluster.leader(*tp, retry_backoff_s=self._retry_backoff_s)
                by_node.setdefault(node, []).append(tp)
            out: dict[tuple[str, int], list[ProducerState]] = {}
            for node, tps in by_node.items():
                by_topic: dict[str, list[int]] = {}
                for t, p in tps:
                    by_topic.setdefault(t, []).append(p)

                def make(m: Any, version: int, by_topic: dict[str, list[int]] = by_topic) -> Any:
                    return build(m.DescribeProducersRequest,
                                 topics=tuple(build(m.TopicRequest, name=t, partition_indexes=tuple(ps))
                                              for t, ps in by_topic.items()))

                response = await self._cluster.send(node, DESCRIBE_PRODUCERS, make)
                for topic in response.topics:
                    for p in topic.partitions:
                        if p.error_code:
                            raise BrokerResponseError(int(p.error_code), p.error_message or "")
                        out[(topic.name, p.partition_index)] = [
                            ProducerState(a.producer_id, a.producer_epoch, a.last_sequence, a.last_timestamp,
                                          a.coordinator_epoch, a.current_txn_start_offset)
                            for a in p.active_producers
                        ]
            return out

        return self._run(run(), timeout)

    def fence_producers(self, transactional_ids: Iterable[str],
                        timeout: float | None = None) -> dict[str, KafkaError | None]:
        """KIP-664's fenceProducers: InitProducerId for each transactional id at its coordinator,
        which bumps the id's epoch (every producer still using it is fenced) and aborts its open
        transaction, markers and all. Per id None (fenced) or the error.

        CONCURRENT_TRANSACTIONS counts as fenced: the coordinator answers it once it has
        persisted the bump and started aborting the open transaction; the abort then completes
        without any client (watch ``describe_transactions`` for an ended state)."""
        ids = list(transactional_ids)

        async def fence(tid: str) -> tuple[str, KafkaError | None]:
            def make(m: Any, version: int) -> Any:
                return build(m.InitProducerIdRequest, transactional_id=tid,
                             transaction_timeout=_td(_FENCE_TXN_TIMEOUT_MS), producer_id=-1, producer_epoch=-1,
                             enable2_pc=False, keep_prepared_txn=False)

            while True:
                node = await self._cluster.coordinator(tid, COORDINATOR_TRANSACTION)
                response = await self._cluster.send(node, INIT_PRODUCER_ID, make)
                code = int(response.error_code)
                if code in (0, int(ErrorCode.concurrent_transactions)):
                    return tid, None
                if code not in _COORDINATOR_MOVING:
                    return tid, _error(code)
                self._cluster.forget_coordinator(tid, COORDINATOR_TRANSACTION)
                await asyncio.sleep(self._retry_backoff_s)

        async def run() -> dict[str, KafkaError | None]:
            return dict(await asyncio.gather(*(fence(t) for t in ids)))

        return self._run(run(), timeout)

    def abort_transaction(self, spec: AbortTransactionSpec, timeout: float | None = None) -> None:
        """KIP-664: write an ABORT marker for the open transaction of ``spec.producer_id`` on one
        partition (a hanging transaction whose coordinator lost track of it). Epochs left at -1
        are read from DescribeProducers first. WriteTxnMarkers needs the brokers' ClusterAction
        right: oncestream's broker refuses it to every client (CLUSTER_AUTHORIZATION_FAILED,
        raised here), as a Kafka cluster with an authorizer does for ordinary principals."""
        key = (spec.topic, spec.partition)
        epoch, coordinator_epoch = spec.producer_epoch, spec.coordinator_epoch
        if epoch < 0 or coordinator_epoch < 0:
            producers = self.describe_producers([TopicPartition(*key)], timeout).get(key, [])
            match = [p for p in producers if p.producer_id == spec.producer_id]
            if not match:
                raise KafkaException(KafkaError(_INVALID_ARG, f"producer {spec.producer_id} is not active on {key}"))
            if match[0].current_txn_start_offset < 0:
                raise KafkaException(KafkaError(_INVALID_ARG, f"producer {spec.producer_id} has no open "
                                                              f"transaction on {key}"))
            epoch = match[0].producer_epoch if epoch < 0 else epoch
            coordinator_epoch = match[0].coordinator_epoch if coordinator_epoch < 0 else coordinator_epoch

        async def run() -> None:
            await self._cluster.refresh([spec.topic])
            node = await self._cluster.leader(*key, retry_backoff_s=self._retry_backoff_s)

            def make(m: Any, version: int) -> Any:
                return build(
                    m.WriteTxnMarkersRequest,
                    markers=(build(
                        m.WritableTxnMarker,
                        producer_id=spec.producer_id,
                        producer_epoch=epoch,
                        transaction_result=False,
                        topics=(build(m.WritableTxnMarkerTopic, name=spec.topic,
                                      partition_indexes=(spec.partition,)),),
                        coordinator_epoch=coordinator_epoch,
                    ),),
                )

            response = await self._cluster.send(node, WRITE_TXN_MARKERS, make)
            code = int(response.markers[0].topics[0].partitions[0].error_code)
            if code:
                raise BrokerResponseError(code, f"WriteTxnMarkers for producer {spec.producer_id}")

        self._run(run(), timeout)

    # --- lifecycle ----------------------------------------------------------------------------

    def close(self) -> None:
        """Close connections and stop the background thread."""
        if self._closed:
            return
        self._closed = True
        self._io.shut_down(self._cluster.close())

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


AdminClient = Admin
