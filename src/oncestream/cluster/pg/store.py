"""The metadata store: cluster mode's one door to PostgreSQL (a bounded pool, whole-transaction
retries, the commit whose outcome is unknown, LISTEN with reconnection).

Every logical step of cluster mode is one PostgreSQL transaction, written as a coroutine
``fn(conn) -> T`` and run by ``MetadataStore.run(fn)``: on a retriable failure (connection lost,
serialization_failure 40001, deadlock_detected 40P01, admin/crash shutdown 57P01/57P02,
cannot_connect_now 57P03, no pooled connection in time) the whole of ``fn`` runs again in a new
transaction, after a capped exponential backoff with jitter, until ``retry_timeout_ms`` has passed;
then ``MetadataStoreUnavailableError`` (retriable for the Kafka client). Anything else raised by
PostgreSQL becomes ``MetadataStoreError``; ``fn``'s own exceptions pass through unchanged.

The commit whose outcome is unknown. When the connection is lost after COMMIT was sent, the server
may have committed or not; retrying blindly could apply a step twice (two batches at different
offsets), and answering "failed" could hide a committed change. ``run`` therefore raises
``CommitOutcomeUnknownError`` unless the caller passes ``read_back(conn) -> T | None``: a query, run
in a fresh transaction once PostgreSQL answers again, that finds the step's effect (e.g. "is there a
batch row with this object key?") and returns the result it would have had, or None when the step
did not happen, in which case ``fn`` is retried. Steps made idempotent by their own keys need no
read-back beyond that.

Connections come from a psycopg_pool ``AsyncConnectionPool`` (``pool_min_size`` kept open,
``pool_max_size`` bounding what one broker takes from PostgreSQL's ``max_connections``); each is
checked before use, so after a server restart dead connections are replaced rather than handed out.
A restart needs no new ``MetadataStore``: the pool reconnects as the server comes back.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import parse_qsl, unquote, urlsplit

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from oncestream.cluster.pg.errors import (
    BadMetadataStoreUrlError,
    CommitOutcomeUnknownError,
    MetadataStoreError,
    MetadataStoreUnavailableError,
)
from oncestream.cluster.pg.schema import SchemaStep, apply_schema

log = logging.getLogger(__name__)

T = TypeVar("T")
Conn = psycopg.AsyncConnection[TupleRow]

# SQLSTATEs after which the whole transaction may simply run again: it certainly did not commit
# (40001, 40P01; 25P03: the server ended the session while the transaction sat idle before its
# COMMIT, a broker paused inside it past idle_in_transaction_session_timeout) or the server is
# going away / not yet back (class 08 and 57P0x).
_RETRIABLE_SQLSTATES = frozenset({"40001", "40P01", "25P03", "57P01", "57P02", "57P03"})
# SQLSTATEs that mean the connection itself is gone: at COMMIT, the outcome is unknown.
_CONNECTION_LOST_SQLSTATES = frozenset({"57P01", "57P02", "57P03"})
# SQLSTATEs that no retry cures at start: wrong credentials, unknown database or role. libpq
# reports a refused connection without its SQLSTATE, so its message is matched too.
_FATAL_AT_START_SQLSTATES = frozenset({"28000", "28P01", "3D000"})
_FATAL_AT_START_MESSAGES = ("does not exist", "authentication failed", "no pg_hba.conf entry",
                            "permission denied", "password is required")


@dataclass(frozen=True)
class MetadataStoreUrl:
    """The parts of ``postgresql://USER[:PASSWORD]@HOST:PORT/DB[?libpq-param=value...]``."""

    user: str
    password: str | None
    host: str
    port: int
    dbname: str
    params: dict[str, str] = field(default_factory=dict)

    def conninfo(self, connect_timeout_ms: int) -> str:
        """A libpq conninfo string (keepalives on, so a silently dead server is noticed)."""
        extra: dict[str, str | int] = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5,
                                       "keepalives_count": 3}
        extra.update(self.params)
        # libpq's connect_timeout is in whole seconds, minimum 2 (it treats 1 as 2).
        extra.setdefault("connect_timeout", max(2, (connect_timeout_ms + 999) // 1000))
        if self.password is not None:
            extra["password"] = self.password
        return make_conninfo("", host=self.host, port=self.port, user=self.user, dbname=self.dbname, **extra)

    def describe(self) -> str:
        """The URL without its password (for messages and logs)."""
        return f"postgresql://{self.user}@{self.host}:{self.port}/{self.dbname}"


def parse_metadata_store_url(url: str) -> MetadataStoreUrl:
    """Parse ``--metadata-store``; ``BadMetadataStoreUrlError`` says what is wrong with a bad one."""
    expected = "expected postgresql://USER[:PASSWORD]@HOST:PORT/DB"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise BadMetadataStoreUrlError(f"metadata store URL {url!r} is malformed ({exc}); {expected}") from exc
    if parts.scheme not in ("postgresql", "postgres"):
        raise BadMetadataStoreUrlError(
            f"metadata store URL {url!r} has scheme {parts.scheme!r}, not postgresql; {expected}")
    if not parts.username:
        raise BadMetadataStoreUrlError(f"metadata store URL {url!r} names no user; {expected}")
    if not parts.hostname:
        raise BadMetadataStoreUrlError(f"metadata store URL {url!r} names no host; {expected}")
    if port is None:
        raise BadMetadataStoreUrlError(f"metadata store URL {url!r} names no port; {expected}")
    dbname = unquote(parts.path.lstrip("/"))
    if not dbname or "/" in dbname:
        raise BadMetadataStoreUrlError(f"metadata store URL {url!r} names no single database; {expected}")
    if parts.fragment:
        raise BadMetadataStoreUrlError(f"metadata store URL {url!r} has a fragment; {expected}")
    params = dict(parse_qsl(parts.query, keep_blank_values=True, strict_parsing=False))
    return MetadataStoreUrl(user=unquote(parts.username),
                            password=unquote(parts.password) if parts.password is not None else None,
                            host=parts.hostname, port=port, dbname=dbname, params=params)


@dataclass(frozen=True)
class MetadataStoreConfig:
    """Bounds of the pool and of the retries (all times in milliseconds)."""

    pool_min_size: int = 1
    pool_max_size: int = 8
    # libpq's connect timeout (rounded up to whole seconds, at least 2 s).
    connect_timeout_ms: int = 5_000
    # How long ``open`` waits for PostgreSQL to answer at start before giving up.
    start_timeout_ms: int = 30_000
    # How long ``run`` keeps retrying one step before MetadataStoreUnavailableError.
    retry_timeout_ms: int = 15_000
    retry_backoff_initial_ms: int = 25
    retry_backoff_max_ms: int = 1_000
    # LISTEN connections probe the server after this long without a notification.
    listen_probe_interval_ms: int = 5_000
    # PostgreSQL ends a session idle this long inside a transaction (rolled back; SQLSTATE 25P03,
    # which ``run`` retries): a process paused inside any transaction (a commit, a consolidation
    # swap, a log-start move) holds the rows it locked no longer. None: the server's setting.
    # Single writes that need a tighter bound set their own (commit.py, coordinator_leases.py).
    idle_in_transaction_timeout_ms: int | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.pool_min_size <= self.pool_max_size or self.pool_max_size < 1:
            raise ValueError(f"metadata store pool sizes min={self.pool_min_size} max={self.pool_max_size} are "
                             "not 0 <= min <= max, max >= 1")
        if self.idle_in_transaction_timeout_ms is not None and self.idle_in_transaction_timeout_ms < 1:
            raise ValueError("idle_in_transaction_timeout_ms must be >= 1 (0 would turn the bound off)")


def _sqlstate(exc: BaseException) -> str | None:
    return exc.sqlstate if isinstance(exc, psycopg.Error) else None


def is_retriable(exc: BaseException) -> bool:
    """True when a whole transaction that failed with ``exc`` certainly did not commit and may run
    again: connection-level failures, serialization failures, deadlocks, server shutting down."""
    if isinstance(exc, PoolTimeout):
        return True
    state = _sqlstate(exc)
    if state is not None:
        return state in _RETRIABLE_SQLSTATES or state.startswith("08")
    # No SQLSTATE: the client lost the connection (OperationalError) or used a closed one.
    return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)


def _connection_lost(exc: BaseException) -> bool:
    """True when ``exc`` means the connection went away (rather than the server refusing)."""
    state = _sqlstate(exc)
    if state is None:
        return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)
    return state in _CONNECTION_LOST_SQLSTATES or state.startswith("08")


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    state = _sqlstate(exc)
    return f"{type(exc).__name__}{f' [{state}]' if state else ''}: {text[0] if text else ''}"


