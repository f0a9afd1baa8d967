"""Spark Kafka connector option parity on the driver side, without Spark or a broker: parsing and
validation as Spark's KafkaSourceProvider does it, the minOffsetsPerTrigger/maxTriggerDelay gate
on an injected clock, and the offsets-behind-latest metrics derived from query progress."""

from __future__ import annotations

import pytest

from oncestream.spark.errors import OptionError
from oncestream.spark.options import DEFAULT_MAX_TRIGGER_DELAY_MS, parse_duration_ms, source_options
from oncestream.spark.source import MinOffsetsGate, offsets_behind_latest

pytestmark = pytest.mark.spark

BASE = {"kafka.bootstrap.servers": "h:1", "subscribe": "t"}


def _opts(streaming: bool = False, **extra: str):
    return source_options({**BASE, **extra}, streaming=streaming)


def test_timestamp_options_take_sparks_order_of_preference():
    """startingTimestamp > startingOffsetsByTimestamp > startingOffsets (and the same for ending)."""
    both = _opts(startingTimestamp="1000", startingOffsetsByTimestamp='{"t":{"0":5}}', startingOffsets="earliest",
                 endingOffsetsByTimestamp='{"t":{"0":9}}', endingOffsets="latest")
    assert (both.starting.kind, both.starting.timestamp_ms) == ("timestamp", 1000)
    assert (both.ending.kind, both.ending.per_partition) == ("timestamp_json", {("t", 0): 9})
    by_partition = _opts(startingOffsetsByTimestamp='{"t":{"0":5,"1":6}}', startingOffsets="earliest")
    assert by_partition.starting.per_partition == {("t", 0): 5, ("t", 1): 6}
    assert _opts(startingOffsets="earliest").starting.kind == "earliest"


def test_timestamp_strategy_and_malformed_values_are_refused():
    assert _opts(startingTimestamp="1", startingOffsetsByTimestampStrategy="LATEST").starting.no_match == "latest"
    assert _opts(startingTimestamp="1").starting.no_match == "error"
    with pytest.raises(OptionError, match="startingOffsetsByTimestampStrategy must be error or latest"):
        _opts(startingTimestamp="1", startingOffsetsByTimestampStrategy="earliest")
    with pytest.raises(OptionError, match="expected a single long value"):
        _opts(startingTimestamp="yesterday")
    with pytest.raises(OptionError, match="endingOffsetsByTimestamp must be JSON"):
        _opts(endingOffsetsByTimestamp='{"t":[1]}')


def test_streaming_refuses_ending_options_and_batch_refuses_wrong_ends():
    """Spark: no ending offsets or timestamps on a stream; a batch cannot start at latest (even
    for one partition, -1) nor end at earliest (-2)."""
    for key, value in (("endingOffsets", "latest"), ("endingOffsetsByTimestamp", '{"t":{"0":1}}'),
                       ("endingTimestamp", "1")):
        with pytest.raises(OptionError, match=f"{key} is not valid for streaming"):
            _opts(streaming=True, **{key: value})
    with pytest.raises(OptionError, match="startingOffsets=latest is not valid for batch"):
        _opts(startingOffsets='{"t":{"0":-1}}')
    with pytest.raises(OptionError, match="endingOffsets=earliest is not valid for batch"):
        _opts(endingOffsets='{"t":{"0":-2}}')


def test_min_and_max_offsets_per_trigger_and_trigger_delay():
    opts = _opts(streaming=True, minOffsetsPerTrigger="10", maxOffsetsPerTrigger="50", maxTriggerDelay="30s")
    assert (opts.min_offsets_per_trigger, opts.max_offsets_per_trigger, opts.max_trigger_delay_ms) == (10, 50, 30_000)
    assert _opts(streaming=True).max_trigger_delay_ms == DEFAULT_MAX_TRIGGER_DELAY_MS == 15 * 60_000
    with pytest.raises(OptionError, match=r"minOffsetsPerTrigger \(51\) is higher than maxOffsetsPerTrigger \(50\)"):
        _opts(streaming=True, minOffsetsPerTrigger="51", maxOffsetsPerTrigger="50")
    with pytest.raises(OptionError, match="maxTriggerDelay must be a duration"):
        _opts(streaming=True, maxTriggerDelay="soon")
    assert [parse_duration_ms(v, "x") for v in ("250", "250ms", "2s", "3m", "3min", "1h", "1d")] == [
        250, 250, 2000, 180_000, 180_000, 3_600_000, 86_400_000]


def test_include_headers_group_id_and_group_id_prefix_are_accepted():
    """includeHeaders defaults to false, as in Spark; kafka.group.id and groupIdPrefix are accepted
    (Spark only names its consumer groups with them) and never reach a group membership."""
    assert _opts().include_headers is False
    assert _opts(includeHeaders="true").include_headers is True
    assert _opts(includeHeaders="false").include_headers is False
    opts = _opts(streaming=True, **{"kafka.group.id": "g1", "groupIdPrefix": "p"})
    assert opts.client_config["group.id"] == "g1"
    with pytest.raises(OptionError, match="includeHeaders must be true or false"):
        _opts(includeHeaders="sometimes")


def test_min_offsets_gate_waits_for_rows_or_the_delay_on_an_injected_clock():
    """Spark's delayBatch: the first trigger runs; afterwards a trigger with fewer than
    minOffsetsPerTrigger offsets is skipped until maxTriggerDelay has passed since the last batch."""
    now = [1_000.0]
    gate = MinOffsetsGate(min_rows=100, max_delay_ms=5_000, clock_ms=lambda: now[0])
    assert gate.admit(3)  # first trigger
    now[0] += 1_000
    assert not gate.admit(99)
    assert gate.admit(100)  # enough rows: runs, and restarts the delay
    now[0] += 4_999
    assert not gate.admit(10)
    now[0] += 1
    assert gate.admit(10)  # 5 s since the last batch
    assert not gate.admit(0)


def test_offsets_behind_latest_from_progress_as_spark_computes_them():
    source = {"endOffset": '{"t":{"0":5,"1":9}}', "latestOffset": '{"t":{"0":20,"1":10,"2":4}}'}
    assert offsets_behind_latest(source) == {
        "minOffsetsBehindLatest": 1.0, "maxOffsetsBehindLatest": 15.0, "avgOffsetsBehindLatest": 20 / 3}
    assert offsets_behind_latest({"endOffset": '{"t":{"0":5}}', "latestOffset": None}) is None
