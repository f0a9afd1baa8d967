"""The blocking steps of the RemoteLogManager, run on its thread pool (never on the event loop).

Each step journals its intent durably before it touches the object store and its completion only
after the store confirmed it (TIERED.md "Remote log metadata"):

- ``copy_segment``: COPY_SEGMENT_STARTED, upload the segment's files under fresh keys,
  COPY_SEGMENT_FINISHED. A failed upload deletes what it can (DELETE_SEGMENT_STARTED, delete
  every suffix, DELETE_SEGMENT_FINISHED) and re-raises; if that cleanup fails too, the segment
  stays in a STARTED state and the next round's ``clean_unfinished`` finishes it.
- ``delete_segment``: DELETE_SEGMENT_STARTED, delete every suffix, DELETE_SEGMENT_FINISHED.
- ``purge_topic``: every object under a deleted topic's prefix, then its journals.

A partition's steps never overlap (the manager runs one task per partition), so the journal of a
partition has one writer at a time.
"""

from __future__ import annotations

import logging
import shutil
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from oncestream.errors import StorageError
from oncestream.log.local_tiering import TierableSegment
from oncestream.remote import layout
from oncestream.remote.metadata_journal import MetadataJournal
from oncestream.remote.object_store import ObjectStore
from oncestream.remote.segment_metadata import RemoteSegment, SegmentDescription, SegmentEvent, SegmentState

log = logging.getLogger(__name__)

# Kafka's LeaderEpochCheckpointFile: version, entry count, then "epoch start_offset" lines. A
# single broker leads every partition in epoch 0 from offset 0.
LEADER_EPOCH_CHECKPOINT = b"0\n1\n0 0\n"


@dataclass(frozen=True, slots=True)
class PartitionRef:
    """Which partition a journal and its objects belong to (the segments do not say)."""

    topic: str
    topic_id: uuid.UUID
    partition: int

    def key(self, segment: RemoteSegment, suffix: str) -> str:
        """The object key of ``segment``'s ``suffix``."""
        return layout.segment_key(self.topic, self.topic_id, self.partition, segment.base_offset,
                                  segment.segment_id, suffix)

    def keys(self, segment: RemoteSegment) -> list[str]:
        """Every key the segment may have objects under (missing ones are fine to delete)."""
        return [self.key(segment, suffix) for suffix in layout.SEGMENT_SUFFIXES]

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


def _upload_file(store: ObjectStore, key: str, path: Path) -> int:
    try:
        with path.open("rb") as file:
            size = path.stat().st_size
            store.put_file(key, file, size)
            return size
    except FileNotFoundError as exc:
        # The local segment went meanwhile (DeleteRecords below it): nothing to tier any more.
        raise StorageError(f"local file {path} vanished before its upload to {key}") from exc
    except OSError as exc:
        raise StorageError(f"cannot read {path} for its upload to {key}: {exc}") from exc


def copy_segment(store: ObjectStore, journal: MetadataJournal, ref: PartitionRef, segment: TierableSegment,
                 now_ms: Callable[[], int]) -> RemoteSegment:
    """Copy one closed local segment to the store under a fresh segment id; returns it as
    COPY_SEGMENT_FINISHED. StorageError (RemoteStorageError from the store) if the copy failed:
    the partial upload is cleaned here if the store allows, else left STARTED."""
    segment_id = uuid.uuid4()
    description = SegmentDescription(
        base_offset=segment.base_offset, last_offset=segment.last_offset,
        max_timestamp_ms=max(segment.max_timestamp_ms, -1), size_bytes=segment.size_bytes,
        has_txn_index=segment.txnindex_path is not None, has_snapshot=segment.producer_snapshot_path is not None)
    remote = journal.record(SegmentEvent.copy_started(segment_id, description, now_ms()))  # durable first
    files: list[tuple[str, Path | bytes]] = [
        (layout.LOG_SUFFIX, segment.log_path), (layout.INDEX_SUFFIX, segment.index_path),
        (layout.TIME_INDEX_SUFFIX, segment.timeindex_path),
    ]
    if segment.txnindex_path is not None:
        files.append((layout.TXN_INDEX_SUFFIX, segment.txnindex_path))
    if segment.producer_snapshot_path is not None:
        files.append((layout.SNAPSHOT_SUFFIX, segment.producer_snapshot_path))
    files.append((layout.LEADER_EPOCH_SUFFIX, LEADER_EPOCH_CHECKPOINT))
    sizes: dict[str, int] = {}
    try:
        for suffix, source in files:
            key = ref.key(remote, suffix)
            if isinstance(source, bytes):
                store.put(key, source)
                sizes[suffix] = len(source)
            else:
                sizes[suffix] = _upload_file(store, key, source)
    except (StorageError, OSError) as exc:
        log.warning("copying segment %d of %s to %s failed: %s", segment.base_offset, ref, store.description, exc)
        try:
            delete_segment(store, journal, ref, remote, now_ms)
        except (StorageError, OSError) as cleanup_exc:
            log.warning("partial copy %s of %s left for the next round: %s", segment_id, ref, cleanup_exc)
        raise
    return journal.record(SegmentEvent.copy_finished(segment_id, now_ms(), sizes))


def delete_segment(store: ObjectStore, journal: MetadataJournal, ref: PartitionRef, remote: RemoteSegment,
                   now_ms: Callable[[], int]) -> None:
    """Delete every object of ``remote`` (missing ones are fine), journaled as
    DELETE_SEGMENT_STARTED before (unless it is already) and DELETE_SEGMENT_FINISHED after."""
    current = journal.metadata.get(remote.segment_id)
    if current is None or current.state is not SegmentState.DELETE_SEGMENT_STARTED:
        journal.record(SegmentEvent.delete_started(remote.segment_id, now_ms()))
    for key in ref.keys(remote):
        store.delete(key)
    journal.record(SegmentEvent.delete_finished(remote.segment_id, now_ms()))


def clean_unfinished(store: ObjectStore, journal: MetadataJournal, ref: PartitionRef, now_ms: Callable[[], int],
                     in_flight: Iterable[uuid.UUID] = ()) -> int:
    """Finish every segment a crash or a failed cleanup left in COPY_SEGMENT_STARTED or
    DELETE_SEGMENT_STARTED (except ``in_flight`` ones): its objects are deleted and it goes to
    DELETE_SEGMENT_FINISHED. Returns how many."""
    busy = set(in_flight)
    unfinished = [s for s in journal.metadata.unfinished() if s.segment_id not in busy]
    if unfinished:
        log.info("%s: deleting the objects of %d unfinished remote segment(s) (a crash or a failed copy left them)",
                 ref, len(unfinished))
    for remote in unfinished:
        delete_segment(store, journal, ref, remote, now_ms)
    return len(unfinished)


def purge_topic(store: ObjectStore, topic_dir: Path, prefix: str) -> int:
    """A deleted topic's remote data: every object under its ``prefix`` first, then its journal
    folder (last: until the objects are gone, a crash leaves the journals that name them, and the
    next start purges again). Returns how many objects were deleted."""
    keys = store.list(prefix)
    for key in keys:
        store.delete(key)
    try:
        shutil.rmtree(topic_dir)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise StorageError(f"cannot remove the remote log metadata {topic_dir}: {exc}") from exc
    return len(keys)
