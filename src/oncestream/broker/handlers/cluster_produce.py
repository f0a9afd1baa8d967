"""Produce (key 0) in cluster mode: through the diskless appender, answered after the commit.

Any broker accepts Produce for any partition of any topic (the leader Metadata names is a hint
to spread load). Each partition's data is checked here (acks, authorization, the topic and
partition in the catalog, exactly one record batch as Produce v3+ requires), then handed to
``DisklessAppender`` (cluster/diskless/append_pipeline.py), which buffers
it with every other request of this broker, uploads one object, commits the batches' offsets in
one PostgreSQL transaction (idempotent sequences and producer epochs checked there) and only then
answers. An upload or commit that fails is an error to the producer, never an acknowledgement.

A transactional batch carries the request's transactional id to the commit, which verifies it
against the transaction coordinator's stored state inside the same PostgreSQL transaction
(KIP-890 part 1, cluster/diskless/commit.py): accepted only if its partition is in the
producer's ongoing transaction with the same producer id and epoch. ``min.insync.replicas`` does not
apply: a committed batch is in the object store, which is the replica set.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import uuid
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from oncestream.broker.authorize import Op, Res, authorize
from oncestream.broker.cluster_coordinators import TRANSACTION_KEY_TYPE
from oncestream.broker.cluster_node import ClusterNode, TopicMeta
from oncestream.broker.produce_pipelining import current_produce_turn
from oncestream.broker.state import BrokerState
from oncestream.cluster.diskless.append_pipeline import PartitionAppend
from oncestream.cluster.diskless.produce_object import TxnWrite
from oncestream.errors import CoordinatorLoadInProgressError, NotCoordinatorError, OnceStreamError
from oncestream.log.batch_validation import split_produce_data
from oncestream.protocol.api_keys import ADD_PARTITIONS_TO_TXN, PRODUCE
from oncestream.protocol.codec import RequestHeader, build
from oncestream.protocol.record_batch import BatchHeader, iter_batches
from oncestream.protocol.schemas import response_module
from oncestream.topic_partition import TopicPartition

if TYPE_CHECKING:
    from oncestream.protocol.request_types import ProduceRequest

log = logging.getLogger("oncestream.broker")

_VALID_ACKS = (0, 1, -1)


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
            if txn_id is not None and header.api_version >= 12:
                added = await implicit_add(state, node, txn_id, topic.name, part.index, part.records)
                if added != ErrorCode.none:
                    answer["error_code"] = added
                    continue
            try:
                config = await node.log_config(state.log_config, topic.name)
            except OnceStreamError as exc:
                answer["error_code"], answer["error_message"] = exc.code, str(exc)
                continue
            txn = None if txn_id is None else TxnWrite(txn_id, topic.name, state.transactions.num_partitions)
            appends.append(PartitionAppend(info.topic_id, part.index, part.records, config, txn))
            waiting.append((topic.name, info.topic_id, part.index, len(part.records), answer))
        answers.append((topic.name, parts))
    if appends:
        # A pipelined request buffers its data only after every earlier request of its connection
        # did (broker/produce_pipelining.py): the awaits above may end in any order, and an
        # idempotent producer's batches must reach the commit in the order it sent them.
        turn = current_produce_turn()
        if turn is not None:
            await turn.wait()
        try:
            submitted = node.appender.submit(appends)
        finally:
            if turn is not None:
                turn.entered()
        outcomes = await asyncio.gather(*submitted)
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


# Kafka answers a produce whose implicit add met a coordinator that moved or loads with
# NOT_ENOUGH_REPLICAS: retriable for the producer, which must not rediscover a coordinator here.
_COORDINATOR_MOVING = (ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress,
                       ErrorCode.coordinator_not_available)


async def implicit_add(state: BrokerState, node: ClusterNode, transactional_id: str, topic: str, partition: int,
                       records: bytes) -> ErrorCode:
    """KIP-890 part 2 (Produce v12+, transaction version 2): the broker adds the partition to the
    producer's transaction itself, at the batch's producer id and epoch: through its own
    coordinator when it owns the id's partition, else with AddPartitionsToTxn (v4, not
    verify-only) to the owner. The commit then verifies the batch against the stored transaction
    (cluster/diskless/commit.py), so the add is never taken on trust."""
    batch = next((h for h, _ in iter_batches(records, verify_crc=False) if h.is_transactional), None)
    if batch is None:
        return ErrorCode.none
    tp = TopicPartition(topic, partition)
    txn = state.transactions
    local = txn.coordinator_error(transactional_id)
    if local is None:
        try:
            added = await txn.call_async(transactional_id, lambda coordinator, now: coordinator.add_partitions(
                transactional_id, batch.producer_id, batch.producer_epoch, (tp,), now, transaction_version=2))
        except (NotCoordinatorError, CoordinatorLoadInProgressError):
            return ErrorCode.not_enough_replicas
        error = ErrorCode.coordinator_not_available if added is None else added.error
    elif local == ErrorCode.not_coordinator:
        error = await _add_at_owner(node, transactional_id, batch.producer_id, batch.producer_epoch, tp)
    else:
        error = local
    return ErrorCode.not_enough_replicas if error in _COORDINATOR_MOVING else error


async def _add_at_owner(node: ClusterNode, transactional_id: str, producer_id: int, producer_epoch: int,
                        tp: TopicPartition) -> ErrorCode:
    owner = None if node.coordinators is None else node.coordinators.coordinator_node(
        TRANSACTION_KEY_TYPE, transactional_id)
    address = next((b for b in await node.live_brokers() if b.node_id == owner), None)
    if address is None or node.peers is None or owner == node.node_id:
        return ErrorCode.coordinator_not_available

    def make(m: Any) -> Any:
        return build(m.AddPartitionsToTxnRequest, transactions=(build(
            m.AddPartitionsToTxnTransaction, transactional_id=transactional_id, producer_id=producer_id,
            producer_epoch=producer_epoch, verify_only=False,
            topics=(build(m.AddPartitionsToTxnTopic, name=tp.topic, partitions=(tp.partition,)),)),))

    try:
        response = await node.peers.call(address, ADD_PARTITIONS_TO_TXN, 4, make)
    except (OSError, TimeoutError, asyncio.IncompleteReadError, OnceStreamError) as exc:
        log.warning("AddPartitionsToTxn for %r at node %s failed: %s", transactional_id, owner, exc)
        return ErrorCode.coordinator_not_available
    if response.error_code != ErrorCode.none:
        return ErrorCode(response.error_code)
    codes = [p.partition_error_code for t in response.results_by_transaction for r in t.topic_results
             for p in r.results_by_partition]
    return ErrorCode(codes[0]) if codes else ErrorCode.unknown_server_error


def _check_batches(header: RequestHeader, transactional_id: str | None,
                   records: bytes) -> tuple[ErrorCode, str | None] | None:
    """Exactly one record batch (Produce v3+), transactional only with a transactional id (as the
    single broker); None when it may be appended (its CRC, sizes and timestamps are checked by
    the appender's validation, its transaction by the commit)."""
    split: list[tuple[BatchHeader, memoryview]] = []
    try:
        split_produce_data(records, split)
    except OnceStreamError as exc:
        return exc.code, str(exc)
    headers = [batch_header for batch_header, _ in split]
    if transactional_id is None and any(batch_header.is_transactional for batch_header in headers):
        return ErrorCode.invalid_txn_state, "a transactional batch in a Produce request without a transactional id"
    if len(headers) != 1:
        return ErrorCode.invalid_record, (
            f"Produce requests with version {header.api_version} must contain exactly one record batch per "
            f"partition; got {len(headers)}")
    return None
