"""Parity with Spark's Kafka connector, option by option (docs/spark-connector-options.md), through
Spark against our broker: timestamps resolved with ListOffsets by timestamp, endingOffsets,
minOffsetsPerTrigger/maxTriggerDelay, Trigger.AvailableNow, includeHeaders, kafka.group.id /
groupIdPrefix, the source's latest offset in query progress, headers and topic per row on write,
and format("oncestream") in every session and thread of the application."""

from __future__ import annotations

import os
import threading
import time
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

import oncestream.spark
from oncestream.spark.source import offsets_behind_latest
from tests.spark.spark_support import committed_values
from tests.support.narrow import present
from tests.support.spark_faults import clock_options

pytestmark = pytest.mark.spark

T0_MS = 1_700_000_000_000
PER_PARTITION = 10
ROWS_TIMEOUT_S = 120.0


def _topic(bootstrap: str, partitions: int = 2) -> str:
    name = f"par-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(30)
    return name


def _produce_timed(bootstrap: str, topic: str, count: int = PER_PARTITION, first: int = 0) -> None:
    """Records v{p}-{i} in partitions 0 and 1 with timestamp T0 + i seconds (i from ``first``),
    one record per batch so every record's timestamp is findable on any broker."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 1,
                         "enable.idempotence": True, "max.in.flight.requests.per.connection": 1})
    for i in range(first, first + count):
        for p in (0, 1):
            producer.produce(topic, value=f"v{p}-{i}".encode(), key=f"k{i}".encode(), partition=p,
                             timestamp=T0_MS + i * 1000, headers=[("n", str(i).encode())])
    assert producer.flush(30) == 0


def _read(spark, bootstrap: str, topic: str, **options: str):
    reader = spark.read.format("oncestream").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
    return reader.options(**options).load()


def _stream(spark, bootstrap: str, topic: str, **options: str):
    reader = (spark.readStream.format("oncestream").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic))
    return reader.options(**options).load()


def _values(rows) -> list[str]:
    return sorted(bytes(r.value).decode() for r in rows)


def _expected(indices, partitions=(0, 1)) -> list[str]:
    return sorted(f"v{p}-{i}" for i in indices for p in partitions)


def _run_available_now(spark, df, **options: str):
    name = f"q_{uuid.uuid4().hex[:10]}"
    query = df.select("value").writeStream.format("memory").queryName(name).trigger(availableNow=True)
    query = query.options(**options).start()
    query.awaitTermination(300)
    assert query.exception() is None
    return query, spark.sql(f"SELECT value FROM {name}").collect()


def _set_clock(path, now_ms: int) -> None:
    """Replace the clock file at once, so the reader never sees it half written."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(str(now_ms))
    os.replace(tmp, path)


def _batch_sizes(query, total: int) -> list[int]:
    """The input row count of every non-empty batch, once the batches reported cover ``total``
    rows: a batch's rows reach the memory sink before its progress entry is recorded."""
    deadline = time.monotonic() + ROWS_TIMEOUT_S
    while True:
        sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
        if sum(sizes) >= total or time.monotonic() > deadline:
            return sizes
        time.sleep(0.1)


def _wait_for_rows(spark, name: str, count: int) -> list:
    deadline = time.monotonic() + ROWS_TIMEOUT_S
    while time.monotonic() < deadline:
        rows = spark.sql(f"SELECT value FROM {name}").collect()
        if len(rows) >= count:
            return rows
        time.sleep(0.2)
    raise AssertionError(f"{name} did not reach {count} rows in {ROWS_TIMEOUT_S:.0f} s")


# --- timestamps ---------------------------------------------------------------------------------


