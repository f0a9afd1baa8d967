"""The durable journal of one partition's remote segment events (append + fsync, replay, compaction).

Where: ``DATA_DIR/remote-log-metadata/{topic}-{topic_id}/{partition}.journal`` (``journal_path``),
outside the partition's log directory so that a deleted topic's journal survives until its remote
objects are deleted, even across a crash; the manager finds such journals with ``list_journals``.

Format: one event per line, ``crc32c-hex SP json LF``; the CRC (8 lower-case hex digits) covers
the JSON bytes. Appends are ``O_APPEND`` writes followed by an fdatasync (which covers the new
file size; the seam ``fsync`` replaces it and the directory fsyncs, like the log's
``FdatasyncFn``), so an event is durable before ``record`` returns, and the caller acts only then
(STARTED before the first byte is uploaded or deleted; FINISHED after the action succeeded).

Replay reads the lines in order and stops at the first torn or corrupt one (no LF, a bad CRC,
JSON that is not an event): that line and everything after it are cut off (the file is
truncated and fsynced), since only the last append can have been torn by a crash. A line that
decodes but breaks the transition table cannot come from ``record`` (which checks first) and
raises ``MetadataJournalError``.

Compaction: once the events of DELETE_SEGMENT_FINISHED segments dominate the file (and there are
at least ``compact_min_events`` of them), it is rewritten atomically (``durable_files``: tmp,
fsync, rename, directory fsync) with only the live segments, each as the shortest event sequence
that rebuilds its state; a crash leaves the old or the new file, both complete.

A failed write or fsync leaves the journal unusable until it is opened again (its tail cannot
be trusted, as the log goes offline after a failed fsync); a failed write first tries to cut the
partial line so that a later replay keeps every earlier event.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import crc32c

from oncestream.durable_files import fsync_directory, write_file_atomically
from oncestream.errors import StorageError
from oncestream.remote.layout import InvalidRemoteKeyError, parse_topic_folder, topic_folder
from oncestream.remote.segment_metadata import (
    IllegalRemoteSegmentTransitionError,
    RemotePartitionMetadata,
    RemoteSegment,
    SegmentDescription,
    SegmentEvent,
    SegmentState,
)

log = logging.getLogger(__name__)

JOURNAL_DIR = "remote-log-metadata"
JOURNAL_SUFFIX = ".journal"
DEFAULT_COMPACT_MIN_EVENTS = 256
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)

# The fsync of the journal file and of its directories, injectable (a test observes or fails it).
FsyncFn = Callable[[int], None]


class MetadataJournalError(StorageError):
    """The journal cannot be written or holds events that contradict each other."""


def journal_path(data_dir: pathlib.Path, topic: str, topic_id: uuid.UUID, partition: int) -> pathlib.Path:
    """Where one partition's journal lives."""
    if partition < 0:
        raise ValueError(f"partition {partition} is negative")
    return pathlib.Path(data_dir) / JOURNAL_DIR / topic_folder(topic, topic_id) / f"{partition}{JOURNAL_SUFFIX}"


@dataclass(frozen=True, slots=True)
class JournalInfo:
    """One journal found in a data directory."""

    topic: str
    topic_id: uuid.UUID
    partition: int
    path: pathlib.Path


def list_journals(data_dir: pathlib.Path) -> list[JournalInfo]:
    """Every partition journal under ``data_dir``, sorted (the manager finds the journals of
    deleted topics here). Files and folders that tiered storage does not write are skipped."""
    root = pathlib.Path(data_dir) / JOURNAL_DIR
    found: list[JournalInfo] = []
    try:
        folders = sorted(root.iterdir())
    except FileNotFoundError:
        return []
    for folder in folders:
        if not folder.is_dir():
            continue
        try:
            topic, topic_id = parse_topic_folder(folder.name)
        except InvalidRemoteKeyError:
            log.warning("%s: not a remote log metadata folder, skipped", folder)
            continue
        for path in sorted(folder.iterdir()):
            stem = path.name.removesuffix(JOURNAL_SUFFIX)
            if path.name.endswith(JOURNAL_SUFFIX) and stem.isdigit() and str(int(stem)) == stem:
                found.append(JournalInfo(topic, topic_id, int(stem), path))
    return sorted(found, key=lambda info: (info.topic, str(info.topic_id), info.partition))


