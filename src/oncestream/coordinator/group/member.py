"""One member of a classic group: identity, protocols, assignment, and its outstanding requests."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from oncestream.coordinator.group.messages import JoinProtocol, JoinResult, SyncResult
from oncestream.errors import CoordinatorInvariantError

JoinCallback = Callable[[JoinResult], None]
SyncCallback = Callable[[SyncResult], None]


@dataclass(eq=False)
class MemberMetadata:
    """A member as the coordinator tracks it (Kafka's MemberMetadata).

    ``join_callback`` / ``sync_callback`` hold the delayed JoinGroup / SyncGroup response of this
    member while one is outstanding; each is answered exactly once and then cleared.
    """

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[JoinProtocol, ...]
    assignment: bytes = b""
    join_callback: JoinCallback | None = None
    sync_callback: SyncCallback | None = None
    # A member that joined but has not yet received a JoinGroup response: it cannot heartbeat,
    # so its "session" is the new-member join timeout instead.
    is_new: bool = False
    # When the session (or new-member join timeout) expires unless a heartbeat resets it.
    heartbeat_deadline_ms: int | None = None

    def __post_init__(self) -> None:
        if not self.member_id:
            raise CoordinatorInvariantError("a member always has an id")
        if not (self.session_timeout_ms > 0 and self.rebalance_timeout_ms >= 0):
            raise CoordinatorInvariantError(
                f"member {self.member_id}: the session timeout must be positive and the rebalance timeout not negative, "
                f"got session {self.session_timeout_ms} ms, rebalance {self.rebalance_timeout_ms} ms")

    @property
    def is_static(self) -> bool:
        """KIP-345: a member with a group.instance.id."""
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        """A JoinGroup response is outstanding."""
        return self.join_callback is not None

    @property
    def is_awaiting_sync(self) -> bool:
        """A SyncGroup response is outstanding."""
        return self.sync_callback is not None

    def protocol_names(self) -> tuple[str, ...]:
        """The names of the member's protocols in preference order."""
        return tuple(p.name for p in self.protocols)

    def metadata_for(self, protocol_name: str) -> bytes:
        """The metadata the member sent for ``protocol_name``."""
        for protocol in self.protocols:
            if protocol.name == protocol_name:
                return protocol.metadata
        raise CoordinatorInvariantError(
            f"member {self.member_id} does not support protocol {protocol_name!r}; "
            "the selected protocol must be supported by every member"
        )

    def matches(self, protocols: tuple[JoinProtocol, ...]) -> bool:
        """Same protocols, metadata and order: a rejoin that changes nothing."""
        return self.protocols == tuple(protocols)

    def vote(self, candidates: Iterable[str]) -> str:
        """The member's most preferred protocol among ``candidates``."""
        candidate_set = set(candidates)
        for protocol in self.protocols:
            if protocol.name in candidate_set:
                return protocol.name
        raise CoordinatorInvariantError(f"member {self.member_id} supports none of {sorted(candidate_set)}")

    def keeps_session_on_expiry(self) -> bool:
        """Whether a due session deadline spares this member (Kafka's hasSatisfiedHeartbeat).

        Members waiting in a rebalance cannot heartbeat, so they are kept (the rebalance and sync
        timeouts deal with them); a new member that never got its JoinGroup answer is not.
        """
        if self.is_new:
            return False
        return self.is_awaiting_join or self.is_awaiting_sync
