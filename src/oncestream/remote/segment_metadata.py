"""Remote log segment metadata of one partition: states, the only transitions, and queries (sans-io).

A remote segment is one copy attempt of one local segment, named by a fresh uuid4 (Kafka's
RemoteLogSegmentId). Its life (Kafka's RemoteLogSegmentState) is the table ``TRANSITIONS``:

    (new) -> COPY_SEGMENT_STARTED -> COPY_SEGMENT_FINISHED -> DELETE_SEGMENT_STARTED -> DELETE_SEGMENT_FINISHED
             COPY_SEGMENT_STARTED ---------------------------> DELETE_SEGMENT_STARTED   (abandoned or orphaned copy)

Anything else is an ``IllegalRemoteSegmentTransitionError``, and so is a copy whose offsets
overlap a readable segment's (a single broker never copies an offset twice). Only
COPY_SEGMENT_FINISHED segments are read. After a restart every COPY_SEGMENT_STARTED and
DELETE_SEGMENT_STARTED segment is an orphan (``unfinished``): its objects are deleted and it goes
to DELETE_SEGMENT_FINISHED.

``RemotePartitionMetadata`` is the state the journal's events build (``metadata_journal``
replays them into one); the events are ``SegmentEvent``: the first (COPY_SEGMENT_STARTED) carries
the segment's description, later ones only the new state (Kafka's RemoteLogSegmentMetadata and
RemoteLogSegmentMetadataUpdate).
"""

from __future__ import annotations

import enum
import uuid
from bisect import bisect_right
from dataclasses import dataclass, replace

from oncestream.errors import OnceStreamError


class SegmentState(enum.Enum):
    """Kafka's RemoteLogSegmentState."""

    COPY_SEGMENT_STARTED = "COPY_SEGMENT_STARTED"
    COPY_SEGMENT_FINISHED = "COPY_SEGMENT_FINISHED"
    DELETE_SEGMENT_STARTED = "DELETE_SEGMENT_STARTED"
    DELETE_SEGMENT_FINISHED = "DELETE_SEGMENT_FINISHED"


# state (None: the segment id is new) -> the states it may go to next. Nothing else is legal.
TRANSITIONS: dict[SegmentState | None, frozenset[SegmentState]] = {
    None: frozenset({SegmentState.COPY_SEGMENT_STARTED}),
    SegmentState.COPY_SEGMENT_STARTED: frozenset(
        {SegmentState.COPY_SEGMENT_FINISHED, SegmentState.DELETE_SEGMENT_STARTED}
    ),
    SegmentState.COPY_SEGMENT_FINISHED: frozenset({SegmentState.DELETE_SEGMENT_STARTED}),
    SegmentState.DELETE_SEGMENT_STARTED: frozenset({SegmentState.DELETE_SEGMENT_FINISHED}),
    SegmentState.DELETE_SEGMENT_FINISHED: frozenset(),
}

# An upload or deletion was announced but not known to have finished: orphans after a restart.
UNFINISHED_STATES = frozenset({SegmentState.COPY_SEGMENT_STARTED, SegmentState.DELETE_SEGMENT_STARTED})


class IllegalRemoteSegmentTransitionError(OnceStreamError):
    """An event that the transition table does not allow (or a copy overlapping a readable
    segment, or a description that describes no segment): a bug of the caller, never data to
    keep. Nothing is applied."""


@dataclass(frozen=True, slots=True)
class SegmentDescription:
    """What a COPY_SEGMENT_STARTED event says of the local segment being copied."""

    base_offset: int
    last_offset: int  # inclusive
    max_timestamp_ms: int  # -1 if no batch carried a timestamp
    size_bytes: int  # of the .log object
    has_txn_index: bool  # a txnindex object is uploaded (the segment holds abort markers)
    has_snapshot: bool  # a producer snapshot object is uploaded

    def __post_init__(self) -> None:
        if not 0 <= self.base_offset <= self.last_offset:
            raise IllegalRemoteSegmentTransitionError(
                f"a remote segment spans [{self.base_offset}, {self.last_offset}]: not a range of offsets"
            )
        if self.size_bytes < 0 or self.max_timestamp_ms < -1:
            raise IllegalRemoteSegmentTransitionError(
                f"a remote segment of {self.size_bytes} bytes with max timestamp {self.max_timestamp_ms}"
            )


