"""The Spark connector's blocking face of ``oncestream.client`` (reads, control records, admin).

Spark's Python workers want blocking calls: each task reads one offset range start to end, and the
driver asks for offsets once per micro-batch. ``LogClient`` runs the client's own pieces on one
client I/O thread (``client.common.io_thread``) and waits for them: the metadata cache and leader lookup
(``client.common.cluster.Cluster``), its retry rule (``Cluster.leader``, ``RETRY_AFTER_METADATA``),
ListOffsets (``client.common.list_offsets``), the zero-copy Fetch and the control-record Produce
(``client.common.leader_requests``), connections with TLS and SASL (``Cluster.from_config``), and the
admin client for CreateTopics and ListTransactions. It has no metadata, leader or retry logic of
its own; client errors reach the connector as ``BrokerRequestError``.
"""

from __future__ import annotations

from collections.abc import Coroutine, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from oncestream.client.admin.admin import Admin, NewTopic
from oncestream.client.common.cluster import PARTITION_ATTEMPTS, Cluster
from oncestream.client.common.config import resolve
from oncestream.client.common.errors import BrokerResponseError, ConnectionLostError, KafkaException, RequestTimedOutError
from oncestream.client.common.io_thread import IoThread
from oncestream.client.common.leader_requests import FetchResult, TopicPartition, fetch_raw, produce_batch
from oncestream.client.common.list_offsets import list_offsets
from oncestream.protocol.api_keys import INIT_PRODUCER_ID, LIST_TRANSACTIONS
from oncestream.spark.errors import BrokerRequestError

__all__ = ["DEFAULT_PARTITION_FETCH_BYTES", "ClientSettings", "FetchResult", "LogClient", "TopicPartition"]

T = TypeVar("T")
# The connector's own read size per partition, larger than the Kafka consumer's 1 MiB default:
# a task reads one range start to end, so bigger fetches mean fewer round trips.
DEFAULT_PARTITION_FETCH_BYTES = 4 * 1024 * 1024
_CLIENT_ERRORS = (BrokerResponseError, ConnectionLostError, RequestTimedOutError, KafkaException, TimeoutError)


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
    # tasks); each LogClient builds its SSL context (client/tls.py) and SASL credentials
    # (client/sasl.py) from them: TLS first, then SASL on sasl_ssl.
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


