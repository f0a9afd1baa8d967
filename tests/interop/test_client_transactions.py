"""oncestream.client's transactional producer (KIP-98, KIP-360, KIP-447, KIP-588) against our
broker, with visibility always checked by librdkafka (confluent-kafka) consumers.

What each test proves:
- committed transactions spanning partitions are visible to read_committed readers; aborted
  ones never are, while read_uncommitted readers see both (the data really was written);
- fencing: a second instance with the same transactional.id fences the first, whose commit then
  fails with a fatal error, and whose open transaction is aborted;
- an abortable error (a record larger than the topic's max.message.bytes) makes
  commit_transaction raise an error with txn_requires_abort(); abort_transaction recovers and
  the next transaction commits (the sequence gap left by the rejected batch is closed by a
  KIP-360 epoch bump);
- send_offsets_to_transaction (AddOffsetsToTxn + TxnOffsetCommit with the group's generation and
  member id, KIP-447): a consume-transform-produce loop commits its input offsets atomically
  with its output; an aborted transaction commits neither.

Every test runs twice: against a broker finalizing ``transaction.version=2`` (the client then uses
KIP-890 part 2: Produce v12, EndTxn v5 bumping the epoch, TxnOffsetCommit v5) and against one at
version 1 (the KIP-98 requests Kafka 3.x brokers need). The epoch test shows which one was used.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

import pytest

from oncestream.client import (
    OFFSET_BEGINNING,
    Admin,
    Consumer,
    KafkaException,
    NewTopic,
    Producer,
    TopicPartition,
)
from tests.support.brokers import BrokerProcess
from tests.support.clients import CLIENT_TIMEOUT_S, create_topic, unique_topic
from tests.support.cluster_kind import ONE_BROKER_ASSUMED, not_on_cluster
from tests.support.narrow import message_position, message_value
from tests.support.txn import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    TXN_BROKER_CONFIG,
    committed_offsets,
    describe_transaction,
    list_offset,
    read_to_end,
    values_of,
)

pytestmark = [pytest.mark.interop]

PARTITIONS = 3


@dataclass(frozen=True)
class VersionedBroker:
    """A transaction broker and the transaction.version it was started with."""

    process: BrokerProcess
    transaction_version: int

    @property
    def bootstrap(self) -> str:
        return self.process.bootstrap


@pytest.fixture(scope="module", params=[2, 1], ids=["tv2", "tv1"])
def txn_broker(request, module_broker_factory):
    broker = module_broker_factory({**TXN_BROKER_CONFIG, "transaction.version": str(request.param)},
                                   name="client-txn")
    return VersionedBroker(broker, request.param)


def _producer(bootstrap: str, transactional_id: str, **conf: object) -> Producer:
    base = {"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5}
    base.update(conf)
    producer = Producer(base)
    producer.init_transactions(CLIENT_TIMEOUT_S)
    return producer


def _txn_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _run(producer: Producer, topic: str, tag: str, per_partition: int, *, commit: bool) -> dict[int, list[bytes]]:
    producer.begin_transaction()
    values: dict[int, list[bytes]] = {}
    for p in range(PARTITIONS):
        values[p] = [b"%s-p%d-%03d" % (tag.encode(), p, i) for i in range(per_partition)]
        for v in values[p]:
            producer.produce(topic, v, partition=p)
    if commit:
        producer.commit_transaction(CLIENT_TIMEOUT_S)
    else:
        # Written first (abort_transaction drops records not sent yet), so read_uncommitted
        # readers can show the aborted data really is in the log.
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
        producer.abort_transaction(CLIENT_TIMEOUT_S)
    return values


def _merge(*parts: dict[int, list[bytes]]) -> dict[int, list[bytes]]:
    merged: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for part in parts:
        for p, values in part.items():
            merged[p].extend(values)
    return merged


def test_commit_and_abort_visibility_for_librdkafka_readers(txn_broker):
    bootstrap = txn_broker.bootstrap
    topic = unique_topic("ctxn-vis")
    create_topic(bootstrap, topic, partitions=PARTITIONS)
    producer = _producer(bootstrap, _txn_id("vis"))
    try:
        plan = [("c1", True, 30), ("a1", False, 20), ("c2", True, 5), ("a2", False, 7), ("c3", True, 11)]
        parts = [(commit, _run(producer, topic, tag, n, commit=commit)) for tag, commit, n in plan]
    finally:
        producer.close()
    committed = values_of(read_to_end(bootstrap, topic, PARTITIONS, isolation=READ_COMMITTED))
    everything = values_of(read_to_end(bootstrap, topic, PARTITIONS, isolation=READ_UNCOMMITTED))
    assert committed == _merge(*[v for c, v in parts if c])
    assert everything == _merge(*[v for _, v in parts])
    for p in range(PARTITIONS):  # no transaction left open: LSO == high watermark
        assert list_offset(bootstrap, topic, p, read_committed=True) == list_offset(
            bootstrap, topic, p, read_committed=False)


def test_our_read_committed_consumer_agrees_with_librdkafka(txn_broker):
    bootstrap = txn_broker.bootstrap
    topic = unique_topic("ctxn-ours")
    create_topic(bootstrap, topic, partitions=PARTITIONS)
    producer = _producer(bootstrap, _txn_id("ours"))
    try:
        committed_parts = [_run(producer, topic, "c1", 10, commit=True)]
        _run(producer, topic, "a1", 10, commit=False)
        committed_parts.append(_run(producer, topic, "c2", 10, commit=True))
    finally:
        producer.close()
    expected = _merge(*committed_parts)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("rc"),
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    got: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while sum(len(v) for v in got.values()) < sum(len(v) for v in expected.values()):
            assert time.monotonic() < deadline
            for msg in consumer.consume(500, 0.5):
                assert msg.error() is None
                got[message_position(msg)[0]].append(message_value(msg))
        assert consumer.poll(0.5) is None  # nothing more: the aborted records never show up
    finally:
        consumer.close()
    assert got == expected


def test_second_instance_fences_the_first(txn_broker):
    bootstrap = txn_broker.bootstrap
    topic = unique_topic("ctxn-fence")
    create_topic(bootstrap, topic, partitions=PARTITIONS)
    transactional_id = _txn_id("fence")
    first = _producer(bootstrap, transactional_id)
    second = None
    try:
        first.begin_transaction()
        for p in range(PARTITIONS):
            first.produce(topic, b"zombie-%d" % p, partition=p)
        assert first.flush(CLIENT_TIMEOUT_S) == 0
        second = _producer(bootstrap, transactional_id)  # bumps the epoch, aborts first's txn
        with pytest.raises(KafkaException) as info:
            first.commit_transaction(CLIENT_TIMEOUT_S)
        assert info.value.args[0].fatal(), info.value.args[0]
        with pytest.raises(KafkaException):
            first.begin_transaction()
        committed = _run(second, topic, "live", 3, commit=True)
    finally:
        first.close()
        if second is not None:
            second.close()
    assert values_of(read_to_end(bootstrap, topic, PARTITIONS, isolation=READ_COMMITTED)) == committed


@not_on_cluster(ONE_BROKER_ASSUMED)
def test_abortable_error_then_abort_then_next_transaction_commits(txn_broker):
    bootstrap = txn_broker.bootstrap
    topic = unique_topic("ctxn-abortable")
    admin = Admin({"bootstrap.servers": bootstrap})
    try:
        assert admin.create_topics([NewTopic(topic, PARTITIONS, 1, {"max.message.bytes": "2000"})]) == {topic: None}
    finally:
        admin.close()
    producer = _producer(bootstrap, _txn_id("abortable"), **{"batch.num.messages": 1})
    errors: list[object] = []
    try:
        producer.begin_transaction()
        producer.produce(topic, b"small-before", partition=0)
        producer.produce(topic, b"y" * 5000, partition=0, on_delivery=lambda e, m: errors.append(e))
        producer.produce(topic, b"small-after", partition=0)
        with pytest.raises(KafkaException) as info:
            producer.commit_transaction(CLIENT_TIMEOUT_S)
        error = info.value.args[0]
        assert error.txn_requires_abort(), error
        assert not error.fatal(), error
        assert any(e is not None for e in errors)
        producer.abort_transaction(CLIENT_TIMEOUT_S)
        committed = _run(producer, topic, "after", 4, commit=True)
    finally:
        producer.close()
    assert values_of(read_to_end(bootstrap, topic, PARTITIONS, isolation=READ_COMMITTED)) == committed


@not_on_cluster(ONE_BROKER_ASSUMED)
def test_send_offsets_to_transaction_consume_transform_produce(txn_broker):
    """KIP-447 exactly-once copy: our group consumer reads the input, our transactional producer
    writes the output and commits the input offsets in the same transaction. A committed
    transaction moves output and offsets together; an aborted one moves neither."""
    bootstrap = txn_broker.bootstrap
    source, sink = unique_topic("ctxn-in"), unique_topic("ctxn-out")
    create_topic(bootstrap, source, partitions=2)
    create_topic(bootstrap, sink, partitions=2)
    feeder = Producer({"bootstrap.servers": bootstrap})
    for i in range(40):
        feeder.produce(source, b"in-%d" % i, partition=i % 2)
    assert feeder.flush(CLIENT_TIMEOUT_S) == 0
    feeder.close()

    group = unique_topic("ctxn-group")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    producer = _producer(bootstrap, _txn_id("copier"))
    try:
        consumer.subscribe([source])
        batch: list = []
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(batch) < 20:
            assert time.monotonic() < deadline
            batch += [m for m in consumer.consume(20 - len(batch), 0.5) if m.error() is None]

        def copy(messages: list, *, commit: bool) -> None:
            producer.begin_transaction()
            for m in messages:
                producer.produce(sink, m.value().replace(b"in", b"out"), partition=m.partition())
            positions = consumer.position(consumer.assignment())
            metadata = consumer.consumer_group_metadata()
            assert metadata.generation_id >= 1
            assert metadata.member_id
            producer.send_offsets_to_transaction(positions, metadata, CLIENT_TIMEOUT_S)
            if commit:
                producer.commit_transaction(CLIENT_TIMEOUT_S)
            else:
                producer.abort_transaction(CLIENT_TIMEOUT_S)

        copy(batch, commit=True)
        expected_offsets = {tp.partition: tp.offset for tp in consumer.position(consumer.assignment())}
        rest: list = []
        while len(rest) < 20:
            assert time.monotonic() < deadline
            rest += [m for m in consumer.consume(20 - len(rest), 0.5) if m.error() is None]
        copy(rest, commit=False)
    finally:
        producer.close()
        consumer.close()

    assert committed_offsets(bootstrap, group, source, 2) == expected_offsets
    out = values_of(read_to_end(bootstrap, sink, 2, isolation=READ_COMMITTED))
    assert sorted(v for vs in out.values() for v in vs) == sorted(m.value().replace(b"in", b"out") for m in batch)


def test_empty_transaction_and_state_errors(txn_broker):
    """Committing a transaction with no records needs no EndTxn; produce outside a transaction,
    begin twice and commit without begin are state errors."""
    bootstrap = txn_broker.bootstrap
    topic = unique_topic("ctxn-state")
    create_topic(bootstrap, topic, partitions=1)
    producer = _producer(bootstrap, _txn_id("state"))
    try:
        with pytest.raises(KafkaException):
            producer.produce(topic, b"outside")
        with pytest.raises(KafkaException):
            producer.commit_transaction(CLIENT_TIMEOUT_S)
        producer.begin_transaction()
        with pytest.raises(KafkaException):
            producer.begin_transaction()
        producer.commit_transaction(CLIENT_TIMEOUT_S)
        with pytest.raises(KafkaException):
            producer.prepare_transaction()  # two-phase commit is not enabled for this producer
    finally:
        producer.close()


@not_on_cluster(ONE_BROKER_ASSUMED)
def test_transaction_version_decides_the_epoch_bumps(txn_broker):
    """Version 2: every commit and abort moves the producer to a new epoch (so each transaction
    has its own identity); version 1: the epoch set by InitProducerId stays."""
    bootstrap = txn_broker.bootstrap
    topic = unique_topic("ctxn-epochs")
    create_topic(bootstrap, topic, partitions=PARTITIONS)
    transactional_id = _txn_id("epochs")
    producer = _producer(bootstrap, transactional_id)
    try:
        start = describe_transaction(bootstrap, transactional_id)
        first = _run(producer, topic, "e1", 2, commit=True)
        _run(producer, topic, "e2", 2, commit=False)
        third = _run(producer, topic, "e3", 2, commit=True)
        end = describe_transaction(bootstrap, transactional_id)
    finally:
        producer.close()
    assert end.producer_id == start.producer_id
    bumps = 3 if txn_broker.transaction_version == 2 else 0
    assert end.producer_epoch == start.producer_epoch + bumps, (start, end)
    assert values_of(read_to_end(bootstrap, topic, PARTITIONS, isolation=READ_COMMITTED)) == _merge(first, third)
