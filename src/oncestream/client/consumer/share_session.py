"""A share session with one broker (KIP-932): its epoch and the partitions it covers. Sans-io.

The broker keeps, per (group, member, broker), the set of partitions a member fetches; requests
carry only the changes (partitions added, partitions forgotten) and a session epoch that orders
them. Kafka's ShareSessionHandler and ShareRequestMetadata are the reference; the epoch moves as
this table says::

    state      epoch   event                                          next
    --------   -----   --------------------------------------------   --------------------------
    NEW        0       response without error                         ACTIVE, epoch 1
    NEW        0       response error / transport error               NEW (no session was made)
    ACTIVE     n       response without error                         ACTIVE, epoch n+1 (wraps to 1)
    ACTIVE     n       SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH, transport error
                                                                      NEW (the broker's session is
                                                                      gone or unknowable)
    ACTIVE     n       any other response error                       ACTIVE, epoch n+1 (the broker
                                                                      counted the request)
    ACTIVE     n       close()                                        CLOSING, epoch -1
    CLOSING    -1      response (any) / transport error               CLOSED
    NEW        0       close()                                        CLOSED (nothing to close)

Two rules follow from the broker's side: a request that opens a session (epoch 0) carries no
acknowledgements (Kafka answers INVALID_REQUEST), and a ShareAcknowledge cannot open a session
(``can_acknowledge``). Only one request per session is in flight at a time: the I/O layer waits
for the answer before building the next request (``in_flight``).

Where Kafka's handler moves epoch 0 to 1 after an error answer to an opening request, this one
stays at 0: an error answer means no session was created, so the next request must open one.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field

TP = tuple[str, int]

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_MAX_EPOCH = 2**31 - 1

# Errors after which the broker's session cannot be continued (Kafka: nextCloseExistingAttemptNew).
SHARE_SESSION_NOT_FOUND = 122
INVALID_SHARE_SESSION_EPOCH = 123
_SESSION_LOST = frozenset({SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH})


class SessionState(enum.Enum):
    """Where the session is in the module's table."""

    NEW = "new"
    ACTIVE = "active"
    CLOSING = "closing"
    CLOSED = "closed"


class ShareSessionError(Exception):
    """A request asked of a session in a state that cannot send it."""


@dataclass(slots=True)
class FetchPlan:
    """What the next ShareFetch says: its epoch, the partitions it adds to the session (all of
    them when it opens one), the partitions it forgets, and whether acknowledgements may ride."""

    epoch: int
    added: list[TP] = field(default_factory=list)
    forgotten: list[TP] = field(default_factory=list)
    acks_allowed: bool = True


class ShareSession:
    """The epoch and partition set of one member's share session with one broker."""

    def __init__(self) -> None:
        self.state = SessionState.NEW
        self.epoch = INITIAL_EPOCH
        self.partitions: set[TP] = set()
        self.in_flight = False

    # --- building requests --------------------------------------------------------------------

    def plan_fetch(self, wanted: Iterable[TP]) -> FetchPlan:
        """The next ShareFetch for partitions ``wanted``; marks a request in flight."""
        self._check_can_send()
        wanted_set = set(wanted)
        if self.state is SessionState.NEW:
            plan = FetchPlan(INITIAL_EPOCH, sorted(wanted_set), [], acks_allowed=False)
        else:
            plan = FetchPlan(self.epoch, sorted(wanted_set - self.partitions), sorted(self.partitions - wanted_set))
        self.partitions = wanted_set
        self.in_flight = True
        return plan

    def can_acknowledge(self) -> bool:
        """Whether a ShareAcknowledge may be sent now (a session exists, nothing in flight)."""
        return self.state in (SessionState.ACTIVE, SessionState.CLOSING) and not self.in_flight

    def plan_acknowledge(self) -> int:
        """The epoch of the next ShareAcknowledge; marks a request in flight."""
        self._check_can_send()
        if self.state is SessionState.NEW:
            raise ShareSessionError("a ShareAcknowledge cannot open a share session")
        self.in_flight = True
        return self.epoch

    def close(self) -> bool:
        """The next request closes the session (epoch -1). False when there is none to close."""
        if self.state is SessionState.NEW:
            self.state = SessionState.CLOSED
            return False
        if self.state is SessionState.ACTIVE:
            self.state = SessionState.CLOSING
            self.epoch = FINAL_EPOCH
        return self.state is SessionState.CLOSING

    def _check_can_send(self) -> None:
        if self.in_flight:
            raise ShareSessionError("a request of this share session is already in flight")
        if self.state is SessionState.CLOSED:
            raise ShareSessionError("the share session is closed")

    # --- handling answers ---------------------------------------------------------------------

    def on_response(self, error_code: int) -> None:
        """The in-flight request was answered with top-level ``error_code``."""
        self.in_flight = False
        if self.state is SessionState.CLOSING:
            self._closed()
        elif error_code in _SESSION_LOST:
            self._reset()
        elif self.state is SessionState.NEW:
            if error_code == 0:
                self.state = SessionState.ACTIVE
                self.epoch = 1
            else:
                self.partitions = set()  # no session was created: the next request adds them all
        else:
            self.epoch = 1 if self.epoch >= _MAX_EPOCH else self.epoch + 1

    def on_transport_error(self) -> None:
        """The in-flight request got no answer: whether the broker applied it is unknown, so
        the next request opens a new session (closing the broker's old one)."""
        self.in_flight = False
        if self.state is SessionState.CLOSING:
            self._closed()
        else:
            self._reset()

    def _reset(self) -> None:
        self.state = SessionState.NEW
        self.epoch = INITIAL_EPOCH
        self.partitions = set()

    def _closed(self) -> None:
        self.state = SessionState.CLOSED
        self.partitions = set()
