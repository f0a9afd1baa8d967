"""Drives the sans-io GroupCoordinator from the asyncio broker.

The coordinator's contract: every call may return records for __consumer_offsets and may answer
JoinGroup/SyncGroup requests (its own or other members' waiting ones) through ``respond``
callbacks; the records must be appended before any of those answers is sent. So ``respond`` only
parks the answer in an outbox, ``_persist`` appends the call's records, and only then are the
parked answers released to their waiting requests. If an append fails, the affected partition is
reloaded from what the log really holds, so nothing unpersisted is ever served.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterator
from typing import Any

from kio.schema.errors import ErrorCode

from oncestream.async_wait import wait_event
from oncestream.broker.internal_topic import INTERNAL_TOPIC_CONFIGS, AsyncInternalTopic, InternalAppender, InternalTopic
from oncestream.cluster.leases.coordinator_leases import Lease, LeaseLostError
from oncestream.coordinator.group import GroupCoordinator, GroupCoordinatorConfig
from oncestream.coordinator.group.consumer.messages import ConsumerHeartbeatResult
from oncestream.coordinator.group.consumer.records import TopicMetadata
from oncestream.coordinator.group.messages import (
    DeleteGroupsResult,
    JoinResult,
    LeaveResult,
    OffsetCommitResult,
    OffsetDeleteResult,
    OffsetsTopicWrite,
    SyncResult,
)
from oncestream.coordinator.group.migration import CONFIG_NAME as MIGRATION_POLICY_CONFIG
from oncestream.coordinator.group.migration import ConsumerGroupMigrationPolicy
from oncestream.errors import CoordinatorInvariantError, OnceStreamError
from oncestream.log.manager import LogManager

log = logging.getLogger("oncestream.broker")

OFFSETS_TOPIC = "__consumer_offsets"
_MAX_TICK_SLEEP_S = 0.2
# What a request hears when the records its answer depends on could not be appended: retriable,
# and it sends the client back to FindCoordinator (Kafka maps a failed append the same way).
NOT_DURABLE = ErrorCode.coordinator_not_available


def _fail_if_none(error: ErrorCode) -> ErrorCode:
    return NOT_DURABLE if error == ErrorCode.none else error


def not_durable(result: Any) -> Any:
    """``result`` as it must be answered when the append it depends on failed: every NONE
    becomes COORDINATOR_NOT_AVAILABLE; errors the coordinator gave stay (they promised nothing)."""
    if isinstance(result, JoinResult):
        if result.error != ErrorCode.none:
            return result
        return JoinResult(NOT_DURABLE, member_id=result.member_id)
    if isinstance(result, SyncResult):
        return result if result.error != ErrorCode.none else SyncResult(NOT_DURABLE)
    if isinstance(result, OffsetCommitResult):
        return OffsetCommitResult({tp: _fail_if_none(e) for tp, e in result.partitions.items()})
    if isinstance(result, LeaveResult):
        return dataclasses.replace(
            result,
            error=_fail_if_none(result.error),
            members=tuple(dataclasses.replace(m, error=_fail_if_none(m.error)) for m in result.members),
        )
    if isinstance(result, ConsumerHeartbeatResult):
        if result.error != ErrorCode.none:
            return result
        return ConsumerHeartbeatResult(NOT_DURABLE, "the group's records could not be written")
    if isinstance(result, OffsetDeleteResult):
        return OffsetDeleteResult(
            _fail_if_none(result.error), {tp: _fail_if_none(e) for tp, e in result.partitions.items()}
        )
    raise TypeError(f"no not-durable form for {type(result).__name__}")


def group_config_from(props: dict[str, str]) -> GroupCoordinatorConfig:
    """GroupCoordinatorConfig from Kafka broker property names."""
    d = GroupCoordinatorConfig()

    def num(name: str, default: int) -> int:
        return int(props.get(name, default))

    return GroupCoordinatorConfig(
        offsets_topic_partitions=num("offsets.topic.num.partitions", 10),
        group_min_session_timeout_ms=num("group.min.session.timeout.ms", d.group_min_session_timeout_ms),
        group_max_session_timeout_ms=num("group.max.session.timeout.ms", d.group_max_session_timeout_ms),
        group_initial_rebalance_delay_ms=num("group.initial.rebalance.delay.ms", d.group_initial_rebalance_delay_ms),
        group_max_size=num("group.max.size", d.group_max_size),
        offset_metadata_max_bytes=num("offset.metadata.max.bytes", d.offset_metadata_max_bytes),
        offsets_retention_ms=num("offsets.retention.minutes", d.offsets_retention_ms // 60000) * 60000,
        offsets_retention_check_interval_ms=num(
            "offsets.retention.check.interval.ms", d.offsets_retention_check_interval_ms
        ),
        consumer_session_timeout_ms=num("group.consumer.session.timeout.ms", d.consumer_session_timeout_ms),
        consumer_min_session_timeout_ms=num("group.consumer.min.session.timeout.ms", d.consumer_min_session_timeout_ms),
        consumer_max_session_timeout_ms=num("group.consumer.max.session.timeout.ms", d.consumer_max_session_timeout_ms),
        consumer_heartbeat_interval_ms=num("group.consumer.heartbeat.interval.ms", d.consumer_heartbeat_interval_ms),
        consumer_min_heartbeat_interval_ms=num(
            "group.consumer.min.heartbeat.interval.ms", d.consumer_min_heartbeat_interval_ms),
        consumer_max_heartbeat_interval_ms=num(
            "group.consumer.max.heartbeat.interval.ms", d.consumer_max_heartbeat_interval_ms),
        consumer_max_size=num("group.consumer.max.size", d.consumer_max_size),
        consumer_assignors=props.get("group.consumer.assignors", d.consumer_assignors),
        consumer_migration_policy=ConsumerGroupMigrationPolicy.parse(
            props.get(MIGRATION_POLICY_CONFIG, d.consumer_migration_policy.value)),
    )


class GroupService:
    """The group coordinator plus its offsets topic, its outbox and its timer task."""

    def __init__(self, logs: LogManager | None, props: dict[str, str], now_ms: Callable[[], int],
                 mono_ms: Callable[[], int] | None = None, appender: InternalAppender | None = None, *,
                 offsets_log: AsyncInternalTopic | None = None,
                 topics: Callable[[], dict[str, TopicMetadata]] | None = None) -> None:
        """``now_ms`` is the wall clock (record timestamps), ``mono_ms`` the monotonic clock
        (every timer); a caller with one clock may omit ``mono_ms``. ``appender`` writes the
        offsets topic's batches (the log's own append by default; internal_topic.py).

        Cluster mode: ``offsets_log`` holds the offsets topic (``logs`` may then be None) and
        ``topics`` lists the cluster's topics (KIP-848 assignors); no partition is owned until
        ``load_partition``."""
        self.now_ms = now_ms
        self.mono_ms = mono_ms or now_ms
        config = group_config_from(props)
        self._local: InternalTopic | None = None
        self._cluster: AsyncInternalTopic | None = offsets_log
        if offsets_log is None:
            if logs is None:
                raise CoordinatorInvariantError("a group service needs a log manager or a cluster offsets log")
            self._local = InternalTopic(
                logs,
                OFFSETS_TOPIC,
                config.offsets_topic_partitions,
                dict(INTERNAL_TOPIC_CONFIGS),
                now_ms(),
                appender=appender,
            )
        num_partitions = self.num_partitions
        if num_partitions != config.offsets_topic_partitions:
            config = GroupCoordinatorConfig(
                **{**config.__dict__, "offsets_topic_partitions": num_partitions}
            )
        if topics is None:
            if logs is None:
                raise CoordinatorInvariantError("a group service needs a log manager or a topics view")
            local_logs = logs

            def topics_view() -> dict[str, TopicMetadata]:
                return {name: TopicMetadata(info.topic_id, name, info.num_partitions)
                        for name, info in local_logs.topics().items()}

            topics = topics_view

        self.coordinator = GroupCoordinator(config, topics=topics)
        if self._local is not None:
            self.coordinator.load(self._local.read_all(), now_ms(), mono_ms=self.mono_ms())
        else:
            for partition in range(num_partitions):
                self.coordinator.disown_partition(partition)
        self._outbox: list[tuple[asyncio.Future[Any], int, Any]] = []
        self._wake = asyncio.Event()
        # __consumer_offsets partitions unloaded after a failed append and not yet read back.
        self._reload: set[int] = set()
        # Cluster mode: appends go out one at a time, in the order the coordinator made them;
        # a partition's generation grows whenever its in-memory state is dropped.
        self._append_lock = asyncio.Lock()
        self._generations: dict[int, int] = {}

    @property
    def topic(self) -> InternalTopic:
        """The local offsets topic (single broker only)."""
        if self._local is None:
            raise CoordinatorInvariantError("cluster mode keeps __consumer_offsets in PostgreSQL")
        return self._local

    @property
    def num_partitions(self) -> int:
        """__consumer_offsets partitions (an existing topic keeps its count)."""
        if self._cluster is not None:
            return self._cluster.num_partitions
        return self.topic.num_partitions

    # --- cluster mode: partitions owned through leases ----------------------------------------

    @property
    def topic_name(self) -> str:
        """The internal topic whose partitions this service coordinates (lease keeper)."""
        return OFFSETS_TOPIC

    def coordinator_error(self, group_id: str) -> ErrorCode | None:
        """NOT_COORDINATOR when another broker owns the group's partition (cluster mode only),
        LOAD_IN_PROGRESS while it loads or reloads after a failed append, None when this broker
        serves it."""
        return self.coordinator_error_for_partition(self.coordinator.partition_for(group_id))

    def coordinator_error_for_partition(self, partition: int) -> ErrorCode | None:
        """:meth:`coordinator_error` of the groups of one __consumer_offsets partition."""
        if not self.coordinator.owns_partition(partition):
            return ErrorCode.not_coordinator
        if partition in self._reload or (self._cluster is not None and self._cluster.lease_of(partition) is None):
            return ErrorCode.coordinator_load_in_progress
        return None

    async def load_partition(self, partition: int, lease: Lease) -> None:
        """This broker acquired ``partition``'s lease: read its records and serve its groups."""
        cluster = self._require_cluster()
        self.coordinator.begin_loading(partition)
        self._reload.discard(partition)
        try:
            records = await cluster.read_all([partition])
        except BaseException:
            self.coordinator.disown_partition(partition)
            raise
        if self.coordinator.owns_partition(partition):  # not unloaded while reading
            cluster.own(partition, lease)
            self.coordinator.load(records, self.now_ms(), partitions=[partition], mono_ms=self.mono_ms())
            self._wake.set()

    def unload_partition(self, partition: int) -> None:
        """This broker lost or handed off ``partition``'s lease: forget its groups at once."""
        cluster = self._require_cluster()
        cluster.disown(partition)
        self._generations[partition] = self._generations.get(partition, 0) + 1
        self.coordinator.disown_partition(partition)
        self._reload.discard(partition)

    async def complete_txn_offsets_async(self, offsets_partition: int, producer_id: int, commit: bool) -> bool:
        """A transaction marker for ``offsets_partition`` (cluster mode: from this broker's
        transaction coordinator, or WriteTxnMarkers from another broker's): make the producer's
        staged offsets visible (commit) or drop them (abort). False if the records saying so
        could not be appended (the marker must be retried; a repeated marker changes nothing)."""
        coord = self.coordinator
        ok = True
        for group_id in coord.group_ids():
            if coord.partition_for(group_id) != offsets_partition or producer_id not in coord.pending_txn_offsets(group_id):
                continue
            if await self.complete_async(coord.complete_pending_txn_offsets(
                group_id, producer_id, commit, self.now_ms(), mono_ms=self.mono_ms()
            )):
                ok = False
        return ok

    def _require_cluster(self) -> AsyncInternalTopic:
        if self._cluster is None:
            raise CoordinatorInvariantError("the single broker owns every __consumer_offsets partition")
        return self._cluster

    # --- driving the coordinator ------------------------------------------------------------

    def responder(self, fut: asyncio.Future[Any], group_id: str) -> Callable[[Any], None]:
        """A ``respond`` callback that parks the answer until the call's records are durable
        (and turns it into an error if the group's partition could not be appended to)."""
        partition = self.coordinator.partition_for(group_id)
        return lambda result: self._outbox.append((fut, partition, result))

    def complete(self, writes: list[OffsetsTopicWrite], *, wake_timers: bool = True) -> frozenset[int]:
        """Persist a call's records, then release the answers the call produced.

        Returns the __consumer_offsets partitions whose append failed: answers the call returns
        directly for groups of those partitions must go through :func:`not_durable` (see
        :meth:`finish`); parked answers are converted here. ``wake_timers`` re-arms the timer
        task; calls that can only move deadlines later (heartbeats, commits, reads) pass False so
        they do not pay for a tick each.
        """
        failed = self._persist(writes)
        outbox, self._outbox = self._outbox, []
        self._release(outbox, failed, wake_timers)
        return failed

    async def complete_async(self, writes: list[OffsetsTopicWrite], *, wake_timers: bool = True) -> frozenset[int]:
        """:meth:`complete` for either persistence: awaits the appends in cluster mode; exactly
        :meth:`complete` for the local log."""
        if self._cluster is None:
            return self.complete(writes, wake_timers=wake_timers)
        outbox, self._outbox = self._outbox, []  # this call's answers, parked before any await
        # The state these records come from holds only while no earlier append of the same
        # partition fails: a failure bumps the partition's generation and fails what was queued.
        seen = {write.partition: self._generations.get(write.partition, 0) for write in writes}
        failed = await self._persist_async(self._cluster, writes, seen)
        self._release(outbox, failed, wake_timers)
        return failed

    def _release(self, outbox: list[tuple[asyncio.Future[Any], int, Any]], failed: frozenset[int],
                 wake_timers: bool) -> None:
        for fut, partition, result in outbox:
            if partition in failed:
                result = not_durable(result)
            if not fut.done():
                fut.set_result(result)
        if wake_timers:
            self._wake.set()

    @contextlib.contextmanager
    def holding(self, group_id: str, member_id: str | None) -> Iterator[None]:
        """While the block persists a request of consumer-group member ``member_id``, its session
        does not run out; once answered it has a full session. In cluster mode a persist is a
        PostgreSQL transaction queued behind this broker's other appends, and the broker reads
        the member's next request (a heartbeat already sent) only after answering this one: on
        a loaded machine that wait outlasted a session and a live member was fenced
        (UNKNOWN_MEMBER_ID at its next commit). The local log's persist is synchronous, so
        there the block never yields to the timers."""
        if not member_id:
            yield
            return
        self.coordinator.hold_member(group_id, member_id)
        try:
            yield
        finally:
            self.coordinator.release_member(group_id, member_id, mono_ms=self.mono_ms())
            self._wake.set()

    def finish(self, group_id: str, result: Any, writes: list[OffsetsTopicWrite], *, wake_timers: bool = True) -> Any:
        """:meth:`complete` for a call on one group that returns its answer directly: the answer
        as it may be sent (NONE only if the records it reports are in the log)."""
        failed = self.complete(writes, wake_timers=wake_timers)
        return not_durable(result) if self.coordinator.partition_for(group_id) in failed else result

    async def finish_async(self, group_id: str, result: Any, writes: list[OffsetsTopicWrite], *,
                           wake_timers: bool = True) -> Any:
        """:meth:`finish` through :meth:`complete_async`."""
        failed = await self.complete_async(writes, wake_timers=wake_timers)
        return not_durable(result) if self.coordinator.partition_for(group_id) in failed else result

    def finish_delete_groups(self, result: DeleteGroupsResult, writes: list[OffsetsTopicWrite]) -> DeleteGroupsResult:
        """:meth:`finish` for DeleteGroups, whose groups may live on several partitions: a group
        is reported deleted only if the partition holding its tombstones took the append."""
        return self._deleted(result, self.complete(writes))

    async def finish_delete_groups_async(self, result: DeleteGroupsResult,
                                         writes: list[OffsetsTopicWrite]) -> DeleteGroupsResult:
        """:meth:`finish_delete_groups` through :meth:`complete_async`."""
        return self._deleted(result, await self.complete_async(writes))

    def _deleted(self, result: DeleteGroupsResult, failed: frozenset[int]) -> DeleteGroupsResult:
        partition_for = self.coordinator.partition_for
        return DeleteGroupsResult({
            group_id: NOT_DURABLE if error == ErrorCode.none and partition_for(group_id) in failed else error
            for group_id, error in result.errors.items()
        })

    def _persist(self, writes: list[OffsetsTopicWrite]) -> frozenset[int]:
        now = self.now_ms()
        failed: set[int] = set()
        for write in writes:
            if not write.records:
                continue
            try:
                self.topic.append(write.partition, write.records, now)
            except (OnceStreamError, OSError) as exc:
                log.error("cannot append to %s-%d: %s", OFFSETS_TOPIC, write.partition, exc)
                failed.add(write.partition)
        for partition in failed:
            # Reload what the log really holds so no unpersisted state is ever served.
            self.coordinator.unload_partition(partition)
            self._reload.add(partition)
        self._reload_partitions()
        return frozenset(failed)

    async def _persist_async(self, cluster: AsyncInternalTopic, writes: list[OffsetsTopicWrite],
                             seen: dict[int, int]) -> frozenset[int]:
        now = self.now_ms()
        failed: set[int] = set()
        lost: set[int] = set()
        async with self._append_lock:
            for write in writes:
                if not write.records:
                    continue
                if write.partition in failed or self._generations.get(write.partition, 0) != seen[write.partition]:
                    failed.add(write.partition)  # built on state that an earlier failure dropped
                    continue
                try:
                    await cluster.append(write.partition, write.records, now)
                except LeaseLostError as exc:
                    log.warning("lost the lease of %s-%d: %s", OFFSETS_TOPIC, write.partition, exc)
                    failed.add(write.partition)
                    lost.add(write.partition)
                except (OnceStreamError, OSError) as exc:
                    log.error("cannot append to %s-%d: %s", OFFSETS_TOPIC, write.partition, exc)
                    failed.add(write.partition)
            for partition in failed:
                self._generations[partition] = self._generations.get(partition, 0) + 1
        for partition in lost:
            self.unload_partition(partition)
        for partition in failed - lost:
            if self.coordinator.owns_partition(partition):
                # Read back what PostgreSQL holds (timer task) so nothing unpersisted is served.
                self.coordinator.unload_partition(partition)
                self._reload.add(partition)
                self._wake.set()
        return frozenset(failed)

    async def _reload_partitions_async(self, cluster: AsyncInternalTopic) -> None:
        """Cluster mode's :meth:`_reload_partitions`: read back from PostgreSQL, still fenced by
        the lease the partition was loaded with (a lost one is unloaded by the keeper)."""
        for partition in sorted(self._reload):
            try:
                records = await cluster.read_all([partition])
            except (OnceStreamError, OSError) as exc:
                log.error("cannot reload %s-%d: %s", OFFSETS_TOPIC, partition, exc)
                continue
            if partition in self._reload and self.coordinator.owns_partition(partition):
                self.coordinator.load(records, self.now_ms(), partitions=[partition], mono_ms=self.mono_ms())
            self._reload.discard(partition)

    def _reload_partitions(self) -> None:
        """Load unloaded partitions back from the log; one that cannot be read stays unloaded
        (its groups answer COORDINATOR_LOAD_IN_PROGRESS) and is retried by the timer task."""
        for partition in sorted(self._reload):
            try:
                records = list(self.topic.read_all([partition]))
            except (OnceStreamError, OSError) as exc:
                log.error("cannot reload %s-%d: %s", OFFSETS_TOPIC, partition, exc)
                continue
            self.coordinator.load(records, self.now_ms(), partitions=[partition], mono_ms=self.mono_ms())
            self._reload.discard(partition)

    async def run_timers(self) -> None:
        """Fire session/rebalance/expiry timers at the coordinator's next deadline.

        Woken early after every call, since a call may create a deadline sooner than the one
        being slept on; sleeps at most _MAX_TICK_SLEEP_S either way.
        """
        while True:
            deadline = self.coordinator.next_deadline_ms()
            sleep_s = _MAX_TICK_SLEEP_S
            if deadline is not None:
                sleep_s = max(0.0, min((deadline - self.mono_ms()) / 1000, _MAX_TICK_SLEEP_S))
            self._wake.clear()
            # Not asyncio.wait_for: on 3.11 it can swallow the shutdown's cancellation (async_wait).
            await wait_event(self._wake, sleep_s)
            try:
                if self._cluster is None:
                    self._reload_partitions()
                else:
                    await self._reload_partitions_async(self._cluster)
                await self.complete_async(self.coordinator.tick(self.now_ms(), mono_ms=self.mono_ms()),
                                          wake_timers=False)
            except Exception:  # a coordinator bug must not stop the timers of every group
                log.exception("group coordinator tick failed")
