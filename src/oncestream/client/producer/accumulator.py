"""The producer's record accumulator: per-partition queues of batches being filled, bounded by
``buffer.memory``.

Two threads use it: user threads append records (``append``), the event loop's sender takes
ready batches (``drain``) and releases finished ones. A mutex shared by both would be taken once
per record by the user and held by the sender while it scans queues; on a busy two-core machine
the GIL hand-offs around that mutex cost more than encoding the record. So the sender never
takes the user's lock. Ownership moves through a two-flag handshake instead (Dekker's protocol,
sound because the GIL makes every bytecode atomic and sequentially consistent):

- user, holding ``user_lock`` (which only serializes user threads): picks the open batch, sets
  ``appending = batch``, then re-reads ``batch.closed``; if it is set it backs off and opens a
  new batch, otherwise it encodes the record and clears ``appending``;
- sender: sets ``batch.closed = True``, then reads ``appending``; if it is that batch, the
  sender leaves it for its next pass, otherwise the batch is its alone.

Only user threads write ``open``, ``sticky``, ``reserved_bytes`` and ``batches_created``; only the
sender writes ``released_bytes`` and ``batches_done``. Queues are deques (append / popleft /
extendleft are atomic). Memory is reserved in chunks per batch (as Kafka's BufferPool does per
batch), not per record. Time is passed in or read only where a batch is created.
"""

from __future__ import annotations

import collections
import random
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from oncestream.client.common.errors import ClientInvariantError
from oncestream.client.producer.record_batch_builder import (
    _NULL,
    _TABLE_SIZE,
    VARINT,
    VARINT_LEN,
    SealedBatch,
    varint,
)

TopicPartitionKey = tuple[str, int]
# Per-record delivery report data: (index in batch, callback, key, value, headers, timestamp)
Report = tuple[int, Callable[..., Any], Any, Any, Any, int]

RECORD_OVERHEAD_BYTES = 24  # length, attributes, varints of a record without headers (upper bound)
BATCH_HEADER_BYTES = 61  # the record batch header (magic 2) in front of the records
RESERVATION_CHUNK_BYTES = 256 * 1024


class ProducerBatch:
    """One record batch for one partition, from first append until it is acknowledged."""

    __slots__ = (
        "_header",
        "_header_key",
        "attempts",
        "base_offset",
        "base_sequence",
        "base_timestamp_ms",
        "closed",
        "created_ms",
        "error",
        "limit_bytes",
        "log_append_time_ms",
        "max_timestamp_ms",
        "partition",
        "parts",
        "producer_epoch",
        "producer_id",
        "record_count",
        "reports",
        "reserved_bytes",
        "retry_at_ms",
        "sealed",
        "size_bytes",
        "topic",
        "tp",
        "transactional",
    )

    def __init__(self, topic: str, partition: int, created_ms: int, timestamp_ms: int) -> None:
        self.topic = topic
        self.partition = partition
        self.tp = (topic, partition)
        self.parts: list[bytes] = []  # emptied once sealed
        self.size_bytes = 0
        self.base_timestamp_ms = timestamp_ms
        self.max_timestamp_ms = timestamp_ms
        self.sealed: SealedBatch | None = None
        self.created_ms = created_ms
        self.reports: list[Report] | None = None
        self.reserved_bytes = 0
        self.limit_bytes = 0  # min(batch.size, reserved): the fast append path's only size check
        self.record_count = 0
        self.base_sequence = -1
        self.producer_id = -1
        self.producer_epoch = -1
        self.attempts = 0
        self.retry_at_ms = 0
        self.base_offset = -1
        self.log_append_time_ms = -1
        self.error: Any = None
        self.transactional = False
        self.closed = False
        self._header_key: tuple[int, int, int, bool] | None = None
        self._header = b""

    def seal(self, compression: int) -> SealedBatch:
        """Finish the records section (compressing it once). Only for a closed batch."""
        if self.sealed is None:
            if not self.closed:
                raise ClientInvariantError("only a closed batch can be sealed")
            self.sealed = SealedBatch(b"".join(self.parts), self.record_count, self.base_timestamp_ms,
                                      self.max_timestamp_ms, compression)
            self.parts = []  # the sealed bytes hold the records now
        return self.sealed

    def wire_parts(self) -> tuple[bytes, bytes]:
        """(header, records) for the current producer identity and sequence; the header is
        recomputed only when the identity changed (KIP-360 re-stamping)."""
        sealed = self.sealed
        if sealed is None:
            raise ClientInvariantError("a batch is sealed before it is sent")
        key = (self.producer_id, self.producer_epoch, self.base_sequence, self.transactional)
        if key != self._header_key:
            self._header = sealed.header(*key)
            self._header_key = key
        return self._header, sealed.payload

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record (sequences wrap at int32 max)."""
        return increment_sequence(self.base_sequence, self.record_count - 1)

    def __repr__(self) -> str:
        return (f"ProducerBatch({self.topic}[{self.partition}], records={self.record_count}, "
                f"seq={self.base_sequence}, attempts={self.attempts})")


def increment_sequence(sequence: int, delta: int) -> int:
    """Kafka sequences wrap from int32 max to 0 (DefaultRecordBatch.incrementSequence)."""
    limit = 0x7FFFFFFF
    if sequence > limit - delta:
        return delta - (limit - sequence) - 1
    return sequence + delta


class BufferExhaustedError(Exception):
    """No buffer memory became free within the caller's deadline."""


