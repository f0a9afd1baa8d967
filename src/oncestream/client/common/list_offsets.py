"""ListOffsets (earliest = -2, latest = -1, or a timestamp) for many partitions, grouped by
leader, with metadata refresh and retry on leadership errors. Used by the consumer (offset
reset, watermarks, offsets_for_times) and the admin client.

Tiered storage's two specs need newer versions, as Kafka's ListOffsetsRequest.Builder asks:
EARLIEST_LOCAL (-4, KIP-405: the first offset still on the broker's disk) v8+, LATEST_TIERED
(-5, KIP-1005: the last offset copied to the remote store, -1 if none) v9+. A broker without them
answers UNSUPPORTED_VERSION for the partitions of that request, as Kafka's admin client reports.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from oncestream.client.common.cluster import PARTITION_ATTEMPTS, RETRY_AFTER_METADATA, Cluster
from oncestream.client.common.errors import BrokerResponseError, ConnectionLostError, RequestTimedOutError
from oncestream.client.common.network import UnsupportedApiError
from oncestream.protocol.api_keys import LIST_OFFSETS
from oncestream.protocol.codec import build

EARLIEST = -2
LATEST = -1
EARLIEST_LOCAL = -4  # KIP-405, ListOffsets v8+
LATEST_TIERED = -5  # KIP-1005, ListOffsets v9+
_MAX_PLAIN_VERSION = 6
_MAX_TIERED_VERSION = 9  # v10 only adds a timeout field


def _version_range(timestamps: Iterable[int]) -> tuple[int, int]:
    """(min, max) ListOffsets version for these specs."""
    specs = set(timestamps)
    if LATEST_TIERED in specs:
        return 9, _MAX_TIERED_VERSION
    if EARLIEST_LOCAL in specs:
        return 8, _MAX_TIERED_VERSION
    return 1, _MAX_PLAIN_VERSION


async def list_offsets(
    cluster: Cluster,
    timestamps: dict[tuple[str, int], int],
    *,
    read_committed: bool,
    retry_backoff_s: float,
    attempts: int = PARTITION_ATTEMPTS,
) -> dict[tuple[str, int], tuple[int, int, int]]:
    """(offset, timestamp, error code) per partition. The client's partition retry rule: an
    unknown leader or an error of ``RETRY_AFTER_METADATA`` is asked again after the backoff and a
    metadata refresh, up to ``attempts`` times (then LEADER_NOT_AVAILABLE)."""
    pending = dict(timestamps)
    result: dict[tuple[str, int], tuple[int, int, int]] = {}
    for attempt in range(attempts):
        if not pending:
            break
        if attempt:
            await asyncio.sleep(retry_backoff_s)
        if any(cluster.leader_for(t, p) < 0 for t, p in pending):
            try:
                await cluster.refresh({t for t, _ in pending})
            except (ConnectionLostError, RequestTimedOutError, BrokerResponseError):
                continue
        by_node: dict[int, dict[tuple[str, int], int]] = {}
        for tp, ts in pending.items():
            node = cluster.leader_for(*tp)
            if node >= 0:
                by_node.setdefault(node, {})[tp] = ts
        answers = await asyncio.gather(
            *(_ask(cluster, node, tps, read_committed) for node, tps in by_node.items()),
            return_exceptions=True,
        )
        for answer in answers:
            if isinstance(answer, BaseException):
                if not isinstance(answer, (ConnectionLostError, RequestTimedOutError, BrokerResponseError)):
                    raise answer
                continue
            for tp, (offset, ts, code) in answer.items():
                if code in RETRY_AFTER_METADATA:
                    cluster.forget_leader(*tp)
                    continue
                result[tp] = (offset, ts, code)
                pending.pop(tp, None)
        if any(True for _ in pending):
            try:
                await cluster.refresh({t for t, _ in pending})
            except (ConnectionLostError, RequestTimedOutError, BrokerResponseError):
                pass
    for tp in pending:
        result[tp] = (-1, -1, int(ErrorCode.leader_not_available))
    return result


async def _ask(cluster: Cluster, node: int, tps: dict[tuple[str, int], int],
               read_committed: bool) -> dict[tuple[str, int], tuple[int, int, int]]:
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for (topic, partition), ts in tps.items():
        by_topic.setdefault(topic, []).append((partition, ts))

    def make(m: Any, version: int) -> Any:
        return build(
            m.ListOffsetsRequest,
            replica_id=-1,
            isolation_level=1 if read_committed else 0,
            topics=tuple(
                build(m.ListOffsetsTopic, name=topic,
                      partitions=tuple(build(m.ListOffsetsPartition, partition_index=p, timestamp=ts,
                                             current_leader_epoch=-1)
                                       for p, ts in parts))
                for topic, parts in by_topic.items()
            ),
        )

    min_version, max_version = _version_range(tps.values())
    try:
        response = await cluster.send(node, LIST_OFFSETS, make, min_version=min_version, max_version=max_version)
    except UnsupportedApiError:
        if min_version == 1:
            raise
        return {tp: (-1, -1, int(ErrorCode.unsupported_version)) for tp in tps}
    out: dict[tuple[str, int], tuple[int, int, int]] = {}
    for topic in response.topics:
        for p in topic.partitions:
            out[(topic.name, p.partition_index)] = (p.offset, getattr(p, "timestamp", -1), int(p.error_code))
    return out