def test_starting_timestamp_batch_and_stream(spark, eos_broker):
    """startingTimestamp: every partition starts at its first record at or after the timestamp."""
    topic = _topic(eos_broker.bootstrap)
    _produce_timed(eos_broker.bootstrap, topic)
    start = str(T0_MS + 4_500)  # between record 4 and record 5
    assert _values(_read(spark, eos_broker.bootstrap, topic, startingTimestamp=start).collect()) == \
        _expected(range(5, PER_PARTITION))
    _query, rows = _run_available_now(spark, _stream(spark, eos_broker.bootstrap, topic, startingTimestamp=start))
    assert _values(rows) == _expected(range(5, PER_PARTITION))


def test_starting_offsets_by_timestamp_per_partition(spark, eos_broker):
    """startingOffsetsByTimestamp: one timestamp per partition; it must name every partition."""
    topic = _topic(eos_broker.bootstrap)
    _produce_timed(eos_broker.bootstrap, topic)
    by_ts = f'{{"{topic}":{{"0":{T0_MS + 2_000},"1":{T0_MS + 7_000}}}}}'
    rows = _read(spark, eos_broker.bootstrap, topic, startingOffsetsByTimestamp=by_ts).collect()
    assert _values(rows) == sorted(_expected(range(2, 10), (0,)) + _expected(range(7, 10), (1,)))
    _query, streamed = _run_available_now(
        spark, _stream(spark, eos_broker.bootstrap, topic, startingOffsetsByTimestamp=by_ts))
    assert _values(streamed) == _values(rows)
    with pytest.raises(Exception, match="must give a timestamp for every subscribed partition"):
        _read(spark, eos_broker.bootstrap, topic,
              startingOffsetsByTimestamp=f'{{"{topic}":{{"0":{T0_MS}}}}}').collect()


def test_starting_offsets_by_timestamp_strategy(spark, eos_broker):
    """No record at or after the starting timestamp: error (the default, Spark's message) or,
    with startingOffsetsByTimestampStrategy=latest, start at the latest offset."""
    topic = _topic(eos_broker.bootstrap)
    _produce_timed(eos_broker.bootstrap, topic)
    future = str(T0_MS + 3_600_000)
    with pytest.raises(Exception, match=f"No offset matched from request of topic-partition {topic}-0"):
        _read(spark, eos_broker.bootstrap, topic, startingTimestamp=future).collect()
    assert _read(spark, eos_broker.bootstrap, topic, startingTimestamp=future,
                 startingOffsetsByTimestampStrategy="latest").collect() == []
    name = f"q_{uuid.uuid4().hex[:10]}"
    query = (_stream(spark, eos_broker.bootstrap, topic, startingTimestamp=future,
                     startingOffsetsByTimestampStrategy="latest")
             .select("value").writeStream.format("memory").queryName(name)
             .trigger(processingTime="200 milliseconds").start())
    try:
        query.processAllAvailable()
        _produce_timed(eos_broker.bootstrap, topic, count=2, first=PER_PARTITION)
        query.processAllAvailable()
        rows = spark.sql(f"SELECT value FROM {name}").collect()
    finally:
        query.stop()
    assert _values(rows) == _expected(range(PER_PARTITION, PER_PARTITION + 2))


def test_ending_timestamp_and_ending_offsets_by_timestamp(spark, eos_broker):
    """Batch reads stop before the first record at or after endingTimestamp (per partition with
    endingOffsetsByTimestamp); where no record is that late, they read to the latest offset."""
    topic = _topic(eos_broker.bootstrap)
    _produce_timed(eos_broker.bootstrap, topic)
    rows = _read(spark, eos_broker.bootstrap, topic, startingTimestamp=str(T0_MS + 2_000),
                 endingTimestamp=str(T0_MS + 6_000)).collect()
    assert _values(rows) == _expected(range(2, 6))
    by_ts = f'{{"{topic}":{{"0":{T0_MS + 3_000},"1":{T0_MS + 3_600_000}}}}}'
    rows = _read(spark, eos_broker.bootstrap, topic, endingOffsetsByTimestamp=by_ts).collect()
    assert _values(rows) == sorted(_expected(range(3), (0,)) + _expected(range(PER_PARTITION), (1,)))
    with pytest.raises(Exception, match="endingTimestamp is not valid for streaming"):
        _stream(spark, eos_broker.bootstrap, topic, endingTimestamp="1").writeStream.format("memory") \
            .queryName(f"q_{uuid.uuid4().hex[:8]}").start().awaitTermination(60)