def _session_options(config: MetadataStoreConfig) -> dict[str, Any]:
    """The pool's connection arguments: autocommit (transactions are explicit), and the
    session's idle-in-transaction bound when configured."""
    kwargs: dict[str, Any] = {"autocommit": True}
    if config.idle_in_transaction_timeout_ms is not None:
        kwargs["options"] = f"-c idle_in_transaction_session_timeout={config.idle_in_transaction_timeout_ms}"
    return kwargs


class MetadataStore:
    """A pool of connections to the cluster's PostgreSQL with whole-transaction retries."""

    def __init__(self, url: MetadataStoreUrl, pool: AsyncConnectionPool[Conn], config: MetadataStoreConfig) -> None:
        """Use ``MetadataStore.open``; this takes an already opened pool."""
        self.url = url
        self.config = config
        self._pool = pool
        self._conninfo = url.conninfo(config.connect_timeout_ms)
        self._closed = asyncio.Event()
        self._listen_connections: set[Conn] = set()

    @classmethod
    async def open(cls, url: str | MetadataStoreUrl, config: MetadataStoreConfig | None = None,
                   steps: tuple[SchemaStep, ...] | None = None) -> MetadataStore:
        """Connect (waiting up to ``start_timeout_ms`` for PostgreSQL to answer), apply the schema
        (``steps``, default every area's), and open the pool.

        ``MetadataStoreUnavailableError`` when PostgreSQL did not answer in time;
        ``MetadataStoreError`` at once for what waiting cannot cure (wrong password, no such
        database or user); ``BadMetadataStoreUrlError`` for a malformed URL."""
        config = config or MetadataStoreConfig()
        parsed = parse_metadata_store_url(url) if isinstance(url, str) else url
        conninfo = parsed.conninfo(config.connect_timeout_ms)
        await _apply_schema_when_reachable(parsed, conninfo, config, steps)
        pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
            conninfo, min_size=config.pool_min_size, max_size=config.pool_max_size, open=False,
            kwargs=_session_options(config), check=AsyncConnectionPool.check_connection,
            timeout=config.connect_timeout_ms / 1000, reconnect_timeout=config.retry_timeout_ms / 1000,
            name=f"oncestream-metadata-{parsed.dbname}")
        try:
            await pool.open(wait=True, timeout=config.start_timeout_ms / 1000)
        except PoolTimeout as exc:
            await pool.close()
            raise MetadataStoreUnavailableError(
                f"metadata store {parsed.describe()}: the connection pool could not open within "
                f"{config.start_timeout_ms} ms") from exc
        return cls(parsed, pool, config)

    async def close(self) -> None:
        """Close every connection (listeners end their iteration)."""
        self._closed.set()
        for conn in list(self._listen_connections):
            await conn.close()  # wakes the listener waiting on it, which then ends
        await self._pool.close()

    @property
    def conninfo(self) -> str:
        """The libpq conninfo of the store (for a synchronous connection of one's own)."""
        return self._conninfo

    @property
    def closed(self) -> bool:
        """True once ``close`` was called."""
        return self._closed.is_set()

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Conn]:
        """A pooled autocommit connection (for reads that need no transaction); errors mapped as
        in ``transaction`` (MetadataStoreUnavailableError when PostgreSQL is unreachable)."""
        if self.closed:
            raise MetadataStoreError("the metadata store is closed")
        try:
            async with self._pool.connection() as conn:
                yield conn
        except psycopg.Error as exc:
            raise self._mapped(exc) from exc
        except PoolTimeout as exc:
            raise MetadataStoreUnavailableError(
                f"metadata store {self.url.describe()}: no connection within "
                f"{self.config.connect_timeout_ms} ms ({exc})") from exc

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Conn]:
        """One PostgreSQL transaction on a pooled connection: committed when the block ends,
        rolled back when it raises. Errors: ``MetadataStoreUnavailableError`` (retriable, the
        transaction did not commit), ``CommitOutcomeUnknownError`` (connection lost during COMMIT),
        ``MetadataStoreError`` (any other refusal); exceptions of the block pass through."""
        async with self.connection() as conn:
            body_done = False
            try:
                async with conn.transaction():
                    yield conn
                    body_done = True
            except psycopg.Error as exc:
                if body_done and _connection_lost(exc):
                    raise CommitOutcomeUnknownError(
                        f"metadata store {self.url.describe()}: the connection was lost while committing "
                        f"({_describe(exc)}); the transaction may or may not have committed") from exc
                raise

    def _mapped(self, exc: psycopg.Error) -> MetadataStoreError:
        if is_retriable(exc):
            return MetadataStoreUnavailableError(f"metadata store {self.url.describe()}: {_describe(exc)}")
        return MetadataStoreError(f"metadata store {self.url.describe()}: {_describe(exc)}")

    async def run(self, fn: Callable[[Conn], Awaitable[T]], *,
                  read_back: Callable[[Conn], Awaitable[T | None]] | None = None,
                  retry_timeout_ms: int | None = None) -> T:
        """Run ``fn(conn)`` in one transaction, again and whole after a retriable failure (capped
        backoff, bounded by ``retry_timeout_ms``, default the config's), and return its result.

        After a ``CommitOutcomeUnknownError``: without ``read_back`` it is raised; with it,
        ``read_back(conn)`` runs in a new transaction (retried likewise) and its result is returned
        when not None (the step had committed), else ``fn`` runs again (it had not). When the bound
        passes before a read-back answered, ``CommitOutcomeUnknownError`` again; otherwise
        ``MetadataStoreUnavailableError`` means no attempt committed."""
        timeout_ms = self.config.retry_timeout_ms if retry_timeout_ms is None else retry_timeout_ms
        deadline = time.monotonic() + timeout_ms / 1000
        backoff_ms = float(self.config.retry_backoff_initial_ms)
        attempts = 0
        last: BaseException | None = None
        unresolved = False  # an earlier attempt's commit outcome is unknown: read back first
        while True:
            attempts += 1
            try:
                if unresolved and read_back is not None:
                    async with self.transaction() as conn:
                        found = await read_back(conn)
                    unresolved = False
                    if found is not None:
                        return found
                async with self.transaction() as conn:
                    return await fn(conn)
            except CommitOutcomeUnknownError as exc:
                if read_back is None:
                    raise
                unresolved, last = True, exc
            except MetadataStoreUnavailableError as exc:
                last = exc
            except psycopg.Error as exc:
                if not is_retriable(exc):
                    raise MetadataStoreError(f"metadata store {self.url.describe()}: {_describe(exc)}") from exc
                last = exc
            remaining_s = deadline - time.monotonic()
            if remaining_s <= 0 or self.closed:
                gave_up = (f"metadata store {self.url.describe()}: gave up after {attempts} attempts over "
                           f"{timeout_ms} ms; last error: {_describe(last) if last is not None else 'none'}")
                if unresolved:  # never read back: the step may have committed
                    raise CommitOutcomeUnknownError(
                        f"{gave_up}; an earlier attempt may or may not have committed") from last
                raise MetadataStoreUnavailableError(gave_up) from last
            delay_s = min(remaining_s, random.uniform(backoff_ms / 2, backoff_ms) / 1000)
            backoff_ms = min(backoff_ms * 2, float(self.config.retry_backoff_max_ms))
            log.debug("metadata store: attempt %d failed (%s), retrying in %.0f ms", attempts,
                      _describe(last) if last is not None else "", delay_s * 1000)
            await asyncio.sleep(delay_s)

    async def listen(self, channel: str) -> AsyncGenerator[str, None]:
        """The payloads NOTIFY sends on ``channel``, on a dedicated connection that reconnects
        after a failure or server restart; ``''`` is yielded after each reconnection, meaning
        "anything may have changed" (notifications sent while disconnected are lost). A wake-up
        only: the caller re-reads the state. Ends when the store is closed."""
        backoff_ms = float(self.config.retry_backoff_initial_ms)
        first = True
        probe_s = self.config.listen_probe_interval_ms / 1000
        while not self.closed:
            conn: Conn | None = None
            try:
                conn = await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True)
                self._listen_connections.add(conn)
                await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
                backoff_ms = float(self.config.retry_backoff_initial_ms)
                if not first:
                    yield ""
                first = False
                while not self.closed:
                    got_one = False
                    async for notify in conn.notifies(timeout=probe_s):
                        got_one = True
                        yield notify.payload
                    if not got_one:
                        # Nothing for a while: make sure the connection is still alive.
                        await conn.execute("SELECT 1")
            except (psycopg.Error, OSError) as exc:
                first = False
                if not self.closed:
                    log.info("metadata store: LISTEN %s lost its connection (%s); reconnecting", channel,
                             _describe(exc))
            finally:
                if conn is not None:
                    self._listen_connections.discard(conn)
                    await conn.close()
            if self.closed:
                return
            try:
                await asyncio.wait_for(self._closed.wait(), random.uniform(backoff_ms / 2, backoff_ms) / 1000)
            except TimeoutError:
                pass
            backoff_ms = min(backoff_ms * 2, float(self.config.retry_backoff_max_ms))


