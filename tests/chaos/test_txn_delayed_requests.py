"""Delayed transactional requests (the Jepsen Bufstream 0.1.0 / KAFKA-17754 fault).

A proxy (tests/support/delay_proxy.py) sits between clients and the broker, which advertises the
proxy's address, and holds back one chosen request until the client has long moved on. When the
stale request finally reaches the broker it must change nothing:

- a Produce of a transaction that was since aborted must not land in the producer's next
  transaction: after the client's epoch bump (KIP-360) it is rejected as a stale epoch, and
  without a bump it is rejected because its partition is not in the ongoing transaction
  (KIP-890 part 1 verification), so it cannot leave a hanging transaction either;
- an EndTxn(commit) of a fenced epoch must not commit anything, in particular not the open
  transaction of the producer that fenced it;
- an AddPartitionsToTxn of a fenced epoch must not add its partition to the new transaction.

Every scenario then checks the data: no aborted read, no lost write, no torn transaction, and
the LSO of every partition back at the high watermark (no hanging transaction).

The precise scenarios drive the protocol by hand (tests/support/txn.py WireTxnProducer); one
scenario uses librdkafka itself, whose timed-out Produce the proxy delivers late.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Generic, TypeVar

import pytest
from confluent_kafka import KafkaException
from kio.schema.errors import ErrorCode

from tests.support.brokers import BrokerProcess
from tests.support.clients import CLIENT_TIMEOUT_S, create_topic, unique_topic
from tests.support.delay_proxy import DelayProxy
from tests.support.txn import (
    ADD_PARTITIONS_TO_TXN_KEY,
    END_TXN_KEY,
    PRODUCE_KEY,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    DeliveryLog,
    WireTxnProducer,
    describe_transaction,
    list_offset,
    produce_values,
    read_to_end,
    start_txn_broker,
    transactional_producer,
    values_of,
    wire_connection,
)

pytestmark = pytest.mark.chaos

HOLD_WAIT_S = 30.0
STALE_EPOCH_ERRORS = (ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch)

T = TypeVar("T")


@pytest.fixture(scope="module")
def proxied_broker(tmp_path_factory):
    """(broker, proxy): our broker advertising a DelayProxy in front of it, so every client
    connection, bootstrap or not, goes through the proxy."""
    holder: dict[str, BrokerProcess] = {}
    proxy = DelayProxy(lambda: (holder["broker"].host, holder["broker"].port)).start()
    broker = start_txn_broker(
        tmp_path_factory.mktemp("delay-broker") / "data",
        {"advertised.listeners": f"PLAINTEXT://{proxy.bootstrap}"},
    )
    holder["broker"] = broker
    try:
        yield broker, proxy
    finally:
        proxy.close()
        broker.stop()


class InBackground(Generic[T]):
    """Run one blocking call on a thread (it waits on a held request) and keep its result."""

    def __init__(self, fn: Callable[[], T]) -> None:
        self._results: list[T] = []  # the call's result, once it returned
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], T]) -> None:
        try:
            self._results.append(fn())
        except BaseException as exc:  # noqa: BLE001 - surfaced by join()
            self.error = exc

    def join(self, timeout_s: float = CLIENT_TIMEOUT_S) -> T:
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), "the delayed call never returned"
        if self.error is not None:
            raise self.error
        (result,) = self._results
        return result


def _txn_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _assert_no_hanging_transaction(bootstrap: str, topic: str, partitions: int) -> None:
    for p in range(partitions):
        lso = list_offset(bootstrap, topic, p, read_committed=True)
        hw = list_offset(bootstrap, topic, p, read_committed=False)
        assert lso == hw, f"{topic}[{p}]: LSO {lso} held below high watermark {hw} (hanging transaction)"


def test_delayed_produce_of_aborted_transaction_is_rejected_after_epoch_bump(proxied_broker):
    """A Produce of transaction 1 (epoch e) is delayed; the client gives up, aborts, bumps its
    epoch with InitProducerId(id, e) (KIP-360) and commits transaction 2 on the same partitions.
    The late Produce is then answered with a stale-epoch error and lands nowhere."""
    _broker, proxy = proxied_broker
    bootstrap = proxy.bootstrap
    topic = unique_topic("delay-produce")
    create_topic(bootstrap, topic, partitions=2)
    producer = WireTxnProducer(_txn_id("delay-produce"))
    with wire_connection(bootstrap) as control, wire_connection(bootstrap) as data:
        producer.init(control)
        stale_epoch = producer.producer_epoch
        assert producer.add_partitions(control, topic, [0]) == {(topic, 0): ErrorCode.none}
        held = proxy.hold_next(lambda r: r.api_key == PRODUCE_KEY)
        late = InBackground(lambda: producer.produce(data, topic, 0, [b"stale-p0"]))
        held.wait_held(HOLD_WAIT_S)

        assert producer.end(control, commit=False) == ErrorCode.none  # the client gave up
        producer.init(control, bump_current=True)
        assert producer.producer_epoch == stale_epoch + 1
        assert producer.add_partitions(control, topic, [0, 1]) == {
            (topic, 0): ErrorCode.none, (topic, 1): ErrorCode.none,
        }
        assert producer.produce(control, topic, 0, [b"fresh-p0"])[0] == ErrorCode.none
        assert producer.produce(control, topic, 1, [b"fresh-p1"])[0] == ErrorCode.none

        held.release()
        error, _offset = late.join()
        assert error in STALE_EPOCH_ERRORS, f"stale produce answered {error.name}"
        assert producer.end(control, commit=True) == ErrorCode.none

    expected = {0: [b"fresh-p0"], 1: [b"fresh-p1"]}
    assert values_of(read_to_end(bootstrap, topic, 2, isolation=READ_COMMITTED)) == expected
    assert values_of(read_to_end(bootstrap, topic, 2, isolation=READ_UNCOMMITTED)) == expected, (
        "the stale batch must not be in the log at all"
    )
    _assert_no_hanging_transaction(bootstrap, topic, 2)


def test_delayed_produce_to_partition_not_in_new_transaction_is_rejected(proxied_broker):
    """KIP-890 part 1: transaction 1 added partition 0 and its Produce there is delayed; the
    client aborts and, without an epoch bump, starts transaction 2 on partition 1 only. The late
    Produce (same producer id and epoch) must be refused, not appended to partition 0 where no
    marker would ever come (a hanging transaction that would stall the LSO forever)."""
    _broker, proxy = proxied_broker
    bootstrap = proxy.bootstrap
    topic = unique_topic("delay-verify")
    create_topic(bootstrap, topic, partitions=2)
    producer = WireTxnProducer(_txn_id("delay-verify"))
    with wire_connection(bootstrap) as control, wire_connection(bootstrap) as data:
        producer.init(control)
        assert producer.add_partitions(control, topic, [0]) == {(topic, 0): ErrorCode.none}
        held = proxy.hold_next(lambda r: r.api_key == PRODUCE_KEY)
        late = InBackground(lambda: producer.produce(data, topic, 0, [b"stale-p0"]))
        held.wait_held(HOLD_WAIT_S)

        assert producer.end(control, commit=False) == ErrorCode.none
        assert producer.add_partitions(control, topic, [1]) == {(topic, 1): ErrorCode.none}
        assert producer.produce(control, topic, 1, [b"fresh-p1"])[0] == ErrorCode.none

        held.release()
        error, _offset = late.join()
        assert error == ErrorCode.invalid_txn_state, f"stale produce answered {error.name}"
        assert describe_transaction(bootstrap, producer.transactional_id).partitions == {(topic, 1)}
        assert producer.end(control, commit=True) == ErrorCode.none

    expected = {0: [], 1: [b"fresh-p1"]}
    assert values_of(read_to_end(bootstrap, topic, 2, isolation=READ_COMMITTED)) == expected
    assert values_of(read_to_end(bootstrap, topic, 2, isolation=READ_UNCOMMITTED)) == expected
    _assert_no_hanging_transaction(bootstrap, topic, 2)


def test_delayed_end_txn_commit_of_fenced_epoch_commits_nothing(proxied_broker):
    """An EndTxn(commit) is delayed; meanwhile a new instance with the same transactional id
    fences the old one (its transaction is aborted) and opens a transaction of its own. The late
    EndTxn is answered PRODUCER_FENCED and neither the old nor the new transaction commits: the
    new one stays open (LSO held at its first record) until its own producer commits it."""
    _broker, proxy = proxied_broker
    bootstrap = proxy.bootstrap
    topic = unique_topic("delay-endtxn")
    create_topic(bootstrap, topic, partitions=2)
    txn_id = _txn_id("delay-endtxn")
    old, new = WireTxnProducer(txn_id), WireTxnProducer(txn_id)
    with wire_connection(bootstrap) as old_conn, wire_connection(bootstrap) as new_conn:
        old.init(old_conn)
        assert set(old.add_partitions(old_conn, topic, [0, 1]).values()) == {ErrorCode.none}
        assert old.produce(old_conn, topic, 0, [b"old-p0"])[0] == ErrorCode.none
        assert old.produce(old_conn, topic, 1, [b"old-p1"])[0] == ErrorCode.none
        held = proxy.hold_next(lambda r: r.api_key == END_TXN_KEY)
        late = InBackground(lambda: old.end(old_conn, commit=True))
        held.wait_held(HOLD_WAIT_S)

        new.init(new_conn)  # fences the old epoch and aborts its transaction
        assert new.producer_id == old.producer_id
        assert new.producer_epoch > old.producer_epoch
        assert new.add_partitions(new_conn, topic, [0]) == {(topic, 0): ErrorCode.none}
        error, new_offset = new.produce(new_conn, topic, 0, [b"new-p0"])
        assert error == ErrorCode.none

        held.release()
        assert late.join() in STALE_EPOCH_ERRORS
        described = describe_transaction(bootstrap, txn_id)
        assert (described.state, described.producer_epoch) == ("Ongoing", new.producer_epoch)
        assert list_offset(bootstrap, topic, 0, read_committed=True) == new_offset, (
            "the new transaction must still be open after the stale commit"
        )
        assert values_of(read_to_end(bootstrap, topic, 2, isolation=READ_UNCOMMITTED)) == {
            0: [b"old-p0", b"new-p0"], 1: [b"old-p1"],
        }
        assert new.end(new_conn, commit=True) == ErrorCode.none

    assert values_of(read_to_end(bootstrap, topic, 2, isolation=READ_COMMITTED)) == {0: [b"new-p0"], 1: []}
    _assert_no_hanging_transaction(bootstrap, topic, 2)


def test_delayed_add_partitions_of_fenced_epoch_adds_nothing(proxied_broker):
    """An AddPartitionsToTxn(partition 1) of the old epoch is delayed past a fence; on arrival it
    is refused and partition 1 does not join the new instance's transaction."""
    _broker, proxy = proxied_broker
    bootstrap = proxy.bootstrap
    topic = unique_topic("delay-addparts")
    create_topic(bootstrap, topic, partitions=2)
    txn_id = _txn_id("delay-addparts")
    old, new = WireTxnProducer(txn_id), WireTxnProducer(txn_id)
    with wire_connection(bootstrap) as old_conn, wire_connection(bootstrap) as new_conn:
        old.init(old_conn)
        assert old.add_partitions(old_conn, topic, [0]) == {(topic, 0): ErrorCode.none}
        assert old.produce(old_conn, topic, 0, [b"old-p0"])[0] == ErrorCode.none
        held = proxy.hold_next(lambda r: r.api_key == ADD_PARTITIONS_TO_TXN_KEY)
        late = InBackground(lambda: old.add_partitions(old_conn, topic, [1]))
        held.wait_held(HOLD_WAIT_S)

        new.init(new_conn)
        assert new.add_partitions(new_conn, topic, [0]) == {(topic, 0): ErrorCode.none}
        assert new.produce(new_conn, topic, 0, [b"new-p0"])[0] == ErrorCode.none

        held.release()
        assert set(late.join().values()) <= set(STALE_EPOCH_ERRORS)
        assert describe_transaction(bootstrap, txn_id).partitions == {(topic, 0)}
        assert new.end(new_conn, commit=True) == ErrorCode.none

    assert values_of(read_to_end(bootstrap, topic, 2, isolation=READ_COMMITTED)) == {0: [b"new-p0"], 1: []}
    _assert_no_hanging_transaction(bootstrap, topic, 2)