def test_batch_ending_offsets(spark, eos_broker):
    """endingOffsets: latest (default) or JSON per partition with -1 = latest."""
    topic = _topic(eos_broker.bootstrap)
    _produce_timed(eos_broker.bootstrap, topic)
    rows = _read(spark, eos_broker.bootstrap, topic, endingOffsets=f'{{"{topic}":{{"0":4,"1":-1}}}}').collect()
    assert _values(rows) == sorted(_expected(range(4), (0,)) + _expected(range(PER_PARTITION), (1,)))
    assert len(_read(spark, eos_broker.bootstrap, topic, endingOffsets="latest").collect()) == 2 * PER_PARTITION


def test_batch_read_of_an_empty_range_returns_no_rows(spark, eos_broker):
    """A batch whose every range is empty (an empty topic) returns no rows: PySpark then runs one
    task with InputPartition(None), which used to fail the read."""
    topic = _topic(eos_broker.bootstrap)
    assert _read(spark, eos_broker.bootstrap, topic).collect() == []


# --- admission control --------------------------------------------------------------------------


def test_min_offsets_per_trigger_holds_batches_back_until_enough_data(spark, eos_broker):
    """minOffsetsPerTrigger with a long maxTriggerDelay: after the first batch, triggers with fewer
    offsets available run no batch; once enough arrive they are read together."""
    topic = _topic(eos_broker.bootstrap)
    _produce_timed(eos_broker.bootstrap, topic, count=2)
    name = f"q_{uuid.uuid4().hex[:10]}"
    query = (_stream(spark, eos_broker.bootstrap, topic, startingOffsets="earliest", minOffsetsPerTrigger="20",
                     maxTriggerDelay="1h")
             .select("value").writeStream.format("memory").queryName(name)
             .trigger(processingTime="100 milliseconds").start())
    try:
        query.processAllAvailable()  # the first trigger always runs (Spark's rule)
        assert len(spark.sql(f"SELECT value FROM {name}").collect()) == 4
        _produce_timed(eos_broker.bootstrap, topic, count=5, first=2)  # 10 offsets < 20
        query.processAllAvailable()
        assert len(spark.sql(f"SELECT value FROM {name}").collect()) == 4
        _produce_timed(eos_broker.bootstrap, topic, count=5, first=7)  # 20 offsets now
        query.processAllAvailable()
        rows = spark.sql(f"SELECT value FROM {name}").collect()
        sizes = _batch_sizes(query, len(rows))
    finally:
        query.stop()
    assert _values(rows) == _expected(range(12))
    assert sizes == [4, 20]


def test_max_trigger_delay_releases_a_small_batch(spark, eos_broker, tmp_path):
    """maxTriggerDelay: fewer offsets than minOffsetsPerTrigger wait until the delay has passed
    since the last batch, then are read. The reader's clock is a file the test sets."""
    topic = _topic(eos_broker.bootstrap)
    _produce_timed(eos_broker.bootstrap, topic, count=1)
    clock = tmp_path / "clock_ms"
    _set_clock(clock, 0)
    name = f"q_{uuid.uuid4().hex[:10]}"
    query = (_stream(spark, eos_broker.bootstrap, topic, startingOffsets="earliest", minOffsetsPerTrigger="1000",
                     maxTriggerDelay="3s", **clock_options(clock))
             .select("value").writeStream.format("memory").queryName(name)
             .trigger(processingTime="100 milliseconds").start())
    try:
        query.processAllAvailable()  # the first batch runs at clock 0
        _produce_timed(eos_broker.bootstrap, topic, count=3, first=1)
        _set_clock(clock, 2999)
        query.processAllAvailable()
        held = len(spark.sql(f"SELECT value FROM {name}").collect())
        _set_clock(clock, 3000)
        rows = _wait_for_rows(spark, name, 8)
        sizes = _batch_sizes(query, len(rows))
    finally:
        query.stop()
    assert held == 2
    assert _values(rows) == _expected(range(4))
    assert sizes == [2, 6]


