"""Reads below the local log start, from the segments in the object store (Kafka's
RemoteLogReader and the read half of its RemoteLogManager).

:class:`RemoteLogReader` is the blocking core, run on the broker's remote reader threads
(:class:`RemoteReads` owns the ``remote.log.reader.threads`` pool and the index cache). For a
fetch at offset O it

1. finds the COPY_SEGMENT_FINISHED segment holding O (the caller passes only those, oldest
   first: a snapshot of the partition's remote metadata taken on the event loop);
2. looks O up in the segment's offset index (cached, :mod:`~oncestream.remote.index_cache`) and
   reads the ``.log`` object with one ranged GET from the indexed position, as many bytes as the
   partition may still return (at least the whole first batch when ``min_one``: KIP-74);
3. skips the batches ending before O (the index is sparse), cuts the rest to whole batches,
   checks each batch's CRC, and stops at the upper offset (HW/LSO) and at the segment's end: the
   next fetch continues in the next segment, or locally;
4. for read_committed, collects the aborted transactions overlapping [O, end of the returned
   data) from the transaction indexes of that segment and the remote segments after it, as
   Kafka's collectAbortedTransactions does, until one index says no later segment can hold more;
   if none does, the caller goes on with the local segments above the remote ones.

Memory: the data returned is at most max(byte budget, first batch); the scan towards O reads at
most one budget-sized window at a time. Every store failure, and every damaged object (bad CRC,
an object ending inside a batch, a bad index), is a ``RemoteStorageError`` whose message names the
object key: the fetch answers UNKNOWN_SERVER_ERROR for that partition (Kafka's mapping of
RemoteStorageException) and the broker stays up.
"""

from __future__ import annotations

import logging
import struct
import uuid
from bisect import bisect_right
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

from oncestream.errors import CorruptRecordError, OffsetOutOfRangeError, RemoteStorageError
from oncestream.log.read_path import first_record_at_or_after
from oncestream.log.txn_index import AbortedTxn
from oncestream.protocol.record_batch import (
    CURRENT_MAGIC,
    HEADER_SIZE_BYTES,
    LOG_OVERHEAD_BYTES,
    BatchHeader,
    compute_crc,
    parse_header,
)
from oncestream.remote.index_cache import (
    OFFSET_INDEX_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    RemoteIndexCache,
)
from oncestream.remote.layout import segment_key
from oncestream.remote.object_store import ObjectStore
from oncestream.remote.segment_metadata import RemotePartitionMetadata

log = logging.getLogger(__name__)
_LENGTH = struct.Struct(">qi")  # a batch's base offset and length

LOG_SUFFIX = "log"


class TieredSegment(Protocol):
    """What the reader needs of a remote segment's metadata (segment_metadata.RemoteSegment)."""

    @property
    def segment_id(self) -> uuid.UUID: ...

    @property
    def base_offset(self) -> int: ...

    @property
    def last_offset(self) -> int: ...  # inclusive

    @property
    def max_timestamp_ms(self) -> int: ...

    @property
    def has_txn_index(self) -> bool: ...  # False: no abort marker in it, no txnindex object


# (segment, suffix) -> the object's key (layout.segment_key for the segment's partition).
SegmentKey = Callable[[TieredSegment, str], str]


@dataclass(frozen=True, slots=True)
class RemotePartition:
    """A snapshot of one partition's readable remote segments, taken on the event loop."""

    segments: tuple[TieredSegment, ...]  # COPY_SEGMENT_FINISHED, oldest first
    key_of: SegmentKey


def remote_partition(
    topic: str, topic_id: uuid.UUID, partition: int, metadata: RemotePartitionMetadata | None
) -> RemotePartition:
    """The readable segments of ``metadata`` with layout.py's keys for this partition."""

    def key_of(segment: TieredSegment, suffix: str) -> str:
        return segment_key(topic, topic_id, partition, segment.base_offset, segment.segment_id, suffix)

    segments: tuple[TieredSegment, ...] = tuple(metadata.readable_segments()) if metadata is not None else ()
    return RemotePartition(segments, key_of)


