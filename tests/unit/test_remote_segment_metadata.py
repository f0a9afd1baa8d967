"""Remote segment states (Kafka's RemoteLogSegmentState), the transition table and the queries of one
partition's remote metadata; a property test over random event sequences, journal replay included."""

from __future__ import annotations

import itertools
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oncestream.remote.metadata_journal import MetadataJournal
from oncestream.remote.segment_metadata import (
    TRANSITIONS,
    IllegalRemoteSegmentTransitionError,
    RemotePartitionMetadata,
    SegmentDescription,
    SegmentEvent,
    SegmentState,
)

S = SegmentState


def describe(base: int, last: int, size: int = 100) -> SegmentDescription:
    return SegmentDescription(base, last, max_timestamp_ms=base * 10, size_bytes=size, has_txn_index=False,
                              has_snapshot=True)


def event_to(segment_id: uuid.UUID, state: SegmentState, base: int = 0, last: int = 9) -> SegmentEvent:
    if state is S.COPY_SEGMENT_STARTED:
        return SegmentEvent.copy_started(segment_id, describe(base, last), 1)
    return SegmentEvent(segment_id, state, 2)


def test_the_table_is_kafkas() -> None:
    assert TRANSITIONS == {
        None: {S.COPY_SEGMENT_STARTED},
        S.COPY_SEGMENT_STARTED: {S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED},
        S.COPY_SEGMENT_FINISHED: {S.DELETE_SEGMENT_STARTED},
        S.DELETE_SEGMENT_STARTED: {S.DELETE_SEGMENT_FINISHED},
        S.DELETE_SEGMENT_FINISHED: set(),
    }


PATHS_TO: dict[SegmentState | None, list[SegmentState]] = {
    None: [],
    S.COPY_SEGMENT_STARTED: [S.COPY_SEGMENT_STARTED],
    S.COPY_SEGMENT_FINISHED: [S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED],
    S.DELETE_SEGMENT_STARTED: [S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED],
    S.DELETE_SEGMENT_FINISHED: [
        S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED,
    ],
}


@pytest.mark.parametrize(("current", "target"), list(itertools.product(list(PATHS_TO), list(S))))
def test_every_pair_of_states_is_legal_exactly_when_the_table_says(current: SegmentState | None,
                                                                    target: SegmentState) -> None:
    metadata = RemotePartitionMetadata()
    segment_id = uuid.uuid4()
    for state in PATHS_TO[current]:
        metadata.apply(event_to(segment_id, state))
    before = metadata.segments()
    if target in TRANSITIONS[current]:
        assert metadata.apply(event_to(segment_id, target)).state is target
    else:
        with pytest.raises(IllegalRemoteSegmentTransitionError, match="not a legal transition"):
            metadata.apply(event_to(segment_id, target))
        assert metadata.segments() == before  # nothing applied


def test_orphaned_copy_may_be_deleted_without_finishing() -> None:
    metadata = RemotePartitionMetadata()
    segment_id = uuid.uuid4()
    metadata.apply(SegmentEvent.copy_started(segment_id, describe(0, 9), 1))
    assert [s.segment_id for s in metadata.unfinished()] == [segment_id]
    metadata.apply(SegmentEvent.delete_started(segment_id, 2))
    assert [s.state for s in metadata.unfinished()] == [S.DELETE_SEGMENT_STARTED]
    metadata.apply(SegmentEvent.delete_finished(segment_id, 3))
    assert metadata.unfinished() == []
    assert metadata.readable_segments() == []


def test_events_must_carry_a_description_exactly_at_copy_start() -> None:
    metadata = RemotePartitionMetadata()
    segment_id = uuid.uuid4()
    with pytest.raises(IllegalRemoteSegmentTransitionError):
        metadata.apply(SegmentEvent(segment_id, S.COPY_SEGMENT_STARTED, 1))
    metadata.apply(SegmentEvent.copy_started(segment_id, describe(0, 9), 1))
    with pytest.raises(IllegalRemoteSegmentTransitionError):
        metadata.apply(SegmentEvent(segment_id, S.COPY_SEGMENT_FINISHED, 2, describe(0, 9)))
    with pytest.raises(IllegalRemoteSegmentTransitionError):
        metadata.apply(SegmentEvent(segment_id, S.DELETE_SEGMENT_STARTED, 2, object_sizes=(("log", 1),)))
    with pytest.raises(IllegalRemoteSegmentTransitionError):
        describe(5, 4)