def test_available_now_reads_everything_in_capped_batches_despite_min_offsets(spark, eos_broker):
    """Trigger.AvailableNow: the query reads what was there when it started, in batches capped by
    maxOffsetsPerTrigger, and stops by itself; minOffsetsPerTrigger cannot hold it back (that would
    end it with data left)."""
    topic = _topic(eos_broker.bootstrap)
    _produce_timed(eos_broker.bootstrap, topic)
    query, rows = _run_available_now(spark, _stream(spark, eos_broker.bootstrap, topic, startingOffsets="earliest",
                                                    maxOffsetsPerTrigger="6", minOffsetsPerTrigger="5",
                                                    maxTriggerDelay="1h"))
    assert _values(rows) == _expected(range(PER_PARTITION))
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert max(sizes) <= 6
    assert sum(sizes) == 2 * PER_PARTITION
    assert not query.isActive


def test_progress_reports_latest_offset_and_offsets_behind_latest(spark, eos_broker):
    """The source's latestOffset appears in query progress (reportLatestOffset), from which
    offsets_behind_latest derives Spark's min/max/avgOffsetsBehindLatest."""
    topic = _topic(eos_broker.bootstrap)
    _produce_timed(eos_broker.bootstrap, topic)
    query, _rows = _run_available_now(spark, _stream(spark, eos_broker.bootstrap, topic,
                                                     startingOffsets="earliest", maxOffsetsPerTrigger="4"))
    first = next(p for p in query.recentProgress if p["numInputRows"])
    (source,) = first["sources"]
    assert offsets_behind_latest(source) == {
        "minOffsetsBehindLatest": 8.0, "maxOffsetsBehindLatest": 8.0, "avgOffsetsBehindLatest": 8.0}
    latest = present(offsets_behind_latest(query.lastProgress["sources"][0]), "offsets behind latest")
    assert latest["maxOffsetsBehindLatest"] == 0.0


# --- columns and consumer group options ---------------------------------------------------------


def test_include_headers(spark, eos_broker):
    """includeHeaders=false or unset leaves the headers column out (Spark's default schema); true
    keeps it with the records' headers."""
    topic = _topic(eos_broker.bootstrap)
    _produce_timed(eos_broker.bootstrap, topic, count=2)
    plain = _read(spark, eos_broker.bootstrap, topic, includeHeaders="false")
    assert "headers" not in plain.columns
    assert len(plain.columns) == 7
    assert _read(spark, eos_broker.bootstrap, topic).columns == plain.columns  # the default
    assert _values(plain.collect()) == _expected(range(2))
    _query, streamed = _run_available_now(spark, _stream(spark, eos_broker.bootstrap, topic, includeHeaders="false",
                                                         startingOffsets="earliest"))
    assert len(streamed) == 4
    with_headers = _read(spark, eos_broker.bootstrap, topic, includeHeaders="true").collect()
    assert {bytes(r.value).decode(): [(h.key, h.value) for h in r.headers] for r in with_headers}["v1-1"] == \
        [("n", b"1")]


