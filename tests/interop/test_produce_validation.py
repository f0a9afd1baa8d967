"""Requests one client could use to harm others are refused, against a real broker process.

- Produce: Kafka's ProduceRequest rule, exactly one record batch per partition (v3+), and every
  batch header checked against the transaction coordinator: a plain batch can no longer carry an
  unregistered transactional batch past KIP-890's verification and open a transaction that no
  coordinator will ever close (the LSO would freeze for every read_committed reader).
- WriteTxnMarkers is the brokers' own API (Kafka authorizes it as ClusterAction): from a client it
  gets CLUSTER_AUTHORIZATION_FAILED and changes nothing. A forged ABORT used to be accepted, and the
  victim's commit then reported success while its records were gone.
- TxnOffsetCommit for a topic that does not exist is refused as OffsetCommit refuses it.
"""

from __future__ import annotations

import datetime
import time

import pytest
from kio.schema.errors import ErrorCode

from oncestream.protocol.codec import build
from oncestream.protocol.records import NewRecord, encode_batch
from tests.support.clients import create_topic, unique_topic
from tests.support.txn import (
    READ_COMMITTED,
    WireTxnProducer,
    list_offset,
    read_to_end,
    start_txn_broker,
    transactional_producer,
    values_of,
    wire_connection,
)

pytestmark = pytest.mark.interop

PRODUCE_KEY, WRITE_TXN_MARKERS_KEY = 0, 27


@pytest.fixture(scope="module")
def ours(tmp_path_factory):
    broker = start_txn_broker(tmp_path_factory.mktemp("produce-validation") / "data")
    try:
        yield broker
    finally:
        broker.stop()


def _plain_batch(values: list[bytes]) -> bytes:
    return encode_batch([NewRecord(value=v, key=b"k") for v in values], now_ms=int(time.time() * 1000))


def _produce(conn, topic: str, records: bytes, transactional_id: str | None = None):
    """One Produce request (acks=all) for partition 0; returns (error code, message)."""
    resp = conn.call(
        PRODUCE_KEY,
        lambda m: m.ProduceRequest(
            transactional_id=transactional_id,
            acks=-1,
            timeout=datetime.timedelta(seconds=30),
            topic_data=(m.TopicProduceData(name=topic, partition_data=(m.PartitionProduceData(index=0, records=records),)),),
        ),
    )
    (part,) = resp.responses[0].partition_responses
    return part.error_code, part.error_message


def test_two_batches_for_one_partition_are_refused_and_nothing_is_appended(ours):
    topic = unique_topic("two-batches")
    create_topic(ours.bootstrap, topic, partitions=1)
    with wire_connection(ours.bootstrap) as conn:
        error, message = _produce(conn, topic, _plain_batch([b"a"]) + _plain_batch([b"b", b"c"]))
        assert error == ErrorCode.invalid_record, error
        assert "exactly one record batch" in (message or "")
        assert list_offset(ours.bootstrap, topic, 0, read_committed=False) == 0
        error, _ = _produce(conn, topic, _plain_batch([b"d", b"e"]))
        assert error == ErrorCode.none
    assert list_offset(ours.bootstrap, topic, 0, read_committed=False) == 2


def test_a_plain_batch_cannot_smuggle_an_unregistered_transactional_batch(ours):
    """The transactional batch is refused with the error it gets alone (INVALID_TXN_STATE: its
    partition was never added to the transaction), nothing is appended, and the LSO stays at the
    high watermark: read_committed readers see later records."""
    topic = unique_topic("smuggle")
    create_topic(ours.bootstrap, topic, partitions=1)
    producer = WireTxnProducer(unique_topic("smuggler"))
    with wire_connection(ours.bootstrap) as conn:
        producer.init(conn)
        txn_batch = encode_batch(
            [NewRecord(value=b"hidden", key=b"k")], now_ms=int(time.time() * 1000),
            producer_id=producer.producer_id, producer_epoch=producer.producer_epoch, base_sequence=0,
            transactional=True,
        )
        alone, _ = _produce(conn, topic, txn_batch, producer.transactional_id)
        assert alone == ErrorCode.invalid_txn_state, alone
        smuggled, _ = _produce(conn, topic, _plain_batch([b"cover"]) + txn_batch, producer.transactional_id)
        assert smuggled == alone
        assert list_offset(ours.bootstrap, topic, 0, read_committed=False) == 0
        error, _ = _produce(conn, topic, _plain_batch([b"later"]))
        assert error == ErrorCode.none
    assert list_offset(ours.bootstrap, topic, 0, read_committed=True) == 1
    assert values_of(read_to_end(ours.bootstrap, topic, 1, isolation=READ_COMMITTED)) == {0: [b"later"]}


def _forge_abort(conn, topic: str, producer_id: int, producer_epoch: int):
    resp = conn.call(
        WRITE_TXN_MARKERS_KEY,
        lambda m: build(
            m.WriteTxnMarkersRequest,
            markers=(
                build(
                    m.WritableTxnMarker,
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                    transaction_result=False,
                    topics=(build(m.WritableTxnMarkerTopic, name=topic, partition_indexes=(0, 1)),),
                    coordinator_epoch=0,
                ),
            ),
        ),
    )
    return [p.error_code for marker in resp.markers for t in marker.topics for p in t.partitions]


def test_a_forged_abort_marker_is_refused_and_the_victims_commit_is_whole(ours):
    topic = unique_topic("forged-abort")
    create_topic(ours.bootstrap, topic, partitions=2)
    victim = transactional_producer(ours.bootstrap, unique_topic("victim"))
    victim.init_transactions(30)
    victim.begin_transaction()
    for partition in (0, 1):
        victim.produce(topic, f"v{partition}".encode(), partition=partition)
    assert victim.flush(30) == 0
    producer_id = None
    with wire_connection(ours.bootstrap) as conn:
        # The victim's producer id and epoch, as an attacker would learn them (DescribeProducers).
        from oncestream.client.admin.admin import Admin
        from oncestream.client.common.message import TopicPartition

        admin = Admin({"bootstrap.servers": ours.bootstrap})
        try:
            (active,) = [p for p in admin.describe_producers([TopicPartition(topic, 0)])[(topic, 0)]
                         if p.current_txn_start_offset >= 0]
        finally:
            admin.close()
        producer_id = active.producer_id
        codes = _forge_abort(conn, topic, producer_id, active.producer_epoch)
    assert codes == [ErrorCode.cluster_authorization_failed] * 2
    assert list_offset(ours.bootstrap, topic, 0, read_committed=True) == 0  # still open: nothing ended it
    victim.commit_transaction(30)
    assert values_of(read_to_end(ours.bootstrap, topic, 2, isolation=READ_COMMITTED)) == {0: [b"v0"], 1: [b"v1"]}


def test_txn_offset_commit_for_a_missing_topic_is_refused_like_offset_commit(ours):
    group = unique_topic("txn-oc-missing")
    missing = unique_topic("no-such-topic")
    producer = WireTxnProducer(unique_topic("txn-oc"))
    with wire_connection(ours.bootstrap) as conn:
        producer.init(conn)
        assert producer.add_offsets(conn, group) == ErrorCode.none
        assert producer.txn_offset_commit(conn, group, missing, 5) == ErrorCode.unknown_topic_or_partition
        assert producer.end(conn, commit=True) == ErrorCode.none
    from tests.support.txn import committed_offsets

    assert committed_offsets(ours.bootstrap, group, missing, 1) == {0: -1001}  # OFFSET_INVALID: none
