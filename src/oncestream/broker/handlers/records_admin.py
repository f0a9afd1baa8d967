"""DeleteRecords (key 21): move a partition's log start offset forward.

Per partition, in the log's three steps (``log/log_start.py``): the log start moves on the loop,
its checkpoint is written and fsynced on the broker's disk threads while the loop serves other
clients, and the segments below it are deleted back on the loop once that write returned (the
synchronous order, so a crash leaves no log start behind deleted data); their files are unlinked
on the disk threads again before the answer.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from oncestream.broker.authorize import Op, Res, authorize
from oncestream.broker.cluster_node import ClusterNode, PartitionLookup
from oncestream.broker.state import BrokerState
from oncestream.errors import OnceStreamError, TopicAuthorizationFailedError, UnknownTopicOrPartitionError
from oncestream.log.log_start import LogStartMove
from oncestream.log.partition_log import PartitionLog
from oncestream.protocol.api_keys import DELETE_RECORDS
from oncestream.protocol.codec import RequestHeader, build
from oncestream.protocol.schemas import response_module

if TYPE_CHECKING:
    from oncestream.protocol.request_types import DeleteRecordsRequest

log = logging.getLogger(__name__)


async def _make_durable(state: BrokerState, partition_log: PartitionLog, move: LogStartMove) -> None:
    """Run ``move``'s checkpoint write on the disk threads. If the request is cancelled (its
    connection went away) the write still finishes, and the segments are deleted after it."""
    running = asyncio.get_running_loop().run_in_executor(state.disk_executor, move.run, state.disk_fsync)
    try:
        await asyncio.shield(running)
    except asyncio.CancelledError:
        running.add_done_callback(lambda _: _finish_later(state, partition_log, move, running))
        raise


def _finish_later(state: BrokerState, partition_log: PartitionLog, move: LogStartMove,
                  running: asyncio.Future[None]) -> None:
    if running.cancelled() or running.exception() is not None or partition_log.closed:
        return  # the segments stay below the log start until the next DeleteRecords or retention
    try:
        partition_log.finish_delete_records(move)
    except OnceStreamError as exc:
        log.warning("%s: deleting segments below the log start failed: %s", partition_log.directory, exc)
        return
    state.remove_deleted_files_in_background(partition_log)


async def handle_delete_records(state: BrokerState, header: RequestHeader, request: DeleteRecordsRequest) -> object:
    m = response_module(DELETE_RECORDS, header.api_version)
    delete: Callable[[str, int, int], Awaitable[int]]
    if state.cluster is not None:
        delete = functools.partial(_delete_in_cluster, state.cluster,
                                   await state.cluster.lookup([t.name for t in request.topics]))
    else:
        delete = functools.partial(_delete_local, state)
    topics_out = []
    for t in request.topics:
        parts_out = []
        allowed = authorize(state, Op.DELETE, Res.TOPIC, t.name)  # Kafka: DELETE on the topic
        for p in t.partitions:
            error = ErrorCode.none
            low = -1
            try:
                if not allowed:
                    raise TopicAuthorizationFailedError(t.name)
                low = await delete(t.name, p.partition_index, p.offset)
            except OnceStreamError as exc:
                error, low = exc.code, -1
            parts_out.append(
                build(m.DeleteRecordsPartitionResult, partition_index=p.partition_index, low_watermark=low, error_code=error)
            )
        topics_out.append(build(m.DeleteRecordsTopicResult, name=t.name, partitions=tuple(parts_out)))
    return build(m.DeleteRecordsResponse, throttle_time=datetime.timedelta(0), topics=tuple(topics_out))


async def _delete_local(state: BrokerState, topic: str, partition: int, offset: int) -> int:
    """The single broker: the log start moves on the loop, durable on the disk threads (module doc)."""
    partition_log = state.logs.get(topic, partition)
    move = partition_log.begin_delete_records(offset)
    if move is not None:
        await _make_durable(state, partition_log, move)
        if partition_log.closed:  # the topic was deleted meanwhile
            raise UnknownTopicOrPartitionError(f"{topic}-{partition} was deleted")
        partition_log.finish_delete_records(move)
        await state.remove_deleted_files(partition_log)
    return partition_log.log_start_offset


async def _delete_in_cluster(node: ClusterNode, found: PartitionLookup, topic: str, partition: int, offset: int) -> int:
    """Cluster mode: the log start moves in one PostgreSQL transaction per partition
    (cluster/diskless/log_start_moves.delete_records); batches below it are gone for every broker
    at once, their objects released to the garbage collector after the grace period."""
    info = found.require(topic, partition)
    return await node.delete_records(info.topic_id, partition, offset)
