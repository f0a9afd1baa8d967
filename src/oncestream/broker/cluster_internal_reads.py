"""Fetch and ListOffsets of the coordinators' internal topics in cluster mode.

Their records are rows in PostgreSQL (cluster/leases/internal_reads.py explains which), so a read
builds record batches from the rows as Kafka's log cleaner leaves them: each record at its own
offset, with gaps where a key was overwritten or deleted since, and each batch's offset range
running up to the next batch (the last one up to the high watermark, so a reader's position
reaches it even when the newest offsets were overwritten; with no row left it is a header-only
batch, which every Kafka client skips by its range). The rows carry no append time, so
the records have no timestamp (-1, as Kafka writes for "none") and a ListOffsets by time finds no
record. There are no transactions in these rows (the coordinators write only what is decided),
so the last stable offset is the high watermark and read_committed sees the same records.
"""

from __future__ import annotations

from oncestream.broker.cluster_node import ClusterNode, TopicMeta
from oncestream.cluster.diskless.offsets_query import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    NO_ANSWER,
    OffsetAnswer,
)
from oncestream.cluster.leases.internal_reads import internal_next_offset, read_internal_range
from oncestream.errors import OffsetOutOfRangeError, UnknownTopicOrPartitionError
from oncestream.log.read_path import ReadResult
from oncestream.protocol.records import NewRecord, encode_batch

# Rows one partition read takes at most; the byte limits usually stop it first.
MAX_ROWS_PER_READ = 2000
ROWS_PER_BATCH = 200
NO_TIMESTAMP_MS = -1


def _check_partition(topic: TopicMeta, partition: int) -> None:
    if not 0 <= partition < topic.num_partitions:
        raise UnknownTopicOrPartitionError(f"no partition {topic.name}-{partition}")


async def read_internal(node: ClusterNode, topic: TopicMeta, partition: int, fetch_offset: int,
                        max_bytes: int) -> ReadResult:
    """The batches of one internal partition from ``fetch_offset``, at most ``max_bytes`` but at
    least the first batch (KIP-74); OFFSET_OUT_OF_RANGE past the high watermark."""
    _check_partition(topic, partition)
    found = await read_internal_range(node.store, topic.name, partition, max(fetch_offset, 0), MAX_ROWS_PER_READ)
    high_watermark = found.next_offset
    if not 0 <= fetch_offset <= high_watermark:
        raise OffsetOutOfRangeError(
            f"offset {fetch_offset} is outside {topic.name}-{partition}'s range [0, {high_watermark}]")
    rows = found.records
    # Read to the end: the last batch reaches the high watermark, past offsets no row keeps.
    to_the_end = len(rows) < MAX_ROWS_PER_READ
    chunks: list[bytes] = []
    size_bytes = 0
    if not rows:
        if to_the_end and fetch_offset < high_watermark:  # only overwritten or deleted keys are left
            chunks.append(_batch([], fetch_offset, high_watermark - 1))
        return _result(chunks, high_watermark)
    for start in range(0, len(rows), ROWS_PER_BATCH):
        run = rows[start:start + ROWS_PER_BATCH]
        following = rows[start + ROWS_PER_BATCH][0] if start + ROWS_PER_BATCH < len(rows) else None
        last_offset = following - 1 if following is not None else (
            high_watermark - 1 if to_the_end else run[-1][0])
        batch = _batch(run, run[0][0], last_offset)
        if chunks and size_bytes + len(batch) > max_bytes:
            break
        chunks.append(batch)
        size_bytes += len(batch)
    return _result(chunks, high_watermark)


def _batch(rows: list[tuple[int, bytes, bytes]], base_offset: int, last_offset: int) -> bytes:
    """One batch of ``rows`` at their own offsets, covering ``base_offset``..``last_offset``."""
    return encode_batch([NewRecord(value, key, timestamp_ms=NO_TIMESTAMP_MS) for _o, key, value in rows],
                        now_ms=NO_TIMESTAMP_MS, base_offset=base_offset,
                        offset_deltas=[offset - base_offset for offset, _k, _v in rows],
                        last_offset_delta=last_offset - base_offset)


def _result(chunks: list[bytes], high_watermark: int) -> ReadResult:
    return ReadResult(chunks, sum(len(chunk) for chunk in chunks), high_watermark=high_watermark,
                      log_start_offset=0, last_stable_offset=high_watermark, aborted_transactions=[])


async def list_internal_offset(node: ClusterNode, topic: TopicMeta, partition: int, timestamp: int) -> OffsetAnswer:
    """ListOffsets of one internal partition: earliest (and earliest-local) 0, latest the high
    watermark; nothing is tiered (-5) and no record has a timestamp to find."""
    _check_partition(topic, partition)
    if timestamp < LATEST_TIERED_TIMESTAMP:
        raise ValueError(f"ListOffsets timestamp {timestamp} is neither a time nor a defined code")
    if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
        return OffsetAnswer(0)
    if timestamp == LATEST_TIMESTAMP:
        return OffsetAnswer(await internal_next_offset(node.store, topic.name, partition))
    return NO_ANSWER  # -5 (nothing is tiered), a time or -3 (no record has a timestamp)
