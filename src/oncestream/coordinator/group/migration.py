"""``group.consumer.migration.policy``: which online conversions between a classic group and a
KIP-848 consumer group the coordinator may make (Kafka's ConsumerGroupMigrationPolicy).

Kafka 4 converts a group *with members* from one protocol to the other only as the policy allows:
upgrade (classic → consumer, when a consumer-protocol member joins a classic group whose members
speak the consumer embedded protocol) and downgrade (consumer → classic, when the last
consumer-protocol member leaves and only classic members remain). Empty groups change type in
both directions whatever the policy says ("conversions of empty groups in both directions are
always enabled regardless of this policy", Kafka's documentation of the property).
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

from oncestream.coordinator.group.consumer_protocol import CONSUMER_PROTOCOL_TYPE
from oncestream.errors import GroupIdNotFoundError, InvalidConfigError

if TYPE_CHECKING:
    pass

CONFIG_NAME = "group.consumer.migration.policy"


class ConsumerGroupMigrationPolicy(enum.Enum):
    """The four values of ``group.consumer.migration.policy`` (default ``bidirectional``)."""

    BIDIRECTIONAL = "bidirectional"
    UPGRADE = "upgrade"
    DOWNGRADE = "downgrade"
    DISABLED = "disabled"

    @property
    def upgrade_enabled(self) -> bool:
        """May a non-empty classic group become a consumer group?"""
        return self in (ConsumerGroupMigrationPolicy.BIDIRECTIONAL, ConsumerGroupMigrationPolicy.UPGRADE)

    @property
    def downgrade_enabled(self) -> bool:
        """May a non-empty consumer group become a classic group?"""
        return self in (ConsumerGroupMigrationPolicy.BIDIRECTIONAL, ConsumerGroupMigrationPolicy.DOWNGRADE)

    @classmethod
    def parse(cls, value: str) -> ConsumerGroupMigrationPolicy:
        """The policy named ``value``, case-insensitively; anything else is refused at start-up
        with the message of Kafka's CaseInsensitiveValidString validator."""
        for policy in cls:
            if policy.value == value.strip().lower():
                return policy
        raise InvalidConfigError(
            f"Invalid value {value} for configuration {CONFIG_NAME}: String must be one of (case insensitive): "
            + ", ".join(p.value for p in cls))


class OnlineUpgradeRefusedError(GroupIdNotFoundError):
    """A consumer-protocol member may not join a classic group with members: GROUP_ID_NOT_FOUND
    with Kafka's message; ``reason`` says why in the words of Kafka's log line."""

    def __init__(self, group_id: str, reason: str) -> None:
        super().__init__(f"Group {group_id} is not a consumer group")
        self.reason = reason


def online_upgrade_refusal(
    policy: ConsumerGroupMigrationPolicy, protocol_type: str | None, num_members: int, consumer_max_size: int,
) -> str | None:
    """Why a classic group with ``num_members`` members of ``protocol_type`` may not be upgraded
    to a consumer group (Kafka's validateOnlineUpgrade, its checks in its order), or None if it
    may. Kafka answers a refused upgrade with GROUP_ID_NOT_FOUND ("Group <id> is not a consumer
    group") and leaves the classic group as it was."""
    if not policy.upgrade_enabled:
        return "the online upgrade is disabled"
    if protocol_type != CONSUMER_PROTOCOL_TYPE:
        return "the group does not use the consumer embedded protocol"
    if num_members > consumer_max_size:
        return "the group size exceeds the consumer group maximum size"
    return None
