"""The write side: an exactly-once streaming sink (KIP-939 two-phase commit) and a batch sink.

Protocol of one micro-batch (exactlyOnce=true, the default)
-----------------------------------------------------------
The argument (who can fence whom, why nothing stalls, why it terminates) is in
docs/spark-exactly-once.md. Task (executor), for Spark partition p, attempt a of batch N of query q
(N from the local property ``streaming.sql.batchId``):
  1. Transactional id ``<prefix>-<q>-<N % ID_WINDOW>-<p>-<a>-<k>`` (prefix: ``kafka.transactional.id``
     or ``oncestream-spark``; k the first free alternative, normally 0). A bounded set per query;
     batch N's attempts and batch N+1's tasks never share an id, and an id is used again only
     after the batch that last used it is in the commit journal.
  1b. If the journal already records batch N, the attempt is stale (zombie, speculative loser,
     replay of a recorded batch): it touches no id and reports nothing.
  2. ``init_transactions(keep_prepared_txn=True)``, then read the journal again. Still stale:
     touch nothing (a transaction found under the id may be a later batch's), except completing
     one the record lists exactly. A transaction the record lists is completed; any other open
     one is left to the driver and the attempt moves to the next alternative id (it may be a
     sibling attempt's that Spark accepts). A task only ever aborts a transaction it began.
  3. begin, produce every row, ``prepare_transaction()``; the PreparedTxnState goes to the
     driver in the WriterCommitMessage. 3b: if the journal recorded batch N meanwhile without
     this transaction, abort it and report nothing.
Driver, ``commit(messages, batchId)`` (batch N+1's tasks start only after it returns):
  4. Read the query's last commit record R. Settle leftovers: every other open transaction of
     this query (failed attempts, earlier runs) is committed if R lists it, else aborted.
  5. If batchId <= R.batch_id the batch is a replay of one already in the log (the driver died
     after step 7 but before Spark wrote its own commit log): resolve the replay's transactions
     against R (they are not in it, so they abort) and return.
  6. Hold every winner's transaction (init with keep_prepared_txn=True, fencing the tasks) and
     check each held state equals the one reported; otherwise abort all and fail the batch.
  7. Append R' = {batchId, states} to ``__oncestream_spark_commits`` (acks=all): the commit
     point.
  8. Complete (commit) every held transaction; a holder fenced by a stale attempt's init holds the
     same transaction again and completes it.
  9. Abort what attempts of this batch opened after step 4 (speculative copies still running).
     Spark then writes its commit log entry.
``abort(messages, batchId)`` resolves the batch's transactions and the query's other open ones
against R (i.e. aborts them). If every task crashed, no message names the query: the open
transactions wait for the query's next commit after a restart (step 4), holding the last stable
offset of the partitions they wrote until then. A task that fails with an exception (rather than
crashing) aborts its own transaction before failing. A failed batch (non-streaming) write job's
``abort`` aborts the transactions its tasks reported and any other still open under the job's ids.

Crash cases: killed before 7 -> R is older, every transaction of the batch is aborted by step 4
of the replay and Spark replays the batch. Killed during or after 8 -> R lists the batch: the
rest of its transactions are committed by step 4 of the replay (or a task's step 2) and the replay
writes nothing (1b, 5). Spark's commit log can only hold the batch once 8 has finished, so it never
disagrees with R.

exactlyOnce=false: each task produces with an idempotent producer (acks=all) and flushes: at least
once, and works against brokers without KIP-939 (e.g. Tansu).

Every client here (task producers, the driver's holding producers, its journal and admin
connections) gets the query's ``kafka.*`` options; see ``options`` for the ones the sink owns.

The sink option ``stepObserver`` plugs in a ``StepObserver`` (``oncestream.spark.plugins``), told
around a task's prepare (step 3), before and after the commit record (7), around each commit of
step 8 and after step 9; the connector's fault-injection tests act through it.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from oncestream.client.producer.producer import Producer
from oncestream.spark.commit_journal import NO_COMMIT, CommitJournal, CommitRecord
from oncestream.spark.errors import (
    CommitResolutionError,
    OnceStreamSparkError,
    OptionError,
    TwoPhaseCommitUnsupportedError,
)
from oncestream.spark.log_client import LogClient
from oncestream.spark.options import SinkOptions
from oncestream.spark.plugins import (
    AFTER_COMPLETE,
    AFTER_RECORD,
    BEFORE_RECORD,
    TASK_AFTER_PREPARE,
    TASK_BEFORE_PREPARE,
    step_observer,
)
from oncestream.spark.txn_resolution import (
    HeldTransactions,
    Outcome,
    init_keeping_prepared,
    resolve_by_record,
    two_phase_producer,
)

log = logging.getLogger("oncestream.spark")

_TIMEOUT_S = 60.0
_BINARY_LIKE = ("binary", "string")
_TIMESTAMP_LIKE = ("timestamp", "timestamp_ntz", "double")


def _abort_quietly(producer, txn_id: str) -> None:
    try:
        producer.abort_transaction(_TIMEOUT_S)
    except Exception:  # the task's own error is the one to report
        log.exception("%s: could not abort after a failed write", txn_id)


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """What a write task reports: its prepared transaction (empty when it wrote nothing)."""

    query_id: str
    transactional_id: str | None
    state: str
    partition_id: int
    attempt: int
    records: int


# Micro-batch slots of the transactional ids: batch N's tasks use slot N % ID_WINDOW, so batch N's
# attempts and batch N+1's tasks never share an id, and an id returns only once the batch that
# last used it is in the commit journal (docs/spark-exactly-once.md).
ID_WINDOW = 2
# Ids one attempt may try when the first holds somebody else's open transaction (see step 2).
ID_ALTERNATIVES = 3
# The local property Spark's micro-batch execution sets to the batch id on every job of a batch
# (MicroBatchExecution.BATCH_ID_KEY); tasks, retries and speculative copies inherit it.
BATCH_ID_PROPERTY = "streaming.sql.batchId"


def transactional_id(prefix: str, query_id: str, slot: int, partition_id: int, attempt: int,
                     alternative: int) -> str:
    """The write task's transactional id (see the module docstring, step 1): one per batch slot,
    Spark partition, task attempt number and alternative, so at most
    ``ID_WINDOW x partitions x attempts x ID_ALTERNATIVES`` ids per query however many batches
    it runs."""
    return f"{prefix}-{query_id}-{slot}-{partition_id}-{attempt}-{alternative}"


def check_write_schema(schema: StructType, opts: SinkOptions) -> None:
    """Spark's Kafka sink rules: a value column (binary/string); key binary/string; a topic column
    unless the topic option is set; partition int; headers array<struct<key,value>>; timestamp a
    timestamp (or a double of epoch seconds, which Spark casts to one)."""
    fields = {f.name.lower(): f.dataType.typeName() for f in schema.fields}
    if "value" not in fields:
        raise OptionError("the data to write needs a 'value' column")
    for name in ("key", "value"):
        if name in fields and fields[name] not in _BINARY_LIKE:
            raise OptionError(f"column {name!r} must be binary or string, not {fields[name]}")
    if opts.topic is None and "topic" not in fields:
        raise OptionError("no topic: set the 'topic' option or give the data a 'topic' column")
    if "topic" in fields and fields["topic"] != "string":
        raise OptionError("column 'topic' must be a string")
    if "partition" in fields and fields["partition"] not in ("integer", "long", "short"):
        raise OptionError("column 'partition' must be an integer")
    if "headers" in fields and fields["headers"] != "array":
        raise OptionError("column 'headers' must be array<struct<key:string,value:binary>>")
    if "timestamp" in fields and fields["timestamp"] not in _TIMESTAMP_LIKE:
        raise OptionError(f"column 'timestamp' must be a timestamp or a double, not {fields['timestamp']}")


def _column(batch: pa.RecordBatch, name: str) -> list | None:
    index = batch.schema.get_field_index(name)
    return None if index < 0 else batch.column(index).to_pylist()


def _timestamps_ms(batch: pa.RecordBatch) -> list | None:
    """The ``timestamp`` column as epoch ms (None: a null timestamp, the producer's time), or None
    without one. Spark's rule: a timestamp is truncated to ms, a double is epoch seconds."""
    index = batch.schema.get_field_index("timestamp")
    if index < 0:
        return None
    column = batch.column(index)
    if pa.types.is_timestamp(column.type):
        raw = column.cast(pa.int64()).to_pylist()
        unit = column.type.unit
        if unit == "ms":
            return raw
        if unit == "s":
            return [None if v is None else v * 1000 for v in raw]
        per_ms = 1000 if unit == "us" else 1_000_000
        return [None if v is None else v // per_ms for v in raw]
    if pa.types.is_floating(column.type):
        return [None if v is None else int(v * 1000) for v in column.to_pylist()]
    raise OptionError(f"column 'timestamp' must be a timestamp or a double, not {column.type}")


def produce_batches(producer, batches: Iterator[pa.RecordBatch], topic_option: str | None) -> int:
    """Produce every row of the Arrow batches (Spark's Kafka sink columns); returns the row count.
    A row's ``timestamp`` (when the data has the column and the row's is not null) becomes the
    record's timestamp, epoch 0 included; a negative one is refused, as Kafka's producer refuses it."""
    count = 0
    for batch in batches:
        n = batch.num_rows
        if n == 0:
            continue
        values = _column(batch, "value")
        if values is None:  # check_write_schema refuses such a schema before any task runs
            raise OptionError("the data to write has no 'value' column")
        keys = _column(batch, "key") or [None] * n
        # No topic column and no option: every row is refused below, as a null topic is.
        topics = [topic_option] * n if topic_option else (_column(batch, "topic") or [None] * n)
        partitions = _column(batch, "partition") or [None] * n
        headers = _column(batch, "headers") or [None] * n
        timestamps = _timestamps_ms(batch) or [None] * n
        produce = producer.produce
        for i in range(n):
            topic = topics[i]
            if topic is None:
                raise OptionError("a row has a null topic and no 'topic' option is set")
            part = partitions[i]
            hdrs = headers[i]
            ts = timestamps[i]
            if ts is not None and ts < 0:
                raise OnceStreamSparkError(f"Invalid timestamp: {ts}. Timestamp should always be non-negative or null.")
            produce(topic, values[i], keys[i], -1 if part is None else part,
                    headers=[(h["key"], h["value"]) for h in hdrs] if hdrs else None,
                    timestamp=0 if ts is None else ts, exact_timestamp=ts is not None)
        count += n
    return count


def _require_two_phase_commit(opts: SinkOptions) -> None:
    with LogClient(opts.bootstrap_servers, client_id="oncestream-spark-check", settings=opts.client) as client:
        if not client.supports_two_phase_commit():
            raise TwoPhaseCommitUnsupportedError(
                f"the broker at {opts.bootstrap_servers} does not support KIP-939 two-phase commit "
                "(InitProducerId v6), which the exactly-once sink needs; set the option "
                "exactlyOnce=false for an at-least-once sink")


class _StaleAttempt(Exception):
    """This attempt's batch is already in the commit journal: it must write nothing."""


class _LazyJournal:
    """The commit journal as one write attempt reads it: connected on first use, closed once."""

    def __init__(self, opts: SinkOptions) -> None:
        self._opts = opts
        self._journal: CommitJournal | None = None

    def last(self, query_id: str) -> CommitRecord | None:
        """The query's newest commit record, read now."""
        if self._journal is None:
            self._journal = CommitJournal(self._opts.bootstrap_servers, settings=self._opts.client)
        return self._journal.last(query_id)

    def committed_batch(self, query_id: str) -> int:
        """The last batch id the journal records for the query (``NO_COMMIT`` if none)."""
        record = self.last(query_id)
        return NO_COMMIT if record is None else record.batch_id

    def close(self) -> None:
        """Close the journal's connection if one was opened."""
        if self._journal is not None:
            self._journal.close()
            self._journal = None


class _TaskWriter:
    """The executor side shared by the streaming and batch sinks."""

    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts

    def write_task(self, batches: Iterator[pa.RecordBatch], query_id: str,
                   streaming: bool = False) -> SinkCommitMessage:
        """Steps 1-3 of the protocol for this task (or a plain flush when exactlyOnce=false).
        A streaming task learns its batch id from the local property Spark's micro-batch
        execution sets on every job of the batch (``streaming.sql.batchId``)."""
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is None:
            raise OnceStreamSparkError("the sink's write runs only inside a Spark task")
        batch_id: int | None = None
        if streaming:
            raw = ctx.getLocalProperty(BATCH_ID_PROPERTY)
            if raw is None:
                raise OnceStreamSparkError(f"no {BATCH_ID_PROPERTY} in the task context")
            batch_id = int(raw)
        return self.write_attempt(batches, query_id, ctx.partitionId(), ctx.attemptNumber(),
                                  batch_id=batch_id)

    def write_attempt(self, batches: Iterator[pa.RecordBatch], query_id: str, partition_id: int,
                      attempt: int, *, batch_id: int | None = None) -> SinkCommitMessage:
        """Steps 1-3 for one attempt of one write task. ``batch_id`` is the micro-batch (None for
        a batch write job, whose ids are unique to the job)."""
        if not self.opts.exactly_once:
            count = self._write_at_least_once(batches)
            return SinkCommitMessage(query_id, None, "", partition_id, attempt, count)
        slot = 0 if batch_id is None else batch_id % ID_WINDOW
        prefix = self.opts.transactional_id_prefix
        txn_id = transactional_id(prefix, query_id, slot, partition_id, attempt, 0)
        producer = None
        began = False
        journal = _LazyJournal(self.opts)

        def start() -> None:
            nonlocal producer, began, txn_id
            # Step 1b: a batch already in the journal needs nothing from this attempt (a zombie, a
            # speculative loser, or the replay of a recorded batch). Checked before touching any
            # id, so that such an attempt does not even fence the id's current user.
            if batch_id is not None and journal.committed_batch(query_id) >= batch_id:
                raise _StaleAttempt
            for alternative in range(ID_ALTERNATIVES):
                txn_id = transactional_id(prefix, query_id, slot, partition_id, attempt, alternative)
                producer = two_phase_producer(self.opts.bootstrap_servers, txn_id, self.opts.producer_config)
                held = init_keeping_prepared(producer)
                # Step 2, decided on a journal read made *after* the init: a later batch can only
                # have a transaction under the id if this batch is already recorded, and the
                # read shows that (docs/spark-exactly-once.md).
                record = journal.last(query_id) if (held or batch_id is not None) else None
                listed = bool(held) and record is not None and record.txns.get(txn_id) == held
                if listed:
                    # A recorded batch's transaction (its driver died while completing): the
                    # record decided it, so complete it.
                    producer.complete_transaction(held, _TIMEOUT_S)
                    log.info("%s: committed leftover transaction %s of batch %d", txn_id, held,
                             record.batch_id if record else NO_COMMIT)
                if batch_id is not None and record is not None and record.batch_id >= batch_id:
                    raise _StaleAttempt  # the batch committed while this attempt waited
                if not held or listed:
                    producer.begin_transaction()
                    began = True
                    return
                # Something else's open transaction: an earlier run's leftover, or a sibling
                # attempt of this batch from another stage attempt (same attempt number) whose
                # result Spark may accept. Not this attempt's to decide: the driver settles it
                # (step 4 or 9); this attempt moves to the next alternative id.
                log.info("%s: holds open transaction %s; trying the next id", txn_id, held)
                producer.close(10)
                producer = None
            raise OnceStreamSparkError(
                f"{txn_id}: all {ID_ALTERNATIVES} transactional ids of this attempt hold open "
                "transactions; the driver settles them at the next commit")

        prepared = False
        try:
            try:
                count = self._produce_txn(batches, start, lambda: producer)
            except _StaleAttempt:
                for _batch in batches:  # Spark streams the input to the worker: drain it
                    pass
                log.info("%s: batch %s is already committed; this attempt writes nothing", txn_id, batch_id)
                return SinkCommitMessage(query_id, None, "", partition_id, attempt, 0)
            if producer is None:
                return SinkCommitMessage(query_id, None, "", partition_id, attempt, 0)
            observer = step_observer(self.opts.step_observer)
            step = {"query_id": query_id, "batch_id": batch_id, "partition": partition_id, "attempt": attempt,
                    "transactional_id": txn_id}
            observer.reached(TASK_BEFORE_PREPARE, step)
            state = producer.prepare_transaction(_TIMEOUT_S)
            prepared = True
            observer.reached(TASK_AFTER_PREPARE, {**step, "state": str(state)})
            if batch_id is not None and self._lost_race(journal, producer, txn_id, str(state), query_id, batch_id):
                return SinkCommitMessage(query_id, None, "", partition_id, attempt, 0)
            return SinkCommitMessage(query_id, txn_id, str(state), partition_id, attempt, count)
        except BaseException:
            # A task that fails with an exception (not a crash) aborts its own transaction at once,
            # so it does not hold the LSO of the output partitions. A crash leaves it open, and
            # the driver settles it (step 4 or 9, or the next batch's step 4). Only a
            # transaction this attempt began is aborted: before that, the producer may hold one
            # it found under the id, which is not this attempt's to decide.
            if producer is not None and began and not prepared:
                _abort_quietly(producer, txn_id)
            raise
        finally:
            journal.close()
            if producer is not None:
                producer.close(10)

    def _lost_race(self, journal: _LazyJournal, producer, txn_id: str, state: str, query_id: str, batch_id: int) -> bool:
        """Step 3b: if the batch was recorded while this attempt wrote (a speculative loser, or a
        zombie), its transaction is not in the record and nobody would settle it until the next
        batch: abort it now so it does not hold the last stable offset. True if it was aborted."""
        record = journal.last(query_id)
        if record is None or record.batch_id < batch_id or record.txns.get(txn_id) == state:
            return False
        producer.abort_transaction(_TIMEOUT_S)
        log.info("%s: batch %d was committed without this attempt; aborted %s", txn_id, batch_id, state)
        return True

    def _produce_txn(self, batches, start, get_producer) -> int:
        """Produce in a transaction that ``start`` opens at the first row (none for no rows)."""
        count = 0
        for batch in batches:
            if batch.num_rows == 0:
                continue
            if count == 0:
                start()
            count += produce_batches(get_producer(), iter((batch,)), self.opts.topic)
        return count

    def _write_at_least_once(self, batches: Iterator[pa.RecordBatch]) -> int:
        conf = {"linger.ms": 5, "batch.size": 1 << 20, **self.opts.producer_config,
                "bootstrap.servers": self.opts.bootstrap_servers, "acks": "all",
                "enable.idempotence": True}
        conf.pop("isolation.level", None)
        errors: list[object] = []
        lock = threading.Lock()

        def delivered(err, _msg) -> None:
            if err is not None:
                with lock:
                    errors.append(err)

        conf["on_delivery"] = delivered
        producer = Producer(conf)
        try:
            count = produce_batches(producer, batches, self.opts.topic)
            left = producer.flush(_TIMEOUT_S)
        finally:
            producer.close(10)
        if left or errors:
            raise OnceStreamSparkError(f"{left} records unacknowledged, first error: "
                                       f"{errors[0] if errors else None}")
        return count


def require_outcomes(outcomes: dict[str, Outcome], allowed: tuple[Outcome, ...], what: str) -> None:
    """Raise ``CommitResolutionError`` unless every transaction of a recorded commit ended as
    ``allowed``: after the commit record names them, anything else (an abort) means data the
    record promises is gone, and Spark must not mark the batch done. A typed error, not an
    ``assert``, because ``python -O`` strips asserts and this check guards data."""
    wrong = {t: o.value for t, o in sorted(outcomes.items()) if o not in allowed}
    if wrong:
        raise CommitResolutionError(f"{what}: transactions did not commit as recorded: {wrong}")


class _DriverCommit:
    """The driver side of the exactly-once protocol (steps 4-8 of the module docstring)."""

    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts

    def _query_id(self, messages: list[SinkCommitMessage]) -> str | None:
        ids = {m.query_id for m in messages}
        if len(ids) > 1:
            # Committing them under one record would settle one query's transactions by another's.
            raise CommitResolutionError(f"messages of several queries in one batch: {sorted(ids)}")
        return next(iter(ids), None)

    def leftovers(self, query_id: str, exclude: set[str]) -> list[str]:
        """Open transactions of this query's ids that are not in ``exclude`` (ListTransactions)."""
        prefix = f"{self.opts.transactional_id_prefix}-{query_id}-"
        with LogClient(self.opts.bootstrap_servers, client_id="oncestream-spark-driver",
                       settings=self.opts.client) as client:
            listed = client.list_transactions()
        if listed is None:
            log.warning("broker lacks ListTransactions: leftover transactions of ids no longer in use "
                        "are settled only when their id is used again")
            return []
        return sorted(t for t, _pid, state in listed
                      if t.startswith(prefix) and state == "Ongoing" and t not in exclude)

    def commit_stream(self, messages: list[SinkCommitMessage | None], batch_id: int) -> None:
        """Steps 4-8: settle leftovers, drop a replay, hold and check, record, complete."""
        written = [m for m in messages if m is not None]
        query_id = self._query_id(written)
        if query_id is None:
            return
        winners = {m.transactional_id: m.state for m in written if m.transactional_id}
        opts = self.opts
        observer = step_observer(opts.step_observer)
        step = {"query_id": query_id, "batch_id": batch_id, "transactions": dict(winners)}
        journal = CommitJournal(opts.bootstrap_servers, settings=opts.client)
        try:
            with HeldTransactions(opts.bootstrap_servers, opts.producer_config) as held, \
                    ThreadPoolExecutor(2) as pool:
                # Independent round trips, in parallel: the last record, the open transactions,
                # and holding the winners (step 6's init, fencing the tasks).
                previous_future = pool.submit(journal.last, query_id)
                stale_future = pool.submit(self.leftovers, query_id, set(winners))
                states = held.open(winners)
                previous, stale = previous_future.result(), stale_future.result()
                recorded = previous.txns if previous is not None else {}
                # Step 4: settle what earlier runs and failed attempts left open.
                if stale:
                    outcomes = resolve_by_record(opts.bootstrap_servers, stale, recorded, opts.producer_config)
                    log.info("batch %d: settled leftover transactions %s", batch_id, outcomes)
                # Step 5: a replay of a batch whose output is already committed.
                if previous is not None and batch_id <= previous.batch_id:
                    outcomes = held.finish(recorded)
                    log.warning("batch %d was already committed (last committed batch %d): its replay's "
                                "transactions were dropped: %s", batch_id, previous.batch_id, outcomes)
                    return
                if not winners:
                    return
                # Step 6: check the held states.
                wrong = sorted(t for t, s in winners.items() if states[t] != s)
                if wrong:
                    held.finish({})
                    raise CommitResolutionError(
                        f"batch {batch_id}: transactions {wrong} are no longer the prepared ones the "
                        "tasks reported (a concurrent attempt fenced them?); the batch was aborted")
                observer.reached(BEFORE_RECORD, step)
                # Step 7: the commit point.
                journal.append(CommitRecord(query_id, batch_id, winners))
                observer.reached(AFTER_RECORD, step)
                # Step 8: complete.
                outcomes = held.finish(winners, observe=lambda name, txn_id: observer.reached(
                    name, {**step, "transactional_id": txn_id}))
            require_outcomes(outcomes, (Outcome.COMMITTED, Outcome.NOTHING_OPEN), f"batch {batch_id}")
            # Step 9: attempts of this batch that opened a transaction after step 4 listed (a
            # speculative copy still running, a zombie) are settled against the new record now,
            # so nothing of the batch holds the last stable offset while the query idles.
            late = self.leftovers(query_id, set(winners))
            if late:
                outcomes = resolve_by_record(opts.bootstrap_servers, late, winners, opts.producer_config)
                log.info("batch %d: settled late attempts %s", batch_id, outcomes)
            observer.reached(AFTER_COMPLETE, step)
        finally:
            journal.close()

    def abort_stream(self, messages: list[SinkCommitMessage | None], batch_id: int) -> None:
        """The batch failed: resolve its transactions and the query's other open ones against the
        last commit record (so they abort, unless the record lists them)."""
        written = [m for m in messages if m is not None]
        query_id = self._query_id(written)
        if query_id is None:
            # Every task failed, so no message names the query: its open transactions (tasks that
            # died after prepare) are settled by the query's next commit, after a restart.
            log.warning("batch %d aborted with no task result; open transactions of its tasks are "
                        "settled at the query's next commit", batch_id)
            return
        journal = CommitJournal(self.opts.bootstrap_servers, settings=self.opts.client)
        try:
            previous = journal.last(query_id)
        finally:
            journal.close()
        recorded = previous.txns if previous is not None else {}
        ids = {m.transactional_id for m in written if m.transactional_id}
        ids.update(self.leftovers(query_id, set()))
        outcomes = resolve_by_record(self.opts.bootstrap_servers, ids, recorded, self.opts.producer_config)
        log.warning("batch %d aborted: %s", batch_id, outcomes)

    def commit_job(self, messages: list[SinkCommitMessage | None]) -> None:
        """A batch (non-streaming) write: commit the winners, abort failed attempts' leftovers."""
        written = [m for m in messages if m is not None]
        query_id = self._query_id(written)
        if query_id is None:
            return
        winners = {m.transactional_id: m.state for m in written if m.transactional_id}
        opts = self.opts
        stale = self.leftovers(query_id, set(winners))
        if stale:
            resolve_by_record(opts.bootstrap_servers, stale, {}, opts.producer_config)
        with HeldTransactions(opts.bootstrap_servers, opts.producer_config) as held:
            states = held.open(winners)
            wrong = sorted(t for t, s in winners.items() if states[t] != s)
            if wrong:
                held.finish({})
                raise CommitResolutionError(f"write job: transactions {wrong} were fenced; aborted")
            outcomes = held.finish(winners)
        require_outcomes(outcomes, (Outcome.COMMITTED,), "write job")

    def abort_job(self, messages: list[SinkCommitMessage | None], job_id: str) -> None:
        """Abort every transaction of a failed batch write job: those its tasks reported and any
        other still open under the job's ids (attempts that died after preparing, tasks whose
        result Spark dropped when it gave up on the job)."""
        ids = {m.transactional_id for m in messages if m is not None and m.transactional_id}
        ids.update(self.leftovers(job_id, set()))
        if ids:
            outcomes = resolve_by_record(self.opts.bootstrap_servers, ids, {}, self.opts.producer_config)
            log.warning("write job %s aborted: %s", job_id, outcomes)


class OnceStreamStreamWriter(DataSourceStreamArrowWriter):
    """Spark's streaming writer: tasks prepare, the driver commits (exactly once by default)."""

    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        check_write_schema(schema, opts)
        if opts.exactly_once:
            _require_two_phase_commit(opts)
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        """Executor: produce this task's rows in a prepared transaction."""
        from pyspark import TaskContext

        ctx = TaskContext.get()
        query_id = ctx.getLocalProperty("sql.streaming.queryId") if ctx is not None else None
        if not query_id:
            raise OnceStreamSparkError("no streaming query id in the task context")
        return _TaskWriter(self.opts).write_task(iterator, query_id, streaming=True)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Driver: record the batch, then complete its transactions (or drop a replay)."""
        if self.opts.exactly_once:
            _DriverCommit(self.opts).commit_stream(messages, batchId)  # type: ignore[arg-type]

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Driver: the batch failed; abort what its tasks prepared."""
        if self.opts.exactly_once:
            _DriverCommit(self.opts).abort_stream(messages, batchId)  # type: ignore[arg-type]


class OnceStreamBatchWriter(DataSourceArrowWriter):
    """Spark's batch writer: all rows of the job become visible together, or none do."""

    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        check_write_schema(schema, opts)
        if opts.exactly_once:
            _require_two_phase_commit(opts)
        self.opts = opts
        self.job_id = f"job-{uuid.uuid4()}"  # pickled to the tasks and to the commit

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        """Executor: produce this task's rows in a prepared transaction."""
        return _TaskWriter(self.opts).write_task(iterator, self.job_id)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Driver: commit every task's transaction."""
        if self.opts.exactly_once:
            _DriverCommit(self.opts).commit_job(messages)  # type: ignore[arg-type]

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Driver: the job failed; abort what its tasks prepared."""
        if self.opts.exactly_once:
            _DriverCommit(self.opts).abort_job(messages, self.job_id)  # type: ignore[arg-type]
