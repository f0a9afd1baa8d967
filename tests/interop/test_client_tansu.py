"""oncestream.client against Tansu, the second Kafka-protocol broker (the client must work with
any standard broker, not only ours): topic creation, produce/consume with headers and
compression, a consumer group of two of our members splitting the partitions, and committed
offsets. Transactions are not tested here: Tansu returns aborted records to read_committed
readers.
"""

from __future__ import annotations

import time

import pytest
from kio.schema.errors import ErrorCode

from oncestream.client import OFFSET_BEGINNING, Admin, Consumer, KafkaException, NewTopic, Producer, TopicPartition
from tests.support.brokers import TansuProcess
from tests.support.clients import CLIENT_TIMEOUT_S, unique_topic
from tests.support.narrow import message_position, message_value

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def tansu(tmp_path_factory):
    process = TansuProcess(log_dir=tmp_path_factory.mktemp("tansu") / "logs")
    process.start()
    try:
        yield process
    finally:
        process.kill()


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = Admin({"bootstrap.servers": bootstrap})
    try:
        assert admin.create_topics([NewTopic(topic, partitions, 1)]) == {topic: None}
        assert [p.id for p in admin.describe_topics([topic])[topic].partitions] == list(range(partitions))
    finally:
        admin.close()


def _produce(bootstrap: str, topic: str, count: int, **conf: object) -> dict[bytes, tuple[int, int]]:
    producer = Producer({"bootstrap.servers": bootstrap, **conf})
    where: dict[bytes, tuple[int, int]] = {}
    errors: list[object] = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            where[msg.value()] = (msg.partition(), msg.offset())

    try:
        for i in range(count):
            producer.produce(topic, b"value-%05d" % i, key=b"key-%d" % (i % 13),
                             headers=[("n", b"%d" % i)], on_delivery=on_delivery)
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
    finally:
        producer.close()
    assert not errors, errors[:3]
    return where


@pytest.mark.parametrize("compression", ["none", "gzip", "lz4"])
def test_produce_and_consume(tansu, compression):
    topic = unique_topic(f"tansu-{compression}")
    _create(tansu.bootstrap, topic, 3)
    where = _produce(tansu.bootstrap, topic, 600, **{"compression.type": compression})
    consumer = Consumer({"bootstrap.servers": tansu.bootstrap, "group.id": unique_topic("tg"),
                         "enable.auto.commit": False})
    got: dict[bytes, tuple[int, int, list[tuple[str, bytes | None]] | None]] = {}
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(3)])
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(got) < len(where):
            assert time.monotonic() < deadline, f"{len(got)} of {len(where)}"
            for msg in consumer.consume(500, 0.5):
                assert msg.error() is None
                partition, offset = message_position(msg)
                got[message_value(msg)] = (partition, offset, msg.headers())
    finally:
        consumer.close()
    for value, (partition, offset) in where.items():
        assert got[value][:2] == (partition, offset)
        assert got[value][2] == [("n", b"%d" % int(value.split(b"-")[1]))]


def test_group_of_two_members_and_committed_offsets(tansu):
    topic = unique_topic("tansu-group")
    _create(tansu.bootstrap, topic, 4)
    group = unique_topic("tansu-g")
    conf = {"bootstrap.servers": tansu.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "heartbeat.interval.ms": 500, "session.timeout.ms": 10000}
    first, second = Consumer(conf), Consumer(conf)
    try:
        first.subscribe([topic])
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(first.assignment()) != 4:
            assert time.monotonic() < deadline
            first.poll(0.2)
        second.subscribe([topic])
        # Both must be polled: the first rejoins when the second's join starts a rebalance.
        while not (first.assignment() and second.assignment()
                   and len(first.assignment()) + len(second.assignment()) == 4):
            assert time.monotonic() < deadline, (first.assignment(), second.assignment())
            first.poll(0.1)
            second.poll(0.1)
        assert not set(first.assignment()) & set(second.assignment())
        where = _produce(tansu.bootstrap, topic, 200)
        seen: dict[str, list] = {"first": [], "second": []}
        while len(seen["first"]) + len(seen["second"]) < len(where):
            assert time.monotonic() < deadline
            for name, consumer in (("first", first), ("second", second)):
                seen[name] += [m for m in consumer.consume(100, 0.1) if m.error() is None]
        for name, consumer in (("first", first), ("second", second)):
            owned = {tp.partition for tp in consumer.assignment()}
            assert {m.partition() for m in seen[name]} <= owned
            consumer.commit(asynchronous=False)
            committed = consumer.committed(consumer.assignment(), CLIENT_TIMEOUT_S)
            positions = consumer.position(consumer.assignment())
            assert [tp.offset for tp in committed] == [tp.offset for tp in positions]
    finally:
        first.close()
        second.close()


def _poll_for(consumer: Consumer, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        consumer.poll(0.2)


def test_consumer_protocol_on_a_broker_without_it_is_a_fatal_error_that_names_the_fix(tansu):
    """Tansu has no ConsumerGroupHeartbeat: group.protocol=consumer fails at once and for good
    (UNSUPPORTED_VERSION, fatal, as Kafka's consumer does), telling to use the classic protocol."""
    consumer = Consumer({"bootstrap.servers": tansu.bootstrap, "group.id": unique_topic("kip848-g"),
                         "group.protocol": "consumer"})
    try:
        consumer.subscribe([unique_topic("kip848")])
        with pytest.raises(KafkaException) as raised:
            _poll_for(consumer, CLIENT_TIMEOUT_S)
        error = raised.value.args[0]
        assert error.code() == ErrorCode.unsupported_version
        assert error.fatal()
        assert "group.protocol=classic" in error.str()
    finally:
        consumer.close()
