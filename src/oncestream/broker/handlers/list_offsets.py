"""ListOffsets (key 2): earliest (-2), latest (-1, honouring the isolation level), max timestamp
(-3, KIP-734), by timestamp."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from oncestream.broker.authorize import Op, Res, authorize
from oncestream.broker.state import BrokerState
from oncestream.errors import OnceStreamError, TopicAuthorizationFailedError
from oncestream.protocol.api_keys import LIST_OFFSETS
from oncestream.protocol.codec import RequestHeader, build
from oncestream.protocol.schemas import response_module

if TYPE_CHECKING:
    from oncestream.protocol.request_types import ListOffsetsRequest

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3  # KIP-734, ListOffsets v7+
READ_COMMITTED = 1


def handle(state: BrokerState, header: RequestHeader, request: ListOffsetsRequest) -> object:
    m = response_module(LIST_OFFSETS, header.api_version)
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
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
                elif p.timestamp < 0:
                    error = ErrorCode.unsupported_version
                else:
                    found = plog.offset_for_timestamp(p.timestamp)
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
