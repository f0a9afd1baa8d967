"""A share-group member's side of ShareGroupHeartbeat (KIP-932). Sans-io.

The member id is made by the client, once per consumer (Kafka 4's clients do the same: a random
UUID in Kafka's base64 form); the coordinator gives the epoch and the assignment (topic ids and
partitions). A share group needs no revocation step: partitions may be fetched by several
members at once, so a new assignment applies as soon as it arrives.

    state      event                                                next
    --------   --------------------------------------------------   -------------------------------
    JOINING    heartbeat answered without error                     STABLE (epoch, assignment given)
    STABLE     heartbeat answered without error                     STABLE (new epoch; a new
                                                                    assignment replaces the old)
    any        UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH                JOINING, epoch 0, no assignment
    any        NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,           unchanged; find the coordinator
               COORDINATOR_LOAD_IN_PROGRESS, transport error        again and retry after a backoff
    any        any other error                                      FAILED (reported to the app)
    any        leave()                                              LEAVING: next heartbeat epoch -1
    LEAVING    answered (any) / transport error                     LEFT

A JOINING heartbeat carries the subscription and the rack; later ones carry the subscription only
when it changed (null otherwise), as the request schema asks.
"""

from __future__ import annotations

import base64
import enum
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

LEAVE_EPOCH = -1
_REJOIN = frozenset({int(ErrorCode.unknown_member_id), int(ErrorCode.fenced_member_epoch)})
_RETRY = frozenset({
    int(ErrorCode.not_coordinator), int(ErrorCode.coordinator_not_available),
    int(ErrorCode.coordinator_load_in_progress),
})
COORDINATOR_MOVED = frozenset({int(ErrorCode.not_coordinator), int(ErrorCode.coordinator_not_available)})


def new_member_id() -> str:
    """A random member id in Kafka's ``Uuid.toString`` form (22 url-safe base64 characters);
    like Kafka's ``Uuid.randomUuid`` it never starts with '-'."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


class MemberState(enum.Enum):
    """Where the member is in the module's table."""

    JOINING = "joining"
    STABLE = "stable"
    FAILED = "failed"
    LEAVING = "leaving"
    LEFT = "left"


@dataclass(frozen=True, slots=True)
class HeartbeatFields:
    """The fields of the next ShareGroupHeartbeat."""

    member_id: str
    member_epoch: int
    subscribed_topic_names: tuple[str, ...] | None
    rack_id: str | None


class ShareMembership:
    """The member id, epoch and assignment of one share consumer in its group."""

    def __init__(self, group_id: str, rack_id: str | None = None, member_id: str | None = None) -> None:
        self.group_id = group_id
        self.member_id = member_id or new_member_id()
        self.epoch = 0
        self.state = MemberState.JOINING
        self.heartbeat_interval_ms = 5000
        self.assignment: dict[uuid.UUID, list[int]] = {}  # topic id -> partitions
        self.assignment_version = 0  # bumped whenever ``assignment`` changes
        self.fatal_error: tuple[int, str] | None = None
        self._rack_id = rack_id or None
        self._subscription: tuple[str, ...] = ()
        self._subscription_sent = False

    def subscribe(self, topics: Iterable[str]) -> None:
        """Set the subscription (sent with the next heartbeat)."""
        self._subscription = tuple(sorted(set(topics)))
        self._subscription_sent = False
        if self.state in (MemberState.LEFT, MemberState.LEAVING):
            self._rejoin()

    def next_heartbeat(self) -> HeartbeatFields:
        """Fields of the heartbeat to send now."""
        if self.state is MemberState.LEAVING:
            return HeartbeatFields(self.member_id, LEAVE_EPOCH, None, None)
        joining = self.state is MemberState.JOINING
        topics = self._subscription if joining or not self._subscription_sent else None
        self._subscription_sent = True
        return HeartbeatFields(self.member_id, self.epoch, topics, self._rack_id if joining else None)

    def leave(self) -> bool:
        """The next heartbeat leaves the group; False when the member never joined."""
        if self.state in (MemberState.JOINING, MemberState.FAILED, MemberState.LEFT) and self.epoch == 0:
            self.state = MemberState.LEFT
            return False
        self.state = MemberState.LEAVING
        return True

    def on_response(self, error_code: int, member_epoch: int, heartbeat_interval_ms: int,
                    assignment: dict[uuid.UUID, list[int]] | None, error_message: str | None = None) -> bool:
        """A heartbeat answer; True when the caller should retry soon after finding the
        coordinator again (see ``COORDINATOR_MOVED``)."""
        if self.state is MemberState.LEAVING:
            self.state = MemberState.LEFT
            return False
        if error_code == 0:
            self.state = MemberState.STABLE
            self.epoch = member_epoch
            if heartbeat_interval_ms > 0:
                self.heartbeat_interval_ms = heartbeat_interval_ms
            if assignment is not None and assignment != self.assignment:
                self.assignment = assignment
                self.assignment_version += 1
            return False
        if error_code in _REJOIN:
            self._rejoin()
            return True
        if error_code in _RETRY:
            return True
        self.state = MemberState.FAILED
        self.fatal_error = (error_code, error_message or "")
        return False

    def on_transport_error(self) -> None:
        """No answer: the next heartbeat repeats this one (a leave counts as done)."""
        if self.state is MemberState.LEAVING:
            self.state = MemberState.LEFT
        else:
            self._subscription_sent = False

    def _rejoin(self) -> None:
        self.state = MemberState.JOINING
        self.epoch = 0
        self._subscription_sent = False
        if self.assignment:
            self.assignment = {}
            self.assignment_version += 1
