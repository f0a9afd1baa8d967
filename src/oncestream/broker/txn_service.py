"""Drives the sans-io TransactionCoordinator: persists its records, writes its markers.

Every coordinator call returns an Outcome: maybe a response, records for __transaction_state and
marker jobs. ``drive`` works through them synchronously (our appends are synchronous): append a
record, then tell the coordinator it is durable (``on_persisted``), which may produce the waiting
response and further effects; write a marker job's COMMIT/ABORT control batch to every partition
of the transaction, then ``markers_written``, which yields the Complete* record, and so on until
nothing is left. Persist before acting holds throughout: the coordinator only moves to a state
once its record is in the log, and markers are only written once PrepareCommit/PrepareAbort is.

Marker jobs that fail (a disk error) are kept and retried by the timer task; a partition whose
topic was deleted is skipped, as Kafka does.

A ``TxnStepObserver`` (injected, none by default) is told each step of a committing transaction
(``TXN_STEPS``), so a test can stop the broker exactly there and check that recovery finishes it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from oncestream.broker.group_service import GroupService
from oncestream.broker.internal_topic import InternalAppender, InternalTopic
from oncestream.coordinator.group.partitioning import partition_for
from oncestream.coordinator.txn import (
    MarkerJob,
    Outcome,
    TransactionCoordinator,
    TxnCoordinatorConfig,
)
from oncestream.errors import OnceStreamError, UnknownTopicOrPartitionError
from oncestream.log.manager import LogManager
from oncestream.topic_partition import TopicPartition

log = logging.getLogger("oncestream.broker")

TRANSACTION_STATE_TOPIC = "__transaction_state"
OFFSETS_TOPIC = "__consumer_offsets"

# The steps of a commit an observer is told, in order: PrepareCommit durable and no marker written;
# the first marker written (with two or more partitions); every marker written, CompleteCommit not.
TXN_STEPS = ("before-markers", "between-markers", "before-complete")


class TxnStepObserver(Protocol):
    """Told when a committing transaction reaches a step of ``TXN_STEPS``."""

    def reached(self, step: str) -> None:
        """The commit of one transaction is at ``step`` (called on the event loop)."""
        ...


class _NoObserver:
    def reached(self, step: str) -> None:
        pass


class TxnService:
    """The transaction coordinator, its log topic, and the marker writer."""

    def __init__(self, logs: LogManager, groups: GroupService, props: dict[str, str], now_ms: Callable[[], int],
                 allocate_producer_id: Callable[[], int],
                 on_marker: Callable[[str, int], None] = lambda topic, partition: None,
                 mono_ms: Callable[[], int] | None = None,
                 producer_ids_ready: Callable[[], Awaitable[None]] | None = None,
                 steps: TxnStepObserver | None = None, appender: InternalAppender | None = None) -> None:
        """``now_ms`` is the wall clock (record timestamps), ``mono_ms`` the monotonic clock
        (transaction timeouts, id expiry); a caller with one clock may omit ``mono_ms``.
        ``producer_ids_ready`` is awaited before each timer tick, whose aborts may take a new
        producer id (exhausted epochs), so that ``allocate_producer_id`` finds a durable one.
        ``steps`` is told each step of a commit; ``appender`` writes the transaction log's
        batches (the log's own append by default; internal_topic.py)."""
        self._producer_ids_ready = producer_ids_ready
        self.now_ms = now_ms
        self.mono_ms = mono_ms or now_ms
        self._logs = logs
        # A marker moves the partition's LSO: read_committed fetches parked on it must wake.
        self._on_marker = on_marker
        self._groups = groups
        self.config = TxnCoordinatorConfig.from_properties(props)
        self._tick_interval_ms = int(props.get("transaction.abort.timed.out.transaction.cleanup.interval.ms", "10000"))
        self.topic = InternalTopic(
            logs,
            TRANSACTION_STATE_TOPIC,
            int(props.get("transaction.state.log.num.partitions", "10")),
            {"cleanup.policy": "compact", "segment.bytes": "104857600"},
            now_ms(),
            appender=appender,
        )
        self.coordinator = TransactionCoordinator(
            self.config,
            allocate_producer_id=allocate_producer_id,
            offsets_partition_for=groups.coordinator.partition_for,
        )
        self._failed_jobs: list[MarkerJob] = []
        self._steps: TxnStepObserver = steps or _NoObserver()
        # Recovery: replay the transaction log and finish every prepared transaction.
        self.drive(self.coordinator.load(self.topic.read_all(), now_ms(), mono_ms=self.mono_ms()))

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.topic.num_partitions)

    # --- driving ------------------------------------------------------------------------------

    def call(self, fn: Callable[[int], Outcome[Any]]) -> Any:
        """Run one coordinator call to completion and return its response."""
        box: list[Any] = []
        self.drive(fn(self.now_ms()), box)
        if not box:
            # The transition's record could not be persisted and no answer was produced:
            # the client retries on this retriable error.
            return None
        return box[0]

    def drive(self, outcome: Outcome[Any], box: list[Any] | None = None) -> None:
        """Process an outcome and everything it leads to; the first response goes to ``box``."""
        work: deque[tuple[Outcome[Any], list[Any] | None]] = deque([(outcome, box)])
        while work:
            current, sink = work.popleft()
            if current.response is not None and sink is not None and not sink:
                sink.append(current.response)
            for write in current.records_to_persist:
                now = self.now_ms()
                try:
                    self.topic.append(self.partition_for(write.transactional_id), [(write.key, write.value)], now)
                except (OnceStreamError, OSError) as exc:
                    log.error("cannot persist transaction %r: %s", write.transactional_id, exc)
                    work.append((self.coordinator.on_persist_failed(write.write_id), sink))
                    continue
                work.append((self.coordinator.on_persisted(write.write_id, now, mono_ms=self.mono_ms()), sink))
            for job in current.markers_to_write:
                if self._write_markers(job):
                    if job.commit:
                        self._steps.reached("before-complete")
                    outcome_after = self.coordinator.markers_written(
                        job.transactional_id, job.producer_id, job.producer_epoch, self.now_ms()
                    )
                    work.append((outcome_after, None))
                else:
                    self._failed_jobs.append(job)

    def _write_markers(self, job: MarkerJob) -> bool:
        """Append the job's marker to every partition; False if any must be retried later."""
        now = self.now_ms()
        ok = True
        if job.commit:
            self._steps.reached("before-markers")
        for index, tp in enumerate(job.partitions):
            if job.commit and index == 1:
                self._steps.reached("between-markers")
            try:
                plog = self._logs.get(tp.topic, tp.partition)
            except UnknownTopicOrPartitionError:
                continue  # the topic was deleted: nothing left to mark
            try:
                plog.append_marker(
                    producer_id=job.producer_id,
                    producer_epoch=job.producer_epoch,
                    commit=job.commit,
                    coordinator_epoch=job.coordinator_epoch,
                    now_ms=now,
                )
            except (OnceStreamError, OSError) as exc:
                log.error("marker for %r on %s-%d failed: %s", job.transactional_id, tp.topic, tp.partition, exc)
                ok = False
                continue
            self._on_marker(tp.topic, tp.partition)
            if tp.topic == OFFSETS_TOPIC and not self._complete_txn_offsets(
                tp.partition, job.producer_id, job.commit, now
            ):
                # The group partition was reloaded with the offsets still staged: retry the job
                # (a repeated marker changes nothing) so the Complete record is only written
                # once the offsets' outcome is in the log.
                ok = False
        return ok

    def _complete_txn_offsets(self, offsets_partition: int, producer_id: int, commit: bool, now: int) -> bool:
        """Make a transaction's staged offsets visible (commit) or drop them (abort); False if
        the records saying so could not be appended."""
        coord = self._groups.coordinator
        ok = True
        for group_id in coord.group_ids():
            if coord.partition_for(group_id) != offsets_partition or producer_id not in coord.pending_txn_offsets(group_id):
                continue
            if self._groups.complete(coord.complete_pending_txn_offsets(
                group_id, producer_id, commit, now, mono_ms=self.mono_ms()
            )):
                ok = False
        return ok

    async def run_timers(self) -> None:
        """Abort timed-out transactions, expire ids, retry failed marker jobs."""
        while True:
            await asyncio.sleep(self._tick_interval_ms / 1000)
            try:
                failed, self._failed_jobs = self._failed_jobs, []
                for job in failed:
                    self.drive(Outcome(None, (), (job,)))
                if self._producer_ids_ready is not None:
                    await self._producer_ids_ready()
                self.drive(self.coordinator.tick(self.now_ms(), mono_ms=self.mono_ms()))
            except Exception:  # never let one bad transaction stop every timer
                log.exception("transaction coordinator tick failed")

    # --- helpers for handlers -----------------------------------------------------------------

    def stage_offsets(self, group_id: str, producer_id: int, offsets: dict[TopicPartition, Any], **member: Any) -> Any:
        """TxnOffsetCommit: stage offsets as pending in the group coordinator (KIP-447 checks)."""
        result, writes = self._groups.coordinator.add_pending_txn_offsets(
            group_id, producer_id, offsets, self.now_ms(), mono_ms=self.mono_ms(), **member
        )
        return self._groups.finish(group_id, result, writes)


def fenced_for_version(error: ErrorCode, api_version: int, first_version_with_fenced: int) -> ErrorCode:
    """KIP-588: clients older than the version that knows PRODUCER_FENCED get INVALID_PRODUCER_EPOCH."""
    if error == ErrorCode.producer_fenced and api_version < first_version_with_fenced:
        return ErrorCode.invalid_producer_epoch
    return error
