"""Produce (key 0): append batches verbatim; acks 0, 1 and -1 (with optional group-commit fsync).

A topic whose compression.type names a codec other than the batch's gets the batch recompressed
first, on ``BrokerState.codec_executor`` (``log/recompression.py``): the only await before the
checks and appends (besides a pipelined request's turn), which then run without interruption on
the loop as before. Once a connection's Produce waited for an fsync round, its next ones are
pipelined (broker/produce_pipelining.py): they append in the order they arrived, and a request's
fsync wait lets the next one append meanwhile.
"""

from __future__ import annotations

import asyncio
import datetime
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from oncestream.broker.authorize import Op, Res, authorize
from oncestream.broker.connection_context import current_session
from oncestream.broker.handlers import cluster_produce
from oncestream.broker.produce_pipelining import current_produce_turn
from oncestream.broker.state import BrokerState
from oncestream.coordinator.txn import TopicPartition
from oncestream.errors import OnceStreamError, StorageError
from oncestream.log.batch_validation import split_produce_data
from oncestream.log.config import LogConfig
from oncestream.log.partition_log import PartitionLog
from oncestream.log.recompression import recompressed_records
from oncestream.protocol.api_keys import PRODUCE
from oncestream.protocol.codec import RequestHeader, build
from oncestream.protocol.record_batch import BatchHeader
from oncestream.protocol.schemas import response_module

if TYPE_CHECKING:
    from oncestream.protocol.request_types import ProduceRequest

_VALID_ACKS = (0, 1, -1)
_IN_SYNC_REPLICAS = 1  # a single node: every partition's ISR is this broker


async def handle(state: BrokerState, header: RequestHeader, request: ProduceRequest) -> object | None:
    if state.cluster is not None:  # cluster mode: the diskless appender (handlers/cluster_produce.py)
        return await cluster_produce.handle(state, state.cluster, header, request)
    m = response_module(PRODUCE, header.api_version)
    rewritten = await _recompress_ahead(state, request) if request.acks in _VALID_ACKS else {}
    # A pipelined request (broker/produce_pipelining.py) appends only after every earlier request
    # of its connection did: the recompression above may end in any order, and an idempotent
    # producer's batches must reach the log in the order it sent them. The appends below run
    # without an await; the next request enters once they are done, while this one may still
    # wait for its fsync round.
    turn = current_produce_turn()
    if turn is not None:
        await turn.wait()
    try:
        answers, to_flush = _append_all(state, header, request, rewritten)
    finally:
        if turn is not None:
            turn.entered()
    current_session().produce_waited_for_disk = bool(to_flush)  # the server's cue to pipeline
    if to_flush:
        await _flush_all(state, to_flush)
    if request.acks == 0:
        return None
    topics_out = [
        build(
            m.TopicProduceResponse,
            name=name,
            partition_responses=tuple(
                build(m.PartitionProduceResponse, record_errors=(), **answer) for answer in parts
            ),
        )
        for name, parts in answers
    ]
    response: object = build(m.ProduceResponse, responses=tuple(topics_out), throttle_time=datetime.timedelta(0))
    return response


_Answers = list[tuple[str, list[dict[str, Any]]]]


