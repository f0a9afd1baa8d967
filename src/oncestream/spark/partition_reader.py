"""Read one offset range of one partition into pyarrow RecordBatches (the source's task body).

read_committed follows Kafka's consumer rules (KIP-98): Fetch with isolation_level=1 returns data
only below the last stable offset plus the list of aborted transactions in the returned range
(producer id, first offset). A transactional batch is dropped when its producer has an aborted
transaction that started at or before the batch, until that producer's ABORT marker; control
batches (the markers themselves) never reach the user. Offsets therefore have gaps, so the
reader advances by batch boundaries, not by counting records.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import pyarrow as pa
from kio.schema.errors import ErrorCode

from oncestream.errors import CorruptRecordError
from oncestream.protocol.aborted_filter import AbortedFilter
from oncestream.protocol.batch_walk import complete_batches_end, iter_complete_batches
from oncestream.spark.arrow_columns import (
    ARROW_SCHEMA,
    HEADER_TYPE,
    PythonColumns,
    append_records,
    new_builder,
)
from oncestream.spark.errors import BrokerRequestError, DataLossError
from oncestream.spark.log_client import ClientSettings, FetchResult, LogClient

__all__ = ["ARROW_SCHEMA", "HEADER_TYPE", "SPARK_SCHEMA_DDL", "ColumnDecoder", "OffsetRange", "decode_to_arrow",
           "read_range"]

SPARK_SCHEMA_DDL = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
    "timestampType int, headers array<struct<key:string,value:binary>>"
)
ROWS_PER_ARROW_BATCH = 8192
# An Arrow batch is also cut once its Kafka batches held this many decompressed record bytes:
# binary columns have int32 offsets (2 GiB), and Spark's worker holds a whole batch in memory.
SECTION_BYTES_PER_ARROW_BATCH = 64 * 1024 * 1024
EMPTY_FETCHES_BEFORE_CHECK = 3

# The pure-Python builder under its former names (tests compare the builders through them).
_Columns = PythonColumns
_append_records = append_records


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
    client: ClientSettings = field(default_factory=ClientSettings)  # the query's kafka.* client properties


class ColumnDecoder:
    """Turns one partition's fetched records into Arrow batches: the reader's position, its
    read_committed filter (one for the whole range, fed each response's aborted list) and the
    column builder (``arrow_columns.new_builder``: the C one when built; ``native`` forces
    either)."""

    def __init__(self, topic: str, partition: int, position: int, end: int, *, read_committed: bool,
                 native: bool | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.position = position  # next offset to read
        self.end = end
        self._filter = AbortedFilter(read_committed)
        self._cols = new_builder(native)

    def feed(self, records: bytes | memoryview, aborted: Iterable[tuple[int, int]] = ()) -> Iterator[pa.RecordBatch]:
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
                    self._cols.append(header, batch, self.position, self.end)
                except IndexError as exc:  # an inline varint read ran off the records
                    raise CorruptRecordError(f"record runs past the batch at offset {header.base_offset}") from exc
            self.position = header.next_offset
            if len(self._cols) >= ROWS_PER_ARROW_BATCH or self._cols.section_bytes >= SECTION_BYTES_PER_ARROW_BATCH:
                yield self._cols.to_arrow(self.topic, self.partition)
            if self.position >= self.end:
                break

    def flush(self) -> pa.RecordBatch | None:
        """The rows buffered so far as one Arrow batch (None if there are none)."""
        if not len(self._cols):
            return None
        return self._cols.to_arrow(self.topic, self.partition)


def decode_to_arrow(records: bytes | memoryview, topic: str, partition: int, position: int, end: int, *,
                    read_committed: bool, aborted: Iterable[tuple[int, int]] = (),
                    native: bool | None = None) -> Iterator[pa.RecordBatch]:
    """The Arrow batches of one fetch response's records in [position, end) (benchmarks, tests)."""
    decoder = ColumnDecoder(topic, partition, position, end, read_committed=read_committed, native=native)
    yield from decoder.feed(records, aborted)
    last = decoder.flush()
    if last is not None:
        yield last


class FetchAhead:
    """Fetches of one partition with the next one already in flight (one background thread).

    While Spark consumes the Arrow batches of one response, the next Fetch (at the offset after
    the response's last complete batch, known from the batch headers alone) runs on the thread:
    the socket wait and the broker's work overlap the decoding. At most one fetch is ahead, so at
    most one extra response is held in memory. The ``LogClient`` is used by one thread at a time:
    ``fetch`` first collects (or waits out) the fetch in flight.
    """

    def __init__(self, log: LogClient, rng: OffsetRange) -> None:
        self._log = log
        self._rng = rng
        self._pool: ThreadPoolExecutor | None = None
        self._ahead: tuple[int, Future[FetchResult]] | None = None

    def _call(self, offset: int) -> FetchResult:
        settings = self._rng.client
        return self._log.fetch((self._rng.topic, self._rng.partition), offset, max_bytes=settings.fetch_max_bytes,
                               read_committed=self._rng.read_committed,
                               partition_max_bytes=settings.partition_fetch_max_bytes,
                               min_bytes=settings.fetch_min_bytes, max_wait_ms=settings.fetch_max_wait_ms)

    def fetch(self, offset: int) -> FetchResult:
        """The response of a Fetch at ``offset``: the one in flight if it is for that offset."""
        ahead = self._collect()
        if ahead is not None and ahead[0] == offset:
            return ahead[1].result()
        return self._call(offset)

    def start(self, offset: int) -> None:
        """Send the Fetch at ``offset`` now, on the background thread."""
        self._collect()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="oncestream-fetch-ahead")
        self._ahead = (offset, self._pool.submit(self._call, offset))

    def _collect(self) -> tuple[int, Future[FetchResult]] | None:
        """Take the fetch in flight, once it is done (its outcome stays in the future)."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead[1].exception()  # waits; an error is raised only if its offset is the one wanted
        return ahead

    def close(self) -> None:
        """Wait for the fetch in flight (the connection must be idle before it closes); stop the thread."""
        self._collect()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def read_range(rng: OffsetRange, client: LogClient | None = None) -> Generator[pa.RecordBatch, None, None]:
    """Yield the records of ``rng`` as Arrow batches; raise DataLossError (failOnDataLoss) when
    offsets in the range are gone.

    The next Fetch runs ahead on a background thread (``FetchAhead``): a caller's ``client`` is
    in use until the generator is exhausted or closed, which waits for a fetch in flight."""
    own = client is None
    log = client or LogClient(rng.bootstrap_servers, client_id="oncestream-spark-source", settings=rng.client)
    fetches = FetchAhead(log, rng)
    try:
        yield from _read(rng, fetches)
    finally:
        fetches.close()
        if own:
            log.close()


def _data_loss(rng: OffsetRange, message: str) -> bool:
    """Raise under failOnDataLoss; otherwise tell the caller to go on without the lost data."""
    if rng.fail_on_data_loss:
        raise DataLossError(
            f"{rng.topic}[{rng.partition}]: {message}. Some data may have been lost. Set "
            "failOnDataLoss=false to skip it instead of failing the query.")
    return True


def _read(rng: OffsetRange, fetches: FetchAhead) -> Iterator[pa.RecordBatch]:
    decoder = ColumnDecoder(rng.topic, rng.partition, rng.start, rng.end, read_committed=rng.read_committed)
    empty_fetches = 0
    while decoder.position < rng.end:
        position = decoder.position
        try:
            result = fetches.fetch(position)
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
        # The offset after this response's complete batches is where the decoder will stand.
        next_offset = complete_batches_end(result.records)[1]
        if position < next_offset < rng.end:
            fetches.start(next_offset)
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
