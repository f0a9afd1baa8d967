"""Produce (key 0) in cluster mode: through the diskless appender, answered after the commit.

Any broker accepts Produce for any partition of any topic (the leader Metadata names is a hint
to spread load). Each partition's data is checked here (acks, authorization, the topic and
partition in the catalog, exactly one record batch as Produce v3+ requires, no transactional
batch), then handed to ``DisklessAppender`` (cluster/diskless/append_pipeline.py), which buffers
it with every other request of this broker, uploads one object, commits the batches' offsets in
one PostgreSQL transaction (idempotent sequences and producer epochs checked there) and only then
answers. An upload or commit that fails is an error to the producer, never an acknowledgement.

Transactional produce is refused with INVALID_REQUEST (and says why) until the transaction
coordinator runs on leases in PostgreSQL (docs/cluster.md). ``min.insync.replicas`` does not
apply: a committed batch is in the object store, which is the replica set.
"""

from __future__ import annotations

import datetime
import uuid
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from oncestream.broker.authorize import Op, Res, authorize
from oncestream.broker.cluster_node import ClusterNode, TopicMeta
from oncestream.broker.state import BrokerState
from oncestream.cluster.diskless.append_pipeline import PartitionAppend
from oncestream.errors import OnceStreamError
from oncestream.protocol.api_keys import PRODUCE
from oncestream.protocol.codec import RequestHeader, build
from oncestream.protocol.record_batch import iter_batches
from oncestream.protocol.schemas import response_module

if TYPE_CHECKING:
    from oncestream.protocol.request_types import ProduceRequest

_VALID_ACKS = (0, 1, -1)
NO_TRANSACTIONS = "transactions are not available in cluster mode yet (docs/cluster.md)"


async def handle(state: BrokerState, node: ClusterNode, header: RequestHeader, request: ProduceRequest) -> object | None:
    m = response_module(PRODUCE, header.api_version)
    acks = request.acks
    txn_id = request.transactional_id
    txn_denied = txn_id is not None and not authorize(state, Op.WRITE, Res.TRANSACTIONAL_ID, txn_id)
    answers: list[tuple[str, list[dict[str, Any]]]] = []
    appends: list[PartitionAppend] = []
    waiting: list[tuple[str, uuid.UUID, int, int, dict[str, Any]]] = []  # topic, id, partition, bytes, answer
    catalog_error: OnceStreamError | None = None
    topics: dict[str, TopicMeta] = {}
    try:
        topics = await node.topics([t.name for t in request.topic_data], fresh=False)
    except OnceStreamError as exc:  # PostgreSQL unreachable: every partition gets the same retriable error
        catalog_error = exc
    for topic in request.topic_data:
        parts: list[dict[str, Any]] = []
        topic_denied = not authorize(state, Op.WRITE, Res.TOPIC, topic.name)
        info = topics.get(topic.name)
        for part in topic.partition_data:
            answer: dict[str, Any] = {"index": part.index, "error_code": ErrorCode.none, "error_message": None,
                                      "base_offset": -1, "log_start_offset": -1, "log_append_time": None}
            parts.append(answer)
            refusal: tuple[ErrorCode, str | None] | None = None
            if acks not in _VALID_ACKS:
                refusal = ErrorCode.invalid_required_acks, None
            elif txn_denied:
                refusal = ErrorCode.transactional_id_authorization_failed, None
            elif topic_denied:
                refusal = ErrorCode.topic_authorization_failed, None
            elif catalog_error is not None:
                refusal = catalog_error.code, str(catalog_error)
            elif info is None or not 0 <= part.index < info.num_partitions:
                refusal = ErrorCode.unknown_topic_or_partition, f"no partition {topic.name}-{part.index}"
            elif part.records is None:
                refusal = ErrorCode.invalid_record, "no records"
            else:
                refusal = _check_batches(header, txn_id, part.records)
            if refusal is not None:
                answer["error_code"], answer["error_message"] = refusal
                continue
            if info is None or part.records is None:  # refused above; narrows the types
                continue
            try:
                config = await node.log_config(state.log_config, topic.name)
            except OnceStreamError as exc:
                answer["error_code"], answer["error_message"] = exc.code, str(exc)
                continue
            appends.append(PartitionAppend(info.topic_id, part.index, part.records, config))
            waiting.append((topic.name, info.topic_id, part.index, len(part.records), answer))
        answers.append((topic.name, parts))
    if appends:
        outcomes = await node.appender.append(appends)
        for (topic_name, topic_id, partition, size_bytes, answer), outcome in zip(waiting, outcomes, strict=True):
            if outcome.error != ErrorCode.none:
                answer["error_code"], answer["error_message"] = outcome.error, outcome.error_message
                continue
            answer["base_offset"] = outcome.base_offset
            answer["log_start_offset"] = outcome.log_start_offset
            if outcome.log_append_time_ms >= 0:
                answer["log_append_time"] = datetime.datetime.fromtimestamp(
                    outcome.log_append_time_ms / 1000, tz=datetime.UTC)
            if not outcome.duplicate:
                node.appended(topic_id, partition)  # fetchers waiting on this broker, at once
                state.metrics.produced(topic_name, size_bytes, outcome.last_offset - outcome.base_offset + 1)
    if acks == 0:
        return None
    topics_out = [
        build(m.TopicProduceResponse, name=name, partition_responses=tuple(
            build(m.PartitionProduceResponse, record_errors=(), **answer) for answer in parts))
        for name, parts in answers
    ]
    response: object = build(m.ProduceResponse, responses=tuple(topics_out), throttle_time=datetime.timedelta(0))
    return response


def _check_batches(header: RequestHeader, transactional_id: str | None,
                   records: bytes) -> tuple[ErrorCode, str | None] | None:
    """Exactly one record batch (Produce v3+), not transactional; None when it may be appended
    (its CRC, sizes and timestamps are checked by the appender's validation)."""
    if transactional_id is not None:
        return ErrorCode.invalid_request, NO_TRANSACTIONS
    try:
        headers = [batch_header for batch_header, _ in iter_batches(records, verify_crc=False)]
    except OnceStreamError as exc:
        return exc.code, str(exc)
    if any(batch_header.is_transactional for batch_header in headers):
        return ErrorCode.invalid_request, NO_TRANSACTIONS
    if len(headers) != 1:
        return ErrorCode.invalid_record, (
            f"Produce requests with version {header.api_version} must contain exactly one record batch per "
            f"partition; got {len(headers)}")
    return None
