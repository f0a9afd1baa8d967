"""The parity options (docs/spark-connector-options.md) against another Kafka-protocol broker,
Tansu, read_uncommitted (Tansu hands aborted records to read_committed readers anyway):
endingOffsets, includeHeaders, kafka.group.id / groupIdPrefix, minOffsetsPerTrigger /
maxOffsetsPerTrigger under Trigger.AvailableNow, the latest offset in progress, and the timestamp
options resolved through Tansu's own ListOffsets by timestamp."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition

from oncestream.spark.source import offsets_behind_latest
from tests.spark.test_option_parity import (
    PER_PARTITION,
    T0_MS,
    _expected,
    _produce_timed,
    _read,
    _run_available_now,
    _stream,
    _topic,
    _values,
)
from tests.support.brokers import TansuProcess

pytestmark = [pytest.mark.spark, pytest.mark.interop]

UNCOMMITTED = {"kafka.isolation.level": "read_uncommitted"}


@pytest.fixture(scope="module")
def tansu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TansuProcess]:
    broker = TansuProcess(log_dir=tmp_path_factory.mktemp("tansu-parity"))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def _broker_offsets_for_time(bootstrap: str, topic: str, timestamp_ms: int) -> dict[int, int]:
    """What the broker's ListOffsets by timestamp answers, asked through librdkafka."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"probe-{topic}"})
    try:
        found = consumer.offsets_for_times([TopicPartition(topic, p, timestamp_ms) for p in (0, 1)], 30)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in found}


def test_batch_options_against_tansu(spark, tansu):
    """endingOffsets, includeHeaders=false, kafka.group.id, and the timestamp options on Tansu.

    Tansu 0.6 (memory storage) answers ListOffsets by timestamp with offset 0 whatever the
    timestamp (librdkafka's offsets_for_times gets the same answer), so on Tansu the timestamp
    options can only be shown to start where the broker says, not at the right record."""
    topic = _topic(tansu.bootstrap)
    _produce_timed(tansu.bootstrap, topic)
    ending = f'{{"{topic}":{{"0":4,"1":-1}}}}'
    rows = _read(spark, tansu.bootstrap, topic, endingOffsets=ending, includeHeaders="false",
                 **{"kafka.group.id": "tansu-parity"}, **UNCOMMITTED)
    assert "headers" not in rows.columns
    assert _values(rows.collect()) == sorted(_expected(range(4), (0,)) + _expected(range(PER_PARTITION), (1,)))
    timestamp_ms = T0_MS + 4_500
    starts = _broker_offsets_for_time(tansu.bootstrap, topic, timestamp_ms)
    by_time = _read(spark, tansu.bootstrap, topic, startingTimestamp=str(timestamp_ms), **UNCOMMITTED).collect()
    assert sorted((r.partition, r.offset) for r in by_time) == sorted(
        (p, o) for p in (0, 1) for o in range(starts[p], PER_PARTITION))
    by_partition = f'{{"{topic}":{{"0":{T0_MS},"1":{T0_MS}}}}}'
    ended = _read(spark, tansu.bootstrap, topic, endingOffsetsByTimestamp=by_partition,
                  startingOffsetsByTimestampStrategy="latest", **UNCOMMITTED).collect()
    ends = _broker_offsets_for_time(tansu.bootstrap, topic, T0_MS)
    assert len(ended) == sum(ends.values())


def test_stream_options_against_tansu(spark, tansu):
    """Trigger.AvailableNow with minOffsetsPerTrigger/maxOffsetsPerTrigger, groupIdPrefix,
    includeHeaders and the latest offset in progress, on Tansu."""
    topic = _topic(tansu.bootstrap)
    _produce_timed(tansu.bootstrap, topic)
    query, rows = _run_available_now(spark, _stream(spark, tansu.bootstrap, topic, startingOffsets="earliest",
                                                    maxOffsetsPerTrigger="6", minOffsetsPerTrigger="5",
                                                    groupIdPrefix="tansu", includeHeaders="false", **UNCOMMITTED))
    assert _values(rows) == _expected(range(PER_PARTITION))
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert max(sizes) <= 6
    assert sum(sizes) == 2 * PER_PARTITION
    first = next(p for p in query.recentProgress if p["numInputRows"])
    assert offsets_behind_latest(first["sources"][0]) == {
        "minOffsetsBehindLatest": 7.0, "maxOffsetsBehindLatest": 7.0, "avgOffsetsBehindLatest": 7.0}