@dataclass(frozen=True, slots=True)
class SegmentEvent:
    """One state change of one remote segment, as the journal stores it."""

    segment_id: uuid.UUID
    state: SegmentState
    event_time_ms: int
    description: SegmentDescription | None = None  # with COPY_SEGMENT_STARTED only, and always there
    # With COPY_SEGMENT_FINISHED: (suffix, bytes) of every object uploaded, sorted by suffix.
    object_sizes: tuple[tuple[str, int], ...] = ()

    @classmethod
    def copy_started(cls, segment_id: uuid.UUID, description: SegmentDescription, event_time_ms: int) -> SegmentEvent:
        """The first event of a segment: its copy is about to start."""
        return cls(segment_id, SegmentState.COPY_SEGMENT_STARTED, event_time_ms, description)

    @classmethod
    def copy_finished(
        cls, segment_id: uuid.UUID, event_time_ms: int, object_sizes: dict[str, int] | None = None
    ) -> SegmentEvent:
        """Every object of the segment is in the store: it becomes readable."""
        sizes = tuple(sorted((object_sizes or {}).items()))
        return cls(segment_id, SegmentState.COPY_SEGMENT_FINISHED, event_time_ms, object_sizes=sizes)

    @classmethod
    def delete_started(cls, segment_id: uuid.UUID, event_time_ms: int) -> SegmentEvent:
        """The segment's objects are about to be deleted (retention, orphan, topic deletion)."""
        return cls(segment_id, SegmentState.DELETE_SEGMENT_STARTED, event_time_ms)

    @classmethod
    def delete_finished(cls, segment_id: uuid.UUID, event_time_ms: int) -> SegmentEvent:
        """Every object of the segment is gone."""
        return cls(segment_id, SegmentState.DELETE_SEGMENT_FINISHED, event_time_ms)


@dataclass(frozen=True, slots=True)
class RemoteSegment:
    """One remote segment as the metadata knows it now."""

    segment_id: uuid.UUID
    base_offset: int
    last_offset: int  # inclusive
    max_timestamp_ms: int
    size_bytes: int  # of the .log object
    state: SegmentState
    has_txn_index: bool
    has_snapshot: bool
    object_sizes: tuple[tuple[str, int], ...] = ()  # (suffix, bytes), known once the copy finished
    state_time_ms: int = -1  # when it entered ``state``

    @property
    def readable(self) -> bool:
        """Whether reads may use it (its copy finished, no deletion began)."""
        return self.state is SegmentState.COPY_SEGMENT_FINISHED

    def object_size(self, suffix: str) -> int | None:
        """Bytes of the object with ``suffix``, if the copy reported it."""
        return dict(self.object_sizes).get(suffix)

    def overlaps(self, base_offset: int, last_offset: int) -> bool:
        return self.base_offset <= last_offset and base_offset <= self.last_offset


