"""The log of one partition: validated appends, reads, retention, recovery (sans-io, synchronous).

Directory ``<topic>-<partition>`` holds the segments (``<base offset>.log/.index/.timeindex``),
producer snapshots (``<offset>.snapshot``), ``partition.checkpoint`` (log start offset and
recovery point, JSON, replaced atomically) and, between a clean close and the next open,
``.clean_shutdown``.

Recovery on open: without the clean-shutdown marker, every segment that may hold data written
after the recovery point (always the active one) is scanned batch by batch and truncated at the
first torn or corrupt batch, and its indexes are rebuilt; other segments have their indexes
validated (and rebuilt if missing or wrong). Producer state is loaded from the newest snapshot and
completed by replaying the batch headers after it.

Durability: appends go to the page cache (survives a process crash). ``flush()`` fsyncs; the
broker calls it before acknowledging when ``needs_flush_on_ack()`` (flush.messages=1), and the
log flushes by itself every ``flush.messages`` messages otherwise.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import struct
from bisect import bisect_right
from dataclasses import dataclass

import crc32c

from oncestream.errors import (
    InvalidRecordError,
    KafkaError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    StorageError,
)
from oncestream.log.config import INT64_MAX, LogConfig
from oncestream.log.producer_state import (
    BatchMetadata,
    ProducerStateInfo,
    ProducerStateManager,
    fsync_directory,
    replay_headers,
)
from oncestream.log.segment import (
    INDEX_SUFFIX,
    INT32_MAX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    PreparedBatch,
    Segment,
    parse_offset_file_name,
)
from oncestream.protocol.record_batch import (
    ATTR_TIMESTAMP_TYPE_LOG_APPEND,
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER_SIZE_BYTES,
    BatchHeader,
    iter_batches,
    parse_header,
    patch_base_offset,
)
from oncestream.protocol.records import decode_batch

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".clean_shutdown"
CHECKPOINT_FILE = "partition.checkpoint"
_BASE_OFFSET = struct.Struct(">q")
_INT16 = struct.Struct(">h")
_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")
_INT32 = struct.Struct(">i")
_LAST_OFFSET_DELTA_OFFSET = 23
_MAX_TIMESTAMP_OFFSET = 35


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Outcome of one append call (what a ProduceResponse partition entry needs)."""

    base_offset: int  # offset assigned to the first record (original offset for a duplicate)
    last_offset: int
    log_append_time_ms: int  # -1 unless message.timestamp.type=LogAppendTime
    log_start_offset: int
    duplicate: bool


@dataclass(frozen=True, slots=True)
class ReadResult:
    """Whole batches for a fetch plus the partition's offsets at the time of the read."""

    chunks: list[bytes]  # whole batches, concatenated on the wire in this order
    size_bytes: int  # sum of len(chunks)
    high_watermark: int
    log_start_offset: int
    last_stable_offset: int  # == high_watermark until transactions exist


def parse_partition_dir_name(name: str) -> tuple[str, int]:
    """``"my-topic-3"`` -> ``("my-topic", 3)``; ValueError if the name has no partition suffix."""
    topic, sep, partition_text = name.rpartition("-")
    if not sep or not topic or not partition_text.isdigit():
        raise ValueError(f"{name!r} is not a <topic>-<partition> directory name")
    return topic, int(partition_text)


def _write_file_atomically(path: pathlib.Path, data: bytes) -> None:
    tmp_path = path.with_name(path.name + ".tmp")
    fd = os.open(tmp_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp_path, path)
    fsync_directory(path.parent)


def _prepare_log_append_time(batch: memoryview, base_offset: int, now_ms: int) -> PreparedBatch:
    """Stamp a batch with the broker's time without copying its records.

    Sets the timestamp-type bit and maxTimestamp (as Kafka does for LogAppendTime) in a copy of the
    61-byte header and computes the new CRC over that header part followed by the untouched records.
    """
    head = bytearray(batch[:HEADER_SIZE_BYTES])
    attributes = _INT16.unpack_from(head, ATTRIBUTES_OFFSET)[0] | ATTR_TIMESTAMP_TYPE_LOG_APPEND
    _INT16.pack_into(head, ATTRIBUTES_OFFSET, attributes)
    _INT64.pack_into(head, _MAX_TIMESTAMP_OFFSET, now_ms)
    tail = batch[HEADER_SIZE_BYTES:]
    crc = crc32c.crc32c(tail, crc32c.crc32c(memoryview(head)[ATTRIBUTES_OFFSET:]))
    _UINT32.pack_into(head, CRC_OFFSET, crc)
    patch_base_offset(head, base_offset)
    last_offset_delta = _INT32.unpack_from(head, _LAST_OFFSET_DELTA_OFFSET)[0]
    return PreparedBatch(bytes(head), tail, base_offset, base_offset + last_offset_delta, now_ms)


