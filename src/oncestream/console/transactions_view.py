"""The console's view of transactions (sans-io): rows, prepared 2PC transactions and hanging
transactions, built from what the admin APIs answered and an injected ``now_ms``.

Inputs are plain answers of KIP-664's APIs (ListTransactions, DescribeTransactions,
DescribeProducers) and ListOffsets (the last stable offset, read_committed, and the high
watermark, read_uncommitted); :mod:`oncestream.console.transactions_access` gathers them.
Nothing here reads a clock or a socket, so the unit tests drive every rule with made-up answers.

A transaction is flagged **hanging** for one of three reasons, each carried as a
:class:`HangingFlag` with a sentence for the page:

``open-past-timeout``
    The coordinator lists it Ongoing for longer than its own transaction timeout. The
    coordinator should have aborted it; until somebody does, read_committed readers of its
    partitions stop at its first record. KIP-939 two-phase-commit transactions are exempt: the
    coordinator never times them out (their timeout reads as 2^31-1 ms), they wait for an
    external decision and are shown as *prepared* instead.
``unknown-to-coordinator``
    Kafka's ``kafka-transactions find-hanging``: a partition's DescribeProducers shows an open
    transaction (``currentTransactionStartOffset >= 0``) for longer than the maximum transaction
    timeout, yet no coordinator lists that producer's transaction as ongoing *on that partition*
    (no transactional id has that producer id, or its transaction does not name the partition).
    No coordinator will ever write that partition's marker: only an explicit abort ends it.
``lso-held-back``
    A partition's last stable offset stops at the first offset of such a hanging transaction,
    behind the high watermark: the records in between are invisible to read_committed readers
    for as long as the transaction stays open.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

# KIP-939: a two-phase-commit transaction is registered with this timeout (Integer.MAX_VALUE),
# which also tells it apart on the wire (DescribeTransactions carries no 2PC flag).
TWO_PHASE_COMMIT_TIMEOUT_MS = 2**31 - 1
# Kafka's transaction.max.timeout.ms default, also find-hanging's --max-transaction-timeout
# default: a partition's open transaction younger than this may still be joining its coordinator.
DEFAULT_MAX_TRANSACTION_TIMEOUT_MS = 900_000

ONGOING = "Ongoing"
# States in which the coordinator still owes the partitions of DescribeTransactions a marker.
_MARKER_PENDING_STATES = frozenset({ONGOING, "PrepareCommit", "PrepareAbort", "PrepareEpochFence"})

OPEN_PAST_TIMEOUT = "open-past-timeout"
UNKNOWN_TO_COORDINATOR = "unknown-to-coordinator"
LSO_HELD_BACK = "lso-held-back"

TopicPartitionKey = tuple[str, int]


class ListingLike(Protocol):
    """One ListTransactions entry (``oncestream.client.admin.TransactionListing``)."""

    transactional_id: str
    producer_id: int
    state: str


class TopicPartitionLike(Protocol):
    topic: str
    partition: int


class DescriptionLike(Protocol):
    """One DescribeTransactions entry (``oncestream.client.admin.TransactionDescription``)."""

    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int

    @property
    def partitions(self) -> Iterable[TopicPartitionLike]: ...

    @property
    def error(self) -> object | None: ...


class ProducerStateLike(Protocol):
    """One DescribeProducers entry (``oncestream.client.admin.ProducerState``)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp_ms: int
    coordinator_epoch: int
    current_txn_start_offset: int


@dataclass(frozen=True)
class HangingFlag:
    """Why a transaction is flagged, with one sentence for the page."""

    kind: str
    explanation: str


@dataclass(frozen=True)
class PartitionOffsets:
    """A partition's last stable offset (ListOffsets read_committed) and high watermark."""

    last_stable_offset: int
    high_watermark: int


