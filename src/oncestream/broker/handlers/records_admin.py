"""DeleteRecords (key 21): move a partition's log start offset forward."""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode

from oncestream.broker.authorize import Op, Res, authorize
from oncestream.broker.state import BrokerState
from oncestream.errors import KafkaError, TopicAuthorizationFailedError
from oncestream.protocol.api_keys import DELETE_RECORDS
from oncestream.protocol.codec import RequestHeader, build, response_module


def handle_delete_records(state: BrokerState, header: RequestHeader, request) -> object:
    m = response_module(DELETE_RECORDS, header.api_version)
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
                low = state.logs.get(t.name, p.partition_index).delete_records(p.offset)
            except KafkaError as exc:
                error = exc.code
            parts_out.append(
                build(m.DeleteRecordsPartitionResult, partition_index=p.partition_index, low_watermark=low, error_code=error)
            )
        topics_out.append(build(m.DeleteRecordsTopicResult, name=t.name, partitions=tuple(parts_out)))
    return build(m.DeleteRecordsResponse, throttle_time=datetime.timedelta(0), topics=tuple(topics_out))
