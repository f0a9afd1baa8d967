"""Read one offset range of one partition into pyarrow RecordBatches (the source's task body).

read_committed follows Kafka's consumer rules (KIP-98): Fetch with isolation_level=1 returns data
only below the last stable offset plus the list of aborted transactions in the returned range
(producer id, first offset). A transactional batch is dropped when its producer has an aborted
transaction that started at or before the batch, until that producer's ABORT marker; control
batches (the markers themselves) never reach the user. Offsets therefore have gaps, so the
reader advances by batch boundaries, not by counting records.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pyarrow as pa
from kio.schema.errors import ErrorCode

from oncestream.errors import CorruptRecordError
from oncestream.protocol import record_batch as rb
from oncestream.protocol.aborted_filter import AbortedFilter
from oncestream.protocol.batch_walk import iter_complete_batches
from oncestream.protocol.compression import decompress
from oncestream.protocol.varint import read_varint
from oncestream.spark.errors import BrokerRequestError, DataLossError
from oncestream.spark.log_client import ClientSettings, LogClient

HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
ARROW_SCHEMA = pa.schema([
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp", pa.timestamp("us", tz="UTC")),
    ("timestampType", pa.int32()),
    ("headers", HEADER_TYPE),
])
SPARK_SCHEMA_DDL = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
    "timestampType int, headers array<struct<key:string,value:binary>>"
)
ROWS_PER_ARROW_BATCH = 8192
EMPTY_FETCHES_BEFORE_CHECK = 3


@dataclass(frozen=True)
class OffsetRange:
    """[start, end) of one partition, with everything a task needs to read it (picklable)."""

    topic: str
    partition: int
    start: int
    end: int
    bootstrap_servers: str
    read_committed: bool
    fail_on_data_loss: bool
    client: ClientSettings = ClientSettings()  # the query's kafka.* client properties


class _Columns:
    """Column buffers for one Arrow batch."""

    def __init__(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.timestamps_us: list[int] = []
        self.timestamp_types: list[int] = []
        self.headers: list[list[dict] | None] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def to_arrow(self, topic: str, partition: int) -> pa.RecordBatch:
        """The buffered rows as one Arrow batch with the source schema."""
        n = len(self.offsets)
        return pa.RecordBatch.from_arrays([
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.array([topic] * n, pa.string()),
            pa.array([partition] * n, pa.int32()),
            pa.array(self.offsets, pa.int64()),
            pa.array(self.timestamps_us, pa.timestamp("us", tz="UTC")),
            pa.array(self.timestamp_types, pa.int32()),
            pa.array(self.headers, HEADER_TYPE),
        ], schema=ARROW_SCHEMA)


_varint = read_varint


def _append_records(header: rb.BatchHeader, batch: memoryview, cols: _Columns, position: int, end: int) -> None:
    """Decode a data batch's records straight into the column buffers, keeping offsets in
    [position, end).

    The same record layout as ``protocol.records`` (the codec property test checks they agree),
    but columnar, with one- and two-byte varints read inline and ``varint.read_varint`` called
    for longer ones: this runs once per record on the read path, where a call per varint (and
    the generic decoder's per-record objects) costs more than the bytes; the same measurement as
    in ``client.fetch_decoder`` applies.
    """
    buf = decompress(header.compression, batch[rb.HEADER_SIZE_BYTES:])
    keys, values, offsets, stamps, types, headers = (
        cols.keys, cols.values, cols.offsets, cols.timestamps_us, cols.timestamp_types, cols.headers)
    log_append = bool(header.attributes & rb.ATTR_TIMESTAMP_TYPE_LOG_APPEND)
    ts_type = 1 if log_append else 0
    base_offset, base_ts, max_ts = header.base_offset, header.base_timestamp, header.max_timestamp
    pos = 0
    size = len(buf)
    for _ in range(header.record_count):
        b = buf[pos]
        if b < 0x80:
            length, pos = (b >> 1) ^ -(b & 1), pos + 1
        elif buf[pos + 1] < 0x80:  # two bytes: a length from 64 to 8191 (a 1 KiB value)
            raw = (b & 0x7F) | (buf[pos + 1] << 7)
            length, pos = (raw >> 1) ^ -(raw & 1), pos + 2
        else:
            length, pos = _varint(buf, pos)
        record_end = pos + length
        if length < 0 or record_end > size:
            raise CorruptRecordError("record length out of bounds")
        pos += 1  # record attributes
        b = buf[pos]
        if b < 0x80:
            ts_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            ts_delta, pos = _varint(buf, pos)
        b = buf[pos]
        if b < 0x80:
            offset_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            offset_delta, pos = _varint(buf, pos)
        offset = base_offset + offset_delta
        if offset < position or offset >= end:
            pos = record_end
            continue
        b = buf[pos]
        if b < 0x80:
            klen, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            klen, pos = _varint(buf, pos)
        if klen >= 0:
            key, pos = buf[pos:pos + klen], pos + klen
        else:
            key = None
        b = buf[pos]
        if b < 0x80:
            vlen, pos = (b >> 1) ^ -(b & 1), pos + 1
        elif buf[pos + 1] < 0x80:  # two bytes: a length from 64 to 8191 (a 1 KiB value)
            raw = (b & 0x7F) | (buf[pos + 1] << 7)
            vlen, pos = (raw >> 1) ^ -(raw & 1), pos + 2
        else:
            vlen, pos = _varint(buf, pos)
        if vlen >= 0:
            value, pos = buf[pos:pos + vlen], pos + vlen
        else:
            value = None
        count, pos = _varint(buf, pos) if buf[pos] >= 0x80 else ((buf[pos] >> 1) ^ -(buf[pos] & 1), pos + 1)
        hdrs = None
        if count > 0:
            hdrs = []
            for _h in range(count):
                hk_len, pos = _varint(buf, pos)
                hkey = buf[pos:pos + hk_len].decode("utf-8", "replace") if hk_len >= 0 else ""
                pos += max(hk_len, 0)
                hv_len, pos = _varint(buf, pos)
                hval = buf[pos:pos + hv_len] if hv_len >= 0 else None
                pos += max(hv_len, 0)
                hdrs.append({"key": hkey, "value": hval})
        if pos != record_end:
            raise CorruptRecordError("record length does not match its fields")
        keys.append(key)
        values.append(value)
        offsets.append(offset)
        stamps.append((max_ts if log_append else base_ts + ts_delta) * 1000)
        types.append(ts_type)
        headers.append(hdrs)


class ColumnDecoder:
    """Turns one partition's fetched records into Arrow batches: the reader's position, its
    read_committed filter (one for the whole range, fed each response's aborted list) and the
    column buffers."""

    def __init__(self, topic: str, partition: int, position: int, end: int, *, read_committed: bool) -> None:
        self.topic = topic
        self.partition = partition
        self.position = position  # next offset to read
        self.end = end
        self._filter = AbortedFilter(read_committed)
        self._cols = _Columns()

    def feed(self, records: bytes, aborted: Iterable[tuple[int, int]] = ()) -> Iterator[pa.RecordBatch]:
        """Decode the complete batches of one fetch response (``aborted``: its aborted
        transactions as (producer id, first offset)), yielding each Arrow batch that fills up."""
        self._filter.add(aborted)
        hides = self._filter.hides_header
        for header, batch in iter_complete_batches(records):
            hidden = hides(header, batch)  # every batch, in order: markers end aborted ranges
            if header.next_offset <= self.position:
                continue  # a fetch may return a batch that starts before the fetch offset
            if not hidden:
                try:
                    _append_records(header, batch, self._cols, self.position, self.end)
                except IndexError as exc:  # an inline varint read ran off the records
                    raise CorruptRecordError(f"record runs past the batch at offset {header.base_offset}") from exc
            self.position = header.next_offset
            if len(self._cols) >= ROWS_PER_ARROW_BATCH:
                yield self._cols.to_arrow(self.topic, self.partition)
                self._cols = _Columns()
            if self.position >= self.end:
                break

    def flush(self) -> pa.RecordBatch | None:
        """The rows buffered so far as one Arrow batch (None if there are none)."""
        if not len(self._cols):
            return None
        batch = self._cols.to_arrow(self.topic, self.partition)
        self._cols = _Columns()
        return batch


def decode_to_arrow(records: bytes, topic: str, partition: int, position: int, end: int, *,
                    read_committed: bool, aborted: Iterable[tuple[int, int]] = ()) -> Iterator[pa.RecordBatch]:
    """The Arrow batches of one fetch response's records in [position, end) (benchmarks, tests)."""
    decoder = ColumnDecoder(topic, partition, position, end, read_committed=read_committed)
    yield from decoder.feed(records, aborted)
    last = decoder.flush()
    if last is not None:
        yield last


def read_range(rng: OffsetRange, client: LogClient | None = None) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``rng`` as Arrow batches; raise DataLossError (failOnDataLoss) when
    offsets in the range are gone."""
    own = client is None
    log = client or LogClient(rng.bootstrap_servers, client_id="oncestream-spark-source", settings=rng.client)
    try:
        yield from _read(rng, log)
    finally:
        if own:
            log.close()


def _data_loss(rng: OffsetRange, message: str) -> bool:
    """Raise under failOnDataLoss; otherwise tell the caller to go on without the lost data."""
    if rng.fail_on_data_loss:
        raise DataLossError(
            f"{rng.topic}[{rng.partition}]: {message}. Some data may have been lost. Set "
            "failOnDataLoss=false to skip it instead of failing the query.")
    return True


def _read(rng: OffsetRange, log: LogClient) -> Iterator[pa.RecordBatch]:
    tp = (rng.topic, rng.partition)
    decoder = ColumnDecoder(rng.topic, rng.partition, rng.start, rng.end, read_committed=rng.read_committed)
    empty_fetches = 0
    settings = rng.client
    while decoder.position < rng.end:
        position = decoder.position
        try:
            result = log.fetch(tp, position, max_bytes=settings.fetch_max_bytes, read_committed=rng.read_committed,
                               partition_max_bytes=settings.partition_fetch_max_bytes,
                               min_bytes=settings.fetch_min_bytes, max_wait_ms=settings.fetch_max_wait_ms)
        except BrokerRequestError as exc:
            _data_loss(rng, f"cannot fetch at offset {position} ({exc})")
            break
        if result.error == ErrorCode.offset_out_of_range:
            _data_loss(rng, f"offset {position} is out of range (log start {result.log_start_offset})")
            if 0 <= result.log_start_offset and position < result.log_start_offset:
                decoder.position = result.log_start_offset
                continue
            break
        if result.error != ErrorCode.none:
            raise BrokerRequestError(f"Fetch {rng.topic}[{rng.partition}]: {result.error.name}")
        yield from decoder.feed(result.records, result.aborted)
        advanced = decoder.position > position
        if advanced:
            empty_fetches = 0
            continue
        empty_fetches += 1
        if empty_fetches >= EMPTY_FETCHES_BEFORE_CHECK:
            # The range was planned below the end offset the broker reported, so an empty answer
            # that persists means the data went away (topic recreated, log truncated).
            visible = result.last_stable_offset if rng.read_committed and result.last_stable_offset >= 0 \
                else result.high_watermark
            if visible <= position:
                _data_loss(rng, f"offsets [{position}, {rng.end}) are no longer in the log "
                                f"(it now ends at {visible})")
                break
    last = decoder.flush()
    if last is not None:
        yield last
