"""Produce objects: many partitions' record batches back to back in one immutable object.

A broker in cluster mode turns every interval's worth of produce requests into one object (KIP-1163):
the producers' batches verbatim, one after another, whatever their partition. The coordinates of
each batch (byte offset and size inside the object) are computed while the object is built and
committed to PostgreSQL afterwards (``commit``), which is where offsets are assigned; the base offset
stored in the bytes means nothing (the reader patches it, bytes 0-7 are outside the CRC).

Validation happens before anything is buffered, with the single broker's checks
(``log/batch_validation``): a batch that would be refused never reaches the object store. A topic
with message.timestamp.type=LogAppendTime gets the broker's time stamped in before the upload
(``log/log_append_time``, CRC recomputed), so the stored bytes are what consumers read.

Keys are unique per attempt (``<prefix>/diskless/<yyyy-mm-dd>/<uuid4>.batches``): an upload that
timed out may still land later, and must never overwrite an object someone committed.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from oncestream.log.batch_validation import validate_batches
from oncestream.log.config import LogConfig
from oncestream.log.log_append_time import prepare_log_append_time
from oncestream.protocol.record_batch import BatchHeader

TIMESTAMP_TYPE_CREATE_TIME = 0
TIMESTAMP_TYPE_LOG_APPEND_TIME = 1
OBJECT_SUFFIX = ".batches"


@dataclass(frozen=True, slots=True)
class TxnWrite:
    """A transactional produce's identity for KIP-890 verification in the commit: the request's
    transactional id, the topic's name (transactions list partitions by name) and
    ``transaction.state.log.num.partitions`` (where the id's stored state is)."""

    transactional_id: str
    topic: str
    state_partitions: int


@dataclass(frozen=True, slots=True)
class ValidatedAppend:
    """One request's data for one partition, every batch checked, waiting to be placed in an object."""

    topic_id: uuid.UUID
    partition: int
    batches: tuple[tuple[BatchHeader, memoryview], ...]
    log_append_time: bool
    txn: TxnWrite | None = None

    @property
    def size_bytes(self) -> int:
        return sum(len(batch) for _, batch in self.batches)


def validate_append(topic_id: uuid.UUID, partition: int, records: bytes, config: LogConfig,
                    txn: TxnWrite | None = None) -> ValidatedAppend:
    """Check a partition's produce data as the single broker's log does (CRC, magic, record count,
    max.message.bytes, control batches, keyless records on compacted topics); raises the same
    typed errors (``validate_batches``)."""
    parsed = validate_batches(records, config)
    return ValidatedAppend(topic_id, partition, tuple(parsed), config.log_append_time, txn)


@dataclass(frozen=True, slots=True)
class PlacedBatch:
    """A batch at its place in a produce object (what a ``batches`` row records of it)."""

    header: BatchHeader  # as the producer sent it (producer id, epoch, sequences, flags)
    byte_offset: int
    byte_size: int
    max_timestamp_ms: int  # the append time for LogAppendTime topics
    timestamp_type: int  # TIMESTAMP_TYPE_CREATE_TIME or TIMESTAMP_TYPE_LOG_APPEND_TIME


@dataclass(frozen=True, slots=True)
class PlacedAppend:
    """One request's batches for one partition, placed in an object: the unit the commit answers."""

    topic_id: uuid.UUID
    partition: int
    batches: tuple[PlacedBatch, ...]
    append_time_ms: int  # broker time when the object was built
    log_append_time: bool
    txn: TxnWrite | None = None  # a transactional produce: verified in the commit (KIP-890)


@dataclass(frozen=True, slots=True)
class ProduceObject:
    """An object ready to upload: its key, its bytes and where every request's batches are in it."""

    key: str
    data: bytes
    appends: tuple[PlacedAppend, ...]


def new_object_key(prefix: str, now_ms: int) -> str:
    """A key never used before: ``<prefix>/diskless/<yyyy-mm-dd>/<uuid4>.batches`` (the date, UTC,
    keeps listings of old objects cheap; the uuid makes every upload attempt distinct)."""
    day = datetime.datetime.fromtimestamp(now_ms / 1000, tz=datetime.UTC).strftime("%Y-%m-%d")
    path = f"diskless/{day}/{uuid.uuid4().hex}{OBJECT_SUFFIX}"
    prefix = prefix.strip("/")
    return f"{prefix}/{path}" if prefix else path


def build_produce_object(key: str, appends: Sequence[ValidatedAppend], now_ms: int) -> ProduceObject:
    """Lay the batches of ``appends`` out back to back (in the given order) and record each one's
    byte range; LogAppendTime topics get ``now_ms`` stamped in (header rewritten, CRC recomputed)."""
    chunks: list[bytes | memoryview] = []
    position = 0
    placed_appends: list[PlacedAppend] = []
    for append in appends:
        placed: list[PlacedBatch] = []
        for header, batch in append.batches:
            if append.log_append_time:
                prepared = prepare_log_append_time(batch, 0, now_ms)
                chunks.append(prepared.head)
                chunks.append(prepared.tail)
                size = prepared.size_bytes
                placed.append(PlacedBatch(header, position, size, now_ms, TIMESTAMP_TYPE_LOG_APPEND_TIME))
            else:
                chunks.append(batch)
                size = len(batch)
                placed.append(PlacedBatch(header, position, size, header.max_timestamp, TIMESTAMP_TYPE_CREATE_TIME))
            position += size
        placed_appends.append(
            PlacedAppend(append.topic_id, append.partition, tuple(placed), now_ms, append.log_append_time, append.txn)
        )
    return ProduceObject(key, b"".join(chunks), tuple(placed_appends))
