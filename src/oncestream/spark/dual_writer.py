"""Atomic dual writes, log + database, from a streaming query's ``foreachBatch`` (KIP-939).

    writer = oncestream.spark.dual_write(
        options={
            "kafka.bootstrap.servers": "127.0.0.1:9092",
            "kafka.transactional.id": "bank-balances",  # one per pipeline, stable across restarts
            "kafka.compression.type": "lz4",            # any kafka.* producer property, as for the sink
            "topic": "balance-updates",                 # default topic of the rows for the log
        },
        store=oncestream.spark.SqliteStore("bank.db"),
        apply=apply_balances,                      # apply(tx, batch_df, batch_id), in the DB txn
        to_log=lambda df: df.select("key", "value"),   # optional: rows for the log
    )
    df.writeStream.foreachBatch(writer).option("checkpointLocation", cp).start()

``options`` takes the same ``kafka.*`` options as the connector's sink (validated the same way:
owned properties such as ``kafka.key.serializer`` are refused) plus ``topic``; the keyword
arguments ``bootstrap_servers``, ``transactional_id``, ``topic`` and ``producer_config`` (client
property names without the prefix) still work and take precedence over ``options``. A step
observer (``observer=``, or the option ``stepObserver``, see ``oncestream.spark.plugins``) is told
after steps 3 and 4 below of each batch.

Per micro-batch, on the driver:
  1. (first call only) recover: ``init_transactions(keep_prepared_txn=True)``; if a transaction is
     still prepared, commit it when the database's state row holds exactly its PreparedTxnState,
     abort it otherwise. The row's batch id is the last batch applied.
  2. A batch id at or below that is a replay Spark runs after a crash: it is already in both
     places, so it is skipped.
  3. begin, produce ``to_log(batch_df)``, ``prepare_transaction()`` -> state.
  4. One database transaction: ``apply(tx, batch_df, batch_id)`` and the state row
     ``(transactional_id, batch_id, state)``; commit. This is the commit point.
  5. ``complete_transaction(state)``.
A crash before 4 leaves the old row: recovery aborts the prepared transaction and Spark replays the
batch. A crash after 4 leaves the new row: recovery commits, and the replay is skipped. The log
and the database therefore always agree.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from oncestream.spark.errors import CommitResolutionError, OptionError
from oncestream.spark.options import kafka_params, sink_options
from oncestream.spark.plugins import DUAL_AFTER_DB, DUAL_AFTER_PREPARE, NoSteps, StepObserver, step_observer
from oncestream.spark.stores import DualWriteState, Transaction, _Store
from oncestream.spark.txn_resolution import init_keeping_prepared, two_phase_producer

log = logging.getLogger("oncestream.spark")

NO_BATCH = -1
_TIMEOUT_S = 60.0

ApplyFn = Callable[[Transaction, Any, int], None]
ToLogFn = Callable[[Any], Any]


class DualWriter:
    """A ``foreachBatch`` function that writes each batch to the log and a database atomically."""

    def __init__(
        self,
        *,
        bootstrap_servers: str,
        transactional_id: str,
        store: _Store,
        apply: ApplyFn,
        to_log: ToLogFn | None = None,
        topic: str | None = None,
        producer_config: Mapping[str, Any] | None = None,
        observer: StepObserver | None = None,
    ) -> None:
        if not transactional_id:
            raise ValueError("dual_write needs a transactional_id (stable across restarts)")
        self.bootstrap_servers = bootstrap_servers
        self.transactional_id = transactional_id
        self.store = store
        self.apply = apply
        self.to_log = to_log
        self.topic = topic
        self.producer_config = dict(producer_config or {})
        self.observer = observer or NoSteps()
        self._producer: Any = None
        self._used = False  # the current producer already ran a transaction
        self.last_batch_id = NO_BATCH
        self.recovery: str | None = None  # what recovery did: committed / aborted / nothing-open

    def recover(self) -> str:
        """KIP-939 recovery (step 1); returns 'committed', 'aborted' or 'nothing-open'."""
        self.store.ensure_state_table()
        producer = two_phase_producer(self.bootstrap_servers, self.transactional_id, self.producer_config)
        try:
            held = init_keeping_prepared(producer)
            row = self.store.read_state(self.transactional_id)
            if not held:
                outcome = "nothing-open"
            elif row is not None and row.prepared_txn_state == held:
                producer.complete_transaction(held, _TIMEOUT_S)
                outcome = "committed"
            else:
                producer.abort_transaction(_TIMEOUT_S)
                outcome = "aborted"
        except BaseException:
            producer.close(10)
            raise
        self._producer = producer
        self.last_batch_id = row.batch_id if row is not None else NO_BATCH
        self.recovery = outcome
        log.info("dual write %s recovered: %s prepared transaction, last batch %d",
                 self.transactional_id, outcome, self.last_batch_id)
        return outcome

    def __call__(self, batch_df: Any, batch_id: int) -> None:
        """foreachBatch entry point (steps 2-5)."""
        if self._producer is None:
            self.recover()
        if batch_id <= self.last_batch_id:
            log.info("dual write %s: batch %d already applied (last %d), skipped",
                     self.transactional_id, batch_id, self.last_batch_id)
            return
        producer = self._fresh_producer()
        producer.begin_transaction()
        try:
            if self.to_log is not None:
                from oncestream.spark.sink import produce_batches

                table = self.to_log(batch_df).toArrow()
                produce_batches(producer, iter(table.to_batches()), self.topic)
            state = str(producer.prepare_transaction(_TIMEOUT_S))
        except BaseException:
            self._abort_quietly()
            raise
        step = {"batch_id": batch_id, "transactional_id": self.transactional_id, "state": state}
        self.observer.reached(DUAL_AFTER_PREPARE, step)
        try:
            with self.store.transaction() as tx:
                self.apply(tx, batch_df, batch_id)
                self.store.write_state(tx, self.transactional_id, DualWriteState(batch_id, state))
        except BaseException:
            # The database rolled back, so the batch is in neither place: abort the log side.
            self._abort_quietly()
            raise
        self.observer.reached(DUAL_AFTER_DB, step)
        producer.complete_transaction(state, _TIMEOUT_S)
        self.last_batch_id = batch_id

    def _fresh_producer(self) -> Any:
        """A producer initialized for this batch alone.

        A PreparedTxnState is (producer id, epoch). Without an epoch bump per transaction
        (Kafka's transaction version 2, KIP-890) two transactions of one producer session share
        it, and recovery could not tell this batch's transaction from the previous one. A new
        InitProducerId per batch bumps the epoch, so every batch's state is unique.
        """
        if self._used:
            self._producer.close(10)
            self._producer = two_phase_producer(self.bootstrap_servers, self.transactional_id,
                                                self.producer_config)
            held = init_keeping_prepared(self._producer)
            if held:
                # Another writer of our id prepared a transaction between our batches: continuing
                # would abort it blindly (or lose track of it); stop and let recovery decide.
                raise CommitResolutionError(f"a transaction {held} appeared under {self.transactional_id} mid-run")
        self._used = True
        return self._producer

    def _abort_quietly(self) -> None:
        try:
            self._producer.abort_transaction(_TIMEOUT_S)
        except Exception:  # the original error matters more; recovery aborts later
            log.exception("dual write %s: abort after a failed batch failed", self.transactional_id)

    def close(self) -> None:
        """Close the producer (a prepared transaction, if any, stays for recovery)."""
        if self._producer is not None:
            self._producer.close(10)
            self._producer = None


def dual_write(
    *,
    store: _Store,
    apply: ApplyFn,
    to_log: ToLogFn | None = None,
    options: Mapping[str, str] | None = None,
    bootstrap_servers: str | None = None,
    transactional_id: str | None = None,
    topic: str | None = None,
    producer_config: Mapping[str, Any] | None = None,
    observer: StepObserver | None = None,
) -> DualWriter:
    """A ``foreachBatch`` function writing each micro-batch atomically to the log and a database.

    ``apply(tx, batch_df, batch_id)`` changes the database inside the transaction that also stores
    the PreparedTxnState; ``to_log(batch_df)`` returns the rows for the log with Spark's Kafka sink
    columns (value, and optionally key, topic, partition, headers); ``topic`` is the default topic.
    ``options`` are the connector's write options (``kafka.bootstrap.servers``,
    ``kafka.transactional.id``, any other ``kafka.*`` producer property, ``topic``,
    ``stepObserver``); the keyword arguments override them (see the module docstring).
    ``observer`` is told when a batch reaches ``dual-after-prepare`` and ``dual-after-db``
    (``oncestream.spark.plugins.StepObserver``).
    """
    config: dict[str, Any] = {}
    if options:
        # Validated as the sink validates its options, so a bad value fails here, by name.
        parsed = sink_options({**options, "exactlyOnce": "true"})
        bootstrap_servers = bootstrap_servers or parsed.bootstrap_servers
        transactional_id = transactional_id or kafka_params(options).get("transactional.id")
        topic = topic or parsed.topic
        config.update(parsed.producer_config)
        if observer is None and parsed.step_observer is not None:
            observer = step_observer(parsed.step_observer)
    config.update(producer_config or {})
    if not bootstrap_servers:
        raise OptionError("dual_write needs kafka.bootstrap.servers (or bootstrap_servers=...)")
    if not transactional_id:
        raise OptionError("dual_write needs kafka.transactional.id (or transactional_id=...), "
                          "stable across restarts")
    return DualWriter(bootstrap_servers=bootstrap_servers, transactional_id=transactional_id, store=store,
                      apply=apply, to_log=to_log, topic=topic, producer_config=config, observer=observer)