@dataclass(frozen=True, slots=True)
class RemoteRead:
    """The batches a remote fetch returns and what read_committed needs to go on locally."""

    chunks: list[memoryview]  # whole batches, in order
    size_bytes: int
    next_offset: int  # the offset after the last returned batch (= the fetch offset if none)
    # (producer_id, first_offset) of aborts overlapping the returned range found in the remote
    # transaction indexes; None unless read_committed.
    aborted_transactions: list[tuple[int, int]] | None
    # False: no remote index could end the search, so the caller continues with the local
    # transaction indexes of the segments from ``local_aborts_from`` on (those above every remote
    # segment; lower local segments are copies of remote ones and were searched already).
    aborted_complete: bool
    local_aborts_from: int


def segment_index_holding(segments: Sequence[TieredSegment], offset: int) -> int | None:
    """Index of the segment whose [base, last] holds ``offset``; None if none does."""
    slot = bisect_right(segments, offset, key=lambda segment: segment.base_offset) - 1
    if slot < 0 or segments[slot].last_offset < offset:
        return None
    return slot


class _RangeWindow:
    """A window of one ``.log`` object, refilled with ranged GETs as a scan moves past it."""

    def __init__(self, store: ObjectStore, key: str, window_bytes: int) -> None:
        self.store = store
        self.key = key
        self.window_bytes = max(window_bytes, HEADER_SIZE_BYTES)
        self._start = 0
        self._buf = b""
        self._at_end = False  # the last GET came back short: the object ends with the buffer

    def view(self, position: int, size_bytes: int) -> memoryview:
        """Bytes [position, position + size_bytes) of the object (shorter at its end)."""
        end = self._start + len(self._buf)
        covered = self._start <= position and (position + size_bytes <= end or (self._at_end and position <= end))
        if not covered and self._start <= position < end:
            # The window holds the start: fetch only the rest (one batch scanned into a budget).
            tail = self.store.get_range(self.key, end, position + size_bytes)
            self._buf = self._buf[position - self._start :] + tail
            self._start = position
            self._at_end = len(tail) < position + size_bytes - end
        elif not covered:
            want = max(size_bytes, self.window_bytes)
            self._buf = b""  # let the old window go before the new one arrives
            self._buf = self.store.get_range(self.key, position, position + want)
            self._start = position
            self._at_end = len(self._buf) < want
        offset = position - self._start
        return memoryview(self._buf)[offset : offset + size_bytes]


