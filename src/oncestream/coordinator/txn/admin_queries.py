"""KIP-664 admin queries over the transaction coordinator's state: DescribeTransactions and
ListTransactions (with the KIP-994 duration filter and the KIP-1152 transactional-id pattern).

Read-only: these functions look at each transactional id's current snapshot (and pending state)
and never prepare a transition, so they live apart from the request handlers that do.
:class:`~oncestream.coordinator.txn.coordinator.TransactionCoordinator` delegates to them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from oncestream.coordinator.txn.messages import (
    ListTransactionsResponse,
    TransactionDescription,
    TransactionListing,
)
from oncestream.coordinator.txn.metadata import TransactionMetadata
from oncestream.coordinator.txn.state import TxnState, parse_state
from oncestream.errors import InvalidRegularExpressionError


def describe_transactions(
    txns: Mapping[str, TransactionMetadata], loaded: bool, transactional_ids: Iterable[str]
) -> tuple[TransactionDescription, ...]:
    """DescribeTransactions: one entry per id, TRANSACTIONAL_ID_NOT_FOUND for unknown ids,
    COORDINATOR_LOAD_IN_PROGRESS for every id until the transaction log is ``loaded``."""
    result = []
    for tid in transactional_ids:
        if not loaded:
            result.append(TransactionDescription(tid, ErrorCode.coordinator_load_in_progress))
            continue
        if not tid:
            result.append(TransactionDescription(tid, ErrorCode.invalid_request))
            continue
        meta = txns.get(tid)
        if meta is None:
            result.append(TransactionDescription(tid, ErrorCode.transactional_id_not_found))
            continue
        s = meta.current
        result.append(
            TransactionDescription(
                transactional_id=tid,
                error=ErrorCode.none,
                state=s.state.value,
                producer_id=s.producer_id,
                producer_epoch=s.producer_epoch,
                transaction_timeout_ms=s.timeout_ms,
                transaction_start_time_ms=s.start_timestamp_ms,
                partitions=tuple(sorted(s.partitions)),
                last_update_time_ms=s.last_update_timestamp_ms,
                two_phase_commit=s.two_phase_commit,
                ongoing_txn_producer_id=s.ongoing_txn_producer_id,
                ongoing_txn_producer_epoch=s.ongoing_txn_producer_epoch,
                client_transaction_version=s.client_transaction_version,
                pending_state=meta.pending.pending_state.value if meta.pending else "",
            )
        )
    return tuple(result)


def list_transactions(
    txns: Mapping[str, TransactionMetadata],
    loaded: bool,
    now_ms: int,
    *,
    state_filters: Iterable[str] = (),
    producer_id_filters: Iterable[int] = (),
    duration_filter_ms: int = -1,
    transactional_id_pattern: str | None = None,
) -> ListTransactionsResponse:
    """ListTransactions (KIP-664, KIP-994 duration filter, KIP-1152 id pattern). Unknown state
    names are echoed in ``unknown_state_filters``; if every given state name is unknown,
    nothing matches. A duration filter >= 0 keeps only transactions that started more than
    that many ms ago."""
    if not loaded:
        return ListTransactionsResponse(ErrorCode.coordinator_load_in_progress)
    names = tuple(state_filters)
    states = {parse_state(name) for name in names} - {None}
    unknown = tuple(name for name in names if parse_state(name) is None)
    if names and not states:
        return ListTransactionsResponse(ErrorCode.none, (), unknown)
    try:
        pattern = re.compile(transactional_id_pattern) if transactional_id_pattern else None
    except re.error as exc:
        err = InvalidRegularExpressionError(str(exc))
        return ListTransactionsResponse(err.code, (), unknown)
    producer_ids = set(producer_id_filters)
    listed = []
    for tid in sorted(txns):
        s = txns[tid].current
        if states and s.state not in states:
            continue
        if producer_ids and s.producer_id not in producer_ids:
            continue
        if duration_filter_ms >= 0 and (
            s.start_timestamp_ms < 0 or now_ms - s.start_timestamp_ms <= duration_filter_ms
        ):
            continue
        if pattern is not None and pattern.fullmatch(tid) is None:
            continue
        listed.append(TransactionListing(tid, s.producer_id, s.state.value))
    return ListTransactionsResponse(ErrorCode.none, tuple(listed), unknown)


@dataclass(frozen=True)
class TransactionCounts:
    """What the broker's metrics show of the coordinator's transactions (read at scrape time).

    ``open``: Ongoing transactions a timeout may abort; ``prepared``: Ongoing KIP-939
    two-phase-commit transactions (exempt from the timeout: the coordinator's only form of a
    prepared transaction, since Kafka's prepareTransaction changes no coordinator state);
    ``completing``: PrepareCommit/PrepareAbort, markers being written; ``oldest_age_ms``: the age
    of the oldest open or prepared transaction (0 when there is none)."""

    open: int = 0
    prepared: int = 0
    completing: int = 0
    oldest_age_ms: int = 0


def transaction_counts(txns: Mapping[str, TransactionMetadata], now_ms: int) -> TransactionCounts:
    """Count ``txns`` by the categories of :class:`TransactionCounts` (wall-clock ``now_ms``,
    the clock of the transactions' start timestamps)."""
    open_count = prepared = completing = 0
    oldest_start_ms: int | None = None
    for meta in txns.values():
        s = meta.current
        if s.state is TxnState.ONGOING:
            if s.two_phase_commit:
                prepared += 1
            else:
                open_count += 1
            if s.start_timestamp_ms >= 0 and (oldest_start_ms is None or s.start_timestamp_ms < oldest_start_ms):
                oldest_start_ms = s.start_timestamp_ms
        elif s.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            completing += 1
    oldest_age_ms = max(0, now_ms - oldest_start_ms) if oldest_start_ms is not None else 0
    return TransactionCounts(open_count, prepared, completing, oldest_age_ms)
