"""The audit log: every change the console makes, with the console user who made it.

Each entry is written twice: as a structured log line (logger ``oncestream.console.audit``,
fields ``user``, ``action``, ``target``, ``outcome`` and the action's details, in whatever
``log.format`` the process logs) for the operator's log pipeline, and into a bounded in-memory
list the Audit page shows (the most recent ``capacity`` entries of this process).

The user always comes from the session (``auth.current_user``), never from a form: a page
calls ``record(request, ...)`` and cannot name another user.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("oncestream.console.audit")

DEFAULT_CAPACITY = 1000
OK = "ok"
FAILED = "failed"


@dataclass(frozen=True)
class AuditEntry:
    """One change: when (epoch ms), who, what, on what, how it ended, and its details."""

    time_ms: int
    user: str
    action: str        # e.g. "topic.create", "group.reset-offsets"
    target: str        # what it acted on, e.g. the topic name
    outcome: str       # OK or FAILED
    details: Mapping[str, Any] = field(default_factory=dict)


class AuditLog:
    """The recent entries (newest first) and the log line of each; thread-safe (pages run
    blocking work in threads)."""

    def __init__(self, clock_ms: Callable[[], int], capacity: int = DEFAULT_CAPACITY) -> None:
        self._clock_ms = clock_ms
        self._entries: collections.deque[AuditEntry] = collections.deque(maxlen=capacity)
        self._lock = threading.Lock()

    def record(self, user: str, action: str, target: str, outcome: str = OK, **details: Any) -> AuditEntry:
        """Log and keep one entry."""
        entry = AuditEntry(self._clock_ms(), user, action, target, outcome, dict(details))
        with self._lock:
            self._entries.appendleft(entry)
        level = logging.INFO if outcome == OK else logging.WARNING
        # The details are fields of their own, prefixed so they cannot shadow user/action/target.
        log.log(level, "console %s %s by %s: %s", action, target, user, outcome,
                extra={"user": user, "action": action, "target": target, "outcome": outcome,
                       **{f"detail_{k}": v for k, v in details.items()}})
        return entry

    def recent(self, limit: int | None = None) -> list[AuditEntry]:
        """The newest entries first (at most ``limit``)."""
        with self._lock:
            entries = list(self._entries)
        return entries if limit is None else entries[:limit]
