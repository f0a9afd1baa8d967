"""One request to one partition's leader, with the client's partition retry rule: a raw Fetch
(records handed out as views of the received frame, no copy) and a Produce of one prepared batch.

For callers that read or write a partition on their own schedule instead of through the
consumer's fetcher or the producer's accumulator (the Spark connector's tasks read one offset
range start to end). The retry rule is the one every client kind follows (``Cluster.leader``,
``RETRY_AFTER_METADATA``): an unknown leader, a partition error that means stale metadata, or a
lost connection is tried again after ``retry_backoff_s`` with fresh metadata, up to
``attempts`` times; then ``BrokerResponseError``.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from oncestream.client.common.cluster import PARTITION_ATTEMPTS, RETRY_AFTER_METADATA, Cluster
from oncestream.client.common.errors import BrokerResponseError, ConnectionLostError, RequestTimedOutError
from oncestream.protocol.api_keys import FETCH, PRODUCE
from oncestream.protocol.codec import build
from oncestream.protocol.fetch_response_view import MAX_VERSION as FETCH_VIEW_MAX_VERSION
from oncestream.protocol.fetch_response_view import (
    MIN_VERSION as FETCH_VIEW_MIN_VERSION,
)
from oncestream.protocol.fetch_response_view import (
    FetchResponseView,
    MalformedFetchResponseError,
    PartitionView,
    parse_fetch_response,
)

TopicPartition = tuple[str, int]
T = TypeVar("T")


@dataclass(frozen=True)
class FetchResult:
    """One partition's slice of a Fetch response.

    ``records`` is a read-only view of the buffer the response was received into (no copy; the
    view keeps that buffer, the whole response's, alive as long as it is held)."""

    error: ErrorCode
    records: memoryview
    aborted: tuple[tuple[int, int], ...]  # (producer id, first offset), read_committed only
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int


def error_code(code: int) -> ErrorCode:
    """The ErrorCode of a wire code; a code this client does not know is UNKNOWN_SERVER_ERROR, as
    Kafka's own client reads it (Errors.forCode)."""
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.unknown_server_error


async def fetch_raw(cluster: Cluster, tp: TopicPartition, offset: int, *, max_bytes: int, read_committed: bool,
                    max_wait_ms: int, partition_max_bytes: int, min_bytes: int, retry_backoff_s: float,
                    attempts: int = PARTITION_ATTEMPTS) -> FetchResult:
    """Fetch from one partition at ``offset`` (sessionless, v4..v12: topics named, not by id).

    The response is not decoded by kio: ``fetch_response_view`` reads it where it was received,
    so the records stay a view of the frame. A partition error other than the retriable ones
    (OFFSET_OUT_OF_RANGE, ...) is returned in ``FetchResult.error`` for the caller to handle."""
    version_sent = [0]

    def make(m: Any, version: int) -> Any:
        version_sent[0] = version
        return build(
            m.FetchRequest, replica_id=-1, max_wait=datetime.timedelta(milliseconds=max_wait_ms),
            min_bytes=min_bytes, max_bytes=max_bytes, isolation_level=1 if read_committed else 0,
            session_id=0, session_epoch=-1,
            topics=(build(m.FetchTopic, topic=tp[0], partitions=(
                build(m.FetchPartition, partition=tp[1], current_leader_epoch=-1, fetch_offset=offset,
                      last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=partition_max_bytes),)),),
            forgotten_topics_data=(), rack_id="",
        )

    def decode(frame: bytes | memoryview, pos: int) -> FetchResponseView:
        return parse_fetch_response(version_sent[0], frame, pos)

    async def once(node: int) -> FetchResult:
        response = await cluster.send(node, FETCH, make, min_version=FETCH_VIEW_MIN_VERSION,
                                      max_version=FETCH_VIEW_MAX_VERSION, decoder=decode)
        if response.error_code:
            raise BrokerResponseError(response.error_code, f"Fetch: {error_code(response.error_code).name}")
        part = _only_partition(response, tp)
        if part.error_code in RETRY_AFTER_METADATA:
            raise _StaleMetadata(part.error_code)
        return FetchResult(
            error=error_code(part.error_code),
            records=part.records if part.records is not None else memoryview(b""),
            aborted=part.aborted_transactions or (),
            high_watermark=part.high_watermark,
            last_stable_offset=part.last_stable_offset,
            log_start_offset=part.log_start_offset,
        )

    return await _on_leader(cluster, tp, "Fetch", once, retry_backoff_s=retry_backoff_s, attempts=attempts)


def _only_partition(response: FetchResponseView, tp: TopicPartition) -> PartitionView:
    """The one partition a single-partition Fetch asked for; any other answer is malformed."""
    if len(response.topics) != 1 or len(response.topics[0].partitions) != 1:
        raise MalformedFetchResponseError(
            f"Fetch of {tp[0]}[{tp[1]}] answered with {sum(len(t.partitions) for t in response.topics)} partitions")
    topic = response.topics[0]
    part = topic.partitions[0]
    if (topic.topic, part.partition_index) != tp:
        raise MalformedFetchResponseError(
            f"Fetch of {tp[0]}[{tp[1]}] answered for {topic.topic}[{part.partition_index}]")
    return part


async def produce_batch(cluster: Cluster, tp: TopicPartition, batch: bytes, *, timeout_ms: int,
                        retry_backoff_s: float, attempts: int = PARTITION_ATTEMPTS) -> int:
    """Append one encoded, non-idempotent record batch with acks=all; returns its base offset.

    For small control records only: a retry after a lost answer may append the batch twice, so
    the caller's records must be harmless to repeat (the producer is the client for data)."""
    def make(m: Any, version: int) -> Any:
        return build(m.ProduceRequest, transactional_id=None, acks=-1,
                     timeout=datetime.timedelta(milliseconds=timeout_ms),
                     topic_data=(build(m.TopicProduceData, name=tp[0], partition_data=(
                         build(m.PartitionProduceData, index=tp[1], records=batch),)),))

    async def once(node: int) -> int:
        response = await cluster.send(node, PRODUCE, make, min_version=3)
        (topic,) = response.responses
        (part,) = topic.partition_responses
        if part.error_code in RETRY_AFTER_METADATA:
            raise _StaleMetadata(part.error_code)
        if part.error_code != ErrorCode.none:
            raise BrokerResponseError(int(part.error_code),
                                      f"Produce {tp[0]}[{tp[1]}]: {error_code(part.error_code).name}")
        return int(part.base_offset)

    return await _on_leader(cluster, tp, "Produce", once, retry_backoff_s=retry_backoff_s, attempts=attempts)


class _StaleMetadata(Exception):
    """A partition error of ``RETRY_AFTER_METADATA``: try again at the leader fresh metadata names."""

    def __init__(self, code: int) -> None:
        super().__init__(error_code(code).name)


async def _on_leader(cluster: Cluster, tp: TopicPartition, what: str, once: Callable[[int], Awaitable[T]], *,
                     retry_backoff_s: float, attempts: int) -> T:
    """``once(leader node)`` under the partition retry rule: a lost connection, a timeout or a
    stale-metadata error forgets the leader and tries again after the backoff."""
    last = "no attempt"
    for attempt in range(attempts):
        if attempt:
            await asyncio.sleep(retry_backoff_s)
        node = await cluster.leader(*tp, retry_backoff_s=retry_backoff_s, attempts=attempts)
        try:
            return await once(node)
        except (ConnectionLostError, RequestTimedOutError, _StaleMetadata) as exc:
            last = str(exc)
        cluster.forget_leader(*tp)
    raise BrokerResponseError(int(ErrorCode.request_timed_out),
                              f"{what} {tp[0]}[{tp[1]}] did not succeed in {attempts} attempts ({last})")
