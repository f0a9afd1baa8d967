"""Fetch (key 1) in cluster mode: coordinates from PostgreSQL, bytes from the object store.

The rules of the single broker's Fetch hold (handlers/fetch.py: sessionless, KIP-74 first batch
whole, the broker's ``fetch.max.bytes`` and the fetch quota cap the response, ``min_bytes`` /
``max_wait_ms`` long poll, read_committed up to the LSO with the aborted transactions). Each
partition is read by ``DisklessReader`` (cluster/diskless/read_path.py), which answers the same
``ReadResult`` as a local log. Any broker serves any partition.

The long poll waits for a commit of one of the fetched partitions: ``AppendWakeups`` (LISTEN
``oncestream_appends``, with a polling fallback) wakes it for commits of any broker, this broker's
notifier for its own; either way the partitions are read again (a wake-up is never trusted as
data).
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from oncestream.broker.authorize import Op, Res, authorize
from oncestream.broker.cluster_internal_reads import read_internal
from oncestream.broker.cluster_node import ClusterNode
from oncestream.broker.fetch_results import fill_fetch_result
from oncestream.broker.quotas.enforcement import count_fetch_when_sent, fetch_quota_max_bytes
from oncestream.broker.state import BrokerState
from oncestream.cluster.diskless.read_path import PartitionRead
from oncestream.errors import OnceStreamError, TopicAuthorizationFailedError
from oncestream.log.read_path import ReadResult
from oncestream.protocol.codec import RequestHeader
from oncestream.protocol.fetch_response import PartitionFetchResult, encode_fetch_response

if TYPE_CHECKING:
    from oncestream.protocol.request_types import FetchRequest

READ_COMMITTED = 1


async def handle(state: BrokerState, node: ClusterNode, header: RequestHeader, request: FetchRequest,
                 deadline_s: float) -> list[Any]:
    """Answer a full fetch (the session checks are the caller's) by ``deadline_s`` (loop time)."""
    loop = asyncio.get_running_loop()
    denied: set[str] = {t.topic for t in request.topics if not authorize(state, Op.READ, Res.TOPIC, t.topic)}
    wanted = [(t.topic, p.partition) for t in request.topics for p in t.partitions if t.topic not in denied]
    quota_bytes = fetch_quota_max_bytes()
    min_bytes = request.min_bytes if quota_bytes is None else min(request.min_bytes, quota_bytes)
    while True:
        topics_out, total_bytes, any_error, seen = await _read_once(state, node, request, denied)
        remaining_s = deadline_s - loop.time()
        if total_bytes >= min_bytes or any_error or remaining_s <= 0 or not wanted:
            count_fetch_when_sent(functools.partial(state.metrics.fetched, topics_out))
            return encode_fetch_response(header.api_version, header.correlation_id, topics_out)
        await node.wait_for_appends(seen, remaining_s)


async def _read_once(state: BrokerState, node: ClusterNode, request: FetchRequest,
                     denied: set[str]) -> tuple[list[Any], int, bool, dict[tuple[uuid.UUID, int], int]]:
    """Read every partition in request order within the response's byte budget, all from one
    PostgreSQL snapshot (``DisklessReader.read_many``); also the high watermark each partition read
    had (what a long poll waits to see move)."""
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    cap = state.config.fetch_max_bytes
    quota_bytes = fetch_quota_max_bytes()
    if quota_bytes is not None:
        cap = min(cap, quota_bytes)
    budget = min(request.max_bytes, cap) if request.max_bytes > 0 else cap
    found = await node.lookup([t.topic for t in request.topics if t.topic not in denied])
    internal = await node.internal_topics_among(t.topic for t in request.topics if t.topic not in denied)
    any_error = False
    topics_out = []
    reads: list[PartitionRead] = []
    readers: list[PartitionFetchResult] = []  # the result each read fills, in the same order
    total = 0
    for t in request.topics:
        parts_out = []
        for p in t.partitions:
            result = PartitionFetchResult(
                partition_index=p.partition, error_code=ErrorCode.none, high_watermark=-1,
                last_stable_offset=-1, log_start_offset=-1,
                aborted_transactions=[] if read_committed else None)
            try:
                if t.topic in denied:
                    raise TopicAuthorizationFailedError(t.topic)
                if t.topic in internal:  # rows in PostgreSQL, not diskless batches
                    rows = await read_internal(node, internal[t.topic], p.partition, p.fetch_offset,
                                               min(p.partition_max_bytes, max(budget - total, 1)))
                    total += fill_fetch_result(result, rows, read_committed)
                else:
                    info = found.require(t.topic, p.partition)
                    reads.append(PartitionRead(info.topic_id, p.partition, p.fetch_offset, p.partition_max_bytes))
                    readers.append(result)
            except OnceStreamError as exc:
                result.error_code = exc.code
                any_error = True
            parts_out.append(result)
        topics_out.append((t.topic, parts_out))
    budget = max(budget - total, 1)
    seen: dict[tuple[uuid.UUID, int], int] = {}
    if not reads:
        return topics_out, total, any_error, seen
    outcomes: list[ReadResult | OnceStreamError]
    try:
        outcomes = await node.reader.read_many(reads, response_max_bytes=budget,
                                               isolation_level=READ_COMMITTED if read_committed else 0)
    except OnceStreamError as exc:  # PostgreSQL: every partition alike
        outcomes = [exc] * len(reads)
    for read, result, outcome in zip(reads, readers, outcomes, strict=True):
        if isinstance(outcome, OnceStreamError):
            result.error_code = outcome.code
            any_error = True
        else:
            total += fill_fetch_result(result, outcome, read_committed)
            seen[(read.topic_id, read.partition)] = outcome.high_watermark
    return topics_out, total, any_error, seen

