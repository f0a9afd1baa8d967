"""ListOffsets (key 2): earliest (-2), latest (-1, honouring the isolation level), max timestamp
(-3, KIP-734), earliest local (-4, v8+) and latest tiered (-5, v9+) (KIP-1005), by timestamp.

Tiered storage: -2 is the global log start (remote segments included), -4 the first offset on
local disk, -5 the last offset in the object store (-1 if nothing is tiered). A timestamp lookup
on a partition with remote segments searches them first, on a remote reader thread, as Kafka's
RemoteLogManager.findOffsetByTimestamp does (their max timestamps, then a segment's time index
and one batch), and the local segments when no remote record is that recent. v10 (KIP-1075)
bounds that wait with the request's timeout: past it the partition answers REQUEST_TIMED_OUT;
earlier versions wait up to ``_REMOTE_LOOKUP_TIMEOUT_MS``. A failed remote lookup answers
UNKNOWN_SERVER_ERROR for the partition (the store's message, naming the key, is logged).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from oncestream.broker.authorize import Op, Res, authorize
from oncestream.broker.cluster_internal_reads import list_internal_offset
from oncestream.broker.cluster_node import ClusterNode
from oncestream.broker.state import BrokerState
from oncestream.cluster.diskless.offsets_query import NO_ANSWER, list_offset
from oncestream.errors import OnceStreamError, TopicAuthorizationFailedError
from oncestream.log.partition_log import PartitionLog
from oncestream.protocol.api_keys import LIST_OFFSETS
from oncestream.protocol.codec import RequestHeader, build
from oncestream.protocol.schemas import response_module

if TYPE_CHECKING:
    from oncestream.protocol.request_types import ListOffsetsRequest

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3  # KIP-734, ListOffsets v7+
EARLIEST_LOCAL_TIMESTAMP = -4  # KIP-1005, v8+
LATEST_TIERED_TIMESTAMP = -5  # KIP-1005, v9+
READ_COMMITTED = 1
# Before v10 a request carries no timeout: a remote timestamp lookup waits this long at most.
_REMOTE_LOOKUP_TIMEOUT_MS = 30_000

log = logging.getLogger(__name__)


async def handle(state: BrokerState, header: RequestHeader, request: ListOffsetsRequest) -> object:
    m = response_module(LIST_OFFSETS, header.api_version)
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    if state.cluster is not None:
        return await _cluster_list_offsets(state, state.cluster, header, request, read_committed)
    timeout = getattr(request, "timeout", None)
    timeout_ms = int(timeout.total_seconds() * 1000) if timeout is not None else _REMOTE_LOOKUP_TIMEOUT_MS
    topics_out = []
    for t in request.topics:
        parts_out = []
        allowed = authorize(state, Op.DESCRIBE, Res.TOPIC, t.name)
        for p in t.partitions:
            error = ErrorCode.none
            offset = timestamp = -1
            try:
                if not allowed:
                    raise TopicAuthorizationFailedError(t.name)
                plog = state.logs.get(t.name, p.partition_index)
            except OnceStreamError as exc:
                error = exc.code
            else:
                if p.timestamp == EARLIEST_TIMESTAMP:
                    offset = plog.log_start_offset
                elif p.timestamp == LATEST_TIMESTAMP:
                    offset = plog.last_stable_offset if read_committed else plog.high_watermark
                elif p.timestamp == MAX_TIMESTAMP:
                    found = plog.offset_for_max_timestamp()
                    if found is not None:
                        offset, timestamp = found
                elif p.timestamp == EARLIEST_LOCAL_TIMESTAMP and header.api_version >= 8:
                    offset = plog.local_log_start_offset
                elif p.timestamp == LATEST_TIERED_TIMESTAMP and header.api_version >= 9:
                    reads = state.remote_reads
                    offset = reads.highest_tiered_offset(t.name, p.partition_index) if reads is not None else -1
                elif p.timestamp < 0:
                    error = ErrorCode.unsupported_version
                else:
                    try:
                        found = await _offset_for_timestamp(state, t.name, p.partition_index, plog, p.timestamp,
                                                            timeout_ms)
                    except OnceStreamError as exc:
                        error, found = exc.code, None
                    if found is not None:
                        offset, timestamp = found
                        upper = plog.last_stable_offset if read_committed else plog.high_watermark
                        if offset >= upper:
                            offset = timestamp = -1
            parts_out.append(
                build(
                    m.ListOffsetsPartitionResponse,
                    partition_index=p.partition_index,
                    error_code=error,
                    timestamp=timestamp,
                    offset=offset,
                    # LeaderEpoch is v4+ and not ignorable: earlier versions get the default.
                    leader_epoch=0 if error == ErrorCode.none and header.api_version >= 4 else -1,
                )
            )
        topics_out.append(build(m.ListOffsetsTopicResponse, name=t.name, partitions=tuple(parts_out)))
    return build(m.ListOffsetsResponse, throttle_time=datetime.timedelta(0), topics=tuple(topics_out))


async def _offset_for_timestamp(
    state: BrokerState, topic: str, partition: int, plog: PartitionLog, timestamp_ms: int, timeout_ms: int
) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record with timestamp >= ``timestamp_ms``: in the remote
    segments first (if any lie below the local log start), then locally."""
    reads = state.remote_reads
    start = plog.log_start_offset
    if reads is not None and start < plog.local_log_start_offset:
        future = asyncio.wrap_future(reads.submit_offset_for_timestamp(topic, partition, start, timestamp_ms))
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                found = await future
        except TimeoutError:
            raise OnceStreamError(f"{topic}-{partition}: remote timestamp lookup took over {timeout_ms} ms",
                                  code=ErrorCode.request_timed_out) from None
        except OnceStreamError as exc:
            log.error("%s-%d: remote timestamp lookup failed: %s", topic, partition, exc)
            raise
        if found is not None:
            return found
    return plog.offset_for_timestamp(timestamp_ms)


