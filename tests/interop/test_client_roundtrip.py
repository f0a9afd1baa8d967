"""oncestream.client against a real broker process, cross-checked with librdkafka (confluent-kafka).

What each test proves:
- every compression codec round-trips keys, values and headers, read back by our consumer and
  by librdkafka (so our batches are standard record batches v2);
- keyed records land in the partitions librdkafka's murmur2_random partitioner picks for the same
  keys (the Java default partitioner), read back with librdkafka;
- records librdkafka produced are read by our consumer (decoder vs. a foreign producer);
- our consumer shares a group with a librdkafka member (JoinGroup/SyncGroup with Kafka's
  consumer protocol encoding): partitions are split between them, every record read once;
- commit/committed/seek/position and auto.offset.reset behave as in confluent-kafka;
- commit(asynchronous=True) reports to the on_commit callback from a later poll(), and the
  offsets it committed are what committed() and a librdkafka member of the group see;
- acks=0 delivery reports carry no offset (librdkafka's OFFSET_INVALID), acks=1/all the real ones;
- the admin client creates, describes and deletes topics.

The module's broker is ours, or Tansu with ONCESTREAM_TEST_BROKER=tansu (tests/conftest.py);
test_client_tansu.py runs the basics against Tansu unconditionally.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Any

import confluent_kafka as ck
import pytest

from oncestream.client import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    Admin,
    Consumer,
    KafkaException,
    Message,
    NewTopic,
    Producer,
    TopicPartition,
)
from oncestream.client.producer.partitioner import partition_for_key
from tests.support.brokers import NO_INITIAL_REBALANCE_DELAY
from tests.support.clients import (
    CLIENT_TIMEOUT_S,
    CONSUME_WAIT_S,
    assign_from_beginning,
    confluent_produce,
    create_topic,
    unique_topic,
)
from tests.support.narrow import message_position, message_value, present
from tests.support.records import SentRecord

pytestmark = pytest.mark.interop

MODULE_BROKER_CONFIG = NO_INITIAL_REBALANCE_DELAY  # read by conftest's broker fixture


def produce_all(bootstrap: str, topic: str, items: list[tuple[bytes | None, bytes, list | None]],
                **conf: object) -> list[tuple[int, int]]:
    """Produce with our producer and wait for every delivery report; (partition, offset) each."""
    producer = Producer({"bootstrap.servers": bootstrap, **conf})
    reports: list[tuple[int, int] | None] = [None] * len(items)
    errors: list[object] = []

    def report_for(i: int):
        def on_delivery(err, msg):
            if err is not None:
                errors.append(err)
            else:
                reports[i] = (msg.partition(), msg.offset())
        return on_delivery

    try:
        for i, (key, value, headers) in enumerate(items):
            producer.produce(topic, value, key=key, headers=headers, on_delivery=report_for(i))
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
    finally:
        producer.close()
    assert not errors, errors[:3]
    assert all(r is not None for r in reports)
    return reports  # type: ignore[return-value]


def our_consumer(bootstrap: str, **conf: object) -> Consumer:
    base = {"bootstrap.servers": bootstrap, "group.id": unique_topic("ours"), "auto.offset.reset": "earliest",
            "enable.auto.commit": False}
    base.update(conf)
    return Consumer(base)


def read_all_ours(bootstrap: str, topic: str, partitions: int, count: int, **conf: object) -> list:
    """Read ``count`` messages from the beginning of every partition with our consumer."""
    consumer = our_consumer(bootstrap, **conf)
    got: list = []
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(got) < count:
            assert time.monotonic() < deadline, f"only {len(got)} of {count} messages arrived"
            for msg in consumer.consume(1000, 0.5):
                assert msg.error() is None, msg.error()
                got.append(msg)
    finally:
        consumer.close()
    return got


def read_all_confluent(bootstrap: str, topic: str, partitions: int, count: int) -> list:
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("ck"),
                            "auto.offset.reset": "earliest", "enable.auto.commit": False})
    got: list = []
    try:
        assign_from_beginning(consumer, topic, partitions)
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(got) < count:
            assert time.monotonic() < deadline, f"librdkafka read only {len(got)} of {count}"
            for msg in consumer.consume(1000, CONSUME_WAIT_S):
                assert msg.error() is None, msg.error()
                got.append(msg)
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_every_codec_round_trips_keys_values_and_headers(broker, compression):
    """Produce with our client (compression.type=X), read with ours and with librdkafka: same
    keys, values, headers, partitions and offsets."""
    topic = unique_topic(f"rt-{compression}")
    create_topic(broker.bootstrap, topic, partitions=3)
    items = []
    for i in range(400):
        headers = [("trace", b"t-%d" % i), ("empty", None)] if i % 3 == 0 else None
        value = (b"value-%d-" % i) * (1 + i % 40)
        items.append((b"key-%d" % (i % 17) if i % 5 else None, value, headers))
    positions = produce_all(broker.bootstrap, topic, items, **{"compression.type": compression, "linger.ms": 20})
    expected = {pos: item for pos, item in zip(positions, items)}

    for msg in read_all_ours(broker.bootstrap, topic, 3, len(items)):
        key, value, headers = expected[(msg.partition(), msg.offset())]
        assert (msg.key(), msg.value()) == (key, value)
        assert msg.headers() == headers
    for msg in read_all_confluent(broker.bootstrap, topic, 3, len(items)):
        key, value, headers = expected[(msg.partition(), msg.offset())]
        assert (msg.key(), msg.value()) == (key, value)
        assert (msg.headers() or None) == headers


def test_keyed_records_land_where_librdkafka_murmur2_random_puts_them(broker):
    """The same keys produced by us and by librdkafka (partitioner=murmur2_random, the Java
    default) end up in the same partition numbers, as read back by librdkafka."""
    partitions = 7
    ours, theirs = unique_topic("keys-ours"), unique_topic("keys-ck")
    for topic in (ours, theirs):
        create_topic(broker.bootstrap, topic, partitions=partitions)
    keys = [b"user-%d" % i for i in range(300)] + [b"", b"x" * 1000]
    produce_all(broker.bootstrap, ours, [(k, b"v", None) for k in keys])
    confluent_produce(broker.bootstrap, theirs, [SentRecord(k, b"v") for k in keys],
                      extra_conf={"partitioner": "murmur2_random"})
    where: dict[str, dict[bytes, int]] = {}
    for topic in (ours, theirs):
        where[topic] = {m.key() or b"": m.partition() for m in read_all_confluent(broker.bootstrap, topic, partitions, len(keys))}
    assert where[ours] == where[theirs]
    assert all(where[ours][k] == partition_for_key(k, partitions) for k in keys)


def test_our_consumer_reads_what_librdkafka_produced(broker):
    topic = unique_topic("from-ck")
    create_topic(broker.bootstrap, topic, partitions=2)
    records = [SentRecord(b"k%d" % (i % 9), b"payload-%d" % i * 20) for i in range(2000)]
    positions = confluent_produce(broker.bootstrap, topic, records, extra_conf={"compression.type": "lz4"})
    expected = {pos: r for pos, r in zip(positions, records)}
    got = read_all_ours(broker.bootstrap, topic, 2, len(records))
    assert len({(m.partition(), m.offset()) for m in got}) == len(records)
    for msg in got:
        record = expected[(msg.partition(), msg.offset())]
        assert (msg.key(), msg.value()) == (record.key, record.value)


def test_group_shared_with_a_librdkafka_member(broker):
    """Our consumer and a librdkafka consumer subscribe to one topic in one group: the
    partitions are split between them (no partition twice), and together they read every
    record exactly once."""
    topic = unique_topic("mixed-group")
    partitions = 4
    create_topic(broker.bootstrap, topic, partitions=partitions)
    group = unique_topic("mixed")
    total = 800
    stop = threading.Event()
    ours_seen: list[tuple[int, int]] = []
    ours_assignment: list[list[int]] = []
    errors: list[BaseException] = []

    def run_ours() -> None:
        try:
            consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                                 "auto.offset.reset": "earliest", "session.timeout.ms": 10000,
                                 "heartbeat.interval.ms": 500, "partition.assignment.strategy": "range"})
            consumer.subscribe([topic], on_assign=lambda c, ps: ours_assignment.append(sorted(p.partition for p in ps)))
            try:
                while not stop.is_set():
                    msg = consumer.poll(0.2)
                    if msg is not None and msg.error() is None:
                        ours_seen.append((msg.partition(), msg.offset()))
            finally:
                consumer.close()
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    theirs = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                          "auto.offset.reset": "earliest", "session.timeout.ms": 10000,
                          "heartbeat.interval.ms": 500, "partition.assignment.strategy": "range"})
    theirs_assignment: list[list[int]] = []
    theirs.subscribe([topic], on_assign=lambda c, ps: theirs_assignment.append(sorted(p.partition for p in ps)))
    thread = threading.Thread(target=run_ours)
    thread.start()
    theirs_seen: list[tuple[int, int]] = []
    try:
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        # Wait for a generation in which both members own partitions, then produce.
        while not (ours_assignment and theirs_assignment and ours_assignment[-1] and theirs_assignment[-1]
                   and sorted(ours_assignment[-1] + theirs_assignment[-1]) == list(range(partitions))):
            assert time.monotonic() < deadline, (ours_assignment, theirs_assignment, errors)
            msg = theirs.poll(0.2)
            assert msg is None or msg.error() is None
        produce_all(broker.bootstrap, topic, [(b"k%d" % i, b"v%d" % i, None) for i in range(total)])
        while len(set(ours_seen) | set(theirs_seen)) < total:
            assert time.monotonic() < deadline, (len(ours_seen), len(theirs_seen), errors)
            msg = theirs.poll(0.2)
            if msg is not None and msg.error() is None:
                theirs_seen.append(message_position(msg))
    finally:
        stop.set()
        thread.join(CLIENT_TIMEOUT_S)
        theirs.close()
    assert not errors, errors
    assert not set(ours_seen) & set(theirs_seen), "a record was read by both members"
    assert len(ours_seen) == len(set(ours_seen))
    assert len(theirs_seen) == len(set(theirs_seen))
    assert {p for p, _ in ours_seen}.isdisjoint({p for p, _ in theirs_seen})
    assert ours_seen
    assert theirs_seen


def test_commit_committed_seek_position_and_offset_reset(broker_factory):
    """Always against our broker: Tansu 0.6 answers ListOffsets(latest) with the base offset of
    the last batch + 1, which would make the auto.offset.reset=latest check meaningless."""
    broker = broker_factory()
    topic = unique_topic("offsets")
    create_topic(broker.bootstrap, topic, partitions=1)
    produce_all(broker.bootstrap, topic, [(None, b"v%d" % i, None) for i in range(50)])
    group = unique_topic("g-offsets")
    tp = TopicPartition(topic, 0)
    consumer = our_consumer(broker.bootstrap, **{"group.id": group})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got: list[Message] = []
        while len(got) < 20:
            got += consumer.consume(20 - len(got), 5.0)
        assert [m.offset() for m in got] == list(range(20))
        assert consumer.position([tp])[0].offset == 20
        consumer.commit(message=got[9], asynchronous=False)
        assert consumer.committed([tp], 10)[0].offset == 10
        consumer.commit(asynchronous=False)  # current position
        assert consumer.committed([tp], 10)[0].offset == 20
        consumer.seek(TopicPartition(topic, 0, 45))
        assert [m.offset() for m in consumer.consume(10, 5.0)] == [45, 46, 47, 48, 49]
        consumer.seek(TopicPartition(topic, 0, OFFSET_BEGINNING))
        assert present(consumer.poll(5.0), "a record within 5 s").offset() == 0
    finally:
        consumer.close()
    # A new member of the group starts at the committed offset...
    resumed = our_consumer(broker.bootstrap, **{"group.id": group})
    try:
        resumed.assign([tp])
        first = resumed.poll(10.0)
        assert first is not None
        assert first.offset() == 20
    finally:
        resumed.close()
    # ... a consumer without a committed offset follows auto.offset.reset.
    latest = our_consumer(broker.bootstrap, **{"auto.offset.reset": "latest"})
    try:
        latest.assign([tp])
        assert latest.poll(1.0) is None
        assert latest.position([tp])[0].offset == 50
        latest.seek(TopicPartition(topic, 0, OFFSET_END))
    finally:
        latest.close()
    strict = our_consumer(broker.bootstrap, **{"auto.offset.reset": "error"})
    try:
        strict.assign([tp])
        msg = strict.poll(5.0)
        assert msg is not None
        assert msg.error() is not None
    finally:
        strict.close()


def test_async_commit_reports_to_on_commit_and_librdkafka_resumes_from_it(broker):
    """commit(asynchronous=True) returns at once and its result reaches the ``on_commit``
    callback (Kafka's OffsetCommitCallback / librdkafka's offset_commit_cb) from a later poll(),
    never from inside commit(): no error, the committed partitions and offsets. committed() and a
    librdkafka consumer of the same group see those offsets, and the librdkafka consumer, joining
    the group after ours left, resumes exactly there. The offsets committed are half-way through
    each partition, not the positions, so nothing else (a commit on close) could produce them."""
    topic = unique_topic("async-commit")
    partitions = 2
    create_topic(broker.bootstrap, topic, partitions=partitions)
    placed = produce_all(broker.bootstrap, topic, [(b"k%d" % i, b"v%d" % i, None) for i in range(60)])
    per_partition = {p: sum(1 for q, _ in placed if q == p) for p in range(partitions)}
    assert all(per_partition.values()), per_partition
    targets = {p: n // 2 for p, n in per_partition.items()}
    group = unique_topic("g-async")
    reports: list[tuple[object, list[TopicPartition]]] = []
    consumer = our_consumer(broker.bootstrap, **{
        "group.id": group, "on_commit": lambda err, parts: reports.append((err, parts))})
    try:
        consumer.subscribe([topic])
        seen = 0
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while seen < len(placed):
            assert time.monotonic() < deadline, f"only {seen} of {len(placed)} records arrived"
            seen += sum(1 for m in consumer.consume(100, 0.5) if m.error() is None)
        assert consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in targets.items()],
                               asynchronous=True) is None
        assert reports == [], "on_commit ran inside commit(); it belongs to poll()"
        while not reports:
            assert time.monotonic() < deadline, "on_commit never fired"
            assert consumer.poll(0.2) is None  # everything was consumed already
        ((error, committed_parts),) = reports
        assert error is None
        assert {(tp.topic, tp.partition): tp.offset for tp in committed_parts} == {(topic, p): o for p, o in targets.items()}
        assert all(tp.error is None for tp in committed_parts)
        ours = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], CLIENT_TIMEOUT_S)
        assert {tp.partition: tp.offset for tp in ours} == targets
    finally:
        consumer.close()

    theirs = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                          "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        seen_by_librdkafka = theirs.committed([ck.TopicPartition(topic, p) for p in range(partitions)], CLIENT_TIMEOUT_S)
        assert {tp.partition: tp.offset for tp in seen_by_librdkafka} == targets
        theirs.subscribe([topic])
        resumed: dict[int, list[int]] = defaultdict(list)
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while sum(len(v) for v in resumed.values()) < sum(per_partition[p] - targets[p] for p in targets):
            assert time.monotonic() < deadline, dict(resumed)
            msg = theirs.poll(0.2)
            if msg is not None:
                assert msg.error() is None, msg.error()
                partition, offset = message_position(msg)
                resumed[partition].append(offset)
    finally:
        theirs.close()
    assert {p: offsets[0] for p, offsets in resumed.items()} == targets


def test_subscribe_with_auto_commit_then_resume(broker):
    """enable.auto.commit commits consumed positions (at the latest on close); a later member of
    the group continues from there."""
    topic = unique_topic("autocommit")
    create_topic(broker.bootstrap, topic, partitions=2)
    produce_all(broker.bootstrap, topic, [(b"k%d" % i, b"v%d" % i, None) for i in range(100)])
    group = unique_topic("g-auto")
    conf = {"group.id": group, "enable.auto.commit": True, "auto.commit.interval.ms": 200}
    first = our_consumer(broker.bootstrap, **conf)
    seen: list[tuple[int, int]] = []
    try:
        first.subscribe([topic])
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(seen) < 100:
            assert time.monotonic() < deadline
            seen += [(m.partition(), m.offset()) for m in first.consume(100, 0.5) if m.error() is None]
    finally:
        first.close()
    produce_all(broker.bootstrap, topic, [(b"k%d" % i, b"late%d" % i, None) for i in range(10)])
    second = our_consumer(broker.bootstrap, **conf)
    later: list[bytes] = []
    try:
        second.subscribe([topic])
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(later) < 10:
            assert time.monotonic() < deadline
            later += [message_value(m) for m in second.consume(100, 0.5) if m.error() is None]
    finally:
        second.close()
    assert sorted(later) == sorted(b"late%d" % i for i in range(10))


def test_admin_topics_and_configs(broker):
    topic = unique_topic("admin")
    admin = Admin({"bootstrap.servers": broker.bootstrap})
    try:
        assert admin.create_topics([NewTopic(topic, 3, 1)]) == {topic: None}
        again = admin.create_topics([NewTopic(topic, 3, 1)])[topic]
        assert again is not None
        assert again.name() == "TOPIC_ALREADY_EXISTS"
        described = admin.describe_topics([topic])[topic]
        assert [p.id for p in described.partitions] == [0, 1, 2]
        assert described.error is None
        assert topic in admin.list_topics()
        assert admin.delete_topics([topic]) == {topic: None}
    finally:
        admin.close()


def test_unknown_partition_is_rejected_at_produce(broker):
    topic = unique_topic("badpart")
    create_topic(broker.bootstrap, topic, partitions=1)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    try:
        producer.produce(topic, b"ok", partition=0)
        with pytest.raises(KafkaException):
            producer.produce(topic, b"no", partition=5)
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
    finally:
        producer.close()


def test_many_records_arrive_complete_and_in_order_per_partition(broker):
    """20k records through pipelined, batched produce requests: none lost, none duplicated,
    offsets contiguous per partition and in produce order."""
    topic = unique_topic("bulk")
    create_topic(broker.bootstrap, topic, partitions=3)
    items: list[tuple[bytes | None, bytes, list[Any] | None]] = [
        (b"k%d" % (i % 50), b"%08d" % i, None) for i in range(20_000)]
    positions = produce_all(broker.bootstrap, topic, items, **{"linger.ms": 2, "batch.size": 16384})
    per_partition: dict[int, list[int]] = defaultdict(list)
    for partition, offset in positions:
        per_partition[partition].append(offset)
    for offsets in per_partition.values():
        assert offsets == list(range(len(offsets)))
    got = read_all_ours(broker.bootstrap, topic, 3, len(items))
    by_partition: dict[int, list[bytes]] = defaultdict(list)
    for msg in got:
        by_partition[msg.partition()].append(msg.value())
    for partition, values in by_partition.items():
        expected = [v for (p, _o), (_k, v, _h) in zip(positions, items) if p == partition]
        assert values == expected


def test_static_member_restart_keeps_its_partitions_without_a_rebalance(broker_factory):
    """KIP-345: a member with group.instance.id does not leave the group on close; a new
    instance with the same id rejoins within the session timeout and gets the same partitions,
    while the other member is not rebalanced (its revoke callback never runs)."""
    broker = broker_factory({"group.initial.rebalance.delay.ms": "0"})
    topic = unique_topic("static")
    create_topic(broker.bootstrap, topic, partitions=4)
    group = unique_topic("static-g")

    def member(instance: str, events: list) -> Consumer:
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                             "group.instance.id": instance, "session.timeout.ms": 30000,
                             "heartbeat.interval.ms": 500, "auto.offset.reset": "earliest"})
        consumer.subscribe([topic], on_assign=lambda c, ps: events.append(("assign", sorted(p.partition for p in ps))),
                           on_revoke=lambda c, ps: events.append(("revoke", sorted(p.partition for p in ps))))
        return consumer

    a_events: list = []
    b_events: list = []
    a, b = member("instance-a", a_events), member("instance-b", b_events)
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    try:
        while not (a.assignment() and b.assignment()
                   and len(a.assignment()) + len(b.assignment()) == 4):
            assert time.monotonic() < deadline, (a_events, b_events)
            a.poll(0.1)
            b.poll(0.1)
        a_partitions = sorted(tp.partition for tp in a.assignment())
        b_before = list(b_events)
        a.close()  # static: no LeaveGroup
        a = member("instance-a", a_events)
        while not a.assignment():
            assert time.monotonic() < deadline, a_events
            a.poll(0.1)
            b.poll(0.1)
        assert sorted(tp.partition for tp in a.assignment()) == a_partitions
        for _ in range(10):  # give a rebalance, if one had started, the chance to reach b
            b.poll(0.1)
        assert b_events == b_before, "the other static member was rebalanced"
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_non_idempotent_producer_with_each_acks_setting(broker, acks):
    """enable.idempotence=false: batches without a producer id, for acks 0, 1 and all; with
    acks=0 the broker sends no response, so no offset is known and every delivery report carries
    OFFSET_INVALID (librdkafka's "no offset"; confluent-kafka shows it as None, Java's client as
    -1), never a guessed one; acks=1 and all report the offsets the broker assigned. The records
    arrive either way."""
    topic = unique_topic(f"acks-{acks}")
    create_topic(broker.bootstrap, topic, partitions=1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": False, "acks": acks})
    offsets: list[int] = []
    try:
        for i in range(200):
            producer.produce(topic, b"v%d" % i, on_delivery=lambda e, m: offsets.append(m.offset() if e is None else -99))
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
    finally:
        producer.close()
    assert len(offsets) == 200
    assert -99 not in offsets
    if acks == "0":
        assert offsets == [OFFSET_INVALID] * 200
    else:
        assert offsets == list(range(200))
    got = read_all_ours(broker.bootstrap, topic, 1, 200)
    assert [m.value() for m in got] == [b"v%d" % i for i in range(200)]


def test_pattern_subscription_picks_up_a_new_matching_topic(broker):
    """A ``^regex`` subscription covers the matching topics, and a topic created later joins
    the assignment after the next metadata refresh (metadata.max.age.ms) triggers a rejoin."""
    prefix = unique_topic("pat")
    first, later, other = f"{prefix}-a", f"{prefix}-b", unique_topic("unrelated")
    for topic in (first, other):
        create_topic(broker.bootstrap, topic, partitions=1)
    consumer = our_consumer(broker.bootstrap, **{"metadata.max.age.ms": 500})
    try:
        consumer.subscribe([f"^{prefix}-.*"])
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while [tp.topic for tp in consumer.assignment()] != [first]:
            assert time.monotonic() < deadline, consumer.assignment()
            consumer.poll(0.2)
        create_topic(broker.bootstrap, later, partitions=2)
        produce_all(broker.bootstrap, later, [(None, b"late", None)])
        value = None
        while value != b"late":
            assert time.monotonic() < deadline, consumer.assignment()
            msg = consumer.poll(0.2)
            value = msg.value() if msg is not None and msg.error() is None else None
        assert sorted({tp.topic for tp in consumer.assignment()}) == [first, later]
    finally:
        consumer.close()


def test_max_poll_interval_exceeded_leaves_the_group_and_the_assignment_is_lost(broker):
    """A member that stops polling for longer than max.poll.interval.ms leaves the group itself
    (the group is empty long before the 60 s session timeout could expire), its next poll()
    reports _MAX_POLL_EXCEEDED, on_lost (not on_revoke) gets the partitions it lost, and it then
    rejoins and shares the topic with a librdkafka member."""
    topic = unique_topic("max-poll")
    create_topic(broker.bootstrap, topic, partitions=2)
    group = unique_topic("max-poll-group")
    calls: list[tuple[str, list[int]]] = []

    def record(kind: str):
        return lambda consumer, parts: calls.append((kind, sorted(p.partition for p in parts)))

    ours = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "max.poll.interval.ms": 2000, "session.timeout.ms": 60000,
                     "heartbeat.interval.ms": 300, "partition.assignment.strategy": "range"})
    theirs = None
    admin = ck.admin.AdminClient({"bootstrap.servers": broker.bootstrap})

    def members() -> int:
        described = admin.describe_consumer_groups([group])[group].result(CLIENT_TIMEOUT_S)
        return len(described.members)

    try:
        ours.subscribe([topic], on_assign=record("assign"), on_revoke=record("revoke"), on_lost=record("lost"))
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while calls != [("assign", [0, 1])]:
            assert time.monotonic() < deadline, calls
            ours.poll(0.2)
        # Stop polling: the member must leave on its own, well inside the session timeout.
        deadline = time.monotonic() + 30
        while members() != 0:
            assert time.monotonic() < deadline, "the member did not leave after max.poll.interval.ms"
            time.sleep(0.2)
        theirs = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                              "auto.offset.reset": "earliest", "session.timeout.ms": 10000,
                              "heartbeat.interval.ms": 500, "partition.assignment.strategy": "range"})
        theirs_assigned: list[list[int]] = []
        theirs.subscribe([topic], on_assign=lambda c, ps: theirs_assigned.append(sorted(p.partition for p in ps)))
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while not theirs_assigned:
            assert time.monotonic() < deadline
            theirs.poll(0.2)
        assert theirs_assigned[-1] == [0, 1]  # the left member held nothing any more
        # Back to polling: the error, then on_lost, then a rejoin beside the librdkafka member.
        first = ours.poll(1.0)
        assert first is not None
        first_error = first.error()
        assert first_error is not None
        assert first_error.code() == -147, first_error  # _MAX_POLL_EXCEEDED, as librdkafka
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while not (len(calls) >= 3 and calls[-1][0] == "assign" and theirs_assigned[-1] != [0, 1]):
            assert time.monotonic() < deadline, (calls, theirs_assigned)
            ours.poll(0.1)
            theirs.poll(0.1)
        assert calls[1] == ("lost", [0, 1]), calls
        assert not any(kind == "revoke" for kind, _ in calls[:2]), calls
        assert sorted(calls[-1][1] + theirs_assigned[-1]) == [0, 1], (calls, theirs_assigned)
    finally:
        ours.close()
        if theirs is not None:
            theirs.close()
