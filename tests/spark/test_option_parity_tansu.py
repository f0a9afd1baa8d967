"""The parity options (docs/spark-connector-options.md) against another Kafka-protocol broker,
Tansu, read_uncommitted (Tansu hands aborted records to read_committed readers anyway): timestamps
through Tansu's ListOffsets by timestamp, endingOffsets, includeHeaders, kafka.group.id /
groupIdPrefix, minOffsetsPerTrigger/maxOffsetsPerTrigger under Trigger.AvailableNow and the
latest offset in progress."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from oncestream.spark.source import offsets_behind_latest
from tests.spark.test_option_parity import PER_PARTITION, T0_MS, _expected, _produce_timed, _read, \
    _run_available_now, _stream, _topic, _values
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


def test_batch_options_against_tansu(spark, tansu):
    """startingTimestamp/endingTimestamp, endingOffsetsByTimestamp, endingOffsets,
    startingOffsetsByTimestampStrategy, includeHeaders=false and kafka.group.id on Tansu."""
    topic = _topic(tansu.bootstrap)
    _produce_timed(tansu.bootstrap, topic)
    rows = _read(spark, tansu.bootstrap, topic, startingTimestamp=str(T0_MS + 2_000),
                 endingTimestamp=str(T0_MS + 6_000), includeHeaders="false",
                 **{"kafka.group.id": "tansu-parity"}, **UNCOMMITTED)
    assert "headers" not in rows.columns
    assert _values(rows.collect()) == _expected(range(2, 6))
    by_ts = f'{{"{topic}":{{"0":{T0_MS + 3_000},"1":{T0_MS + 3_600_000}}}}}'
    assert _values(_read(spark, tansu.bootstrap, topic, endingOffsetsByTimestamp=by_ts, **UNCOMMITTED).collect()) == \
        sorted(_expected(range(3), (0,)) + _expected(range(PER_PARTITION), (1,)))
    ending = f'{{"{topic}":{{"0":4,"1":-1}}}}'
    assert _values(_read(spark, tansu.bootstrap, topic, endingOffsets=ending, **UNCOMMITTED).collect()) == \
        sorted(_expected(range(4), (0,)) + _expected(range(PER_PARTITION), (1,)))
    assert _read(spark, tansu.bootstrap, topic, startingTimestamp=str(T0_MS + 3_600_000),
                 startingOffsetsByTimestampStrategy="latest", **UNCOMMITTED).collect() == []


def test_stream_options_against_tansu(spark, tansu):
    """startingOffsetsByTimestamp, Trigger.AvailableNow with min/maxOffsetsPerTrigger,
    groupIdPrefix, and the latest offset in progress, on Tansu."""
    topic = _topic(tansu.bootstrap)
    _produce_timed(tansu.bootstrap, topic)
    by_ts = f'{{"{topic}":{{"0":{T0_MS + 2_000},"1":{T0_MS}}}}}'
    query, rows = _run_available_now(spark, _stream(spark, tansu.bootstrap, topic, startingOffsetsByTimestamp=by_ts,
                                                    maxOffsetsPerTrigger="6", minOffsetsPerTrigger="5",
                                                    groupIdPrefix="tansu", **UNCOMMITTED))
    assert _values(rows) == sorted(_expected(range(2, PER_PARTITION), (0,)) + _expected(range(PER_PARTITION), (1,)))
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert max(sizes) <= 6 and sum(sizes) == 18
    first = next(p for p in query.recentProgress if p["numInputRows"])
    assert offsets_behind_latest(first["sources"][0])["maxOffsetsBehindLatest"] > 0