# --- encoding -------------------------------------------------------------------------------------


def encode_event(event: SegmentEvent) -> bytes:
    """One journal line for ``event``."""
    fields: dict[str, Any] = {
        "id": str(event.segment_id),
        "state": event.state.value,
        "time_ms": event.event_time_ms,
    }
    description = event.description
    if description is not None:
        fields.update(
            base_offset=description.base_offset,
            last_offset=description.last_offset,
            max_timestamp_ms=description.max_timestamp_ms,
            size_bytes=description.size_bytes,
            txn_index=description.has_txn_index,
            snapshot=description.has_snapshot,
        )
    if event.object_sizes:
        fields["object_sizes"] = dict(event.object_sizes)
    body = json.dumps(fields, separators=(",", ":"), sort_keys=True).encode()
    return b"%08x %s\n" % (crc32c.crc32c(body), body)


def decode_line(line: bytes) -> SegmentEvent | None:
    """The event of one complete line (without its LF); None if it is corrupt."""
    crc_text, sep, body = line.partition(b" ")
    if not sep or crc_text != b"%08x" % crc32c.crc32c(body):
        return None
    try:
        fields = json.loads(body)
        state = SegmentState(fields["state"])
        description = None
        if "base_offset" in fields:
            description = SegmentDescription(
                base_offset=_int(fields["base_offset"]),
                last_offset=_int(fields["last_offset"]),
                max_timestamp_ms=_int(fields["max_timestamp_ms"]),
                size_bytes=_int(fields["size_bytes"]),
                has_txn_index=_bool(fields["txn_index"]),
                has_snapshot=_bool(fields["snapshot"]),
            )
        sizes = fields.get("object_sizes", {})
        if not isinstance(sizes, dict):
            return None
        return SegmentEvent(
            segment_id=uuid.UUID(fields["id"]),
            state=state,
            event_time_ms=_int(fields["time_ms"]),
            description=description,
            object_sizes=tuple(sorted((str(k), _int(v)) for k, v in sizes.items())),
        )
    except (ValueError, KeyError, TypeError, AttributeError, IllegalRemoteSegmentTransitionError):
        return None


def _int(value: object) -> int:
    if type(value) is not int:
        raise TypeError(f"{value!r} is not an integer")
    return value


def _bool(value: object) -> bool:
    if type(value) is not bool:
        raise TypeError(f"{value!r} is not a boolean")
    return value


def replay_lines(data: bytes) -> tuple[list[SegmentEvent], int]:
    """(events of the complete valid lines from the start, bytes they take): the first torn or
    corrupt line ends the replay."""
    events: list[SegmentEvent] = []
    position = 0
    while position < len(data):
        end = data.find(b"\n", position)
        if end < 0:
            break  # torn: the last append did not finish
        event = decode_line(data[position:end])
        if event is None:
            break
        events.append(event)
        position = end + 1
    return events, position


def compacted_events(segments: list[RemoteSegment]) -> list[SegmentEvent]:
    """A short event sequence that rebuilds ``segments`` (none DELETE_SEGMENT_FINISHED), in an
    order the transition table accepts: every copy starts first (nothing is readable yet, so no
    overlap), then each segment being deleted passes through its states one at a time, and the
    readable ones (which never overlap each other) finish last."""
    events: list[SegmentEvent] = []
    for segment in segments:
        description = SegmentDescription(
            segment.base_offset, segment.last_offset, segment.max_timestamp_ms, segment.size_bytes,
            segment.has_txn_index, segment.has_snapshot,
        )
        events.append(SegmentEvent.copy_started(segment.segment_id, description, segment.state_time_ms))
    for segment in segments:
        if segment.state is SegmentState.DELETE_SEGMENT_STARTED:
            if segment.object_sizes:
                events.append(SegmentEvent.copy_finished(
                    segment.segment_id, segment.state_time_ms, dict(segment.object_sizes)
                ))
            events.append(SegmentEvent.delete_started(segment.segment_id, segment.state_time_ms))
    for segment in segments:
        if segment.state is SegmentState.COPY_SEGMENT_FINISHED:
            events.append(SegmentEvent.copy_finished(
                segment.segment_id, segment.state_time_ms, dict(segment.object_sizes)
            ))
    return events


