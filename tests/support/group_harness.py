"""Drivers for exercising the group coordinator without a broker (test tree only): tests and deterministic simulations.

* :class:`Captured` records what a ``respond`` callback received.
* :class:`InMemoryOffsetsLog` stands in for the __consumer_offsets partitions: it appends the
  coordinator's writes and can replay them (optionally compacted by key) into :meth:`load`.
* :class:`GroupHarness` wraps a coordinator with one-line client calls that apply every returned
  write to the log first, as the broker contract demands.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Generic, TypeVar

from kio.schema.errors import ErrorCode

from oncestream.coordinator.group.coordinator import GroupCoordinator
from oncestream.coordinator.group.messages import (
    HeartbeatRequest,
    JoinProtocol,
    JoinRequest,
    JoinResult,
    LeaveRequest,
    LeaveResult,
    LeavingMember,
    OffsetCommitRequest,
    OffsetCommitResult,
    OffsetsTopicWrite,
    PartitionOffsetCommit,
    SyncRequest,
    SyncResult,
    TopicPartition,
)

T = TypeVar("T")
Record = tuple[bytes, bytes | None]


class Captured(Generic[T]):
    """A ``respond`` callback that remembers every result it was given."""

    def __init__(self) -> None:
        self.results: list[T] = []

    def __call__(self, result: T) -> None:
        self.results.append(result)

    @property
    def done(self) -> bool:
        """At least one result arrived."""
        return bool(self.results)

    @property
    def result(self) -> T:
        """The one result (a response must be delivered exactly once)."""
        assert len(self.results) == 1, f"expected exactly one response, got {self.results!r}"
        return self.results[0]


class InMemoryOffsetsLog:
    """__consumer_offsets partitions as lists of (key, value) in append order."""

    def __init__(self) -> None:
        self.partitions: dict[int, list[Record]] = {}

    def append(self, writes: Sequence[OffsetsTopicWrite]) -> None:
        """Append the coordinator's writes."""
        for write in writes:
            self.partitions.setdefault(write.partition, []).extend(write.records)

    def records(self) -> Iterator[Record]:
        """Every record, partition by partition, in log order."""
        for partition in sorted(self.partitions):
            yield from self.partitions[partition]

    def compacted(self, *, drop_tombstones: bool = False) -> Iterator[Record]:
        """What log compaction keeps: the last record per key, in its original order."""
        for partition in sorted(self.partitions):
            records = self.partitions[partition]
            last_index = {key: i for i, (key, _) in enumerate(records)}
            for i, (key, value) in enumerate(records):
                if last_index[key] != i:
                    continue
                if value is None and drop_tombstones:
                    continue
                yield key, value

    def __len__(self) -> int:
        return sum(len(r) for r in self.partitions.values())


class GroupHarness:
    """Client-shaped calls against a coordinator; every write lands in ``self.log`` first."""

    def __init__(
        self, coordinator: GroupCoordinator, log: InMemoryOffsetsLog | None = None
    ) -> None:
        self.coordinator = coordinator
        self.log = log if log is not None else InMemoryOffsetsLog()

    def join(
        self,
        group_id: str,
        member_id: str = "",
        *,
        now_ms: int,
        instance_id: str | None = None,
        protocols: Sequence[tuple[str, bytes]] = (("range", b"r"),),
        protocol_type: str = "consumer",
        session_timeout_ms: int = 10_000,
        rebalance_timeout_ms: int = 30_000,
        api_version: int = 3,
        client_id: str = "client",
    ) -> Captured[JoinResult]:
        """Send JoinGroup; the returned Captured fills in when the coordinator answers."""
        captured: Captured[JoinResult] = Captured()
        request = JoinRequest(
            group_id=group_id,
            member_id=member_id,
            protocol_type=protocol_type,
            protocols=tuple(JoinProtocol(n, m) for n, m in protocols),
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            api_version=api_version,
            group_instance_id=instance_id,
            client_id=client_id,
            client_host="/127.0.0.1",
        )
        self.log.append(self.coordinator.join_group(request, now_ms, captured))
        return captured

    def sync(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        *,
        now_ms: int,
        assignments: dict[str, bytes] | None = None,
        instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> Captured[SyncResult]:
        """Send SyncGroup (the leader passes ``assignments``)."""
        captured: Captured[SyncResult] = Captured()
        request = SyncRequest(
            group_id=group_id,
            generation_id=generation_id,
            member_id=member_id,
            group_instance_id=instance_id,
            protocol_type=protocol_type,
            protocol_name=protocol_name,
            assignments=assignments or {},
        )
        self.log.append(self.coordinator.sync_group(request, now_ms, captured))
        return captured

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        *,
        now_ms: int,
        instance_id: str | None = None,
    ) -> ErrorCode:
        """Send Heartbeat and return its error code."""
        request = HeartbeatRequest(group_id, member_id, generation_id, instance_id)
        return self.coordinator.heartbeat(request, now_ms).error

    def leave(
        self, group_id: str, *members: LeavingMember | str, now_ms: int
    ) -> LeaveResult:
        """Send LeaveGroup for member ids (str) or full LeavingMember entries."""
        entries = tuple(m if isinstance(m, LeavingMember) else LeavingMember(m) for m in members)
        result, writes = self.coordinator.leave_group(LeaveRequest(group_id, entries), now_ms)
        self.log.append(writes)
        return result

    def commit(
        self,
        group_id: str,
        offsets: dict[TopicPartition, int | PartitionOffsetCommit],
        *,
        now_ms: int,
        member_id: str = "",
        generation_id: int = -1,
        instance_id: str | None = None,
    ) -> OffsetCommitResult:
        """Send OffsetCommit (plain ints are offsets without metadata)."""
        entries = {
            tp: v if isinstance(v, PartitionOffsetCommit) else PartitionOffsetCommit(v)
            for tp, v in offsets.items()
        }
        request = OffsetCommitRequest(
            group_id, entries, member_id, generation_id, instance_id
        )
        result, writes = self.coordinator.commit_offsets(request, now_ms)
        self.log.append(writes)
        return result

    def tick(self, now_ms: int) -> None:
        """Fire due timers and persist what they wrote."""
        self.log.append(self.coordinator.tick(now_ms))
