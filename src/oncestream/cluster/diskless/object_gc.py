"""Garbage collection of produce objects: deletion recorded first, performed after, row last.

Each round (bounded by ``max_objects_per_round`` in every step) does, in order:

1. Abandoned uploads: objects still 'uploading' ``upload_timeout_ms`` after their row was created
   (by PostgreSQL's clock) never committed, but their PUT may still land later, so they are
   collected, not ignored. They become 'deleting' with ``delete_after = now()``: no batch row ever
   pointed at them, so no reader can need them. A commit arriving later finds the object not
   'uploading' and commits nothing (``ObjectNotUploadingError``): its producers get an error.
2. Unreferenced objects: 'live' objects no batch row points at any more (retention,
   DeleteRecords, a deleted topic, consolidation) become 'deleting' with ``delete_after = now() +
   delete_grace_ms``, a grace longer than any fetch holding their old coordinates (invariant 6).
3. Deletion: objects 'deleting' past ``delete_after`` are deleted from the object store first (a
   missing object counts as deleted: a previous round may have deleted it and died), then their
   row, unless a batch row points at it again (which nothing does today; the check keeps the rule
   that an object is never removed while referenced).

Rows are claimed with ``FOR UPDATE SKIP LOCKED`` so several brokers may collect at once. Times
come from PostgreSQL's clock, never the broker's.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from concurrent.futures import Executor
from dataclasses import dataclass

from oncestream.cluster.diskless.commit import DEFAULT_DELETE_GRACE_MS
from oncestream.cluster.pg.store import Conn, MetadataStore
from oncestream.errors import OnceStreamError, RemoteObjectNotFoundError, RemoteStorageError
from oncestream.remote.object_store import ObjectStore

log = logging.getLogger(__name__)

DEFAULT_UPLOAD_TIMEOUT_MS = 600_000


@dataclass(frozen=True, slots=True)
class GcRound:
    """What one round did (counts of objects)."""

    abandoned_uploads: int  # 'uploading' rows given up on
    unreferenced: int  # 'live' objects found without a batch row
    deleted: int  # objects removed from the store and their rows
    failed: int  # store deletes that failed (retried next round)


class ObjectGarbageCollector:
    """Deletes produce objects nobody can read (see the module doc); ``run_once`` is one round."""

    def __init__(
        self,
        metadata: MetadataStore,
        objects: ObjectStore,
        *,
        upload_timeout_ms: int = DEFAULT_UPLOAD_TIMEOUT_MS,
        delete_grace_ms: int = DEFAULT_DELETE_GRACE_MS,
        max_objects_per_round: int = 100,
        executor: Executor | None = None,
    ) -> None:
        if upload_timeout_ms < 0 or delete_grace_ms < 0 or max_objects_per_round < 1:
            raise ValueError("object GC bounds must be >= 0 (timeouts) and >= 1 (objects per round)")
        self._metadata = metadata
        self._objects = objects
        self._upload_timeout_ms = upload_timeout_ms
        self._delete_grace_ms = delete_grace_ms
        self._limit = max_objects_per_round
        self._executor = executor

    async def run_once(self) -> GcRound:
        """One bounded round: mark abandoned uploads and unreferenced objects, delete what is due."""
        abandoned = await self._metadata.run(self._mark_abandoned_uploads)
        unreferenced = await self._metadata.run(self._mark_unreferenced)
        due = await self._metadata.run(self._due_for_deletion)
        deleted = failed = 0
        loop = asyncio.get_running_loop()
        for key in due:
            try:
                await loop.run_in_executor(self._executor, self._objects.delete, key)
            except RemoteObjectNotFoundError:
                pass  # already gone: a previous round deleted it and died before the row went
            except RemoteStorageError as exc:
                log.warning("object GC: deleting %s from %s failed (retried next round): %s",
                            key, self._objects.description, exc)
                failed += 1
                continue
            if await self._metadata.run(functools.partial(self._delete_row, key=key)):
                deleted += 1
        return GcRound(abandoned, unreferenced, deleted, failed)

    async def run_every(self, interval_ms: int, stop: asyncio.Event) -> None:
        """Run rounds every ``interval_ms`` until ``stop`` is set (the broker's background task); a
        failed round (PostgreSQL or the store unavailable) is logged and the next one tries again.
        A round that found a full batch of work is followed at once by the next."""
        while not stop.is_set():
            busy = False
            try:
                done = await self.run_once()
                busy = max(done.abandoned_uploads, done.unreferenced, done.deleted + done.failed) >= self._limit
            except OnceStreamError as exc:
                log.warning("object GC round failed (next round in %d ms): %s", interval_ms, exc)
            if busy:
                await asyncio.sleep(0)
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_ms / 1000)

    async def _mark_abandoned_uploads(self, conn: Conn) -> int:
        cursor = await conn.execute(
            "UPDATE objects SET state = 'deleting', delete_after = now() WHERE object_key IN ("
            " SELECT object_key FROM objects WHERE state = 'uploading'"
            "  AND created_at < now() - %s * interval '1 millisecond'"
            "  ORDER BY created_at LIMIT %s FOR UPDATE SKIP LOCKED)",
            (self._upload_timeout_ms, self._limit))
        return cursor.rowcount

    async def _mark_unreferenced(self, conn: Conn) -> int:
        cursor = await conn.execute(
            "UPDATE objects SET state = 'deleting', delete_after = now() + %s * interval '1 millisecond'"
            " WHERE object_key IN ("
            " SELECT o.object_key FROM objects o WHERE o.state = 'live'"
            "  AND NOT EXISTS (SELECT 1 FROM batches b WHERE b.object_key = o.object_key)"
            "  ORDER BY o.created_at LIMIT %s FOR UPDATE SKIP LOCKED)",
            (self._delete_grace_ms, self._limit))
        return cursor.rowcount

    async def _due_for_deletion(self, conn: Conn) -> list[str]:
        cursor = await conn.execute(
            "SELECT object_key FROM objects WHERE state = 'deleting' AND delete_after <= now()"
            " ORDER BY delete_after LIMIT %s", (self._limit,))
        return [str(row[0]) for row in await cursor.fetchall()]

    @staticmethod
    async def _delete_row(conn: Conn, *, key: str) -> bool:
        cursor = await conn.execute(
            "DELETE FROM objects o WHERE o.object_key = %s AND o.state = 'deleting'"
            " AND NOT EXISTS (SELECT 1 FROM batches b WHERE b.object_key = o.object_key)", (key,))
        return cursor.rowcount == 1
