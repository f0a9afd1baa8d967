"""DescribeLogDirs (key 35), v1-v4 as Kafka 4 serves it: the broker's log directory with each
partition's local size and the volume's total and usable bytes, and, with tiered storage, the
remote store as one more log directory (broker/log_dirs.py, docs/tiered-storage.md).

Authorization as Kafka's KafkaApis.handleDescribeLogDirsRequest: DESCRIBE on the cluster, else
CLUSTER_AUTHORIZATION_FAILED in the top-level error code (v3+) and no log directory at all.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from oncestream.broker.authorize import Op, Res, authorize
from oncestream.broker.log_dirs import (
    LogDirDescription,
    describe_log_dirs,
    remote_log_dir,
    volume_bytes,
    wanted_partitions,
)
from oncestream.broker.state import BrokerState
from oncestream.errors import OnceStreamError
from oncestream.protocol.api_keys import DESCRIBE_LOG_DIRS
from oncestream.protocol.codec import RequestHeader, build
from oncestream.protocol.schemas import response_module

if TYPE_CHECKING:
    from oncestream.protocol.request_types import DescribeLogDirsRequest


def _log_dirs(state: BrokerState, request: DescribeLogDirsRequest) -> list[LogDirDescription]:
    logs = state.logs.logs()
    requested = None if request.topics is None else [(t.topic, t.partitions) for t in request.topics]
    wanted = wanted_partitions(requested, logs)
    root = str(state.logs.data_dir.resolve())
    tiered_topics = [name for name, info in state.logs.topics().items() if info.config.remote_storage_enable]
    return describe_log_dirs(wanted, root, {tp: logs[tp].size_bytes for tp in wanted}, volume_bytes(root),
                             remote_log_dir(state.remote, wanted, tiered_topics))


def _result(m: Any, entry: LogDirDescription, error: ErrorCode) -> Any:
    by_topic: dict[str, list[Any]] = {}
    for p in entry.partitions:
        by_topic.setdefault(p.topic, []).append(build(
            m.DescribeLogDirsPartition, partition_index=p.partition, partition_size=p.size_bytes,
            offset_lag=p.offset_lag, is_future_key=p.is_future))
    return build(
        m.DescribeLogDirsResult, error_code=error, log_dir=entry.path,
        topics=tuple(build(m.DescribeLogDirsTopic, name=name, partitions=tuple(parts))
                     for name, parts in by_topic.items()),
        total_bytes=entry.total_bytes, usable_bytes=entry.usable_bytes,  # v4+, ignorable before
    )


def handle(state: BrokerState, header: RequestHeader, request: DescribeLogDirsRequest) -> object:
    m = response_module(DESCRIBE_LOG_DIRS, header.api_version)
    error = ErrorCode.none
    results: tuple[Any, ...] = ()
    if not authorize(state, Op.DESCRIBE, Res.CLUSTER):
        error = ErrorCode.cluster_authorization_failed
    else:
        try:
            results = tuple(_result(m, entry, ErrorCode.none) for entry in _log_dirs(state, request))
        except OnceStreamError as exc:
            # Kafka answers a log directory it cannot read with KAFKA_STORAGE_ERROR in its entry.
            results = (build(m.DescribeLogDirsResult, error_code=exc.code, log_dir=str(state.logs.data_dir), topics=()),)
    return build(m.DescribeLogDirsResponse, throttle_time=datetime.timedelta(0),
                 error_code=error,  # v3+, ignorable before (v1-v2 clients see no log directory)
                 results=results)