class RemotePartitionMetadata:
    """Every remote segment of one partition, with the queries the copier, the retention pass
    and the reader need. Sans-io: events come from the journal (replayed) or are recorded through
    it (``MetadataJournal.record`` writes before it applies)."""

    def __init__(self) -> None:
        self._segments: dict[uuid.UUID, RemoteSegment] = {}
        # Readable segments sorted by base offset (never overlapping: ``check`` refuses it).
        self._readable: list[RemoteSegment] = []

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RemotePartitionMetadata):
            return NotImplemented
        return self._segments == other._segments

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"RemotePartitionMetadata({sorted(self._segments.values(), key=_order)!r})"

    # --- events ---------------------------------------------------------------------------------

    def check(self, event: SegmentEvent) -> None:
        """IllegalRemoteSegmentTransitionError unless ``event`` may be applied now."""
        current = self._segments.get(event.segment_id)
        current_state = None if current is None else current.state
        if event.state not in TRANSITIONS[current_state]:
            was = "new" if current_state is None else current_state.value
            raise IllegalRemoteSegmentTransitionError(
                f"remote segment {event.segment_id}: {was} -> {event.state.value} is not a legal transition"
            )
        if (event.description is None) == (event.state is SegmentState.COPY_SEGMENT_STARTED):
            raise IllegalRemoteSegmentTransitionError(
                f"remote segment {event.segment_id}: a description comes with COPY_SEGMENT_STARTED and only with it"
            )
        if event.object_sizes and event.state is not SegmentState.COPY_SEGMENT_FINISHED:
            raise IllegalRemoteSegmentTransitionError(
                f"remote segment {event.segment_id}: object sizes come with COPY_SEGMENT_FINISHED only"
            )
        if event.state in (SegmentState.COPY_SEGMENT_STARTED, SegmentState.COPY_SEGMENT_FINISHED):
            span = event.description if current is None else current
            if span is None:
                raise IllegalRemoteSegmentTransitionError(f"remote segment {event.segment_id} has no offsets")
            clash = self._readable_overlapping(span.base_offset, span.last_offset)
            if clash is not None:
                raise IllegalRemoteSegmentTransitionError(
                    f"remote segment {event.segment_id} [{span.base_offset}, {span.last_offset}] overlaps readable "
                    f"segment {clash.segment_id} [{clash.base_offset}, {clash.last_offset}]"
                )

    def apply(self, event: SegmentEvent) -> RemoteSegment:
        """Apply ``event`` (``check`` first: nothing changes if it raises); returns the segment
        as it is now."""
        self.check(event)
        current = self._segments.get(event.segment_id)
        if current is None:
            description = event.description
            if description is None:  # check() guarantees it; kept explicit for the type checker
                raise IllegalRemoteSegmentTransitionError(f"remote segment {event.segment_id} has no description")
            segment = RemoteSegment(
                segment_id=event.segment_id,
                base_offset=description.base_offset,
                last_offset=description.last_offset,
                max_timestamp_ms=description.max_timestamp_ms,
                size_bytes=description.size_bytes,
                state=event.state,
                has_txn_index=description.has_txn_index,
                has_snapshot=description.has_snapshot,
                state_time_ms=event.event_time_ms,
            )
        else:
            segment = replace(current, state=event.state, state_time_ms=event.event_time_ms)
            if event.object_sizes:
                segment = replace(segment, object_sizes=event.object_sizes)
            if current.readable:
                self._readable.remove(current)
        self._segments[event.segment_id] = segment
        if segment.readable:
            slot = bisect_right(self._readable, segment.base_offset, key=lambda s: s.base_offset)
            self._readable.insert(slot, segment)
        return segment

    def forget_deleted(self) -> int:
        """Drop the DELETE_SEGMENT_FINISHED segments (after the journal was compacted without
        them); returns how many."""
        gone = [sid for sid, s in self._segments.items() if s.state is SegmentState.DELETE_SEGMENT_FINISHED]
        for segment_id in gone:
            del self._segments[segment_id]
        return len(gone)

    # --- queries --------------------------------------------------------------------------------

    def get(self, segment_id: uuid.UUID) -> RemoteSegment | None:
        return self._segments.get(segment_id)

    def segments(self) -> list[RemoteSegment]:
        """Every segment the metadata knows, in any state, by base offset (then id)."""
        return sorted(self._segments.values(), key=_order)

    def readable_segments(self) -> list[RemoteSegment]:
        """The COPY_SEGMENT_FINISHED segments, oldest first (non-overlapping)."""
        return list(self._readable)

    def segment_for(self, offset: int) -> RemoteSegment | None:
        """The readable segment holding ``offset``, if any."""
        slot = bisect_right(self._readable, offset, key=lambda s: s.base_offset) - 1
        if slot >= 0 and self._readable[slot].last_offset >= offset:
            return self._readable[slot]
        return None

    def highest_copied_last_offset(self) -> int:
        """The last offset of the newest readable segment (-1 if none): the copier resumes after
        it, and local retention may delete local segments at or below it (Kafka's
        highestOffsetInRemoteStorage)."""
        return self._readable[-1].last_offset if self._readable else -1

    def earliest_readable_offset(self) -> int | None:
        """The base offset of the oldest readable segment (None if none): the log start of a
        tiered partition when it is below the local log start."""
        return self._readable[0].base_offset if self._readable else None

    def remote_size_bytes(self) -> int:
        """Bytes of the readable segments' records (retention.bytes counts these)."""
        return sum(segment.size_bytes for segment in self._readable)

    def unfinished(self) -> list[RemoteSegment]:
        """COPY_SEGMENT_STARTED and DELETE_SEGMENT_STARTED segments, oldest first: after a
        restart these are orphans whose objects must be deleted."""
        return [segment for segment in self.segments() if segment.state in UNFINISHED_STATES]

    def count_in(self, state: SegmentState) -> int:
        """How many segments are in ``state``."""
        return sum(1 for segment in self._segments.values() if segment.state is state)

    def _readable_overlapping(self, base_offset: int, last_offset: int) -> RemoteSegment | None:
        slot = bisect_right(self._readable, last_offset, key=lambda s: s.base_offset) - 1
        if slot >= 0 and self._readable[slot].overlaps(base_offset, last_offset):
            return self._readable[slot]
        return None


def _order(segment: RemoteSegment) -> tuple[int, str]:
    return segment.base_offset, str(segment.segment_id)
