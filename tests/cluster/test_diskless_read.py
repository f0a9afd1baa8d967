"""Diskless fetch (issue 22, point 3) against the real PostgreSQL and SeaweedFS: committed batches
only, whole batches with their committed offsets and valid CRCs, Kafka's byte rule (KIP-74),
OFFSET_OUT_OF_RANGE outside [log start, HW], read_committed up to the LSO with the aborted ranges
(KIP-98), and a missing object answered as an error of its partition."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest
from kio.schema.errors import ErrorCode

from oncestream.cluster.diskless.coordinates import CoordinateCache
from oncestream.cluster.diskless.object_cache import ObjectRangeCache
from oncestream.cluster.diskless.read_path import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    DisklessObjectMissingError,
    DisklessReader,
    PartitionRead,
)
from oncestream.cluster.pg.store import MetadataStore
from oncestream.errors import OffsetOutOfRangeError, UnknownTopicOrPartitionError
from oncestream.log.read_path import ReadResult
from oncestream.protocol import record_batch as rb
from oncestream.protocol.records import committed_records
from oncestream.remote.object_store import ObjectStore
from tests.cluster.diskless_read_support import BatchWriter, data_batch, run_with_store
from tests.cluster.diskless_support import create_topic


@dataclass
class Aborted:
    """An entry of a Fetch response's aborted_transactions, as a consumer reads it."""

    producer_id: int
    first_offset: int



def reader_for(store: MetadataStore, objects: ObjectStore) -> DisklessReader:
    return DisklessReader(store, ObjectRangeCache(objects))


def txn_batch(records: list[bytes], base_sequence: int) -> bytes:
    """A transactional batch of producer 7, epoch 0."""
    return data_batch(records, base_sequence=base_sequence, producer_id=7, producer_epoch=0, transactional=True)


def batches_of(result: ReadResult) -> list[tuple[rb.BatchHeader, bytes]]:
    """The served batches, each checked whole (length, magic, CRC32C) by the one batch parser."""
    blob = b"".join(result.chunks)
    return [(header, bytes(batch)) for header, batch in rb.iter_batches(blob, verify_crc=True)]


def values(result: ReadResult, *, read_committed: bool = False) -> list[bytes | None]:
    blob = b"".join(result.chunks)
    aborted = None
    if read_committed:
        aborted = [Aborted(pid, first) for pid, first in result.aborted_transactions or ()]
    return [record.value for _, record in committed_records(blob, aborted) if record is not None]


def test_reader_serves_committed_batches_at_their_committed_offsets(pg_database: str, object_store: ObjectStore) -> None:
    async def main(store: MetadataStore) -> None:
        topic = await create_topic(store, 2)
        writer = BatchWriter(store, object_store)
        # One object holding batches of two partitions, interleaved (a produce object's shape).
        await writer.append([(topic, 0, data_batch([b"a", b"b", b"c"])), (topic, 1, data_batch([b"x"])),
                             (topic, 0, data_batch([b"d"]))])
        await writer.append([(topic, 0, data_batch([b"e", b"f"]))])
        reader = reader_for(store, object_store)
        result = await reader.read(topic, 0, 0, 1 << 20)
        headers = [header for header, _ in batches_of(result)]
        assert [(h.base_offset, h.last_offset) for h in headers] == [(0, 2), (3, 3), (4, 5)]
        assert values(result) == [b"a", b"b", b"c", b"d", b"e", b"f"]
        assert (result.high_watermark, result.last_stable_offset, result.log_start_offset) == (6, 6, 0)
        assert result.aborted_transactions is None
        other = await reader.read(topic, 1, 0, 1 << 20)
        assert values(other) == [b"x"]
        assert other.high_watermark == 1
        # The batch containing the fetch offset comes whole (Kafka returns whole batches).
        middle = await reader.read(topic, 0, 1, 1 << 20)
        assert [h.base_offset for h, _ in batches_of(middle)] == [0, 3, 4]
        at_end = await reader.read(topic, 0, 6, 1 << 20)
        assert at_end.chunks == []
        assert at_end.high_watermark == 6

    run_with_store(pg_database, main)


def test_an_uploaded_object_is_invisible_until_its_commit(pg_database: str, object_store: ObjectStore) -> None:
    async def main(store: MetadataStore) -> None:
        topic = await create_topic(store, 1)
        writer = BatchWriter(store, object_store)
        batches = [(topic, 0, data_batch([b"later"]))]
        uploaded = await writer.upload(batches)  # 'uploading' row and the object: no batch rows
        reader = reader_for(store, object_store)
        before = await reader.read(topic, 0, 0, 1 << 20)
        assert before.chunks == []
        assert before.high_watermark == 0
        with pytest.raises(OffsetOutOfRangeError):
            await reader.read(topic, 0, 1, 1 << 20)
        await writer.commit(uploaded)
        after = await reader.read(topic, 0, 0, 1 << 20)
        assert values(after) == [b"later"]
        assert after.high_watermark == 1

    run_with_store(pg_database, main)


