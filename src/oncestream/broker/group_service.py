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
import logging
from collections.abc import Callable
from typing import Any

from oncestream.broker.internal_topic import InternalTopic
from oncestream.coordinator.group import GroupCoordinator, GroupCoordinatorConfig
from oncestream.coordinator.group.messages import OffsetsTopicWrite
from oncestream.errors import KafkaError

log = logging.getLogger("oncestream.broker")

OFFSETS_TOPIC = "__consumer_offsets"
_MAX_TICK_SLEEP_S = 0.2


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
    )


class GroupService:
    """The group coordinator plus its offsets topic, its outbox and its timer task."""

    def __init__(self, logs, props: dict[str, str], now_ms: Callable[[], int]) -> None:
        self.now_ms = now_ms
        config = group_config_from(props)
        self.topic = InternalTopic(
            logs,
            OFFSETS_TOPIC,
            config.offsets_topic_partitions,
            {"cleanup.policy": "compact", "segment.bytes": "104857600"},
            now_ms(),
        )
        if self.topic.num_partitions != config.offsets_topic_partitions:
            config = GroupCoordinatorConfig(
                **{**config.__dict__, "offsets_topic_partitions": self.topic.num_partitions}
            )
        self.coordinator = GroupCoordinator(config)
        self.coordinator.load(self.topic.read_all(), now_ms())
        self._outbox: list[tuple[asyncio.Future[Any], Any]] = []
        self._wake = asyncio.Event()

    # --- driving the coordinator ------------------------------------------------------------

    def responder(self, fut: asyncio.Future[Any]) -> Callable[[Any], None]:
        """A ``respond`` callback that parks the answer until the call's records are durable."""
        return lambda result: self._outbox.append((fut, result))

    def complete(self, writes: list[OffsetsTopicWrite], *, wake_timers: bool = True) -> None:
        """Persist a call's records, then release the answers the call produced.

        ``wake_timers`` re-arms the timer task; calls that can only move deadlines later
        (heartbeats, commits, reads) pass False so they do not pay for a tick each.
        """
        self._persist(writes)
        outbox, self._outbox = self._outbox, []
        for fut, result in outbox:
            if not fut.done():
                fut.set_result(result)
        if wake_timers:
            self._wake.set()

    def _persist(self, writes: list[OffsetsTopicWrite]) -> None:
        now = self.now_ms()
        failed: set[int] = set()
        for write in writes:
            if not write.records:
                continue
            try:
                self.topic.append(write.partition, write.records, now)
            except (KafkaError, OSError) as exc:
                log.error("cannot append to %s-%d: %s", OFFSETS_TOPIC, write.partition, exc)
                failed.add(write.partition)
        for partition in failed:
            # Reload what the log really holds so no unpersisted state is ever served.
            self.coordinator.unload_partition(partition)
            self.coordinator.load(self.topic.read_all([partition]), now, partitions=[partition])

    async def run_timers(self) -> None:
        """Fire session/rebalance/expiry timers at the coordinator's next deadline.

        Woken early after every call, since a call may create a deadline sooner than the one
        being slept on; sleeps at most _MAX_TICK_SLEEP_S either way.
        """
        while True:
            deadline = self.coordinator.next_deadline_ms()
            sleep_s = _MAX_TICK_SLEEP_S
            if deadline is not None:
                sleep_s = max(0.0, min((deadline - self.now_ms()) / 1000, _MAX_TICK_SLEEP_S))
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), sleep_s)
            except asyncio.TimeoutError:
                pass
            try:
                self.complete(self.coordinator.tick(self.now_ms()), wake_timers=False)
            except Exception:  # a coordinator bug must not stop the timers of every group
                log.exception("group coordinator tick failed")
