"""Fetch (key 1): sessionless fetch of many partitions with long poll (max_wait_ms, min_bytes).

Fetch sessions (KIP-227) are not kept: every response carries session id 0, which tells clients
to send full fetch requests, as the protocol allows. A request naming a session we never created
gets FETCH_SESSION_ID_NOT_FOUND.
"""

from __future__ import annotations

import asyncio
from kio.schema.errors import ErrorCode

from oncestream.broker.state import BrokerState
from oncestream.errors import KafkaError
from oncestream.protocol.codec import RequestHeader
from oncestream.protocol.fetch_response import PartitionFetchResult, encode_fetch_response

READ_COMMITTED = 1


async def handle(state: BrokerState, header: RequestHeader, request) -> list:
    """Answer with pre-framed buffers (see protocol/fetch_response.py for why)."""
    if request.session_id != 0:
        return encode_fetch_response(
            header.api_version,
            header.correlation_id,
            (),
            error_code=ErrorCode.fetch_session_id_not_found,
        )
    max_wait_ms = max(0, int(request.max_wait.total_seconds() * 1000))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait_ms / 1000
    wanted = [(t.topic, p.partition) for t in request.topics for p in t.partitions]
    while True:
        topics_out, total_bytes, any_error = _read_once(state, request)
        remaining_s = deadline - loop.time()
        if total_bytes >= request.min_bytes or any_error or remaining_s <= 0 or not wanted:
            return encode_fetch_response(header.api_version, header.correlation_id, topics_out)
        waiter = state.notifier.waiter(wanted)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), remaining_s)
        except asyncio.TimeoutError:
            pass
        finally:
            state.notifier.discard(waiter, wanted)


def _read_once(state: BrokerState, request) -> tuple[list, int, bool]:
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    budget = request.max_bytes if request.max_bytes > 0 else 2**31 - 1
    total = 0
    any_error = False
    topics_out = []
    for t in request.topics:
        parts_out = []
        for p in t.partitions:
            result = PartitionFetchResult(
                partition_index=p.partition,
                error_code=ErrorCode.none,
                high_watermark=-1,
                last_stable_offset=-1,
                log_start_offset=-1,
                aborted_transactions=[] if read_committed else None,
            )
            try:
                plog = state.logs.get(t.topic, p.partition)
                upper = plog.last_stable_offset if read_committed else plog.high_watermark
                read = plog.read(
                    p.fetch_offset,
                    max(min(p.partition_max_bytes, budget - total), 0),
                    upper_offset=upper,
                    min_one=(total == 0),
                    with_aborted=read_committed,
                )
            except KafkaError as exc:
                result.error_code = exc.code
                any_error = True
            else:
                result.chunks = read.chunks
                result.size_bytes = read.size_bytes
                total += read.size_bytes
                result.high_watermark = read.high_watermark
                result.last_stable_offset = read.last_stable_offset
                result.log_start_offset = read.log_start_offset
                if read_committed:
                    result.aborted_transactions = list(read.aborted_transactions or ())
            parts_out.append(result)
        topics_out.append((t.topic, parts_out))
    return topics_out, total, any_error
