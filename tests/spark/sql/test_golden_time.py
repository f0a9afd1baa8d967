"""Golden tests, time as Kafka Streams keeps it (issue 24 point 3): output record timestamps are the
result's ROWTIME (projection: the input's; aggregation: the largest ROWTIME of its rows, per
window; stream-stream join: the larger of both sides'; ``TIMESTAMP='col'`` on a source and on a
C*AS), hopping windows never start before the epoch, EMIT FINAL writes one row per window once
stream time passes its end plus grace, and the watermark's global stream time against Kafka
Streams' per-partition one (docs/sql-on-spark.md). Inputs produced with confluent-kafka; outputs
read read_committed with confluent-kafka, record timestamps included."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.spark.sql.golden import analyze, create_topics, ddl, produce, read_timed_output, sink_of, start, unique

pytestmark = [pytest.mark.spark]

Timed = tuple[bytes | None, bytes | None, int]


def _int(v: int) -> bytes:
    return struct.pack(">i", v)


def _window_key(key: bytes | None) -> tuple[str, int]:
    """A TUMBLING/HOPPING windowed KAFKA STRING key: (key, window start ms)."""
    assert key is not None
    assert len(key) > 8, key
    return key[:-8].decode(), struct.unpack(">q", key[-8:])[0]


def _last_per_key(records: Iterable[tuple[Any, bytes | None, int]]) -> dict[Any, tuple[Any, int]]:
    """Each key's last (value, timestamp): a changelog's final state, however the updates were
    batched."""
    return {key: (json.loads(value) if value is not None else None, ts) for key, value, ts in records}


def _produce_to(bootstrap: str, topic: str, records: Iterable[tuple[int, bytes, bytes, int]]) -> None:
    """(partition, key, value, timestamp ms) records, acknowledged before returning."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for partition, key, value, ts in records:
        producer.produce(topic, value=value, key=key, partition=partition, timestamp=ts)
    assert producer.flush(30) == 0


def test_projection_keeps_rowtime_and_timestamp_columns_set_it(runtime, eos_broker):
    """A filter/projection writes each record with its input's timestamp; a source's
    ``TIMESTAMP='T'`` makes T its ROWTIME (a row without T is skipped, as Kafka Streams skips a
    record whose timestamp cannot be extracted); a CSAS's ``WITH (TIMESTAMP='T')`` stamps its
    records with its column T."""
    bootstrap = eos_broker.bootstrap
    topic = unique("events")
    outs = [unique(f"out{i}") for i in range(3)]
    create_topics(bootstrap, topic, *outs)
    events = ddl(f"CREATE STREAM EVENTS (ID INT KEY, X BIGINT, T BIGINT) WITH (KAFKA_TOPIC='{topic}', "
                 "VALUE_FORMAT='JSON');")
    stamped = ddl(f"CREATE STREAM STAMPED (ID INT KEY, X BIGINT, T BIGINT) WITH (KAFKA_TOPIC='{topic}', "
                  "VALUE_FORMAT='JSON', TIMESTAMP='T');")
    produce(bootstrap, topic, [
        (_int(1), b'{"X":1,"T":7000}', 1000),
        (_int(2), b'{"X":5,"T":null}', 2000),
        (_int(3), b'{"X":9,"T":9000}', 3000),
    ])
    _s, filtered = analyze("CREATE STREAM F AS SELECT ID, X FROM EVENTS WHERE X > 1 EMIT CHANGES;", {"EVENTS": events})
    start(runtime, "CSAS_F_1", filtered, sink_of(filtered, "F", outs[0]))
    _s, by_source = analyze("CREATE STREAM R AS SELECT ID, ROWTIME AS RT FROM STAMPED EMIT CHANGES;",
                            {"STAMPED": stamped})
    start(runtime, "CSAS_R_2", by_source, sink_of(by_source, "R", outs[1]))
    _s, by_sink = analyze("CREATE STREAM W WITH (TIMESTAMP='T') AS SELECT ID, T FROM EVENTS EMIT CHANGES;",
                          {"EVENTS": events})
    start(runtime, "CSAS_W_3", by_sink, sink_of(by_sink, "W", outs[2], timestamp_column="T", created_by="CSAS_W_3"))

    assert read_timed_output(bootstrap, outs[0], 2, runtime=runtime, query_id="CSAS_F_1") == [
        (_int(2), b'{"X":5}', 2000), (_int(3), b'{"X":9}', 3000)]
    assert read_timed_output(bootstrap, outs[1], 2, runtime=runtime, query_id="CSAS_R_2") == [
        (_int(1), b'{"RT":7000}', 7000), (_int(3), b'{"RT":9000}', 9000)]
    assert read_timed_output(bootstrap, outs[2], 2, runtime=runtime, query_id="CSAS_W_3") == [
        (_int(1), b'{"T":7000}', 7000), (_int(3), b'{"T":9000}', 9000)]
    for query_id in ("CSAS_F_1", "CSAS_R_2", "CSAS_W_3"):
        runtime.stop_persistent(query_id)


