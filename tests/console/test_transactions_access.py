"""The console's transaction actions (console/transactions_access.py) against a real broker
process, with librdkafka producers and read_committed consumers as the judges.

A *hanging* transaction on our broker: the broker runs with the timed-out-transaction sweep
(``transaction.abort.timed.out.transaction.cleanup.interval.ms``) at one hour, as a coordinator
whose sweep has stalled, and a librdkafka producer opens a transaction with a 1 s timeout and
then stops without ending it (abandoned, as a crashed application leaves it). Past the second the
coordinator still lists it Ongoing: open past its timeout, holding the partition's LSO back.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer

from oncestream.client import PreparedTxnState
from oncestream.client import Producer as OurProducer
from oncestream.client.admin.admin import AbortTransactionSpec, Admin
from oncestream.console.transactions_access import (
    TransactionActionError,
    abort_hanging,
    complete_prepared,
    read_snapshot,
)
from oncestream.console.transactions_view import LSO_HELD_BACK, OPEN_PAST_TIMEOUT
from tests.support.clients import CLIENT_TIMEOUT_S, create_topic, unique_topic
from tests.support.txn import READ_COMMITTED, list_offset, read_to_end, values_of, wait_until

pytestmark = [pytest.mark.interop]

HUNG_BROKER_CONFIG = {
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "3600000",
    "transaction.two.phase.commit.enable": "true",
}
SHORT_TXN_TIMEOUT_MS = 1000


def hang_transaction(bootstrap: str, topic: str, txn_id: str) -> Producer:
    """A transaction open past its 1 s timeout on ``topic[0]`` (its record at offset 0, flushed),
    and a plain record after it (offset 1): the LSO stays at 0, the high watermark is 2."""
    stuck = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                      "transaction.timeout.ms": SHORT_TXN_TIMEOUT_MS})
    stuck.init_transactions(CLIENT_TIMEOUT_S)
    stuck.begin_transaction()
    stuck.produce(topic, b"never-committed", partition=0)
    assert stuck.flush(CLIENT_TIMEOUT_S) == 0
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce(topic, b"after", partition=0)
    assert plain.flush(CLIENT_TIMEOUT_S) == 0
    return stuck


def test_a_transaction_open_past_its_timeout_is_flagged_and_aborted_through_its_coordinator(broker_factory) -> None:
    broker = broker_factory(HUNG_BROKER_CONFIG)
    topic, txn_id = unique_topic("console-hang"), unique_topic("hung")
    create_topic(broker.bootstrap, topic, partitions=1)
    hang_transaction(broker.bootstrap, topic, txn_id)
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        def flagged() -> bool:
            row = read_snapshot(admin).transaction(txn_id)
            return row is not None and row.hanging
        wait_until(flagged, 30, "the transaction flagged as open past its timeout")
        snap = read_snapshot(admin)
        row = snap.transaction(txn_id)
        assert row is not None
        assert [f.kind for f in row.flags] == [OPEN_PAST_TIMEOUT, LSO_HELD_BACK]
        (held,) = snap.hanging
        assert (held.topic, held.partition, held.start_offset) == (topic, 0, 0)
        assert held.offsets is not None
        assert (held.offsets.last_stable_offset, held.offsets.high_watermark) == (0, 2)

        outcome = abort_hanging(admin, AbortTransactionSpec(held.topic, held.partition, held.producer_id,
                                                            held.producer_epoch, held.coordinator_epoch))
        assert (outcome.how, outcome.transactional_id) == ("coordinator", txn_id)
        # The ABORT marker took offset 2: the LSO caught up with the high watermark.
        assert list_offset(broker.bootstrap, topic, 0, read_committed=True) == 3
        assert list_offset(broker.bootstrap, topic, 0, read_committed=False) == 3
        assert values_of(read_to_end(broker.bootstrap, topic, 1, isolation=READ_COMMITTED)) == {0: [b"after"]}
        after = read_snapshot(admin)
        assert after.hanging == ()
        ended = after.transaction(txn_id)
        assert ended is not None
        assert ended.state == "CompleteAbort"


def test_a_marker_abort_is_refused_by_our_broker_in_words(broker_factory) -> None:
    """No coordinator lists the producer (a made-up id): the console writes the marker as
    kafka-transactions does, which our broker refuses to clients (ClusterAction)."""
    broker = broker_factory(HUNG_BROKER_CONFIG)
    topic = unique_topic("console-marker")
    create_topic(broker.bootstrap, topic, partitions=1)
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin, pytest.raises(TransactionActionError) as refused:
        abort_hanging(admin, AbortTransactionSpec(topic, 0, 424242, 0, -1))
    assert "CLUSTER_AUTHORIZATION_FAILED" in str(refused.value)


def test_a_prepared_two_phase_transaction_is_committed_by_the_console(broker_factory) -> None:
    broker = broker_factory(HUNG_BROKER_CONFIG)
    topic, txn_id = unique_topic("console-2pc"), unique_topic("prepared")
    create_topic(broker.bootstrap, topic, partitions=1)
    app = OurProducer({"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id,
                       "transaction.two.phase.commit.enable": True})
    app.init_transactions(CLIENT_TIMEOUT_S)
    app.begin_transaction()
    app.produce(topic, b"prepared-record", partition=0)
    state: PreparedTxnState = app.prepare_transaction(CLIENT_TIMEOUT_S)
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        row = read_snapshot(admin).transaction(txn_id)
        assert row is not None
        assert row.prepared
        assert not row.hanging
        assert row.producer_id == state.producer_id
        with pytest.raises(TransactionActionError, match="not 1 as confirmed"):
            complete_prepared({"bootstrap.servers": broker.bootstrap}, txn_id, 1, commit=True)
        message = complete_prepared({"bootstrap.servers": broker.bootstrap}, txn_id, row.producer_id, commit=True)
        assert "committed" in message
        assert values_of(read_to_end(broker.bootstrap, topic, 1, isolation=READ_COMMITTED)) == {0: [b"prepared-record"]}
        deadline = time.monotonic() + 30
        while (ended := read_snapshot(admin).transaction(txn_id)) is not None and ended.prepared:
            assert time.monotonic() < deadline, "still prepared after the commit"
            time.sleep(0.1)
    app.close(1)
