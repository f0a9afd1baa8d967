"""The DescribeLogDirs method of ``Admin`` (Kafka's ``Admin.describeLogDirs``; confluent-kafka's
AdminClient has none): per broker, each log directory with its partitions' sizes and the volume's
total and usable bytes.

A broker with tiered storage also lists its remote store as a log directory named
``remote:<store>`` (``REMOTE_LOG_DIR_PREFIX``) whose partitions carry their tiered bytes (our
extension, docs/tiered-storage.md); ``LogDirDescription.is_remote`` tells the two apart.
"""

from __future__ import annotations

from collections.abc import Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from oncestream.client.common.cluster import Cluster
from oncestream.client.common.errors import BrokerResponseError, KafkaError
from oncestream.protocol.api_keys import DESCRIBE_LOG_DIRS
from oncestream.protocol.codec import build

T = TypeVar("T")

REMOTE_LOG_DIR_PREFIX = "remote:"
_MIN_VERSION = 1  # Kafka 4 serves v1-v4


@dataclass(frozen=True)
class ReplicaInfo:
    """One partition in a log directory (Kafka's ReplicaInfo)."""

    size: int  # bytes of its segments in this directory
    offset_lag: int
    is_future: bool


@dataclass
class LogDirDescription:
    """One log directory of a broker (Kafka's LogDirDescription). ``total_bytes`` and
    ``usable_bytes`` are None when the broker does not know them (below v4, or the remote store)."""

    path: str
    error: KafkaError | None
    replica_infos: dict[tuple[str, int], ReplicaInfo] = field(default_factory=dict)
    total_bytes: int | None = None
    usable_bytes: int | None = None

    @property
    def is_remote(self) -> bool:
        """Whether this entry is a broker's tiered-storage store, not a local directory."""
        return self.path.startswith(REMOTE_LOG_DIR_PREFIX)


class LogDirAdmin:
    """Mixed into ``Admin``; uses its ``_run`` and ``_all_brokers``."""

    _cluster: Cluster

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float | None) -> T:  # provided by Admin
        raise NotImplementedError

    async def _all_brokers(self) -> list[int]:  # provided by Admin
        raise NotImplementedError

    def describe_log_dirs(self, brokers: Iterable[int] | None = None,
                          topic_partitions: Mapping[str, Iterable[int]] | None = None,
                          timeout: float | None = None) -> dict[int, dict[str, LogDirDescription]]:
        """DescribeLogDirs of ``brokers`` (None: every broker) for ``topic_partitions`` (topic ->
        partitions; None: all): broker id -> log directory path -> description. Raises
        ``KafkaException`` when a broker refuses as a whole (CLUSTER_AUTHORIZATION_FAILED without
        DESCRIBE on the cluster)."""
        wanted = None if topic_partitions is None else {t: sorted(set(ps)) for t, ps in topic_partitions.items()}

        async def one(node: int) -> dict[str, LogDirDescription]:
            def make(m: Any, version: int) -> Any:
                topics = None if wanted is None else tuple(
                    build(m.DescribableLogDirTopic, topic=t, partitions=tuple(ps)) for t, ps in wanted.items())
                return build(m.DescribeLogDirsRequest, topics=topics)

            response = await self._cluster.send(node, DESCRIBE_LOG_DIRS, make, min_version=_MIN_VERSION)
            if getattr(response, "error_code", 0):
                raise BrokerResponseError(int(response.error_code), "DescribeLogDirs refused")
            out: dict[str, LogDirDescription] = {}
            for r in response.results:
                total = getattr(r, "total_bytes", -1)
                usable = getattr(r, "usable_bytes", -1)
                out[r.log_dir] = LogDirDescription(
                    path=r.log_dir,
                    error=KafkaError(int(r.error_code)) if r.error_code else None,
                    replica_infos={(t.name, p.partition_index): ReplicaInfo(int(p.partition_size), int(p.offset_lag),
                                                                           bool(p.is_future_key))
                                   for t in r.topics for p in t.partitions},
                    total_bytes=None if total < 0 else int(total),
                    usable_bytes=None if usable < 0 else int(usable),
                )
            return out

        async def run() -> dict[int, dict[str, LogDirDescription]]:
            nodes = list(brokers) if brokers is not None else await self._all_brokers()
            return {node: await one(node) for node in nodes}

        return self._run(run(), timeout)