def _append_all(state: BrokerState, header: RequestHeader, request: ProduceRequest,
                rewritten: dict[tuple[str, int], bytes]) -> tuple[_Answers, list[tuple[PartitionLog, dict[str, Any]]]]:
    """Check and append every partition's batch (no await: one request's appends are never
    interleaved with another's); returns the partition answers by topic and the appended
    partitions whose acks=all answer waits for an fsync round."""
    now_ms = state.now_ms()
    acks = request.acks
    # Partition answers are built after the flush: a failed fsync turns an appended partition's
    # answer into KAFKA_STORAGE_ERROR (its batch is not durable, so it must not be acknowledged).
    answers: _Answers = []
    to_flush: list[tuple[PartitionLog, dict[str, Any]]] = []
    # Kafka: WRITE on the transactional id (every partition refused without it), WRITE on each
    # topic; an idempotent producer needs nothing more (KIP-679).
    txn_id = request.transactional_id
    txn_denied = txn_id is not None and not authorize(state, Op.WRITE, Res.TRANSACTIONAL_ID, txn_id)
    for topic in request.topic_data:
        parts: list[dict[str, Any]] = []
        topic_denied = not authorize(state, Op.WRITE, Res.TOPIC, topic.name)
        for part in topic.partition_data:
            answer: dict[str, Any] = {"index": part.index, "error_code": ErrorCode.none, "error_message": None,
                      "base_offset": -1, "log_start_offset": -1, "log_append_time": None}
            split: list[tuple[BatchHeader, memoryview]] = []  # _check_batches' walk, handed to the log
            if acks not in _VALID_ACKS:
                answer["error_code"] = ErrorCode.invalid_required_acks
            elif txn_denied:
                answer["error_code"] = ErrorCode.transactional_id_authorization_failed
            elif topic_denied:
                answer["error_code"] = ErrorCode.topic_authorization_failed
            elif part.records is None:
                answer["error_code"], answer["error_message"] = ErrorCode.invalid_record, "no records"
            elif (refusal := _check_batches(state, header, request.transactional_id, topic.name, part.index,
                                            records := rewritten.get((topic.name, part.index), part.records),
                                            split)) is not None:
                answer["error_code"], answer["error_message"] = refusal
            else:
                try:
                    plog = state.logs.get(topic.name, part.index)
                    if acks == -1 and plog.config.min_insync_replicas > _IN_SYNC_REPLICAS:
                        # Kafka's Partition.appendRecordsToLeader: fewer in-sync replicas than
                        # min.insync.replicas refuses acks=all writes (acks 0 and 1 go through).
                        raise OnceStreamError(
                            f"the in-sync replicas ({_IN_SYNC_REPLICAS}) are fewer than "
                            f"min.insync.replicas={plog.config.min_insync_replicas}", code=ErrorCode.not_enough_replicas)
                    result = plog.append(records, now_ms, split=split)  # the batches walked once
                except OnceStreamError as exc:
                    answer["error_code"], answer["error_message"] = exc.code, str(exc)
                else:
                    answer["base_offset"] = result.base_offset
                    answer["log_start_offset"] = result.log_start_offset
                    if result.log_append_time_ms >= 0:
                        answer["log_append_time"] = datetime.datetime.fromtimestamp(
                            result.log_append_time_ms / 1000, tz=datetime.UTC
                        )
                    if not result.duplicate:
                        state.notifier.notify(topic.name, part.index)
                        state.metrics.produced(topic.name, len(part.records), result.last_offset - result.base_offset + 1)
                    if acks == -1 and plog.needs_flush_on_ack():
                        # A retried duplicate waits too: its first attempt's round may still be running.
                        to_flush.append((plog, answer))
                    elif plog.wants_flush():  # a roll or flush.messages=N: off the loop, not awaited
                        state.flusher.flush_in_background(plog)
            parts.append(answer)
        answers.append((topic.name, parts))
    return answers, to_flush


async def _recompress_ahead(state: BrokerState, request: ProduceRequest) -> dict[tuple[str, int], bytes]:
    """The records of every partition whose topic recompresses them, rewritten on the codec
    threads (all partitions at once); partitions left out are appended as sent (the log still
    rewrites anything that needs it, e.g. after a config change meanwhile)."""
    jobs: list[tuple[tuple[str, int], LogConfig, bytes]] = []
    for topic in request.topic_data:
        if not authorize(state, Op.WRITE, Res.TOPIC, topic.name):
            continue  # refused below anyway: spend no CPU on it
        for part in topic.partition_data:
            try:
                config = state.logs.get(topic.name, part.index).config
            except OnceStreamError:
                continue
            if part.records is not None and config.target_compression is not None:
                jobs.append(((topic.name, part.index), config, part.records))
    if not jobs:
        return {}
    loop = asyncio.get_running_loop()
    outputs = await asyncio.gather(*(
        loop.run_in_executor(state.codec_executor, recompressed_records, config, records) for _, config, records in jobs
    ))
    return {key: out for (key, _, _), out in zip(jobs, outputs) if out is not None}