@dataclass(frozen=True)
class OpenPartitionTransaction:
    """An open transaction as one partition sees it (DescribeProducers), with what an abort
    needs: producer id/epoch and coordinator epoch (``kafka-transactions abort``'s spec)."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    start_offset: int
    last_timestamp_ms: int
    transactional_id: str | None
    offsets: PartitionOffsets | None
    flags: tuple[HangingFlag, ...] = ()

    @property
    def hanging(self) -> bool:
        return bool(self.flags)


@dataclass(frozen=True)
class TransactionRow:
    """One transactional id as the list and the transaction page show it."""

    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    partitions: tuple[TopicPartitionKey, ...]
    start_time_ms: int          # -1: no transaction started (Empty, or unknown)
    age_ms: int | None          # None without a start time
    timeout_ms: int
    two_phase_commit: bool
    error: str | None = None
    flags: tuple[HangingFlag, ...] = ()
    open_partitions: tuple[OpenPartitionTransaction, ...] = ()
    # False: only listed (ListTransactions), not described; epoch, partitions, times unknown.
    described: bool = True

    @property
    def prepared(self) -> bool:
        """An open KIP-939 transaction: the coordinator keeps it until someone completes it.
        (Kafka's prepareTransaction changes no coordinator state, so Ongoing with 2PC is the
        coordinator's only form of a prepared transaction.)"""
        return self.two_phase_commit and self.state == ONGOING

    @property
    def hanging(self) -> bool:
        return bool(self.flags)

    @property
    def open(self) -> bool:
        """Begun and not yet completed: Ongoing, or its markers being written (Prepare*)."""
        return self.error is None and self.state in _MARKER_PENDING_STATES


@dataclass(frozen=True)
class TransactionsSnapshot:
    """Everything the transactions page shows, as of ``now_ms``."""

    now_ms: int
    transactions: tuple[TransactionRow, ...]
    open_partitions: tuple[OpenPartitionTransaction, ...]
    orphans: tuple[OpenPartitionTransaction, ...] = field(default=())

    @property
    def hanging(self) -> tuple[OpenPartitionTransaction, ...]:
        """Every partition held by a hanging transaction (what an abort acts on)."""
        return tuple(o for o in self.open_partitions if o.hanging)

    @property
    def open_transactions(self) -> tuple[TransactionRow, ...]:
        return tuple(t for t in self.transactions if t.open)

    def transaction(self, transactional_id: str) -> TransactionRow | None:
        return next((t for t in self.transactions if t.transactional_id == transactional_id), None)


def needs_description(state: str) -> bool:
    """Whether a listed transactional id must be described for the list: its transaction is open
    (an ended one shows what ListTransactions said; its own page describes it)."""
    return state in _MARKER_PENDING_STATES


def format_duration_ms(ms: int) -> str:
    """``1h 02m``, ``3m 05s``, ``4.2s``: durations in words for the page."""
    if ms < 0:
        return "-"
    if ms < 10_000:
        return f"{ms / 1000:.1f}s"
    seconds = ms // 1000
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours >= 24:
        return f"{hours // 24}d {hours % 24:02d}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}m {seconds:02d}s"


def _open_past_timeout(d: DescriptionLike, now_ms: int) -> HangingFlag | None:
    if d.state != ONGOING or d.timeout_ms >= TWO_PHASE_COMMIT_TIMEOUT_MS or d.start_time_ms < 0:
        return None
    age_ms = now_ms - d.start_time_ms
    if age_ms <= d.timeout_ms:
        return None
    return HangingFlag(OPEN_PAST_TIMEOUT, (
        f"Ongoing for {format_duration_ms(age_ms)}, past its transaction timeout of "
        f"{format_duration_ms(d.timeout_ms)}: its coordinator should have aborted it; until it "
        f"ends, read_committed consumers of its partitions stop at its first record."))


def _unknown_to_coordinator(key: TopicPartitionKey, p: ProducerStateLike, listed: ListingLike | None,
                            d: DescriptionLike | None) -> HangingFlag | None:
    where = f"{key[0]}[{key[1]}]"
    if listed is None:
        return HangingFlag(UNKNOWN_TO_COORDINATOR, (
            f"{where} holds an open transaction of producer {p.producer_id} from offset "
            f"{p.current_txn_start_offset}, but no transaction coordinator knows that producer: "
            f"no coordinator will ever write its marker, so only an explicit abort ends it."))
    tid = listed.transactional_id
    if d is None and listed.state not in _MARKER_PENDING_STATES:
        return HangingFlag(UNKNOWN_TO_COORDINATOR, (
            f"{where} holds an open transaction of producer {p.producer_id} from offset "
            f"{p.current_txn_start_offset}, but the coordinator lists {tid!r} as {listed.state}, with no "
            f"open transaction: no coordinator will write its marker, so only an explicit abort ends it."))
    if d is None or d.error is not None:
        return HangingFlag(UNKNOWN_TO_COORDINATOR, (
            f"{where} holds an open transaction of producer {p.producer_id} ({tid!r}) from offset "
            f"{p.current_txn_start_offset}, but its coordinator could not describe {tid!r}: "
            f"nothing shows that a marker will come."))
    named = {(tp.topic, tp.partition) for tp in d.partitions}
    if d.state not in _MARKER_PENDING_STATES or key not in named or d.producer_id != p.producer_id:
        return HangingFlag(UNKNOWN_TO_COORDINATOR, (
            f"{where} holds an open transaction of producer {p.producer_id} from offset "
            f"{p.current_txn_start_offset}, but the coordinator of {tid!r} (state {d.state}, "
            f"producer {d.producer_id}) does not list {where} as part of an open transaction: "
            f"no coordinator will write its marker, so only an explicit abort ends it."))
    return None


def _lso_held_back(open_txn: OpenPartitionTransaction) -> HangingFlag | None:
    o = open_txn.offsets
    if o is None or o.last_stable_offset >= o.high_watermark or o.last_stable_offset != open_txn.start_offset:
        return None
    behind = o.high_watermark - o.last_stable_offset
    return HangingFlag(LSO_HELD_BACK, (
        f"{open_txn.topic}[{open_txn.partition}]: the last stable offset stays at "
        f"{o.last_stable_offset}, {behind} record{'s' if behind != 1 else ''} behind the high "
        f"watermark {o.high_watermark}; read_committed consumers cannot read past it until this "
        f"transaction ends."))


def _error_text(error: object) -> str:
    name = getattr(error, "name", None)   # a KafkaError names itself (TRANSACTIONAL_ID_NOT_FOUND)
    return str(name() if callable(name) else error)


def build_snapshot(
    listings: Iterable[ListingLike],
    descriptions: Mapping[str, DescriptionLike],
    producers: Mapping[TopicPartitionKey, Iterable[ProducerStateLike]],
    offsets: Mapping[TopicPartitionKey, PartitionOffsets],
    now_ms: int,
    *,
    max_transaction_timeout_ms: int = DEFAULT_MAX_TRANSACTION_TIMEOUT_MS,
) -> TransactionsSnapshot:
    """The transactions page's model. ``listings``: ListTransactions of every broker;
    ``descriptions``: DescribeTransactions of those ids; ``producers``: DescribeProducers of the
    partitions to search (every partition for a full find-hanging); ``offsets``: LSO and high
    watermark of the partitions with open transactions; ``now_ms``: wall-clock time (the clock of
    the brokers' timestamps); ``max_transaction_timeout_ms``: the find-hanging grace, the
    cluster's transaction.max.timeout.ms."""
    listing = sorted(listings, key=lambda entry: entry.transactional_id)
    past_timeout: dict[str, HangingFlag] = {}
    for tid, described in descriptions.items():
        flag = _open_past_timeout(described, now_ms) if described.error is None else None
        if flag is not None:
            past_timeout[tid] = flag
    open_txns = _open_partition_transactions(listing, descriptions, producers, offsets, past_timeout, now_ms,
                                             max_transaction_timeout_ms)
    rows = [_row(entry, descriptions.get(entry.transactional_id), open_txns, past_timeout, now_ms) for entry in listing]
    orphans = tuple(o for o in open_txns if o.transactional_id is None)
    return TransactionsSnapshot(now_ms, tuple(rows), tuple(open_txns), orphans)


def _open_partition_transactions(
    listing: list[ListingLike], descriptions: Mapping[str, DescriptionLike],
    producers: Mapping[TopicPartitionKey, Iterable[ProducerStateLike]],
    offsets: Mapping[TopicPartitionKey, PartitionOffsets], past_timeout: Mapping[str, HangingFlag],
    now_ms: int, max_transaction_timeout_ms: int,
) -> list[OpenPartitionTransaction]:
    """Every open transaction DescribeProducers showed, with its hanging flags."""
    by_producer = {entry.producer_id: entry for entry in listing}
    out: list[OpenPartitionTransaction] = []
    for key in sorted(producers):
        for p in producers[key]:
            if p.current_txn_start_offset < 0:
                continue
            listed = by_producer.get(p.producer_id)
            tid = listed.transactional_id if listed is not None else None
            d = descriptions.get(tid) if tid is not None else None
            flags: list[HangingFlag] = []
            if tid is not None and tid in past_timeout and d is not None and d.producer_id == p.producer_id:
                flags.append(past_timeout[tid])
            # find-hanging's grace: a younger transaction may still be joining its coordinator.
            if now_ms - p.last_timestamp_ms > max_transaction_timeout_ms:
                unknown = _unknown_to_coordinator(key, p, listed, d)
                if unknown is not None:
                    flags.append(unknown)
            entry = OpenPartitionTransaction(
                topic=key[0], partition=key[1], producer_id=p.producer_id, producer_epoch=p.producer_epoch,
                coordinator_epoch=p.coordinator_epoch, start_offset=p.current_txn_start_offset,
                last_timestamp_ms=p.last_timestamp_ms, transactional_id=tid, offsets=offsets.get(key))
            if flags:
                held = _lso_held_back(entry)
                if held is not None:
                    flags.append(held)
            out.append(dataclasses.replace(entry, flags=tuple(flags)))
    return out


def _row(entry: ListingLike, d: DescriptionLike | None, open_txns: list[OpenPartitionTransaction],
         past_timeout: Mapping[str, HangingFlag], now_ms: int) -> TransactionRow:
    tid = entry.transactional_id
    mine = tuple(o for o in open_txns if o.transactional_id == tid)
    flags = [past_timeout[tid]] if tid in past_timeout else []
    for o in mine:
        flags += [f for f in o.flags if f.kind != OPEN_PAST_TIMEOUT and f not in flags]
    if d is None or d.error is not None:
        # Not described (an ended transaction, unless asked for) or not describable: what the listing says.
        return TransactionRow(
            transactional_id=tid, state=entry.state, producer_id=entry.producer_id, producer_epoch=-1,
            partitions=(), start_time_ms=-1, age_ms=None, timeout_ms=-1, two_phase_commit=False,
            error=_error_text(d.error) if d is not None else None, flags=tuple(flags), open_partitions=mine,
            described=d is not None)
    return TransactionRow(
        transactional_id=tid, state=d.state, producer_id=d.producer_id, producer_epoch=d.producer_epoch,
        partitions=tuple(sorted((tp.topic, tp.partition) for tp in d.partitions)),
        start_time_ms=d.start_time_ms,
        age_ms=now_ms - d.start_time_ms if d.start_time_ms >= 0 and d.state == ONGOING else None,
        timeout_ms=d.timeout_ms, two_phase_commit=d.timeout_ms >= TWO_PHASE_COMMIT_TIMEOUT_MS,
        flags=tuple(flags), open_partitions=mine)
