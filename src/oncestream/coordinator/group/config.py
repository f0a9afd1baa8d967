"""Settings of the group coordinator, named after the Kafka broker properties they stand for."""

from __future__ import annotations

from dataclasses import dataclass

from oncestream.coordinator.group.migration import ConsumerGroupMigrationPolicy
from oncestream.errors import InvalidConfigError


@dataclass(frozen=True)
class GroupCoordinatorConfig:
    """Broker properties the classic group coordinator honours (defaults are Kafka's)."""

    # offsets.topic.num.partitions: how many __consumer_offsets partitions groups are spread over.
    offsets_topic_partitions: int = 50
    # group.min.session.timeout.ms / group.max.session.timeout.ms: JoinGroup bounds.
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    # group.initial.rebalance.delay.ms: how long the first rebalance of an Empty group waits for
    # more members before it completes (extended while members keep arriving).
    group_initial_rebalance_delay_ms: int = 3_000
    # group.max.size: members per group.
    group_max_size: int = 2**31 - 1
    # How long a new member's JoinGroup may sit in a rebalance before it is dropped (Kafka's
    # GroupCoordinator.NewMemberJoinTimeoutMs; not a broker property there).
    new_member_join_timeout_ms: int = 300_000
    # offset.metadata.max.bytes: the longest metadata string an OffsetCommit may carry.
    offset_metadata_max_bytes: int = 4_096
    # offsets.retention.minutes (in ms) and offsets.retention.check.interval.ms.
    offsets_retention_ms: int = 7 * 24 * 60 * 60 * 1000
    offsets_retention_check_interval_ms: int = 600_000
    # KIP-848 consumer groups: group.consumer.session.timeout.ms, group.consumer.heartbeat.interval.ms
    # and their min/max bounds, group.consumer.max.size, group.consumer.assignors (first = default).
    consumer_session_timeout_ms: int = 45_000
    consumer_min_session_timeout_ms: int = 45_000
    consumer_max_session_timeout_ms: int = 60_000
    consumer_heartbeat_interval_ms: int = 5_000
    consumer_min_heartbeat_interval_ms: int = 5_000
    consumer_max_heartbeat_interval_ms: int = 15_000
    consumer_max_size: int = 2**31 - 1
    consumer_assignors: str = "uniform,range"
    # group.consumer.migration.policy: which online conversions of groups with members between the
    # classic and the consumer protocol are allowed (migration.py; empty groups always convert).
    consumer_migration_policy: ConsumerGroupMigrationPolicy = ConsumerGroupMigrationPolicy.BIDIRECTIONAL

    def __post_init__(self) -> None:
        if self.offsets_topic_partitions <= 0:
            raise InvalidConfigError("offsets_topic_partitions must be positive")
        if not (0 <= self.group_min_session_timeout_ms <= self.group_max_session_timeout_ms):
            raise InvalidConfigError(
                f"group.min.session.timeout.ms ({self.group_min_session_timeout_ms}) must be at least 0 and at most "
                f"group.max.session.timeout.ms ({self.group_max_session_timeout_ms})")
        if self.group_initial_rebalance_delay_ms < 0:
            raise InvalidConfigError(
                f"group.initial.rebalance.delay.ms must not be negative, got {self.group_initial_rebalance_delay_ms}")
        if self.group_max_size <= 0:
            raise InvalidConfigError(f"group.max.size must be positive, got {self.group_max_size}")
        if self.new_member_join_timeout_ms <= 0:
            raise InvalidConfigError(f"the new member join timeout must be positive, got {self.new_member_join_timeout_ms} ms")
        if self.offset_metadata_max_bytes < 0:
            raise InvalidConfigError(f"offset.metadata.max.bytes must not be negative, got {self.offset_metadata_max_bytes}")
        if self.offsets_retention_ms <= 0:
            raise InvalidConfigError(f"offsets.retention.minutes must be positive, got {self.offsets_retention_ms} ms")
        for what, value, low, high in (
            ("group.consumer.session.timeout.ms", self.consumer_session_timeout_ms,
             self.consumer_min_session_timeout_ms, self.consumer_max_session_timeout_ms),
            ("group.consumer.heartbeat.interval.ms", self.consumer_heartbeat_interval_ms,
             self.consumer_min_heartbeat_interval_ms, self.consumer_max_heartbeat_interval_ms),
        ):
            if not 0 < low <= value <= high:
                raise InvalidConfigError(f"{what} ({value}) must lie within its min ({low}) and max ({high}), above 0")
        if self.consumer_heartbeat_interval_ms >= self.consumer_session_timeout_ms:
            raise InvalidConfigError("group.consumer.heartbeat.interval.ms must be below group.consumer.session.timeout.ms")
        if self.consumer_max_size <= 0:
            raise InvalidConfigError(f"group.consumer.max.size must be positive, got {self.consumer_max_size}")
        if self.offsets_retention_check_interval_ms <= 0:
            raise InvalidConfigError(
                f"offsets.retention.check.interval.ms must be positive, got {self.offsets_retention_check_interval_ms}")
