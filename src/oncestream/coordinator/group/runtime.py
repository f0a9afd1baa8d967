"""What the group coordinator's two managers share: the groups, the clocks, the records and
answers a call produces, and the deadline heap (Kafka's coordinator runtime/shard plumbing).

Two clocks, two purposes (issue 10, clocks):

* ``mono_ms`` (monotonic) drives every timer: sessions, rebalance and join timeouts, KIP-394
  pending members, the offset-cleanup schedule. It must never go backwards and is never
  persisted (it means nothing after a restart).
* ``wall_ms`` (wall clock) is only written into records: commit timestamps, the explicit
  expiry of OffsetCommit v2-v4, the group's current-state timestamp, and what offset expiry
  compares those persisted timestamps with (as Kafka does). It may step either way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from oncestream.coordinator.group.config import GroupCoordinatorConfig
from oncestream.coordinator.group.deadlines import DeadlineHeap
from oncestream.coordinator.group.group import GroupMetadata
from oncestream.coordinator.group.member import MemberMetadata
from oncestream.coordinator.group.messages import (
    JoinResult,
    OffsetsTopicWrite,
    SyncResult,
)
from oncestream.coordinator.group.partitioning import partition_for
from oncestream.coordinator.group.records import Record, group_metadata_record
from oncestream.coordinator.group.state import GroupState
from oncestream.errors import (
    CoordinatorInvariantError,
    CoordinatorLoadInProgressError,
    InvalidGroupIdError,
    NotCoordinatorError,
)


class GroupRuntime:
    """Shared state and plumbing of one group coordinator (see module docstring)."""

    def __init__(self, config: GroupCoordinatorConfig, member_id_suffix: Callable[[], str]) -> None:
        self.config = config
        self.member_id_suffix = member_id_suffix
        self.groups: dict[str, GroupMetadata] = {}
        self.loading_partitions: set[int] = set()
        # Partitions another broker owns (cluster mode; a single broker owns them all): their
        # groups answer NOT_COORDINATOR. Always a subset of loading_partitions.
        self.foreign_partitions: set[int] = set()
        # Responses to deliver at the end of the current call.
        self._outbox: list[tuple[Callable[[Any], None], Any]] = []
        # Records produced by the current call, with the group each belongs to.
        self.pending_writes: list[tuple[str, Record]] = []
        # Stand-in for record offsets in __consumer_offsets: grows with every record written.
        self._log_order = 0
        self.wall_ms = 0
        self.mono_ms = 0
        self.clock_started = False
        # One entry per group: its earliest timer (monotonic ms).
        self.deadlines: DeadlineHeap[str] = DeadlineHeap()
        # Groups the current call may have changed: their heap entry is refreshed at its end.
        self.touched: set[str] = set()

    @property
    def num_partitions(self) -> int:
        """offsets.topic.num.partitions."""
        return self.config.offsets_topic_partitions

    def partition_for(self, group_id: str) -> int:
        """The __consumer_offsets partition of ``group_id`` (Kafka's mapping)."""
        return partition_for(group_id, self.num_partitions)

    def advance(self, now_ms: int, mono_ms: int | None) -> int:
        """Take the call's clocks; returns the monotonic time. ``mono_ms`` None means the
        caller has one clock for both (tests, simulations): ``now_ms`` is then used for both."""
        mono = now_ms if mono_ms is None else mono_ms
        if self.clock_started and mono < self.mono_ms:
            raise CoordinatorInvariantError(f"monotonic time went backwards: {mono} < {self.mono_ms}")
        self.clock_started = True
        self.mono_ms = mono
        self.wall_ms = now_ms
        return mono

    def touch_group(self, group_id: str) -> None:
        """The current call may change ``group_id``'s timers: refresh its heap entry at the end."""
        self.touched.add(group_id)

    def validate_group_id(self, group_id: str, *, allow_empty: bool) -> None:
        """Kafka's validateGroupStatus: group id shape, then whether its partition is loaded.

        OffsetCommit/OffsetFetch/DescribeGroups/DeleteGroups accept "" for compatibility.
        """
        if group_id is None or (not allow_empty and group_id == ""):
            raise InvalidGroupIdError(f"invalid group id {group_id!r}")
        partition = self.partition_for(group_id)
        if partition in self.foreign_partitions:
            raise NotCoordinatorError(f"partition {partition} of {group_id!r} is owned by another broker")
        if partition in self.loading_partitions:
            raise CoordinatorLoadInProgressError(f"partition of {group_id!r} is loading")

    def next_log_order(self) -> int:
        self._log_order += 1
        return self._log_order

    def emit(self, group_id: str, record: Record) -> None:
        self.pending_writes.append((group_id, record))

    def write_group(self, group: GroupMetadata) -> None:
        self.emit(group.group_id, group_metadata_record(group.group_id, group.snapshot()))

    def kill_group(self, group: GroupMetadata) -> None:
        """Mark the group Dead, forget it and tombstone its metadata."""
        if group.members:
            raise CoordinatorInvariantError("only a group without members can die")
        group.join_timer = None
        group.sync_timer = None
        group.transition_to(GroupState.DEAD, self.wall_ms)
        del self.groups[group.group_id]
        self.touched.add(group.group_id)
        # Metadata records exist only once a generation was formed (Kafka skips the tombstone
        # for offset-only groups too).
        if group.generation_id > 0:
            self.emit(group.group_id, group_metadata_record(group.group_id, None))

    def deliver(self, callback: Callable[[Any], None], result: Any) -> None:
        self._outbox.append((callback, result))

    def invoke_join(self, member: MemberMetadata, result: JoinResult) -> bool:
        callback = member.join_callback
        if callback is None:
            return False
        member.join_callback = None
        self.deliver(callback, result)
        return True

    def invoke_sync(self, member: MemberMetadata, result: SyncResult) -> bool:
        callback = member.sync_callback
        if callback is None:
            return False
        member.sync_callback = None
        self.deliver(callback, result)
        return True

    def drop_deferred_writes(self, partitions: set[int]) -> None:
        # Records of unloaded partitions describe state that is gone; the log is the truth now.
        self.pending_writes = [
            (g, r) for g, r in self.pending_writes if self.partition_for(g) not in partitions
        ]

    def finish(self, *, read_only: bool = False) -> list[OffsetsTopicWrite]:
        """Take this call's records (grouped per partition, order kept), then run callbacks.

        Read-only calls (Heartbeat, OffsetFetch, DescribeGroups) can fire a group's timers, and a
        join phase ending Empty writes a metadata record. Those calls keep such records for the
        next writing call or tick: they acknowledge nothing (Kafka, too, only warns if that
        write fails), so nothing is promised before they are durable.
        """
        writes: list[OffsetsTopicWrite] = []
        if not read_only:
            by_partition: dict[int, list[Record]] = {}
            for group_id, record in self.pending_writes:
                by_partition.setdefault(self.partition_for(group_id), []).append(record)
            self.pending_writes = []
            for partition, records in by_partition.items():
                writes.append(OffsetsTopicWrite(partition, tuple(records)))
        while self._outbox:
            callback, result = self._outbox.pop(0)
            callback(result)
        return writes
