"""The per-partition remote log metadata journal: durable appends, replay cutting a torn or corrupt
tail, compaction, failures, and finding every journal of a data directory."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from oncestream.remote.layout import uuid_text
from oncestream.remote.metadata_journal import (
    JournalInfo,
    MetadataJournal,
    MetadataJournalError,
    encode_event,
    journal_path,
    list_journals,
)
from oncestream.remote.segment_metadata import (
    IllegalRemoteSegmentTransitionError,
    RemotePartitionMetadata,
    SegmentDescription,
    SegmentEvent,
    SegmentState,
)

TOPIC_ID = uuid.UUID("4f3b1c2a-9d8e-4f70-a1b2-c3d4e5f60718")


def describe(base: int, last: int) -> SegmentDescription:
    return SegmentDescription(base, last, max_timestamp_ms=5, size_bytes=1_000, has_txn_index=True, has_snapshot=True)


def three_events() -> list[SegmentEvent]:
    segment_id = uuid.UUID(int=1)
    return [
        SegmentEvent.copy_started(segment_id, describe(0, 99), 10),
        SegmentEvent.copy_finished(segment_id, 11, {"log": 1_000, "index": 16, "timeindex": 12}),
        SegmentEvent.delete_started(segment_id, 12),
    ]


def built(events: list[SegmentEvent]) -> RemotePartitionMetadata:
    metadata = RemotePartitionMetadata()
    for event in events:
        metadata.apply(event)
    return metadata


def test_path_scheme(tmp_path: Path) -> None:
    path = journal_path(tmp_path, "orders", TOPIC_ID, 7)
    assert path == tmp_path / "remote-log-metadata" / f"orders-{uuid_text(TOPIC_ID)}" / "7.journal"


def test_every_record_is_fsynced_before_it_applies_and_replays(tmp_path: Path) -> None:
    path = journal_path(tmp_path, "orders", TOPIC_ID, 0)
    synced: list[int] = []

    def fsync(fd: int) -> None:
        synced.append(os.fstat(fd).st_size if not os.path.isdir(f"/proc/self/fd/{fd}") else -1)
        os.fsync(fd)

    journal = MetadataJournal.open(path, fsync=fsync)
    assert not path.exists()  # nothing written before the first event
    sizes = []
    for event in three_events():
        journal.record(event)
        sizes.append(path.stat().st_size)
    file_syncs = [size for size in synced if size >= 0]
    assert file_syncs == sizes  # each fsync covered the whole line just written
    assert -1 in synced  # the new file's folders were fsynced too
    open_files = []
    for fd_name in os.listdir("/proc/self/fd"):
        try:
            open_files.append(os.readlink(f"/proc/self/fd/{fd_name}"))
        except OSError:
            continue
    assert str(path) not in open_files  # no descriptor stays open between events
    journal.close()
    reopened = MetadataJournal.open(path)
    assert reopened.metadata == built(three_events())
    assert reopened.event_count == 3
    line = path.read_bytes().split(b"\n")[0]
    crc, _, body = line.partition(b" ")
    assert len(crc) == 8
    assert body.startswith(b"{")


def test_torn_write_at_every_byte_of_the_last_record_is_cut(tmp_path: Path) -> None:
    events = three_events()
    lines = [encode_event(event) for event in events]
    whole = b"".join(lines)
    kept = len(whole) - len(lines[-1])
    for cut in range(kept, len(whole) + 1):
        path = tmp_path / f"cut-{cut}" / "0.journal"
        path.parent.mkdir()
        path.write_bytes(whole[:cut])
        journal = MetadataJournal.open(path)
        complete = cut == len(whole)
        assert journal.metadata == built(events if complete else events[:2]), cut
        assert path.stat().st_size == (len(whole) if complete else kept), cut
        if not complete:
            # Appending after the cut gives a journal whose every line replays.
            journal.record(events[-1])
            journal.close()
            assert MetadataJournal.open(path).metadata == built(events)
            assert path.read_bytes() == whole


@pytest.mark.parametrize("flip_at", [0, 3, 9, 20, -5, -2])
def test_corrupt_byte_in_the_last_record_is_cut(tmp_path: Path, flip_at: int) -> None:
    events = three_events()
    lines = [encode_event(event) for event in events]
    data = bytearray(b"".join(lines))
    position = len(data) - len(lines[-1]) + flip_at if flip_at >= 0 else len(data) + flip_at
    data[position] ^= 0x01
    path = tmp_path / "0.journal"
    path.write_bytes(bytes(data))
    journal = MetadataJournal.open(path)
    assert journal.metadata == built(events[:2])
    assert path.read_bytes() == b"".join(lines[:2])


def test_a_checksummed_event_that_breaks_the_table_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "0.journal"
    events = three_events()
    path.write_bytes(encode_event(events[0]) + encode_event(events[2]) + encode_event(events[1]))
    with pytest.raises(MetadataJournalError, match="event 3 contradicts"):
        MetadataJournal.open(path)


def test_an_illegal_event_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    path = tmp_path / "0.journal"
    journal = MetadataJournal.open(path)
    events = three_events()
    journal.record(events[0])
    size = path.stat().st_size
    with pytest.raises(IllegalRemoteSegmentTransitionError):
        journal.record(SegmentEvent.delete_finished(uuid.UUID(int=1), 13))  # COPY_SEGMENT_STARTED -> DELETE_SEGMENT_FINISHED
    assert path.stat().st_size == size
    assert journal.metadata == built(events[:1])


def test_failed_fsync_refuses_later_events_until_reopened(tmp_path: Path) -> None:
    path = tmp_path / "0.journal"
    failing = {"on": False}

    def fsync(fd: int) -> None:
        if failing["on"]:
            raise OSError(5, "Input/output error")
        os.fsync(fd)

    journal = MetadataJournal.open(path, fsync=fsync)
    events = three_events()
    journal.record(events[0])
    failing["on"] = True
    with pytest.raises(MetadataJournalError, match="fsync failed"):
        journal.record(events[1])
    assert journal.metadata == built(events[:1])  # the caller must not act on it: not applied
    failing["on"] = False
    with pytest.raises(MetadataJournalError, match="failed"):
        journal.record(events[1])
    journal.close()
    # Reopened, the journal holds what reached the file (an event whose fsync failed may be
    # there: a COPY_SEGMENT_FINISHED is only written after the upload succeeded, a STARTED one
    # makes an orphan that the restart cleans up).
    reopened = MetadataJournal.open(path)
    assert reopened.metadata in (built(events[:1]), built(events[:2]))
    reopened.record(SegmentEvent.delete_started(uuid.UUID(int=1), 20))


def test_compaction_keeps_live_segments_in_every_state_and_drops_deleted_ones(tmp_path: Path) -> None:
    path = tmp_path / "0.journal"
    journal = MetadataJournal.open(path, compact_min_events=3)
    copying, readable, deleting = uuid.UUID(int=100), uuid.UUID(int=101), uuid.UUID(int=102)
    journal.record(SegmentEvent.copy_started(copying, describe(40, 49), 1))
    journal.record(SegmentEvent.copy_started(readable, describe(30, 39), 1))
    journal.record(SegmentEvent.copy_finished(readable, 2, {"log": 1_000, "index": 8}))
    journal.record(SegmentEvent.copy_started(deleting, describe(20, 29), 1))
    journal.record(SegmentEvent.copy_finished(deleting, 2, {"log": 1_000}))
    journal.record(SegmentEvent.delete_started(deleting, 3))
    for n in range(4):
        gone = uuid.UUID(int=n + 1)
        journal.record(SegmentEvent.copy_started(gone, describe(n * 5, n * 5 + 4), 1))
        journal.record(SegmentEvent.copy_finished(gone, 2))
        journal.record(SegmentEvent.delete_started(gone, 3))
        before = journal.event_count
        journal.record(SegmentEvent.delete_finished(gone, 4))
        if n < 2:
            assert journal.event_count == before + 1  # 3 deleted of 6 do not dominate yet
    # 4 deleted of 7 dominated at the 4th: compacted to 1 + 2 + 3 events for the live ones.
    assert journal.event_count == 6
    assert len(path.read_bytes().splitlines()) == 6
    assert journal.metadata.count_in(SegmentState.DELETE_SEGMENT_FINISHED) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["0.journal"]  # no temporary file left
    live = {s.segment_id: s for s in journal.metadata.segments()}
    assert live[copying].state is SegmentState.COPY_SEGMENT_STARTED
    assert live[readable].state is SegmentState.COPY_SEGMENT_FINISHED
    assert live[readable].object_size("index") == 8
    assert live[deleting].state is SegmentState.DELETE_SEGMENT_STARTED
    journal.record(SegmentEvent.copy_finished(copying, 9))  # appends after the rewrite
    journal.close()
    reopened = MetadataJournal.open(path)
    assert reopened.metadata == journal.metadata
    assert [s.base_offset for s in reopened.metadata.readable_segments()] == [30, 40]


def test_list_journals_finds_every_partition_and_skips_foreign_files(tmp_path: Path) -> None:
    other_id = uuid.UUID(int=77)
    for topic, topic_id, partition in (("orders", TOPIC_ID, 0), ("orders", TOPIC_ID, 12), ("a-b-c", other_id, 3)):
        journal = MetadataJournal.open(journal_path(tmp_path, topic, topic_id, partition))
        journal.record(SegmentEvent.copy_started(uuid.uuid4(), describe(0, 0), 1))
        journal.close()
    folder = journal_path(tmp_path, "orders", TOPIC_ID, 0).parent
    (folder / "0.journal.tmp").write_bytes(b"")
    (folder / "notes.txt").write_bytes(b"")
    (folder / "01.journal").write_bytes(b"")
    (tmp_path / "remote-log-metadata" / "not-a-topic-folder").mkdir()
    assert list_journals(tmp_path) == [
        JournalInfo("a-b-c", other_id, 3, journal_path(tmp_path, "a-b-c", other_id, 3)),
        JournalInfo("orders", TOPIC_ID, 0, journal_path(tmp_path, "orders", TOPIC_ID, 0)),
        JournalInfo("orders", TOPIC_ID, 12, journal_path(tmp_path, "orders", TOPIC_ID, 12)),
    ]
    assert list_journals(tmp_path / "elsewhere") == []


def test_delete_removes_the_journal_and_then_the_empty_topic_folder(tmp_path: Path) -> None:
    first = MetadataJournal.open(journal_path(tmp_path, "orders", TOPIC_ID, 0))
    second = MetadataJournal.open(journal_path(tmp_path, "orders", TOPIC_ID, 1))
    for journal in (first, second):
        journal.record(SegmentEvent.copy_started(uuid.uuid4(), describe(0, 0), 1))
    folder = first.path.parent
    first.delete()
    assert not first.path.exists()
    assert folder.exists()
    second.delete()
    assert not folder.exists()
    with pytest.raises(MetadataJournalError, match="closed"):
        first.record(SegmentEvent.copy_started(uuid.uuid4(), describe(0, 0), 1))
    assert list_journals(tmp_path) == []
