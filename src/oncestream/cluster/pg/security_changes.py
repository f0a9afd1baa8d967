"""How ACL and SCRAM changes are written and how every broker comes to see them.

Design: read-through caches kept fresh by NOTIFY, with a poll as the fallback. Every broker
answers authorisation checks and SASL exchanges from memory (they are on every request's path
and must not wait for PostgreSQL); each change is one PostgreSQL transaction that ends with
``pg_notify('oncestream_security', 'acls' | 'scram')``. ``watch_changes`` listens on that channel
and reloads the cache on a matching payload, on ``''`` (the listening connection was re-established,
so notifications may have been missed), and every ``poll_interval_ms`` regardless (a lost wake-up
then costs at most that long). So another broker sees a change within milliseconds normally, at
most ``poll_interval_ms`` plus a reload when NOTIFY fails it; the broker that made the change
sees it at once. While PostgreSQL is down, brokers keep answering from their last snapshot and
changes fail (no change is acknowledged that is not committed).

``write_now`` runs one change synchronously on a connection of its own: the single broker's
stores have synchronous ``save``/``apply`` methods that the handlers call (from the disk executor
for ACLs, on the event loop for SCRAM credentials, rare admin operations), and the PostgreSQL-backed
stores keep that interface so the handlers stay unchanged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import psycopg

from oncestream.cluster.pg.errors import MetadataStoreError, SecurityStoreWriteError
from oncestream.cluster.pg.store import MetadataStore
from oncestream.errors import StorageError

log = logging.getLogger(__name__)

SECURITY_CHANNEL = "oncestream_security"
DEFAULT_POLL_INTERVAL_MS = 10_000
# Bound of one synchronous write (statement_timeout; the connect timeout is the store's).
WRITE_TIMEOUT_MS = 5_000


def write_now(store: MetadataStore, many: Sequence[tuple[str, Sequence[Sequence[Any]]]], notify_payload: str,
              *, read_query: str | None = None) -> list[tuple[Any, ...]]:
    """Run each statement of ``many`` over its rows in one transaction on a synchronous connection
    of its own, NOTIFY ``notify_payload`` in the same transaction, and return the rows of
    ``read_query`` as the transaction sees them after the change (none without one).
    ``SecurityStoreWriteError`` (an OSError) when PostgreSQL refuses or cannot be reached."""
    try:
        with psycopg.connect(store.conninfo, autocommit=True) as conn:
            conn.execute(f"SET statement_timeout = {int(WRITE_TIMEOUT_MS)}")
            with conn.transaction():
                for query, rows in many:
                    if rows:
                        with conn.cursor() as cursor:
                            cursor.executemany(query, rows)
                conn.execute("SELECT pg_notify(%s, %s)", (SECURITY_CHANNEL, notify_payload))
                return conn.execute(read_query).fetchall() if read_query is not None else []
    except psycopg.Error as exc:
        raise SecurityStoreWriteError(f"metadata store {store.url.describe()}: {type(exc).__name__}: {exc}") from exc


async def watch_changes(store: MetadataStore, payload: str, reload: Callable[[], Awaitable[None]],
                        poll_interval_ms: int = DEFAULT_POLL_INTERVAL_MS) -> None:
    """Call ``reload()`` whenever ``payload`` is notified on the security channel, after the
    listening connection is re-established, and every ``poll_interval_ms``; until the store is
    closed or the task cancelled. A failed reload is logged and tried again at the next wake-up."""
    listener = store.listen(SECURITY_CHANNEL)
    pending: asyncio.Future[str] = asyncio.ensure_future(anext(listener))
    try:
        while not store.closed:
            done, _ = await asyncio.wait({pending}, timeout=poll_interval_ms / 1000)
            if done:
                try:
                    got = pending.result()
                except StopAsyncIteration:
                    return  # the store was closed
                pending = asyncio.ensure_future(anext(listener))
                if got not in ("", payload):
                    continue
            try:
                await reload()
            except (MetadataStoreError, StorageError) as exc:
                # StorageError: a row this broker cannot read (written by a newer version, or
                # damaged); the loop must live on to install the change that repairs it.
                log.warning("reloading %s from the metadata store failed (%s); keeping the last snapshot",
                            payload, exc)
    finally:
        pending.cancel()
        await asyncio.gather(pending, return_exceptions=True)
        await listener.aclose()
