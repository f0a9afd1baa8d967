"""Which remote segments go, and where the log start moves (sans-io).

Kafka's RemoteLogManager deletes remote segments, oldest first, while one of these holds:

- the segment lies wholly below the log start offset (DeleteRecords moved it, or an earlier pass);
- retention.ms: its largest timestamp is older than ``now - retention.ms``;
- retention.bytes: the partition's whole size (every remote segment plus the local segments not
  copied yet) exceeds retention.bytes by at least the segment's size.

The first segment that none of these removes ends the pass (deletion never leaves a hole). The
log start moves to just after the last segment deleted, before any of them is deleted (the caller
makes it durable first), so no reader is ever sent to an offset whose data is going.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar


class RetainedSegment(Protocol):
    """What retention needs of a remote segment (``segment_metadata.RemoteSegment`` has it)."""

    @property
    def base_offset(self) -> int: ...

    @property
    def last_offset(self) -> int: ...

    @property
    def size_bytes(self) -> int: ...

    @property
    def max_timestamp_ms(self) -> int: ...


S = TypeVar("S", bound=RetainedSegment)


@dataclass(frozen=True)
class RetentionLimits:
    """A topic's retention (-1: unlimited), as ``LogConfig`` holds it."""

    retention_ms: int
    retention_bytes: int


@dataclass(frozen=True)
class RemoteDeletion(Generic[S]):
    """The outcome of one pass: the segments to delete (oldest first) and the new log start."""

    segments: tuple[S, ...]
    log_start_offset: int  # >= the old one; the old one when nothing goes
    reasons: tuple[str, ...]  # one per segment: "log-start", "retention.ms" or "retention.bytes"


def plan_remote_deletion(
    segments: Sequence[S], *, log_start_offset: int, local_only_bytes: int,
    limits: RetentionLimits, now_ms: int,
) -> RemoteDeletion[S]:
    """The deletion pass over ``segments`` (the copied segments in offset order, none being
    deleted); ``local_only_bytes`` is the size of the local log not copied yet."""
    remaining_bytes = sum(s.size_bytes for s in segments) + local_only_bytes
    excess_bytes = remaining_bytes - limits.retention_bytes if limits.retention_bytes >= 0 else -1
    chosen: list[S] = []
    reasons: list[str] = []
    for segment in segments:
        if segment.last_offset < log_start_offset:
            reason = "log-start"
        elif limits.retention_ms >= 0 and now_ms - segment.max_timestamp_ms > limits.retention_ms:
            reason = "retention.ms"
        elif excess_bytes >= segment.size_bytes:
            reason = "retention.bytes"
        else:
            break
        if excess_bytes >= 0:
            excess_bytes -= segment.size_bytes
        chosen.append(segment)
        reasons.append(reason)
    new_start = max(log_start_offset, chosen[-1].last_offset + 1) if chosen else log_start_offset
    return RemoteDeletion(tuple(chosen), new_start, tuple(reasons))
