"""Requests and results of the consumer group protocol (KIP-848), as plain frozen dataclasses."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from oncestream.coordinator.group.consumer.records import Assignment, TopicMetadata

# The cluster's topics as the coordinator sees them: name -> metadata. Injected (the broker passes
# a view of its log manager; tests pass a dict), so the coordinator never reaches into the log.
TopicsView = Callable[[], Mapping[str, TopicMetadata]]


@dataclass(frozen=True)
class ConsumerHeartbeatRequest:
    """A ConsumerGroupHeartbeat. None fields mean "unchanged since the last heartbeat"."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Mapping[uuid.UUID, frozenset[int]] | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True)
class ConsumerHeartbeatResult:
    """A ConsumerGroupHeartbeat response; ``assignment`` None means "unchanged"."""

    error: ErrorCode
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None


@dataclass(frozen=True)
class DescribedConsumerMember:
    """One member of ConsumerGroupDescribe."""

    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: Assignment
    target_assignment: Assignment
    # A member speaking the classic protocol (ConsumerGroupDescribe v1's MemberType 0, else 1).
    classic: bool = False


@dataclass(frozen=True)
class ConsumerGroupDescription:
    """One group of ConsumerGroupDescribe."""

    group_id: str
    error: ErrorCode
    error_message: str | None = None
    state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: tuple[DescribedConsumerMember, ...] = ()
