"""Issue 11, point 1: stale write attempts never stall a later batch, and the ids stay bounded.

The argument these tests check is in docs/spark-exactly-once.md. The zombie scenarios that run
the real task code are in test_sink_failures.py; speculative execution is in
test_sink_speculation.py.
"""

from __future__ import annotations

import uuid
from collections import Counter

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from oncestream.spark.commit_journal import CommitJournal
from oncestream.spark.log_client import LogClient
from oncestream.spark.sink import ID_WINDOW
from oncestream.spark.txn_resolution import (
    HeldTransactions,
    Outcome,
    init_keeping_prepared,
    two_phase_producer,
)
from tests.spark.spark_support import committed_values, read_committed
from tests.support.txn import describe_transaction

pytestmark = pytest.mark.spark


def _topic(bootstrap: str, partitions: int = 1) -> str:
    name = f"stale-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(30)
    return name


def test_holder_fenced_by_a_stale_init_holds_the_transaction_again_and_commits(eos_broker):
    """KIP-939: InitProducerId(keepPreparedTxn) by a second producer keeps the prepared transaction
    and fences the first holder. The driver's holder, fenced that way between holding and
    completing (a stale attempt initializing on the id), holds the same transaction again and
    commits it instead of failing the batch."""
    bootstrap = eos_broker.bootstrap
    topic = _topic(bootstrap)
    txn_id = f"rehold-{uuid.uuid4().hex[:8]}"
    writer = two_phase_producer(bootstrap, txn_id)
    try:
        assert init_keeping_prepared(writer) == ""
        writer.begin_transaction()
        writer.produce(topic, b"prepared-once")
        state = str(writer.prepare_transaction(30))
    finally:
        writer.close(10)

    with HeldTransactions(bootstrap) as held:
        assert held.open([txn_id]) == {txn_id: state}
        stale = two_phase_producer(bootstrap, txn_id)
        try:
            assert init_keeping_prepared(stale) == state  # the transaction stays, the holder is fenced
        finally:
            stale.close(10)
        assert held.finish({txn_id: state}) == {txn_id: Outcome.COMMITTED}

    assert describe_transaction(bootstrap, txn_id).state == "CompleteCommit"
    assert read_committed(bootstrap, topic) == [(None, b"prepared-once")]


def test_transactional_ids_of_a_query_stay_bounded_over_many_batches(spark, eos_broker, tmp_path):
    """A query of at least eight micro-batches over two input partitions uses at most
    ID_WINDOW x 2 transactional ids (no task failed, so attempt 0 and the first alternative
    only), each batch slot in turn, and writes every record exactly once."""
    bootstrap = eos_broker.bootstrap
    topic_in, topic_out = _topic(bootstrap, partitions=2), _topic(bootstrap)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    values = [f"bounded-{i:04d}".encode() for i in range(160)]
    for i, value in enumerate(values):
        producer.produce(topic_in, value=value, partition=i % 2)
    assert producer.flush(30) == 0

    source = (spark.readStream.format("oncestream").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic_in).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "20").load())
    query = (source.select("value").writeStream.format("oncestream")
             .option("kafka.bootstrap.servers", bootstrap).option("topic", topic_out)
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    query.awaitTermination(600)
    assert query.exception() is None, query.exception()
    query_id = str(query.id)

    journal = CommitJournal(bootstrap)
    try:
        record = journal.last(query_id)
    finally:
        journal.close()
    assert record is not None, record
    assert record.batch_id >= 7, record
    with LogClient(bootstrap, client_id="test-check") as client:
        listed = client.list_transactions() or []
    prefix = f"oncestream-spark-{query_id}-"
    ids = {t for t, _pid, _state in listed if t.startswith(prefix)}
    assert 0 < len(ids) <= ID_WINDOW * 2, sorted(ids)
    assert {t[len(prefix):].split("-")[0] for t in ids} == {str(s) for s in range(ID_WINDOW)}, sorted(ids)
    assert all(state != "Ongoing" for t, _pid, state in listed if t.startswith(prefix))
    assert Counter(v for v in committed_values(bootstrap, topic_out)) == Counter(values)
