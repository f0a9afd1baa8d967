"""ListOffsets of diskless partitions against PostgreSQL and SeaweedFS: latest (HW, or LSO for
read_committed), earliest, KIP-734's max timestamp and lookups by time (the first batch whose max
timestamp reaches the target, then the first record in it that does)."""

from __future__ import annotations

import pytest

from oncestream.cluster.diskless.object_cache import ObjectRangeCache
from oncestream.cluster.diskless.offsets_query import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    OffsetAnswer,
)
from oncestream.cluster.diskless.read_path import READ_COMMITTED, DisklessReader
from oncestream.cluster.pg.store import MetadataStore
from oncestream.errors import UnknownTopicOrPartitionError
from oncestream.remote.object_store import ObjectStore
from tests.cluster.diskless_read_support import MARKER_TIMESTAMP_MS, BatchWriter, data_batch, run_with_store
from tests.cluster.diskless_support import create_topic


def test_latest_earliest_max_timestamp_and_by_time(pg_database: str, object_store: ObjectStore) -> None:
    async def main(store: MetadataStore) -> None:
        topic = await create_topic(store, 1)
        writer = BatchWriter(store, object_store)
        await writer.append([(topic, 0, data_batch([b"a", b"b", b"c"], timestamps_ms=[1000, 1005, 1010]))])  # 0-2
        # CreateTime need not grow: the second batch starts below the first's max.
        await writer.append([(topic, 0, data_batch([b"d", b"e"], timestamps_ms=[1003, 2000])),  # 3-4
                             (topic, 0, data_batch([b"f"], timestamps_ms=[1500]))])  # 5
        reader = DisklessReader(store, ObjectRangeCache(object_store))
        assert await reader.list_offset(topic, 0, LATEST_TIMESTAMP) == OffsetAnswer(6)
        assert await reader.list_offset(topic, 0, EARLIEST_TIMESTAMP) == OffsetAnswer(0)
        assert await reader.list_offset(topic, 0, EARLIEST_LOCAL_TIMESTAMP) == OffsetAnswer(0)
        assert await reader.list_offset(topic, 0, MAX_TIMESTAMP) == OffsetAnswer(4, 2000)
        assert await reader.list_offset(topic, 0, 0) == OffsetAnswer(0, 1000)
        assert await reader.list_offset(topic, 0, 1004) == OffsetAnswer(1, 1005)  # inside the first batch
        # The first batch's max (1010) is below 1011: the second batch, whose first record (1003) is not.
        assert await reader.list_offset(topic, 0, 1011) == OffsetAnswer(4, 2000)
        assert await reader.list_offset(topic, 0, 2001) == OffsetAnswer(-1, -1)
        with pytest.raises(UnknownTopicOrPartitionError):
            await reader.list_offset(topic, 1, LATEST_TIMESTAMP)
        with pytest.raises(ValueError, match="neither a time"):
            await reader.list_offset(topic, 0, -7)

    run_with_store(pg_database, main)


def test_read_committed_offsets_stop_at_the_lso(pg_database: str, object_store: ObjectStore) -> None:
    async def main(store: MetadataStore) -> None:
        topic = await create_topic(store, 1)
        writer = BatchWriter(store, object_store)
        await writer.append([(topic, 0, data_batch([b"a"], timestamps_ms=[1000]))])  # 0
        await writer.append([(topic, 0, data_batch([b"t"], timestamps_ms=[5000], producer_id=9, producer_epoch=0,
                                                   base_sequence=0, transactional=True))])  # 1, open
        reader = DisklessReader(store, ObjectRangeCache(object_store))
        assert await reader.list_offset(topic, 0, LATEST_TIMESTAMP) == OffsetAnswer(2)
        assert await reader.list_offset(topic, 0, LATEST_TIMESTAMP, READ_COMMITTED) == OffsetAnswer(1)
        assert await reader.list_offset(topic, 0, 4000) == OffsetAnswer(1, 5000)
        assert await reader.list_offset(topic, 0, 4000, READ_COMMITTED) == OffsetAnswer(-1, -1)
        # Kafka: the largest timestamp is that of the open transaction, past the LSO: no answer.
        assert await reader.list_offset(topic, 0, MAX_TIMESTAMP, READ_COMMITTED) == OffsetAnswer(-1, -1)
        await writer.end_transaction(topic, 0, 9, 0, commit=True)  # 2
        assert await reader.list_offset(topic, 0, 4000, READ_COMMITTED) == OffsetAnswer(1, 5000)
        assert await reader.list_offset(topic, 0, LATEST_TIMESTAMP, READ_COMMITTED) == OffsetAnswer(3)
        # The COMMIT marker's record (stamped when written) now carries the largest timestamp.
        assert await reader.list_offset(topic, 0, MAX_TIMESTAMP, READ_COMMITTED) == OffsetAnswer(2, MARKER_TIMESTAMP_MS)

    run_with_store(pg_database, main)
