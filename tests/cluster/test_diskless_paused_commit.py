"""A broker paused inside its produce commit transaction, against the real PostgreSQL: the partitions
it locked are freed by PostgreSQL after the commit's idle timeout, so the other brokers' commits go
on; when it resumes, its commit runs again in a new transaction and duplicates nothing.

Before the idle timeout, every other broker's commit to a partition of the paused broker's object
waited for it; a broker commits one object at a time, so all of its produce requests waited too
(the idempotent load of tests/chaos/test_cluster_paused_broker.py stalled for as long as the
broker stayed paused)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from oncestream.cluster.diskless.commit import AppendOutcome, commit_uploaded, read_back_commit, record_uploading
from oncestream.cluster.diskless.produce_object import build_produce_object, new_object_key, validate_append
from oncestream.cluster.pg.store import Conn, MetadataStore
from oncestream.log.config import LogConfig
from tests.cluster.diskless_support import NOW_MS, batch_offsets, commit_records, create_topic, open_store
from tests.unit._batches import idempotent_batch

IDLE_TIMEOUT_MS = 300
WAIT_S = 30.0  # a bound on a hang only
PRODUCER_ID = 7


class _PausedAfterLocking:
    """A connection that stops (as a SIGSTOPped process would) once the commit has locked its
    partitions, until ``resume`` is set; the PostgreSQL session then sits idle in the transaction."""

    def __init__(self, conn: Conn, resume: asyncio.Event, paused: asyncio.Event) -> None:
        self._conn = conn
        self._resume = resume
        self._paused = paused
        self._locked = False

    async def execute(self, query: Any, params: Any = None) -> Any:
        if self._locked and not self._paused.is_set():
            self._paused.set()
            await self._resume.wait()
        cursor = await self._conn.execute(query, params)
        if "FOR UPDATE OF p" in str(query):  # partition_rows.lock_partitions
            self._locked = True
        return cursor

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


async def _paused_commit(store: MetadataStore, topic: uuid.UUID, records: bytes, resume: asyncio.Event,
                         paused: asyncio.Event, attempts: list[int]) -> list[AppendOutcome]:
    """The paused broker's commit of one object, run as the appender runs it (MetadataStore.run
    with its read-back); the first attempt that locks the partitions stalls. (On a loaded machine
    an attempt can lose its session to the short idle timeout between two statements before it
    locks anything; MetadataStore.run then tries again, and that attempt is the one to pause.)"""
    key = new_object_key("paused", NOW_MS)
    obj = build_produce_object(key, [validate_append(topic, 0, records, LogConfig())], NOW_MS)

    async def record(conn: Conn) -> None:
        await record_uploading(conn, key, len(obj.data), 3)

    async def commit(conn: Conn) -> list[AppendOutcome]:
        attempts.append(len(attempts) + 1)
        used: Any = conn if paused.is_set() else _PausedAfterLocking(conn, resume, paused)
        return await commit_uploaded(used, key, obj.appends, idle_timeout_ms=IDLE_TIMEOUT_MS)

    async def read_back(conn: Conn) -> list[AppendOutcome] | None:
        return await read_back_commit(conn, key, obj.appends)

    await store.run(record)
    return await store.run(commit, read_back=read_back)


def test_a_commit_paused_inside_its_transaction_holds_its_partitions_only_for_the_idle_timeout(pg_database):
    async def main() -> None:
        paused_store = await open_store(pg_database)
        live_store = await open_store(pg_database)
        try:
            topic = await create_topic(live_store, 1)
            batch = idempotent_batch(PRODUCER_ID, 0, 0, count=3)
            resume, paused = asyncio.Event(), asyncio.Event()
            attempts: list[int] = []
            late = asyncio.ensure_future(_paused_commit(paused_store, topic, batch, resume, paused, attempts))
            await asyncio.wait_for(paused.wait(), WAIT_S)
            paused_attempt = attempts[-1]

            # The producer's retry of the same batch reaches a live broker, which commits it: the
            # partition lock of the paused commit is gone once PostgreSQL ended its session.
            [retried] = await asyncio.wait_for(commit_records(live_store, [(topic, 0, batch)]), WAIT_S)
            assert (retried.error, retried.base_offset, retried.last_offset) == (ErrorCode.none, 0, 2)
            assert not late.done()

            # The paused broker resumes: its session is gone, the commit runs again in a new
            # transaction and finds the batch already written (a duplicate, answered exactly).
            resume.set()
            [outcome] = await asyncio.wait_for(late, WAIT_S)
            assert attempts[paused_attempt - 1:] == [paused_attempt, paused_attempt + 1]
            assert (outcome.error, outcome.base_offset, outcome.last_offset, outcome.duplicate) == (
                ErrorCode.none, 0, 2, True)
            assert await batch_offsets(live_store, topic, 0) == [(0, 2)]
        finally:
            await paused_store.close()
            await live_store.close()

    asyncio.run(main())
