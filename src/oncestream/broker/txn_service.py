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

Cluster mode (``state_log``, an ``AsyncInternalTopic`` in PostgreSQL): the broker owns only the
__transaction_state partitions whose lease it holds, each with a TransactionCoordinator of its own
loaded with that partition's records and the lease epoch as its coordinator epoch (what markers
carry). ``load_partition`` (lease acquired) rebuilds it and resumes every transaction left in
PrepareCommit/PrepareAbort, KIP-939 prepared ones included: their state is in PostgreSQL, so they
survive every broker's death; ``unload_partition`` (lease lost or handed off) drops it.
Requests go through ``call_async(transactional_id, fn)`` (``fn(coordinator, now_ms)``), which
routes to the partition's coordinator (NOT_COORDINATOR when another broker owns it) and awaits
the fenced appends. Markers go through an injected ``TxnMarkerWriter`` (the diskless partitions'
``write_markers`` of cluster/diskless, with the transaction partition's lease to fence the marker
commit); markers of __consumer_offsets partitions this broker's group service owns are completed
here, the others belong to the writer (their owner's WriteTxnMarkers). With the local log,
``call_async`` is ``call`` on the one coordinator: the single broker is unchanged.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from oncestream.broker.group_service import GroupService
from oncestream.broker.internal_topic import INTERNAL_TOPIC_CONFIGS, AsyncInternalTopic, InternalAppender, InternalTopic
from oncestream.cluster.leases.coordinator_leases import Lease, LeaseLostError
from oncestream.coordinator.group.partitioning import partition_for
from oncestream.coordinator.txn import (
    MarkerJob,
    Outcome,
    TransactionCoordinator,
    TxnCoordinatorConfig,
)
from oncestream.coordinator.txn.admin_queries import TransactionCounts
from oncestream.coordinator.txn.messages import ListTransactionsResponse, TransactionDescription, TransactionListing
from oncestream.errors import (
    CoordinatorInvariantError,
    CoordinatorLoadInProgressError,
    NotCoordinatorError,
    OnceStreamError,
    UnknownTopicOrPartitionError,
)
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


class TxnMarkerWriter(Protocol):
    """Cluster mode: writes transaction markers where the partitions live (diskless topics:
    cluster/diskless ``write_markers``; __consumer_offsets partitions of other brokers: their
    owner, as WriteTxnMarkers does)."""

    async def write_markers(self, job: MarkerJob, lease: Lease) -> bool:
        """Write ``job``'s COMMIT/ABORT marker to every partition of ``job.partitions``, in a
        PostgreSQL transaction that also runs ``fenced(conn, lease.resource, lease.epoch,
        lease.incarnation)`` (a coordinator that lost its lease writes no marker: raise
        LeaseLostError). True when every marker is written; False to retry the job later (a
        repeated marker changes nothing). A partition whose topic is gone counts as written."""
        ...


class TxnService:
    """The transaction coordinator, its log topic, and the marker writer."""

    def __init__(self, logs: LogManager | None, groups: GroupService, props: dict[str, str], now_ms: Callable[[], int],
                 allocate_producer_id: Callable[[], int],
                 on_marker: Callable[[str, int], None] = lambda topic, partition: None,
                 mono_ms: Callable[[], int] | None = None,
                 producer_ids_ready: Callable[[], Awaitable[None]] | None = None,
                 steps: TxnStepObserver | None = None, appender: InternalAppender | None = None, *,
                 state_log: AsyncInternalTopic | None = None, markers: TxnMarkerWriter | None = None) -> None:
        """``now_ms`` is the wall clock (record timestamps), ``mono_ms`` the monotonic clock
        (transaction timeouts, id expiry); a caller with one clock may omit ``mono_ms``.
        ``producer_ids_ready`` is awaited before each timer tick, whose aborts may take a new
        producer id (exhausted epochs), so that ``allocate_producer_id`` finds a durable one.
        ``steps`` is told each step of a commit; ``appender`` writes the transaction log's
        batches (the log's own append by default; internal_topic.py).

        Cluster mode: ``state_log`` holds the transaction log (``logs`` may be None) and
        ``markers`` writes markers; no partition is owned until ``load_partition``."""
        self._producer_ids_ready = producer_ids_ready
        self.now_ms = now_ms
        self.mono_ms = mono_ms or now_ms
        self._logs = logs
        # A marker moves the partition's LSO: read_committed fetches parked on it must wake.
        self._on_marker = on_marker
        self._groups = groups
        self.config = TxnCoordinatorConfig.from_properties(props)
        self._tick_interval_ms = int(props.get("transaction.abort.timed.out.transaction.cleanup.interval.ms", "10000"))
        self._allocate_producer_id = allocate_producer_id
        self._cluster = state_log
        self._markers = markers
        # Cluster mode: the coordinator of each partition owned (not yet loaded while it reads).
        self._owned: dict[int, TransactionCoordinator] = {}
        # Cluster mode: marker jobs to retry, with the partition whose lease they carry.
        self._failed_cluster_jobs: list[tuple[int, MarkerJob]] = []
        # Cluster mode: background reads of partitions whose append had an unknown outcome.
        self._reloads: set[asyncio.Task[None]] = set()
        self._failed_jobs: list[MarkerJob] = []
        self._steps: TxnStepObserver = steps or _NoObserver()
        self.coordinator = self._new_coordinator()
        if state_log is not None:
            if markers is None:
                raise CoordinatorInvariantError("cluster mode needs a transaction marker writer")
            self._local: InternalTopic | None = None
            return
        if logs is None:
            raise CoordinatorInvariantError("a transaction service needs a log manager or a cluster state log")
        self._local = InternalTopic(
            logs,
            TRANSACTION_STATE_TOPIC,
            int(props.get("transaction.state.log.num.partitions", "10")),
            dict(INTERNAL_TOPIC_CONFIGS),
            now_ms(),
            appender=appender,
        )
        # Recovery: replay the transaction log and finish every prepared transaction.
        self.drive(self.coordinator.load(self.topic.read_all(), now_ms(), mono_ms=self.mono_ms()))

    def _new_coordinator(self) -> TransactionCoordinator:
        return TransactionCoordinator(
            self.config,
            allocate_producer_id=self._allocate_producer_id,
            offsets_partition_for=self._groups.coordinator.partition_for,
        )

    @property
    def topic(self) -> InternalTopic:
        """The local transaction log (single broker only)."""
        if self._local is None:
            raise CoordinatorInvariantError("cluster mode keeps __transaction_state in PostgreSQL")
        return self._local

    @property
    def num_partitions(self) -> int:
        """__transaction_state partitions."""
        return self._cluster.num_partitions if self._cluster is not None else self.topic.num_partitions

    @property
    def topic_name(self) -> str:
        """The internal topic whose partitions this service coordinates (lease keeper)."""
        return TRANSACTION_STATE_TOPIC

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions)

    # --- cluster mode: partitions owned through leases ----------------------------------------

    def coordinator_for(self, transactional_id: str) -> TransactionCoordinator:
        """The coordinator of ``transactional_id``: the one coordinator of the single broker; in
        cluster mode its partition's, NotCoordinatorError if another broker owns it."""
        if self._cluster is None:
            return self.coordinator
        coordinator = self._owned.get(self.partition_for(transactional_id))
        if coordinator is None:
            raise NotCoordinatorError(f"another broker coordinates transactional id {transactional_id!r}")
        return coordinator

    def coordinator_error(self, transactional_id: str) -> ErrorCode | None:
        """NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS / None (FindCoordinator's peer check)."""
        try:
            coordinator = self.coordinator_for(transactional_id)
        except NotCoordinatorError:
            return ErrorCode.not_coordinator
        return None if coordinator.loaded else ErrorCode.coordinator_load_in_progress

    def coordinators(self) -> list[TransactionCoordinator]:
        """Every loaded coordinator of this broker (admin queries and metrics merge them)."""
        if self._cluster is None:
            return [self.coordinator]
        return [c for _p, c in sorted(self._owned.items()) if c.loaded]

    async def load_partition(self, partition: int, lease: Lease) -> None:
        """This broker acquired ``partition``'s lease: rebuild its transactions and finish the
        prepared ones (markers carry the lease epoch as coordinator epoch)."""
        cluster = self._require_cluster()
        coordinator = self._new_coordinator()
        self._owned[partition] = coordinator  # COORDINATOR_LOAD_IN_PROGRESS while reading
        try:
            records = await cluster.read_all([partition])
        except BaseException:
            if self._owned.get(partition) is coordinator:
                del self._owned[partition]
            raise
        if self._owned.get(partition) is not coordinator:
            return  # unloaded (or reloaded) while reading
        cluster.own(partition, lease)
        outcome = coordinator.load(records, self.now_ms(), coordinator_epoch=lease.epoch, mono_ms=self.mono_ms())
        await self.drive_async(coordinator, partition, outcome)

    def _reload_partition(self, partition: int) -> None:
        """Serve ``partition`` again from what PostgreSQL holds: its requests answer
        COORDINATOR_LOAD_IN_PROGRESS until a background read (retried, bounded by the lease:
        it stops once the partition is unloaded) has rebuilt it."""
        cluster = self._require_cluster()
        lease = cluster.lease_of(partition)
        if lease is None:
            return
        placeholder = self._new_coordinator()  # never loaded: LOAD_IN_PROGRESS
        self._owned[partition] = placeholder
        task = asyncio.get_running_loop().create_task(self._reload_until_loaded(partition, lease, placeholder))
        self._reloads.add(task)
        task.add_done_callback(self._reloads.discard)

    async def _reload_until_loaded(self, partition: int, lease: Lease, placeholder: TransactionCoordinator) -> None:
        delay_s = 0.05
        while self._owned.get(partition) is placeholder and self._require_cluster().lease_of(partition) == lease:
            try:
                await self.load_partition(partition, lease)
                return
            except (OnceStreamError, OSError) as exc:
                log.error("cannot reload %s-%d: %s", TRANSACTION_STATE_TOPIC, partition, exc)
                if self._require_cluster().lease_of(partition) == lease:  # still ours: keep answering LOAD_IN_PROGRESS
                    self._owned.setdefault(partition, placeholder)
            await asyncio.sleep(delay_s)
            delay_s = min(delay_s * 2, 2.0)

    def unload_partition(self, partition: int) -> None:
        """This broker lost or handed off ``partition``'s lease: stop coordinating its ids."""
        cluster = self._require_cluster()
        cluster.disown(partition)
        self._owned.pop(partition, None)
        self._failed_cluster_jobs = [(p, job) for p, job in self._failed_cluster_jobs if p != partition]

    def _require_cluster(self) -> AsyncInternalTopic:
        if self._cluster is None:
            raise CoordinatorInvariantError("the single broker owns every __transaction_state partition")
        return self._cluster

    def describe_transactions(self, transactional_ids: Iterable[str]) -> tuple[TransactionDescription, ...]:
        """DescribeTransactions across the partitions this broker coordinates (NOT_COORDINATOR /
        COORDINATOR_LOAD_IN_PROGRESS for ids it does not serve, as Kafka answers per id)."""
        if self._cluster is None:
            return self.coordinator.describe_transactions(transactional_ids)
        out: list[TransactionDescription] = []
        for tid in transactional_ids:
            error = self.coordinator_error(tid)
            if error is not None:
                out.append(TransactionDescription(tid, error))
            else:
                out.extend(self.coordinator_for(tid).describe_transactions([tid]))
        return tuple(out)

    def list_transactions(self, now_ms: int, partitions: Iterable[int] | None = None,
                          **filters: Any) -> ListTransactionsResponse:
        """ListTransactions over every partition this broker coordinates (its share of the
        cluster; the admin client asks every broker and merges, as with Kafka). Cluster mode:
        ``partitions`` are the ones PostgreSQL says this broker owns now
        (``ClusterCoordinators.transaction_partitions_to_list``); one of them not loaded here
        answers COORDINATOR_LOAD_IN_PROGRESS, one loaded here but not among them (its lease
        moved, the unload is a round away) is left to its new owner's answer."""
        if self._cluster is None:
            return self.coordinator.list_transactions(now_ms, **filters)
        wanted = set(self._owned) if partitions is None else set(partitions)
        listed: list[TransactionListing] = []
        unknown: tuple[str, ...] = ()
        error = ErrorCode.none
        for partition in sorted(wanted):
            coordinator = self._owned.get(partition)
            if coordinator is None or not coordinator.loaded:
                error = ErrorCode.coordinator_load_in_progress
                continue
            part = coordinator.list_transactions(now_ms, **filters)
            if part.error != ErrorCode.none:
                return part
            listed.extend(part.transactions)
            unknown = part.unknown_state_filters
        if error != ErrorCode.none:
            return ListTransactionsResponse(error)
        return ListTransactionsResponse(ErrorCode.none, tuple(listed), unknown)

    def transaction_counts(self, now_ms: int) -> TransactionCounts:
        """The metrics' transaction counts, summed over the coordinators of this broker."""
        counts = [c.transaction_counts(now_ms) for c in self.coordinators()]
        return TransactionCounts(
            sum(c.open for c in counts), sum(c.prepared for c in counts), sum(c.completing for c in counts),
            max((c.oldest_age_ms for c in counts), default=0))

    async def call_async(self, transactional_id: str, fn: Callable[[TransactionCoordinator, int], Outcome[Any]]) -> Any:
        """Run one coordinator call for ``transactional_id`` to completion; its response (None
        when its record could not be persisted: the client retries). With the local log this is
        :meth:`call`; in cluster mode NOT_COORDINATOR / LOAD_IN_PROGRESS raise as typed errors."""
        if self._cluster is None:
            return self.call(lambda now: fn(self.coordinator, now))
        partition = self.partition_for(transactional_id)
        coordinator = self.coordinator_for(transactional_id)
        if not coordinator.loaded:
            raise CoordinatorLoadInProgressError(f"__transaction_state-{partition} is loading")
        box: list[Any] = []
        await self.drive_async(coordinator, partition, fn(coordinator, self.now_ms()), box)
        return box[0] if box else None

    async def drive_async(self, coordinator: TransactionCoordinator, partition: int, outcome: Outcome[Any],
                          box: list[Any] | None = None) -> None:
        """Cluster mode's :meth:`drive` for one partition's coordinator: fenced appends, markers
        through the writer. A lost lease unloads the partition and stops here (the new owner
        resumes from what PostgreSQL holds)."""
        cluster = self._require_cluster()
        work: deque[tuple[Outcome[Any], list[Any] | None]] = deque([(outcome, box)])
        while work:
            current, sink = work.popleft()
            if self._owned.get(partition) is not coordinator:
                return  # the partition was unloaded: whatever is left is the next owner's
            if current.response is not None and sink is not None and not sink:
                sink.append(current.response)
            for write in current.records_to_persist:
                if self._owned.get(partition) is not coordinator:
                    return  # unloaded during an earlier await: a new load may carry a new lease
                now = self.now_ms()
                try:
                    await cluster.append(partition, [(write.key, write.value)], now)
                except LeaseLostError as exc:
                    log.warning("lost the lease of %s-%d: %s", TRANSACTION_STATE_TOPIC, partition, exc)
                    self.unload_partition(partition)
                    return
                except (OnceStreamError, OSError) as exc:
                    # The outcome is unknown (the commit may have happened before the connection
                    # broke): the partition is read back from PostgreSQL, never assumed either way.
                    log.error("cannot persist transaction %r: %s", write.transactional_id, exc)
                    self._reload_partition(partition)
                    return
                work.append((coordinator.on_persisted(write.write_id, now, mono_ms=self.mono_ms()), sink))
            for job in current.markers_to_write:
                lease = cluster.lease_of(partition)
                if lease is None or self._owned.get(partition) is not coordinator:
                    return
                try:
                    written = await self._write_cluster_markers(job, lease)
                except LeaseLostError as exc:
                    log.warning("lost the lease of %s-%d: %s", TRANSACTION_STATE_TOPIC, partition, exc)
                    self.unload_partition(partition)
                    return
                if written:
                    if job.commit:
                        self._steps.reached("before-complete")
                    work.append((coordinator.markers_written(
                        job.transactional_id, job.producer_id, job.producer_epoch, self.now_ms()), None))
                else:
                    self._failed_cluster_jobs.append((partition, job))

    async def _write_cluster_markers(self, job: MarkerJob, lease: Lease) -> bool:
        """Markers of __consumer_offsets partitions this broker's group service owns complete
        their staged offsets here; every other partition goes to the marker writer."""
        if self._markers is None:
            raise CoordinatorInvariantError("cluster mode needs a transaction marker writer")
        if job.commit:
            self._steps.reached("before-markers")
        groups = self._groups.coordinator
        local = tuple(tp for tp in job.partitions
                      if tp.topic == OFFSETS_TOPIC and groups.owns_partition(tp.partition)
                      and self._groups.coordinator_error_for_partition(tp.partition) is None)
        elsewhere = tuple(tp for tp in job.partitions if tp not in local)
        ok = True
        if elsewhere:
            ok = await self._markers.write_markers(dataclasses.replace(job, partitions=elsewhere), lease)
            for tp in elsewhere:
                self._on_marker(tp.topic, tp.partition)
        for tp in local:
            if not await self._groups.complete_txn_offsets_async(tp.partition, job.producer_id, job.commit):
                ok = False
        return ok

    async def _complete_txn_offsets_async(self, offsets_partition: int, producer_id: int, commit: bool) -> bool:
        coord = self._groups.coordinator
        ok = True
        for group_id in coord.group_ids():
            if coord.partition_for(group_id) != offsets_partition or producer_id not in coord.pending_txn_offsets(group_id):
                continue
            if await self._groups.complete_async(coord.complete_pending_txn_offsets(
                group_id, producer_id, commit, self.now_ms(), mono_ms=self.mono_ms()
            )):
                ok = False
        return ok

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
        if self._logs is None:
            raise CoordinatorInvariantError("cluster mode writes markers through its marker writer")
        logs = self._logs
        now = self.now_ms()
        ok = True
        if job.commit:
            self._steps.reached("before-markers")
        for index, tp in enumerate(job.partitions):
            if job.commit and index == 1:
                self._steps.reached("between-markers")
            try:
                plog = logs.get(tp.topic, tp.partition)
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
                if self._cluster is not None:
                    await self._tick_cluster()
                    continue
                failed, self._failed_jobs = self._failed_jobs, []
                for job in failed:
                    self.drive(Outcome(None, (), (job,)))
                if self._producer_ids_ready is not None:
                    await self._producer_ids_ready()
                self.drive(self.coordinator.tick(self.now_ms(), mono_ms=self.mono_ms()))
            except Exception:  # never let one bad transaction stop every timer
                log.exception("transaction coordinator tick failed")

    async def _tick_cluster(self) -> None:
        failed, self._failed_cluster_jobs = self._failed_cluster_jobs, []
        for partition, job in failed:
            coordinator = self._owned.get(partition)
            if coordinator is not None:
                await self.drive_async(coordinator, partition, Outcome(None, (), (job,)))
        if self._producer_ids_ready is not None:
            await self._producer_ids_ready()
        for partition, coordinator in sorted(self._owned.items()):
            if coordinator.loaded:
                await self.drive_async(coordinator, partition, coordinator.tick(self.now_ms(), mono_ms=self.mono_ms()))

    # --- helpers for handlers -----------------------------------------------------------------

    def stage_offsets(self, group_id: str, producer_id: int, offsets: dict[TopicPartition, Any], **member: Any) -> Any:
        """TxnOffsetCommit: stage offsets as pending in the group coordinator (KIP-447 checks)."""
        result, writes = self._groups.coordinator.add_pending_txn_offsets(
            group_id, producer_id, offsets, self.now_ms(), mono_ms=self.mono_ms(), **member
        )
        return self._groups.finish(group_id, result, writes)

    async def stage_offsets_async(self, group_id: str, producer_id: int, offsets: dict[TopicPartition, Any],
                                  **member: Any) -> Any:
        """:meth:`stage_offsets` through the group service's :meth:`GroupService.finish_async`."""
        result, writes = self._groups.coordinator.add_pending_txn_offsets(
            group_id, producer_id, offsets, self.now_ms(), mono_ms=self.mono_ms(), **member
        )
        return await self._groups.finish_async(group_id, result, writes)


def fenced_for_version(error: ErrorCode, api_version: int, first_version_with_fenced: int) -> ErrorCode:
    """KIP-588: clients older than the version that knows PRODUCER_FENCED get INVALID_PRODUCER_EPOCH."""
    if error == ErrorCode.producer_fenced and api_version < first_version_with_fenced:
        return ErrorCode.invalid_producer_epoch
    return error
