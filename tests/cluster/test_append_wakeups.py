"""Long-poll wake-ups of diskless fetches (issue 22, point 3): a NOTIFY of the commit wakes the
waiters of the partitions it names (and no others); after a PostgreSQL restart a lost
notification is made up for by the high-watermark poll, and LISTEN comes back by itself."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import TypeVar

import psycopg

from oncestream.cluster.diskless.partition_rows import APPENDS_CHANNEL
from oncestream.cluster.diskless.wakeups import AppendWakeups, parse_appends_payload
from oncestream.remote.object_store import ObjectStore
from tests.cluster.diskless_read_support import BatchWriter, data_batch, open_store
from tests.cluster.diskless_support import create_topic
from tests.support.postgres import PostgresServer, create_database

T = TypeVar("T")
POLL_OFF_MS = 3_600_000  # a poll that never comes within a test: only notifications wake
PROBE = (uuid.UUID(int=0xFEED), 0)


def run(main: Callable[[], Awaitable[T]]) -> T:
    async def bounded() -> T:
        async with asyncio.timeout(180):
            return await main()

    return asyncio.run(bounded())


async def until_listening(wakeups: AppendWakeups, url: str) -> None:
    """Notify a partition nobody else waits on until the wake-up arrives: LISTEN is in place."""
    for _ in range(100):
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await conn.execute("SELECT pg_notify(%s, %s)", (APPENDS_CHANNEL, f"{PROBE[0]}:{PROBE[1]}"))
        if await wakeups.wait({PROBE: 0}, 300):
            return
    raise AssertionError("LISTEN never delivered a notification")


async def registered() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


def test_payloads_name_partitions_or_everything() -> None:
    topic = uuid.uuid4()
    assert parse_appends_payload(f"{topic}:0,{topic}:3") == {(topic, 0), (topic, 3)}
    assert parse_appends_payload("") is None
    assert parse_appends_payload("garbage") is None  # unreadable: wake everyone, always safe


def test_a_commit_wakes_the_waiters_of_its_partitions_only(pg_database: str, object_store: ObjectStore) -> None:
    async def main() -> None:
        store = await open_store(pg_database)
        wakeups = AppendWakeups(store, store, poll_interval_ms=POLL_OFF_MS)
        wakeups.start()
        try:
            topic = await create_topic(store, 2)
            writer = BatchWriter(store, object_store)
            await until_listening(wakeups, pg_database)
            waiting_p0 = asyncio.ensure_future(wakeups.wait({(topic, 0): 0}, 60_000))
            waiting_p1 = asyncio.ensure_future(wakeups.wait({(topic, 1): 0}, 60_000))
            await registered()
            await writer.append([(topic, 1, data_batch([b"one"]))])
            assert await waiting_p1 is True
            await registered()
            assert not waiting_p0.done()  # the notification named partition 1 only
            await writer.append([(topic, 0, data_batch([b"zero"]))])
            assert await waiting_p0 is True
            assert await wakeups.wait({(topic, 0): 1}, 200) is False  # nothing new: the timeout ends it
        finally:
            await wakeups.close()
            await store.close()

    run(main)


def test_after_a_postgresql_restart_the_poll_covers_lost_notifications(
        postgres_factory: Callable[[], PostgresServer], object_store: ObjectStore) -> None:
    server = postgres_factory()
    url = server.url(create_database(server))

    async def main() -> None:
        store = await open_store(url)
        notified_only = AppendWakeups(store, store, poll_interval_ms=POLL_OFF_MS)
        polling = AppendWakeups(store, store, poll_interval_ms=200)
        for wakeups in (notified_only, polling):
            wakeups.start()
        try:
            topic = await create_topic(store, 1)
            writer = BatchWriter(store, object_store)
            await until_listening(notified_only, url)
            await asyncio.to_thread(server.stop)
            await asyncio.to_thread(server.start)
            # LISTEN comes back by itself (its reconnection's '' wake-up is absorbed here).
            await until_listening(notified_only, url)
            by_poll = asyncio.ensure_future(polling.wait({(topic, 0): 0}, 60_000))
            by_notify = asyncio.ensure_future(notified_only.wait({(topic, 0): 0}, 60_000))
            await registered()
            await writer.append([(topic, 0, data_batch([b"a"]))], notify=False)  # its notification is lost
            assert await by_poll is True
            assert not by_notify.done()  # nothing was notified: only the poll could see it
            await writer.append([(topic, 0, data_batch([b"b"]))])
            assert await by_notify is True
        finally:
            for wakeups in (notified_only, polling):
                await wakeups.close()
            await store.close()

    run(main)
