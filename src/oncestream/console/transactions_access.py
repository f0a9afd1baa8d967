"""What the transactions page asks of the cluster, and the two changes it makes: abort a
hanging transaction, complete a prepared KIP-939 transaction.

Blocking calls on our client's :class:`~oncestream.client.admin.Admin` (and, to complete a
prepared transaction, a short-lived :class:`~oncestream.client.Producer`); the pages run them in
a worker thread. The rules that turn the answers into rows and flags are sans-io, in
:mod:`oncestream.console.transactions_view`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from oncestream.client.admin.admin import AbortTransactionSpec, Admin, ProducerState
from oncestream.client.common.message import TopicPartition
from oncestream.console.transactions_view import (
    DEFAULT_MAX_TRANSACTION_TIMEOUT_MS,
    ONGOING,
    PartitionOffsets,
    TopicPartitionKey,
    TransactionsSnapshot,
    build_snapshot,
    needs_description,
)

_LATEST = -1
# States in which a transaction is over (an abort is done once its id reaches one of them).
ENDED_STATES = frozenset({"CompleteAbort", "CompleteCommit", "Empty", "Dead"})
ADMIN_TIMEOUT_S = 30.0
# How long an abort through the coordinator may take to reach an ended state.
ABORT_WAIT_S = 30.0


class TransactionActionError(Exception):
    """An abort or completion the console could not carry out, said in words."""


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def read_snapshot(admin: Admin, now_ms: Callable[[], int] = wall_clock_ms, *,
                  also_describe: Iterable[str] = (),
                  max_transaction_timeout_ms: int = DEFAULT_MAX_TRANSACTION_TIMEOUT_MS,
                  timeout_s: float = ADMIN_TIMEOUT_S) -> TransactionsSnapshot:
    """List every transaction, describe the open ones (and ``also_describe``: one
    DescribeTransactions per id, so ended ones are left to their own page), ask every
    partition's leader for its producers (find-hanging searches all partitions) and the LSO/high
    watermark of the partitions with an open transaction; build the page's model."""
    listings = admin.list_transactions(timeout=timeout_s)
    extra = set(also_describe)
    ids = [entry.transactional_id for entry in listings
           if needs_description(entry.state) or entry.transactional_id in extra]
    descriptions = admin.describe_transactions(ids, timeout=timeout_s) if ids else {}
    partitions: set[TopicPartitionKey] = set()
    topics = admin.list_topics(timeout=timeout_s)
    if topics:
        for name, described in admin.describe_topics(topics, timeout=timeout_s).items():
            if described.error is None:
                partitions |= {(name, p.id) for p in described.partitions}
    for d in descriptions.values():
        partitions |= {(tp.topic, tp.partition) for tp in d.partitions}
    producers = describe_producers(admin, partitions, timeout_s=timeout_s)
    open_keys = {key for key, states in producers.items() if any(p.current_txn_start_offset >= 0 for p in states)}
    offsets = read_offsets(admin, open_keys, timeout_s=timeout_s)
    return build_snapshot(listings, descriptions, producers, offsets, now_ms(),
                          max_transaction_timeout_ms=max_transaction_timeout_ms)


def describe_producers(admin: Admin, partitions: set[TopicPartitionKey], *,
                       timeout_s: float = ADMIN_TIMEOUT_S) -> dict[TopicPartitionKey, list[ProducerState]]:
    if not partitions:
        return {}
    return admin.describe_producers([TopicPartition(t, p) for t, p in sorted(partitions)], timeout=timeout_s)


def read_offsets(admin: Admin, keys: set[TopicPartitionKey], *,
                 timeout_s: float = ADMIN_TIMEOUT_S) -> dict[TopicPartitionKey, PartitionOffsets]:
    """Last stable offset (ListOffsets latest, read_committed) and high watermark of ``keys``."""
    if not keys:
        return {}
    wanted = {key: _LATEST for key in keys}
    stable = admin.list_offsets(wanted, read_committed=True, timeout=timeout_s)
    high = admin.list_offsets(wanted, read_committed=False, timeout=timeout_s)
    return {key: PartitionOffsets(stable[key], high[key]) for key in keys if key in stable and key in high}


@dataclass(frozen=True)
class AbortOutcome:
    """How an abort was carried out, for the page and the audit log."""

    how: str                         # "coordinator" or "marker"
    transactional_id: str | None
    message: str


