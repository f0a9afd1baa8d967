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
import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from oncestream.async_wait import wait_event
from oncestream.broker.internal_topic import InternalAppender, InternalTopic
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
from oncestream.errors import OnceStreamError
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

    def __init__(self, logs: LogManager, props: dict[str, str], now_ms: Callable[[], int],
                 mono_ms: Callable[[], int] | None = None, appender: InternalAppender | None = None) -> None:
        """``now_ms`` is the wall clock (record timestamps), ``mono_ms`` the monotonic clock
        (every timer); a caller with one clock may omit ``mono_ms``. ``appender`` writes the
        offsets topic's batches (the log's own append by default; internal_topic.py)."""
        self.now_ms = now_ms
        self.mono_ms = mono_ms or now_ms
        config = group_config_from(props)
        self.topic = InternalTopic(
            logs,
            OFFSETS_TOPIC,
            config.offsets_topic_partitions,
            {"cleanup.policy": "compact", "segment.bytes": "104857600"},
            now_ms(),
            appender=appender,
        )
        if self.topic.num_partitions != config.offsets_topic_partitions:
            config = GroupCoordinatorConfig(
                **{**config.__dict__, "offsets_topic_partitions": self.topic.num_partitions}
            )
        def topics_view() -> dict[str, TopicMetadata]:
            return {name: TopicMetadata(info.topic_id, name, info.num_partitions)
                    for name, info in logs.topics().items()}

        self.coordinator = GroupCoordinator(config, topics=topics_view)
        self.coordinator.load(self.topic.read_all(), now_ms(), mono_ms=self.mono_ms())
        self._outbox: list[tuple[asyncio.Future[Any], int, Any]] = []
        self._wake = asyncio.Event()
        # __consumer_offsets partitions unloaded after a failed append and not yet read back.
        self._reload: set[int] = set()

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
        for fut, partition, result in outbox:
            if partition in failed:
                result = not_durable(result)
            if not fut.done():
                fut.set_result(result)
        if wake_timers:
            self._wake.set()
        return failed

    def finish(self, group_id: str, result: Any, writes: list[OffsetsTopicWrite], *, wake_timers: bool = True) -> Any:
        """:meth:`complete` for a call on one group that returns its answer directly: the answer
        as it may be sent (NONE only if the records it reports are in the log)."""
        failed = self.complete(writes, wake_timers=wake_timers)
        return not_durable(result) if self.coordinator.partition_for(group_id) in failed else result

    def finish_delete_groups(self, result: DeleteGroupsResult, writes: list[OffsetsTopicWrite]) -> DeleteGroupsResult:
        """:meth:`finish` for DeleteGroups, whose groups may live on several partitions: a group
        is reported deleted only if the partition holding its tombstones took the append."""
        failed = self.complete(writes)
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
                self._reload_partitions()
                self.complete(self.coordinator.tick(self.now_ms(), mono_ms=self.mono_ms()), wake_timers=False)
            except Exception:  # a coordinator bug must not stop the timers of every group
                log.exception("group coordinator tick failed")
