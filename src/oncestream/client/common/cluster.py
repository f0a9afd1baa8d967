"""What a client knows about the cluster: brokers, topic partitions and their leaders, coordinators,
and one pooled connection per broker. Runs on the client's event loop (never from user threads).

Connections are opened lazily with exponential back-off (``reconnect.backoff.ms`` to
``reconnect.backoff.max.ms``); a request older than ``request.timeout.ms`` closes its connection,
failing every request pipelined behind it (what Kafka's NetworkClient does).
"""

from __future__ import annotations

import asyncio
import random
import ssl
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from oncestream.client.common.errors import BrokerResponseError, ConnectionLostError, RequestTimedOutError
from oncestream.client.common.network import Connection
from oncestream.client.common.sasl import SaslCredentials
from oncestream.client.common.tls import ssl_context_for
from oncestream.protocol.api_keys import FIND_COORDINATOR, METADATA
from oncestream.protocol.codec import build
from oncestream.protocol.schemas import request_module

BOOTSTRAP_NODE_BASE = -1000  # node ids for bootstrap addresses (real ids are >= 0)
# Coordinators get their own connection (as in Kafka's clients): a JoinGroup parked for a whole
# rebalance must not hold up fetches or produces pipelined on the same socket.
COORDINATOR_NODE_BASE = -2_000_000
COORDINATOR_GROUP = 0
COORDINATOR_TRANSACTION = 1
_ZERO_UUID = uuid.UUID(int=0)
# How often a partition request (and the wait for a partition's leader) is tried before its error
# reaches the caller; between tries the client waits retry.backoff.ms and asks for metadata again.
PARTITION_ATTEMPTS = 20
# Partition errors that mean "the client's metadata is stale or the partition is not ready yet":
# retriable for every client kind, after the backoff and a metadata refresh (Kafka's clients treat
# them alike: the leader moved, the topic was created a moment ago, an epoch is behind).
RETRY_AFTER_METADATA = frozenset({
    int(ErrorCode.not_leader_or_follower),
    int(ErrorCode.leader_not_available),
    int(ErrorCode.unknown_topic_or_partition),
    int(ErrorCode.fenced_leader_epoch),
    int(ErrorCode.unknown_leader_epoch),
    int(ErrorCode.offset_not_available),
    int(ErrorCode.request_timed_out),
    int(ErrorCode.kafka_storage_error),
    int(ErrorCode.not_enough_replicas),
})


@dataclass(slots=True)
class TopicInfo:
    """Partitions of one topic: ``leaders[p]`` is the leader node id (-1 while unknown)."""

    name: str
    error: int
    leaders: list[int] = field(default_factory=list)
    is_internal: bool = False
    topic_id: uuid.UUID | None = None  # Metadata v10+ (KIP-848 assignments name topics by id)


def parse_bootstrap_list(servers: str) -> list[tuple[str, int]]:
    """``host:port[,host:port...]`` (with optional ``PLAINTEXT://``) as (host, port) pairs."""
    result = []
    for item in servers.split(","):
        item = item.strip()
        if not item:
            continue
        if "://" in item:
            item = item.split("://", 1)[1]
        host, _, port = item.rpartition(":")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        result.append((host or "127.0.0.1", int(port)))
    if not result:
        raise ValueError("bootstrap.servers is empty")
    return result


