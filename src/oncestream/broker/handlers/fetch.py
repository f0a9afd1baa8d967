"""Fetch (key 1): sessionless fetch of many partitions with long poll (max_wait_ms, min_bytes).

Fetch sessions (KIP-227) are not kept: every response carries session id 0, which tells clients
to send full fetch requests, as the protocol allows. KIP-227's rules for the request's
(session id, epoch), as Apache Kafka's FetchManager applies them:

- epoch -1 (FINAL) or 0 (INITIAL) is a full fetch and is always answered. A nonzero session id
  in it names a session to close (with epoch -1, a client closing its session); we hold none,
  so there is nothing to close. Epoch 0 asks for a new session, and answering id 0 declines.
- any other epoch is an incremental fetch on an existing session; we never created one, so it
  gets FETCH_SESSION_ID_NOT_FOUND (Kafka answers the same for session id 0, which it never
  creates either).
- v4-v6 have no session fields: every such fetch is a sessionless full fetch.
"""

from __future__ import annotations

import asyncio
import functools
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from oncestream.async_wait import wait_done
from oncestream.broker.authorize import Op, Res, authorize
from oncestream.broker.fetch_results import fill_fetch_result
from oncestream.broker.handlers import cluster_fetch
from oncestream.broker.quotas.enforcement import count_fetch_when_sent, fetch_quota_max_bytes
from oncestream.broker.remote_fetch import RemotePartRead, complete_remote_reads, remote_part
from oncestream.broker.state import BrokerState
from oncestream.errors import OffsetMovedToTieredStorageError, OnceStreamError, TopicAuthorizationFailedError
from oncestream.protocol.codec import RequestHeader
from oncestream.protocol.fetch_response import PartitionFetchResult, encode_fetch_response

if TYPE_CHECKING:
    from oncestream.protocol.request_types import FetchRequest

READ_COMMITTED = 1
FINAL_EPOCH, INITIAL_EPOCH = -1, 0


async def handle(state: BrokerState, header: RequestHeader, request: FetchRequest) -> list[Any]:
    """Answer with pre-framed buffers (see protocol/fetch_response.py for why)."""
    # v4-v6 requests carry no session fields (kio's request has no such attribute): full fetch.
    if getattr(request, "session_epoch", FINAL_EPOCH) not in (FINAL_EPOCH, INITIAL_EPOCH):
        return encode_fetch_response(
            header.api_version,
            header.correlation_id,
            (),
            error_code=ErrorCode.fetch_session_id_not_found,
        )
    max_wait_ms = max(0, int(request.max_wait.total_seconds() * 1000))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait_ms / 1000
    if state.cluster is not None:  # cluster mode: diskless reads (handlers/cluster_fetch.py)
        return await cluster_fetch.handle(state, state.cluster, header, request, deadline)
    # READ on each topic, decided once per request (Kafka's Fetch check).
    denied: set[str] = {t.topic for t in request.topics if not authorize(state, Op.READ, Res.TOPIC, t.topic)}
    wanted = [(t.topic, p.partition) for t in request.topics for p in t.partitions if t.topic not in denied]
    # Kafka: min_bytes never exceeds what the fetch quota lets one response hold.
    quota_bytes = fetch_quota_max_bytes()
    min_bytes = request.min_bytes if quota_bytes is None else min(request.min_bytes, quota_bytes)
    while True:
        topics_out, total_bytes, any_error, remote = _read_once(state, request, denied)
        if remote:
            # Partitions below the local log start: answered once their remote reads are done
            # (or remote.fetch.max.wait.ms passed), whatever min_bytes asks (Kafka's
            # DelayedRemoteFetch): waiting for appends cannot add to those partitions.
            await complete_remote_reads(state, remote)
            count_fetch_when_sent(functools.partial(state.metrics.fetched, topics_out))
            return encode_fetch_response(header.api_version, header.correlation_id, topics_out)
        remaining_s = deadline - loop.time()
        if total_bytes >= min_bytes or any_error or remaining_s <= 0 or not wanted:
            count_fetch_when_sent(functools.partial(state.metrics.fetched, topics_out))
            return encode_fetch_response(header.api_version, header.correlation_id, topics_out)
        waiter = state.notifier.waiter(wanted)
        try:
            # Not asyncio.wait_for: on 3.11 it can swallow the shutdown's cancellation (async_wait).
            await wait_done(waiter, remaining_s)
        finally:
            state.notifier.discard(waiter, wanted)


def _read_once(
    state: BrokerState, request: FetchRequest, denied: set[str]
) -> tuple[list[Any], int, bool, list[RemotePartRead]]:
    """Read every partition from the local log; those below the local log start come back as
    remote reads to run (their byte budget reserved in order, so the whole response stays within
    the fetch's budget plus one batch)."""
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    # The broker's fetch.max.bytes bounds every response, whatever the request asks for (Kafka's
    # rule); the first batch is still returned whole, so a consumer always makes progress.
    cap = state.config.fetch_max_bytes
    quota_bytes = fetch_quota_max_bytes()  # consumer_byte_rate: at most what its window holds (Kafka)
    if quota_bytes is not None:
        cap = min(cap, quota_bytes)
    budget = min(request.max_bytes, cap) if request.max_bytes > 0 else cap
    total = 0
    any_error = False
    topics_out = []
    remote: list[RemotePartRead] = []
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
                if t.topic in denied:
                    raise TopicAuthorizationFailedError(t.topic)
                plog = state.logs.get(t.topic, p.partition)
                upper = plog.last_stable_offset if read_committed else plog.high_watermark
                max_bytes = max(min(p.partition_max_bytes, budget - total), 0)
                read = plog.read(
                    p.fetch_offset,
                    max_bytes,
                    upper_offset=upper,
                    min_one=(total == 0),
                    with_aborted=read_committed,
                    zero_copy=True,  # file ranges: the server sendfiles them (broker/fetch_response_writer.py)
                )
            except OffsetMovedToTieredStorageError as moved:
                part = remote_part(state, t.topic, plog, moved, result, max_bytes=max_bytes, min_one=(total == 0),
                                   upper_offset=upper, read_committed=read_committed, partition=p.partition)
                if part is None:
                    any_error = True
                else:
                    remote.append(part)
                    total += max_bytes  # reserved for the remote read
            except OnceStreamError as exc:
                result.error_code = exc.code
                any_error = True
            else:
                total += fill_fetch_result(result, read, read_committed)
            parts_out.append(result)
        topics_out.append((t.topic, parts_out))
    return topics_out, total, any_error, remote