def test_group_id_prefix_and_consumer_tuning_options_are_accepted_and_join_no_group(spark, eos_broker):
    """kafka.group.id / groupIdPrefix: accepted as Spark accepts them; the connector reads offset
    ranges, so no consumer group appears on the broker."""
    topic = _topic(eos_broker.bootstrap)
    _produce_timed(eos_broker.bootstrap, topic, count=3)
    group = f"g-{uuid.uuid4().hex[:8]}"
    rows = _read(spark, eos_broker.bootstrap, topic, **{"kafka.group.id": group, "groupIdPrefix": "pre"}).collect()
    assert len(rows) == 6
    # Spark's consumer-tuning options are accepted too (our client has its own kafka.* settings).
    tuned = _read(spark, eos_broker.bootstrap, topic, **{"kafkaConsumer.pollTimeoutMs": "5000",
                                                          "fetchOffset.numRetries": "2",
                                                          "fetchOffset.retryIntervalMs": "20"})
    assert tuned.count() == 6
    _query, streamed = _run_available_now(spark, _stream(spark, eos_broker.bootstrap, topic, groupIdPrefix="pre",
                                                         startingOffsets="earliest"))
    assert len(streamed) == 6
    admin = AdminClient({"bootstrap.servers": eos_broker.bootstrap})
    listed = admin.list_consumer_groups().result(30)
    assert not [g.group_id for g in listed.valid if g.group_id == group or g.group_id.startswith("pre")]


# --- writes -------------------------------------------------------------------------------------


def test_write_headers_and_topic_per_row_and_topic_option_override(spark, eos_broker):
    """headers on write; a topic column routes each row; the topic option overrides the column."""
    a, b, c = (_topic(eos_broker.bootstrap) for _ in range(3))
    rows = [(a, b"to-a", [("h", b"1")]), (b, b"to-b", [("h", b"2"), ("x", None)]), (a, b"to-a-2", None)]
    df = spark.createDataFrame(rows, "topic string, value binary, headers array<struct<key:string,value:binary>>")
    df.write.format("oncestream").option("kafka.bootstrap.servers", eos_broker.bootstrap).mode("append").save()
    got = {bytes(r.value): [(h.key, h.value) for h in r.headers or []]
           for t in (a, b) for r in _read(spark, eos_broker.bootstrap, t, includeHeaders="true").collect()}
    assert got == {b"to-a": [("h", b"1")], b"to-b": [("h", b"2"), ("x", None)], b"to-a-2": []}
    df.write.format("oncestream").option("kafka.bootstrap.servers", eos_broker.bootstrap).option("topic", c) \
        .mode("append").save()
    assert sorted(v for v in committed_values(eos_broker.bootstrap, c)) == [b"to-a", b"to-a-2", b"to-b"]


