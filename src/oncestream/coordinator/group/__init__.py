"""The classic consumer group coordinator: group state machine, offset store, generation fencing.

Sans-io: :class:`GroupCoordinator` takes plain dataclass requests and ``now_ms``, answers through
return values or ``respond`` callbacks, and returns the __consumer_offsets records to append as
:class:`OffsetsTopicWrite` effects. See coordinator.py for the driving contract and records.py for
the record encoding.
"""

from oncestream.coordinator.group.config import GroupCoordinatorConfig
from oncestream.coordinator.group.coordinator import GroupCoordinator
from oncestream.coordinator.group.messages import (
    DeleteGroupsResult,
    DescribedMember,
    FetchedOffset,
    GroupDescription,
    HeartbeatRequest,
    HeartbeatResult,
    JoinedMember,
    JoinProtocol,
    JoinRequest,
    JoinResult,
    LeaveRequest,
    LeaveResult,
    LeavingMember,
    LeftMember,
    ListedGroup,
    ListGroupsResult,
    OffsetAndMetadata,
    OffsetCommitRequest,
    OffsetCommitResult,
    OffsetDeleteRequest,
    OffsetDeleteResult,
    OffsetFetchRequest,
    OffsetFetchResult,
    OffsetsTopicWrite,
    PartitionOffsetCommit,
    SyncRequest,
    SyncResult,
    TopicPartition,
)
from oncestream.coordinator.group.partitioning import java_string_hash, partition_for
from oncestream.coordinator.group.state import (
    VALID_PREVIOUS_STATES,
    GroupState,
    IllegalGroupStateTransitionError,
)

__all__ = [
    "VALID_PREVIOUS_STATES",
    "DeleteGroupsResult",
    "DescribedMember",
    "FetchedOffset",
    "GroupCoordinator",
    "GroupCoordinatorConfig",
    "GroupDescription",
    "GroupState",
    "HeartbeatRequest",
    "HeartbeatResult",
    "IllegalGroupStateTransitionError",
    "JoinProtocol",
    "JoinRequest",
    "JoinResult",
    "JoinedMember",
    "LeaveRequest",
    "LeaveResult",
    "LeavingMember",
    "LeftMember",
    "ListGroupsResult",
    "ListedGroup",
    "OffsetAndMetadata",
    "OffsetCommitRequest",
    "OffsetCommitResult",
    "OffsetDeleteRequest",
    "OffsetDeleteResult",
    "OffsetFetchRequest",
    "OffsetFetchResult",
    "OffsetsTopicWrite",
    "PartitionOffsetCommit",
    "SyncRequest",
    "SyncResult",
    "TopicPartition",
    "java_string_hash",
    "partition_for",
]
