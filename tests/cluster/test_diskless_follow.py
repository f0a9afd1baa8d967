"""The read side with the write side running: four producers send through two brokers' produce
pipelines (DisklessAppender: buffer, upload, commit) to three partitions while long-polling followers (read, then wait on
AppendWakeups) tail them; every acknowledged record is read exactly once, at its acknowledged
offset, in order. Then a PostgreSQL restart: reads fail with a retriable error while it is down
and resume by themselves."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

import pytest

from oncestream.cluster.diskless.append_pipeline import DisklessAppendConfig, DisklessAppender, PartitionAppend
from oncestream.cluster.diskless.object_cache import ObjectRangeCache
from oncestream.cluster.diskless.read_path import DisklessReader
from oncestream.cluster.diskless.wakeups import AppendWakeups
from oncestream.cluster.pg.errors import MetadataStoreUnavailableError
from oncestream.log.config import LogConfig
from oncestream.protocol import record_batch as rb
from oncestream.protocol.records import decode_batches
from oncestream.remote.object_store import ObjectStore
from tests.cluster.diskless_read_support import data_batch, open_store
from tests.cluster.diskless_support import create_topic
from tests.support.postgres import PostgresServer, create_database

PARTITIONS = 3
REQUESTS_PER_PRODUCER = 20


async def follow(reader: DisklessReader, wakeups: AppendWakeups, key: tuple[uuid.UUID, int], expected_count: int,
                 ) -> list[tuple[int, bytes | None]]:
    """A consumer's long poll: read from its position; nothing new -> wait for a wake-up."""
    position = 0
    seen: list[tuple[int, bytes | None]] = []
    while len(seen) < expected_count:
        result = await reader.read(key[0], key[1], position, 300)
        if not result.chunks:
            await wakeups.wait({key: result.high_watermark}, 5_000)
            continue
        for batch in decode_batches(b"".join(result.chunks)):
            seen += [(r.offset, r.value) for r in batch.records if r.offset >= position]
            position = batch.header.next_offset
    return seen


def test_followers_read_every_acknowledged_record_once_in_order(
        postgres_factory: Callable[[], PostgresServer], object_store: ObjectStore) -> None:
    server = postgres_factory()
    url = server.url(create_database(server))

    async def main() -> None:
        store = await open_store(url)
        config = DisklessAppendConfig(commit_interval_ms=20)
        appenders = [DisklessAppender(store, object_store, broker_id=b, key_prefix=f"b{b}", config=config)
                     for b in (1, 2)]
        wakeups = AppendWakeups(store, store, poll_interval_ms=500)
        reader = DisklessReader(store, ObjectRangeCache(object_store, budget_bytes=64 * 1024))
        for appender in appenders:
            appender.start()
        wakeups.start()
        try:
            topic = await create_topic(store, PARTITIONS)
            acknowledged: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}

            async def produce(producer: int) -> None:
                for i in range(REQUESTS_PER_PRODUCER):
                    partition = (producer + i) % PARTITIONS
                    value = f"p{producer}-{i}".encode()
                    (outcome,) = await appenders[producer % 2].append(
                        [PartitionAppend(topic, partition, data_batch([value]), LogConfig())])
                    assert outcome.error == 0, outcome
                    acknowledged[partition].append((outcome.base_offset, value))

            counts = [sum(1 for producer in range(4) for i in range(REQUESTS_PER_PRODUCER)
                          if (producer + i) % PARTITIONS == p) for p in range(PARTITIONS)]
            followers = [asyncio.ensure_future(follow(reader, wakeups, (topic, p), counts[p]))
                         for p in range(PARTITIONS)]
            await asyncio.gather(*(produce(producer) for producer in range(4)))
            async with asyncio.timeout(60):
                followed = await asyncio.gather(*followers)
            for partition in range(PARTITIONS):
                assert followed[partition] == sorted(acknowledged[partition])
                assert [offset for offset, _ in followed[partition]] == list(range(counts[partition]))
            assert reader_cache_within_budget(reader)

            # PostgreSQL goes away: a read is a retriable error, never a wrong answer; it comes back.
            await asyncio.to_thread(server.stop)
            with pytest.raises(MetadataStoreUnavailableError) as down:
                await reader.read(topic, 0, 0, 1 << 20)
            assert down.value.code.name == "request_timed_out"  # clients retry it
            await asyncio.to_thread(server.start)
            async with asyncio.timeout(60):
                while True:
                    try:
                        result = await reader.read(topic, 0, 0, 1 << 20)
                        break
                    except MetadataStoreUnavailableError:
                        await asyncio.sleep(0.2)
            assert [h.base_offset for h, _ in rb.iter_batches(b"".join(result.chunks))][:1] == [0]
        finally:
            for appender in appenders:
                await appender.close()
            await wakeups.close()
            await store.close()

    async def bounded() -> None:
        async with asyncio.timeout(240):
            await main()

    asyncio.run(bounded())


def reader_cache_within_budget(reader: DisklessReader) -> bool:
    stats = reader.objects.stats()
    return stats.peak_size_bytes <= reader.objects.budget_bytes
