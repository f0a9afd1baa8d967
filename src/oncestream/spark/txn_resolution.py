"""Completing and aborting the sink's prepared transactions (KIP-939 phase two), by transactional id.

Every function here opens a fresh two-phase-commit producer on a transactional id with
``init_transactions(keep_prepared_txn=True)``: the coordinator keeps the open transaction, fences
whoever wrote it (the epoch moves on), and tells us its PreparedTxnState. The caller's rule then
decides: commit exactly when that state is the one the commit record lists, abort otherwise.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from oncestream.client.common.errors import KafkaException
from oncestream.client.producer.producer import Producer
from oncestream.spark.errors import CommitResolutionError, TwoPhaseCommitUnsupportedError
from oncestream.spark.plugins import COMPLETED_TRANSACTION, COMPLETING_TRANSACTION

# Transactions completed in parallel by the driver (each is a few round trips to the coordinator).
_PARALLEL_COMPLETIONS = 8
_TIMEOUT_S = 60.0
# Times one transaction is held again after its holder was fenced: each fencing is one stale
# attempt's single InitProducerId, and a stale attempt never retries it.
_REHOLD_ATTEMPTS = 4


class Outcome(enum.Enum):
    """What resolving one transactional id did."""

    COMMITTED = "committed"
    ABORTED = "aborted"
    NOTHING_OPEN = "nothing-open"


def two_phase_producer(bootstrap_servers: str, transactional_id: str,
                       producer_config: Mapping[str, str] | None = None):
    """A transactional producer with KIP-939 two-phase commit enabled."""
    conf = {
        "linger.ms": 5,
        "batch.size": 1 << 20,
        **dict(producer_config or {}),
        "bootstrap.servers": bootstrap_servers,
        "transactional.id": transactional_id,
        "transaction.two.phase.commit.enable": True,
        "enable.idempotence": True,
        "acks": "all",
    }
    conf.pop("isolation.level", None)  # a consumer property; kafka.* options are shared with reads
    return Producer(conf)


def init_keeping_prepared(producer) -> str:
    """init_transactions(keep_prepared_txn=True); return the kept transaction's state ('' if none).

    Translates the client's 'no InitProducerId v6' failure into the connector's clear error.
    """
    try:
        producer.init_transactions(_TIMEOUT_S, keep_prepared_txn=True)
    except KafkaException as exc:
        if "InitProducerId v6" in str(exc) or "two-phase commit" in str(exc):
            raise TwoPhaseCommitUnsupportedError(
                f"{exc.args[0]}. The exactly-once sink needs KIP-939 two-phase commit "
                "(broker config transaction.two.phase.commit.enable=true); use exactlyOnce=false "
                "for an at-least-once sink.") from exc
        raise
    return str(producer.prepared_transaction_state())


class HeldTransactions:
    """Producers that hold (keep) the open transactions of some transactional ids.

    ``open`` initializes one producer per id with keep_prepared_txn=True, which fences every
    other writer of those ids: from then on only this object can commit or abort them. The
    driver checks the held states *before* writing its commit record, so the record never lists a
    transaction that somebody else already aborted.
    """

    def __init__(self, bootstrap_servers: str, producer_config: Mapping[str, str] | None = None) -> None:
        self._bootstrap = bootstrap_servers
        self._config = dict(producer_config or {})
        self.held: dict[str, str] = {}
        self._producers: dict[str, Any] = {}  # transactional id -> oncestream.client.Producer

    def open(self, transactional_ids: Iterable[str]) -> dict[str, str]:
        """Hold each id; returns transactional id -> held state ('' when nothing was open)."""
        ids = sorted(set(transactional_ids) - set(self._producers))

        def one(txn_id: str) -> tuple[str, Any, str]:
            producer = two_phase_producer(self._bootstrap, txn_id, self._config)
            try:
                return txn_id, producer, init_keeping_prepared(producer)
            except BaseException:
                producer.close(10)
                raise

        if ids:
            with ThreadPoolExecutor(min(_PARALLEL_COMPLETIONS, len(ids))) as pool:
                for txn_id, producer, state in pool.map(one, ids):
                    self._producers[txn_id] = producer
                    self.held[txn_id] = state
        return dict(self.held)

    def finish(self, commit: Mapping[str, str],
               observe: Callable[[str, str], None] | None = None) -> dict[str, Outcome]:
        """Commit the held transactions whose id and state are in ``commit``; abort the rest.
        ``observe(step, transactional_id)`` is told before and after each commit
        (``COMPLETING_TRANSACTION``, ``COMPLETED_TRANSACTION``), in the thread committing it."""

        def one(txn_id: str) -> tuple[str, Outcome]:
            held = self.held[txn_id]
            if not held:
                return txn_id, Outcome.NOTHING_OPEN
            committing = commit.get(txn_id) == held
            if committing and observe is not None:
                observe(COMPLETING_TRANSACTION, txn_id)
            for tries_left in range(_REHOLD_ATTEMPTS - 1, -1, -1):
                try:
                    outcome = self._finish_one(txn_id, held, committing)
                    break
                except KafkaException:
                    # Another InitProducerId on the id (a stale write attempt that passed its
                    # journal check long ago, docs/spark-exactly-once.md) fenced our producer. It
                    # leaves the transaction open, so hold it again; only if the same transaction
                    # is still there is it ours to finish.
                    if not tries_left or self._rehold(txn_id) != held:
                        raise
            self.held[txn_id] = ""  # finished: a second finish() leaves it alone
            if committing and observe is not None:
                observe(COMPLETED_TRANSACTION, txn_id)
            return txn_id, outcome

        ids = sorted(self._producers)
        if not ids:
            return {}
        with ThreadPoolExecutor(min(_PARALLEL_COMPLETIONS, len(ids))) as pool:
            return dict(pool.map(one, ids))

    def _finish_one(self, txn_id: str, held: str, commit: bool) -> Outcome:
        producer = self._producers[txn_id]
        if commit:
            if not producer.complete_transaction(held, _TIMEOUT_S):
                # The held state matched, so the coordinator must commit; an abort here would
                # drop data the caller's commit record lists.
                raise CommitResolutionError(f"{txn_id}: completing held transaction {held} aborted it")
            return Outcome.COMMITTED
        producer.abort_transaction(_TIMEOUT_S)
        return Outcome.ABORTED

    def _rehold(self, txn_id: str) -> str:
        """Replace the id's (fenced) producer by a new one holding whatever is open now."""
        self._producers.pop(txn_id).close(10)
        producer = two_phase_producer(self._bootstrap, txn_id, self._config)
        self._producers[txn_id] = producer
        return init_keeping_prepared(producer)

    def close(self) -> None:
        """Close every producer (a held transaction stays open on the broker)."""
        for producer in self._producers.values():
            producer.close(10)
        self._producers.clear()

    def __enter__(self) -> HeldTransactions:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def abort_all(bootstrap_servers: str, transactional_ids: Iterable[str],
              producer_config: Mapping[str, str] | None = None) -> dict[str, Outcome]:
    """Abort whatever transaction is open under each id, fencing its writer."""
    return resolve_by_record(bootstrap_servers, transactional_ids, {}, producer_config)


def resolve_by_record(bootstrap_servers: str, transactional_ids: Iterable[str], committed: Mapping[str, str],
                      producer_config: Mapping[str, str] | None = None) -> dict[str, Outcome]:
    """Recovery: for each id, commit its open transaction iff the commit record lists exactly that
    state (``committed``: transactional id -> state), abort it otherwise."""
    with HeldTransactions(bootstrap_servers, producer_config) as held:
        held.open(transactional_ids)
        return held.finish(committed)