async def _cluster_list_offsets(state: BrokerState, node: ClusterNode, header: RequestHeader,
                                request: ListOffsetsRequest, read_committed: bool) -> object:
    """Cluster mode: each partition answered from PostgreSQL (and, for a time, one batch of the
    object store) by ``cluster/diskless/offsets_query.list_offset``; -4 is the log start and -5
    is -1 (a diskless partition is entirely in the object store, nothing is tiered)."""
    m = response_module(LIST_OFFSETS, header.api_version)
    found = await node.lookup([t.name for t in request.topics])
    internal = await node.internal_topics_among(t.name for t in request.topics)
    topics_out = []
    for t in request.topics:
        parts_out = []
        allowed = authorize(state, Op.DESCRIBE, Res.TOPIC, t.name)
        for p in t.partitions:
            error = ErrorCode.none
            answer = NO_ANSWER
            try:
                if not allowed:
                    raise TopicAuthorizationFailedError(t.name)
                info = internal.get(t.name) or found.require(t.name, p.partition_index)
                if (p.timestamp == EARLIEST_LOCAL_TIMESTAMP and header.api_version < 8) or (
                        p.timestamp == LATEST_TIERED_TIMESTAMP and header.api_version < 9):
                    error = ErrorCode.unsupported_version
                elif info.internal:  # rows in PostgreSQL (broker/cluster_internal_reads.py)
                    answer = await list_internal_offset(node, info, p.partition_index, p.timestamp)
                else:
                    answer = await list_offset(node.reader, info.topic_id, p.partition_index, p.timestamp,
                                               read_committed=read_committed)
            except ValueError:  # a negative code ListOffsets does not define
                error = ErrorCode.unsupported_version
            except OnceStreamError as exc:
                error = exc.code
            parts_out.append(build(
                m.ListOffsetsPartitionResponse, partition_index=p.partition_index, error_code=error,
                timestamp=answer.timestamp_ms if error == ErrorCode.none else -1,
                offset=answer.offset if error == ErrorCode.none else -1,
                leader_epoch=0 if error == ErrorCode.none and header.api_version >= 4 else -1))
        topics_out.append(build(m.ListOffsetsTopicResponse, name=t.name, partitions=tuple(parts_out)))
    return build(m.ListOffsetsResponse, throttle_time=datetime.timedelta(0), topics=tuple(topics_out))