class RemoteLogReader:
    """Blocking reads of remote segments; thread-safe (the store and the cache are)."""

    def __init__(self, store: ObjectStore, index_cache: RemoteIndexCache, key_of: SegmentKey) -> None:
        self.store = store
        self.index_cache = index_cache
        self.key_of = key_of

    # --- fetch ----------------------------------------------------------------------------------

    def read(
        self,
        segments: Sequence[TieredSegment],
        fetch_offset: int,
        max_bytes: int,
        *,
        upper_offset: int,
        min_one: bool,
        with_aborted: bool,
    ) -> RemoteRead:
        """Whole batches from the one holding ``fetch_offset``, from one remote segment.

        ``segments``: the partition's COPY_SEGMENT_FINISHED segments, oldest first. No batch
        with a base offset >= ``upper_offset`` is returned. OffsetOutOfRangeError if no segment
        holds the offset (deleted by remote retention since the caller looked).
        """
        first = segment_index_holding(segments, fetch_offset)
        if first is None:
            raise OffsetOutOfRangeError(f"offset {fetch_offset} is in no remote segment")
        chunks: list[memoryview] = []
        next_offset = fetch_offset
        for segment in segments[first:]:
            if segment.base_offset >= upper_offset:
                break
            read = self._read_segment(
                segment, max(fetch_offset, segment.base_offset), max_bytes, upper_offset, min_one=min_one
            )
            if read is not None:
                chunks, next_offset = read
                break
            # No batch at/after the offset in this segment: the data goes on in the next one.
        aborted: list[tuple[int, int]] | None = None
        complete = True
        local_from = segments[-1].last_offset + 1
        if with_aborted:
            aborted = []
            if next_offset > fetch_offset:
                found, complete = self.collect_aborted(segments[first:], fetch_offset, next_offset)
                aborted = [(entry.producer_id, entry.first_offset) for entry in found]
        return RemoteRead(
            chunks=chunks,
            size_bytes=sum(len(chunk) for chunk in chunks),
            next_offset=next_offset,
            aborted_transactions=aborted,
            aborted_complete=complete,
            local_aborts_from=local_from,
        )

    def collect_aborted(
        self, segments: Sequence[TieredSegment], fetch_offset: int, upper_offset: int
    ) -> tuple[list[AbortedTxn], bool]:
        """Aborts overlapping [``fetch_offset``, ``upper_offset``) in the transaction indexes of
        ``segments`` (the one holding the fetch offset first: an abort is indexed with its marker,
        which may sit in any later segment); True if an index ended the search."""
        found: list[AbortedTxn] = []
        for segment in segments:
            if not segment.has_txn_index:
                continue  # no abort marker in it: nothing it could add, and no object to fetch
            index = self.index_cache.txn_index(str(segment.segment_id), self.key_of(segment, TXN_INDEX_SUFFIX))
            if index.collect(fetch_offset, upper_offset, found):
                return found, True
        return found, False

    def _read_segment(
        self, segment: TieredSegment, offset: int, max_bytes: int, upper_offset: int, *, min_one: bool
    ) -> tuple[list[memoryview], int] | None:
        """(whole batches from the one holding ``offset``, the offset after them) in one segment;
        None if the segment has no batch at/after ``offset``."""
        key = self.key_of(segment, LOG_SUFFIX)
        window = _RangeWindow(self.store, key, max_bytes)
        found = self._first_batch_at(segment, window, offset)
        if found is None:
            return None
        position, header = found
        if header.base_offset >= upper_offset:
            return [], offset
        first_size = header.size_bytes
        take = first_size if min_one and first_size > max_bytes else max_bytes
        if take < first_size:
            return [], offset  # not even the first batch fits, and none is owed (KIP-74)
        data = window.view(position, take)
        chunks: list[memoryview] = []
        next_offset = offset
        at = 0
        while len(data) - at >= LOG_OVERHEAD_BYTES:
            _base, size = _LENGTH.unpack_from(data, at)
            size += LOG_OVERHEAD_BYTES
            if at + size > len(data):
                if len(data) < take:  # the object ended inside this batch
                    raise RemoteStorageError(
                        f"remote log segment {key} on {self.store.description} ends inside the batch at"
                        f" position {position + at} (truncated object)"
                    )
                break  # the budget ends inside this batch: it goes to the next fetch
            batch_header = self._header(data, at, key, position + at)
            if batch_header.base_offset >= upper_offset:
                break
            batch = data[at : at + size]
            if compute_crc(batch) != batch_header.crc:
                raise RemoteStorageError(
                    f"remote log segment {key} on {self.store.description}: CRC mismatch in the batch at"
                    f" offset {batch_header.base_offset} (position {position + at})"
                )
            chunks.append(batch)
            next_offset = batch_header.next_offset
            at += size
            if next_offset > segment.last_offset:
                break  # the segment's end: anything after it in the object is not ours to serve
        if not chunks and len(data) < first_size and len(data) < take:
            raise RemoteStorageError(
                f"remote log segment {key} on {self.store.description} ends inside the batch at position {position}"
            )
        return chunks, next_offset

    def _first_batch_at(
        self, segment: TieredSegment, window: _RangeWindow, offset: int
    ) -> tuple[int, BatchHeader] | None:
        """(position, header) of the first batch of the segment ending at/after ``offset``;
        None if the segment's data ends before it."""
        key = window.key
        index = self.index_cache.offset_index(str(segment.segment_id), self.key_of(segment, OFFSET_INDEX_SUFFIX))
        position = index.position_for(offset - segment.base_offset)
        while True:
            head = window.view(position, HEADER_SIZE_BYTES)
            if len(head) == 0:
                return None
            header = self._header(head, 0, key, position)
            if header.last_offset >= offset:
                return position, header
            position += header.size_bytes

    def _header(self, data: memoryview, at: int, key: str, position: int) -> BatchHeader:
        """The header of the batch at ``data[at:]`` (object ``position``), checked for sanity."""
        try:
            header = parse_header(data, at)
        except CorruptRecordError as exc:
            raise RemoteStorageError(
                f"remote log segment {key} on {self.store.description} ends inside the batch header at"
                f" position {position}"
            ) from exc
        if header.magic != CURRENT_MAGIC or header.batch_length < HEADER_SIZE_BYTES - LOG_OVERHEAD_BYTES:
            raise RemoteStorageError(
                f"remote log segment {key} on {self.store.description}: no valid batch at position {position}"
                f" (magic {header.magic}, length {header.batch_length})"
            )
        return header

    # --- timestamps -----------------------------------------------------------------------------

    def offset_for_timestamp(
        self, segments: Sequence[TieredSegment], start_offset: int, timestamp_ms: int
    ) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at/after ``start_offset`` with timestamp >=
        ``timestamp_ms`` in the remote segments; None if none is that recent (look locally).

        As Kafka's RemoteLogManager.findOffsetByTimestamp: the first segment whose max timestamp
        reaches the target, its time index for the batch, that batch decoded for the record.
        """
        for segment in segments:
            if segment.last_offset < start_offset or segment.max_timestamp_ms < timestamp_ms:
                continue
            time_index = self.index_cache.time_index(str(segment.segment_id), self.key_of(segment, TIME_INDEX_SUFFIX))
            relative = time_index.lookup(timestamp_ms)
            if relative is None:
                continue
            target = max(segment.base_offset + relative, start_offset)
            window = _RangeWindow(self.store, self.key_of(segment, LOG_SUFFIX), HEADER_SIZE_BYTES)
            found = self._first_batch_at(segment, window, target)
            if found is None:
                continue
            position, header = found
            batch = window.view(position, header.size_bytes)
            if len(batch) < header.size_bytes:
                raise RemoteStorageError(
                    f"remote log segment {window.key} on {self.store.description} ends inside the batch at"
                    f" position {position}"
                )
            return first_record_at_or_after(bytes(batch), timestamp_ms, start_offset)
        return None


class RemoteReads:
    """The broker's remote reading: the ``remote.log.reader.threads`` pool, the index cache
    (``remote.log.index.file.cache.total.size.bytes``) and where a partition's segments are.

    ``partition_of(topic, partition)`` is called on the event loop and returns a snapshot of the
    partition's readable segments (:func:`remote_partition`): the threads never touch the
    metadata itself."""

    def __init__(
        self,
        store: ObjectStore,
        partition_of: Callable[[str, int], RemotePartition],
        *,
        reader_threads: int,
        index_cache_bytes: int,
        fetch_max_wait_ms: int,
    ) -> None:
        self.store = store
        self.partition_of = partition_of
        self.index_cache = RemoteIndexCache(store.get, index_cache_bytes)
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self._pool = ThreadPoolExecutor(max_workers=max(1, reader_threads), thread_name_prefix="remote-reader")

    def _reader(self, remote: RemotePartition) -> RemoteLogReader:
        return RemoteLogReader(self.store, self.index_cache, remote.key_of)

    def submit_read(
        self,
        topic: str,
        partition: int,
        fetch_offset: int,
        max_bytes: int,
        *,
        upper_offset: int,
        min_one: bool,
        with_aborted: bool,
    ) -> Future[RemoteRead]:
        """Start a fetch read on a reader thread."""
        remote = self.partition_of(topic, partition)
        return self._pool.submit(
            self._reader(remote).read,
            remote.segments,
            fetch_offset,
            max_bytes,
            upper_offset=upper_offset,
            min_one=min_one,
            with_aborted=with_aborted,
        )

    def submit_offset_for_timestamp(
        self, topic: str, partition: int, start_offset: int, timestamp_ms: int
    ) -> Future[tuple[int, int] | None]:
        """Start a timestamp lookup in the remote segments on a reader thread."""
        remote = self.partition_of(topic, partition)
        return self._pool.submit(self._reader(remote).offset_for_timestamp, remote.segments, start_offset, timestamp_ms)

    def highest_tiered_offset(self, topic: str, partition: int) -> int:
        """The last offset in COPY_SEGMENT_FINISHED segments (-1 if none): ListOffsets -5."""
        segments = self.partition_of(topic, partition).segments
        return segments[-1].last_offset if segments else -1

    def close(self) -> None:
        """Stop the threads (reads under way finish; their results are dropped)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
