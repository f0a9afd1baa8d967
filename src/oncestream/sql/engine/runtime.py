"""Persistent and push queries on one SparkSession (a SQL-server node's query runtime).

- ``start_persistent``: compile (``oncestream.sql.engine.compile``), serialize for the sink's formats,
  write with our exactly-once sink ``format("oncestream")``; checkpoint at
  ``<checkpoint_root>/<service_id>/<query_id>``; the sink's transactional-id prefix is derived from
  the service id and query id, so the same query restarted on another node (from the same
  checkpoint) fences the writer it replaces.
- A query that fails (at compile time or while running) shows ``ERROR`` with its error in
  ``status``; nothing here raises out of a running query into the node. A broker that refuses the
  sink's KIP-939 two-phase commit (``two_phase_check``) fails the query at start, before Spark.
- ``stop_persistent`` waits (bounded) for the running micro-batch to end, then stops: an
  interrupted batch would only be aborted and replayed, but a clean boundary is cheaper.
- ``start_push``: the same plan, rows handed from Spark's ``foreachBatch`` to a bounded,
  thread-safe queue read by ``PushQuery.rows()`` (async); ``LIMIT n`` ends it.
- ``insert_values``: one row serialized with ``oncestream.sql.engine.serde`` and produced with our
  idempotent producer (acks=all), flushed before returning.

State table of a persistent query (``QueryStatus.state``):

    PENDING     -> RUNNING (Spark query started) | ERROR (compile/start failed)
    RUNNING     -> ERROR (Spark query failed) | NOT_RUNNING (stopped)
    ERROR       -> PENDING (started again) | NOT_RUNNING (stopped)
    NOT_RUNNING -> PENDING (started again)
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import logging
import queue
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from oncestream.sql.engine.insert_values import RowWriter
from oncestream.sql.engine.interface import ColumnHeader
from oncestream.sql.engine.serde import layout_for, layout_of
from oncestream.sql.engine.two_phase_check import two_phase_commit_refusal
from oncestream.sql.errors import KsqlError, StatementError
from oncestream.sql.language.catalog import Column, QueryInfo, SourceInfo
from oncestream.sql.language.sql_ast import Query, SourceKind, WindowKind
from oncestream.sql.language.types import BaseType

log = logging.getLogger("oncestream.sql.engine.runtime")

RUNNING = "RUNNING"
ERROR = "ERROR"
PENDING = "PENDING"
NOT_RUNNING = "NOT_RUNNING"

_TRANSITIONS = {
    PENDING: {RUNNING, ERROR, NOT_RUNNING},
    RUNNING: {ERROR, NOT_RUNNING},
    ERROR: {PENDING, NOT_RUNNING},
    NOT_RUNNING: {PENDING},
}

STOP_WAIT_S = 30.0
PUSH_QUEUE_ROWS = 10_000
_END = object()


def spark_session_config() -> dict[str, str]:
    """Spark settings a SQL-server node's SparkSession needs: aggregation and join state in
    RocksDB (issue 12), ksqlDB's null-on-error expression semantics (ANSI off: a bad CAST gives
    null instead of failing the query), UTC for timestamp arithmetic, few shuffle partitions (a
    stateful query runs one task per shuffle partition per micro-batch; the number is fixed in a
    query's checkpoint), and a JSON object with one name twice (or twice up to case) read as its
    last value (Jackson's and Python's rule) instead of failing the query's task."""
    return {
        "spark.sql.streaming.stateStore.providerClass":
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        "spark.sql.ansi.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "4",
        # Stream-table joins feed stateful operators from applyInPandasWithState; Spark's check
        # for chained stateful operators refuses plans it cannot prove correct in append mode.
        "spark.sql.streaming.statefulOperator.checkCorrectness.enabled": "false",
        "spark.sql.mapKeyDedupPolicy": "LAST_WIN",
    }


def sink_topic_config(sink: SourceInfo) -> dict[str, str]:
    """Topic configs the sink's topic needs when the node creates it: a table's topic is its
    changelog (compacted, keyed by the primary key)."""
    if sink.kind is SourceKind.TABLE:
        return {"cleanup.policy": "compact"}
    return {"cleanup.policy": "delete"}


@dataclass(frozen=True)
class RuntimeSettings:
    """Where queries read and write, and where their checkpoints live."""

    bootstrap_servers: str
    checkpoint_root: str
    service_id: str
    client_properties: dict[str, str] = field(default_factory=dict)
    trigger_interval_ms: int = 200
    push_queue_rows: int = PUSH_QUEUE_ROWS
    max_offsets_per_trigger: int | None = None


@dataclass(frozen=True)
class QueryStatus:
    """A persistent query's state on this node and, for ERROR, why."""

    state: str
    error: str | None = None


def checkpoint_location(settings: RuntimeSettings, query_id: str) -> str:
    """``<checkpoint_root>/<service_id>/<query_id>``."""
    return f"{settings.checkpoint_root.rstrip('/')}/{settings.service_id}/{query_id}"


def transactional_prefix(settings: RuntimeSettings, query_id: str) -> str:
    """The sink's transactional-id prefix: one per (service, query), whichever node runs it."""
    return f"oncestream-sql-{settings.service_id}-{query_id}"


def _query_of(analyzed: Any, query: Query | None) -> Query:
    found = query if query is not None else getattr(analyzed, "query", None)
    if found is None:
        raise StatementError("the analyzed query does not carry its query")
    return found


@dataclass
class _Persistent:
    state: str
    error: str | None = None
    handle: Any = None


class QueryRuntime:
    """Runs a node's persistent and push queries on ``spark`` (see the module docstring)."""

    def __init__(self, spark: Any, settings: RuntimeSettings) -> None:
        import oncestream.spark

        oncestream.spark.register(spark)
        self.spark = spark
        self.settings = settings
        self._lock = threading.RLock()
        self._queries: dict[str, _Persistent] = {}
        self._pushes: dict[str, PushQuery] = {}
        self._inserts = RowWriter(settings.bootstrap_servers, settings.client_properties)

    # -- persistent queries ---------------------------------------------------------------

    def _set(self, query_id: str, state: str, error: str | None = None, handle: Any = None) -> None:
        with self._lock:
            entry = self._queries.get(query_id)
            if entry is None:
                self._queries[query_id] = _Persistent(state, error, handle)
                return
            if state != entry.state and state not in _TRANSITIONS[entry.state]:
                raise KsqlError(f"query {query_id}: illegal transition {entry.state} -> {state}")
            entry.state, entry.error = state, error
            if handle is not None or state in (NOT_RUNNING, ERROR):
                entry.handle = handle

    def _read_settings(self, properties: Mapping[str, Any]) -> Any:
        from oncestream.sql.engine.compile.sources import ReadSettings, starting_offsets

        return ReadSettings(self.settings.bootstrap_servers, dict(self.settings.client_properties),
                            starting_offsets(properties), self.settings.max_offsets_per_trigger)

    def start_persistent(self, info: QueryInfo, analyzed: Any, sink: SourceInfo,
                         properties: Mapping[str, Any] | None = None) -> None:
        """Start ``info``'s query writing to ``sink``. Failures are recorded as ERROR (see
        ``status``), never raised: the node goes on with its other queries."""
        from oncestream.sql.engine.compile.plan import compile_query
        from oncestream.sql.engine.compile.sources import kafka_options
        from oncestream.sql.engine.compile.update_sink import batch_writer

        query_id = info.query_id
        # status() first: a query whose Spark query died is still RUNNING here until looked at.
        if self.status(query_id).state in (RUNNING, PENDING) and query_id in self._queries:
            return
        self._set(query_id, PENDING)
        refusal = self._two_phase_commit_refusal()
        if refusal is not None:
            # The sink could never write: ERROR now, not RUNNING until the first row fails.
            log.warning("query %s cannot start: %s", query_id, refusal)
            self._set(query_id, ERROR, refusal)
            return
        try:
            self._activate_session()
            compiled = compile_query(self.spark, _query_of(analyzed, info.query), analyzed,
                                     self._read_settings(properties or {}))
            layout = layout_for(compiled.columns, sink, window=compiled.window)
            if compiled.window is None and sink.window is not None:
                layout = layout_of(sink)
            # ksqlDB registers a C*AS sink's schemas when the query starts, not at its first record.
            for codec in (layout.key_codec, layout.value_codec):
                if codec is not None:
                    codec.register_sink_schema()
            options = kafka_options(self.settings.bootstrap_servers, self.settings.client_properties)
            options["topic"] = sink.topic
            options["kafka.transactional.id"] = transactional_prefix(self.settings, query_id)
            writer = compiled.records(layout, *_sink_timestamp(sink, query_id)).writeStream
            if compiled.output_mode == "update":
                # The connector is append-only as a streaming sink (Spark's rule for Python data
                # sources); update-mode results go through its writer from foreachBatch.
                time_windowed = compiled.window is not None and compiled.window.kind is not WindowKind.SESSION
                writer = writer.foreachBatch(batch_writer(options, time_windowed=time_windowed))
            else:
                writer = writer.format("oncestream").options(**options)
            configured = (writer.option("checkpointLocation", checkpoint_location(self.settings, query_id))
                          .outputMode(compiled.output_mode).queryName(_spark_name(query_id))
                          .trigger(processingTime=f"{self.settings.trigger_interval_ms} milliseconds"))
            handle = configured.start()
        except Exception as e:  # noqa: BLE001 - any failure becomes the query's ERROR status
            log.warning("query %s failed to start: %s", query_id, e)
            self._set(query_id, ERROR, _error_text(e))
            return
        self._set(query_id, RUNNING, handle=handle)

        def start_again() -> Any:
            self._activate_session()   # in the watcher's own thread
            return configured.start()

        threading.Thread(target=self._restart_after_start_failure, args=(query_id, handle, start_again),
                         name=f"start-watch-{query_id}", daemon=True).start()

    def _activate_session(self) -> None:
        """Make the node's session the active one of the calling thread's JVM thread: queries are
        started from the callers' own threads, which have none, and without one
        DataStreamWriter.start does not find format("oncestream") (DATA_SOURCE_NOT_FOUND)."""
        self.spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(self.spark._jsparkSession)

    def _restart_after_start_failure(self, query_id: str, handle: Any, start_spark: Callable[[], Any],
                                     sleep: Callable[[float], None] = time.sleep) -> None:
        """Wait for ``handle``'s query to end; if Spark failed to start its Python process
        (``is_spark_start_failure``; at any point, a batch already written included), show it
        as ERROR with that error, pause (START_RETRY_BACKOFF_MS, doubling up to
        START_RETRY_BACKOFF_MAX_MS; back to the first pause once a run made progress) and start it
        again from its checkpoint, for as long as nobody stopped or restarted it meanwhile: ksqlDB
        restarts its failed persistent queries with backoff the same way (ERROR in SHOW QUERIES
        meanwhile). A batch that failed so is written again by the restarted run, exactly once (the
        sink's recovery after a driver crash). ``sleep`` is the pause (a seam for tests). Any other
        end (a stop, another failure) leaves the query as ``status`` says."""
        backoff_ms = START_RETRY_BACKOFF_MS
        while True:
            try:
                handle.awaitTermination()
            except Exception:  # noqa: BLE001 - the failure is read from handle.exception() below
                pass
            failure = handle.exception()
            error = _error_text(failure) if failure is not None else None
            if not is_spark_start_failure(error):
                return
            if handle.lastProgress is not None:
                backoff_ms = START_RETRY_BACKOFF_MS
            with self._lock:
                entry = self._queries.get(query_id)
                if entry is None or entry.handle is not handle or entry.state not in (RUNNING, ERROR):
                    return  # stopped or started again meanwhile
                log.warning("query %s: Spark did not start its Python process (%s); starting it again in %d ms",
                            query_id, error, backoff_ms)
                self._set(query_id, ERROR, error)
            sleep(backoff_ms / 1000)
            backoff_ms = min(2 * backoff_ms, START_RETRY_BACKOFF_MAX_MS)
            with self._lock:
                now = self._queries.get(query_id)
                if now is not entry or now.state != ERROR or now.handle is not None:
                    return  # stopped, dropped or started again during the pause
                self._set(query_id, PENDING)
            try:
                handle = start_spark()
            except Exception as e:  # noqa: BLE001 - any failure becomes the query's ERROR status
                log.warning("query %s failed to start again: %s", query_id, e)
                with self._lock:
                    if entry.state == PENDING:
                        self._set(query_id, ERROR, _error_text(e))
                return
            with self._lock:
                stopped = entry.state != PENDING   # stopped while Spark started it
                if not stopped:
                    self._set(query_id, RUNNING, handle=handle)
            if stopped:
                _stop_at_boundary(handle)   # not under the lock: it waits for a running batch
                return

    def _two_phase_commit_refusal(self) -> str | None:
        """Why the broker refuses the exactly-once sink's two-phase commit (None: it grants it, or
        could not be asked now: then the query starts and Spark's retries meet the broker)."""
        try:
            return two_phase_commit_refusal(self.settings.bootstrap_servers, self.settings.client_properties,
                                            self.settings.service_id)
        except Exception as e:  # noqa: BLE001 - inconclusive: the query's own start and retries decide
            log.info("two-phase commit check inconclusive: %s: %s", type(e).__name__, e)
            return None

    def stop_persistent(self, query_id: str) -> None:
        """Stop a query at a micro-batch boundary (waiting up to STOP_WAIT_S for the running one)."""
        with self._lock:
            entry = self._queries.get(query_id)
        if entry is None:
            return
        handle = entry.handle
        if handle is not None:
            _stop_at_boundary(handle)
        self._set(query_id, NOT_RUNNING)

    def status(self, query_id: str) -> QueryStatus:
        """RUNNING, ERROR (with the error), PENDING or NOT_RUNNING (unknown queries too)."""
        with self._lock:
            entry = self._queries.get(query_id)
            if entry is None:
                return QueryStatus(NOT_RUNNING)
            if entry.state == RUNNING and entry.handle is not None and not entry.handle.isActive:
                failure = entry.handle.exception()
                if failure is not None:
                    entry.state, entry.error = ERROR, _error_text(failure)
                else:
                    entry.state = NOT_RUNNING
            return QueryStatus(entry.state, entry.error)

    def running(self) -> list[str]:
        """Ids of the persistent queries running on this node."""
        with self._lock:
            ids = list(self._queries)
        return [q for q in ids if self.status(q).state == RUNNING]

    def progress(self, query_id: str) -> list[dict[str, Any]]:
        """Spark's recent progress reports of a persistent query (empty when not running)."""
        with self._lock:
            entry = self._queries.get(query_id)
        if entry is None or entry.handle is None:
            return []
        return list(entry.handle.recentProgress)

    # -- push queries ------------------------------------------------------------------------

    def start_push(self, analyzed: Any, properties: Mapping[str, Any] | None = None, *,
                   query: Query | None = None) -> PushQuery:
        """Start a push query (``SELECT ... EMIT CHANGES [LIMIT n]``): rows arrive on
        ``PushQuery.rows()``; ``close()`` stops it."""
        from oncestream.sql.engine.compile.plan import compile_query

        parsed = _query_of(analyzed, query)
        compiled = compile_query(self.spark, parsed, analyzed, self._read_settings(properties or {}))
        push = PushQuery(f"transient_{uuid.uuid4().hex[:16]}", compiled.columns, parsed.limit,
                         self.settings.push_queue_rows)
        frame = _push_frame(compiled.rows(), compiled.columns)
        push.start(frame, compiled.output_mode, self.settings.trigger_interval_ms)
        with self._lock:
            self._pushes[push.query_id] = push
        return push

    def push_query(self, query_id: str) -> PushQuery | None:
        with self._lock:
            return self._pushes.get(query_id)

    # -- INSERT VALUES -----------------------------------------------------------------------

    def insert_values(self, sink: SourceInfo, row: Mapping[str, Any]) -> None:
        """Write one row to ``sink``'s topic in its formats (``insert_values.RowWriter``: no Spark)."""
        self._inserts.insert_values(sink, row)

    def stop_all(self) -> None:
        """Stop every push and persistent query (node shutdown)."""
        with self._lock:
            pushes = list(self._pushes.values())
            self._pushes.clear()
            ids = list(self._queries)
        for push in pushes:
            push.close_sync()
        for query_id in ids:
            self.stop_persistent(query_id)
        self._inserts.close()


def _sink_timestamp(sink: SourceInfo, query_id: str) -> tuple[Column | None, str | None]:
    """The output column (and its TIMESTAMP_FORMAT) that sets the records' timestamps: a C*AS's
    ``WITH (TIMESTAMP='col')``. An INSERT INTO does not use its target's (ksqlDB's
    ``LogicalPlanner`` takes the column from the statement's own WITH clause only)."""
    if sink.timestamp_column is None or sink.created_by != query_id:
        return None, None
    column = sink.column(sink.timestamp_column)
    if column is None:
        raise StatementError(f"The TIMESTAMP column set in the WITH clause does not exist in the schema: "
                             f"'{sink.timestamp_column}'")
    return column, sink.timestamp_format


def _spark_name(query_id: str) -> str:
    return f"oncestream_{query_id}"


ERROR_TEXT_CHARS = 1000


def _error_text(e: BaseException) -> str:
    """One line saying why a query failed: Spark's headline plus, when the error wraps a Python
    traceback (a data source or UDF failure), the traceback's last ``...Error: message`` line."""
    text = str(getattr(e, "desc", None) or getattr(e, "message", None) or e).strip()
    if not text:
        return type(e).__name__
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    headline = lines[0]
    causes = [line for line in lines[1:] if not line.startswith(("at ", "File ", "^", "~"))
              and ("Error:" in line or "Exception:" in line)]
    if causes and causes[-1] not in headline:
        headline = f"{headline.removesuffix('Traceback (most recent call last):').strip()} {causes[-1]}"
    return headline[:ERROR_TEXT_CHARS]


def _stop_at_boundary(handle: Any) -> None:
    deadline = time.monotonic() + STOP_WAIT_S
    try:
        while handle.isActive and handle.status.get("isTriggerActive") and time.monotonic() < deadline:
            time.sleep(0.05)
        handle.stop()
    except Exception as e:  # noqa: BLE001 - a query that died meanwhile is stopped already
        log.info("stopping query %s: %s", getattr(handle, "name", "?"), e)


def _push_frame(frame: Any, columns: tuple[Column, ...]) -> Any:
    """Timestamps and dates as epoch numbers before they reach Python (Spark would convert them
    to the driver's local time zone)."""
    from pyspark.sql import functions as F

    from oncestream.sql.engine.compile.expressions import quote

    out = []
    for c in columns:
        col = F.col(quote(c.name))
        if c.type.base is BaseType.TIMESTAMP:
            col = F.unix_millis(col)
        elif c.type.base is BaseType.DATE:
            col = F.unix_date(col)
        out.append(col.alias(c.name))
    return frame.select(*out)


def json_ready(value: Any, base: BaseType | None = None) -> Any:
    """A column value as ksqlDB writes it in query results (TIMESTAMP ``yyyy-MM-ddTHH:mm:ss.SSS``,
    DATE ``yyyy-MM-dd``, BYTES base64, DECIMAL a number, STRUCT an object)."""
    if value is None:
        return None
    if base is BaseType.TIMESTAMP and isinstance(value, int):
        stamp = dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=value)
        return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}"
    if base is BaseType.DATE and isinstance(value, int):
        return (dt.date(1970, 1, 1) + dt.timedelta(days=value)).isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode()
    if hasattr(value, "asDict"):
        return {k: json_ready(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_ready(v) for v in value]
    return value


# Spark waits a fixed 10 s (PythonWorkerFactory, not configurable) for a query's driver-side Python
# data-source process to connect back; on a loaded machine its start (importing pyspark, pyarrow,
# oncestream) can take longer, and the query fails before it read anything. Such a start failure
# says nothing about the query, so a push query that failed so before its first micro-batch is
# started again, this many times: nothing was read or emitted, so the client sees a query that
# began a few seconds later (with ``latest`` offsets, from the later end).
SPARK_START_FAILURES = ("Python worker failed to connect back",)
PUSH_START_RETRIES = 4
# A persistent query resumes from its checkpoint, so it is started again after such a failure at
# any point (Spark starts the source's process again whenever the query is restarted), with a
# pause that doubles up to its cap, for as long as it is wanted: ksqlDB restarts
# its errored persistent queries with backoff too (here only this failure, which never means the
# query is wrong; one that is would fail the same way forever).
START_RETRY_BACKOFF_MS = 1_000
START_RETRY_BACKOFF_MAX_MS = 30_000


def is_spark_start_failure(error: str | None) -> bool:
    """Whether a query's error text is one of Spark's start failures (SPARK_START_FAILURES)."""
    return error is not None and any(marker in error for marker in SPARK_START_FAILURES)


class PushQuery:
    """A running push query: Spark's ``foreachBatch`` puts rows into a bounded queue (it blocks
    when the reader falls behind, which holds the micro-batch back: backpressure); ``rows()``
    yields them as JSON-ready lists in column order. A query that fails to start for the machine's
    sake (``is_spark_start_failure``) before its first micro-batch is started again."""

    def __init__(self, query_id: str, columns: tuple[Column, ...], limit: int | None, queue_rows: int) -> None:
        self.query_id = query_id
        self.output_columns = columns
        self.columns = [ColumnHeader(c.name, c.type.ksql_name) for c in columns]
        self.is_pull = False
        self.limit = limit
        self.limit_reached = False
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max(1, queue_rows))
        self._closed = threading.Event()
        self._emitted = 0
        self._handle: Any = None
        self._checkpoint = tempfile.mkdtemp(prefix="oncestream-push-")
        self.error: str | None = None
        self._batches = 0
        self._starts_left = PUSH_START_RETRIES
        self._restart: Any = None

    def start(self, frame: Any, output_mode: str, trigger_interval_ms: int) -> None:
        bases = [c.type.base for c in self.output_columns]

        def deliver(batch: Any, _batch_id: int) -> None:
            self._batches += 1
            if self._closed.is_set():
                return
            for row in batch.toLocalIterator():
                out = [json_ready(v, b) for v, b in zip(row, bases, strict=True)]
                if not self._put(out):
                    return
                self._emitted += 1
                if self.limit is not None and self._emitted >= self.limit:
                    self.limit_reached = True
                    self._finish()
                    return

        def start_spark() -> None:
            self._handle = (frame.writeStream.foreachBatch(deliver).outputMode(output_mode)
                            .option("checkpointLocation", self._checkpoint)
                            .trigger(processingTime=f"{trigger_interval_ms} milliseconds").start())

        self._restart = start_spark
        start_spark()
        if self.limit == 0:
            self.limit_reached = True
            self._finish()

    def _put(self, item: Any) -> bool:
        while not self._closed.is_set():
            try:
                self._queue.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def _finish(self) -> None:
        """End of rows (LIMIT or close): the reader sees the end marker; the Spark query is
        stopped from another thread (stopping it from its own foreachBatch would deadlock)."""
        if self._closed.is_set():
            return
        self._closed.set()
        try:
            self._queue.put_nowait(_END)
        except queue.Full:
            pass  # the reader drains and then sees _closed
        threading.Thread(target=self._stop_spark, name=f"stop-{self.query_id}", daemon=True).start()

    def _stop_spark(self) -> None:
        handle = self._handle
        if handle is not None:
            try:
                handle.stop()
            except Exception as e:  # noqa: BLE001 - already stopped or failed
                log.info("push query %s stop: %s", self.query_id, e)
        shutil.rmtree(self._checkpoint, ignore_errors=True)

    def poll(self, timeout_s: float) -> list[Any] | None:
        """The next row, or None when none came within ``timeout_s`` or the query ended (see
        ``done``)."""
        if self._closed.is_set() and self._queue.empty():
            return None
        try:
            item = self._queue.get(timeout=timeout_s)
        except queue.Empty:
            self._check_failed()
            return None
        if item is _END:
            return None
        return item

    def _check_failed(self) -> None:
        handle = self._handle
        if handle is not None and not handle.isActive and not self._closed.is_set():
            failure = handle.exception()
            error = _error_text(failure) if failure is not None else None
            if self._batches == 0 and self._starts_left > 0 and is_spark_start_failure(error):
                self._starts_left -= 1
                log.warning("push query %s: Spark did not start it (%s); starting it again", self.query_id, error)
                shutil.rmtree(self._checkpoint, ignore_errors=True)
                self._checkpoint = tempfile.mkdtemp(prefix="oncestream-push-")
                self._restart()
                return
            self.error = error
            self._finish()

    @property
    def done(self) -> bool:
        """True once the query ended (LIMIT, close, failure) and every row was read."""
        return self._closed.is_set() and self._queue.empty()

    async def rows(self) -> AsyncIterator[list[Any]]:
        """Rows until LIMIT, ``close()`` or a failure."""
        while not self.done:
            row = await asyncio.to_thread(self.poll, 0.5)
            if row is not None:
                yield row
        if self.error is not None:
            raise KsqlError(f"push query {self.query_id} failed: {self.error}")

    def close_sync(self) -> None:
        """Stop the query and wait for Spark to stop it."""
        self._finish()
        handle = self._handle
        if handle is not None:
            try:
                handle.stop()
            except Exception as e:  # noqa: BLE001
                log.info("push query %s stop: %s", self.query_id, e)

    async def close(self) -> None:
        await asyncio.to_thread(self.close_sync)


__all__ = [
    "ERROR", "NOT_RUNNING", "PENDING", "RUNNING", "PushQuery", "QueryRuntime", "QueryStatus", "RuntimeSettings",
    "checkpoint_location", "json_ready", "sink_topic_config", "spark_session_config", "transactional_prefix",
]
