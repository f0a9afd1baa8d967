"""dual_write takes the connector's ``kafka.*`` options (issue 11, point 3), and the older keyword
form (``bootstrap_servers``, ``transactional_id``, ``producer_config``) keeps working."""

from __future__ import annotations

import sqlite3
import uuid
from collections import Counter

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

import oncestream.spark
from oncestream.spark.errors import OptionError
from tests.spark.spark_support import committed_values

pytestmark = pytest.mark.spark


def _apply(tx, batch_df, batch_id: int) -> None:
    rows = batch_df.select("value").collect()
    tx.executemany("INSERT INTO events (v, batch_id) VALUES (?, ?)",
                   [(bytes(r.value).decode(), batch_id) for r in rows])


def _store(tmp_path):
    store = oncestream.spark.SqliteStore(str(tmp_path / "events.db"))
    with store.transaction() as tx:
        tx.execute("CREATE TABLE IF NOT EXISTS events (v TEXT NOT NULL, batch_id BIGINT NOT NULL)")
    return store


def test_dual_write_options_reach_the_producer_and_are_validated_like_the_sink() -> None:
    writer = oncestream.spark.dual_write(
        options={"kafka.bootstrap.servers": "127.0.0.1:1", "kafka.transactional.id": "Pipe-A",
                 "kafka.linger.ms": "7", "kafka.compression.type": "gzip", "topic": "out"},
        store=None, apply=_apply)
    assert (writer.bootstrap_servers, writer.transactional_id, writer.topic) == ("127.0.0.1:1", "Pipe-A", "out")
    assert writer.producer_config == {"linger.ms": "7", "compression.type": "gzip"}

    # The keyword form overrides the options and merges its producer properties over theirs.
    writer = oncestream.spark.dual_write(
        options={"kafka.bootstrap.servers": "127.0.0.1:1", "kafka.transactional.id": "a",
                 "kafka.linger.ms": "7"},
        transactional_id="b", producer_config={"linger.ms": 9}, store=None, apply=_apply)
    assert (writer.transactional_id, writer.producer_config) == ("b", {"linger.ms": 9})

    with pytest.raises(OptionError, match=r"kafka\.value\.serializer"):
        oncestream.spark.dual_write(options={"kafka.bootstrap.servers": "h:1", "kafka.transactional.id": "a",
                                             "kafka.value.serializer": "x"}, store=None, apply=_apply)
    with pytest.raises(OptionError, match=r"kafka\.acks"):
        oncestream.spark.dual_write(options={"kafka.bootstrap.servers": "h:1", "kafka.transactional.id": "a",
                                             "kafka.acks": "1"}, store=None, apply=_apply)
    with pytest.raises(OptionError, match=r"transactional\.id"):
        oncestream.spark.dual_write(options={"kafka.bootstrap.servers": "h:1"}, store=None, apply=_apply)


def test_dual_write_with_kafka_options_writes_log_and_database_once(spark, eos_broker, tmp_path):
    """Two micro-batches through a dual writer configured only by connector options (with a
    producer property, compression), then a replay of batch 1 as after a driver crash: the log
    (read_committed) and the database each hold every row exactly once."""
    bootstrap = eos_broker.bootstrap
    topic = f"dual-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until its futures are done
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(30)
    options = {"kafka.bootstrap.servers": bootstrap, "kafka.transactional.id": f"dual-{topic}",
               "kafka.compression.type": "gzip", "topic": topic}
    store = _store(tmp_path)
    batches = [[f"b{b}-{i}".encode() for i in range(5)] for b in range(2)]
    writer = oncestream.spark.dual_write(options=options, store=store, apply=_apply,
                                         to_log=lambda df: df.select("value"))
    try:
        for batch_id, values in enumerate(batches):
            writer(spark.createDataFrame([(v,) for v in values], "value binary"), batch_id)
    finally:
        writer.close()
    replay = oncestream.spark.dual_write(options=options, store=store, apply=_apply,
                                         to_log=lambda df: df.select("value"))
    try:
        replay(spark.createDataFrame([(v,) for v in batches[1]], "value binary"), 1)
        assert replay.recovery == "nothing-open"
    finally:
        replay.close()

    want = Counter(v for values in batches for v in values)
    assert Counter(v for v in committed_values(bootstrap, topic)) == want
    with sqlite3.connect(tmp_path / "events.db") as conn:
        assert Counter(r[0].encode() for r in conn.execute("SELECT v FROM events")) == want
