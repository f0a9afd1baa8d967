"""Transaction APIs: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
TxnOffsetCommit, WriteTxnMarkers, DescribeTransactions, ListTransactions, DescribeProducers.

The rules live in coordinator/txn (driven by broker/txn_service.py); these handlers translate.
KIP-588 version rules: clients too old to know PRODUCER_FENCED get INVALID_PRODUCER_EPOCH.

Every coordinator call goes through ``TxnService.call_async(transactional_id, fn)``: the one
coordinator of the single broker (the synchronous call, unchanged), or in cluster mode the
coordinator of the id's ``__transaction_state`` partition, NOT_COORDINATOR when another broker owns
it and COORDINATOR_LOAD_IN_PROGRESS while it loads (docs/cluster-coordinators.md).
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from oncestream.broker.authorize import Op, Res, authorize, authorize_any
from oncestream.broker.cluster_txn_verify import forwarded_marker_is_genuine, stored_verification
from oncestream.broker.state import BrokerState
from oncestream.broker.txn_service import fenced_for_version
from oncestream.cluster.pg.errors import MetadataStoreError
from oncestream.coordinator.group.messages import PartitionOffsetCommit
from oncestream.coordinator.txn import Outcome, TransactionCoordinator
from oncestream.coordinator.txn.messages import ListTransactionsResponse
from oncestream.errors import (
    CoordinatorLoadInProgressError,
    NotCoordinatorError,
    OnceStreamError,
    StorageError,
    TopicAuthorizationFailedError,
)
from oncestream.log.producer_state import ProducerStateInfo
from oncestream.protocol import api_keys as k
from oncestream.protocol.codec import RequestHeader, build
from oncestream.protocol.schemas import response_module
from oncestream.topic_partition import TopicPartition

if TYPE_CHECKING:
    from oncestream.protocol.request_types import (
        AddOffsetsToTxnRequest,
        AddPartitionsToTxnRequest,
        DescribeProducersRequest,
        DescribeTransactionsRequest,
        EndTxnRequest,
        InitProducerIdRequest,
        ListTransactionsRequest,
        TxnOffsetCommitRequest,
        WriteTxnMarkersRequest,
    )

log = logging.getLogger(__name__)

_ZERO = datetime.timedelta(0)
OFFSETS_TOPIC = "__consumer_offsets"


def _ms(delta: datetime.timedelta) -> int:
    return int(delta.total_seconds() * 1000)


async def _call(state: BrokerState, transactional_id: str,
                fn: Callable[[TransactionCoordinator, int], Outcome[Any]]) -> tuple[Any, ErrorCode]:
    """One coordinator call for ``transactional_id``: (response, NONE), or (None, the retriable
    error: COORDINATOR_NOT_AVAILABLE when its record could not be persisted, NOT_COORDINATOR /
    COORDINATOR_LOAD_IN_PROGRESS in cluster mode)."""
    try:
        resp = await state.transactions.call_async(transactional_id, fn)
    except (NotCoordinatorError, CoordinatorLoadInProgressError) as exc:
        return None, exc.code
    return resp, ErrorCode.none if resp is not None else ErrorCode.coordinator_not_available


def _txn_id_allowed(state: BrokerState, transactional_id: str) -> bool:
    """Kafka: every transactional request needs WRITE on its transactional id."""
    return authorize(state, Op.WRITE, Res.TRANSACTIONAL_ID, transactional_id)


def _init_producer_id_refusal(state: BrokerState, request: InitProducerIdRequest) -> ErrorCode | None:
    """Kafka's InitProducerId ACLs: an idempotent producer needs IDEMPOTENT_WRITE on the cluster
    or WRITE on some topic (KIP-679); a transactional one WRITE on its id, and with 2PC also
    TWO_PHASE_COMMIT (KIP-939)."""
    txn_id = request.transactional_id
    if txn_id is None:
        if authorize(state, Op.IDEMPOTENT_WRITE, Res.CLUSTER) or authorize_any(state, Op.WRITE, Res.TOPIC):
            return None
        return ErrorCode.cluster_authorization_failed
    if not _txn_id_allowed(state, txn_id):
        return ErrorCode.transactional_id_authorization_failed
    if getattr(request, "enable2_pc", False) and not authorize(state, Op.TWO_PHASE_COMMIT, Res.TRANSACTIONAL_ID, txn_id):
        return ErrorCode.transactional_id_authorization_failed
    return None


async def handle_init_producer_id(state: BrokerState, header: RequestHeader, request: InitProducerIdRequest) -> object:
    m = response_module(k.INIT_PRODUCER_ID, header.api_version)
    if (refusal := _init_producer_id_refusal(state, request)) is not None:
        return build(m.InitProducerIdResponse, throttle_time=_ZERO, error_code=refusal, producer_id=-1,
                     producer_epoch=-1)
    # A new producer id may be needed: wait (off the loop) until one is durable. Nothing runs
    # between this and the synchronous coordinator call below, so the id is still there.
    try:
        await state.producer_ids.ready()
    except OnceStreamError:  # the disk, or in cluster mode PostgreSQL, failed: retriable
        return build(m.InitProducerIdResponse, throttle_time=_ZERO, error_code=ErrorCode.coordinator_not_available,
                     producer_id=-1, producer_epoch=-1)
    if request.transactional_id is None:
        # Idempotent producers always get a fresh id (also when bumping after a sequence error,
        # KIP-360): a new id gives a clean sequence space.
        return build(
            m.InitProducerIdResponse,
            throttle_time=_ZERO,
            error_code=ErrorCode.none,
            producer_id=state.producer_ids.next_id(),
            producer_epoch=0,
            ongoing_txn_producer_id=-1,
            ongoing_txn_producer_epoch=-1,
        )
    resp, error = await _call(
        state, request.transactional_id,
        lambda coordinator, now: coordinator.init_producer_id(
            request.transactional_id,
            _ms(request.transaction_timeout),
            now,
            producer_id=getattr(request, "producer_id", -1),
            producer_epoch=getattr(request, "producer_epoch", -1),
            enable_2pc=getattr(request, "enable2_pc", False),
            keep_prepared_txn=getattr(request, "keep_prepared_txn", False),
        )
    )
    if resp is None:
        return build(m.InitProducerIdResponse, throttle_time=_ZERO, error_code=error, producer_id=-1,
                     producer_epoch=-1)
    return build(
        m.InitProducerIdResponse,
        throttle_time=_ZERO,
        error_code=fenced_for_version(resp.error, header.api_version, 4),
        producer_id=resp.producer_id,
        producer_epoch=resp.producer_epoch,
        ongoing_txn_producer_id=resp.ongoing_txn_producer_id,
        ongoing_txn_producer_epoch=resp.ongoing_txn_producer_epoch,
    )


def _topic_results(
    m: Any, partitions: list[tuple[str, int]], error_of: Callable[[str, int], ErrorCode]
) -> tuple[Any, ...]:
    by_topic: dict[str, list[int]] = {}
    for topic, p in partitions:
        by_topic.setdefault(topic, []).append(p)
    return tuple(
        build(
            m.AddPartitionsToTxnTopicResult,
            name=topic,
            results_by_partition=tuple(
                build(m.AddPartitionsToTxnPartitionResult, partition_index=p, partition_error_code=error_of(topic, p))
                for p in parts
            ),
        )
        for topic, parts in by_topic.items()
    )


async def _add_or_verify(
    state: BrokerState, txn_id: str, pid: int, epoch: int, partitions: Any, verify_only: bool, version: int
) -> Any:
    """Returns an error_of(topic, partition) function. v4+ comes from a broker that authorized its
    client (ClusterAction checked by the caller): as in Kafka, only v0-v3 need WRITE on the
    transactional id and the topics."""
    from_client = version < 4
    if from_client and not _txn_id_allowed(state, txn_id):
        return lambda t, p: ErrorCode.transactional_id_authorization_failed
    denied = {t for t, _ in partitions if from_client and not authorize(state, Op.WRITE, Res.TOPIC, t)}
    if denied:
        # Kafka: nothing is added; the refused topics say why, the rest were not attempted.
        return lambda t, p: ErrorCode.topic_authorization_failed if t in denied else ErrorCode.operation_not_attempted
    txn = state.transactions
    if state.cluster is not None:
        try:
            catalog = await state.cluster.topics(sorted({t for t, _ in partitions}))
        except OnceStreamError as exc:
            code = exc.code
            return lambda t, p: code
        sizes = {name: meta.num_partitions for name, meta in catalog.items()}
    else:
        sizes = {name: info.num_partitions for name, info in state.logs.topics().items()}
    unknown = {(t, p) for t, p in partitions if t not in sizes or not 0 <= p < sizes[t]}
    if unknown:
        # Kafka fails the whole request: unknown partitions get UNKNOWN_TOPIC_OR_PARTITION and
        # the rest OPERATION_NOT_ATTEMPTED.
        return lambda t, p: ErrorCode.unknown_topic_or_partition if (t, p) in unknown else ErrorCode.operation_not_attempted
    tps = tuple(TopicPartition(t, p) for t, p in partitions)
    if verify_only:
        not_served = txn.coordinator_error(txn_id)
        if not_served is not None:
            return lambda t, p: not_served
        errors = txn.coordinator_for(txn_id).verify_partitions(txn_id, pid, epoch, tps).errors
        return lambda t, p: errors.get(TopicPartition(t, p), ErrorCode.none)
    # Cluster mode: a v4+ add comes from another broker doing a KIP-890 part 2 implicit add for a
    # transactional Produce v12+ (handlers/cluster_produce.py): transaction version 2.
    txn_version = 2 if state.cluster is not None and version >= 4 else 1
    resp, error = await _call(state, txn_id, lambda coordinator, now: coordinator.add_partitions(
        txn_id, pid, epoch, tps, now, transaction_version=txn_version))
    if resp is not None:
        error = fenced_for_version(resp.error, version, 2)
    return lambda t, p: error


async def handle_add_partitions_to_txn(state: BrokerState, header: RequestHeader, request: AddPartitionsToTxnRequest) -> object:
    m = response_module(k.ADD_PARTITIONS_TO_TXN, header.api_version)
    if hasattr(request, "transactions"):  # v4+: batched, possibly verify-only (KIP-890 part 1)
        if not authorize(state, Op.CLUSTER_ACTION, Res.CLUSTER):  # Kafka: v4+ is broker-to-broker
            return build(m.AddPartitionsToTxnResponse, throttle_time=_ZERO,
                         error_code=ErrorCode.cluster_authorization_failed, results_by_transaction=())
        results = []
        for t in request.transactions:
            parts = [(topic.name, p) for topic in t.topics for p in topic.partitions]
            error_of = await _add_or_verify(
                state, t.transactional_id, t.producer_id, t.producer_epoch, parts, t.verify_only, header.api_version
            )
            results.append(
                build(m.AddPartitionsToTxnResult, transactional_id=t.transactional_id,
                      topic_results=_topic_results(m, parts, error_of))
            )
        return build(m.AddPartitionsToTxnResponse, throttle_time=_ZERO, error_code=ErrorCode.none,
                     results_by_transaction=tuple(results))
    parts = [(topic.name, p) for topic in request.v3_and_below_topics for p in topic.partitions]
    error_of = await _add_or_verify(
        state,
        request.v3_and_below_transactional_id,
        request.v3_and_below_producer_id,
        request.v3_and_below_producer_epoch,
        parts,
        False,
        header.api_version,
    )
    return build(m.AddPartitionsToTxnResponse, throttle_time=_ZERO,
                 results_by_topic_v3_and_below=_topic_results(m, parts, error_of))


async def handle_add_offsets_to_txn(state: BrokerState, header: RequestHeader, request: AddOffsetsToTxnRequest) -> object:
    m = response_module(k.ADD_OFFSETS_TO_TXN, header.api_version)
    if not _txn_id_allowed(state, request.transactional_id):
        return build(m.AddOffsetsToTxnResponse, throttle_time=_ZERO,
                     error_code=ErrorCode.transactional_id_authorization_failed)
    if not authorize(state, Op.READ, Res.GROUP, request.group_id):
        return build(m.AddOffsetsToTxnResponse, throttle_time=_ZERO, error_code=ErrorCode.group_authorization_failed)
    resp, error = await _call(state, request.transactional_id, lambda coordinator, now: coordinator.add_offsets(
        request.transactional_id, request.producer_id, request.producer_epoch, request.group_id, now))
    if resp is not None:
        error = fenced_for_version(resp.error, header.api_version, 2)
    return build(m.AddOffsetsToTxnResponse, throttle_time=_ZERO, error_code=error)


async def handle_end_txn(state: BrokerState, header: RequestHeader, request: EndTxnRequest) -> object:
    m = response_module(k.END_TXN, header.api_version)
    if not _txn_id_allowed(state, request.transactional_id):
        return build(m.EndTxnResponse, throttle_time=_ZERO, error_code=ErrorCode.transactional_id_authorization_failed,
                     producer_id=-1, producer_epoch=-1)
    try:
        await state.producer_ids.ready()  # an exhausted epoch takes a new producer id (KIP-890)
    except StorageError:
        return build(m.EndTxnResponse, throttle_time=_ZERO, error_code=ErrorCode.coordinator_not_available,
                     producer_id=-1, producer_epoch=-1)
    resp, error = await _call(
        state, request.transactional_id,
        lambda coordinator, now: coordinator.end_txn(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            request.committed,
            now,
            # EndTxn v5+ is transaction version 2 (KIP-890 part 2): the epoch is bumped on every
            # commit and abort and returned to the client.
            transaction_version=2 if header.api_version >= 5 else 1,
        )
    )
    if resp is None:
        return build(m.EndTxnResponse, throttle_time=_ZERO, error_code=error, producer_id=-1, producer_epoch=-1)
    return build(
        m.EndTxnResponse,
        throttle_time=_ZERO,
        error_code=fenced_for_version(resp.error, header.api_version, 2),
        producer_id=resp.producer_id,
        producer_epoch=resp.producer_epoch,
    )


async def handle_txn_offset_commit(state: BrokerState, header: RequestHeader, request: TxnOffsetCommitRequest) -> object:
    m = response_module(k.TXN_OFFSET_COMMIT, header.api_version)
    # Kafka: WRITE on the transactional id, READ on the group (each refusing every partition),
    # then READ on each topic. Checked before v5 adds the offsets partition to the transaction.
    refused: dict[str, ErrorCode] = {}
    if not _txn_id_allowed(state, request.transactional_id):
        refused = {t.name: ErrorCode.transactional_id_authorization_failed for t in request.topics}
    elif not authorize(state, Op.READ, Res.GROUP, request.group_id):
        refused = {t.name: ErrorCode.group_authorization_failed for t in request.topics}
    # Topics without READ are refused one by one; the others are still committed, as in Kafka.
    unreadable = {t.name for t in request.topics if not authorize(state, Op.READ, Res.TOPIC, t.name)}
    if not refused and unreadable and all(t.name in unreadable for t in request.topics):
        refused = dict.fromkeys(unreadable, ErrorCode.topic_authorization_failed)  # nothing to commit
    if refused:
        return build(m.TxnOffsetCommitResponse, throttle_time=_ZERO, topics=tuple(
            build(m.TxnOffsetCommitResponseTopic, name=t.name, partitions=tuple(
                build(m.TxnOffsetCommitResponsePartition, partition_index=p.partition_index,
                      error_code=refused[t.name])
                for p in t.partitions))
            for t in request.topics))
    txn = state.transactions
    offsets_tp = TopicPartition("__consumer_offsets", state.groups.coordinator.partition_for(request.group_id))
    group_error = state.groups.coordinator_error(request.group_id)
    if group_error is not None:  # cluster mode: another broker coordinates the group, or it loads
        verify_error = group_error
    elif header.api_version >= 5:
        # Transaction version 2: the broker adds the offsets partition itself (KIP-890 part 2).
        added, verify_error = await _call(
            state, request.transactional_id, lambda coordinator, now: coordinator.add_offsets(
                request.transactional_id, request.producer_id, request.producer_epoch, request.group_id, now,
                transaction_version=2))
        if added is not None:
            verify_error = added.error
    else:
        # The producer must have added the group's offsets partition to its transaction first.
        not_served = txn.coordinator_error(request.transactional_id)
        if not_served == ErrorCode.not_coordinator and state.cluster is not None:
            # Cluster mode: the transaction coordinator is another broker; what it made durable
            # (AddOffsetsToTxn answered only after its record committed) is read from PostgreSQL.
            verify_error = (await stored_verification(
                state.cluster.store, request.transactional_id, request.producer_id, request.producer_epoch,
                (offsets_tp,), txn.num_partitions))[offsets_tp]
        elif not_served is not None:
            verify_error = not_served
        else:
            verify = txn.coordinator_for(request.transactional_id).verify_partitions(
                request.transactional_id, request.producer_id, request.producer_epoch, (offsets_tp,))
            verify_error = verify.errors.get(offsets_tp, ErrorCode.none)
    offsets = {
        TopicPartition(t.name, p.partition_index): PartitionOffsetCommit(
            offset=p.committed_offset,
            leader_epoch=getattr(p, "committed_leader_epoch", -1),
            metadata=p.committed_metadata or "",
        )
        for t in request.topics
        if t.name not in unreadable
        for p in t.partitions
    }
    errors: dict[TopicPartition, ErrorCode] = {
        TopicPartition(t.name, p.partition_index): ErrorCode.topic_authorization_failed
        for t in request.topics if t.name in unreadable for p in t.partitions
    }
    if verify_error != ErrorCode.none:
        errors.update((tp, fenced_for_version(verify_error, header.api_version, 3)) for tp in offsets)
    else:
        member = {}
        # v3+ (all three fields together), KIP-447: the group's generation fences zombies.
        if hasattr(request, "member_id") and hasattr(request, "generation_id") and hasattr(request, "group_instance_id"):
            member = {
                "member_id": request.member_id,
                "generation_id": request.generation_id,
                "group_instance_id": request.group_instance_id,
            }
        unknown = {tp for tp in offsets if not state.partition_exists(tp.topic, tp.partition)}
        known = {tp: offset for tp, offset in offsets.items() if tp not in unknown}
        result = await txn.stage_offsets_async(request.group_id, request.producer_id, known, **member)
        errors.update(result.partitions)
        errors.update((tp, ErrorCode.unknown_topic_or_partition) for tp in unknown)
    return build(
        m.TxnOffsetCommitResponse,
        throttle_time=_ZERO,
        topics=tuple(
            build(
                m.TxnOffsetCommitResponseTopic,
                name=t.name,
                partitions=tuple(
                    build(
                        m.TxnOffsetCommitResponsePartition,
                        partition_index=p.partition_index,
                        error_code=errors.get(TopicPartition(t.name, p.partition_index), ErrorCode.none),
                    )
                    for p in t.partitions
                ),
            )
            for t in request.topics
        ),
    )


async def handle_write_txn_markers(state: BrokerState, header: RequestHeader, request: WriteTxnMarkersRequest) -> object:
    """WriteTxnMarkers is how Kafka's transaction coordinator reaches the partition leaders;
    Kafka authorizes it as ClusterAction, which only brokers hold.

    Single broker: our coordinator writes its markers to the local logs directly, never over the
    wire, so a request arriving on a connection comes from a client and gets
    CLUSTER_AUTHORIZATION_FAILED for every partition, changing nothing. Accepting it let any client
    abort another's open transaction: the victim's commit then reported success while its records
    were gone (a forged ABORT) or exposed records its owner would abort (a forged COMMIT). A hanging
    transaction is ended through its coordinator instead (``oncestream transactions abort`` fences
    its transactional id).

    Cluster mode: the transaction coordinator writes data partitions' markers itself (in
    PostgreSQL, fenced by its lease) and forwards only the markers of ``__consumer_offsets``
    partitions another broker's group coordinator owns (broker/cluster_markers.py). Those are
    accepted with ClusterAction, for partitions this broker coordinates (NOT_COORDINATOR
    otherwise), and only when PostgreSQL holds a transaction of that producer being completed
    that way at that coordinator epoch (``forwarded_marker_is_genuine``): the staged offsets of
    the producer are committed or dropped. Every other partition is refused as above."""
    m = response_module(k.WRITE_TXN_MARKERS, header.api_version)
    denied = ErrorCode.cluster_authorization_failed
    cluster = state.cluster
    allowed = cluster is not None and authorize(state, Op.CLUSTER_ACTION, Res.CLUSTER)
    markers_out = []
    for marker in request.markers:
        genuine: bool | None = None
        topics_out = []
        for t in marker.topics:
            parts_out = []
            for p in t.partition_indexes:
                error = denied
                if allowed and cluster is not None and t.name == OFFSETS_TOPIC:
                    error = state.groups.coordinator_error_for_partition(p) or ErrorCode.none
                    if error == ErrorCode.none:
                        if genuine is None:
                            genuine = await forwarded_marker_is_genuine(
                                cluster.store, marker.producer_id, marker.transaction_result,
                                marker.coordinator_epoch)
                        if not genuine:
                            error = ErrorCode.invalid_txn_state
                        elif not await state.groups.complete_txn_offsets_async(
                                p, marker.producer_id, marker.transaction_result):
                            error = ErrorCode.coordinator_load_in_progress  # retried by the coordinator
                parts_out.append(build(m.WritableTxnMarkerPartitionResult, partition_index=p, error_code=error))
            topics_out.append(build(m.WritableTxnMarkerTopicResult, name=t.name, partitions=tuple(parts_out)))
        markers_out.append(build(m.WritableTxnMarkerResult, producer_id=marker.producer_id, topics=tuple(topics_out)))
    return build(m.WriteTxnMarkersResponse, markers=tuple(markers_out))


def handle_describe_transactions(state: BrokerState, header: RequestHeader, request: DescribeTransactionsRequest) -> object:
    m = response_module(k.DESCRIBE_TRANSACTIONS, header.api_version)
    permitted = [t for t in request.transactional_ids if authorize(state, Op.DESCRIBE, Res.TRANSACTIONAL_ID, t)]
    descriptions = state.transactions.describe_transactions(permitted)
    out = [
        build(m.TransactionState, error_code=ErrorCode.transactional_id_authorization_failed, transactional_id=t,
              transaction_state="", transaction_timeout=_ZERO,
              transaction_start_time=datetime.datetime.fromtimestamp(0, tz=datetime.UTC) - datetime.timedelta(milliseconds=1),
              producer_id=-1, producer_epoch=-1, topics=())
        for t in request.transactional_ids if t not in permitted
    ]
    for d in descriptions:
        by_topic: dict[str, list[int]] = {}
        for tp in d.partitions:
            if not authorize(state, Op.DESCRIBE, Res.TOPIC, tp.topic):
                continue  # Kafka leaves out the partitions of topics one may not DESCRIBE
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        start = (
            datetime.datetime.fromtimestamp(d.transaction_start_time_ms / 1000, tz=datetime.UTC)
            if d.transaction_start_time_ms >= 0
            else datetime.datetime.fromtimestamp(0, tz=datetime.UTC) - datetime.timedelta(milliseconds=1)
        )
        out.append(
            build(
                m.TransactionState,
                error_code=d.error,
                transactional_id=d.transactional_id,
                transaction_state=d.state,
                transaction_timeout=datetime.timedelta(milliseconds=min(d.transaction_timeout_ms, 2**31 - 1)),
                transaction_start_time=start,
                producer_id=d.producer_id,
                producer_epoch=d.producer_epoch,
                topics=tuple(build(m.TopicData, topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
            )
        )
    return build(m.DescribeTransactionsResponse, throttle_time=_ZERO, transaction_states=tuple(out))


async def handle_list_transactions(state: BrokerState, header: RequestHeader, request: ListTransactionsRequest) -> object:
    """KIP-664. On a cluster each broker lists the ``__transaction_state`` partitions whose lease
    it holds now (the admin client asks every broker and merges); while a partition has no live
    owner (its broker died, no survivor took it yet) every broker answers
    COORDINATOR_LOAD_IN_PROGRESS rather than a listing without its transactions."""
    m = response_module(k.LIST_TRANSACTIONS, header.api_version)
    filters: dict[str, Any] = {
        "state_filters": tuple(request.state_filters),
        "producer_id_filters": tuple(request.producer_id_filters),
        "duration_filter_ms": getattr(request, "duration_filter", -1),
    }
    coordinators = state.cluster.coordinators if state.cluster is not None else None
    if coordinators is None:
        resp = state.transactions.list_transactions(state.now_ms(), **filters)
    else:
        try:
            partitions = await coordinators.transaction_partitions_to_list()
        except MetadataStoreError as exc:
            log.warning("ListTransactions: cannot read the coordinator leases: %s", exc)
            resp = ListTransactionsResponse(ErrorCode.coordinator_not_available)
        else:
            resp = (ListTransactionsResponse(ErrorCode.coordinator_load_in_progress) if partitions is None
                    else state.transactions.list_transactions(state.now_ms(), partitions, **filters))
    return build(
        m.ListTransactionsResponse,
        throttle_time=_ZERO,
        error_code=resp.error,
        unknown_state_filters=resp.unknown_state_filters,
        transaction_states=tuple(
            build(m.TransactionState, transactional_id=t.transactional_id, producer_id=t.producer_id, transaction_state=t.state)
            for t in resp.transactions
            # Kafka lists only the transactional ids one may DESCRIBE.
            if authorize(state, Op.DESCRIBE, Res.TRANSACTIONAL_ID, t.transactional_id)
        ),
    )


async def handle_describe_producers(state: BrokerState, header: RequestHeader, request: DescribeProducersRequest) -> object:
    """KIP-664: the producers each partition remembers (READ on the topic); in cluster mode from
    the producer states in PostgreSQL (ClusterNode.producer_states), else from the local logs."""
    m = response_module(k.DESCRIBE_PRODUCERS, header.api_version)
    readable = {t.name for t in request.topics if authorize(state, Op.READ, Res.TOPIC, t.name)}
    wanted = [(t.name, p) for t in request.topics if t.name in readable for p in t.partition_indexes]
    found: dict[tuple[str, int], list[ProducerStateInfo] | OnceStreamError]
    if state.cluster is not None:
        found = await state.cluster.producer_states(wanted)
    else:
        found = {}
        for topic, p in wanted:
            try:
                found[(topic, p)] = state.logs.get(topic, p).producer_states()
            except OnceStreamError as exc:
                found[(topic, p)] = exc
    topics_out = []
    for t in request.topics:
        parts = []
        for p in t.partition_indexes:
            error, message, active = ErrorCode.none, None, ()
            infos = found.get((t.name, p), TopicAuthorizationFailedError(t.name))
            if isinstance(infos, OnceStreamError):
                error, message = infos.code, str(infos)
            else:
                active = tuple(
                    build(
                        m.ProducerState,
                        producer_id=i.producer_id,
                        producer_epoch=i.producer_epoch,
                        last_sequence=i.last_sequence,
                        last_timestamp=i.last_timestamp_ms,
                        coordinator_epoch=i.coordinator_epoch,
                        current_txn_start_offset=i.current_txn_start_offset,
                    )
                    for i in infos
                )
            parts.append(build(m.PartitionResponse, partition_index=p, error_code=error, error_message=message,
                               active_producers=active))
        topics_out.append(build(m.TopicResponse, name=t.name, partitions=tuple(parts)))
    return build(m.DescribeProducersResponse, throttle_time=_ZERO, topics=tuple(topics_out))