def _timestamps(bootstrap: str, topic: str, count: int) -> dict[bytes, int]:
    """value -> record timestamp of ``topic``'s first ``count`` records, read read_committed with
    confluent-kafka."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ts-{uuid.uuid4().hex[:8]}",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    got: dict[bytes, int] = {}
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + ROWS_TIMEOUT_S
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got[present(msg.value(), "a value")] = msg.timestamp()[1]
    finally:
        consumer.close()
    assert len(got) == count, got
    return got


def test_write_timestamp_column_sets_record_timestamps(spark, eos_broker):
    """A ``timestamp`` column (Spark's Kafka sink's) sets each record's timestamp, the epoch
    included (librdkafka takes 0 for "now", our sink does not); a double is epoch seconds; a null
    gets the produce time; a negative one fails the write as Kafka's producer refuses it; read
    and written back, records keep their timestamps."""
    bootstrap = eos_broker.bootstrap
    first, second, third = (_topic(bootstrap, partitions=1) for _ in range(3))
    before_ms = int(time.time() * 1000)
    rows = spark.createDataFrame([(b"epoch", 0), (b"later", 1_700_000_000_123), (b"none", None)], "value binary, ms long")
    rows.selectExpr("value", "timestamp_millis(ms) AS timestamp").write.format("oncestream") \
        .option("kafka.bootstrap.servers", bootstrap).option("topic", first).mode("append").save()
    got = _timestamps(bootstrap, first, 3)
    assert got[b"epoch"] == 0
    assert got[b"later"] == 1_700_000_000_123
    assert got[b"none"] >= before_ms
    spark.createDataFrame([(b"seconds", 1.5)], "value binary, timestamp double").write.format("oncestream") \
        .option("kafka.bootstrap.servers", bootstrap).option("topic", second).mode("append").save()
    assert _timestamps(bootstrap, second, 1) == {b"seconds": 1500}
    _read(spark, bootstrap, first).select("value", "timestamp").write.format("oncestream") \
        .option("kafka.bootstrap.servers", bootstrap).option("topic", third).mode("append").save()
    assert _timestamps(bootstrap, third, 3) == got
    negative = spark.createDataFrame([(b"before", -5)], "value binary, ms long").selectExpr(
        "value", "timestamp_millis(ms) AS timestamp")
    with pytest.raises(Exception, match="Invalid timestamp: -5"):
        negative.write.format("oncestream").option("kafka.bootstrap.servers", bootstrap).option("topic", third) \
            .mode("append").save()
    with pytest.raises(Exception, match="column 'timestamp' must be a timestamp or a double"):
        spark.createDataFrame([(b"v", "x")], "value binary, timestamp string").write.format("oncestream") \
            .option("kafka.bootstrap.servers", bootstrap).option("topic", third).mode("append").save()


# --- registration -------------------------------------------------------------------------------


def test_format_is_known_in_other_sessions_and_threads(spark, eos_broker):
    """format("oncestream") resolves in spark.newSession() and in a thread working in its own
    session (both failed with DATA_SOURCE_NOT_FOUND when registration was per session), and
    register() may be called again from any thread."""
    topic = _topic(eos_broker.bootstrap)
    _produce_timed(eos_broker.bootstrap, topic, count=1)
    assert _read(spark.newSession(), eos_broker.bootstrap, topic).count() == 2
    results: dict[str, object] = {}

    def work(tag: str, make_session) -> None:
        try:
            session = make_session()
            oncestream.spark.register(session)
            results[tag] = _read(session, eos_broker.bootstrap, topic).count()
        except Exception as exc:  # noqa: BLE001 - reported through the assertion below
            results[tag] = repr(exc)[:500]

    threads = [threading.Thread(target=work, args=("same", lambda: spark)),
               threading.Thread(target=work, args=("new", spark.newSession))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert results == {"same": 2, "new": 2}


def test_the_first_batch_keeps_the_start_it_was_planned_from_while_records_arrive(eos_broker):
    """startingOffsets=latest is resolved once per query run. Spark asks for the initial offset
    again when it runs the first batch (nothing committed yet); records produced after the
    batch's end was planned must not move its start past that end (which failed the query as
    data loss: "end offset 20 is below start offset 22" in bench/sql_latency.py, records flowing
    while the query started)."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from oncestream.spark.options import offsets_from_json, source_options
    from oncestream.spark.source import OffsetRangePartition, OnceStreamStreamReader

    topic = _topic(eos_broker.bootstrap)
    _produce_timed(eos_broker.bootstrap, topic, count=3)
    reader = OnceStreamStreamReader(source_options({"kafka.bootstrap.servers": eos_broker.bootstrap, "subscribe": topic,
                                                    "startingOffsets": "latest"}, streaming=True))
    try:
        start = reader.initialOffset()
        assert offsets_from_json(start) == {(topic, 0): 3, (topic, 1): 3}
        _produce_timed(eos_broker.bootstrap, topic, count=2, first=3)
        end = reader.latestOffset(start, ReadAllAvailable())           # the first batch's planned end
        assert offsets_from_json(end) == {(topic, 0): 5, (topic, 1): 5}
        _produce_timed(eos_broker.bootstrap, topic, count=4, first=5)  # more arrive before it runs
        again = reader.initialOffset()                                 # Spark's second ask, in runBatch
        assert again == start
        ranges = [p.rng for p in reader.partitions(again, end) if isinstance(p, OffsetRangePartition)]
        planned = sorted((r.topic, r.partition, r.start, r.end) for r in ranges)
        assert planned == [(topic, 0, 3, 5), (topic, 1, 3, 5)]
    finally:
        reader.stop()
