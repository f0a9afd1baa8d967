"""The diskless produce pipeline: buffer, upload one object, commit it, then answer the producers.

``DisklessAppender.append`` is what the broker's Produce handler awaits in cluster mode. The
partitions' data is validated at once (a refusal is answered without waiting), then buffered with
every other request this broker receives (``AppendBuffer``: ``diskless.append.commit.interval.ms``,
default 250, or ``diskless.append.buffer.max.bytes``, default 8 MiB). Each due batch of requests
becomes one object (``produce_object``):

    record 'uploading' (PostgreSQL) -> PUT (object store, on an executor thread)
        -> commit_uploaded (one PostgreSQL transaction, retried whole by MetadataStore.run, an
           unknown outcome resolved by read_back_commit) -> every waiting request answered

Uploads of consecutive objects may overlap (``max_uploads_in_flight``) but commits happen one at a
time, in the order the objects were cut, so a producer's pipelined requests are committed in the
order they arrived.

Nothing is acknowledged before its commit. Failures answer the requests of that object with a
retriable error, never with offsets:

- the object store refused or failed the PUT, or it did not end within ``upload_timeout_ms``:
  KAFKA_STORAGE_ERROR (Kafka's "the storage behind this partition failed"; clients retry it after
  a metadata refresh). Nothing was committed; the 'uploading' row left behind (and the object, if
  a late PUT still lands) is collected by ``ObjectGarbageCollector``.
- PostgreSQL unreachable or failing past the retry bound (MetadataStoreUnavailableError):
  REQUEST_TIMED_OUT (clients retry it and treat the write as possibly persisted, which is what an
  unresolved commit is; an idempotent retry is then answered exactly).
- the garbage collector gave up on the upload first (ObjectNotUploadingError): KAFKA_STORAGE_ERROR.

A commit stalled inside its transaction (this broker paused) holds the partitions it locked for
at most ``commit_idle_timeout_ms`` (PostgreSQL then ends the session; the commit runs again once
the broker resumes): other brokers' commits, and so every producer of theirs, wait no longer.

``close`` stops taking requests, answers everything still buffered with NOT_LEADER_OR_FOLLOWER
(retriable: the client refreshes metadata and sends to another broker), lets uploads and commits in
flight finish within ``close_timeout_ms`` and answers what is left REQUEST_TIMED_OUT.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from oncestream.cluster.diskless.append_buffer import (
    DEFAULT_BUFFER_MAX_BYTES,
    DEFAULT_COMMIT_INTERVAL_MS,
    AppendBuffer,
)
from oncestream.cluster.diskless.commit import (
    DEFAULT_DELETE_GRACE_MS,
    AppendOutcome,
    commit_uploaded,
    read_back_commit,
    record_uploading,
)
from oncestream.cluster.diskless.produce_object import (
    ProduceObject,
    TxnWrite,
    ValidatedAppend,
    build_produce_object,
    new_object_key,
    validate_append,
)
from oncestream.cluster.pg.store import Conn, MetadataStore
from oncestream.errors import InvalidConfigError, OnceStreamError
from oncestream.log.config import LogConfig
from oncestream.remote.object_store import ObjectStore

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DisklessAppendConfig:
    """Bounds of the pipeline (the broker reads them from its diskless.* configs)."""

    commit_interval_ms: int = DEFAULT_COMMIT_INTERVAL_MS  # diskless.append.commit.interval.ms
    buffer_max_bytes: int = DEFAULT_BUFFER_MAX_BYTES  # diskless.append.buffer.max.bytes
    max_uploads_in_flight: int = 2  # objects uploaded while an earlier one commits
    # A PUT not done by then is answered KAFKA_STORAGE_ERROR; it may still land later (the object
    # stays 'uploading' and is collected). Keep it well below the GC's upload timeout.
    upload_timeout_ms: int = 30_000
    delete_grace_ms: int = DEFAULT_DELETE_GRACE_MS  # of an object none of whose batches was kept
    close_timeout_ms: int = 30_000  # close() waits this long for uploads and commits in flight
    # A commit stalled inside its transaction (the broker paused) keeps its partitions locked at
    # most this long: PostgreSQL then ends its session (commit.py). The broker passes its session
    # timeout (broker.session.timeout.ms, default 9 s): past it the broker counts as gone anyway.
    commit_idle_timeout_ms: int = 9_000

    def __post_init__(self) -> None:
        if self.max_uploads_in_flight < 1:
            raise InvalidConfigError(f"max_uploads_in_flight must be >= 1, not {self.max_uploads_in_flight}")
        if self.commit_idle_timeout_ms < 1:  # 0 would turn PostgreSQL's timeout off
            raise InvalidConfigError(f"commit_idle_timeout_ms must be >= 1, not {self.commit_idle_timeout_ms}")


@dataclass(frozen=True, slots=True)
class PartitionAppend:
    """One partition's data of a Produce request, with the topic's log settings
    (max.message.bytes, message.timestamp.type, cleanup.policy apply)."""

    topic_id: uuid.UUID
    partition: int
    records: bytes
    config: LogConfig
    txn: TxnWrite | None = None  # the request's transactional id (KIP-890 verification in the commit)


@dataclass(slots=True, eq=False)  # compared and hashed by identity (kept in a set)
class _Waiting:
    append: ValidatedAppend
    future: asyncio.Future[AppendOutcome]


def _answer(waiting: Sequence[_Waiting], outcomes: Sequence[AppendOutcome]) -> None:
    for item, outcome in zip(waiting, outcomes, strict=True):
        if not item.future.done():
            item.future.set_result(outcome)


def _fail(waiting: Sequence[_Waiting], error: ErrorCode, message: str) -> None:
    _answer(waiting, [AppendOutcome.failed(error, message)] * len(waiting))


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _monotonic_ms() -> float:
    return time.monotonic() * 1000


class DisklessAppender:
    """Buffers produce requests of every partition into objects and commits them (see module doc)."""

    def __init__(
        self,
        metadata: MetadataStore,
        objects: ObjectStore,
        *,
        broker_id: int,
        key_prefix: str = "",
        config: DisklessAppendConfig | None = None,
        wall_clock_ms: Callable[[], int] = _wall_clock_ms,
        monotonic_ms: Callable[[], float] = _monotonic_ms,
        executor: Executor | None = None,
    ) -> None:
        self._metadata = metadata
        self._objects = objects
        self._broker_id = broker_id
        self._key_prefix = key_prefix
        self._config = config or DisklessAppendConfig()
        self._wall_clock_ms = wall_clock_ms
        self._executor = executor
        self._buffer: AppendBuffer[_Waiting] = AppendBuffer(
            monotonic_ms, commit_interval_ms=self._config.commit_interval_ms, max_bytes=self._config.buffer_max_bytes)
        self._wakeup = asyncio.Event()
        self._closing = False
        self._uploads: asyncio.Queue[asyncio.Task[tuple[ProduceObject, list[_Waiting]] | None] | None] = (
            asyncio.Queue(maxsize=self._config.max_uploads_in_flight))
        self._in_flight: set[_Waiting] = set()
        self._flusher: asyncio.Task[None] | None = None
        self._committer: asyncio.Task[None] | None = None
        # Counters for metrics and the benchmark (object PUTs and commit transactions per broker).
        self.objects_committed = 0  # objects whose commit transaction succeeded
        self.objects_uploaded = 0  # PUTs that succeeded
        self.bytes_uploaded = 0
        self.upload_failures = 0  # PUTs that failed or timed out
        self.commit_failures = 0  # commits answered with an error as a whole

    def start(self) -> None:
        """Start the flush and commit tasks on the running event loop."""
        if self._flusher is not None:
            raise RuntimeError("the diskless appender is already started")
        self._flusher = asyncio.create_task(self._flush_loop(), name="diskless-flush")
        self._committer = asyncio.create_task(self._commit_loop(), name="diskless-commit")

    async def append(self, appends: Sequence[PartitionAppend]) -> list[AppendOutcome]:
        """Append each partition's data; one outcome per entry, in order, once its object's commit
        ended (offsets) or failed (an error code). Invalid data is answered at once."""
        return list(await asyncio.gather(*self.submit(appends)))

    def submit(self, appends: Sequence[PartitionAppend]) -> list[asyncio.Future[AppendOutcome]]:
        """Buffer each partition's data now (no await: requests are committed in the order they
        were submitted) and return the futures of their outcomes (see ``append``)."""
        futures: list[asyncio.Future[AppendOutcome]] = []
        loop = asyncio.get_running_loop()
        for append in appends:
            future: asyncio.Future[AppendOutcome] = loop.create_future()
            futures.append(future)
            if self._closing or self._flusher is None:
                future.set_result(AppendOutcome.failed(
                    ErrorCode.not_leader_or_follower, "this broker is not accepting produce requests (shutting down)"))
                continue
            try:
                validated = validate_append(append.topic_id, append.partition, append.records, append.config, append.txn)
            except OnceStreamError as exc:
                future.set_result(AppendOutcome.failed(exc.code, str(exc)))
                continue
            self._buffer.add(_Waiting(validated, future), validated.size_bytes)
        self._wakeup.set()
        return futures

    async def close(self) -> None:
        """Stop: buffered requests are answered NOT_LEADER_OR_FOLLOWER, objects in flight finish
        within ``close_timeout_ms`` (else REQUEST_TIMED_OUT); never leaves a request unanswered."""
        if self._closing:
            return
        self._closing = True
        _fail(self._buffer.take_all(), ErrorCode.not_leader_or_follower,
              "this broker shut down before the data was uploaded")
        self._wakeup.set()
        tasks = [task for task in (self._flusher, self._committer) if task is not None]
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=self._config.close_timeout_ms / 1000)
            for task in pending:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        _fail(list(self._in_flight), ErrorCode.request_timed_out,
              "this broker shut down while the data was being committed; its outcome is unknown")
        self._in_flight.clear()

    # --- the tasks -------------------------------------------------------------------------------

    async def _flush_loop(self) -> None:
        try:
            while not self._closing:
                delay_ms = self._buffer.ms_until_due()
                if delay_ms is None or delay_ms > 0:
                    self._wakeup.clear()
                    timeout_s = None if delay_ms is None else delay_ms / 1000
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wakeup.wait(), timeout_s)
                    continue
                waiting = self._buffer.take()
                try:
                    self._in_flight.update(waiting)
                    task = asyncio.create_task(self._upload(waiting), name="diskless-upload")
                except Exception as exc:  # a bug must not leave producers hanging
                    log.exception("diskless flush failed unexpectedly")
                    self._settle(waiting, ErrorCode.unknown_server_error, f"cutting a produce object failed: {exc}")
                    continue
                await self._uploads.put(task)  # blocks while max_uploads_in_flight are pending
        finally:
            await self._uploads.put(None)

    async def _commit_loop(self) -> None:
        while (task := await self._uploads.get()) is not None:
            try:
                uploaded = await task
            except Exception:
                # _upload answered its requests before raising: only the bug is left to report.
                log.exception("diskless upload failed unexpectedly")
                uploaded = None
            if uploaded is not None:
                obj, waiting = uploaded
                await self._commit(obj, waiting)

    async def _upload(self, waiting: list[_Waiting]) -> tuple[ProduceObject, list[_Waiting]] | None:
        """Build, record and PUT one object; None (requests answered) if that failed."""
        try:
            now_ms = self._wall_clock_ms()
            key = new_object_key(self._key_prefix, now_ms)
            obj = build_produce_object(key, [item.append for item in waiting], now_ms)
            size = len(obj.data)

            async def record(conn: Conn) -> None:
                await record_uploading(conn, key, size, self._broker_id)

            await self._metadata.run(record)
        except OnceStreamError as exc:
            self._settle(waiting, exc.code, f"could not record the produce object before upload: {exc}")
            return None
        except Exception as exc:
            self._settle(waiting, ErrorCode.unknown_server_error, f"preparing the produce object failed: {exc}")
            raise
        put = asyncio.get_running_loop().run_in_executor(self._executor, self._objects.put, key, obj.data)
        try:
            await asyncio.wait_for(put, self._config.upload_timeout_ms / 1000)
        except TimeoutError:
            log.warning("diskless upload of %s did not end within %d ms", key, self._config.upload_timeout_ms)
            self.upload_failures += 1
            self._settle(waiting, ErrorCode.kafka_storage_error,
                         f"uploading produce object {key} to {self._objects.description} did not end within "
                         f"{self._config.upload_timeout_ms} ms")
            return None
        except Exception as exc:  # noqa: BLE001  (any failure of the store: nothing is acknowledged)
            log.warning("diskless upload of %s failed: %s", key, exc)
            self.upload_failures += 1
            self._settle(waiting, ErrorCode.kafka_storage_error,
                         f"uploading produce object {key} to {self._objects.description} failed: {exc}")
            return None
        self.objects_uploaded += 1
        self.bytes_uploaded += len(obj.data)
        return obj, waiting

    async def _commit(self, obj: ProduceObject, waiting: list[_Waiting]) -> None:
        grace_ms = self._config.delete_grace_ms
        idle_timeout_ms = self._config.commit_idle_timeout_ms

        async def commit(conn: Conn) -> list[AppendOutcome]:
            return await commit_uploaded(conn, obj.key, obj.appends, delete_grace_ms=grace_ms,
                                         idle_timeout_ms=idle_timeout_ms)

        async def read_back(conn: Conn) -> list[AppendOutcome] | None:
            return await read_back_commit(conn, obj.key, obj.appends)

        try:
            outcomes = await self._metadata.run(commit, read_back=read_back)
        except OnceStreamError as exc:
            log.warning("diskless commit of %s failed: %s", obj.key, exc)
            self.commit_failures += 1
            self._settle(waiting, exc.code, f"committing produce object {obj.key} failed: {exc}")
            return
        except Exception as exc:  # a bug must not leave producers hanging
            log.exception("diskless commit of %s failed unexpectedly", obj.key)
            self.commit_failures += 1
            self._settle(waiting, ErrorCode.unknown_server_error, f"committing produce object {obj.key} failed: {exc}")
            return
        self.objects_committed += 1
        _answer(waiting, outcomes)
        self._in_flight.difference_update(waiting)

    def _settle(self, waiting: list[_Waiting], error: ErrorCode, message: str) -> None:
        _fail(waiting, error, message)
        self._in_flight.difference_update(waiting)