# --- the journal ----------------------------------------------------------------------------------


class MetadataJournal:
    """One partition's journal and the metadata its events build. ``record`` is the only way to
    change the metadata: checked, written and fsynced, then applied. Thread-safe (a lock)."""

    def __init__(
        self,
        path: pathlib.Path,
        metadata: RemotePartitionMetadata,
        *,
        size_bytes: int,
        event_count: int,
        fsync: FsyncFn | None = None,
        compact_min_events: int = DEFAULT_COMPACT_MIN_EVENTS,
    ) -> None:
        # Use MetadataJournal.open(); the constructor only sets fields.
        self.path = path
        self.metadata = metadata
        self._fsync = fsync  # None: the os's (fdatasync for the journal's appends)
        self._compact_min_events = compact_min_events
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._size_bytes = size_bytes
        self._event_count = event_count  # lines in the file
        self._failed: str | None = None
        self._closed = False

    @classmethod
    def open(
        cls,
        path: pathlib.Path,
        *,
        fsync: FsyncFn | None = None,
        compact_min_events: int = DEFAULT_COMPACT_MIN_EVENTS,
    ) -> MetadataJournal:
        """Replay the journal at ``path`` (absent: empty; created by the first ``record``),
        cutting a torn or corrupt tail. MetadataJournalError if its events contradict each other,
        StorageError if the file cannot be read or cut."""
        path = pathlib.Path(path)
        sync_data = os.fdatasync if fsync is None else fsync
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            data = b""
        except OSError as exc:
            raise StorageError(f"cannot read remote log metadata journal {path}: {exc}") from exc
        events, valid_bytes = replay_lines(data)
        metadata = RemotePartitionMetadata()
        for number, event in enumerate(events, start=1):
            try:
                metadata.apply(event)
            except IllegalRemoteSegmentTransitionError as exc:
                raise MetadataJournalError(f"{path}: event {number} contradicts the ones before it: {exc}") from exc
        if valid_bytes < len(data):
            log.warning(
                "%s: cutting %d byte(s) of a torn or corrupt tail after %d event(s)",
                path, len(data) - valid_bytes, len(events),
            )
            try:
                with open(path, "r+b") as file:
                    file.truncate(valid_bytes)
                    sync_data(file.fileno())
            except OSError as exc:
                raise StorageError(f"cannot cut the torn tail of {path}: {exc}") from exc
        return cls(
            path, metadata, size_bytes=valid_bytes, event_count=len(events), fsync=fsync,
            compact_min_events=compact_min_events,
        )

    def record(self, event: SegmentEvent) -> RemoteSegment:
        """Make ``event`` durable, then apply it; returns the segment as it is now.

        IllegalRemoteSegmentTransitionError (nothing written) if the transition table refuses it;
        MetadataJournalError if the write or fsync fails (the journal then refuses every later
        event until reopened: the caller must not act on the event). Compacts afterwards when
        deleted segments dominate."""
        with self._lock:
            self._check_usable()
            self.metadata.check(event)
            self._append(encode_event(event))
            segment = self.metadata.apply(event)
            if event.state is SegmentState.DELETE_SEGMENT_FINISHED and self._compaction_due():
                try:
                    self._compact()
                except MetadataJournalError:
                    pass  # logged; the event itself is durable, and later ones are refused
            return segment

    def compact(self) -> None:
        """Rewrite the journal with the live segments only (see the module docstring)."""
        with self._lock:
            self._check_usable()
            self._compact()

    @property
    def event_count(self) -> int:
        """Events in the file now."""
        return self._event_count

    def close(self) -> None:
        """Release the file (idempotent)."""
        with self._lock:
            self._closed = True
            self._close_fd()

    def delete(self) -> None:
        """Remove the journal (every remote object of the partition is gone), and its topic
        folder once empty; durable when it returns."""
        with self._lock:
            self._closed = True
            self._close_fd()
            folder = self.path.parent
            try:
                self.path.unlink(missing_ok=True)
                try:
                    folder.rmdir()
                except OSError:
                    fsync_directory(folder, fsync=self._fsync)  # other partitions' journals remain
                else:
                    fsync_directory(folder.parent, fsync=self._fsync)
            except FileNotFoundError:
                return
            except OSError as exc:
                raise StorageError(f"cannot delete remote log metadata journal {self.path}: {exc}") from exc

    # --- internals ------------------------------------------------------------------------------

    def _check_usable(self) -> None:
        if self._closed:
            raise MetadataJournalError(f"remote log metadata journal {self.path} is closed")
        if self._failed is not None:
            raise MetadataJournalError(f"remote log metadata journal {self.path} failed: {self._failed}")

    def _open_fd(self) -> int:
        if self._fd is not None:
            return self._fd
        folder = self.path.parent
        created = not self.path.exists()
        try:
            if created:
                folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _CLOEXEC, 0o644)
        except OSError as exc:
            raise MetadataJournalError(f"cannot open remote log metadata journal {self.path}: {exc}") from exc
        self._fd = fd
        if created:
            # The new file (and folders) must survive a crash with the events written to it.
            try:
                for directory in (folder, folder.parent, folder.parent.parent):
                    fsync_directory(directory, fsync=self._fsync)
            except OSError as exc:
                self._fail(f"fsync of the folders of {self.path} failed: {exc}")
        return fd

    def _append(self, line: bytes) -> None:
        fd = self._open_fd()
        try:
            view = memoryview(line)
            while view:
                view = view[os.write(fd, view) :]
        except OSError as exc:
            # Cut the partial line, so that a replay keeps every event before it.
            try:
                os.ftruncate(fd, self._size_bytes)
            except OSError:
                pass
            self._fail(f"write failed: {exc}")
        try:
            (os.fdatasync if self._fsync is None else self._fsync)(fd)
        except OSError as exc:
            self._fail(f"fsync failed: {exc}")
        # Events are rare (one per segment copy or deletion step) and a broker has a journal per
        # tiered partition: no descriptor stays open between them.
        self._close_fd()
        self._size_bytes += len(line)
        self._event_count += 1

    def _fail(self, reason: str) -> NoReturn:
        self._failed = reason
        self._close_fd()
        log.error("remote log metadata journal %s: %s; refusing events until reopened", self.path, reason)
        raise MetadataJournalError(f"remote log metadata journal {self.path}: {reason}")

    def _close_fd(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _compaction_due(self) -> bool:
        deleted = self.metadata.count_in(SegmentState.DELETE_SEGMENT_FINISHED)
        return deleted >= self._compact_min_events and deleted * 2 > len(self.metadata.segments())

    def _compact(self) -> None:
        live = [s for s in self.metadata.segments() if s.state is not SegmentState.DELETE_SEGMENT_FINISHED]
        lines = [encode_event(event) for event in compacted_events(live)]
        data = b"".join(lines)
        self._close_fd()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_file_atomically(self.path, data, fsync=self._fsync)
        except OSError as exc:
            self._fail(f"compaction failed: {exc}")
        dropped = self.metadata.forget_deleted()
        log.info("%s: compacted: %d live segment(s) kept, %d deleted ones dropped", self.path, len(live), dropped)
        self._size_bytes = len(data)
        self._event_count = len(lines)