def test_aggregations_stamp_the_largest_rowtime_and_hopping_windows_start_at_zero(runtime, eos_broker):
    """COUNT over HOPPING windows: each window's record carries the largest ROWTIME of its rows
    (out-of-order input does not lower it), and the record at 500 ms falls in [0, 2000) only:
    Kafka Streams never opens [-1000, 1000). A non-windowed MAX carries its group's largest
    ROWTIME too."""
    bootstrap = eos_broker.bootstrap
    topic = unique("clicks")
    hop_out, max_out = unique("hop"), unique("max")
    create_topics(bootstrap, topic, hop_out, max_out)
    clicks = ddl(f"CREATE STREAM CLICKS (K STRING KEY, V INT) WITH (KAFKA_TOPIC='{topic}', VALUE_FORMAT='JSON');")
    produce(bootstrap, topic, [
        (b"a", b'{"V":1}', 500),
        (b"a", b'{"V":2}', 1700),
        (b"a", b'{"V":3}', 1200),
        (b"b", b'{"V":4}', 2500),
    ])
    _s, hopping = analyze("CREATE TABLE HOP AS SELECT K, COUNT(*) AS N FROM CLICKS "
                          "WINDOW HOPPING (SIZE 2 SECONDS, ADVANCE BY 1 SECOND) GROUP BY K EMIT CHANGES;",
                          {"CLICKS": clicks})
    start(runtime, "CTAS_HOP_4", hopping, sink_of(hopping, "HOP", hop_out))
    _s, maxed = analyze("CREATE TABLE M AS SELECT K, MAX(V) AS MV FROM CLICKS GROUP BY K EMIT CHANGES;",
                        {"CLICKS": clicks})
    start(runtime, "CTAS_M_5", maxed, sink_of(maxed, "M", max_out))

    # Four windows: however the updates were batched, at least one record each.
    hop = read_timed_output(bootstrap, hop_out, 4, runtime=runtime, query_id="CTAS_HOP_4")
    assert all(_window_key(key)[1] >= 0 for key, _v, _ts in hop), hop
    # One micro-batch (all input was there at start): each key's windows in start order, as
    # Kafka Streams forwards the windows a record updates.
    for name in ("a", "b"):
        starts = [_window_key(k)[1] for k, _v, _ts in hop if _window_key(k)[0] == name]
        assert starts == sorted(starts), hop
    assert _last_per_key((_window_key(k), v, ts) for k, v, ts in hop) == {
        ("a", 0): ({"N": 3}, 1700),
        ("a", 1000): ({"N": 2}, 1700),
        ("b", 1000): ({"N": 1}, 2500),
        ("b", 2000): ({"N": 1}, 2500),
    }
    maxima = read_timed_output(bootstrap, max_out, 2, runtime=runtime, query_id="CTAS_M_5")
    assert _last_per_key(maxima) == {b"a": ({"MV": 3}, 1700), b"b": ({"MV": 4}, 2500)}
    runtime.stop_persistent("CTAS_HOP_4")
    runtime.stop_persistent("CTAS_M_5")


