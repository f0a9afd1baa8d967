"""The RemoteLogManager's broker settings, under Kafka 4's names and defaults
(``RemoteLogManagerConfig``): parsed once from the broker properties (``broker/config.py``).

Kafka 4 splits the manager's threads into a copier pool (``remote.log.manager.copier.thread.pool.size``,
10) and an expiration pool (``remote.log.manager.expiration.thread.pool.size``, 10), keeping
``remote.log.manager.thread.pool.size`` (2) for follower tasks. A single broker has no followers, so
here ``remote.log.manager.thread.pool.size`` sizes the one pool that runs copies, deletions and
journal writes, and the two Kafka 4 pool names, when set, raise it (their sum is the most
concurrent remote work Kafka would run).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from oncestream.errors import InvalidConfigError

ENABLE = "remote.log.storage.system.enable"
STORAGE_URI = "rsm.config.storage.uri"
TASK_INTERVAL_MS = "remote.log.manager.task.interval.ms"
THREAD_POOL_SIZE = "remote.log.manager.thread.pool.size"
COPIER_THREAD_POOL_SIZE = "remote.log.manager.copier.thread.pool.size"
EXPIRATION_THREAD_POOL_SIZE = "remote.log.manager.expiration.thread.pool.size"
RETRY_BACKOFF_MS = "remote.log.manager.task.retry.backoff.ms"
RETRY_BACKOFF_MAX_MS = "remote.log.manager.task.retry.backoff.max.ms"
RETRY_JITTER = "remote.log.manager.task.retry.jitter"
READER_THREADS = "remote.log.reader.threads"
FETCH_MAX_WAIT_MS = "remote.fetch.max.wait.ms"
INDEX_CACHE_BYTES = "remote.log.index.file.cache.total.size.bytes"

# Kafka 4's defaults (RemoteLogManagerConfig).
DEFAULTS: dict[str, str] = {
    ENABLE: "false",
    TASK_INTERVAL_MS: "30000",
    THREAD_POOL_SIZE: "2",
    RETRY_BACKOFF_MS: "500",
    RETRY_BACKOFF_MAX_MS: "30000",
    RETRY_JITTER: "0.2",
    READER_THREADS: "10",
    FETCH_MAX_WAIT_MS: "500",
    INDEX_CACHE_BYTES: "1073741824",
}

# Every broker key this module reads (DescribeConfigs on the broker lists them).
BROKER_KEYS = (ENABLE, STORAGE_URI, *[k for k in DEFAULTS if k != ENABLE],
               COPIER_THREAD_POOL_SIZE, EXPIRATION_THREAD_POOL_SIZE)


def _bool(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise InvalidConfigError(f"{name}={value!r}: expected true or false")


def _int(name: str, value: str, minimum: int) -> int:
    try:
        number = int(value.strip())
    except ValueError:
        raise InvalidConfigError(f"{name}={value!r}: expected an integer") from None
    if number < minimum:
        raise InvalidConfigError(f"{name}={number}: must be at least {minimum}")
    return number


@dataclass(frozen=True)
class RemoteLogManagerConfig:
    """The broker's tiered-storage settings (Kafka names in the field comments)."""

    enabled: bool = False  # remote.log.storage.system.enable
    storage_uri: str = ""  # rsm.config.storage.uri: s3://BUCKET/PREFIX or file:///PATH
    task_interval_ms: int = 30000  # remote.log.manager.task.interval.ms
    thread_pool_size: int = 2  # remote.log.manager.thread.pool.size (see the module docstring)
    retry_backoff_ms: int = 500  # remote.log.manager.task.retry.backoff.ms
    retry_backoff_max_ms: int = 30000  # remote.log.manager.task.retry.backoff.max.ms
    retry_jitter: float = 0.2  # remote.log.manager.task.retry.jitter, in [0, 0.5]
    reader_threads: int = 10  # remote.log.reader.threads
    fetch_max_wait_ms: int = 500  # remote.fetch.max.wait.ms
    index_cache_bytes: int = 1073741824  # remote.log.index.file.cache.total.size.bytes

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> RemoteLogManagerConfig:
        """Parse the remote.* broker keys; InvalidConfigError names the bad one. Enabled without
        ``rsm.config.storage.uri`` is refused: the broker would tier nowhere."""

        def get(name: str) -> str:
            return props.get(name, DEFAULTS[name])

        pool = _int(THREAD_POOL_SIZE, get(THREAD_POOL_SIZE), 1)
        kafka4_pools = [_int(key, props[key], 1) for key in (COPIER_THREAD_POOL_SIZE, EXPIRATION_THREAD_POOL_SIZE)
                        if key in props]
        if kafka4_pools:
            pool = max(pool, sum(kafka4_pools))
        try:
            jitter = float(get(RETRY_JITTER))
        except ValueError:
            raise InvalidConfigError(f"{RETRY_JITTER}={get(RETRY_JITTER)!r}: expected a number") from None
        if not 0.0 <= jitter <= 0.5:
            raise InvalidConfigError(f"{RETRY_JITTER}={jitter}: must be between 0 and 0.5")
        config = cls(
            enabled=_bool(ENABLE, get(ENABLE)),
            storage_uri=props.get(STORAGE_URI, "").strip(),
            task_interval_ms=_int(TASK_INTERVAL_MS, get(TASK_INTERVAL_MS), 1),
            thread_pool_size=pool,
            retry_backoff_ms=_int(RETRY_BACKOFF_MS, get(RETRY_BACKOFF_MS), 1),
            retry_backoff_max_ms=_int(RETRY_BACKOFF_MAX_MS, get(RETRY_BACKOFF_MAX_MS), 1),
            retry_jitter=jitter,
            reader_threads=_int(READER_THREADS, get(READER_THREADS), 1),
            fetch_max_wait_ms=_int(FETCH_MAX_WAIT_MS, get(FETCH_MAX_WAIT_MS), 1),
            index_cache_bytes=_int(INDEX_CACHE_BYTES, get(INDEX_CACHE_BYTES), 1),
        )
        if config.enabled and not config.storage_uri:
            raise InvalidConfigError(f"{ENABLE}=true needs {STORAGE_URI} (s3://BUCKET/PREFIX or file:///PATH)")
        return config
