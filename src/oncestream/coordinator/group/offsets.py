"""Committed offsets of classic groups (Kafka's OffsetMetadataManager), sans-io.

OffsetCommit, OffsetFetch (KIP-447 RequireStable), OffsetDelete, transactional offsets staged by
TxnOffsetCommit and completed by the transaction's marker, offset expiry, and the replay of offset
records. Offsets are kept on the group objects the membership manager owns (a commit is checked
against the group's member and generation); the timestamps here are wall-clock times, written into
records, and expiry compares them with the wall clock as Kafka does (a wall step moves expiry by
at most the step; the cleanup's schedule itself runs on the monotonic clock).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from kio.schema.errors import ErrorCode

from oncestream.coordinator.group.consumer_protocol import CONSUMER_PROTOCOL_TYPE
from oncestream.coordinator.group.group import CommittedOffset, GroupMetadata, validate_current_member
from oncestream.coordinator.group.messages import (
    NO_MEMBER_ID,
    FetchedOffset,
    OffsetAndMetadata,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetDeleteResult,
    OffsetFetchRequest,
    OffsetFetchResult,
    PartitionOffsetCommit,
)
from oncestream.coordinator.group.records import (
    offset_commit_record,
    pending_txn_offset_record,
)
from oncestream.coordinator.group.runtime import GroupRuntime
from oncestream.coordinator.group.state import GroupState
from oncestream.errors import (
    CoordinatorInvariantError,
    CoordinatorNotAvailableError,
    IllegalGenerationError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from oncestream.topic_partition import TopicPartition

_S = GroupState


class OffsetMetadataManager:
    """Committed and pending transactional offsets of every group (see module docstring)."""

    def __init__(self, runtime: GroupRuntime) -> None:
        self._rt = runtime
        # The topics a KIP-848 consumer group subscribes to (set by the coordinator): their
        # offsets do not expire while it does.
        self.subscribed_topics: Callable[[str], frozenset[str]] = lambda group_id: frozenset()

    def commit(
        self, request: OffsetCommitRequest, wall_ms: int
    ) -> dict[TopicPartition, ErrorCode]:
        """OffsetCommit: validate member and generation, store the offsets, emit their records."""
        self._rt.validate_group_id(request.group_id, allow_empty=True)
        group = self._rt.groups.get(request.group_id)
        if group is None:
            if request.generation_id >= 0:
                # A commit from a generation of a group we do not know.
                raise IllegalGenerationError(f"group {request.group_id!r} does not exist")
            # Not using group management ("simple" consumer): offsets only.
            group = GroupMetadata(request.group_id, wall_ms)
            self._rt.groups[request.group_id] = group
        self._validate_offset_commit(
            group,
            request.generation_id,
            request.member_id,
            request.group_instance_id,
            transactional=False,
        )
        if group.state in (_S.STABLE, _S.PREPARING_REBALANCE):
            # Committing during PreparingRebalance is allowed: the heartbeat tells the member to
            # rejoin; the commit counts as a sign of life.
            member = group.get(request.member_id)
            member.heartbeat_deadline_ms = self._rt.mono_ms + member.session_timeout_ms
        elif group.is_(_S.COMPLETING_REBALANCE):
            # Valid member and generation but no assignment yet: it must finish the rebalance.
            raise RebalanceInProgressError(f"group {group.group_id!r} awaits its assignment")
        else:
            if not group.is_(_S.EMPTY):
                raise CoordinatorInvariantError(str(group.state))

        errors: dict[TopicPartition, ErrorCode] = {}
        for tp, partition in request.offsets.items():
            value = self._offset_value(partition, request.retention_time_ms, wall_ms)
            if value is None:
                errors[tp] = ErrorCode.offset_metadata_too_large
                continue
            group.offsets[tp] = CommittedOffset(value, self._rt.next_log_order())
            self._rt.emit(group.group_id, offset_commit_record(group.group_id, tp, value))
            errors[tp] = ErrorCode.none
        return errors

    def _offset_value(
        self, partition: PartitionOffsetCommit, retention_time_ms: int, wall_ms: int
    ) -> OffsetAndMetadata | None:
        """The value to store, or None if the metadata is too large."""
        if len(partition.metadata.encode("utf-8")) > self._rt.config.offset_metadata_max_bytes:
            return None
        commit_ts = partition.commit_timestamp_ms
        if commit_ts is None:
            commit_ts = wall_ms
        if retention_time_ms != -1:
            # OffsetCommit v2-v4 (the only versions with a retention) carry no leader epoch.
            return OffsetAndMetadata(
                partition.offset, -1, partition.metadata, commit_ts, wall_ms + retention_time_ms
            )
        return OffsetAndMetadata(
            partition.offset, partition.leader_epoch, partition.metadata, commit_ts, None
        )

    def _validate_offset_commit(
        self,
        group: GroupMetadata,
        generation_id: int,
        member_id: str,
        instance_id: str | None,
        *,
        transactional: bool,
    ) -> None:
        if group.is_(_S.DEAD):
            raise CoordinatorNotAvailableError(f"group {group.group_id!r} is dead")
        if generation_id >= 0 or member_id != NO_MEMBER_ID or instance_id is not None:
            validate_current_member(group, member_id, instance_id)
            if generation_id != group.generation_id:
                raise IllegalGenerationError(
                    f"generation {generation_id} != {group.generation_id} of {group.group_id!r}"
                )
        elif not transactional and not group.is_(_S.EMPTY):
            # Only members may commit to a group that has members.
            raise UnknownMemberIdError(f"group {group.group_id!r} has members; commit as one")

    def delete(self, request: OffsetDeleteRequest) -> OffsetDeleteResult:
        """OffsetDelete: partitions a consumer group is still subscribed to are kept."""
        self._rt.validate_group_id(request.group_id, allow_empty=False)
        group = self._rt.groups.get(request.group_id)
        if group is None or group.is_(_S.DEAD):
            return OffsetDeleteResult(ErrorCode.group_id_not_found)
        errors: dict[TopicPartition, ErrorCode] = {}
        if group.is_(_S.EMPTY):
            eligible = list(request.partitions)
        elif group.protocol_type == CONSUMER_PROTOCOL_TYPE:
            eligible = []
            for tp in request.partitions:
                if group.is_subscribed_to_topic(tp.topic):
                    errors[tp] = ErrorCode.group_subscribed_to_topic
                else:
                    eligible.append(tp)
        else:
            return OffsetDeleteResult(ErrorCode.non_empty_group)
        if eligible:
            self.remove_offsets_and_maybe_group(group, eligible)
            for tp in eligible:
                errors[tp] = ErrorCode.none
        return OffsetDeleteResult(ErrorCode.none, errors)

    def remove_offsets_and_maybe_group(
        self, group: GroupMetadata, partitions: list[TopicPartition] | None
    ) -> None:
        """Tombstone offsets (all if ``partitions`` is None); an Empty group left without
        offsets dies (Kafka's cleanupGroupMetadata)."""
        if partitions is None:
            removed, removed_pending = group.remove_all_offsets()
        else:
            removed, removed_pending = group.remove_offsets(partitions)
        gid = group.group_id
        for tp in removed:
            self._rt.emit(gid, offset_commit_record(gid, tp, None))
        for producer_id, tp in removed_pending:
            self._rt.emit(gid, pending_txn_offset_record(gid, producer_id, tp, None))
        if group.state in (_S.EMPTY, _S.DEAD) and not group.has_offsets():
            self._rt.kill_group(group)

    def stage_pending(
        self,
        group_id: str,
        producer_id: int,
        offsets: Mapping[TopicPartition, PartitionOffsetCommit],
        wall_ms: int,
        member_id: str,
        generation_id: int,
        instance_id: str | None,
    ) -> dict[TopicPartition, ErrorCode]:
        """TxnOffsetCommit: stage offsets of ``producer_id``'s open transaction (KIP-447 checks)."""
        self._rt.validate_group_id(group_id, allow_empty=True)
        if producer_id < 0:
            raise CoordinatorInvariantError("transactional producers have an id")
        group = self._rt.groups.get(group_id)
        if group is None:
            group = GroupMetadata(group_id, wall_ms)
            self._rt.groups[group_id] = group
        self._validate_offset_commit(
            group, generation_id, member_id, instance_id, transactional=True
        )
        errors: dict[TopicPartition, ErrorCode] = {}
        pending = group.pending_txn_offsets.setdefault(producer_id, {})
        for tp, partition in offsets.items():
            value = self._offset_value(partition, -1, wall_ms)
            if value is None:
                errors[tp] = ErrorCode.offset_metadata_too_large
                continue
            pending[tp] = CommittedOffset(value, self._rt.next_log_order())
            self._rt.emit(group_id, pending_txn_offset_record(group_id, producer_id, tp, value))
            errors[tp] = ErrorCode.none
        if not pending:
            del group.pending_txn_offsets[producer_id]
        return errors

    def cleanup(self, wall_ms: int) -> None:
        """Offset expiry and removal of Empty groups without offsets (Kafka's cleanup task)."""
        for group in list(self._rt.groups.values()):
            expired = group.remove_expired_offsets(wall_ms, self._rt.config.offsets_retention_ms,
                                                   self.subscribed_topics(group.group_id))
            for tp in expired:
                self._rt.emit(group.group_id, offset_commit_record(group.group_id, tp, None))
            if group.is_(_S.EMPTY) and not group.has_offsets():
                self._rt.kill_group(group)

    def fetch(self, request: OffsetFetchRequest) -> OffsetFetchResult:
        """OffsetFetch of a validated group id; with ``require_stable`` a partition that has a
        pending transactional commit answers UNSTABLE_OFFSET_COMMIT (the client retries)."""
        group = self._rt.groups.get(request.group_id)
        if group is None or group.is_(_S.DEAD):
            return OffsetFetchResult(
                ErrorCode.none, {tp: FetchedOffset() for tp in request.partitions or ()}
            )
        partitions = (
            request.partitions if request.partitions is not None else tuple(sorted(group.offsets))
        )
        out: dict[TopicPartition, FetchedOffset] = {}
        for tp in partitions:
            if request.require_stable and group.has_pending_txn_offset(tp):
                out[tp] = FetchedOffset(error=ErrorCode.unstable_offset_commit)
                continue
            committed = group.offsets.get(tp)
            if committed is None:
                out[tp] = FetchedOffset()
            else:
                value = committed.value
                out[tp] = FetchedOffset(value.offset, value.leader_epoch, value.metadata)
        return OffsetFetchResult(ErrorCode.none, out)

    def complete_pending(self, group_id: str, producer_id: int, commit: bool) -> None:
        """The transaction of ``producer_id`` ended: on commit its staged offsets become the
        committed ones (unless a plain commit written after them is newer); on abort they are
        dropped."""
        group = self._rt.groups.get(group_id)
        if group is None:
            return
        pending = group.pending_txn_offsets.pop(producer_id, {})
        for tp, staged in sorted(pending.items()):
            self._rt.emit(group_id, pending_txn_offset_record(group_id, producer_id, tp, None))
            if not commit:
                continue
            current = group.offsets.get(tp)
            # As in Kafka, offsets compete by where they were *written*: a plain commit
            # appended after this staged offset wins, and the materialized offset keeps its
            # staging position. (After a reload it takes the position of the committed
            # record written here instead; that only matters if two transactions staged the
            # same partition concurrently, which KIP-447 fencing rules out for live owners.)
            if current is None or current.log_order < staged.log_order:
                group.offsets[tp] = staged
                self._rt.emit(group_id, offset_commit_record(group_id, tp, staged.value))

    # --- replay ---------------------------------------------------------------------------------

    def _group_for_replay(self, group_id: str) -> GroupMetadata:
        group = self._rt.groups.get(group_id)
        if group is None:
            # Offsets without (live) metadata: an offset-only group, as Kafka loads it.
            group = GroupMetadata(group_id, self._rt.wall_ms)
            self._rt.groups[group_id] = group
        return group

    def replay_offset(self, group_id: str, tp: TopicPartition, value: OffsetAndMetadata | None) -> None:
        """An OffsetCommit record (None: its tombstone), in log order."""
        if value is not None:
            self._group_for_replay(group_id).offsets[tp] = CommittedOffset(value, self._rt.next_log_order())
            return
        group = self._rt.groups.get(group_id)
        if group is not None:
            group.offsets.pop(tp, None)

    def replay_pending(
        self, group_id: str, producer_id: int, tp: TopicPartition, value: OffsetAndMetadata | None
    ) -> None:
        """A pending transactional offset record (None: completed or discarded), in log order."""
        if value is not None:
            staged = self._group_for_replay(group_id).pending_txn_offsets.setdefault(producer_id, {})
            staged[tp] = CommittedOffset(value, self._rt.next_log_order())
            return
        group = self._rt.groups.get(group_id)
        if group is not None and producer_id in group.pending_txn_offsets:
            group.pending_txn_offsets[producer_id].pop(tp, None)
            if not group.pending_txn_offsets[producer_id]:
                del group.pending_txn_offsets[producer_id]
