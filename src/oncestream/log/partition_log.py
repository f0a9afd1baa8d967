"""The log of one partition: validated appends, reads, retention, recovery (sans-io, synchronous).

Directory ``<topic>-<partition>`` holds the segments (``<base offset>.log/.index/.timeindex``),
producer snapshots (``<offset>.snapshot``), ``partition.checkpoint`` (log start offset,
recovery point and the log cleaner's cleaned offset and tombstone horizon, JSON, replaced
atomically), between a clean close and the next open ``.clean_shutdown``, and while the log
cleaner swaps segments in, ``cleaner.swap`` plus ``*.cleaned`` files (see ``compaction``).

Recovery on open: first an interrupted compaction swap is finished (or an uncommitted one rolled
back, see ``compaction``). Then, without the clean-shutdown marker, every segment that may hold
data written after the recovery point (always the active one) is scanned batch by batch and
truncated at the first torn or corrupt batch, and its indexes are rebuilt; other segments have
their indexes validated (and rebuilt if missing or wrong). Producer state is loaded from the newest
snapshot and completed by replaying the batches after it (markers decoded); that replay also rebuilds the
aborted-transaction index (``<base offset>.txnindex``) of scanned segments and of segments whose
index is missing or damaged (see ``transactions`` and ``txn_index``).

Transactions (KIP-98): transactional batches open a producer's transaction, ``append_marker``
writes the COMMIT/ABORT control batch that closes it, ``last_stable_offset`` is the first offset
of the earliest open transaction, and ``read(with_aborted=True)`` lists the aborted transactions a
fetched range overlaps.

Compacted logs (cleanup.policy contains ``compact``): appends refuse records without a key, and
offsets below the cleaned offset may have gaps where the cleaner removed whole batches; reads
skip them (a fetch inside a gap gets the next batch).

Durability: appends go to the page cache (survives a process crash). ``flush()`` fsyncs; the
broker calls it before acknowledging when ``needs_flush_on_ack()`` (flush.messages=1), and the
log flushes by itself every ``flush.messages`` messages otherwise.

Made of collaborators, each about one thing: the segments and their aborted-transaction indexes
(``segment_list``), producer state (``producer_state``), the cleaner's state and steps
(``log_cleaning``), the deletion of old segments (``log_deletion``: retention, DeleteRecords,
tiered storage's local retention), and what they share (``log_state``: open/closed/offline, the
checkpointed positions). Kept apart too: the read path over the segments (``read_path``: fetch
ranges, timestamp lookups), the LogAppendTime header rewrite (``log_append_time``) and tiered
storage's local rules (``local_tiering``: segments to copy, local retention; offsets below the
local log start are served by the remote reader, ``read`` raises OffsetMovedToTieredStorageError).
"""

from __future__ import annotations

import logging
import os
import pathlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from oncestream.durable_files import fsync_directory
from oncestream.errors import (
    InvalidRecordError,
    MessageTooLargeError,
    OffsetMovedToTieredStorageError,
    OffsetOutOfRangeError,
    StorageError,
)
from oncestream.log import compaction
from oncestream.log.batch_validation import validate_batches
from oncestream.log.config import INT64_MAX, LogConfig
from oncestream.log.descriptors import SegmentDescriptors
from oncestream.log.file_removal import FileRemoval
from oncestream.log.flush_job import FdatasyncFn, FlushJob
from oncestream.log.local_tiering import TierableSegment, tierable_segments
from oncestream.log.log_append_time import prepare_log_append_time
from oncestream.log.log_cleaning import LogCleaning, SwapCommit, SwapTail
from oncestream.log.log_deletion import LogDeletion
from oncestream.log.log_start import LocalStartMove, LogStartMove
from oncestream.log.log_state import LogPositions, LogStatus
from oncestream.log.producer_state import (
    BatchMetadata,
    PendingSnapshot,
    ProducerStateInfo,
    ProducerStateManager,
)
from oncestream.log.read_path import (
    ReadResult,
    max_timestamp_ms,
    offset_for_timestamp,
    read_batches,
)
from oncestream.log.recompression import needs_recompression
from oncestream.log.recovery import CLEAN_SHUTDOWN_FILE, recover_log
from oncestream.log.segment import INT32_MAX, PreparedBatch
from oncestream.log.segment_list import SegmentList
from oncestream.log.transactions import read_control_marker
from oncestream.protocol.compression import recompress_batch
from oncestream.protocol.markers import CONTROL_ABORT, CONTROL_COMMIT
from oncestream.protocol.record_batch import BatchHeader
from oncestream.protocol.records import (
    encode_control_batch,
)