class Cluster:
    """Metadata cache and connection pool, used from the event loop only."""

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        client_id: str,
        request_timeout_ms: int,
        socket_timeout_ms: int,
        reconnect_backoff_ms: int,
        reconnect_backoff_max_ms: int,
        metadata_max_age_ms: int,
        allow_auto_create_topics: bool,
        sasl: SaslCredentials | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._sasl = sasl  # SASL credentials every connection authenticates with (client/common/sasl.py)
        self._bootstrap = parse_bootstrap_list(bootstrap_servers)
        self._ssl_context = ssl_context
        self._client_id = client_id
        self.request_timeout_s = request_timeout_ms / 1000
        self._connect_timeout_s = socket_timeout_ms / 1000
        self._backoff_s = reconnect_backoff_ms / 1000
        self._backoff_max_s = reconnect_backoff_max_ms / 1000
        self._metadata_max_age_s = metadata_max_age_ms / 1000
        self._allow_auto_create = allow_auto_create_topics
        self.nodes: dict[int, tuple[str, int]] = {
            BOOTSTRAP_NODE_BASE - i: hp for i, hp in enumerate(self._bootstrap)
        }
        self._bootstrap_ids = list(self.nodes)
        self.topics: dict[str, TopicInfo] = {}
        self.interesting_topics: set[str] = set()
        self.want_all_topics = False  # pattern subscriptions need every topic's metadata
        self._background_refresh: asyncio.Task[None] | None = None
        self.controller_id = -1
        self.cluster_id: str | None = None  # Metadata v2+ (None from older brokers or before the first answer)
        self._connections: dict[int, Connection] = {}
        self._connecting: dict[int, asyncio.Task[Connection]] = {}
        self._failures: dict[int, tuple[int, float]] = {}  # node -> (consecutive failures, retry at)
        self._coordinators: dict[tuple[int, str], int] = {}
        self._metadata_task: asyncio.Task[None] | None = None
        self._metadata_fetched_at = 0.0
        self.metadata_version = 0  # bumped on every successful refresh
        self._ticker: asyncio.Task[None] | None = None
        self._closed = False
        self.on_metadata: list[Callable[[], None]] = []

    # --- connections --------------------------------------------------------------------------


    @classmethod
    def from_config(cls, c: Mapping[str, Any], *, allow_auto_create_topics: bool | None = None) -> Cluster:
        """The cluster of a resolved client configuration (``client.config.resolve``): the
        bootstrap, timeout, backoff and security properties every client kind shares.
        ``allow_auto_create_topics`` overrides the configuration's (an admin client never
        creates topics by asking for their metadata)."""
        return cls(
            c["bootstrap.servers"],
            client_id=c["client.id"],
            request_timeout_ms=c["request.timeout.ms"],
            socket_timeout_ms=c["socket.connection.setup.timeout.ms"],
            reconnect_backoff_ms=c["reconnect.backoff.ms"],
            reconnect_backoff_max_ms=c["reconnect.backoff.max.ms"],
            metadata_max_age_ms=c["metadata.max.age.ms"],
            allow_auto_create_topics=c["allow.auto.create.topics"] if allow_auto_create_topics is None
            else allow_auto_create_topics,
            sasl=SaslCredentials.from_config(c),
            ssl_context=ssl_context_for(c),
        )
    def start(self) -> None:
        """Start the request-timeout watchdog (call from the loop)."""
        self._ticker = asyncio.get_running_loop().create_task(self._watchdog())

    async def _watchdog(self) -> None:
        """Request timeouts, and the periodic metadata refresh (metadata.max.age.ms) that lets
        clients notice new partitions, new topics matching a pattern and moved leaders."""
        while not self._closed:
            await asyncio.sleep(0.25)
            now = time.monotonic()
            for conn in list(self._connections.values()):
                if conn.has_expired_request(now):
                    conn.close(RequestTimedOutError(f"request to {conn.host}:{conn.port} timed out"))
            if (self.interesting_topics or self.want_all_topics) and self.metadata_stale() and (
                self._metadata_task is None or self._metadata_task.done()
            ) and (self._background_refresh is None or self._background_refresh.done()):
                self._background_refresh = asyncio.get_running_loop().create_task(self._refresh_quietly())

    async def _refresh_quietly(self) -> None:
        try:
            await self.refresh(all_topics=self.want_all_topics)
        except (ConnectionLostError, RequestTimedOutError, BrokerResponseError):
            self._metadata_fetched_at = time.monotonic() - self._metadata_max_age_s + 1.0

    async def connection(self, node_id: int) -> Connection:
        """An open connection to ``node_id`` (opening it if needed, with back-off)."""
        if self._closed:
            raise ConnectionLostError("client closed")
        conn = self._connections.get(node_id)
        if conn is not None and not conn.closed:
            return conn
        task = self._connecting.get(node_id)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._open(node_id))
            self._connecting[node_id] = task
        return await asyncio.shield(task)

    def ready_connection(self, node_id: int) -> Connection | None:
        """The open connection to ``node_id`` if there is one (no I/O)."""
        conn = self._connections.get(node_id)
        return conn if conn is not None and not conn.closed else None

    def connection_backoff_s(self, node_id: int) -> float:
        """Seconds until ``node_id`` may be tried again (0 when it may be tried now)."""
        failures = self._failures.get(node_id)
        return max(0.0, failures[1] - time.monotonic()) if failures else 0.0

    async def _open(self, node_id: int) -> Connection:
        try:
            wait_s = self.connection_backoff_s(node_id)
            if wait_s > 0:
                await asyncio.sleep(wait_s)
            if node_id not in self.nodes:
                raise ConnectionLostError(f"unknown broker id {node_id}")
            host, port = self.nodes[node_id]
            conn = Connection(host, port, node_id=node_id, client_id=self._client_id,
                              request_timeout_s=self.request_timeout_s, ssl_context=self._ssl_context,
                              sasl=self._sasl)
            try:
                await conn.open(self._connect_timeout_s)
            except ConnectionLostError:
                count = self._failures.get(node_id, (0, 0.0))[0] + 1
                delay = min(self._backoff_max_s, self._backoff_s * (2 ** min(count - 1, 10)))
                delay *= random.uniform(0.8, 1.2)
                self._failures[node_id] = (count, time.monotonic() + delay)
                raise
            if self._closed:  # closed while we were connecting: do not leak the socket
                conn.close(ConnectionLostError("client closed"))
                raise ConnectionLostError("client closed")
            self._failures.pop(node_id, None)
            self._connections[node_id] = conn
            conn.add_close_callback(self._forget)
            return conn
        finally:
            self._connecting.pop(node_id, None)

    def _forget(self, conn: Connection) -> None:
        if self._connections.get(conn.node_id) is conn:
            del self._connections[conn.node_id]

    def known_node_ids(self) -> list[int]:
        """Real broker ids if metadata named any, else the bootstrap placeholders."""
        real = [n for n in self.nodes if n >= 0]
        return real or list(self._bootstrap_ids)

    async def any_connection(self) -> Connection:
        """A connection to some broker: an open one if any, else try known brokers in turn."""
        for conn in self._connections.values():
            if not conn.closed:
                return conn
        candidates = self.known_node_ids()
        # Fall back to bootstrap addresses when every known broker failed.
        candidates += [n for n in self._bootstrap_ids if n not in candidates]
        candidates.sort(key=self.connection_backoff_s)
        last: Exception | None = None
        for node_id in candidates:
            try:
                return await self.connection(node_id)
            except ConnectionLostError as exc:
                last = exc
        raise ConnectionLostError(f"no broker reachable: {last}")

    async def send(self, node_id: int | None, api_key: int, make: Callable[[Any, int], Any], *,
                   max_version: int | None = None, min_version: int = 0,
                   timeout_s: float | None = None, decoder: Any = None) -> Any:
        """Build (``make(module, version)``) and send one request to ``node_id`` (None: any)."""
        conn = await (self.any_connection() if node_id is None else self.connection(node_id))
        version = conn.version_for(api_key, max_version, min_version)
        request = make(request_module(api_key, version), version)
        return await conn.send(api_key, version, request, timeout_s=timeout_s, decoder=decoder)

    async def close(self) -> None:
        """Close every connection and stop background tasks."""
        self._closed = True
        for task in (self._ticker, self._background_refresh, self._metadata_task):
            if task is not None:
                task.cancel()
        for connecting in list(self._connecting.values()):
            connecting.cancel()
        for conn in list(self._connections.values()):
            conn.close(ConnectionLostError("client closed"))
        self._connections.clear()

    # --- metadata -----------------------------------------------------------------------------

    def add_topics(self, topics: Iterable[str]) -> bool:
        """Track more topics; True if any is new (a refresh is then needed)."""
        before = len(self.interesting_topics)
        self.interesting_topics.update(topics)
        return len(self.interesting_topics) != before

    def metadata_stale(self) -> bool:
        """Older than ``metadata.max.age.ms``."""
        return time.monotonic() - self._metadata_fetched_at > self._metadata_max_age_s

    async def refresh(self, topics: Iterable[str] | None = None, *, all_topics: bool = False) -> None:
        """Refresh metadata for the tracked topics (plus ``topics``); coalesces concurrent calls."""
        if topics is not None:
            self.add_topics(topics)
        if all_topics:
            await self._fetch_metadata(None)
            return
        task = self._metadata_task
        if task is None or task.done():
            task = asyncio.get_running_loop().create_task(self._fetch_metadata(set(self.interesting_topics)))
            self._metadata_task = task
        await asyncio.shield(task)
        missing = set(topics or ()) - set(self.topics)
        if missing:  # a refresh already in flight did not ask for these
            await self._fetch_metadata(set(self.interesting_topics))

    async def _fetch_metadata(self, topics: set[str] | None) -> Any:
        def make(m: Any, version: int) -> Any:
            if topics is None:
                names = None
            else:
                names = tuple(build(m.MetadataRequestTopic, name=t, topic_id=_ZERO_UUID) for t in sorted(topics))
            return build(
                m.MetadataRequest,
                topics=names,
                allow_auto_topic_creation=self._allow_auto_create,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            )

        response = await self.send(None, METADATA, make, min_version=1)
        self.apply_metadata(response, full=topics is None)
        return response

    async def fetch_metadata(self, topics: Iterable[str] | None) -> dict[str, TopicInfo]:
        """One Metadata request for exactly ``topics`` (None: every topic), applied to the cache;
        returns what the answer said of each topic it named (a topic that does not exist is
        named with an error, or, for None, not at all)."""
        wanted = None if topics is None else set(topics)
        response = await self._fetch_metadata(wanted)
        return {t.name: self.topics[t.name] for t in response.topics if t.name is not None}

    def apply_metadata(self, response: Any, *, full: bool = False) -> None:
        """Take brokers and topic leaders from a Metadata response."""
        nodes = {b.node_id: (b.host, b.port) for b in response.brokers}
        if nodes:
            for node_id, address in nodes.items():
                old = self.nodes.get(node_id)
                if old is not None and old != address:
                    conn = self._connections.get(node_id)
                    if conn is not None:
                        conn.close(ConnectionLostError("broker address changed"))
            kept = {i: hp for i, hp in self.nodes.items() if i < 0}  # bootstrap and coordinators
            self.nodes = {**kept, **nodes}
        self.controller_id = getattr(response, "controller_id", -1)
        cluster_id = getattr(response, "cluster_id", None)
        if cluster_id is not None:
            self.cluster_id = cluster_id
        for t in response.topics:
            leaders = [-1] * len(t.partitions)
            ordered = sorted(t.partitions, key=lambda p: p.partition_index)
            if ordered and ordered[-1].partition_index >= len(leaders):
                leaders = [-1] * (ordered[-1].partition_index + 1)
            for p in ordered:
                leaders[p.partition_index] = p.leader_id if p.error_code in (0, ErrorCode.replica_not_available) else -1
            self.topics[t.name] = TopicInfo(t.name, int(t.error_code), leaders, bool(getattr(t, "is_internal", False)),
                                            getattr(t, "topic_id", None))
        self._metadata_fetched_at = time.monotonic()
        self.metadata_version += 1
        for callback in list(self.on_metadata):
            callback()

    def leader_for(self, topic: str, partition: int) -> int:
        """Leader node id of a partition, -1 if unknown."""
        info = self.topics.get(topic)
        if info is None or partition >= len(info.leaders):
            return -1
        return info.leaders[partition]

    async def leader(self, topic: str, partition: int, *, retry_backoff_s: float,
                     attempts: int = PARTITION_ATTEMPTS) -> int:
        """The leader of a partition, asking for metadata while it is unknown.

        An unknown leader (a topic created a moment ago, a leader moving) is retriable, as
        LEADER_NOT_AVAILABLE is for Kafka's clients: metadata is asked again after
        ``retry_backoff_s``, up to ``attempts`` times; then ``BrokerResponseError``
        (LEADER_NOT_AVAILABLE, "topic[p] has no leader"). A broker that cannot be reached
        meanwhile counts as one more attempt."""
        for attempt in range(attempts):
            node = self.leader_for(topic, partition)
            if node >= 0:
                return node
            if attempt:
                await asyncio.sleep(retry_backoff_s)
            try:
                await self.refresh([topic])
            except (ConnectionLostError, RequestTimedOutError):
                if attempt == attempts - 1:
                    raise
        node = self.leader_for(topic, partition)
        if node < 0:
            raise BrokerResponseError(int(ErrorCode.leader_not_available), f"{topic}[{partition}] has no leader")
        return node

    def forget_leader(self, topic: str, partition: int) -> None:
        """After a partition error of ``RETRY_AFTER_METADATA``: its leader is unknown until the
        next refresh, so ``leader`` asks for metadata again."""
        info = self.topics.get(topic)
        if info is not None and partition < len(info.leaders):
            info.leaders[partition] = -1
        self._metadata_fetched_at = 0.0

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        """The name of the topic with id ``topic_id`` (None while metadata does not know it)."""
        for info in self.topics.values():
            if info.topic_id == topic_id and info.error == 0:
                return info.name
        return None

    def topic_id(self, topic: str) -> uuid.UUID | None:
        """The id of ``topic`` (None while unknown, or from a broker older than Metadata v10)."""
        info = self.topics.get(topic)
        return None if info is None else info.topic_id

    def partition_count(self, topic: str) -> int | None:
        """Number of partitions, or None if the topic is unknown (or errored) in metadata."""
        info = self.topics.get(topic)
        if info is None or info.error != 0 or not info.leaders:
            return None
        return len(info.leaders)

    def invalidate_topic(self, topic: str) -> None:
        """Forget a topic's leaders (after NOT_LEADER / UNKNOWN_TOPIC) so the next use refreshes."""
        self._metadata_fetched_at = 0.0

    # --- coordinators -------------------------------------------------------------------------

    async def coordinator(self, key: str, key_type: int) -> int:
        """Node id of the group (0) or transaction (1) coordinator for ``key`` (cached)."""
        cached = self._coordinators.get((key_type, key))
        if cached is not None:
            return cached

        def make(m: Any, version: int) -> Any:
            if version >= 4:  # KIP-699: a list of keys replaces the single key
                return build(m.FindCoordinatorRequest, key_type=key_type, coordinator_keys=(key,))
            return build(m.FindCoordinatorRequest, key=key, key_type=key_type)

        response = await self.send(None, FIND_COORDINATOR, make, min_version=1 if key_type else 0)
        if hasattr(response, "coordinators") and response.coordinators:
            entry = response.coordinators[0]
            error, node_id, host, port = entry.error_code, entry.node_id, entry.host, entry.port
            message = entry.error_message
        else:
            error, node_id, host, port = response.error_code, response.node_id, response.host, response.port
            message = getattr(response, "error_message", None)
        if error != 0:
            raise BrokerResponseError(int(error), message or "")
        dedicated: int = COORDINATOR_NODE_BASE - node_id
        if self.nodes.get(dedicated) != (host, port):
            old = self._connections.get(dedicated)
            if old is not None:
                old.close(ConnectionLostError("coordinator moved"))
            self.nodes[dedicated] = (host, port)
        self._coordinators[(key_type, key)] = dedicated
        return dedicated

    def forget_coordinator(self, key: str, key_type: int) -> None:
        """After NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE: look it up again next time."""
        self._coordinators.pop((key_type, key), None)

