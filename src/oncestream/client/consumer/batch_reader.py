"""Columnar reading: a consumer that hands out one partition's fetched records as key and value
lists instead of ``Message`` objects.

For readers that only want keys and values in bulk (the state store materializer applies a
changelog to RocksDB): per record it makes the key and value ``bytes`` and nothing else. The
records are decoded by the C column builder of the Spark reader (``oncestream._native.
record_columns``, the same walk and the same checks), the batches walked by
``protocol.batch_walk`` and filtered by the one read_committed filter (``protocol.aborted_filter``).
Without the extension (or with ``ONCESTREAM_NATIVE=0``) the client's own decoder
(``fetch_decoder.decode_partition``) decodes and its messages' keys and values are taken: the
same results, at the message path's cost.

Everything else (assignment, positions, ListOffsets, errors, the fetcher thread running ahead)
is ``Consumer``'s: ``ColumnConsumer`` only changes what one completed fetch decodes to.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Sequence
from types import ModuleType
from typing import Any

from oncestream.client.common.message import Message
from oncestream.client.consumer.consumer import Consumer
from oncestream.client.consumer.fetch_decoder import decode_partition
from oncestream.client.consumer.fetcher import CompletedFetch, PartitionState
from oncestream.errors import CorruptRecordError
from oncestream.protocol import record_batch as rb
from oncestream.protocol.aborted_filter import AbortedFilter
from oncestream.protocol.batch_walk import iter_complete_batches
from oncestream.protocol.compression import COMPRESSION_NONE, decompress

_native: ModuleType | None
try:
    from oncestream._native import record_columns as _native
except ImportError:  # not built: decode_partition takes over
    _native = None

_NO_END = (1 << 63) - 1


class PartitionColumns:
    """The visible records of one partition's fetch response, column-wise.

    ``keys[i]`` / ``values[i]`` are ``bytes`` or None (a null key or value, e.g. a tombstone);
    ``offsets[i]`` the record's offset (an int sequence, not a list of objects); ``next_offset``
    the offset after the response's last complete batch, past aborted batches and transaction
    markers too: the reader's position once every record here is consumed.
    """

    __slots__ = ("_offset", "keys", "next_offset", "null_keys", "null_values", "offsets", "partition", "topic",
                 "values")

    def __init__(self, topic: str, partition: int, keys: list[bytes | None], values: list[bytes | None],
                 offsets: Sequence[int], next_offset: int, *, null_keys: int, null_values: int) -> None:
        self.topic = topic
        self.partition = partition
        self.keys = keys
        self.values = values
        self.offsets = offsets
        self.next_offset = next_offset
        self.null_keys = null_keys      # how many keys are None
        self.null_values = null_values  # how many values are None (tombstones)
        # The consumer reads ``_offset`` of the last item handed out when only part of its
        # decoded list was taken; a chunk is always taken whole, this keeps that read valid.
        self._offset = next_offset - 1

    def __len__(self) -> int:
        return len(self.keys)

    def error(self) -> None:
        """Never an error (errors come as ``Message`` objects, as from ``Consumer.consume``)."""
        return None


def _split(column: tuple[Any, int, Any, Any], rows: int) -> list[bytes | None]:
    """``bytes`` per row of one of the builder's variable-width columns (validity, null count,
    int32 offsets, data: buffer-protocol objects)."""
    raw_valid, nulls, raw_offsets, raw_data = column
    valid = None if raw_valid is None else memoryview(raw_valid)
    data = bytes(raw_data)
    ends = memoryview(raw_offsets).cast("i").tolist()
    out: list[bytes | None] = [data[a:b] for a, b in itertools.pairwise(ends)]
    if nulls and valid is not None:
        for i in range(rows):
            if not valid[i >> 3] & (1 << (i & 7)):
                out[i] = None
    return out


def native_available() -> bool:
    """The C column builder is built and importable."""
    return _native is not None


def decode_columns(records: bytes, topic: str, partition: int, position: int, *, read_committed: bool,
                   aborted: Iterable[tuple[int, int]] = (), check_crcs: bool = False,
                   native: bool | None = None) -> PartitionColumns:
    """The visible records at or after ``position`` of one partition's fetch response.

    ``aborted``: the response's aborted transactions (producer id, first offset), used under
    ``read_committed``. ``native`` None: the C builder when built and ``ONCESTREAM_NATIVE`` is
    not ``0``. Raises CorruptRecordError on malformed batches or records.
    """
    if native is None:
        native = _native is not None and os.environ.get("ONCESTREAM_NATIVE", "1") != "0"
    if not native or _native is None:
        return _columns_from_messages(records, topic, partition, position, read_committed=read_committed,
                                      aborted=aborted, check_crcs=check_crcs)
    hides = AbortedFilter(read_committed, aborted).hides_header
    builder = _native.ColumnBuilder()
    next_offset = -1
    for header, batch in iter_complete_batches(records, verify_crc=check_crcs):
        hidden = hides(header, batch)  # every batch, in order: a marker ends an aborted range
        next_offset = header.next_offset
        if hidden or next_offset <= position:
            continue
        body = batch[rb.HEADER_SIZE_BYTES:]
        section = body if header.compression == COMPRESSION_NONE else decompress(header.compression, body)
        try:
            builder.append(section, header.record_count, header.base_offset, header.base_timestamp,
                           header.max_timestamp, bool(header.attributes & rb.ATTR_TIMESTAMP_TYPE_LOG_APPEND),
                           position, _NO_END)
        except OverflowError as exc:  # a timestamp beyond the builder's int64 microseconds
            raise CorruptRecordError(f"record field out of range in batch at offset {header.base_offset}: {exc}") \
                from exc
    rows, offsets, _stamps, _types, keys, values, _lists, _hkeys, _hvalues = builder.finish()
    return PartitionColumns(topic, partition, _split(keys, rows), _split(values, rows),
                            memoryview(offsets).cast("q"), next_offset, null_keys=keys[1], null_values=values[1])


def _columns_from_messages(records: bytes, topic: str, partition: int, position: int, *, read_committed: bool,
                           aborted: Iterable[tuple[int, int]], check_crcs: bool) -> PartitionColumns:
    """The fallback: the client's message decoder, its keys and values taken out."""
    result = decode_partition(records, topic, partition, position, read_committed=read_committed,
                              aborted=aborted, check_crcs=check_crcs)
    messages = result.messages
    keys = [m._key for m in messages]
    values = [m._value for m in messages]
    return PartitionColumns(topic, partition, keys, values, [m._offset for m in messages], result.next_offset,
                            null_keys=keys.count(None), null_values=values.count(None))


class ColumnConsumer(Consumer):
    """A ``Consumer`` whose ``consume`` returns ``PartitionColumns`` (one per completed fetch of
    one partition, taken whole) instead of messages; an error still comes alone, as a one-item
    list holding a ``Message`` with ``error()`` set. ``num_messages`` counts chunks. Positions,
    ``position()``, assignment and configuration are ``Consumer``'s (read_committed honoured).
    ``poll`` (one item) works the same way; the message API is otherwise unchanged.
    """

    def consume_columns(self, max_chunks: int = 1, timeout: float | None = None) -> list[PartitionColumns | Message]:
        """Up to ``max_chunks`` partition chunks, waiting up to ``timeout`` seconds for the first."""
        return self.consume(max_chunks, timeout)  # type: ignore[return-value]

    def _decode_fetch(self, fetch: CompletedFetch, state: PartitionState) -> tuple[list[Any], int]:
        chunk = decode_columns(fetch.records, state.topic, state.partition, state.position or 0,
                               read_committed=self._read_committed, aborted=fetch.aborted or (),
                               check_crcs=self._check_crcs)
        return ([chunk] if len(chunk) else []), chunk.next_offset