class LogClient:
    """Blocking calls into one client cluster (its metadata cache and connections, keyed by node
    id) on the client's I/O thread. Used by one thread at a time."""

    def __init__(self, bootstrap_servers: str, *, client_id: str = "oncestream-spark",
                 timeout_s: float | None = None, settings: ClientSettings | None = None) -> None:
        self.settings = settings or ClientSettings()
        s = self.settings
        # A user's kafka.client.id names every connection, as it does every Kafka client of
        # Spark's connector; otherwise the caller's role name does.
        request_timeout_ms = s.request_timeout_ms if timeout_s is None else int(timeout_s * 1000)
        self._conf: dict[str, object] = {
            "bootstrap.servers": bootstrap_servers, "client.id": s.client_id or client_id,
            "request.timeout.ms": request_timeout_ms, "retry.backoff.ms": s.retry_backoff_ms, **dict(s.security)}
        try:
            self._cluster = Cluster.from_config(resolve(self._conf, "consumer"), allow_auto_create_topics=False)
        except (ValueError, KafkaException) as exc:
            raise BrokerRequestError(f"no usable broker address in bootstrap servers {bootstrap_servers!r}: "
                                     f"{exc}") from exc
        self._backoff_s = s.retry_backoff_ms / 1000
        # Each call is bounded by its own retries (request timeout and backoff per attempt).
        self._call_bound_s = (request_timeout_ms / 1000 + self._backoff_s) * (PARTITION_ATTEMPTS + 2)
        self._io = IoThread("oncestream-spark-client")
        self._io.call_soon(self._cluster.start)
        self._admin: Admin | None = None

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            return self._io.run(coro, self._call_bound_s)
        except _CLIENT_ERRORS as exc:
            raise BrokerRequestError(str(exc) or type(exc).__name__) from exc

    def close(self) -> None:
        """Close every connection and stop the I/O thread."""
        if self._admin is not None:
            self._admin.close()
            self._admin = None
        try:
            self._io.run(self._cluster.close(), 10)
        except TimeoutError:
            pass
        self._io.stop()

    def __enter__(self) -> LogClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def metadata(self, topics: Iterable[str] | None) -> dict[str, list[int]]:
        """Topic -> sorted partition ids (None: every topic but internal ones); topics that do
        not exist are left out."""
        infos = self._run(self._cluster.fetch_metadata(None if topics is None else sorted(set(topics))))
        return {name: list(range(len(info.leaders))) for name, info in infos.items()
                if info.error == 0 and not (topics is None and name.startswith("__"))}

    def list_offsets(self, tps: Iterable[TopicPartition], timestamp: int, *,
                     read_committed: bool) -> dict[TopicPartition, int]:
        """Earliest (timestamp -2) or latest (-1) offset of each partition. Latest under
        read_committed is the last stable offset: records at or after it may still abort."""
        answers = self._run(list_offsets(self._cluster, dict.fromkeys(tps, timestamp),
                                         read_committed=read_committed, retry_backoff_s=self._backoff_s))
        failed = {tp: code for tp, (_offset, _ts, code) in answers.items() if code}
        if failed:
            raise BrokerRequestError(f"ListOffsets did not succeed for {sorted(failed)} (error codes {failed})")
        return {tp: offset for tp, (offset, _ts, _code) in answers.items()}

    def fetch(self, tp: TopicPartition, offset: int, *, max_bytes: int, read_committed: bool,
              max_wait_ms: int = 500, partition_max_bytes: int | None = None,
              min_bytes: int = 1) -> FetchResult:
        """Fetch from one partition at ``offset``, records as a view of the received frame.

        ``max_bytes`` bounds the response, ``partition_max_bytes`` (default: ``max_bytes``) the
        partition's share; the broker still returns a first batch larger than either (KIP-74).
        """
        return self._run(fetch_raw(
            self._cluster, tp, offset, max_bytes=max_bytes, read_committed=read_committed, max_wait_ms=max_wait_ms,
            partition_max_bytes=max_bytes if partition_max_bytes is None else partition_max_bytes,
            min_bytes=min_bytes, retry_backoff_s=self._backoff_s))

    def produce(self, tp: TopicPartition, batch: bytes, *, timeout_ms: int = 30_000) -> int:
        """Append one encoded record batch with acks=all; returns its base offset. For the
        connector's own small control records only (the commit journal's records are idempotent,
        so a duplicate after a retry is harmless)."""
        return self._run(produce_batch(self._cluster, tp, batch, timeout_ms=timeout_ms,
                                       retry_backoff_s=self._backoff_s))

    def _broker_versions(self) -> dict[int, tuple[int, int]]:
        async def versions() -> dict[int, tuple[int, int]]:
            return (await self._cluster.any_connection()).broker_versions

        return self._run(versions())

    def _admin_client(self) -> Admin:
        if self._admin is None:
            self._admin = Admin(self._conf)
        return self._admin

    def create_topic(self, name: str, partitions: int, configs: dict[str, str] | None = None) -> None:
        """Create a topic; an existing topic is fine (idempotent)."""
        try:
            errors = self._admin_client().create_topics(
                [NewTopic(name, partitions, replication_factor=-1, config=dict(configs or {}))])
        except KafkaException as exc:
            raise BrokerRequestError(f"CreateTopics {name}: {exc}") from exc
        error = errors.get(name)
        if error is not None and error.code() != ErrorCode.topic_already_exists:
            raise BrokerRequestError(f"CreateTopics {name}: {error.name()}")

    def list_transactions(self) -> list[tuple[str, int, str]] | None:
        """(transactional id, producer id, state) of every transaction the cluster knows (every
        broker is asked, KIP-664), or None when the broker lacks ListTransactions."""
        if LIST_TRANSACTIONS not in self._broker_versions():
            return None
        try:
            listed = self._admin_client().list_transactions()
        except KafkaException as exc:
            raise BrokerRequestError(f"ListTransactions: {exc}") from exc
        return [(t.transactional_id, int(t.producer_id), str(t.state)) for t in listed]

    def supports_two_phase_commit(self) -> bool:
        """InitProducerId v6 (KIP-939) is advertised by the broker."""
        return self._broker_versions().get(INIT_PRODUCER_ID, (0, -1))[1] >= 6