def test_stream_stream_join_stamps_the_later_side(runtime, eos_broker):
    """A stream-stream join's record carries the larger ROWTIME of the two joined rows
    (Kafka Streams' KStreamKStreamJoin)."""
    bootstrap = eos_broker.bootstrap
    left_topic, right_topic, out = unique("left"), unique("right"), unique("joined")
    create_topics(bootstrap, left_topic, right_topic, out)
    left = ddl(f"CREATE STREAM L (ID INT KEY, A STRING) WITH (KAFKA_TOPIC='{left_topic}', VALUE_FORMAT='JSON');")
    right = ddl(f"CREATE STREAM R (ID INT KEY, B STRING) WITH (KAFKA_TOPIC='{right_topic}', VALUE_FORMAT='JSON');")
    produce(bootstrap, left_topic, [(_int(1), b'{"A":"l1"}', 1000), (_int(2), b'{"A":"l2"}', 5000)])
    produce(bootstrap, right_topic, [(_int(1), b'{"B":"r1"}', 3000), (_int(2), b'{"B":"r2"}', 4000)])
    _s, joined = analyze("CREATE STREAM J AS SELECT L.ID AS ID, A, B FROM L JOIN R WITHIN 10 SECONDS "
                         "ON L.ID = R.ID EMIT CHANGES;", {"L": left, "R": right})
    start(runtime, "CSAS_J_6", joined, sink_of(joined, "J", out))
    got = read_timed_output(bootstrap, out, 2, runtime=runtime, query_id="CSAS_J_6")
    assert sorted(got, key=repr) == [(_int(1), b'{"A":"l1","B":"r1"}', 3000), (_int(2), b'{"A":"l2","B":"r2"}', 5000)]
    runtime.stop_persistent("CSAS_J_6")


def test_emit_final_writes_each_window_once_after_its_end_plus_grace(runtime, eos_broker):
    """TUMBLING (1 s, GRACE 0) ... EMIT FINAL: nothing is written for a window until stream time
    reaches its end (+ grace), then one record with the final count and the window's largest
    ROWTIME; a record for a closed window is dropped, not written as a second result."""
    bootstrap = eos_broker.bootstrap
    topic, out = unique("final_in"), unique("final_out")
    create_topics(bootstrap, topic, out)
    clicks = ddl(f"CREATE STREAM FC (K STRING KEY, V INT) WITH (KAFKA_TOPIC='{topic}', VALUE_FORMAT='JSON');")
    produce(bootstrap, topic, [(b"k", b'{"V":1}', 100), (b"k", b'{"V":2}', 200), (b"k", b'{"V":3}', 1500),
                               (b"k", b'{"V":4}', 2600)])
    _s, final = analyze("CREATE TABLE FINAL AS SELECT K, COUNT(*) AS N FROM FC "
                        "WINDOW TUMBLING (SIZE 1 SECOND, GRACE PERIOD 0 MILLISECONDS) GROUP BY K EMIT FINAL;",
                        {"FC": clicks})
    start(runtime, "CTAS_FINAL_7", final, sink_of(final, "FINAL", out))
    closed = read_timed_output(bootstrap, out, 2, runtime=runtime, query_id="CTAS_FINAL_7")
    assert sorted((_window_key(k), json.loads(v or b"null"), ts) for k, v, ts in closed) == [
        (("k", 0), {"N": 2}, 200), (("k", 1000), {"N": 1}, 1500)]
    # 300 is late for the closed [0, 1000); 3500 closes [2000, 3000).
    produce(bootstrap, topic, [(b"k", b'{"V":5}', 300), (b"k", b'{"V":6}', 3500)])
    got = read_timed_output(bootstrap, out, 3, runtime=runtime, query_id="CTAS_FINAL_7")
    assert got[:2] == closed
    assert [(_window_key(k), json.loads(v or b"null"), ts) for k, v, ts in got[2:]] == [
        (("k", 2000), {"N": 1}, 2600)]
    runtime.stop_persistent("CTAS_FINAL_7")


