"""Cluster mode's start-up settings and the probes that make a bad one fail at once, in words.

``oncestream broker --metadata-store postgresql://USER@HOST:PORT/DB --object-store s3://BUCKET/PREFIX``
starts a broker of a cluster (docs/cluster.md). Before it binds a port the broker checks both
stores, so an operator sees "PostgreSQL at 127.0.0.1:5432 refused the connection" or "the bucket
does not exist" as the reason the process exited, rather than a broker that listens and answers
every request with a retriable error:

- PostgreSQL: one connection and ``SELECT 1`` within ``cluster.metadata.store.connect.timeout.ms``.
- The object store: a LIST of the probe prefix (a missing bucket answers NoSuchBucket), then a
  PUT, a GET and a DELETE of one probe key under the prefix (the broker needs all of them:
  uploads, reads, garbage collection). Wrong credentials and a missing bucket are named as such.

``ClusterStartError`` carries the message; the CLI prints it and exits with ``EXIT_STORE_UNAVAILABLE``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from oncestream.errors import (
    InvalidConfigError,
    RemoteAccessDeniedError,
    RemoteObjectNotFoundError,
    RemoteStorageError,
)
from oncestream.remote.object_store import ObjectStore, open_object_store

# The exit code of a broker whose metadata store or object store cannot be used at start (a
# supervisor may retry it later; a configuration error exits 1 and needs a person).
EXIT_STORE_UNAVAILABLE = 3
# Broker keys of cluster mode (also listed in docs/cluster.md).
SESSION_TIMEOUT_KEY = "broker.session.timeout.ms"
HEARTBEAT_INTERVAL_KEY = "broker.heartbeat.interval.ms"
CONNECT_TIMEOUT_KEY = "cluster.metadata.store.connect.timeout.ms"
# Kafka's KRaft defaults for the broker's session with the controller.
DEFAULT_SESSION_TIMEOUT_MS = 9000
DEFAULT_HEARTBEAT_INTERVAL_MS = 2000
DEFAULT_CONNECT_TIMEOUT_MS = 10000
PROBE_PREFIX = "_probe/"


class ClusterStartError(Exception):
    """A store cluster mode needs cannot be used: the broker does not start."""


@dataclass(frozen=True)
class ClusterSettings:
    """Where the cluster's state lives and how this broker holds its place in it."""

    metadata_store_url: str
    object_store_uri: str
    node_id: int
    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS
    heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS
    connect_timeout_ms: int = DEFAULT_CONNECT_TIMEOUT_MS

    @classmethod
    def from_options(cls, metadata_store_url: str, object_store_uri: str | None,
                     props: Mapping[str, str]) -> ClusterSettings:
        """Check the flags and the cluster keys of ``props``; InvalidConfigError in words."""
        if object_store_uri is None:
            raise InvalidConfigError("--metadata-store needs --object-store s3://BUCKET/PREFIX (or file:///DIR)")
        url = urlsplit(metadata_store_url)
        if url.scheme not in ("postgresql", "postgres") or not url.hostname or not url.path.strip("/"):
            raise InvalidConfigError(
                f"--metadata-store {redacted(metadata_store_url)!r}: expected postgresql://USER@HOST:PORT/DB")
        node = props.get("node.id", props.get("broker.id"))
        if node is None:
            raise InvalidConfigError("cluster mode needs --config node.id=N (unique among the cluster's brokers)")
        try:
            settings = cls(
                metadata_store_url=metadata_store_url,
                object_store_uri=object_store_uri,
                node_id=int(node),
                session_timeout_ms=int(props.get(SESSION_TIMEOUT_KEY, DEFAULT_SESSION_TIMEOUT_MS)),
                heartbeat_interval_ms=int(props.get(HEARTBEAT_INTERVAL_KEY, DEFAULT_HEARTBEAT_INTERVAL_MS)),
                connect_timeout_ms=int(props.get(CONNECT_TIMEOUT_KEY, DEFAULT_CONNECT_TIMEOUT_MS)),
            )
        except ValueError as exc:
            raise InvalidConfigError(f"cluster mode: {exc}") from None
        if settings.node_id < 0:
            raise InvalidConfigError(f"node.id={settings.node_id}: must be >= 0")
        if not 0 < settings.heartbeat_interval_ms < settings.session_timeout_ms:
            raise InvalidConfigError(
                f"{HEARTBEAT_INTERVAL_KEY}={settings.heartbeat_interval_ms} must be positive and below "
                f"{SESSION_TIMEOUT_KEY}={settings.session_timeout_ms}")
        if settings.connect_timeout_ms < 1:
            raise InvalidConfigError(f"{CONNECT_TIMEOUT_KEY} must be positive")
        return settings


def redacted(url: str) -> str:
    """``url`` without a password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return parts._replace(netloc=netloc).geturl()


async def probe_metadata_store(url: str, timeout_ms: int) -> None:
    """Connect and ``SELECT 1``; ClusterStartError naming the store and the cause."""
    import psycopg  # only cluster mode needs it loaded

    where = redacted(url)
    try:
        async with asyncio.timeout(timeout_ms / 1000):
            conn = await psycopg.AsyncConnection.connect(url, connect_timeout=max(1, timeout_ms // 1000),
                                                         autocommit=True)
            try:
                await conn.execute("SELECT 1")
            finally:
                await conn.close()
    except TimeoutError:
        raise ClusterStartError(f"metadata store {where}: no answer within {timeout_ms} ms") from None
    except psycopg.Error as exc:
        cause = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise ClusterStartError(f"metadata store {where}: cannot connect: {cause}") from None


def open_and_probe_object_store(uri: str, environ: Mapping[str, str], node_id: int) -> ObjectStore:
    """The store ``uri`` names, after a PUT, GET and DELETE of a probe key succeeded (blocking:
    called before the event loop runs). ClusterStartError names what failed."""
    try:
        store = open_object_store(uri, environ)
    except InvalidConfigError as exc:
        raise ClusterStartError(str(exc)) from None
    key = f"{PROBE_PREFIX}{node_id}-{uuid.uuid4().hex}"
    try:
        # LIST first: it names a missing bucket (NoSuchBucket) where a PUT may create the bucket
        # (SeaweedFS does for an Admin identity) and hide the mistake.
        store.list(PROBE_PREFIX)
        store.put(key, b"oncestream start-up probe")
        store.get(key)
        store.delete(key)
    except RemoteAccessDeniedError as exc:
        raise ClusterStartError(
            f"object store {store.description}: access denied (check AWS_ACCESS_KEY_ID / "
            f"AWS_SECRET_ACCESS_KEY and the bucket's policy): {exc}") from None
    except RemoteObjectNotFoundError as exc:
        raise ClusterStartError(
            f"object store {store.description}: the bucket does not exist or is not reachable: {exc}") from None
    except RemoteStorageError as exc:
        message = str(exc)
        if "NoSuchBucket" in message or "does not exist" in message.lower():
            raise ClusterStartError(f"object store {store.description}: the bucket does not exist: {exc}") from None
        raise ClusterStartError(f"object store {store.description}: unusable: {exc}") from None
    return store
