"""Orphaned objects: in the store under the diskless prefix, with no ``objects`` row.

Every upload records its key in ``objects`` BEFORE the PUT, and the object GC deletes an object
from the store before its row, so an object without a row is one whose PUT landed after the GC had
given up on it and removed its row (an upload that timed out but completed later), or one left by
a crash between the GC's two deletes. Nothing points at such an object and nothing ever will (keys
are unique per attempt), but it costs storage forever unless found by listing the store.

A sweep round (bounded: ``page_size`` keys listed past a cursor that wraps around):

1. keys of the page with no ``objects`` row are recorded in ``diskless_orphans`` with
   ``first_seen_at = now()`` (PostgreSQL's clock) if not recorded yet; recorded keys of the page
   that have a row after all (never expected) are forgotten;
2. recorded orphans first seen more than ``grace_ms`` ago and still without a row are claimed
   (``FOR UPDATE SKIP LOCKED``: several brokers may sweep at once), deleted from the store (a
   missing object counts as deleted), then their record removed.

The grace covers an upload whose row insert and PUT straddle the listing (the row is committed
before the PUT starts, so a listed object has its row already, unless it is an orphan), and it
makes the sweep's decision rest on two looks at the store at least ``grace_ms`` apart.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
from dataclasses import dataclass

from oncestream.cluster.diskless.periodic import PeriodicRound
from oncestream.cluster.pg.store import Conn, MetadataStore
from oncestream.errors import RemoteObjectNotFoundError, RemoteStorageError
from oncestream.remote.object_store import ObjectStore

log = logging.getLogger(__name__)

DEFAULT_ORPHAN_GRACE_MS = 3_600_000
DEFAULT_PAGE_SIZE = 1000
DEFAULT_SWEEP_INTERVAL_MS = 600_000

_RECORD_UNKNOWN = """
INSERT INTO diskless_orphans (object_key)
SELECT k FROM unnest(%(keys)s::text[]) AS k
 WHERE NOT EXISTS (SELECT 1 FROM objects o WHERE o.object_key = k)
ON CONFLICT (object_key) DO NOTHING
"""

_FORGET_KNOWN = """
DELETE FROM diskless_orphans d
 WHERE d.object_key = ANY(%(keys)s) AND EXISTS (SELECT 1 FROM objects o WHERE o.object_key = d.object_key)
"""

_DUE = """
SELECT d.object_key FROM diskless_orphans d
 WHERE d.first_seen_at + %(grace_ms)s * interval '1 millisecond' <= now()
   AND NOT EXISTS (SELECT 1 FROM objects o WHERE o.object_key = d.object_key)
 ORDER BY d.object_key LIMIT %(limit)s FOR UPDATE SKIP LOCKED
"""

_FORGET = "DELETE FROM diskless_orphans WHERE object_key = %(key)s"


@dataclass(frozen=True, slots=True)
class SweepRound:
    """What one sweep round did."""

    listed: int  # keys of the page examined
    recorded: int  # newly recorded as orphans
    deleted: tuple[str, ...]  # orphans deleted from the store
    failed: int  # store deletes that failed (retried next round)


class OrphanSweeper:
    """Finds and deletes orphaned diskless objects (see the module doc); ``run_round`` is one round."""

    def __init__(self, metadata: MetadataStore, objects: ObjectStore, *, key_prefix: str = "",
                 grace_ms: int = DEFAULT_ORPHAN_GRACE_MS, page_size: int = DEFAULT_PAGE_SIZE,
                 interval_ms: int = DEFAULT_SWEEP_INTERVAL_MS,
                 executor: concurrent.futures.Executor | None = None) -> None:
        if grace_ms < 0 or page_size < 1:
            raise ValueError("the orphan sweep needs grace_ms >= 0 and page_size >= 1")
        self._metadata = metadata
        self._objects = objects
        prefix = key_prefix.strip("/")
        self._list_prefix = f"{prefix}/diskless/" if prefix else "diskless/"
        self._grace_ms = grace_ms
        self._page_size = page_size
        self._executor = executor
        self._after = ""  # the cursor: the page starts after this key ("" = from the start)
        self._loop = PeriodicRound("diskless-orphan-sweep", interval_ms, self.run_round)

    def start(self) -> None:
        """Run a round every ``interval_ms`` until ``close`` (a failed round is logged, not fatal)."""
        self._loop.start()

    async def close(self) -> None:
        """Stop the background rounds."""
        await self._loop.close()

    async def run_round(self) -> SweepRound:
        """Examine the next page of keys, then delete the orphans whose grace has passed."""
        loop = asyncio.get_running_loop()
        keys = await loop.run_in_executor(self._executor, self._objects.list, self._list_prefix)
        page = [key for key in keys if key > self._after][: self._page_size]
        self._after = page[-1] if len(page) == self._page_size else ""

        async def record(conn: Conn) -> int:
            cursor = await conn.execute(_RECORD_UNKNOWN, {"keys": page})
            recorded = cursor.rowcount
            await conn.execute(_FORGET_KNOWN, {"keys": page})
            return recorded

        recorded = await self._metadata.run(record) if page else 0
        deleted, failed = await self._delete_due(loop)
        return SweepRound(len(page), recorded, tuple(deleted), failed)

    async def _delete_due(self, loop: asyncio.AbstractEventLoop) -> tuple[list[str], int]:
        # One transaction holds the claimed rows while their objects are deleted, so two sweepers
        # never delete the same orphan twice; the rows go only after the store confirmed.
        deleted: list[str] = []
        failed = 0

        async def sweep(conn: Conn) -> None:
            nonlocal failed
            deleted.clear()
            failed = 0
            cursor = await conn.execute(_DUE, {"grace_ms": self._grace_ms, "limit": self._page_size})
            for (key,) in await cursor.fetchall():
                try:
                    await loop.run_in_executor(self._executor, functools.partial(self._objects.delete, str(key)))
                except RemoteObjectNotFoundError:
                    pass
                except RemoteStorageError as exc:
                    failed += 1
                    log.warning("cannot delete orphaned object %s (the next round retries): %s", key, exc)
                    continue
                await conn.execute(_FORGET, {"key": key})
                deleted.append(str(key))

        await self._metadata.run(sweep)
        return deleted, failed
