"""Share sessions (KIP-932's ShareSessionCache): which partitions a member fetches, and the
session epoch that orders its ShareFetch and ShareAcknowledge requests.

A session is keyed by (group id, member id). The request's ``share_session_epoch`` says:

- 0 (INITIAL): open a session (ShareFetch only); an existing one of the same member is replaced
  and the records it held are released (the caller does that with ``opened.replaced``).
- -1 (FINAL): the last request of the session; its acknowledgements are applied, then the session
  is closed and the member's remaining records released.
- any other value: the session must exist (SHARE_SESSION_NOT_FOUND) and the epoch must be the
  one it expects next (INVALID_SHARE_SESSION_EPOCH); a request that fails this changes nothing.
  Each accepted request moves the expected epoch on by one (wrapping to 1 after int32 max).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_MAX_EPOCH = 2**31 - 1

SessionPartition = tuple[uuid.UUID | None, int]  # (topic id, partition)


@dataclass
class ShareSession:
    group_id: str
    member_id: str
    next_epoch: int = 1
    partitions: dict[SessionPartition, None] = field(default_factory=dict)  # ordered set
    last_used_ms: int = 0

    def advance(self) -> None:
        self.next_epoch = 1 if self.next_epoch >= _MAX_EPOCH else self.next_epoch + 1


@dataclass(frozen=True)
class SessionLookup:
    """The outcome of checking a request's epoch: the session to use, or the error to answer."""

    error: ErrorCode
    session: ShareSession | None = None
    replaced: ShareSession | None = None  # an INITIAL request's predecessor (release its records)
    final: bool = False


class ShareSessionCache:
    """Every open share session of the broker, bounded by ``max_sessions``
    (group.share.max.share.sessions; SHARE_SESSION_LIMIT_REACHED beyond it)."""

    def __init__(self, max_sessions: int = 2000) -> None:
        self.max_sessions = max_sessions
        self._sessions: dict[tuple[str, str], ShareSession] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.get((group_id, member_id))

    def lookup(self, group_id: str, member_id: str, epoch: int, *, may_open: bool, now_ms: int = 0) -> SessionLookup:
        """Check a request's epoch; opens (``may_open``: ShareFetch) a session on INITIAL.
        Nothing changes unless the answer is NONE (then the session was used at ``now_ms``)."""
        result = self._lookup(group_id, member_id, epoch, may_open=may_open)
        if result.session is not None:
            result.session.last_used_ms = now_ms
        return result

    def idle(self, now_ms: int, timeout_ms: Callable[[str], int]) -> list[ShareSession]:
        """Remove and return the sessions not used for their group's ``timeout_ms(group_id)`` (a
        client that went away without closing its session: Kafka drops a session with its
        connection)."""
        gone = [s for s in self._sessions.values() if s.last_used_ms < now_ms - timeout_ms(s.group_id)]
        for session in gone:
            del self._sessions[(session.group_id, session.member_id)]
        return gone

    def _lookup(self, group_id: str, member_id: str, epoch: int, *, may_open: bool) -> SessionLookup:
        key = (group_id, member_id)
        existing = self._sessions.get(key)
        if epoch == INITIAL_EPOCH:
            if not may_open:
                return SessionLookup(ErrorCode.invalid_share_session_epoch)
            if existing is None and len(self._sessions) >= self.max_sessions:
                return SessionLookup(ErrorCode.share_session_limit_reached)
            session = ShareSession(group_id, member_id)
            self._sessions[key] = session
            return SessionLookup(ErrorCode.none, session, replaced=existing)
        if existing is None:
            return SessionLookup(ErrorCode.share_session_not_found)
        if epoch == FINAL_EPOCH:
            return SessionLookup(ErrorCode.none, existing, final=True)
        if epoch != existing.next_epoch:
            return SessionLookup(ErrorCode.invalid_share_session_epoch)
        existing.advance()
        return SessionLookup(ErrorCode.none, existing)

    def close(self, group_id: str, member_id: str) -> ShareSession | None:
        """Remove and return the member's session (FINAL epoch, or the member left the group)."""
        return self._sessions.pop((group_id, member_id), None)