def test_global_watermark_drops_only_rows_older_than_max_stream_time_minus_grace(runtime, eos_broker):
    """The documented difference from Kafka Streams' per-partition stream time, and its bound.
    Partition 0 reaches 100 s; then partition 1 (its own stream time far behind) brings 50 s and
    96 s. Kafka Streams would count both (each is within grace of partition 1's stream time);
    Spark's one watermark (100 s - 5 s grace) drops 50 s but keeps 96 s: a row is dropped only
    when it is older than the largest ROWTIME of any partition minus the grace period."""
    bootstrap = eos_broker.bootstrap
    topic, out = unique("skew_in"), unique("skew_out")
    create_topics(bootstrap, topic, partitions=2)
    create_topics(bootstrap, out)
    skewed = ddl(f"CREATE STREAM SK (K STRING KEY, V INT) WITH (KAFKA_TOPIC='{topic}', VALUE_FORMAT='JSON');")
    _s, counts = analyze("CREATE TABLE SKC AS SELECT K, COUNT(*) AS N FROM SK "
                         "WINDOW TUMBLING (SIZE 10 SECONDS, GRACE PERIOD 5 SECONDS) GROUP BY K EMIT CHANGES;",
                         {"SK": skewed})
    _produce_to(bootstrap, topic, [(0, b"p0", b'{"V":1}', 100_000)])
    start(runtime, "CTAS_SKC_8", counts, sink_of(counts, "SKC", out))
    first = read_timed_output(bootstrap, out, 1, runtime=runtime, query_id="CTAS_SKC_8")
    assert [(_window_key(k), ts) for k, _v, ts in first] == [(("p0", 100_000), 100_000)]
    # The watermark (100 s - 5 s) holds from the next micro-batch on.
    _produce_to(bootstrap, topic, [(1, b"p1", b'{"V":2}', 50_000), (1, b"p1", b'{"V":3}', 96_000)])
    read_timed_output(bootstrap, out, 2, runtime=runtime, query_id="CTAS_SKC_8")
    # A last row in the kept window: every record before it has been processed.
    _produce_to(bootstrap, topic, [(1, b"p1", b'{"V":4}', 97_000)])
    got = read_timed_output(bootstrap, out, 3, runtime=runtime, query_id="CTAS_SKC_8")
    assert [(_window_key(k), json.loads(v or b"null"), ts) for k, v, ts in got] == [
        (("p0", 100_000), {"N": 1}, 100_000),
        (("p1", 90_000), {"N": 1}, 96_000),
        (("p1", 90_000), {"N": 2}, 97_000),
    ]
    runtime.stop_persistent("CTAS_SKC_8")


def test_table_aggregation_stamps_the_largest_rowtime_of_the_changes(runtime, eos_broker):
    """COUNT per region of a table: a group's record carries the largest ROWTIME of the records
    that changed it (Kafka Streams' KTableAggregate), so moving user 1 (at 2 s) out of east, whose
    latest change was at 3 s, writes east at 3 s and west at 2 s."""
    bootstrap = eos_broker.bootstrap
    topic, out = unique("users"), unique("regions")
    create_topics(bootstrap, topic, out)
    users = ddl(f"CREATE TABLE USERS (ID INT PRIMARY KEY, REGION STRING) WITH (KAFKA_TOPIC='{topic}', "
                "VALUE_FORMAT='JSON');")
    produce(bootstrap, topic, [(_int(1), b'{"REGION":"east"}', 1000), (_int(2), b'{"REGION":"east"}', 3000),
                               (_int(1), b'{"REGION":"west"}', 2000)])
    _s, counts = analyze("CREATE TABLE REGIONS AS SELECT REGION, COUNT(*) AS N FROM USERS GROUP BY REGION "
                         "EMIT CHANGES;", {"USERS": users})
    start(runtime, "CTAS_REGIONS_9", counts, sink_of(counts, "REGIONS", out))
    got = read_timed_output(bootstrap, out, 2, runtime=runtime, query_id="CTAS_REGIONS_9")
    assert _last_per_key(got) == {b"east": ({"N": 1}, 3000), b"west": ({"N": 1}, 2000)}
    runtime.stop_persistent("CTAS_REGIONS_9")
