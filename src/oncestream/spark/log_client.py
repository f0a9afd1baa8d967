"""A small blocking Kafka-protocol client for the connector's reads and admin calls.

It speaks to any Kafka-protocol cluster (ours, Tansu, Apache Kafka) through
``oncestream.client.common.connection.BrokerConnection``: Metadata to find partitions and their leaders,
ListOffsets for earliest/latest (the last stable offset under read_committed), Fetch, CreateTopics
and ListTransactions. Requests for a partition go to its leader; a leadership change refreshes
metadata and retries. Blocking I/O is what Spark's Python workers want: each task reads one offset
range start to end, and the driver asks for offsets once per micro-batch.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from oncestream.client.common.cluster import parse_bootstrap_list
from oncestream.client.common.config import resolve
from oncestream.client.common.connection import BrokerConnection, BrokerUnreachableError
from oncestream.client.common.sasl import SaslCredentials
from oncestream.client.common.tls import ssl_context_for
from oncestream.protocol.api_keys import CREATE_TOPICS, FETCH, LIST_OFFSETS, LIST_TRANSACTIONS, METADATA, PRODUCE
from oncestream.protocol.codec import build
from oncestream.protocol.fetch_response_view import MAX_VERSION as FETCH_VIEW_MAX_VERSION
from oncestream.protocol.fetch_response_view import (
    FetchResponseView,
    MalformedFetchResponseError,
    PartitionView,
    parse_fetch_response,
)
from oncestream.spark.errors import BrokerRequestError

TopicPartition = tuple[str, int]

_RETRIABLE = {
    ErrorCode.not_leader_or_follower,
    ErrorCode.leader_not_available,
    ErrorCode.unknown_topic_or_partition,
    ErrorCode.fenced_leader_epoch,
    ErrorCode.unknown_leader_epoch,
    ErrorCode.offset_not_available,
    ErrorCode.request_timed_out,
    ErrorCode.kafka_storage_error,
    ErrorCode.not_coordinator,
    ErrorCode.coordinator_load_in_progress,
}
_RETRY_ATTEMPTS = 20
# The connector's own read size per partition, larger than the Kafka consumer's 1 MiB default:
# a task reads one range start to end, so bigger fetches mean fewer round trips.
DEFAULT_PARTITION_FETCH_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class ClientSettings:
    """The ``kafka.*`` client properties the connector's own protocol client honours.

    Built once on the driver from the options (``from_config``) and pickled to the tasks, so a
    malformed value fails the query at planning time rather than in every task.
    """

    client_id: str | None = None  # None: the connector's name for the role (source, driver, ...)
    request_timeout_ms: int = 30_000
    retry_backoff_ms: int = 100
    fetch_min_bytes: int = 1
    fetch_max_bytes: int = 50 * 1024 * 1024
    partition_fetch_max_bytes: int = DEFAULT_PARTITION_FETCH_BYTES
    fetch_max_wait_ms: int = 500
    # security.protocol, ssl.* and sasl.* as given (strings, so the settings pickle to the
    # tasks); each LogClient builds its SSL context (client/common/tls.py) and SASL credentials
    # (client/common/sasl.py) from them: TLS first, then SASL on sasl_ssl.
    security: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_config(cls, config: Mapping[str, object]) -> ClientSettings:
        """Typed settings from client properties (``kafka.*`` options without the prefix).

        Values are parsed and checked by the client's own configuration code (same names,
        aliases and errors as ``oncestream.client``); raises ``KafkaException`` on a bad value.
        """
        given = dict(config)
        resolved = resolve({**given, "bootstrap.servers": given.get("bootstrap.servers") or "unused:0"},
                           "consumer")
        return cls(
            client_id=resolved["client.id"] if "client.id" in given else None,
            request_timeout_ms=resolved["request.timeout.ms"],
            retry_backoff_ms=resolved["retry.backoff.ms"],
            fetch_min_bytes=resolved["fetch.min.bytes"],
            fetch_max_bytes=resolved["fetch.max.bytes"],
            partition_fetch_max_bytes=resolved["max.partition.fetch.bytes"]
            if "max.partition.fetch.bytes" in given else DEFAULT_PARTITION_FETCH_BYTES,
            fetch_max_wait_ms=resolved["fetch.wait.max.ms"],
            security=tuple(sorted((k, str(v)) for k, v in given.items()
                                  if k == "security.protocol" or k.startswith(("ssl.", "sasl."))
                                  or k == "enable.ssl.certificate.verification")),
        )


@dataclass(frozen=True)
class FetchResult:
    """One partition's slice of a Fetch response.

    ``records`` is a read-only view of the buffer the response was received into (no copy; the
    view keeps that buffer alive, the whole response's, as long as it is held)."""

    error: ErrorCode
    records: memoryview
    aborted: tuple[tuple[int, int], ...]  # (producer id, first offset), read_committed only
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int


def _error_code(code: int) -> ErrorCode:
    """The ErrorCode of a wire code; a code this client does not know is UNKNOWN_SERVER_ERROR, as
    Kafka's own client reads it (Errors.forCode)."""
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.unknown_server_error


def _only_partition(response: FetchResponseView, tp: TopicPartition) -> PartitionView:
    """The one partition a single-partition Fetch asked for; any other answer is malformed."""
    if len(response.topics) != 1 or len(response.topics[0].partitions) != 1:
        raise MalformedFetchResponseError(
            f"Fetch of {tp[0]}[{tp[1]}] answered with {sum(len(t.partitions) for t in response.topics)} partitions")
    topic = response.topics[0]
    part = topic.partitions[0]
    if (topic.topic, part.partition_index) != tp:
        raise MalformedFetchResponseError(
            f"Fetch of {tp[0]}[{tp[1]}] answered for {topic.topic}[{part.partition_index}]")
    return part


def _split_bootstrap(servers: str) -> list[tuple[str, int]]:
    """The client's reading of ``bootstrap.servers``, failing as the connector's errors do."""
    try:
        return parse_bootstrap_list(servers)
    except ValueError as exc:
        raise BrokerRequestError(f"no usable broker address in bootstrap servers {servers!r}: {exc}") from exc


class LogClient:
    """Blocking connections to a cluster's brokers, keyed by node id."""

    def __init__(self, bootstrap_servers: str, *, client_id: str = "oncestream-spark",
                 timeout_s: float | None = None, settings: ClientSettings | None = None) -> None:
        self.settings = settings or ClientSettings()
        # A user's kafka.client.id names every connection, as it does every Kafka client of
        # Spark's connector; otherwise the caller's role name does.
        self._client_id = self.settings.client_id or client_id
        self._timeout_s = timeout_s if timeout_s is not None else self.settings.request_timeout_ms / 1000
        self._backoff_s = self.settings.retry_backoff_ms / 1000
        self._bootstrap = _split_bootstrap(bootstrap_servers)
        self._any: BrokerConnection | None = None
        self._by_node: dict[int, BrokerConnection] = {}
        self._brokers: dict[int, tuple[str, int]] = {}
        self._leaders: dict[TopicPartition, int] = {}
        security = dict(self.settings.security)
        self._ssl_context = ssl_context_for(security)
        self._sasl = SaslCredentials.from_config(security)

    # --- connections ------------------------------------------------------------------------

    def _connect(self, host: str, port: int) -> BrokerConnection:
        # Fetch v13+ names topics by id; the connector names them, so it stays at v12, the last
        # version the zero-copy reader (fetch_response_view) reads.
        return BrokerConnection(host, port, client_id=self._client_id, timeout_s=self._timeout_s,
                                max_versions={FETCH: FETCH_VIEW_MAX_VERSION}, ssl_context=self._ssl_context,
                                sasl=self._sasl)

    def any_connection(self) -> BrokerConnection:
        """A connection to some broker (the first bootstrap server that answers)."""
        if self._any is not None:
            return self._any
        last: Exception | None = None
        for host, port in self._bootstrap:
            try:
                self._any = self._connect(host, port)
                return self._any
            except BrokerUnreachableError as exc:
                last = exc
        raise BrokerUnreachableError(f"no bootstrap server reachable: {last}")

    def _node(self, node_id: int) -> BrokerConnection:
        conn = self._by_node.get(node_id)
        if conn is None:
            if node_id not in self._brokers:
                self.metadata(None)
            host, port = self._brokers[node_id]
            conn = self._connect(host, port)
            self._by_node[node_id] = conn
        return conn

    def _drop(self, conn: BrokerConnection) -> None:
        for node_id, known in list(self._by_node.items()):
            if known is conn:
                del self._by_node[node_id]
        if self._any is conn:
            self._any = None
        conn.close()

    def close(self) -> None:
        """Close every connection."""
        conns = list(self._by_node.values())
        if self._any is not None:
            conns.append(self._any)
        for conn in {id(c): c for c in conns}.values():
            conn.close()
        self._by_node.clear()
        self._any = None

    def __enter__(self) -> LogClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- metadata ---------------------------------------------------------------------------

    def metadata(self, topics: Iterable[str] | None) -> dict[str, list[int]]:
        """Topic -> sorted partition ids (None: every topic). Also learns leaders and brokers.

        Topics that do not exist are left out of the answer.
        """
        wanted = None if topics is None else sorted(set(topics))

        def make(m):
            req_topics = None
            if wanted is not None:
                req_topics = tuple(build(m.MetadataRequestTopic, name=t, topic_id=None) for t in wanted)
            return build(m.MetadataRequest, topics=req_topics, allow_auto_topic_creation=False,
                         include_cluster_authorized_operations=False,
                         include_topic_authorized_operations=False)

        response = self._call_any(METADATA, make)
        self._brokers.update({b.node_id: (b.host, b.port) for b in response.brokers})
        out: dict[str, list[int]] = {}
        for topic in response.topics:
            if topic.error_code != ErrorCode.none or topic.name is None:
                continue
            if topic.name.startswith("__") and wanted is None:
                continue  # internal topics never match a subscription pattern
            out[topic.name] = sorted(p.partition_index for p in topic.partitions)
            for p in topic.partitions:
                self._leaders[(topic.name, p.partition_index)] = p.leader_id
        return out

    def _call_any(self, api_key: int, make):
        for attempt in range(2):
            conn = self.any_connection()
            try:
                return conn.call(api_key, make)
            except BrokerUnreachableError:
                self._drop(conn)
                if attempt == 1:
                    raise
        raise AssertionError("unreachable")

    def _leader(self, tp: TopicPartition) -> int:
        # A partition without a known leader (a topic created a moment ago, a leader moving) is
        # retriable, as LEADER_NOT_AVAILABLE is for Kafka's clients: ask again after the backoff.
        for attempt in range(_RETRY_ATTEMPTS):
            if tp not in self._leaders or self._leaders[tp] < 0:
                if attempt:
                    time.sleep(self._backoff_s)
                self.metadata([tp[0]])
            if self._leaders.get(tp, -1) >= 0:
                break
        leader = self._leaders.get(tp, -1)
        if leader < 0:
            raise BrokerRequestError(f"{tp[0]}[{tp[1]}] has no leader")
        return leader

    # --- offsets ----------------------------------------------------------------------------

    def list_offsets(self, tps: Iterable[TopicPartition], timestamp: int, *,
                     read_committed: bool) -> dict[TopicPartition, int]:
        """Earliest (timestamp -2) or latest (-1) offset of each partition. Latest under
        read_committed is the last stable offset: records at or after it may still abort."""
        pending = sorted(set(tps))
        result: dict[TopicPartition, int] = {}
        for _attempt in range(_RETRY_ATTEMPTS):
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in pending:
                by_leader.setdefault(self._leader(tp), []).append(tp)
            retry: list[TopicPartition] = []
            for node_id, group in by_leader.items():
                topics: dict[str, list[int]] = {}
                for topic, partition in group:
                    topics.setdefault(topic, []).append(partition)

                def make(m, topics=topics):
                    return build(
                        m.ListOffsetsRequest, replica_id=-1, isolation_level=1 if read_committed else 0,
                        topics=tuple(
                            build(m.ListOffsetsTopic, name=t, partitions=tuple(
                                build(m.ListOffsetsPartition, partition_index=p, timestamp=timestamp,
                                      current_leader_epoch=-1)
                                for p in ps))
                            for t, ps in topics.items()),
                    )

                conn = self._node(node_id)
                try:
                    response = conn.call(LIST_OFFSETS, make)
                except BrokerUnreachableError:
                    self._drop(conn)
                    retry.extend(group)
                    continue
                for t in response.topics:
                    for p in t.partitions:
                        tp = (t.name, p.partition_index)
                        if p.error_code == ErrorCode.none:
                            result[tp] = int(p.offset)
                        elif p.error_code in _RETRIABLE:
                            self._leaders.pop(tp, None)
                            retry.append(tp)
                        else:
                            raise BrokerRequestError(f"ListOffsets {tp[0]}[{tp[1]}]: {p.error_code.name}")
            if not retry:
                return result
            pending = retry
            time.sleep(self._backoff_s)
        raise BrokerRequestError(f"ListOffsets did not succeed for {pending}")

    # --- fetch ------------------------------------------------------------------------------

    def fetch(self, tp: TopicPartition, offset: int, *, max_bytes: int, read_committed: bool,
              max_wait_ms: int = 500, partition_max_bytes: int | None = None,
              min_bytes: int = 1) -> FetchResult:
        """Fetch from one partition at ``offset``; leadership errors are retried here.

        ``max_bytes`` bounds the response, ``partition_max_bytes`` (default: ``max_bytes``) the
        partition's share; the broker still returns a first batch larger than either (KIP-74).
        """
        per_partition = max_bytes if partition_max_bytes is None else partition_max_bytes
        for _attempt in range(_RETRY_ATTEMPTS):
            conn = self._node(self._leader(tp))

            def make(m):
                return build(
                    m.FetchRequest, replica_id=-1, max_wait=datetime.timedelta(milliseconds=max_wait_ms),
                    min_bytes=min_bytes, max_bytes=max_bytes, isolation_level=1 if read_committed else 0,
                    session_id=0, session_epoch=-1,
                    topics=(build(m.FetchTopic, topic=tp[0], partitions=(
                        build(m.FetchPartition, partition=tp[1], current_leader_epoch=-1,
                              fetch_offset=offset, last_fetched_epoch=-1, log_start_offset=-1,
                              partition_max_bytes=per_partition),)),),
                    forgotten_topics_data=(), rack_id="",
                )

            try:
                # Undecoded: the records stay a view of the received frame (fetch_response_view).
                version, payload, body_offset = conn.call_raw(FETCH, make)
            except BrokerUnreachableError:
                self._drop(conn)
                time.sleep(self._backoff_s)
                continue
            response = parse_fetch_response(version, payload, body_offset)
            if response.error_code != ErrorCode.none:
                raise BrokerRequestError(f"Fetch: {_error_code(response.error_code).name}")
            part = _only_partition(response, tp)
            error = _error_code(part.error_code)
            if error in _RETRIABLE:
                self._leaders.pop(tp, None)
                time.sleep(self._backoff_s)
                continue
            return FetchResult(
                error=error,
                records=part.records if part.records is not None else memoryview(b""),
                aborted=part.aborted_transactions or (),
                high_watermark=part.high_watermark,
                last_stable_offset=part.last_stable_offset,
                log_start_offset=part.log_start_offset,
            )
        raise BrokerRequestError(f"Fetch {tp[0]}[{tp[1]}] did not succeed")

    # --- produce ----------------------------------------------------------------------------

    def produce(self, tp: TopicPartition, batch: bytes, *, timeout_ms: int = 30_000) -> int:
        """Append one encoded record batch with acks=all; returns its base offset.

        For the connector's own small control records only (a retry may duplicate the batch;
        the commit journal's records are idempotent, so a duplicate is harmless).
        """
        for _attempt in range(_RETRY_ATTEMPTS):
            conn = self._node(self._leader(tp))

            def make(m):
                return build(m.ProduceRequest, transactional_id=None, acks=-1,
                             timeout=datetime.timedelta(milliseconds=timeout_ms),
                             topic_data=(build(m.TopicProduceData, name=tp[0], partition_data=(
                                 build(m.PartitionProduceData, index=tp[1], records=batch),)),))

            try:
                response = conn.call(PRODUCE, make)
            except BrokerUnreachableError:
                self._drop(conn)
                time.sleep(self._backoff_s)
                continue
            (topic,) = response.responses
            (part,) = topic.partition_responses
            if part.error_code == ErrorCode.none:
                return int(part.base_offset)
            if part.error_code in _RETRIABLE or part.error_code == ErrorCode.not_enough_replicas:
                self._leaders.pop(tp, None)
                time.sleep(self._backoff_s)
                continue
            raise BrokerRequestError(f"Produce {tp[0]}[{tp[1]}]: {part.error_code.name}")
        raise BrokerRequestError(f"Produce {tp[0]}[{tp[1]}] did not succeed")

    # --- admin ------------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int, configs: dict[str, str] | None = None) -> None:
        """Create a topic; an existing topic is fine (idempotent)."""

        def make(m):
            return build(m.CreateTopicsRequest, topics=(build(
                m.CreatableTopic, name=name, num_partitions=partitions, replication_factor=-1,
                assignments=(),
                configs=tuple(build(m.CreatableTopicConfig, name=k, value=v)
                              for k, v in (configs or {}).items()),
            ),), timeout=datetime.timedelta(seconds=30), validate_only=False)

        response = self._call_any(CREATE_TOPICS, make)
        (result,) = response.topics
        if result.error_code not in (ErrorCode.none, ErrorCode.topic_already_exists):
            raise BrokerRequestError(f"CreateTopics {name}: {result.error_code.name}")

    def list_transactions(self) -> list[tuple[str, int, str]] | None:
        """(transactional id, producer id, state) of every transaction the cluster knows, or
        None when the broker lacks ListTransactions (KIP-664).

        ListTransactions answers for the transaction coordinators of the broker asked only
        (KIP-664), so on a cluster every broker is asked, as Kafka's admin client does."""
        if 66 not in self.any_connection().broker_versions:
            return None
        self.metadata(())  # learns the cluster's brokers
        out: list[tuple[str, int, str]] = []
        for node_id in sorted(self._brokers):
            conn = self._node(node_id)
            try:
                response = conn.call(LIST_TRANSACTIONS, lambda m: build(
                    m.ListTransactionsRequest, state_filters=(), producer_id_filters=(),
                    duration_filter=-1))
            except BrokerUnreachableError:
                self._drop(conn)
                raise
            if response.error_code != ErrorCode.none:
                raise BrokerRequestError(f"ListTransactions on broker {node_id}: {response.error_code.name}")
            out += [(t.transactional_id, int(t.producer_id), str(t.transaction_state))
                    for t in response.transaction_states]
        return out

    def supports_two_phase_commit(self) -> bool:
        """InitProducerId v6 (KIP-939) is advertised by the broker."""
        conn = self.any_connection()
        return conn.broker_versions.get(22, (0, -1))[1] >= 6