def abort_hanging(admin: Admin, spec: AbortTransactionSpec, *,
                  timeout_s: float = ADMIN_TIMEOUT_S, wait_s: float = ABORT_WAIT_S,
                  sleep: Callable[[float], None] = time.sleep,
                  monotonic: Callable[[], float] = time.monotonic) -> AbortOutcome:
    """Abort the open transaction of ``spec.producer_id`` on ``spec.topic[spec.partition]``.

    When a coordinator still lists the producer's transaction as Ongoing (a transaction open
    past its timeout), the coordinator is made to abort it, markers on every partition and all:
    fencing its transactional id (InitProducerId, KIP-664's fenceProducers) does that, then the
    console waits until the id reaches an ended state. Otherwise no coordinator will ever write
    the marker, and the console writes it as ``kafka-transactions abort`` does (KIP-664's
    abortTransaction: WriteTxnMarkers with the producer id/epoch and coordinator epoch that
    DescribeProducers showed; -1 coordinator epoch becomes 0, Kafka's conservative choice).
    That needs the ClusterAction right: our own broker refuses it to every client, a Kafka
    cluster grants it to super users; the refusal is raised in words."""
    listed = admin.list_transactions(producer_ids=[spec.producer_id], timeout=timeout_s)
    ongoing = [t for t in listed if t.producer_id == spec.producer_id and t.state == ONGOING]
    if ongoing:
        tid = ongoing[0].transactional_id
        error = admin.fence_producers([tid], timeout=timeout_s).get(tid)
        if error is not None:
            raise TransactionActionError(f"abort of {tid!r} through its coordinator failed: {_name(error)}")
        deadline = monotonic() + wait_s
        while True:
            d = admin.describe_transactions([tid], timeout=timeout_s)[tid]
            if d.error is None and d.state in ENDED_STATES:
                break
            if monotonic() > deadline:
                raise TransactionActionError(f"abort of {tid!r}: still {d.state or _name(d.error)} after {wait_s:.0f} s")
            sleep(0.05)
        return AbortOutcome("coordinator", tid,
                            f"aborted transaction {tid!r} (producer {spec.producer_id}) through its coordinator")
    marker = AbortTransactionSpec(spec.topic, spec.partition, spec.producer_id, spec.producer_epoch,
                                  max(spec.coordinator_epoch, 0))
    try:
        admin.abort_transaction(marker, timeout=timeout_s)
    except Exception as exc:   # the client's typed errors (KafkaException, BrokerResponseError)
        raise TransactionActionError(
            f"writing an ABORT marker for producer {spec.producer_id} on {spec.topic}[{spec.partition}] "
            f"failed: {exc}") from exc
    return AbortOutcome("marker", None, f"wrote an ABORT marker for producer {spec.producer_id} "
                                        f"on {spec.topic}[{spec.partition}]")


def complete_prepared(producer_conf: Mapping[str, Any], transactional_id: str, producer_id: int, commit: bool, *,
                      timeout_s: float = ADMIN_TIMEOUT_S) -> str:
    """Commit or abort the prepared KIP-939 transaction of ``transactional_id`` as its own
    application would after a restart: a producer with that id and 2PC enabled calls
    ``init_transactions(keep_prepared_txn=True)`` (which fences the old instance and keeps the
    prepared transaction), then commits or aborts it. ``producer_id`` is the one the user
    confirmed on the page: a different prepared transaction is left alone."""
    from oncestream.client import Producer  # the console needs a producer only for this action

    conf = {**dict(producer_conf), "transactional.id": transactional_id,
            "transaction.two.phase.commit.enable": True}
    producer = Producer(conf)
    try:
        try:
            producer.init_transactions(timeout_s, keep_prepared_txn=True)
        except Exception as exc:
            raise TransactionActionError(f"{transactional_id!r}: init_transactions(keep_prepared_txn) failed: {exc}") from exc
        state = producer.prepared_transaction_state()
        if not state.has_transaction():
            raise TransactionActionError(f"{transactional_id!r} has no prepared transaction")
        if state.producer_id != producer_id:
            raise TransactionActionError(
                f"{transactional_id!r}: the prepared transaction belongs to producer {state.producer_id}, "
                f"not {producer_id} as confirmed; nothing was completed")
        try:
            if commit:
                producer.commit_transaction(timeout_s)
            else:
                producer.abort_transaction(timeout_s)
        except Exception as exc:
            raise TransactionActionError(f"{transactional_id!r}: {'commit' if commit else 'abort'} failed: {exc}") from exc
        return f"{'committed' if commit else 'aborted'} the prepared transaction {transactional_id!r} ({state})"
    finally:
        producer.close(timeout_s)


def _name(error: object) -> str:
    name = getattr(error, "name", None)
    return str(name() if callable(name) else error)
