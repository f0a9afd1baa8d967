"""KIP-890 over the wire: part 1 (a transactional produce to a partition the transaction never
added is refused) and part 2 (transaction version 2: the broker adds partitions itself, EndTxn
bumps the epoch on every commit and abort, so a delayed batch of an old transaction can never
join a new one). Driven with our minimal wire connection for exact control of versions and
epochs, and checked with a librdkafka read_committed consumer."""

from __future__ import annotations

import datetime
import time

import pytest
from kio.schema.errors import ErrorCode

from oncestream.client.common.connection import BrokerConnection, parse_bootstrap
from oncestream.protocol.codec import build
from oncestream.protocol.records import NewRecord, encode_batch
from tests.support.clients import create_topic, unique_topic
from tests.support.cluster_kind import ONE_BROKER_ASSUMED, not_on_cluster
from tests.support.txn import READ_COMMITTED, read_to_end, values_of

pytestmark = [pytest.mark.interop]

PRODUCE, FIND_COORDINATOR, INIT_PRODUCER_ID, ADD_PARTITIONS, END_TXN, API_VERSIONS = 0, 10, 22, 24, 26, 18


def _connect(bootstrap: str, caps: dict[int, int] | None = None) -> BrokerConnection:
    host, port = parse_bootstrap(bootstrap)
    return BrokerConnection(host, port, max_versions=caps)


def _init(conn: BrokerConnection, txn_id: str) -> tuple[int, int]:
    resp = conn.call(
        INIT_PRODUCER_ID,
        lambda m: build(
            m.InitProducerIdRequest,
            transactional_id=txn_id,
            transaction_timeout=datetime.timedelta(seconds=60),
            producer_id=-1,
            producer_epoch=-1,
            enable2_pc=False,
            keep_prepared_txn=False,
        ),
    )
    assert resp.error_code == ErrorCode.none
    return resp.producer_id, resp.producer_epoch


def _produce(conn: BrokerConnection, txn_id: str, topic: str, pid: int, epoch: int, seq: int, values: list[bytes]) -> ErrorCode:
    batch = encode_batch(
        [NewRecord(value=v) for v in values],
        now_ms=int(time.time() * 1000),
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=True,
    )
    resp = conn.call(
        PRODUCE,
        lambda m: build(
            m.ProduceRequest,
            transactional_id=txn_id,
            acks=-1,
            timeout=datetime.timedelta(seconds=30),
            topic_data=(build(m.TopicProduceData, name=topic,
                              partition_data=(build(m.PartitionProduceData, index=0, records=batch),)),),
        ),
    )
    return resp.responses[0].partition_responses[0].error_code


def _end(conn: BrokerConnection, txn_id: str, pid: int, epoch: int, commit: bool):
    return conn.call(
        END_TXN,
        lambda m: build(m.EndTxnRequest, transactional_id=txn_id, producer_id=pid, producer_epoch=epoch, committed=commit),
    )


def test_api_versions_announce_transaction_version_2(broker) -> None:
    with _connect(broker.bootstrap) as conn:
        resp = conn.call(API_VERSIONS,
                         lambda m: build(m.ApiVersionsRequest, client_software_name="t", client_software_version="1"))
        finalized = {f.name: f.max_version_level for f in resp.finalized_features}
        assert finalized.get("transaction.version") == 2
        assert conn.version_for(END_TXN) >= 5
        assert conn.version_for(PRODUCE) >= 12


@not_on_cluster(ONE_BROKER_ASSUMED)
def test_part1_produce_to_a_partition_not_in_the_transaction_is_refused(broker) -> None:
    topic = unique_topic("kip890-p1")
    create_topic(broker.bootstrap, topic, partitions=1)
    txn_id = unique_topic("tv1")
    with _connect(broker.bootstrap, {PRODUCE: 11, END_TXN: 4}) as conn:
        pid, epoch = _init(conn, txn_id)
        assert _produce(conn, txn_id, topic, pid, epoch, 0, [b"hanging"]) == ErrorCode.invalid_txn_state
    assert values_of(read_to_end(broker.bootstrap, topic, 1, isolation=READ_COMMITTED)) == {0: []}


@not_on_cluster(ONE_BROKER_ASSUMED)
def test_part2_implicit_add_epoch_bump_and_delayed_batch_fenced(broker) -> None:
    topic = unique_topic("kip890-p2")
    create_topic(broker.bootstrap, topic, partitions=1)
    txn_id = unique_topic("tv2")
    with _connect(broker.bootstrap) as conn:
        pid, epoch = _init(conn, txn_id)
        # No AddPartitionsToTxn: Produce v12 adds the partition to the transaction.
        assert _produce(conn, txn_id, topic, pid, epoch, 0, [b"t1-a", b"t1-b"]) == ErrorCode.none
        committed = _end(conn, txn_id, pid, epoch, commit=True)
        assert committed.error_code == ErrorCode.none
        assert (committed.producer_id, committed.producer_epoch) == (pid, epoch + 1), "commit bumps the epoch"
        # A batch of the first transaction delayed in the network arrives now: refused, and it
        # does not start or join a transaction.
        late = _produce(conn, txn_id, topic, pid, epoch, 2, [b"t1-late"])
        assert late in (ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch)
        next_epoch = committed.producer_epoch
        assert _produce(conn, txn_id, topic, pid, next_epoch, 0, [b"t2-aborted"]) == ErrorCode.none
        aborted = _end(conn, txn_id, pid, next_epoch, commit=False)
        assert aborted.error_code == ErrorCode.none, "abort bumps too"
        assert aborted.producer_epoch == next_epoch + 1, "abort bumps too"
        # An EndTxn of the old epoch (a delayed retry) cannot commit anything.
        stale = _end(conn, txn_id, pid, next_epoch, commit=True)
        assert stale.error_code != ErrorCode.none
    assert values_of(read_to_end(broker.bootstrap, topic, 1, isolation=READ_COMMITTED)) == {0: [b"t1-a", b"t1-b"]}