log = logging.getLogger(__name__)

_BASE_OFFSET = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Outcome of one append call (what a ProduceResponse partition entry needs)."""

    base_offset: int  # offset assigned to the first record (original offset for a duplicate)
    last_offset: int
    log_append_time_ms: int  # -1 unless message.timestamp.type=LogAppendTime
    log_start_offset: int
    duplicate: bool


def parse_partition_dir_name(name: str) -> tuple[str, int]:
    """``"my-topic-3"`` -> ``("my-topic", 3)``; ValueError if the name has no partition suffix."""
    topic, sep, partition_text = name.rpartition("-")
    if not sep or not topic or not partition_text.isdigit():
        raise ValueError(f"{name!r} is not a <topic>-<partition> directory name")
    return topic, int(partition_text)


class PartitionLog:
    """One partition's durable, segmented log with idempotent-producer checks."""

    def __init__(
        self, directory: pathlib.Path, config: LogConfig, descriptors: SegmentDescriptors | None = None
    ) -> None:
        # Use PartitionLog.open(); the constructor only sets fields.
        self.directory = directory
        self.topic, self.partition = parse_partition_dir_name(directory.name)
        self.config = config
        self._status = LogStatus(directory)
        self._positions = LogPositions(directory)
        # Sealed segments close their files through ``descriptors`` (shared by a broker's logs).
        self._segments = SegmentList(directory, descriptors if descriptors is not None else SegmentDescriptors())
        self._producers = ProducerStateManager(directory)
        self._cleaning = LogCleaning(directory, self._segments, self._producers, self._positions, self._status)
        self._deletion = LogDeletion(directory, self._segments, self._producers, self._positions, self._cleaning)
        self._unflushed_messages = 0
        self._flush_jobs: list[FlushJob] = []  # begun, not yet finished or failed
        # Taken at rolls, written by the next flush: the newest only, or every one on a tiered
        # topic (each is copied with the segment it follows).
        self._pending_snapshots: list[PendingSnapshot] = []

    # --- open and recovery ----------------------------------------------------------------------

    @classmethod
    def open(
        cls, directory: pathlib.Path, config: LogConfig, now_ms: int, *, descriptors: SegmentDescriptors | None = None
    ) -> PartitionLog:
        """Open (creating if missing) and recover the log in ``directory``. ``descriptors``
        bounds the open files of sealed segments (pass the broker's one; default: the log's own)."""
        directory = pathlib.Path(directory)
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create log directory {directory}: {exc}") from exc
        partition_log = cls(directory, config, descriptors)
        try:
            partition_log._load(now_ms)
        except BaseException as exc:
            partition_log.abandon()  # release the segments opened so far
            if isinstance(exc, OSError):
                raise StorageError(f"cannot open log {directory}: {exc}") from exc
            raise
        return partition_log

    def _load(self, now_ms: int) -> None:
        recovered = recover_log(
            self.directory,
            index_interval_bytes=self.config.index_interval_bytes,
            producers=self._producers,
            txn_indexes=self._segments.txn_indexes,
            descriptors=self._segments.descriptors,
            now_ms=now_ms,
        )
        self._segments.replace(recovered.segments)
        self._segments.directory_dirty = recovered.directory_dirty
        positions = self._positions
        positions.log_start_offset = recovered.log_start_offset
        positions.local_log_start_offset = recovered.local_log_start_offset
        positions.recovery_point = recovered.recovery_point
        positions.cleaned_offset = recovered.cleaned_offset
        positions.tombstone_horizon_ms = recovered.tombstone_horizon_ms
        self._check_invariants()

    # --- properties -----------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        """The first offset served (retention and DeleteRecords move it)."""
        return self._positions.log_start_offset

    @property
    def local_log_start_offset(self) -> int:
        """The first offset on local disk: the log start, unless tiered storage holds the
        offsets below it (copied segments deleted locally by local retention)."""
        return self._positions.local_log_start_offset

    @property
    def log_end_offset(self) -> int:
        """Offset the next appended record will get."""
        return self._segments.log_end_offset

    @property
    def high_watermark(self) -> int:
        """Single node: every appended record is committed."""
        return self.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        """First offset of the earliest open transaction, else the high watermark (KIP-98).

        A transaction that opened below the log start (retention or DeleteRecords moved it) keeps
        holding the LSO at the log start until it completes, as in Kafka.
        """
        first_unstable = self._producers.first_unstable_offset()
        if first_unstable is None:
            return self.high_watermark
        return min(max(first_unstable, self.log_start_offset), self.high_watermark)

    @property
    def size_bytes(self) -> int:
        """Bytes in all segments."""
        return self._segments.size_bytes

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    def segment_base_offsets(self) -> list[int]:
        """Base offsets of the segments, oldest first (for tests and tools)."""
        return self._segments.base_offsets()

    def move_descriptors_to(self, descriptors: SegmentDescriptors) -> None:
        """Put this log's open files under ``descriptors`` (a log opened on another thread with a
        cache of its own joins the broker's on the owner's thread)."""
        self._segments.move_descriptors_to(descriptors)

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
        self, records: bytes | bytearray | memoryview, now_ms: int, *, from_client: bool = True,
        split: Sequence[tuple[BatchHeader, memoryview]] | None = None,
    ) -> AppendResult:
        """Validate, assign offsets to and write the batches in ``records``, all or none.

        Raises CorruptRecordError / UnsupportedMagicError (structure, CRC, magic), MessageTooLargeError
        (a batch above max.message.bytes), InvalidRecordError (empty or inconsistent batches, a
        duplicate mixed with new batches), the producer-state errors, or StorageError. Nothing is
        written unless every batch passes. If every batch is a retried duplicate, nothing is
        written and the original offsets are returned with ``duplicate=True``. Control batches
        (transaction markers) are only accepted from the broker itself (``from_client=False``).
        A compacted topic refuses records without a key (InvalidRecordError), which needs the
        records decoded: only those topics pay for it. With compression.type set to a codec (or
        ``uncompressed``) a batch written with another codec is recompressed here, on the caller's
        thread (``compression.recompress_batch``; the broker does it ahead, off its event loop, see
        ``recompression``); max.message.bytes applies before and after.
        """
        self._check_open()
        config = self.config
        parsed = validate_batches(records, config, from_client=from_client, split=split)

        log_append_time = config.log_append_time
        target = config.target_compression
        staged = self._producers.begin_append()
        duplicates: list[BatchMetadata] = []
        prepared: list[PreparedBatch] = []
        next_offset = self.log_end_offset
        for header, batch in parsed:
            last_offset = next_offset + header.last_offset_delta
            max_timestamp_ms = now_ms if log_append_time else header.max_timestamp
            marker = None
            if header.is_control:
                # Only the broker writes these (checked above); the producer state needs to know
                # COMMIT from ABORT and the coordinator epoch.
                marker = read_control_marker(batch)
                if marker is None:
                    raise InvalidRecordError("a transaction marker batch holds no record")
            duplicate = staged.check(header, next_offset, last_offset, max_timestamp_ms, now_ms, marker)
            if duplicate is not None:
                duplicates.append(duplicate)
                continue
            if target is not None and needs_recompression(config, header):
                # compression.type names a codec the producer did not use: the batch is rewritten
                # (Kafka's LogValidator); its header facts stay, so idempotence, transactions and
                # offsets are unaffected. Markers stay uncompressed, as in Kafka.
                batch = memoryview(recompress_batch(batch, target[0], target[1]))
                if len(batch) > config.max_message_bytes:
                    raise MessageTooLargeError(
                        f"batch of {len(batch)} bytes after recompression to {config.compression_type} "
                        f"exceeds max.message.bytes={config.max_message_bytes}"
                    )
            if log_append_time:
                prepared.append(prepare_log_append_time(batch, next_offset, now_ms))
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
        completed_txns = staged.commit()
        aborted = [txn.aborted_entry() for txn in completed_txns if txn.aborted]
        self._segments.append(prepared, config.index_interval_bytes, now_ms, aborted)
        self._unflushed_messages += sum(header.record_count for header, _ in parsed)
        # flush.messages=N and rolls make a flush due (wants_flush); whoever owns the log runs it,
        # the broker off its event loop. N=1 is the acknowledgement's own group commit.
        return AppendResult(
            base_offset=prepared[0].base_offset,
            last_offset=prepared[-1].last_offset,
            log_append_time_ms=now_ms if log_append_time else -1,
            log_start_offset=self.log_start_offset,
            duplicate=False,
        )

    def append_marker(
        self, *, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, now_ms: int
    ) -> int:
        """Write a COMMIT or ABORT marker for the producer's transaction; returns its offset.

        The marker goes through ``append`` like any batch (offsets, segments, indexes, recovery).
        InvalidProducerEpochError if ``producer_epoch`` is older than the producer's current epoch
        (a delayed marker must not end a newer transaction); a newer epoch becomes the producer's
        (KIP-890). A marker for a producer with no open transaction here is still written (the
        coordinator retries markers after a crash) and changes nothing else; an ABORT that closes
        a transaction is recorded in the aborted-transaction index.
        """
        batch = encode_control_batch(
            marker=CONTROL_COMMIT if commit else CONTROL_ABORT,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch,
            now_ms=now_ms,
        )
        return self.append(batch, now_ms, from_client=False).base_offset

    def _should_roll(self, incoming_bytes: int, batch_count: int, last_offset: int, now_ms: int) -> bool:
        active = self._segments.active
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
        # No fsync here (the event loop may be the caller): the next flush job fsyncs the sealed
        # segment and its txn index, and only then writes this snapshot, because recovery trusts
        # txn index entries below a snapshot's offset. Until then a crash rescans the segment.
        keep_all = self.config.remote_storage_enable
        snapshot = self._producers.take_snapshot(self.log_end_offset, keep_all=keep_all)
        self._pending_snapshots = [*self._pending_snapshots, snapshot] if keep_all else [snapshot]
        self._segments.roll(now_ms)

    # --- read -----------------------------------------------------------------------------------

    def read(
        self,
        fetch_offset: int,
        max_bytes: int,
        *,
        upper_offset: int | None = None,
        min_one: bool = True,
        with_aborted: bool = False,
        zero_copy: bool = False,
    ) -> ReadResult:
        """Whole batches from the one containing ``fetch_offset`` (Kafka fetch semantics).

        With ``zero_copy`` the chunks are FileRanges (log/file_range.py) for the Fetch response
        writer to sendfile, not bytes.

        Stops before exceeding ``max_bytes`` but returns at least one batch when ``min_one``
        (KIP-74); never returns a batch whose base offset is >= ``upper_offset`` (default: the high
        watermark). OffsetOutOfRangeError outside [log start, log end];
        OffsetMovedToTieredStorageError in [log start, local log start) (remote storage serves
        those offsets). With ``with_aborted``
        (read_committed) the result lists every aborted transaction whose [first offset, marker]
        overlaps [``fetch_offset``, last returned offset]; the caller caps ``upper_offset`` at the
        LSO itself.
        """
        self._check_open()
        if fetch_offset < self.log_start_offset or fetch_offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {fetch_offset} is outside [{self.log_start_offset}, {self.log_end_offset}]"
            )
        if fetch_offset < self.local_log_start_offset:
            raise OffsetMovedToTieredStorageError(fetch_offset, self.local_log_start_offset)
        upper = self.high_watermark if upper_offset is None else min(upper_offset, self.high_watermark)
        chunks, total_bytes, returned_end_offset = read_batches(
            self._segments.segments, fetch_offset, max_bytes, upper, min_one=min_one, zero_copy=zero_copy
        )
        aborted_transactions = None
        if with_aborted:
            aborted_transactions = []
            if returned_end_offset > fetch_offset:
                # An abort is indexed with its marker, which may lie in any later segment.
                from_base = self._segments[self._segments.index_for(fetch_offset)].base_offset
                aborted_transactions = self.aborted_transactions(from_base, fetch_offset, returned_end_offset)
        return ReadResult(
            chunks=[] if zero_copy else chunks,
            file_chunks=chunks if zero_copy else None,
            size_bytes=total_bytes,
            high_watermark=self.high_watermark,
            log_start_offset=self.log_start_offset,
            last_stable_offset=self.last_stable_offset,
            aborted_transactions=aborted_transactions,
        )

    def aborted_transactions(self, from_base_offset: int, fetch_offset: int, upper_offset: int) -> list[tuple[int, int]]:
        """(producer_id, first_offset) of the aborts overlapping [``fetch_offset``, ``upper_offset``)
        indexed in the local segments from the one based at ``from_base_offset`` on (an abort is
        indexed with its marker: a read and a remote read finishing its search locally ask this)."""
        return self._segments.txn_indexes.collect(from_base_offset, fetch_offset, upper_offset)

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the earliest record with timestamp >= ``timestamp_ms`` (ListOffsets).

        As in Kafka: the time index finds the first batch whose max timestamp reaches the target,
        then that one batch is decoded to find the first record that does (for LogAppendTime
        batches every record carries the batch's max timestamp). If the batch cannot be decoded
        its base offset and max timestamp are returned. None if no record is that recent. Local
        segments only: below the local log start the remote reader answers.
        """
        self._check_open()
        start = self.local_log_start_offset
        if start >= self.log_end_offset:
            return None
        return offset_for_timestamp(self._segments.segments, start, timestamp_ms)

    def offset_for_max_timestamp(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record carrying the log's largest timestamp (KIP-734,
        ListOffsets MAX_TIMESTAMP); None for an empty log. Local segments only."""
        self._check_open()
        start = self.local_log_start_offset
        if start >= self.log_end_offset:
            return None
        max_ts = max_timestamp_ms(self._segments.segments, start)
        if max_ts < 0:
            return None
        return self.offset_for_timestamp(max_ts)

    # --- deletion -------------------------------------------------------------------------------

    def delete_records(self, before_offset: int) -> int:
        """DeleteRecords: move the log start to ``before_offset`` (-1 = high watermark).

        Whole segments below the new log start are deleted; producer state is kept (KIP-360).
        Returns the new log start offset. OffsetOutOfRangeError beyond the high watermark. The
        broker runs the same three steps with the checkpoint write off its loop (``log_start``).
        """
        move = self.begin_delete_records(before_offset)
        if move is not None:
            move.run()
            self.finish_delete_records(move)
            self._remove_deleted_files()
        return self.log_start_offset

    def begin_delete_records(self, before_offset: int) -> LogStartMove | None:
        """DeleteRecords' first step: validate and move the log start in memory (reads below it
        are refused from now on). None if it does not move; else ``run`` the returned move (any
        thread), then ``finish_delete_records`` it."""
        self._check_open()
        if before_offset == -1:
            before_offset = self.high_watermark
        return self._deletion.move_log_start(before_offset, self.high_watermark)

    def advance_log_start(self, offset: int) -> LogStartMove | None:
        """Remote retention moved a tiered log's start to ``offset`` (the base of the oldest
        remote segment kept, or the local log start once none is). The same three steps as
        DeleteRecords: None if it does not move; else ``run`` the move (any thread), then
        ``finish_delete_records`` it, which deletes local segments wholly below the new start.
        OffsetOutOfRangeError beyond the high watermark."""
        self._check_open()
        return self._deletion.move_log_start(offset, self.high_watermark)

    def finish_delete_records(self, move: LogStartMove) -> int:
        """DeleteRecords' last step, once ``move`` ran: delete the segments wholly below the log
        start it made durable (not below a later one that may not be durable yet); their files
        are left to ``take_file_removal``. Returns the log start offset."""
        self._check_open()
        self._deletion.finish_move(move)
        return self.log_start_offset

    def apply_retention(self, now_ms: int, *, defer_removal: bool = False) -> int:
        """Delete old segments by retention.ms (segment max timestamp) and retention.bytes.

        Only for cleanup.policy containing ``delete``; the active segment is never deleted. Returns
        the number of segments deleted. Their files are removed before returning, or with
        ``defer_removal`` left to ``take_file_removal`` (the broker removes them off its loop).
        On a tiered topic (remote.storage.enable) neither applies here: the RemoteLogManager owns
        both retentions (``delete_tiered_local_segments``, ``advance_log_start``); only segments
        wholly below the log start (DeleteRecords) go.
        """
        self._check_open()
        deleted = self._deletion.apply_retention(self.config, now_ms)
        if not defer_removal:
            self._remove_deleted_files()
        return deleted

    # --- tiered storage (KIP-405; the remote package copies, this log keeps what it needs) -------

    def closed_segments_to_tier(self, after_offset: int) -> list[TierableSegment]:
        """The sealed segments with base offset >= ``after_offset`` ready to be copied to remote
        storage, oldest first: wholly below the LSO and the high watermark, and flushed (files
        and the producer snapshot at the next base offset durable). See ``local_tiering``."""
        self._check_open()
        return tierable_segments(
            self._segments.segments,
            self._segments.txn_indexes,
            self._producers.snapshot_path,
            after_offset=after_offset,
            log_start_offset=self.log_start_offset,
            last_stable_offset=self.last_stable_offset,
            high_watermark=self.high_watermark,
            recovery_point=self._positions.recovery_point,
        )

    def delete_tiered_local_segments(self, copied_last_offset: int, now_ms: int) -> int:
        """Local retention (local.retention.ms / .bytes, -2 = retention.*) over the segments
        wholly at or below ``copied_last_offset`` (copied) and below the LSO; returns how many
        went. The three steps below in a row, the checkpoint written on this thread."""
        move = self.begin_delete_tiered_local_segments(copied_last_offset, now_ms)
        if move is None:
            return 0
        move.run()
        return self.finish_delete_tiered_local_segments(move)

    def begin_delete_tiered_local_segments(self, copied_last_offset: int, now_ms: int) -> LocalStartMove | None:
        """Local retention's first step (as ``begin_delete_records``): move the local log start
        in memory past the segments that go (reads below it raise
        OffsetMovedToTieredStorageError); None if none goes. ``run`` the move on any thread
        (the checkpoint), then ``finish_delete_tiered_local_segments`` it here; a failed run
        deletes nothing. Only the local start moves: the offsets stay readable remotely, and
        producer state is kept (KIP-360)."""
        self._check_open()
        return self._deletion.begin_tiered_local(self.config, copied_last_offset, self.last_stable_offset, now_ms)

    def finish_delete_tiered_local_segments(self, move: LocalStartMove) -> int:
        """Local retention's last step, once ``move`` ran: delete the local segments wholly below
        the local log start it made durable, and the producer snapshots taken below it (files
        to ``take_file_removal``); returns how many segments went."""
        self._check_open()
        return self._deletion.finish_tiered_local(move)

    def take_file_removal(self) -> FileRemoval | None:
        """The files of segments deleted since the last call (retention, DeleteRecords), for
        the owner to remove on any thread (the broker: its disk threads); None if there are none."""
        return self._segments.take_file_removal()

    def _remove_deleted_files(self) -> None:
        """The synchronous API's removal: the deleted segments' files go now, on this thread."""
        removal = self.take_file_removal()
        if removal is not None:
            removal.run()

    def expire_producers(self, now_ms: int) -> int:
        """Forget producers idle for producer.id.expiration.ms; returns how many."""
        self._check_open()
        return self._producers.expire(now_ms, self.config.producer_id_expiration_ms)

    # --- compaction (see ``compaction`` for the rules and the swap protocol) --------------------

    @property
    def closed(self) -> bool:
        """Whether the log was closed or abandoned (deleted topic, broker shutdown)."""
        return self._status.closed

    @property
    def cleaned_offset(self) -> int:
        """Offsets below this have been compacted (0 if the log never was)."""
        return self._positions.cleaned_offset

    def compaction_candidate(self, now_ms: int) -> compaction.CompactionCandidate | None:
        """How dirty this log is, or None if it is not to be cleaned now.

        None unless cleanup.policy contains ``compact`` and either the dirty ratio reaches
        min.cleanable.dirty.ratio or a kept tombstone's delete horizon has passed; also None while
        a plan of this log is being built.
        """
        return self._cleaning.candidate(self.config, self.last_stable_offset, now_ms)

    def compaction_plan(
        self, now_ms: int, *, max_map_bytes: int = compaction.DEFAULT_MAX_MAP_BYTES
    ) -> compaction.CompactionPlan | None:
        """Snapshot what a clean would rewrite (None if ``compaction_candidate`` says no).

        The plan names the sealed segments below the first uncleanable offset by path and file
        identity and holds no descriptor, so a log of thousands of segments stays under the
        broker's open-files bound; ``compaction.build_cleaned`` (any thread) opens them one at a
        time. Hand the result to ``install_cleaned``, or give the plan back with
        ``cancel_compaction``. One plan at a time.
        """
        return self._cleaning.plan(self.config, self.last_stable_offset, now_ms, max_map_bytes)

    def cancel_compaction(self, plan: compaction.CompactionPlan) -> None:
        """Give back a plan that will not be installed (the build failed, was cancelled or went
        stale, or installing it failed before taking it). Idempotent; a plan already taken or
        replaced by another one is left alone."""
        self._cleaning.cancel(plan)

    def install_cleaned(self, result: compaction.CleanedResult, now_ms: int) -> bool:
        """Swap the cleaned segments in (crash-safely), or discard them if the plan went stale.

        Returns False if discarded (the ``.cleaned`` files are then removed). StorageError if the
        disk fails: before the commit point nothing changed; after it the log goes offline until
        the next open, which finishes the swap. All on the calling thread; the broker splits it
        (``begin_install_cleaned``) to run the manifest write and the tail's fsyncs off its loop.
        """
        return self._cleaning.install(self.config, result, now_ms)

    def begin_install_cleaned(self, result: compaction.CleanedResult, now_ms: int) -> SwapCommit | None:
        """Step 1 of the install, on the log's thread: None if the plan no longer holds (the
        result is discarded, as ``install_cleaned``); else the returned commit (the manifest
        write) is to ``run`` on any thread, then ``apply_install_cleaned`` (or
        ``fail_commit_cleaned``) here. Until then the log serves its old segments and keeps the
        planned ones from retention and DeleteRecords, so the manifest, once durable, still
        describes the log; no new plan is taken until ``finish_install_cleaned``."""
        return self._cleaning.begin_install(self.config, result)

    def fail_commit_cleaned(self, commit: SwapCommit, exc: BaseException) -> None:
        """``commit.run()`` failed. Before its rename nothing was committed (it removed its
        files) and the log carries on; after it the swap may be committed, so the log goes
        offline until the next open finishes it."""
        self._cleaning.fail_commit(commit, exc)

    def apply_install_cleaned(self, commit: SwapCommit, now_ms: int) -> SwapTail | None:
        """Step 2, on the log's thread once ``commit.run()`` returned: the cleaned segments are
        renamed in and serve reads from now on; the returned tail (removal of the merged-away
        segments, directory fsync, checkpoint, manifest removal) is to ``run`` on any thread,
        then ``finish_install_cleaned`` (or ``fail_install_cleaned``) here. None if the log was
        closed or went offline meanwhile: the committed manifest is then finished by the next
        open."""
        return self._cleaning.apply_install(self.config, commit, now_ms)

    def finish_install_cleaned(self, tail: SwapTail) -> None:
        """Back on the log's thread after ``tail.run()`` returned: the clean is complete."""
        self._cleaning.finish_install(tail)

    def fail_install_cleaned(self, tail: SwapTail, exc: BaseException) -> None:
        """``tail.run()`` failed after the commit point: offline until the next open finishes
        the swap (as when the swap itself fails)."""
        self._cleaning.fail_install(tail, exc)

    # --- durability and lifecycle ---------------------------------------------------------------

    def flush(self) -> None:
        """fsync what was written: log data, sealed segments' indexes, the directory.

        The active segment's indexes are not fsynced: after a crash the active segment is always
        scanned and its indexes rebuilt, so only its data must be durable. A no-op once closed:
        close() flushed everything (or the log was deleted), so a late group-commit flush for a
        request that raced with shutdown has nothing left to do. The same three steps as the
        broker's off-loop flush (log/flush_job.py), run here in a row.
        """
        job = self.begin_flush()
        if job is None:
            return
        try:
            job.run()
        except StorageError as exc:
            self.fail_flush(job, exc)
            raise
        self.finish_flush(job)

    def begin_flush(self, fdatasync: FdatasyncFn | None = None) -> FlushJob | None:
        """Step 1 of a flush, on the log's own thread: what must be fsynced, as a FlushJob whose
        ``run()`` may go to any thread (None once closed). StorageError if the log is offline."""
        if self._status.closed:
            return None
        self._check_open()
        segments = self._segments
        active = segments.active
        descriptors: list[tuple[int, str]] = []
        try:
            for segment in segments:
                if segment.needs_flush:
                    descriptors.extend(segment.take_flush_descriptors(include_indexes=segment is not active))
            # Sealed segments fall below the recovery point after this job: their indexes too.
            descriptors.extend(segments.txn_indexes.take_flush_descriptors(except_base_offset=active.base_offset))
        except OSError as exc:
            for fd, _ in descriptors:
                os.close(fd)
            self._status.take_offline(f"cannot prepare a flush: {exc}")
            raise StorageError(f"{self.directory}: cannot prepare a flush: {exc}") from exc
        directory = self.directory if segments.directory_dirty else None
        segments.directory_dirty = False
        self._unflushed_messages = 0
        job = FlushJob(descriptors, directory, active.base_offset, tuple(self._pending_snapshots))
        self._pending_snapshots = []
        positions = self._positions
        if active.base_offset > positions.recovery_point:
            # Every sealed segment is durable once the job ran: it records that itself.
            job.checkpoint = (positions.file, positions.checkpoint(active.base_offset), positions.file.version)
        if fdatasync is not None:
            job.fdatasync = job.fsync = fdatasync
        self._flush_jobs.append(job)
        return job

    def finish_flush(self, job: FlushJob) -> None:
        """Step 3, back on the log's thread after ``job.run()`` succeeded: every sealed segment
        the job covered is durable, so a crash only needs the segments above it scanned."""
        self._forget_flush_job(job)
        if not self._status.serving:
            return
        # The job wrote the checkpoint (unless a newer one came meanwhile: then the next write
        # carries this recovery point). A crash before it was written rescans a little more.
        self._positions.recovery_point = max(self._positions.recovery_point, job.recovery_point)

    def fail_flush(self, job: FlushJob, error: BaseException) -> None:
        """Step 3 after ``job.run()`` failed: take the log offline. The kernel may have dropped
        the pages it could not write, and a second fsync would report success for them, so
        neither what was written nor the in-memory state can be trusted; every later append and
        read fails with StorageError until a restart recovers the log (Kafka takes the log
        directory offline on an IOException)."""
        self._forget_flush_job(job)
        self._status.take_offline(f"fsync failed: {error}")

    def _forget_flush_job(self, job: FlushJob) -> None:
        if job in self._flush_jobs:
            self._flush_jobs.remove(job)

    def wants_flush(self) -> bool:
        """Whether a flush is due: a roll left a sealed segment (and the producer snapshot taken
        at it) to make durable, or ``flush.messages`` (N > 1) messages came since the last one.
        The log never fsyncs during an append or a roll; the broker runs the flush on its disk
        threads (``GroupCommitFlusher.flush_in_background``), other owners call ``flush()``."""
        if not self._status.serving:
            return False
        every = self.config.flush_messages
        return (
            bool(self._pending_snapshots)
            or self._segments.active.base_offset > self._positions.recovery_point
            or (every not in (1, INT64_MAX) and self._unflushed_messages >= every)
        )

    def close(self) -> None:
        """Flush everything, snapshot producer state, release files and mark the shutdown clean."""
        status = self._status
        if status.closed:
            return
        for job in list(self._flush_jobs):
            # A round still running, or failed without its owner having heard: its dirty marks
            # are cleared, so flushing here would not cover its files. No clean marker then.
            if not job.done or job.error is not None:
                status.take_offline(f"closed with an unfinished or failed fsync round: {job.error}")
        if status.offline_reason is not None:
            # The files no longer match the segments in memory; the next open repairs them.
            self.abandon()
            return
        self._remove_deleted_files()  # an owner that left them: gone before the log counts as clean
        segments = self._segments
        for segment in segments:
            segment.seal()
            segment.flush(include_indexes=True)
        self.flush()
        segments.txn_indexes.fsync()  # the active one too: nothing is rebuilt after a clean close
        self._producers.write_snapshot(self.log_end_offset, keep_all=self.config.remote_storage_enable)
        self._positions.recovery_point = self.log_end_offset
        self._positions.write()
        for segment in segments:
            segment.close()
        segments.txn_indexes.release_all()
        (self.directory / CLEAN_SHUTDOWN_FILE).touch()
        fsync_directory(self.directory)
        status.closed = True

    def abandon(self) -> None:
        """Release file descriptors without flushing or marking clean (the log is being deleted)."""
        if self._status.closed:
            return
        self._status.closed = True
        self._segments.release_all()

    def _check_open(self) -> None:
        self._status.check_open()

    def _check_invariants(self) -> None:
        positions = self._positions
        self._segments.check(positions.log_start_offset, positions.cleaned_offset, positions.local_log_start_offset)
