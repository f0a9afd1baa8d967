"""The read side: Spark's DataSourceStreamReader (micro-batches) and DataSourceReader (batch).

Offsets are Spark's: the reader returns ``{"topic": {"0": 123}}`` dicts and Spark keeps them in
its checkpoint (offset log); the source keeps no offsets of its own. Planning (latestOffset,
partitions) runs on the driver; ``read`` runs in tasks and fetches one offset range, read_committed
unless ``kafka.isolation.level=read_uncommitted``.

Admission control follows Spark's Kafka source too: ``maxOffsetsPerTrigger`` caps a micro-batch,
``minOffsetsPerTrigger`` skips triggers until that many offsets are available or ``maxTriggerDelay``
has passed since the last batch, and Trigger.AvailableNow reads up to the offsets that were latest
when the query started. Timestamps (``startingTimestamp`` and friends) become offsets through
ListOffsets by timestamp.

Partition changes follow Spark's Kafka source: a new partition is read from its earliest offset; a
partition that disappeared, an offset below the log start, or an end offset below the start
(topic recreated) is data loss, which fails the query unless ``failOnDataLoss=false``.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from oncestream.spark.errors import DataLossError, OnceStreamSparkError, OptionError
from oncestream.spark.log_client import LogClient, TopicPartition
from oncestream.spark.options import (
    EARLIEST,
    LATEST,
    NO_MATCH_ERROR,
    OffsetSpec,
    SourceOptions,
    offsets_from_json,
    offsets_to_json,
)
from oncestream.spark.partition_reader import OffsetRange, read_range
from oncestream.spark.plugins import trigger_clock

log = logging.getLogger("oncestream.spark")

# Without minPartitions/maxRecordsPerPartition a range this long is still split, so one busy
# Kafka partition does not become one huge task.
DEFAULT_MAX_RECORDS_PER_INPUT_PARTITION = 1_000_000


class OffsetRangePartition(InputPartition):
    """One Spark input partition: an offset range of one Kafka partition."""

    def __init__(self, rng: OffsetRange) -> None:
        super().__init__(rng)
        self.rng = rng


def plan_ranges(
    bounds: Mapping[TopicPartition, tuple[int, int]],
    *,
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> list[tuple[TopicPartition, int, int]]:
    """Split ``{tp: (start, end)}`` into ``(tp, start, end)`` ranges: one per Kafka partition, more
    for long ranges (maxRecordsPerPartition) or to reach minPartitions (proportionally to size,
    as Spark's KafkaOffsetRangeCalculator does). Empty ranges are left out."""
    nonempty = {tp: (s, e) for tp, (s, e) in sorted(bounds.items()) if e > s}
    total = sum(e - s for s, e in nonempty.values())
    limit = max_records_per_partition or DEFAULT_MAX_RECORDS_PER_INPUT_PARTITION
    out: list[tuple[TopicPartition, int, int]] = []
    for tp, (start, end) in nonempty.items():
        size = end - start
        pieces = math.ceil(size / limit)
        if min_partitions and len(nonempty) < min_partitions and total:
            pieces = max(pieces, round(size / total * min_partitions))
        pieces = max(1, min(pieces, size))
        for i in range(pieces):
            lo = start + size * i // pieces
            hi = start + size * (i + 1) // pieces
            if hi > lo:
                out.append((tp, lo, hi))
    if sum(hi - lo for _, lo, hi in out) != total:
        raise OnceStreamSparkError("planned ranges must cover every offset once")
    return out


def rate_limit(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
               max_rows: int) -> dict[TopicPartition, int]:
    """End offsets that admit at most ``max_rows`` offsets in total, shared among partitions in
    proportion to what each has available (Spark's maxOffsetsPerTrigger rule)."""
    available = {tp: max(0, latest[tp] - start.get(tp, latest[tp])) for tp in latest}
    total = sum(available.values())
    if total <= max_rows:
        return dict(latest)
    end: dict[TopicPartition, int] = {}
    granted = 0
    for tp in sorted(latest):
        share = int(available[tp] * max_rows / total)
        end[tp] = start.get(tp, latest[tp]) + share
        granted += share
    # Hand out the rounding remainder so a batch always makes progress.
    for tp in sorted(latest, key=lambda t: -available[t]):
        if granted >= max_rows:
            break
        if end[tp] < latest[tp]:
            end[tp] += 1
            granted += 1
    if granted > max_rows:
        raise OnceStreamSparkError(f"planned {granted} rows over the limit of {max_rows}")
    return end


class _Planner:
    """Driver-side offset resolution shared by the stream and batch readers."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._client: LogClient | None = None

    @property
    def client(self) -> LogClient:
        """The driver's connections, opened on first use."""
        if self._client is None:
            self._client = LogClient(self.opts.bootstrap_servers, client_id="oncestream-spark-driver",
                                     settings=self.opts.client)
        return self._client

    def close(self) -> None:
        """Close the driver's connections."""
        if self._client is not None:
            self._client.close()
            self._client = None

    def current_partitions(self) -> list[TopicPartition]:
        """The partitions the subscription covers right now."""
        sub = self.opts.subscription
        if sub.kind == "assign":
            existing = self.client.metadata({t for t, _ in sub.assigned})
            return [tp for tp in sub.assigned if tp[1] in existing.get(tp[0], ())]
        topics = self.client.metadata(sub.topics if sub.kind == "subscribe" else None)
        return sorted((t, p) for t, parts in topics.items() if sub.matches(t) for p in parts)

    def earliest(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """Log start offsets."""
        return self.client.list_offsets(tps, EARLIEST, read_committed=False) if tps else {}

    def latest(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """End offsets: the last stable offset under read_committed, else the high watermark."""
        if not tps:
            return {}
        return self.client.list_offsets(tps, LATEST, read_committed=self.opts.read_committed)

    def resolve(self, spec: OffsetSpec, tps: Sequence[TopicPartition], default: int, *,
                starting: bool) -> dict[TopicPartition, int]:
        """Concrete offsets for one end of the range (``starting``: the start, else the end)."""
        if spec.by_timestamp:
            return self._resolve_timestamps(spec, tps, starting=starting)
        wanted = {tp: spec.offset_for(tp, default) for tp in tps}
        for tp in spec.per_partition:
            if tp not in wanted:
                raise OptionError(f"offsets given for {tp[0]}[{tp[1]}], which is not subscribed or does not exist")
        earliest = self.earliest([tp for tp, o in wanted.items() if o == EARLIEST])
        latest = self.latest([tp for tp, o in wanted.items() if o == LATEST])
        return {tp: earliest.get(tp, latest.get(tp, o)) if o < 0 else o for tp, o in wanted.items()}

    def _resolve_timestamps(self, spec: OffsetSpec, tps: Sequence[TopicPartition], *,
                            starting: bool) -> dict[TopicPartition, int]:
        """The first offset whose record timestamp is at or after the requested one (ListOffsets
        by timestamp). Where there is none: an end is the latest offset; a start fails
        (startingOffsetsByTimestampStrategy=error) or is the latest offset (latest)."""
        if spec.kind == "timestamp_json":
            if set(spec.per_partition) != set(tps):
                name = "startingOffsetsByTimestamp" if starting else "endingOffsetsByTimestamp"
                raise OptionError(f"{name} must give a timestamp for every subscribed partition, as in "
                                  f"Spark: given {sorted(spec.per_partition)}, subscribed {sorted(tps)}")
            wanted = dict(spec.per_partition)
        else:
            if spec.timestamp_ms is None:
                raise OptionError("a timestamp offset spec needs a timestamp or per-partition timestamps")
            wanted = {tp: spec.timestamp_ms for tp in tps}
        by_timestamp: dict[int, list[TopicPartition]] = {}
        for tp, timestamp_ms in wanted.items():
            by_timestamp.setdefault(timestamp_ms, []).append(tp)
        found: dict[TopicPartition, int] = {}
        for timestamp_ms, group in sorted(by_timestamp.items()):
            found.update(self.client.list_offsets(group, timestamp_ms, read_committed=self.opts.read_committed))
        unmatched = sorted(tp for tp in wanted if found.get(tp, -1) < 0)
        if unmatched and starting and spec.no_match == NO_MATCH_ERROR:
            tp = unmatched[0]
            raise OptionError(f"No offset matched from request of topic-partition {tp[0]}-{tp[1]} and timestamp "
                              f"{wanted[tp]}. Set startingOffsetsByTimestampStrategy=latest to start such "
                              "partitions at their latest offset instead.")
        found.update(self.latest(unmatched))
        return {tp: found[tp] for tp in wanted}

    def data_loss(self, message: str) -> None:
        """Fail (failOnDataLoss=true) or warn and go on."""
        if self.opts.fail_on_data_loss:
            raise DataLossError(f"{message}. Some data may have been lost. Set failOnDataLoss=false "
                                "to go on without it instead of failing the query.")
        log.warning("%s; going on because failOnDataLoss=false", message)

    def input_partitions(self, start: Mapping[TopicPartition, int],
                         end: Mapping[TopicPartition, int]) -> list[OffsetRangePartition]:
        """Tasks for [start, end). Partitions without a start offset are new: they start at their
        earliest offset."""
        new = [tp for tp in end if tp not in start]
        first = self.earliest(new)
        bounds: dict[TopicPartition, tuple[int, int]] = {}
        for tp, stop in end.items():
            begin = start[tp] if tp in start else first[tp]
            if tp in first and begin != 0:
                self.data_loss(f"new partition {tp[0]}[{tp[1]}] starts at offset {begin}, not 0")
            if stop < begin:
                self.data_loss(f"{tp[0]}[{tp[1]}]: end offset {stop} is below start offset {begin} "
                               "(was the topic recreated?)")
                continue
            bounds[tp] = (begin, stop)
        o = self.opts
        return [
            OffsetRangePartition(OffsetRange(tp[0], tp[1], lo, hi, o.bootstrap_servers, o.read_committed,
                                             o.fail_on_data_loss, o.client))
            for tp, lo, hi in plan_ranges(bounds, min_partitions=o.min_partitions,
                                          max_records_per_partition=o.max_records_per_partition)
        ]


def _monotonic_ms() -> float:
    return time.monotonic() * 1000


class MinOffsetsGate:
    """minOffsetsPerTrigger with maxTriggerDelay (Spark's ``delayBatch``): a trigger runs a batch
    when ``min_rows`` offsets are available, or when ``max_delay_ms`` has passed since the last
    batch it admitted. The first trigger always runs, as in Spark (its last trigger time starts at
    zero). Sans-io: the clock is injected."""

    def __init__(self, min_rows: int, max_delay_ms: int, clock_ms: Callable[[], float] = _monotonic_ms) -> None:
        self.min_rows = min_rows
        self.max_delay_ms = max_delay_ms
        self._clock_ms = clock_ms
        self._last_trigger_ms: float | None = None

    def admit(self, available_rows: int) -> bool:
        """Whether this trigger runs a batch; remembers the time when it does."""
        now_ms = self._clock_ms()
        waited_enough = self._last_trigger_ms is None or now_ms - self._last_trigger_ms >= self.max_delay_ms
        if not waited_enough and available_rows < self.min_rows:
            return False
        self._last_trigger_ms = now_ms
        return True


class OnceStreamStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader. Spark keeps this object on the driver for the life of the query."""

    def __init__(self, opts: SourceOptions, clock_ms: Callable[[], float] | None = None) -> None:
        self.opts = opts
        if clock_ms is None:
            # The triggerClock option's class (oncestream.spark.plugins), else the monotonic clock.
            clock_ms = trigger_clock(opts.trigger_clock).now_ms
        self._planner = _Planner(opts)
        self._available_now_target: dict[TopicPartition, int] | None = None
        self._latest_seen: dict[TopicPartition, int] = {}
        self._initial: dict | None = None
        self._min_gate = (MinOffsetsGate(opts.min_offsets_per_trigger, opts.max_trigger_delay_ms, clock_ms)
                          if opts.min_offsets_per_trigger else None)

    def initialOffset(self) -> dict:
        """startingOffsets (or startingTimestamp, startingOffsetsByTimestamp) resolved against the
        partitions that exist now (default latest), once for the reader's life.

        Spark asks twice for the first batch: when it plans the batch's end (``latestOffset`` from
        this start) and again when it runs the batch (its start, as no batch is committed yet).
        Resolved again, ``latest`` moves with every record produced in between, and the start
        would pass the end the batch was planned with (failing the query as data loss). Spark's
        Kafka source keeps its first answer the same way (in its metadata log)."""
        if self._initial is None:
            tps = self._planner.current_partitions()
            self._initial = offsets_to_json(self._planner.resolve(self.opts.starting, tps, LATEST, starting=True))
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        """minOffsetsPerTrigger as ReadMinRows, else maxOffsetsPerTrigger as ReadMaxRows.

        Spark's Kafka source hands Spark a composite of both; the Python API has no composite
        limit, so with both options set the maximum is applied from the options (latestOffset)."""
        if self.opts.min_offsets_per_trigger:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: fix the target at today's latest offsets."""
        tps = self._planner.current_partitions()
        self._available_now_target = self._planner.latest(tps)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """The end of the next micro-batch: latest offsets (LSO under read_committed), capped by
        maxOffsetsPerTrigger, or the start itself while minOffsetsPerTrigger holds the batch back;
        new partitions join at their earliest offset, vanished ones are data loss."""
        begin = offsets_from_json(start)
        tps = self._planner.current_partitions()
        if self._available_now_target is not None:
            tps = [tp for tp in tps if tp in self._available_now_target]
        gone = sorted(set(begin) - set(tps))
        if gone:
            self._planner.data_loss(f"partitions {gone} were deleted")
        latest = self._planner.latest(tps)
        if self._available_now_target is not None:
            latest = {tp: min(o, self._available_now_target[tp]) for tp, o in latest.items()}
        self._latest_seen = dict(latest)
        if isinstance(limit, ReadAllAvailable):
            return offsets_to_json(latest)
        base = {tp: begin[tp] for tp in tps if tp in begin}
        base.update(self._planner.earliest([tp for tp in tps if tp not in begin]))
        # Trigger.AvailableNow ends when no data is left below its target, so holding a batch back
        # there would end the query early: minOffsetsPerTrigger does not apply to it.
        if self._min_gate is not None and self._available_now_target is None:
            available = sum(max(0, o - base.get(tp, o)) for tp, o in latest.items())
            if not self._min_gate.admit(available):
                return start
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else self.opts.max_offsets_per_trigger
        # An end below its start (a recreated topic) is passed on as is: planning reports it as
        # data loss, and with failOnDataLoss=false the next batch goes on from the new log's end.
        end = rate_limit(base, latest, max_rows) if max_rows else latest
        return offsets_to_json(end)

    def reportLatestOffset(self) -> dict | None:
        """The latest offsets the last trigger saw (``latestOffset`` of the source in Spark's
        query progress, from which ``offsets_behind_latest`` derives Spark's lag metrics)."""
        return offsets_to_json(self._latest_seen) if self._latest_seen else None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        """One input partition per Kafka partition range (split when large)."""
        return self._planner.input_partitions(offsets_from_json(start), offsets_from_json(end))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Fetch the range in a task and hand Arrow batches to Spark."""
        if not isinstance(partition, OffsetRangePartition):
            raise TypeError(f"not a partition of this source: {partition!r}")
        yield from _shaped(read_range(partition.rng), self.opts.include_headers)

    def stop(self) -> None:
        """Close the driver's broker connections."""
        self._planner.close()


class OnceStreamBatchReader(DataSourceReader):
    """Batch reader: startingOffsets (default earliest) to endingOffsets (default latest), or the
    offsets of startingTimestamp/endingTimestamp and their per-partition forms."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        """Resolve both ends now and split into tasks."""
        planner = _Planner(self.opts)
        try:
            tps = planner.current_partitions()
            start = planner.resolve(self.opts.starting, tps, EARLIEST, starting=True)
            end = planner.resolve(self.opts.ending, tps, LATEST, starting=False)
            return planner.input_partitions(start, end)
        finally:
            planner.close()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Fetch the range in a task and hand Arrow batches to Spark."""
        if partition.value is None:
            # An empty plan (every range empty): PySpark still runs one task, with
            # InputPartition(None) (plan_data_source_read.py), which has nothing to read.
            return
        if not isinstance(partition, OffsetRangePartition):
            raise TypeError(f"not a partition of this source: {partition!r}")
        yield from _shaped(read_range(partition.rng), self.opts.include_headers)


def _shaped(batches: Iterator[pa.RecordBatch], include_headers: bool) -> Iterator[pa.RecordBatch]:
    """The batches in the query's schema: without ``headers`` when includeHeaders=false."""
    if include_headers:
        yield from batches
        return
    for batch in batches:
        yield batch.drop_columns(["headers"])


def offsets_behind_latest(source_progress: Any) -> dict[str, float] | None:
    """Spark's Kafka source metrics ``minOffsetsBehindLatest``, ``maxOffsetsBehindLatest`` and
    ``avgOffsetsBehindLatest`` for one entry of a progress's ``sources`` (``query.lastProgress
    ["sources"][i]``), computed as Spark does: per partition, the latest offset the source saw
    minus the batch's end offset. None when the progress has no latest offset yet.

    The Python Data Source API cannot put custom metrics in the progress (see
    docs/spark-connector-options.md), so they are derived from the offsets it does report."""

    def offsets(key: str) -> dict[TopicPartition, int] | None:
        raw = source_progress.get(key)
        if raw is None:
            return None
        parsed = json.loads(raw) if isinstance(raw, str) else raw
        return offsets_from_json(parsed) if parsed else None

    latest, consumed = offsets("latestOffset"), offsets("endOffset")
    if not latest or consumed is None:
        return None
    behind = [latest[tp] - consumed.get(tp, 0) for tp in latest]
    return {
        "minOffsetsBehindLatest": float(min(behind)),
        "maxOffsetsBehindLatest": float(max(behind)),
        "avgOffsetsBehindLatest": sum(behind) / len(behind),
    }