def test_queries_over_readable_segments() -> None:
    metadata = RemotePartitionMetadata()
    assert metadata.highest_copied_last_offset() == -1
    assert metadata.earliest_readable_offset() is None
    ids = [uuid.uuid4() for _ in range(4)]
    for segment_id, (base, last) in zip(ids, [(20, 29), (0, 9), (10, 19), (30, 39)]):
        metadata.apply(SegmentEvent.copy_started(segment_id, describe(base, last, size=base + 1), 1))
    for segment_id in ids[:3]:
        metadata.apply(SegmentEvent.copy_finished(segment_id, 2, {"log": 7, "index": 8}))
    assert [s.base_offset for s in metadata.readable_segments()] == [0, 10, 20]  # oldest first
    assert metadata.highest_copied_last_offset() == 29
    assert metadata.earliest_readable_offset() == 0
    assert metadata.remote_size_bytes() == 1 + 11 + 21
    segment = metadata.segment_for(15)
    assert segment is not None
    assert (segment.base_offset, segment.object_size("index"), segment.object_size("txnindex")) == (10, 8, None)
    assert metadata.segment_for(35) is None  # copy of [30, 39] not finished: not readable
    assert metadata.segment_for(40) is None
    assert [s.base_offset for s in metadata.unfinished()] == [30]
    metadata.apply(SegmentEvent.delete_started(ids[1], 3))  # retention deletes [0, 9]
    assert metadata.earliest_readable_offset() == 10
    assert metadata.segment_for(5) is None
    assert metadata.remote_size_bytes() == 11 + 21


def test_a_copy_overlapping_a_readable_segment_is_refused() -> None:
    metadata = RemotePartitionMetadata()
    first, again, later = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    metadata.apply(SegmentEvent.copy_started(first, describe(0, 9), 1))
    metadata.apply(SegmentEvent.copy_started(again, describe(5, 14), 1))  # neither readable yet
    metadata.apply(SegmentEvent.copy_finished(first, 2))
    with pytest.raises(IllegalRemoteSegmentTransitionError, match="overlaps readable"):
        metadata.apply(SegmentEvent.copy_finished(again, 3))
    with pytest.raises(IllegalRemoteSegmentTransitionError, match="overlaps readable"):
        metadata.apply(SegmentEvent.copy_started(later, describe(9, 9), 3))
    metadata.apply(SegmentEvent.copy_started(later, describe(10, 19), 3))  # adjacent is fine


# --- property: random event sequences ---------------------------------------------------------------

RANGES = [(0, 9), (10, 19), (5, 14), (20, 29), (0, 29), (15, 15)]


@st.composite
def event_sequences(draw: st.DrawFn) -> list[SegmentEvent]:
    """Events over a few segment ids, most of them legal successors, some anything at all."""
    ids = [uuid.UUID(int=n + 1) for n in range(draw(st.integers(1, 6)))]
    events: list[SegmentEvent] = []
    for step in range(draw(st.integers(0, 40))):
        segment_id = draw(st.sampled_from(ids))
        state = draw(st.sampled_from(list(S)))
        if state is S.COPY_SEGMENT_STARTED:
            base, last = draw(st.sampled_from(RANGES))
            events.append(SegmentEvent.copy_started(segment_id, describe(base, last), step))
        elif state is S.COPY_SEGMENT_FINISHED and draw(st.booleans()):
            events.append(SegmentEvent.copy_finished(segment_id, step, {"log": step, "index": 1}))
        else:
            events.append(SegmentEvent(segment_id, state, step))
    return events


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=event_sequences())
def test_random_events_never_leave_overlapping_readable_segments_and_replay_rebuilds(
    tmp_path_factory: pytest.TempPathFactory, events: list[SegmentEvent]
) -> None:
    path = tmp_path_factory.mktemp("journal") / "0.journal"
    journal = MetadataJournal.open(path, fsync=lambda fd: None, compact_min_events=2)
    model = RemotePartitionMetadata()
    for event in events:
        current = model.get(event.segment_id)
        legal_step = event.state in TRANSITIONS[None if current is None else current.state]
        try:
            journal.record(event)
        except IllegalRemoteSegmentTransitionError:
            assert model.get(event.segment_id) == current
            continue
        assert legal_step
        model.apply(event)
        if journal.metadata.count_in(S.DELETE_SEGMENT_FINISHED) < model.count_in(S.DELETE_SEGMENT_FINISHED):
            # Compaction dropped the deleted segments; their (uuid4, never reused) ids are forgotten.
            model.forget_deleted()
        assert journal.metadata == model
        readable = model.readable_segments()
        for earlier, later in itertools.pairwise(readable):
            assert earlier.last_offset < later.base_offset
        assert all(s.state is S.COPY_SEGMENT_FINISHED for s in readable)
    journal.close()
    # The journal (compacted along the way when deletions dominated) rebuilds the live state.
    model.forget_deleted()
    journal.metadata.forget_deleted()
    assert journal.metadata == model
    replayed = MetadataJournal.open(path, fsync=lambda fd: None)
    replayed.metadata.forget_deleted()
    assert replayed.metadata == model


def test_replay_without_compaction_rebuilds_deleted_segments_too(tmp_path: Path) -> None:
    path = tmp_path / "0.journal"
    journal = MetadataJournal.open(path)
    done, live = uuid.uuid4(), uuid.uuid4()
    for event in (
        SegmentEvent.copy_started(done, describe(0, 9), 1),
        SegmentEvent.copy_finished(done, 2, {"log": 5}),
        SegmentEvent.delete_started(done, 3),
        SegmentEvent.delete_finished(done, 4),
        SegmentEvent.copy_started(live, describe(0, 9), 5),
    ):
        journal.record(event)
    journal.close()
    assert MetadataJournal.open(path).metadata == journal.metadata
    assert MetadataJournal.open(path).metadata.count_in(S.DELETE_SEGMENT_FINISHED) == 1