def _check_batches(
    state: BrokerState, header: RequestHeader, transactional_id: str | None, topic: str, partition: int,
    records: bytes, split: list[tuple[BatchHeader, memoryview]],
) -> tuple[ErrorCode, str | None] | None:
    """Refuse what must not reach the log; None when the partition's data may be appended.

    Every batch header is checked against the transaction coordinator, then Kafka's
    ProduceRequest rule applies: from v3 on (all we serve) a partition's data is exactly one
    record batch. Checking only the first header let a plain batch carry a transactional one
    past the coordinator and open a transaction that nobody would ever close, freezing the LSO
    for every read_committed reader. The CRC is checked later, by the log, on the (header, batch)
    pairs this walk leaves in ``split`` (one walk per batch: the log does not split them again)."""
    try:
        split_produce_data(records, split)
    except OnceStreamError as exc:
        return exc.code, str(exc)
    headers = [batch_header for batch_header, _ in split]
    if len(headers) == 1 or header.api_version < 12:
        # v12 adds the partition to the transaction as a side effect: only for a valid request.
        for batch_header in headers:
            error = _check_transactional(state, header, transactional_id, topic, partition, batch_header)
            if error != ErrorCode.none:
                return error, None
    if len(headers) != 1:
        return ErrorCode.invalid_record, (
            f"Produce requests with version {header.api_version} must contain exactly one record batch per "
            f"partition; got {len(headers)}"
        )
    return None


def _check_transactional(
    state: BrokerState, header: RequestHeader, transactional_id: str | None, topic: str, partition: int,
    batch: BatchHeader,
) -> ErrorCode:
    """KIP-890. Part 1 (Produce < v12): a transactional batch is only accepted for a partition that
    the ongoing transaction of its producer has added; anything else would leave a hanging
    transaction. Part 2 (Produce v12+, transaction version 2): the broker adds the partition
    itself, under the producer's current epoch, which every commit and abort bumps, so a
    delayed batch of an earlier transaction can never join a later one."""
    if not batch.is_transactional:
        return ErrorCode.none
    if transactional_id is None:
        return ErrorCode.invalid_txn_state
    tp = TopicPartition(topic, partition)
    txn = state.transactions
    if header.api_version >= 12:
        added = txn.call(
            lambda now: txn.coordinator.add_partitions(
                transactional_id, batch.producer_id, batch.producer_epoch, (tp,), now, transaction_version=2
            )
        )
        return ErrorCode.coordinator_not_available if added is None else added.error
    verify = txn.coordinator.verify_partitions(transactional_id, batch.producer_id, batch.producer_epoch, (tp,))
    return verify.errors.get(tp, ErrorCode.none)


async def _flush_all(state: BrokerState, waiting: list[tuple[PartitionLog, dict[str, Any]]]) -> None:
    """Wait for the group-commit fsync of every appended partition; a partition whose fsync
    failed is answered KAFKA_STORAGE_ERROR, never NONE (its log is offline from then on)."""
    futures = [state.flusher.flush_soon(plog) for plog, _ in waiting]
    outcomes = await asyncio.gather(*futures, return_exceptions=True)
    for (_, answer), outcome in zip(waiting, outcomes):
        if isinstance(outcome, BaseException):
            if not isinstance(outcome, OnceStreamError):
                raise outcome
            answer["error_code"], answer["error_message"] = StorageError.code, f"not durable: {outcome}"
            answer["base_offset"], answer["log_append_time"] = -1, None