async def _apply_schema_when_reachable(url: MetadataStoreUrl, conninfo: str, config: MetadataStoreConfig,
                                       steps: tuple[SchemaStep, ...] | None) -> None:
    """Connect, waiting up to ``start_timeout_ms``, and apply the schema."""
    deadline = time.monotonic() + config.start_timeout_ms / 1000
    backoff_ms = float(config.retry_backoff_initial_ms)
    while True:
        try:
            conn = await psycopg.AsyncConnection.connect(conninfo)
            try:
                await apply_schema(conn, steps)
            finally:
                await conn.close()
            return
        except psycopg.Error as exc:
            state = _sqlstate(exc)
            if state in _FATAL_AT_START_SQLSTATES or (
                    state is None and any(m in str(exc) for m in _FATAL_AT_START_MESSAGES)):
                raise MetadataStoreError(
                    f"metadata store {url.describe()} refused the connection: {_describe(exc)}") from exc
            if state is not None and not is_retriable(exc):
                raise MetadataStoreError(
                    f"metadata store {url.describe()}: applying the schema failed: {_describe(exc)}") from exc
            if time.monotonic() >= deadline:
                raise MetadataStoreUnavailableError(
                    f"metadata store {url.describe()} did not answer within {config.start_timeout_ms} ms: "
                    f"{_describe(exc)}") from exc
            await asyncio.sleep(min(max(0.0, deadline - time.monotonic()), backoff_ms / 1000))
            backoff_ms = min(backoff_ms * 2, float(config.retry_backoff_max_ms))
