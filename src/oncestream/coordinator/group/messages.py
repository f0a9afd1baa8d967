"""Protocol-agnostic requests and results of the group coordinator (plain frozen dataclasses).

The wire layer builds these from kio request objects and turns the results back into kio responses;
nothing here knows about API versions except where behaviour depends on one (``api_version`` of
JoinGroup, see KIP-394 and KIP-814). Error fields carry ``kio.schema.errors.ErrorCode`` values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from oncestream.topic_partition import TopicPartition as TopicPartition  # part of the messages vocabulary

NO_MEMBER_ID = ""
NO_GENERATION = -1
NO_LEADER_EPOCH = -1
INVALID_OFFSET = -1




@dataclass(frozen=True)
class OffsetAndMetadata:
    """A committed offset as stored: what OffsetFetch returns plus the times expiry needs."""

    offset: int
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str = ""
    commit_timestamp_ms: int = 0
    # Only OffsetCommit v1-v4 set an explicit expiry; None means "retention from commit time".
    expire_timestamp_ms: int | None = None


# --- JoinGroup ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JoinProtocol:
    """One (name, metadata) entry of a JoinGroup request, in the member's preference order."""

    name: str
    metadata: bytes


@dataclass(frozen=True)
class JoinRequest:
    """A JoinGroup request. ``member_id`` is "" for a member that has none yet.

    For JoinGroup v0 (no rebalance timeout on the wire) pass ``rebalance_timeout_ms`` equal to
    ``session_timeout_ms``, as Kafka does.
    """

    group_id: str
    member_id: str
    protocol_type: str
    protocols: tuple[JoinProtocol, ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    api_version: int
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    reason: str | None = None


@dataclass(frozen=True)
class JoinedMember:
    """A member as the leader sees it in its JoinGroup response."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True)
class JoinResult:
    """A JoinGroup response. ``members`` is non-empty only for the leader."""

    error: ErrorCode
    member_id: str
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: tuple[JoinedMember, ...] = ()
    skip_assignment: bool = False


# --- SyncGroup ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SyncRequest:
    """A SyncGroup request; only the leader sends a non-empty ``assignments`` (member id -> bytes).

    ``protocol_type`` / ``protocol_name`` are None for versions before 5, which do not carry them.
    """

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignments: Mapping[str, bytes] = field(default_factory=dict)


@dataclass(frozen=True)
class SyncResult:
    """A SyncGroup response: this member's assignment bytes."""

    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


# --- Heartbeat / LeaveGroup -----------------------------------------------------------------------


@dataclass(frozen=True)
class HeartbeatRequest:
    """A Heartbeat request."""

    group_id: str
    member_id: str
    generation_id: int
    group_instance_id: str | None = None


@dataclass(frozen=True)
class HeartbeatResult:
    """A Heartbeat response."""

    error: ErrorCode


@dataclass(frozen=True)
class LeavingMember:
    """One member of a LeaveGroup request (v0-v2 have exactly one, with no instance id).

    ``member_id`` may be "" when an administrator removes a static member by its instance id.
    """

    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class LeaveRequest:
    """A LeaveGroup request."""

    group_id: str
    members: tuple[LeavingMember, ...]


@dataclass(frozen=True)
class LeftMember:
    """The per-member outcome of a LeaveGroup (v3+ reports these individually)."""

    member_id: str
    group_instance_id: str | None
    error: ErrorCode


@dataclass(frozen=True)
class LeaveResult:
    """A LeaveGroup response. For v0-v2 the wire layer reports ``error`` if it is not NONE,
    else the single member's error."""

    error: ErrorCode
    members: tuple[LeftMember, ...] = ()


# --- Offsets --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionOffsetCommit:
    """One partition of an OffsetCommit. ``commit_timestamp_ms`` is only sent by v1 (None = now)."""

    offset: int
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str = ""
    commit_timestamp_ms: int | None = None


@dataclass(frozen=True)
class OffsetCommitRequest:
    """An OffsetCommit. Generation -1 with member id "" is a "simple" (non-group) commit.

    ``retention_time_ms`` is the v2-v4 field (-1 = broker default).
    """

    group_id: str
    offsets: Mapping[TopicPartition, PartitionOffsetCommit]
    member_id: str = NO_MEMBER_ID
    generation_id: int = NO_GENERATION
    group_instance_id: str | None = None
    retention_time_ms: int = -1


@dataclass(frozen=True)
class OffsetCommitResult:
    """Per-partition errors of an OffsetCommit (the API has no top-level error)."""

    partitions: Mapping[TopicPartition, ErrorCode]


@dataclass(frozen=True)
class OffsetFetchRequest:
    """An OffsetFetch of ``partitions`` (None = every committed partition of the group)."""

    group_id: str
    partitions: tuple[TopicPartition, ...] | None = None
    require_stable: bool = False


@dataclass(frozen=True)
class FetchedOffset:
    """One partition of an OffsetFetch response; offset -1 when nothing is committed."""

    offset: int = INVALID_OFFSET
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str = ""
    error: ErrorCode = ErrorCode.none


@dataclass(frozen=True)
class OffsetFetchResult:
    """An OffsetFetch response for one group."""

    error: ErrorCode
    partitions: Mapping[TopicPartition, FetchedOffset] = field(default_factory=dict)


@dataclass(frozen=True)
class OffsetDeleteRequest:
    """An OffsetDelete request."""

    group_id: str
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True)
class OffsetDeleteResult:
    """An OffsetDelete response: a top-level error, else per-partition errors."""

    error: ErrorCode
    partitions: Mapping[TopicPartition, ErrorCode] = field(default_factory=dict)


# --- DescribeGroups / ListGroups / DeleteGroups ---------------------------------------------------


@dataclass(frozen=True)
class DescribedMember:
    """A member in DescribeGroups; metadata and assignment are empty unless the group is Stable."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupDescription:
    """One group of a DescribeGroups response. ``protocol_name`` is "" unless Stable (Kafka)."""

    group_id: str
    error: ErrorCode
    state: str
    protocol_type: str
    protocol_name: str
    members: tuple[DescribedMember, ...] = ()


@dataclass(frozen=True)
class ListedGroup:
    """One group of a ListGroups response."""

    group_id: str
    protocol_type: str
    state: str


@dataclass(frozen=True)
class ListGroupsResult:
    """A ListGroups response."""

    error: ErrorCode
    groups: tuple[ListedGroup, ...] = ()


@dataclass(frozen=True)
class DeleteGroupsResult:
    """A DeleteGroups response: group id -> error."""

    errors: Mapping[str, ErrorCode]


# --- Effects --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OffsetsTopicWrite:
    """Records the broker must append to __consumer_offsets partition ``partition``.

    Each record is ``(key, value)``; value None is a tombstone. See records.py for the encoding.
    """

    partition: int
    records: tuple[tuple[bytes, bytes | None], ...]