def _first_record_at_or_after(batch: bytes, timestamp_ms: int, from_offset: int) -> tuple[int, int]:
    """(offset, timestamp) of the first record in ``batch`` reaching ``timestamp_ms`` at/after ``from_offset``."""
    header = parse_header(batch)
    try:
        for record in decode_batch(batch, verify_crc=False).records:
            if record.timestamp_ms >= timestamp_ms and record.offset >= from_offset:
                return record.offset, record.timestamp_ms
    except (KafkaError, ValueError, IndexError, struct.error) as exc:
        log.warning("cannot decode batch at offset %d for a timestamp lookup: %s", header.base_offset, exc)
    # Undecodable, or record timestamps that contradict the header: answer at batch granularity.
    return max(header.base_offset, from_offset), header.max_timestamp


class PartitionLog:
    """One partition's durable, segmented log with idempotent-producer checks."""

    def __init__(self, directory: pathlib.Path, config: LogConfig) -> None:
        # Use PartitionLog.open(); the constructor only sets fields.
        self.directory = directory
        self.topic, self.partition = parse_partition_dir_name(directory.name)
        self.config = config
        self._segments: list[Segment] = []
        self._producers = ProducerStateManager(directory)
        self.log_start_offset = 0
        self._recovery_point = 0  # segments at or after the one holding it are scanned after a crash
        self._size_bytes = 0
        self._unflushed_messages = 0
        self._directory_dirty = False
        self._closed = False

    # --- open and recovery ----------------------------------------------------------------------

    @classmethod
    def open(cls, directory: pathlib.Path, config: LogConfig, now_ms: int) -> PartitionLog:
        """Open (creating if missing) and recover the log in ``directory``."""
        directory = pathlib.Path(directory)
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create log directory {directory}: {exc}") from exc
        partition_log = cls(directory, config)
        try:
            partition_log._load(now_ms)
        except BaseException as exc:
            partition_log.abandon()  # release the segments opened so far
            if isinstance(exc, OSError):
                raise StorageError(f"cannot open log {directory}: {exc}") from exc
            raise
        return partition_log

    def _load(self, now_ms: int) -> None:
        marker = self.directory / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        checkpoint_log_start, checkpoint_recovery_point = self._read_checkpoint()
        bases = self._list_segment_files()
        for position, base_offset in enumerate(bases):
            next_base = bases[position + 1] if position + 1 < len(bases) else None
            # After a crash, anything at or beyond the recovery point may be torn or lost.
            recover = not clean and (next_base is None or next_base > checkpoint_recovery_point)
            segment, truncated_bytes = Segment.open(
                self.directory, base_offset, now_ms, recover=recover, index_interval_bytes=self.config.index_interval_bytes
            )
            if self._segments and segment.base_offset != self._segments[-1].next_offset:
                # A hole in the offsets (a lost or truncated file before this one): nothing from
                # here on can be served with contiguous offsets.
                log.error(
                    "%s: segment %d does not follow offset %d; dropping it and later segments",
                    self.directory, base_offset, self._segments[-1].next_offset,
                )
                segment.delete()
                self._delete_segment_files(bases[position + 1 :])
                break
            self._segments.append(segment)
            if truncated_bytes and next_base is not None:
                log.error("%s: dropping segments after truncated segment %d", self.directory, base_offset)
                self._delete_segment_files(bases[position + 1 :])
                break
        if not self._segments:
            self._segments.append(Segment.create(self.directory, max(checkpoint_log_start, 0), now_ms))
            self._directory_dirty = True
        self._size_bytes = sum(segment.size_bytes for segment in self._segments)
        self.log_start_offset = min(max(checkpoint_log_start, self._segments[0].base_offset), self.log_end_offset)
        self._recovery_point = self.log_end_offset if clean else min(checkpoint_recovery_point, self.log_end_offset)
        self._load_producer_state(now_ms)
        if clean:
            # Until the marker is gone for good, a crash would be mistaken for a clean shutdown.
            marker.unlink()
            fsync_directory(self.directory)
        self._assert_invariants()

    def _list_segment_files(self) -> list[int]:
        """Base offsets of the .log files; removes temp files and indexes without a log."""
        bases: set[int] = set()
        index_files: list[tuple[int, pathlib.Path]] = []
        for path in self.directory.iterdir():
            name = path.name
            if name.endswith(".tmp"):
                path.unlink(missing_ok=True)
                continue
            base = parse_offset_file_name(name, LOG_SUFFIX)
            if base is not None:
                bases.add(base)
                continue
            for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                base = parse_offset_file_name(name, suffix)
                if base is not None:
                    index_files.append((base, path))
        for base, path in index_files:
            if base not in bases:
                path.unlink(missing_ok=True)
        return sorted(bases)

    def _delete_segment_files(self, bases: list[int]) -> None:
        for base in bases:
            for path in Segment.paths(self.directory, base):
                path.unlink(missing_ok=True)
        self._directory_dirty = True

    def _read_checkpoint(self) -> tuple[int, int]:
        """(log start offset, recovery point) from the checkpoint file; (0, 0) if absent or bad."""
        try:
            data = json.loads((self.directory / CHECKPOINT_FILE).read_text())
            log_start, recovery_point = int(data["log_start_offset"]), int(data["recovery_point"])
        except FileNotFoundError:
            return 0, 0
        except (OSError, ValueError, KeyError, TypeError):
            log.warning("%s: ignoring unreadable %s", self.directory, CHECKPOINT_FILE)
            return 0, 0
        return max(log_start, 0), max(recovery_point, 0)

    def _write_checkpoint(self) -> None:
        data = json.dumps({"log_start_offset": self.log_start_offset, "recovery_point": self._recovery_point})
        try:
            _write_file_atomically(self.directory / CHECKPOINT_FILE, data.encode())
        except OSError as exc:
            raise StorageError(f"cannot write {self.directory / CHECKPOINT_FILE}: {exc}") from exc

    def _load_producer_state(self, now_ms: int) -> None:
        snapshot_offset = self._producers.load_latest_snapshot(self.log_end_offset)
        replay_from = snapshot_offset if snapshot_offset is not None else self._segments[0].base_offset
        if replay_from < self._segments[0].base_offset:
            # Retention removed batches the snapshot did not cover: the state of those producers
            # is incomplete, which KIP-360 clients recover from (UNKNOWN_PRODUCER_ID / new epoch).
            log.warning("%s: producer snapshot %d is below the oldest segment", self.directory, replay_from)
        replay_headers(self._producers, self._headers_from(replay_from), now_ms)

    def _headers_from(self, offset: int):
        """Headers of every batch whose base offset is >= ``offset``, oldest first."""
        for segment in self._segments:
            if segment.next_offset <= offset:
                continue
            for _, header in segment.batches():
                if header.base_offset >= offset:
                    yield header

    # --- properties -----------------------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        """Offset the next appended record will get."""
        return self._segments[-1].next_offset

    @property
    def high_watermark(self) -> int:
        """Single node: every appended record is committed."""
        return self.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        """No transactions yet, so nothing is unstable."""
        return self.high_watermark

    @property
    def size_bytes(self) -> int:
        """Bytes in all segments."""
        return self._size_bytes

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    def segment_base_offsets(self) -> list[int]:
        """Base offsets of the segments, oldest first (for tests and tools)."""
        return [segment.base_offset for segment in self._segments]

    def update_config(self, config: LogConfig) -> None:
        """Apply new topic settings; they take effect from the next append, read or tick."""
        self.config = config

    def needs_flush_on_ack(self) -> bool:
        """Whether acknowledgements must wait for an fsync (flush.messages=1)."""
        return self.config.flush_messages == 1

    def producer_states(self) -> list[ProducerStateInfo]:
        """Every producer the partition remembers (DescribeProducers)."""
        return self._producers.states()

    # --- append ---------------------------------------------------------------------------------

    def append(
        self, records: bytes | bytearray | memoryview, now_ms: int, *, from_client: bool = True
    ) -> AppendResult:
        """Validate, assign offsets to and write the batches in ``records``, all or none.

        Raises CorruptRecordError / UnsupportedMagicError (structure, CRC, magic), MessageTooLargeError
        (a batch above max.message.bytes), InvalidRecordError (empty or inconsistent batches, a
        duplicate mixed with new batches), the producer-state errors, or StorageError. Nothing is
        written unless every batch passes. If every batch is a retried duplicate, nothing is
        written and the original offsets are returned with ``duplicate=True``. Control batches
        (transaction markers) are only accepted from the broker itself (``from_client=False``).
        """
        self._check_open()
        config = self.config
        parsed: list[tuple[BatchHeader, memoryview]] = []
        for header, batch in iter_batches(records):
            if header.size_bytes > config.max_message_bytes:
                raise MessageTooLargeError(
                    f"batch of {header.size_bytes} bytes exceeds max.message.bytes={config.max_message_bytes}"
                )
            if from_client and header.is_control:
                raise InvalidRecordError("clients may not write control batches")
            if header.record_count == 0 or header.record_count != header.last_offset_delta + 1:
                raise InvalidRecordError(
                    f"record count {header.record_count} does not match last offset delta {header.last_offset_delta}"
                )
            parsed.append((header, batch))
        if not parsed:
            raise InvalidRecordError("produce data holds no record batch")

        log_append_time = config.log_append_time
        staged = self._producers.begin_append()
        duplicates: list[BatchMetadata] = []
        prepared: list[PreparedBatch] = []
        next_offset = self.log_end_offset
        for header, batch in parsed:
            last_offset = next_offset + header.last_offset_delta
            max_timestamp_ms = now_ms if log_append_time else header.max_timestamp
            duplicate = staged.check(header, next_offset, last_offset, max_timestamp_ms, now_ms)
            if duplicate is not None:
                duplicates.append(duplicate)
                continue
            if log_append_time:
                prepared.append(_prepare_log_append_time(batch, next_offset, now_ms))
            else:
                prepared.append(
                    PreparedBatch(_BASE_OFFSET.pack(next_offset), batch[8:], next_offset, last_offset, max_timestamp_ms)
                )
            next_offset = last_offset + 1

        if duplicates:
            if prepared:
                raise InvalidRecordError("a retried (duplicate) batch cannot be mixed with new batches")
            return AppendResult(
                base_offset=duplicates[0].first_offset,
                last_offset=duplicates[-1].last_offset,
                log_append_time_ms=duplicates[0].timestamp_ms if log_append_time else -1,
                log_start_offset=self.log_start_offset,
                duplicate=True,
            )

        incoming_bytes = sum(batch.size_bytes for batch in prepared)
        if self._should_roll(incoming_bytes, len(prepared), prepared[-1].last_offset, now_ms):
            self._roll(now_ms)
        active = self._segments[-1]
        active.append(prepared, config.index_interval_bytes, now_ms)
        staged.commit()
        self._size_bytes += incoming_bytes
        self._unflushed_messages += sum(header.record_count for header, _ in parsed)
        if config.flush_messages not in (1, INT64_MAX) and self._unflushed_messages >= config.flush_messages:
            # flush.messages=N: fsync every N messages. N=1 is left to the broker (needs_flush_on_ack)
            # so that many acknowledgements can share one fsync.
            self.flush()
        return AppendResult(
            base_offset=prepared[0].base_offset,
            last_offset=prepared[-1].last_offset,
            log_append_time_ms=now_ms if log_append_time else -1,
            log_start_offset=self.log_start_offset,
            duplicate=False,
        )

    def _should_roll(self, incoming_bytes: int, batch_count: int, last_offset: int, now_ms: int) -> bool:
        active = self._segments[-1]
        if active.size_bytes == 0:
            return False  # an append larger than segment.bytes gets a segment of its own
        if active.size_bytes > self.config.segment_bytes - incoming_bytes:
            return True
        if active.rolling_base_ms is not None and now_ms - active.rolling_base_ms > self.config.segment_ms:
            return True
        if active.offset_index.is_full(batch_count) or active.time_index.is_full(batch_count):
            return True
        # Index entries store relative offsets and positions as int32.
        return last_offset - active.base_offset > INT32_MAX or active.size_bytes + incoming_bytes > INT32_MAX

    def _roll(self, now_ms: int) -> None:
        """Seal the active segment, snapshot producer state at the log end, start a new segment."""
        active = self._segments[-1]
        active.seal()
        new_base = self.log_end_offset
        self._producers.write_snapshot(new_base)
        self._segments.append(Segment.create(self.directory, new_base, now_ms))
        self._directory_dirty = True
        log.debug("%s: rolled to segment %d", self.directory, new_base)

    # --- read -----------------------------------------------------------------------------------

    def _segment_index_for(self, offset: int) -> int:
        return bisect_right(self._segments, offset, key=lambda segment: segment.base_offset) - 1

    def read(
        self, fetch_offset: int, max_bytes: int, *, upper_offset: int | None = None, min_one: bool = True
    ) -> ReadResult:
        """Whole batches from the one containing ``fetch_offset`` (Kafka fetch semantics).

        Stops before exceeding ``max_bytes`` but returns at least one batch when ``min_one``
        (KIP-74); never returns a batch whose base offset is >= ``upper_offset`` (default: the high
        watermark). OffsetOutOfRangeError outside [log start, log end].
        """
        self._check_open()
        if fetch_offset < self.log_start_offset or fetch_offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {fetch_offset} is outside [{self.log_start_offset}, {self.log_end_offset}]"
            )
        upper = self.high_watermark if upper_offset is None else min(upper_offset, self.high_watermark)
        chunks: list[bytes] = []
        total_bytes = 0
        offset = fetch_offset
        if offset < upper:
            for segment in self._segments[self._segment_index_for(offset) :]:
                if segment.base_offset >= upper:
                    break
                if segment.size_bytes == 0:
                    continue
                extent = segment.extent(
                    max(offset, segment.base_offset),
                    max_bytes - total_bytes,
                    upper,
                    allow_oversize_first=min_one and total_bytes == 0,
                )
                if extent.end_position > extent.start_position:
                    chunks.append(segment.read(extent.start_position, extent.end_position))
                    total_bytes += extent.end_position - extent.start_position
                if not extent.segment_exhausted:
                    break
                offset = segment.next_offset
        return ReadResult(
            chunks=chunks,
            size_bytes=total_bytes,
            high_watermark=self.high_watermark,
            log_start_offset=self.log_start_offset,
            last_stable_offset=self.last_stable_offset,
        )

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the earliest record with timestamp >= ``timestamp_ms`` (ListOffsets).

        As in Kafka: the time index finds the first batch whose max timestamp reaches the target,
        then that one batch is decoded to find the first record that does (for LogAppendTime
        batches every record carries the batch's max timestamp). If the batch cannot be decoded
        its base offset and max timestamp are returned. None if no record is that recent.
        """
        self._check_open()
        start = self.log_start_offset
        if start >= self.log_end_offset:
            return None
        for segment in self._segments[self._segment_index_for(start) :]:
            found = segment.find_by_timestamp(timestamp_ms, start)
            if found is not None:
                position, size_bytes = found
                return _first_record_at_or_after(segment.read(position, position + size_bytes), timestamp_ms, start)
        return None

    # --- deletion -------------------------------------------------------------------------------

    def delete_records(self, before_offset: int) -> int:
        """DeleteRecords: move the log start to ``before_offset`` (-1 = high watermark).

        Whole segments below the new log start are deleted; producer state is kept (KIP-360).
        Returns the new log start offset. OffsetOutOfRangeError beyond the high watermark.
        """
        self._check_open()
        if before_offset == -1:
            before_offset = self.high_watermark
        if before_offset < 0 or before_offset > self.high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot delete records before {before_offset}: high watermark is {self.high_watermark}"
            )
        if before_offset > self.log_start_offset:
            self.log_start_offset = before_offset
            self._write_checkpoint()
            self._delete_oldest_segments(lambda segment, next_segment: next_segment.base_offset <= self.log_start_offset)
        return self.log_start_offset

    def apply_retention(self, now_ms: int) -> int:
        """Delete old segments by retention.ms (segment max timestamp) and retention.bytes.

        Only for cleanup.policy containing ``delete``; the active segment is never deleted. Returns
        the number of segments deleted.
        """
        self._check_open()
        config = self.config
        deleted = 0
        if config.deletes_by_retention and config.retention_ms >= 0:
            deleted += self._delete_oldest_segments(
                lambda segment, _: now_ms - segment.retention_timestamp_ms > config.retention_ms
            )
        if config.deletes_by_retention and config.retention_bytes >= 0:
            excess_bytes = self._size_bytes - config.retention_bytes

            def over_size(segment: Segment, _: Segment) -> bool:
                nonlocal excess_bytes
                if excess_bytes - segment.size_bytes < 0:
                    return False
                excess_bytes -= segment.size_bytes
                return True

            deleted += self._delete_oldest_segments(over_size)
        # DeleteRecords may have moved the log start beyond whole segments since the last check.
        deleted += self._delete_oldest_segments(lambda _, next_segment: next_segment.base_offset <= self.log_start_offset)
        return deleted

    def _delete_oldest_segments(self, predicate) -> int:
        """Delete segments from the oldest while ``predicate(segment, next_segment)`` holds."""
        deleted = 0
        while len(self._segments) > 1 and predicate(self._segments[0], self._segments[1]):
            segment = self._segments.pop(0)
            self._size_bytes -= segment.size_bytes
            try:
                segment.delete()
            except OSError as exc:
                raise StorageError(f"cannot delete segment {segment.log_path}: {exc}") from exc
            self._directory_dirty = True
            deleted += 1
        if deleted:
            self.log_start_offset = max(self.log_start_offset, self._segments[0].base_offset)
            self._recovery_point = max(self._recovery_point, self._segments[0].base_offset)
            log.info("%s: deleted %d segment(s); log start %d", self.directory, deleted, self.log_start_offset)
        self._assert_invariants()
        return deleted

    def expire_producers(self, now_ms: int) -> int:
        """Forget producers idle for producer.id.expiration.ms; returns how many."""
        self._check_open()
        return self._producers.expire(now_ms, self.config.producer_id_expiration_ms)

    # --- durability and lifecycle ---------------------------------------------------------------

    def flush(self) -> None:
        """fsync what was written: log data, sealed segments' indexes, the directory.

        The active segment's indexes are not fsynced: after a crash the active segment is always
        scanned and its indexes rebuilt, so only its data must be durable. A no-op once closed:
        close() flushed everything (or the log was deleted), so a late group-commit flush for a
        request that raced with shutdown has nothing left to do.
        """
        if self._closed:
            return
        active = self._segments[-1]
        for segment in self._segments:
            if segment.needs_flush:
                segment.flush(include_indexes=segment is not active)
        if self._directory_dirty:
            try:
                fsync_directory(self.directory)
            except OSError as exc:
                raise StorageError(f"fsync of {self.directory} failed: {exc}") from exc
            self._directory_dirty = False
        self._unflushed_messages = 0
        if active.base_offset > self._recovery_point:
            # Every sealed segment is durable now: a crash only needs the active one scanned.
            self._recovery_point = active.base_offset
            self._write_checkpoint()

    def flush_sealed_segments(self) -> None:
        """fsync segments that were rolled since the last flush (housekeeping, bounds recovery)."""
        self._check_open()
        if self._segments[-1].base_offset > self._recovery_point:
            self.flush()

    def close(self) -> None:
        """Flush everything, snapshot producer state, release files and mark the shutdown clean."""
        if self._closed:
            return
        for segment in self._segments:
            segment.seal()
            segment.flush(include_indexes=True)
        self.flush()
        self._producers.write_snapshot(self.log_end_offset)
        self._recovery_point = self.log_end_offset
        self._write_checkpoint()
        for segment in self._segments:
            segment.close()
        (self.directory / CLEAN_SHUTDOWN_FILE).touch()
        fsync_directory(self.directory)
        self._closed = True

    def abandon(self) -> None:
        """Release file descriptors without flushing or marking clean (the log is being deleted)."""
        if self._closed:
            return
        self._closed = True
        for segment in self._segments:
            segment.release()

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError(f"log {self.directory} is closed")

    def _assert_invariants(self) -> None:
        segments = self._segments
        assert segments, "a log always has an active segment"
        for previous, current in zip(segments, segments[1:]):
            assert previous.next_offset == current.base_offset, "offsets must be contiguous across segments"
        assert segments[0].base_offset <= self.log_start_offset <= self.log_end_offset
        assert self._size_bytes == sum(segment.size_bytes for segment in segments)