def test_byte_limit_keeps_whole_batches_and_returns_one_oversize_first_batch(pg_database: str, object_store: ObjectStore) -> None:
    async def main(store: MetadataStore) -> None:
        topic = await create_topic(store, 1)
        writer = BatchWriter(store, object_store)
        batch = data_batch([b"v" * 100])
        await writer.append([(topic, 0, batch), (topic, 0, batch), (topic, 0, batch)])
        reader = reader_for(store, object_store)
        size = len(batch)
        one_and_a_half = await reader.read(topic, 0, 0, size + size // 2)
        assert [h.base_offset for h, _ in batches_of(one_and_a_half)] == [0]
        two = await reader.read(topic, 0, 1, 2 * size)
        assert [h.base_offset for h, _ in batches_of(two)] == [1, 2]
        oversize = await reader.read(topic, 0, 0, 10, min_one=True)  # KIP-74: progress whatever the limit
        assert [h.base_offset for h, _ in batches_of(oversize)] == [0]
        nothing = await reader.read(topic, 0, 0, 10, min_one=False)
        assert nothing.chunks == []
        assert nothing.high_watermark == 3

    run_with_store(pg_database, main)


def test_offsets_outside_the_log_are_out_of_range(pg_database: str, object_store: ObjectStore) -> None:
    async def main(store: MetadataStore) -> None:
        topic = await create_topic(store, 1)
        await BatchWriter(store, object_store).append([(topic, 0, data_batch([b"a", b"b"]))])
        reader = reader_for(store, object_store)
        with pytest.raises(OffsetOutOfRangeError) as above:
            await reader.read(topic, 0, 3, 1 << 20)
        assert above.value.code == ErrorCode.offset_out_of_range
        with pytest.raises(OffsetOutOfRangeError):
            await reader.read(topic, 0, -1, 1 << 20)
        with pytest.raises(UnknownTopicOrPartitionError):
            await reader.read(topic, 1, 0, 1 << 20)
        with pytest.raises(UnknownTopicOrPartitionError):
            await reader.read(uuid.uuid4(), 0, 0, 1 << 20)

    run_with_store(pg_database, main)


def test_read_committed_stops_at_the_lso_and_lists_aborted_transactions(pg_database: str, object_store: ObjectStore) -> None:
    async def main(store: MetadataStore) -> None:
        topic = await create_topic(store, 1)
        writer = BatchWriter(store, object_store)
        await writer.append([(topic, 0, data_batch([b"plain"]))])  # offset 0
        await writer.append([(topic, 0, txn_batch([b"t1", b"t2"], 0))])  # 1-2, open
        await writer.append([(topic, 0, data_batch([b"after"]))])  # 3
        reader = reader_for(store, object_store)
        open_committed = await reader.read(topic, 0, 0, 1 << 20, READ_COMMITTED)
        assert open_committed.last_stable_offset == 1
        assert open_committed.high_watermark == 4
        assert [h.base_offset for h, _ in batches_of(open_committed)] == [0]  # nothing at or past the LSO
        assert open_committed.aborted_transactions == []
        at_lso = await reader.read(topic, 0, 1, 1 << 20, READ_COMMITTED)
        assert at_lso.chunks == []
        uncommitted = await reader.read(topic, 0, 0, 1 << 20, READ_UNCOMMITTED)
        assert values(uncommitted) == [b"plain", b"t1", b"t2", b"after"]

        marker = await writer.end_transaction(topic, 0, 7, 0, commit=False)  # offset 4
        assert marker == 4
        await writer.append([(topic, 0, txn_batch([b"t3"], 2))])  # 5, next txn
        await writer.end_transaction(topic, 0, 7, 0, commit=True)  # 6
        result = await reader.read(topic, 0, 0, 1 << 20, READ_COMMITTED)
        assert (result.last_stable_offset, result.high_watermark) == (7, 7)
        assert [h.base_offset for h, _ in batches_of(result)] == [0, 1, 3, 4, 5, 6]
        assert result.aborted_transactions == [(7, 1)]
        assert values(result, read_committed=True) == [b"plain", b"after", b"t3"]
        # Past the aborted range, it is no longer listed (Kafka lists the overlapping ones only).
        later = await reader.read(topic, 0, 5, 1 << 20, READ_COMMITTED)
        assert later.aborted_transactions == []

    run_with_store(pg_database, main)


def test_a_missing_object_is_an_error_of_its_partition_only(pg_database: str, object_store: ObjectStore) -> None:
    async def main(store: MetadataStore) -> None:
        topic = await create_topic(store, 2)
        writer = BatchWriter(store, object_store)
        await writer.append([(topic, 0, data_batch([b"lost"]))])
        await writer.append([(topic, 1, data_batch([b"kept"]))])
        reader = reader_for(store, object_store)
        for key in object_store.list("test/"):
            object_store.delete(key)
        await writer.append([(topic, 1, data_batch([b"new"]))])
        with pytest.raises(DisklessObjectMissingError) as missing:
            await reader.read(topic, 0, 0, 1 << 20)
        assert missing.value.code == ErrorCode.kafka_storage_error
        assert values(await reader.read(topic, 1, 1, 1 << 20)) == [b"new"]

    run_with_store(pg_database, main)


def test_a_tail_follower_reads_new_rows_through_the_coordinate_cache(pg_database: str, object_store: ObjectStore) -> None:
    async def main(store: MetadataStore) -> None:
        topic = await create_topic(store, 1)
        writer = BatchWriter(store, object_store)
        cache = CoordinateCache(max_batches=8)
        reader = DisklessReader(store, ObjectRangeCache(object_store), coordinates=cache)
        positions = {"tail": 0, "replay": 0}
        seen: dict[str, list[bytes | None]] = {"tail": [], "replay": []}
        for round_number in range(12):
            await writer.append([(topic, 0, data_batch([f"r{round_number}".encode()]))])
            for name in ("tail", "replay") if round_number % 3 == 2 else ("tail",):
                result = await reader.read(topic, 0, positions[name], 200)
                seen[name] += values(result)
                headers = [h for h, _ in batches_of(result)]
                if headers:
                    positions[name] = headers[-1].next_offset
            assert cache.batch_count <= 8
        expected = [f"r{i}".encode() for i in range(12)]
        assert seen["tail"] == expected
        while positions["replay"] < 12:
            result = await reader.read(topic, 0, positions["replay"], 200)
            seen["replay"] += values(result)
            positions["replay"] = [h for h, _ in batches_of(result)][-1].next_offset
        assert seen["replay"] == expected

    run_with_store(pg_database, main)


def test_read_many_shares_the_response_budget_and_answers_errors_per_partition(
        pg_database: str, object_store: ObjectStore) -> None:
    async def main(store: MetadataStore) -> None:
        topic = await create_topic(store, 3)
        writer = BatchWriter(store, object_store)
        batch = data_batch([b"v" * 100])
        size = len(batch)
        await writer.append([(topic, 0, batch), (topic, 0, batch), (topic, 1, batch)])
        lost = await writer.append([(topic, 2, batch)])
        assert lost[0].base_offset == 0
        reader = reader_for(store, object_store)
        reads = [PartitionRead(topic, 0, 0, 10 * size), PartitionRead(topic, 5, 0, size),
                 PartitionRead(topic, 1, 7, size), PartitionRead(topic, 1, 0, size)]
        first, unknown, out_of_range, starved = await reader.read_many(reads, response_max_bytes=2 * size + size // 2)
        assert isinstance(first, ReadResult)
        assert [h.base_offset for h, _ in batches_of(first)] == [0, 1]
        assert isinstance(unknown, UnknownTopicOrPartitionError)
        assert isinstance(out_of_range, OffsetOutOfRangeError)
        assert isinstance(starved, ReadResult)
        assert starved.chunks == []  # half a batch left of the response: not the first partition with data
        assert starved.high_watermark == 1
        # The batches of several partitions back to back in one object: one GET serves them all.
        packed = await writer.append([(topic, p, data_batch([f"packed-{p}".encode()])) for p in range(3)])
        fresh = reader_for(store, object_store)
        spread = await fresh.read_many([PartitionRead(topic, p, packed[p].base_offset, size) for p in range(3)],
                                       response_max_bytes=10 * size)
        assert [values(r) for r in spread if isinstance(r, ReadResult)] == [[f"packed-{p}".encode()] for p in range(3)]
        assert fresh.objects.stats().gets == 1
        # A response budget below one batch: the first partition still gets one (KIP-74), the next none.
        tiny = await reader.read_many([PartitionRead(topic, 1, 0, size), PartitionRead(topic, 0, 0, size)],
                                      response_max_bytes=10)
        assert [[h.base_offset for h, _ in batches_of(r)] for r in tiny if isinstance(r, ReadResult)] == [[0], []]
        # One partition's object is gone: its error, the others' data.
        for key in object_store.list("test/"):
            if object_store.get(key).count(batch) == 1:
                object_store.delete(key)
        mixed = await reader.read_many([PartitionRead(topic, 2, 0, size), PartitionRead(topic, 0, 0, 10 * size)],
                                       response_max_bytes=10 * size)
        assert isinstance(mixed[0], DisklessObjectMissingError)
        assert isinstance(mixed[1], ReadResult)
        assert values(mixed[1]) == [b"v" * 100, b"v" * 100, b"packed-0"]

    run_with_store(pg_database, main)
