"""oncestream's ShareConsumer against a real broker process, beside librdkafka's ShareConsumer.

Share groups (KIP-932): the consumers of a group share one partition's records, a record is
handed to one consumer at a time, ACCEPT and REJECT end it, RELEASE gives it back for another
delivery, and close() gives back what the consumer acquired and did not acknowledge. Each test
uses its own topic and group; ``share.auto.offset.reset`` is ``latest`` (Kafka's default), so a
test first makes the group read the partition (``_start_reading``) and produces its records after.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import confluent_kafka
import pytest

import oncestream.client
from oncestream.client import AcknowledgeType, IllegalStateException, ShareConsumer, TopicPartition
from tests.support.clients import create_topic, unique_topic

pytestmark = [pytest.mark.interop]

CAP_S = 30.0  # every wait is bounded by this
QUIET_S = 3.0  # how long "never delivered again" is watched
WARMUP = b"warmup"


def _producer(bootstrap: str) -> confluent_kafka.Producer:
    return confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})


def _produce(bootstrap: str, topic: str, values: list[bytes], *, per_batch: int = 5, partition: int = 0) -> None:
    """``values`` to ``partition``, ``per_batch`` to a record batch (the broker acquires whole
    batches, so several batches let several consumers get a share)."""
    producer = _producer(bootstrap)
    for i, value in enumerate(values):
        producer.produce(topic, value, partition=partition)
        if (i + 1) % per_batch == 0:
            assert producer.flush(CAP_S) == 0
    assert producer.flush(CAP_S) == 0


def _ours(bootstrap: str, group: str, **conf: Any) -> ShareConsumer:
    return oncestream.client.ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, **conf})


def _theirs(bootstrap: str, group: str, **conf: Any) -> Any:
    return confluent_kafka.ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, **conf})


def _records(batch: Any) -> list[Any]:
    out = []
    for m in batch:
        assert m.error() is None, f"poll returned an error: {m.error()}"
        out.append(m)
    return out


def _start_reading(bootstrap: str, where: str | list[tuple[str, int]], consumers: list[Any], *,
                   explicit: bool = False) -> None:
    """Produce warm-up records to each partition of ``where`` (a topic: its partition 0) until
    ``consumers`` received one from each: the group then reads those partitions, and every
    record produced afterwards is delivered to it."""
    waiting = {(where, 0)} if isinstance(where, str) else set(where)
    producer = _producer(bootstrap)
    deadline = time.monotonic() + CAP_S
    while waiting:
        assert time.monotonic() < deadline, f"no consumer received a record of {sorted(waiting)} within {CAP_S} s"
        for topic, partition in waiting:
            producer.produce(topic, WARMUP, partition=partition)
        assert producer.flush(CAP_S) == 0
        for consumer in consumers:
            batch = _records(consumer.poll(0.5))
            for m in batch:
                assert m.value() == WARMUP
                waiting.discard((m.topic(), m.partition()))
                if explicit:
                    consumer.acknowledge(m)
            if explicit and batch:
                consumer.commit_sync(CAP_S)


Where = tuple[str, int, int]  # topic, partition, offset


def _share_round_robin(consumers: dict[str, Any], wanted: set[bytes]) -> dict[str, list[tuple[Where, bytes]]]:
    """Poll ``consumers`` in turn (implicit mode) until every value of ``wanted`` arrived.
    Checks on the way that no record is handed to a consumer while another one holds it (a
    consumer holds what its last poll returned until its next poll accepts it) and that no
    record arrives twice (each is accepted, so none may be delivered again)."""
    held: dict[str, set[Where]] = {name: set() for name in consumers}
    received: dict[str, list[tuple[Where, bytes]]] = {name: [] for name in consumers}
    seen: Counter[Where] = Counter()
    got: set[bytes] = set()
    deadline = time.monotonic() + CAP_S
    while not wanted <= got:
        assert time.monotonic() < deadline, f"{len(wanted - got)} records never arrived"
        for name, consumer in consumers.items():
            batch = _records(consumer.poll(0.3))
            held[name] = set()  # this poll accepted what the previous one returned
            for m in batch:
                if m.value() == WARMUP:
                    continue
                where = (m.topic(), m.partition(), m.offset())
                for other, offsets in held.items():
                    assert other == name or where not in offsets, f"{where} handed to {name} while {other} holds it"
                held[name].add(where)
                seen[where] += 1
                assert seen[where] == 1, f"{where} delivered twice although it was accepted"
                received[name].append((where, m.value()))
                got.add(m.value())
    return received


@pytest.mark.parametrize("kinds", [("ours", "ours", "ours"), ("ours", "librdkafka")],
                         ids=["ours-only", "ours-and-librdkafka"])
def test_share_consumers_share_one_partition(broker, kinds):
    """Every record once to the group, none handed to two consumers at once, and every consumer
    (ours and librdkafka's alike, in one group) gets a share."""
    topic, group = unique_topic("share-split"), unique_topic("share-group")
    create_topic(broker.bootstrap, topic)
    make = {"ours": _ours, "librdkafka": _theirs}
    consumers = {f"{kind}-{i}": make[kind](broker.bootstrap, group, **{"max.poll.records": 5})
                 for i, kind in enumerate(kinds)}
    try:
        for consumer in consumers.values():
            consumer.subscribe([topic])
        _start_reading(broker.bootstrap, topic, list(consumers.values()))
        values = [b"r%03d" % i for i in range(60)]
        _produce(broker.bootstrap, topic, values)
        received = _share_round_robin(consumers, set(values))
        assert sorted(v for got in received.values() for _, v in got) == values
        sharing = {name for name, got in received.items() if got}
        assert len(sharing) >= 2, f"only {sorted(sharing)} received records: {received}"
        assert {name.rsplit("-", 1)[0] for name in sharing} == set(kinds), received
    finally:
        for consumer in consumers.values():
            consumer.close()


def _poll_values(consumer: Any, count: int, *, explicit: bool) -> list[Any]:
    """Poll until ``count`` non-warm-up records arrived (warm-ups acknowledged in explicit mode)."""
    out: list[Any] = []
    deadline = time.monotonic() + CAP_S
    while len(out) < count:
        assert time.monotonic() < deadline, f"{len(out)} of {count} records within {CAP_S} s"
        for m in _records(consumer.poll(0.5)):
            if m.value() == WARMUP:
                if explicit:
                    consumer.acknowledge(m)
                continue
            out.append(m)
    return out


def _explicit_reader(bootstrap: str, name: str) -> tuple[str, str, ShareConsumer]:
    """A new topic and group, and one of our consumers in explicit mode reading it."""
    topic, group = unique_topic(name), unique_topic("share-group")
    create_topic(bootstrap, topic)
    consumer = _ours(bootstrap, group, **{"share.acknowledgement.mode": "explicit"})
    consumer.subscribe([topic])
    _start_reading(bootstrap, topic, [consumer], explicit=True)
    return topic, group, consumer


def _quiet(consumer: Any, *, explicit: bool) -> list[bytes]:
    """What ``consumer`` receives during QUIET_S (acknowledged as it comes)."""
    out: list[bytes] = []
    deadline = time.monotonic() + QUIET_S
    while time.monotonic() < deadline:
        for m in _records(consumer.poll(0.3)):
            if explicit:
                consumer.acknowledge(m)
            if m.value() != WARMUP:
                out.append(m.value())
    return out


def test_release_gives_a_record_back_and_reject_never(broker):
    topic, _group, consumer = _explicit_reader(broker.bootstrap, "share-ack")
    try:
        values = [b"accept-0", b"release-1", b"reject-2", b"accept-3", b"release-4", b"reject-5"]
        _produce(broker.bootstrap, topic, values, per_batch=len(values))
        first = _poll_values(consumer, len(values), explicit=True)
        assert sorted(m.value() for m in first) == sorted(values)
        assert {m.delivery_count() for m in first} == {1}
        with pytest.raises(IllegalStateException):
            consumer.poll(0.1)  # explicit mode: every record of the last poll needs a decision
        kinds = {b"accept": AcknowledgeType.ACCEPT, b"release": AcknowledgeType.RELEASE,
                 b"reject": AcknowledgeType.REJECT}
        for m in first:
            consumer.acknowledge(m, kinds[m.value().split(b"-")[0]])
        assert consumer.commit_sync(CAP_S) == {TopicPartition(topic, 0): None}
        again = _poll_values(consumer, 2, explicit=True)
        assert sorted(m.value() for m in again) == [b"release-1", b"release-4"]
        assert {m.delivery_count() for m in again} == {2}
        for m in again:
            consumer.acknowledge(m)
        assert _quiet(consumer, explicit=True) == []  # the rejected ones never come back
    finally:
        consumer.close()


def test_implicit_mode_accepts_on_the_next_poll(broker):
    topic, group = unique_topic("share-implicit"), unique_topic("share-group")
    create_topic(broker.bootstrap, topic)
    first = _ours(broker.bootstrap, group)
    later = _ours(broker.bootstrap, group)
    try:
        first.subscribe([topic])
        _start_reading(broker.bootstrap, topic, [first])
        values = [b"i%d" % i for i in range(10)]
        _produce(broker.bootstrap, topic, values, per_batch=10)
        got = _poll_values(first, len(values), explicit=False)
        assert sorted(m.value() for m in got) == values
        with pytest.raises(IllegalStateException, match="explicit"):
            first.acknowledge(got[0])
        acked: dict[int, Any] = {}
        first.set_acknowledgement_commit_callback(
            lambda offsets, exc: acked.update(dict.fromkeys(offsets.get(TopicPartition(topic, 0), ()), exc)))
        wanted = {m.offset() for m in got}
        deadline = time.monotonic() + CAP_S
        while not wanted <= set(acked):  # the next polls accept all ten and send that on a ShareFetch
            assert time.monotonic() < deadline, f"acknowledged so far: {acked}"
            assert not [m for m in _records(first.poll(0.2)) if m.value() != WARMUP]
        assert all(acked[o] is None for o in wanted), acked
        first.close()
        later.subscribe([topic])
        _produce(broker.bootstrap, topic, [b"sentinel"])
        assert [m.value() for m in _poll_values(later, 1, explicit=False)] == [b"sentinel"]
        assert _quiet(later, explicit=False) == []  # none of the accepted ten again
    finally:
        first.close()
        later.close()


@pytest.mark.parametrize("successor", ["ours", "librdkafka"])
def test_close_releases_what_was_not_acknowledged(broker, successor):
    topic, group, leaving = _explicit_reader(broker.bootstrap, "share-close")
    try:
        values = [b"c%d" % i for i in range(8)]
        _produce(broker.bootstrap, topic, values, per_batch=8)
        got = _poll_values(leaving, len(values), explicit=True)
        done = {m.value() for m in got[:4]}
        for m in got[:4]:
            leaving.acknowledge(m)
        leaving.close()  # accepts the four, releases the other four
    finally:
        leaving.close()
    make = _ours if successor == "ours" else _theirs
    taker = make(broker.bootstrap, group)
    try:
        taker.subscribe([topic])
        redelivered = _poll_values(taker, 4, explicit=False)
        assert sorted(m.value() for m in redelivered) == sorted(set(values) - done)
        assert {m.delivery_count() for m in redelivered} == {2}
        assert _quiet(taker, explicit=False) == []
    finally:
        taker.close()


def test_our_consumer_rides_out_a_broker_sigkill(broker_factory):
    """The broker is SIGKILLed while our consumer holds records: the consumer reconnects, joins
    again and opens a new share session by itself; every record still arrives, none whose
    acknowledgement the broker confirmed arrives again, and a record that does arrive again was
    first reported to the commit callback as lost with the session."""
    broker = broker_factory()
    topic, group = unique_topic("share-crash"), unique_topic("share-group")
    create_topic(broker.bootstrap, topic)
    confirmed: set[int] = set()
    failed: set[int] = set()

    def on_ack(offsets: dict, exc: object) -> None:
        (confirmed if exc is None else failed).update(offsets.get(TopicPartition(topic, 0), ()))

    consumer = _ours(broker.bootstrap, group, **{"max.poll.records": 5})
    consumer.set_acknowledgement_commit_callback(on_ack)
    try:
        consumer.subscribe([topic])
        _start_reading(broker.bootstrap, topic, [consumer])
        values = [b"k%02d" % i for i in range(20)]
        _produce(broker.bootstrap, topic, values)
        received: dict[bytes, int] = {}
        crashed = False
        deadline = time.monotonic() + 2 * CAP_S
        while set(values) - set(received):
            assert time.monotonic() < deadline, f"never received {sorted(set(values) - set(received))}"
            for m in _records(consumer.poll(0.5)):
                if m.value() == WARMUP:
                    continue
                assert m.offset() not in confirmed, f"offset {m.offset()} came back after its ACCEPT was confirmed"
                if m.value() in received:
                    assert m.offset() in failed, f"offset {m.offset()} came again, never reported lost"
                received[m.value()] = received.get(m.value(), 0) + 1
            if not crashed and len(received) >= 5:
                consumer.commit_sync(CAP_S)  # some acknowledgements confirmed before the crash
                assert confirmed
                crashed = True
                broker.restart(crash=True)
            elif crashed:
                consumer.commit_sync(CAP_S)
        assert crashed
    finally:
        consumer.close()


LOCK_MS = 1500  # group.share.record.lock.duration.ms of the broker below


def test_expired_locks_go_to_another_consumer_and_the_late_acknowledgement_fails(broker_factory):
    """Our consumer holds records past the acquisition lock: the broker hands them to another
    member (delivery count 2), and the first consumer's late ACCEPT is refused, per partition, in
    commit_sync's answer and its callback."""
    broker = broker_factory({"group.share.record.lock.duration.ms": str(LOCK_MS)})
    topic, group, slow = _explicit_reader(broker.bootstrap, "share-lock")
    other = _ours(broker.bootstrap, group)
    reports: list[tuple[dict, object]] = []
    slow.set_acknowledgement_commit_callback(lambda offsets, exc: reports.append((offsets, exc)))
    try:
        values = [b"l%d" % i for i in range(5)]
        _produce(broker.bootstrap, topic, values, per_batch=5)
        held = _poll_values(slow, len(values), explicit=True)
        other.subscribe([topic])
        taken = _poll_values(other, len(values), explicit=False)  # only after the locks expired
        assert sorted(m.value() for m in taken) == values
        assert {m.delivery_count() for m in taken} == {2}
        for m in held:
            slow.acknowledge(m)
        result = slow.commit_sync(CAP_S)
        assert list(result) == [TopicPartition(topic, 0)]
        error = result[TopicPartition(topic, 0)]
        assert error is not None, "a late acknowledgement was accepted"
        assert [exc for _, exc in reports if exc is not None], reports
    finally:
        slow.close()
        other.close()


def test_our_consumers_share_two_topics_of_three_partitions(broker):
    topics, group = [unique_topic("share-multi-a"), unique_topic("share-multi-b")], unique_topic("share-group")
    for topic in topics:
        create_topic(broker.bootstrap, topic, partitions=3)
    consumers = {f"ours-{i}": _ours(broker.bootstrap, group, **{"max.poll.records": 5}) for i in range(2)}
    try:
        for consumer in consumers.values():
            consumer.subscribe(topics)
        where = [(t, p) for t in topics for p in range(3)]
        _start_reading(broker.bootstrap, where, list(consumers.values()))
        values: list[bytes] = []
        for topic, partition in where:
            batch = [b"%s/%d/%02d" % (topic.encode(), partition, i) for i in range(10)]
            _produce(broker.bootstrap, topic, batch, partition=partition)
            values += batch
        received = _share_round_robin(consumers, set(values))
        assert sorted(v for got in received.values() for _, v in got) == sorted(values)
        for (topic, partition, _offset), value in (x for got in received.values() for x in got):
            assert value.startswith(b"%s/%d/" % (topic.encode(), partition))
    finally:
        for consumer in consumers.values():
            consumer.close()