def test_librdkafka_produce_delivered_after_its_transaction_was_aborted(proxied_broker):
    """The same fault with librdkafka: its transactional Produce is held until the request times
    out; the application aborts (librdkafka bumps the epoch, as a timed-out batch may have been
    written) and commits a new transaction; then the held Produce reaches the broker. It must
    not be accepted, and read_committed sees exactly the new transaction."""
    _broker, proxy = proxied_broker
    bootstrap = proxy.bootstrap
    topic = unique_topic("delay-rdkafka")
    create_topic(bootstrap, topic, partitions=2)
    txn_id = _txn_id("delay-rdkafka")
    producer = transactional_producer(
        bootstrap, txn_id,
        **{"request.timeout.ms": 2000, "message.timeout.ms": 4000, "transaction.timeout.ms": 30000},
    )
    producer.init_transactions(CLIENT_TIMEOUT_S)
    first_epoch = describe_transaction(bootstrap, txn_id).producer_epoch
    held = proxy.hold_next(lambda r: r.api_key == PRODUCE_KEY)
    producer.begin_transaction()
    stale = DeliveryLog()
    produce_values(producer, topic, {0: [b"stale-p0"]}, stale)
    held.wait_held(HOLD_WAIT_S)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    assert not stale.delivered, "the held produce must fail on the client side"
    assert stale.errors, "the held produce must fail on the client side"
    # A transaction with a failed produce must not commit: librdkafka's error is abortable.
    with pytest.raises(KafkaException) as raised:
        producer.commit_transaction(CLIENT_TIMEOUT_S)
    assert raised.value.args[0].txn_requires_abort(), raised.value
    producer.abort_transaction(CLIENT_TIMEOUT_S)

    fresh = {0: [b"fresh-p0"], 1: [b"fresh-p1"]}
    producer.begin_transaction()
    produce_values(producer, topic, fresh)
    producer.commit_transaction(CLIENT_TIMEOUT_S)
    assert describe_transaction(bootstrap, txn_id).producer_epoch > first_epoch

    held.release()
    late_response = held.decode_response(CLIENT_TIMEOUT_S)
    errors = {p.error_code for t in late_response.responses for p in t.partition_responses}
    assert errors, f"the stale produce was accepted: {late_response}"
    assert ErrorCode.none not in errors, f"the stale produce was accepted: {late_response}"

    assert values_of(read_to_end(bootstrap, topic, 2, isolation=READ_COMMITTED)) == fresh
    assert values_of(read_to_end(bootstrap, topic, 2, isolation=READ_UNCOMMITTED)) == fresh
    _assert_no_hanging_transaction(bootstrap, topic, 2)
