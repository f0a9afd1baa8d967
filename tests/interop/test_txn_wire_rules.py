"""Transaction rules checked request by request against a real broker process:
KIP-360 epoch bump with the current producer id/epoch, transaction.timeout.ms above
transaction.max.timeout.ms refused (also through librdkafka), and KIP-447 RequireStable:
OffsetFetch answers UNSTABLE_OFFSET_COMMIT while a transactional offset commit is pending."""

from __future__ import annotations

import datetime

import pytest
from confluent_kafka import KafkaException, Producer
from kio.schema.errors import ErrorCode

from oncestream.protocol.codec import build
from tests.support.clients import create_topic, unique_topic
from tests.support.txn import WireTxnProducer, fetch_committed_offset, wire_connection

pytestmark = pytest.mark.interop

INIT_PRODUCER_ID = 22
MAX_TIMEOUT_MS = 30000


@pytest.fixture(scope="module")
def capped_broker(tmp_path_factory):
    from tests.support.brokers import BrokerProcess

    process = BrokerProcess(
        data_dir=tmp_path_factory.mktemp("txnrules") / "data",
        config={"transaction.max.timeout.ms": str(MAX_TIMEOUT_MS)},
    )
    process.start()
    yield process
    process.stop()


def test_kip360_init_with_current_id_and_epoch_bumps_the_epoch(capped_broker) -> None:
    producer = WireTxnProducer(unique_topic("kip360"), transaction_timeout_ms=10000)
    with wire_connection(capped_broker.bootstrap) as conn:
        pid, epoch = producer.init(conn)
        bumped = producer.init(conn, bump_current=True)
        assert bumped == (pid, epoch + 1)
        # Bumping again with the new pair works too...
        assert producer.init(conn, bump_current=True) == (pid, epoch + 2)
        # ...but a pair older than the one the last bump started from (which Kafka still treats as
        # a retry of that bump) is fenced rather than bumped.
        resp = conn.call(
            INIT_PRODUCER_ID,
            lambda m: build(
                m.InitProducerIdRequest,
                transactional_id=producer.transactional_id,
                transaction_timeout=datetime.timedelta(seconds=10),
                producer_id=pid,
                producer_epoch=epoch,
            ),
        )
        assert resp.error_code in (ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch)


def test_transaction_timeout_above_the_broker_maximum_is_refused(capped_broker) -> None:
    producer = WireTxnProducer(unique_topic("too-long"), transaction_timeout_ms=MAX_TIMEOUT_MS + 1)
    with wire_connection(capped_broker.bootstrap) as conn:
        with pytest.raises(AssertionError, match="invalid_transaction_timeout"):
            producer.init(conn)
    rdkafka = Producer(
        {
            "bootstrap.servers": capped_broker.bootstrap,
            "transactional.id": unique_topic("too-long-rd"),
            "transaction.timeout.ms": MAX_TIMEOUT_MS + 1,
        }
    )
    with pytest.raises(KafkaException) as raised:
        rdkafka.init_transactions(30)
    assert "INVALID_TRANSACTION_TIMEOUT" in str(raised.value).upper().replace(" ", "_") or raised.value.args[0].code() == 50


def test_require_stable_offset_fetch_answers_unstable_while_txn_offsets_are_pending(capped_broker) -> None:
    topic = unique_topic("stable")
    create_topic(capped_broker.bootstrap, topic, partitions=1)
    group = unique_topic("stable-group")
    producer = WireTxnProducer(unique_topic("stable-txn"), transaction_timeout_ms=10000)
    with wire_connection(capped_broker.bootstrap) as conn:
        producer.init(conn)
        assert producer.add_offsets(conn, group) == ErrorCode.none
        assert producer.txn_offset_commit(conn, group, topic, 42) == ErrorCode.none
        assert fetch_committed_offset(conn, group, topic, require_stable=True)[0] == ErrorCode.unstable_offset_commit
        assert fetch_committed_offset(conn, group, topic, require_stable=False) == (ErrorCode.none, -1)
        assert producer.end(conn, commit=True) == ErrorCode.none
        assert fetch_committed_offset(conn, group, topic, require_stable=True) == (ErrorCode.none, 42)