class RecordTooLargeError(Exception):
    """One record is larger than max.request.size (it could never be sent)."""


class RecordAccumulator:
    """Batch queues shared by user threads and the sender (see the module docstring)."""

    def __init__(self, *, batch_size: int, batch_num_messages: int, linger_ms: int,
                 buffer_memory: int, max_request_size: int = 1 << 30) -> None:
        if batch_size <= 0 or batch_num_messages <= 0 or buffer_memory <= 0:
            raise ValueError("batch_size, batch_num_messages and buffer_memory must be positive")
        self.max_request_size = max_request_size
        self.batch_size = batch_size
        # batch.size bounds the whole encoded batch, header included (as in Kafka's client): a
        # batch of records filled to batch.size plus the header would exceed a broker's
        # max.message.bytes set to the same round figure. A record bigger than this budget still
        # gets a batch of its own.
        self.batch_records_bytes = max(1, batch_size - BATCH_HEADER_BYTES)
        self.batch_num_messages = batch_num_messages
        self.linger_ms = linger_ms
        self.buffer_memory = buffer_memory
        self._chunk = min(batch_size, RESERVATION_CHUNK_BYTES)
        self.user_lock = threading.Lock()
        self._space = threading.Condition(threading.Lock())
        self.queues: dict[TopicPartitionKey, collections.deque[ProducerBatch]] = {}
        self.open: dict[TopicPartitionKey, ProducerBatch] = {}
        self.sticky: dict[str, tuple[int, ProducerBatch]] = {}
        self.appending: ProducerBatch | None = None
        self.reserved_bytes = 0  # user threads only
        self.released_bytes = 0  # sender only
        self.batches_created = 0  # user threads only
        self.batches_done = 0  # sender only
        self.taken_records = 0  # sender only: records in batches it took and has not released
        self.flushing = 0
        self.space_waiters = 0
        # When the sender will wake up on its own (ms, None: only when woken). Sender writes.
        self.sender_wake_at_ms: int | None = None
        self.wakeup_pending = False
        self.closed = False
        self._drain_start = 0

    # --- user threads -------------------------------------------------------------------------

    def append(
        self,
        topic: str,
        partition: int,
        num_partitions: int,
        timestamp_ms: int,
        key: bytes | None,
        value: bytes | None,
        headers_encoded: bytes | None,
        report: tuple[Callable[..., Any], Any] | None,
        max_block_s: float,
    ) -> tuple[int, bool]:
        """Encode one record into its partition's open batch (see ``_append_general``).

        This is the common case only: the partition (or the sticky partition) has an open batch
        with room and reserved memory, and the varints come from the table. Anything else goes
        to ``_append_general``. Inlined on purpose: it runs once per record.
        """
        requested = partition
        lock = self.user_lock
        lock.acquire()
        try:
            if partition < 0:
                current = self.sticky.get(topic)
                if current is None:
                    batch = None
                else:
                    partition, batch = current
                    if partition >= num_partitions:
                        batch = None
            else:
                batch = self.open.get((topic, partition))
            if batch is None or batch.closed:
                batch = None
            else:
                kpart: bytes | None  # None: too long for the table, the slow path encodes it
                vpart: bytes | None
                if key is None:
                    klen, kpart, kpart_len = 0, _NULL, 1
                else:
                    klen = len(key)
                    kpart = VARINT[klen] if klen < _TABLE_SIZE else None
                    kpart_len = VARINT_LEN[klen] if klen < _TABLE_SIZE else 0
                if value is None:
                    vlen, vpart, vpart_len = 0, _NULL, 1
                else:
                    vlen = len(value)
                    vpart = VARINT[vlen] if vlen < _TABLE_SIZE else None
                    vpart_len = VARINT_LEN[vlen] if vlen < _TABLE_SIZE else 0
                if headers_encoded is None:
                    hpart, hlen = b"\x00", 1
                else:
                    hpart, hlen = headers_encoded, len(headers_encoded)
                index = batch.record_count
                delta = timestamp_ms - batch.base_timestamp_ms
                if (batch.size_bytes + klen + vlen + hlen + RECORD_OVERHEAD_BYTES > batch.limit_bytes
                        or index >= self.batch_num_messages or not 0 <= delta < _TABLE_SIZE
                        or index >= _TABLE_SIZE or kpart is None or vpart is None):
                    batch = None
                else:
                    self.appending = batch
                    if batch.closed:  # the sender claimed it between our check and the marker
                        batch = None
            if batch is not None:
                if delta and timestamp_ms > batch.max_timestamp_ms:
                    batch.max_timestamp_ms = timestamp_ms
                body = 1 + VARINT_LEN[delta] + VARINT_LEN[index] + kpart_len + klen + vpart_len + vlen + hlen
                lpart = VARINT[body] if body < _TABLE_SIZE else varint(body)
                # kpart and vpart are bytes here: the fit check above sent None to the slow path.
                batch.parts += (lpart, b"\x00", VARINT[delta], VARINT[index], kpart, key or b"",  # type: ignore[arg-type]
                                vpart, value or b"", hpart)
                if report is not None:
                    if batch.reports is None:
                        batch.reports = []
                    batch.reports.append((index, report[0], key, value, report[1], timestamp_ms))
                batch.record_count = index + 1
                batch.size_bytes += body + len(lpart)
                return partition, False
        finally:
            self.appending = None
            lock.release()
        return self._append_general(topic, requested, num_partitions, timestamp_ms, key, value,
                                    headers_encoded, report, max_block_s)

    def _append_general(
        self,
        topic: str,
        partition: int,
        num_partitions: int,
        timestamp_ms: int,
        key: bytes | None,
        value: bytes | None,
        headers_encoded: bytes | None,
        report: tuple[Callable[..., Any], Any] | None,
        max_block_s: float,
    ) -> tuple[int, bool]:
        """Encode one record into its partition's open batch, opening batches and reserving
        memory as needed.

        ``partition`` < 0 means 'sticky' (KIP-480, for null keys): keep filling the partition
        whose batch is open, move to the next partition once that batch was closed or sent.
        Returns (partition, wake) where wake asks the caller to wake the sender (a batch became
        sendable or a new batch needs a linger timer the sender does not have yet).
        Raises BufferExhaustedError when no memory frees within ``max_block_s``.
        """
        # Encoding is inlined (no helper calls): this runs once per record in the user's thread.
        if key is None:
            kpart = _NULL
            klen = 0
        else:
            klen = len(key)
            kpart = VARINT[klen] if klen < _TABLE_SIZE else varint(klen)
        if value is None:
            vpart = _NULL
            vlen = 0
        else:
            vlen = len(value)
            vpart = VARINT[vlen] if vlen < _TABLE_SIZE else varint(vlen)
        hpart = headers_encoded if headers_encoded is not None else b"\x00"
        estimate = RECORD_OVERHEAD_BYTES + klen + vlen + len(hpart)
        if estimate + BATCH_HEADER_BYTES > self.max_request_size:
            raise RecordTooLargeError(
                f"a record of about {estimate} bytes exceeds max.request.size ({self.max_request_size})")
        wake = False
        lock = self.user_lock
        lock.acquire()
        try:
            sticky = partition < 0
            if sticky:
                partition = self._sticky_partition(topic, num_partitions)
            tp = (topic, partition)
            while True:
                batch = self.open.get(tp)
                if batch is not None and not batch.closed:
                    full = batch.record_count >= self.batch_num_messages or \
                        batch.size_bytes + estimate > self.batch_records_bytes
                    if not full:
                        self.appending = batch
                        if batch.closed:
                            self.appending = None  # the sender closed it first: open another
                        elif batch.size_bytes + estimate <= batch.reserved_bytes or \
                                self._try_reserve(max(self._chunk, estimate)):
                            if batch.size_bytes + estimate > batch.reserved_bytes:
                                batch.reserved_bytes += max(self._chunk, estimate)
                                batch.limit_bytes = min(self.batch_records_bytes, batch.reserved_bytes)
                            break  # the batch is ours until appending is cleared
                        else:
                            self.appending = None
                            full = True  # no memory to grow it: send it, start another
                    if full:
                        batch.closed = True  # the sender may take it now
                        wake = True
                        if sticky:  # KIP-480: a full batch moves the sticky partition on
                            partition = (partition + 1) % num_partitions
                            tp = (topic, partition)
                            continue
                now_ms = int(time.monotonic() * 1000)
                reservation = max(estimate, self._chunk)
                self._reserve(reservation, max_block_s)
                batch = ProducerBatch(topic, partition, now_ms, timestamp_ms)
                batch.reserved_bytes = reservation
                batch.limit_bytes = min(self.batch_records_bytes, reservation)
                self.batches_created += 1
                queue = self.queues.get(tp)
                if queue is None:
                    queue = self.queues.setdefault(tp, collections.deque())
                self.open[tp] = batch
                self.appending = batch  # new and unknown to the sender until appended below
                queue.append(batch)
                wake_at = self.sender_wake_at_ms
                if wake_at is None or wake_at > now_ms + self.linger_ms:
                    wake = True
                break
            if sticky:
                self.sticky[topic] = (partition, batch)
            index = batch.record_count
            delta = timestamp_ms - batch.base_timestamp_ms
            if delta > 0 and timestamp_ms > batch.max_timestamp_ms:
                batch.max_timestamp_ms = timestamp_ms
            head = (VARINT[delta] if 0 <= delta < _TABLE_SIZE else varint(delta)) + (
                VARINT[index] if index < _TABLE_SIZE else varint(index)) + kpart
            if key:
                head += key
            head += vpart
            body = 1 + len(head) + vlen + len(hpart)
            # Parts are joined once when the batch is sealed: growing one bytearray record by
            # record costs several times more (repeated reallocation and copying).
            parts = batch.parts
            parts.append((VARINT[body] if body < _TABLE_SIZE else varint(body)) + b"\x00" + head)
            if value:
                parts.append(value)
            parts.append(hpart)
            if report is not None:
                if batch.reports is None:
                    batch.reports = []
                batch.reports.append((index, report[0], key, value, report[1], timestamp_ms))
            batch.record_count = index + 1
            batch.size_bytes += body + 3
            self.appending = None
            if wake:
                if self.wakeup_pending:
                    return partition, False
                self.wakeup_pending = True
            return partition, wake
        finally:
            self.appending = None
            lock.release()

    def _sticky_partition(self, topic: str, num_partitions: int) -> int:
        """The sticky partition for a null-key record: unchanged while the batch it was filling
        is still open, else the next partition (a random one to start)."""
        current = self.sticky.get(topic)
        if current is None:
            return random.randrange(num_partitions)
        partition, batch = current
        if partition < num_partitions and not batch.closed and self.open.get((topic, partition)) is batch:
            return partition
        return (partition + 1) % num_partitions

    def _try_reserve(self, nbytes: int) -> bool:
        """Take ``nbytes`` of buffer.memory if free, without waiting."""
        if self.reserved_bytes - self.released_bytes + nbytes <= self.buffer_memory:
            self.reserved_bytes += nbytes
            return True
        return False

    def _reserve(self, nbytes: int, max_block_s: float) -> None:
        """Take ``nbytes`` of buffer.memory, waiting up to ``max_block_s`` for the sender to
        release some (a single reservation larger than the whole buffer is let through alone)."""
        if self.reserved_bytes - self.released_bytes + nbytes <= self.buffer_memory:
            self.reserved_bytes += nbytes
            return
        deadline = time.monotonic() + max_block_s
        self.space_waiters += 1
        try:
            with self._space:
                while True:
                    used = self.reserved_bytes - self.released_bytes
                    if used + nbytes <= self.buffer_memory or used == 0:
                        break
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or self.closed:
                        raise BufferExhaustedError(
                            f"buffer.memory ({self.buffer_memory} bytes) is full and no space was "
                            "freed within max.block.ms"
                        )
                    self._space.wait(min(remaining, 0.05))
        finally:
            self.space_waiters -= 1
        self.reserved_bytes += nbytes

    def used_bytes(self) -> int:
        """Reserved and not yet released buffer memory."""
        return self.reserved_bytes - self.released_bytes

    def has_open_batch(self, topic: str, partition: int) -> bool:
        """Whether the partition has a batch still accepting records."""
        batch = self.open.get((topic, partition))
        return batch is not None and not batch.closed

    def all_done(self) -> bool:
        """Every batch ever created has been acknowledged or failed."""
        return self.batches_done >= self.batches_created

    def outstanding_records(self) -> int:
        """Records appended and not yet acknowledged or failed (a snapshot)."""
        return self.queued_records() + self.taken_records

    def queued_records(self) -> int:
        """Records in batches not yet taken by the sender (a snapshot)."""
        total = 0
        for queue in list(self.queues.values()):
            for batch in list(queue):
                total += batch.record_count
        return total

    # --- sender (event loop) ------------------------------------------------------------------

    def _take_head(self, queue: collections.deque[ProducerBatch], batch: ProducerBatch) -> bool:
        """Claim the head batch of ``queue`` for the sender (the handshake, sender's half)."""
        batch.closed = True
        if self.appending is batch:
            return False  # a user thread is writing into it right now: next pass
        taken = queue.popleft()
        if taken is not batch:
            raise ClientInvariantError("only the sender pops queues: the batch it sealed is not at the head")
        self.taken_records += batch.record_count
        return True

    def drain(
        self,
        now_ms: int,
        leader_of: Callable[[str, int], int],
        sendable: Callable[[ProducerBatch, int], bool],
        max_request_bytes: int,
    ) -> tuple[dict[int, list[ProducerBatch]], int | None, set[str]]:
        """Take at most one ready batch per partition, grouped by leader node.

        Returns (batches by node, ms of the next time a batch becomes ready by itself or None,
        topics whose leader is unknown). ``sendable(batch, node)`` is the sender's veto
        (connection not ready, in-flight limits, partition not yet in the transaction...).
        """
        out: dict[int, list[ProducerBatch]] = {}
        sizes: dict[int, int] = {}
        next_ready: int | None = None
        unknown: set[str] = set()
        self.wakeup_pending = False
        force = self.flushing > 0 or self.space_waiters > 0
        items = list(self.queues.items())
        if len(items) > 1:
            start = self._drain_start % len(items)
            self._drain_start += 1
            items = items[start:] + items[:start]
        for tp, queue in items:
            if not queue:
                continue
            batch = queue[0]
            if batch.retry_at_ms > now_ms:
                next_ready = _earliest(next_ready, batch.retry_at_ms)
                continue
            ready = (
                force
                or batch.closed
                or len(queue) > 1
                or now_ms - batch.created_ms >= self.linger_ms
            )
            if not ready:
                next_ready = _earliest(next_ready, batch.created_ms + self.linger_ms)
                continue
            node = leader_of(tp[0], tp[1])
            if node < 0:
                unknown.add(tp[0])
                continue
            if not sendable(batch, node):
                continue
            size = batch.size_bytes + BATCH_HEADER_BYTES
            used = sizes.get(node, 0)
            if used and used + size > max_request_bytes:
                continue
            if not self._take_head(queue, batch):
                next_ready = _earliest(next_ready, now_ms + 1)
                continue
            sizes[node] = used + size
            out.setdefault(node, []).append(batch)
            if queue:
                next_ready = now_ms  # one batch per partition per request: go again at once
        return out, next_ready, unknown

    def reenqueue(self, batches: Iterable[ProducerBatch]) -> None:
        """Put (closed) batches back at the front of their queues, keeping the given order."""
        by_tp: dict[TopicPartitionKey, list[ProducerBatch]] = {}
        for batch in batches:
            if not batch.closed:
                raise ClientInvariantError("only closed batches are put back in their queues")
            by_tp.setdefault(batch.tp, []).append(batch)
        for tp, group in by_tp.items():
            self.taken_records -= sum(b.record_count for b in group)
            self.queues.setdefault(tp, collections.deque()).extendleft(reversed(group))

    def release(self, batch: ProducerBatch) -> None:
        """A batch is finished (acknowledged or failed): free its memory."""
        self.released_bytes += batch.reserved_bytes
        self.taken_records -= batch.record_count
        self.batches_done += 1
        if self.space_waiters:
            with self._space:
                self._space.notify_all()

    def take_unsent(self, predicate: Callable[[ProducerBatch], bool] | None = None) -> list[ProducerBatch]:
        """Remove and return batches from the front of every queue while they match
        ``predicate`` (all when None); a batch a user thread is writing into stays."""
        taken: list[ProducerBatch] = []
        for queue in list(self.queues.values()):
            while queue:
                batch = queue[0]
                if predicate is not None and not predicate(batch):
                    break
                if not self._take_head(queue, batch):
                    break
                taken.append(batch)
        return taken

    def expired(self, now_ms: int, delivery_timeout_ms: int) -> list[ProducerBatch]:
        """Remove and return queued batches older than ``delivery.timeout.ms`` (queues are in
        creation order, so only their fronts can be expired)."""
        return self.take_unsent(lambda b: now_ms - b.created_ms >= delivery_timeout_ms)

    def begin_flush(self) -> None:
        """Make every batch ready until ``end_flush``."""
        with self._space:
            self.flushing += 1

    def end_flush(self) -> None:
        """Undo one ``begin_flush``."""
        with self._space:
            self.flushing -= 1

    def close(self) -> None:
        """Wake blocked appenders (they fail)."""
        self.closed = True
        with self._space:
            self._space.notify_all()


def _earliest(current: int | None, candidate: int) -> int:
    return candidate if current is None or candidate < current else current
