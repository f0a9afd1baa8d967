"""KIP-848 (``group.protocol=consumer``) in oncestream's own Consumer, against our broker, beside
librdkafka's consumer on the same protocol.

Each member runs its poll loop on a thread, as an application does, and records what its
rebalance callbacks reported and every record it received. Records flow while members join and
leave; the group as a whole must see every record exactly once (auto-commit: the positions of
revoked partitions are committed before they are given up, so the next owner starts after the
last record handed out). Rebalances are incremental: a member keeps the partitions the
coordinator leaves it, with no revoke/assign round for them.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.clients import create_topic, unique_topic
from tests.support.consumer_protocol import (
    consumer_protocol_broker,  # noqa: F401 - fixture
    wait_until,
)

pytestmark = pytest.mark.interop

PARTITIONS = 4
WAIT_S = 60.0


class Member:
    """One consumer (``ours``: oncestream's, ``librdkafka``: confluent-kafka's) with
    group.protocol=consumer, polling on its own thread."""

    def __init__(self, client: str, bootstrap: str, group_id: str, topics: list[str], name: str,
                 **conf: Any) -> None:
        self.client, self.name = client, name
        self.conf = {"bootstrap.servers": bootstrap, "group.id": group_id, "group.protocol": "consumer",
                     "auto.offset.reset": "earliest", "enable.auto.commit": True,
                     "auto.commit.interval.ms": 200, **conf}
        self.topics = topics
        self.lock = threading.Lock()
        self.assignment: set[tuple[str, int]] = set()
        self.events: list[tuple[str, frozenset[tuple[str, int]]]] = []
        self.records: list[tuple[str, int, int, bytes]] = []
        self.errors: list[str] = []
        self.failure: BaseException | None = None
        self.member_id: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"member-{name}", daemon=True)

    def start(self) -> Member:
        self._thread.start()
        return self

    def _consumer(self) -> Any:
        if self.client == "ours":
            from oncestream.client import Consumer
            return Consumer(self.conf)
        from confluent_kafka import Consumer as LibrdkafkaConsumer
        return LibrdkafkaConsumer(self.conf)

    def _callback(self, kind: str) -> Callable[[Any, list[Any]], None]:
        def callback(_consumer: Any, partitions: list[Any]) -> None:
            changed = frozenset((tp.topic, tp.partition) for tp in partitions)
            with self.lock:
                self.events.append((kind, changed))
                if kind == "assign":
                    self.assignment |= changed
                else:
                    self.assignment -= changed
        return callback

    def _run(self) -> None:
        try:
            consumer = self._consumer()
            consumer.subscribe(self.topics, on_assign=self._callback("assign"),
                               on_revoke=self._callback("revoke"), on_lost=self._callback("lost"))
            try:
                while not self._stop.is_set():
                    msg = consumer.poll(0.1)
                    self.member_id = consumer.memberid()
                    if msg is None:
                        continue
                    if msg.error() is not None:
                        with self.lock:
                            self.errors.append(str(msg.error()))
                        continue
                    with self.lock:
                        self.records.append((msg.topic(), msg.partition(), msg.offset(), msg.value()))
            finally:
                consumer.close()
        except BaseException as exc:  # noqa: BLE001 - reported by check()
            self.failure = exc

    def owned(self) -> set[tuple[str, int]]:
        with self.lock:
            return set(self.assignment)

    def count(self) -> int:
        with self.lock:
            return len(self.records)

    def stop(self) -> None:
        """Stop and close without checking (clean-up after a failure)."""
        self._stop.set()
        self._thread.join(WAIT_S)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(WAIT_S)
        assert not self._thread.is_alive(), f"{self.name} did not close"
        self.check()

    def check(self) -> None:
        if self.failure is not None:
            raise AssertionError(f"{self.name} failed: {self.failure!r}") from self.failure


class Feeder:
    """Produces ``total`` numbered records round-robin over the partitions, paced, on a thread."""

    def __init__(self, bootstrap: str, topic: str, total: int, per_batch: int = 20, pause_s: float = 0.02) -> None:
        self.bootstrap, self.topic, self.total = bootstrap, topic, total
        self.per_batch, self.pause_s = per_batch, pause_s
        self.sent = 0
        self.failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Feeder:
        self._thread.start()
        return self

    def _run(self) -> None:
        from confluent_kafka import Producer
        try:
            producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5})
            for n in range(self.total):
                producer.produce(self.topic, value=f"r-{n}".encode(), partition=n % PARTITIONS)
                if n % self.per_batch == self.per_batch - 1:
                    producer.flush(30)
                    self.sent = n + 1
                    time.sleep(self.pause_s)
            assert producer.flush(30) == 0
            self.sent = self.total
        except BaseException as exc:  # noqa: BLE001 - reported by join()
            self.failure = exc

    def join(self) -> None:
        self._thread.join(WAIT_S)
        assert self.failure is None, f"producing failed: {self.failure!r}"
        assert self.sent == self.total


def group_split(members: list[Member], topic: str, partitions: int = PARTITIONS) -> bool:
    """Every partition owned by exactly one of ``members``, each of which owns some."""
    owned = [m.owned() for m in members]
    flat = [tp for o in owned for tp in o]
    return all(owned) and sorted(flat) == [(topic, p) for p in range(partitions)]


def assert_exactly_once(members: list[Member], total: int) -> None:
    values = Counter(value for m in members for (_t, _p, _o, value) in m.records)
    duplicates = {v: n for v, n in values.items() if n > 1}
    missing = [n for n in range(total) if values[f"r-{n}".encode()] == 0]
    assert not duplicates, f"{len(duplicates)} records consumed more than once, e.g. {list(duplicates)[:5]}"
    assert not missing, f"{len(missing)} records never consumed, e.g. {missing[:5]}"


def assert_incremental(member: Member) -> None:
    """KIP-848 rebalances are incremental: a callback names only partitions that change hands;
    a partition the member keeps is never revoked and handed back."""
    owned: set[tuple[str, int]] = set()
    for kind, changed in member.events:
        if kind == "assign":
            assert not changed & owned, f"{member.name}: assigned {sorted(changed & owned)} it already owned"
            owned |= changed
        else:
            assert changed <= owned, f"{member.name}: {kind} of {sorted(changed - owned)} it did not own"
            owned -= changed


def test_our_members_join_and_leave_while_records_flow_and_each_record_is_consumed_once(consumer_protocol_broker):
    broker = consumer_protocol_broker
    topic = unique_topic("kip848-flow")
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    group = f"kip848-{uuid.uuid4().hex[:8]}"
    total = 3000
    feeder = Feeder(broker.bootstrap, topic, total).start()
    a = Member("ours", broker.bootstrap, group, [topic], "a").start()
    b = c = None
    everyone = [a]
    try:
        wait_until(lambda: a.count() >= 300, lambda: f"a to consume (has {a.count()}, owns {a.owned()})")
        assert a.owned() == {(topic, p) for p in range(PARTITIONS)}
        b = Member("ours", broker.bootstrap, group, [topic], "b").start()
        everyone.append(b)
        wait_until(lambda: group_split([a, b], topic), lambda: f"a and b to split: {a.owned()} / {b.owned()}")
        kept_by_a = a.owned()
        revokes_of_a = [changed for kind, changed in a.events if kind == "revoke"]
        # Incremental: a gave up only what b got, kept the rest without any callback for it.
        assert len(revokes_of_a) == 1
        assert revokes_of_a[0] == b.owned()
        wait_until(lambda: sum(m.count() for m in everyone) >= 1200, "records to flow to a and b")
        c = Member("ours", broker.bootstrap, group, [topic], "c").start()
        everyone.append(c)
        wait_until(lambda: group_split([a, b, c], topic), lambda: f"a, b, c to split: {[m.owned() for m in everyone]}")
        assert a.owned() <= kept_by_a
        wait_until(lambda: sum(m.count() for m in everyone) >= 2000, "records to flow to a, b and c")
        a.close()
        wait_until(lambda: group_split([b, c], topic), lambda: f"b and c to take a's share: {b.owned()} / {c.owned()}")
        b.close()
        wait_until(lambda: group_split([c], topic), lambda: f"c to take everything: {c.owned()}")
        feeder.join()
        wait_until(lambda: sum(m.count() for m in everyone) >= total,
                   lambda: f"every record consumed ({sum(m.count() for m in everyone)} of {total})")
        c.close()
        for m in everyone:
            assert_incremental(m)
            assert not m.errors, f"{m.name}: {m.errors[:3]}"
        assert_exactly_once(everyone, total)
    finally:
        for m in everyone:
            m.stop()


def test_our_consumer_and_librdkafkas_share_a_consumer_protocol_group(consumer_protocol_broker):
    broker = consumer_protocol_broker
    topic = unique_topic("kip848-mixed")
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    group = f"kip848-mixed-{uuid.uuid4().hex[:8]}"
    total = 2000
    feeder = Feeder(broker.bootstrap, topic, total).start()
    ours = Member("ours", broker.bootstrap, group, [topic], "ours").start()
    theirs = Member("librdkafka", broker.bootstrap, group, [topic], "librdkafka").start()
    try:
        wait_until(lambda: group_split([ours, theirs], topic),
                   lambda: f"the two clients to split the partitions: {ours.owned()} / {theirs.owned()}")
        assert ours.member_id
        assert theirs.member_id
        assert ours.member_id != theirs.member_id
        wait_until(lambda: ours.count() + theirs.count() >= total // 2, "records to flow to both")
        ours.close()
        wait_until(lambda: group_split([theirs], topic), lambda: f"librdkafka to take everything: {theirs.owned()}")
        feeder.join()
        wait_until(lambda: ours.count() + theirs.count() >= total,
                   lambda: f"every record consumed ({ours.count() + theirs.count()} of {total})")
        theirs.close()
        assert ours.records
        assert theirs.records
        assert_incremental(ours)
        assert_exactly_once([ours, theirs], total)
    finally:
        ours.stop()
        theirs.stop()


def test_a_static_member_rejoins_with_its_assignment_and_no_rebalance(consumer_protocol_broker):
    """group.instance.id: close() leaves with member epoch -2, so the coordinator keeps the
    member's assignment for its instance id; the restarted member gets it back, and the other
    member sees no rebalance."""
    broker = consumer_protocol_broker
    topic = unique_topic("kip848-static")
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    group = f"kip848-static-{uuid.uuid4().hex[:8]}"
    static = Member("ours", broker.bootstrap, group, [topic], "static", **{"group.instance.id": "s-1"}).start()
    other = Member("ours", broker.bootstrap, group, [topic], "other").start()
    again = None
    try:
        wait_until(lambda: group_split([static, other], topic), lambda: f"split: {static.owned()} / {other.owned()}")
        before = static.owned()
        static.close()
        events_of_other = len(other.events)
        again = Member("ours", broker.bootstrap, group, [topic], "static-again", **{"group.instance.id": "s-1"}).start()
        wait_until(lambda: again.owned() == before, lambda: f"the static member's partitions back: {again.owned()} vs {before} "
                   f"(its errors {again.errors[:3]}, failure {again.failure!r}; events {again.events})")
        assert other.events[events_of_other:] == [], f"the other member was rebalanced: {other.events[events_of_other:]}"
        assert other.owned() == {(topic, p) for p in range(PARTITIONS)} - before
    finally:
        for m in (static, other, again):
            if m is not None:
                m.stop()


def test_a_regex_subscription_picks_up_a_topic_created_later(consumer_protocol_broker):
    broker = consumer_protocol_broker
    prefix = f"kip848rx-{uuid.uuid4().hex[:8]}"
    first, later = f"{prefix}-a", f"{prefix}-b"
    create_topic(broker.bootstrap, first, partitions=2)
    member = Member("ours", broker.bootstrap, f"rx-{uuid.uuid4().hex[:8]}", [f"^{prefix}-.*"], "rx").start()
    try:
        wait_until(lambda: member.owned() == {(first, 0), (first, 1)}, lambda: f"the first topic: {member.owned()}")
        create_topic(broker.bootstrap, later, partitions=2)
        wait_until(lambda: member.owned() == {(first, 0), (first, 1), (later, 0), (later, 1)},
                   lambda: f"the later topic to join the subscription: {member.owned()}")
        from confluent_kafka import Producer
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        producer.produce(later, value=b"hello", partition=1)
        assert producer.flush(30) == 0
        wait_until(lambda: any(t == later for t, _p, _o, _v in member.records), "a record of the later topic")
        member.close()
        assert_incremental(member)
    finally:
        member.stop()


def test_a_member_that_stops_polling_leaves_then_gets_on_lost_and_rejoins(consumer_protocol_broker):
    """max.poll.interval.ms passed without a poll: the member leaves the group (heartbeat with
    epoch -1); its next poll reports MAX_POLL_EXCEEDED, hands every partition to on_lost (not
    on_revoke: they may already be someone else's) and rejoins, getting them back."""
    from oncestream.client import Consumer, KafkaError

    broker = consumer_protocol_broker
    topic = unique_topic("kip848-stale")
    create_topic(broker.bootstrap, topic, partitions=2)
    events: list[tuple[str, frozenset[int]]] = []

    def record(kind: str) -> Callable[[Any, list[Any]], None]:
        return lambda _c, parts: events.append((kind, frozenset(tp.partition for tp in parts)))

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"stale-{uuid.uuid4().hex[:8]}",
                         "group.protocol": "consumer", "max.poll.interval.ms": 1500})
    try:
        consumer.subscribe([topic], on_assign=record("assign"), on_revoke=record("revoke"), on_lost=record("lost"))
        wait_until(lambda: consumer.poll(0.1) is None and len(consumer.assignment()) == 2, "the assignment")
        time.sleep(3.0)  # the application stalls past max.poll.interval.ms (not a timing assertion)
        errors: list[KafkaError] = []
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and not (errors and len(consumer.assignment()) == 2):
            msg = consumer.poll(0.1)
            error = None if msg is None else msg.error()
            if error is not None:
                errors.append(error)
        assert [e.code() for e in errors] == [KafkaError._MAX_POLL_EXCEEDED], errors
        assert len(consumer.assignment()) == 2
        lost_at = events.index(("lost", frozenset({0, 1})))
        assert ("revoke", frozenset({0, 1})) not in events
        assert ("assign", frozenset({0, 1})) in events[lost_at:]
    finally:
        consumer.close()


def test_partitions_kept_across_a_rebalance_keep_their_position(consumer_protocol_broker):
    """Without any commit, a member that keeps a partition through a rebalance goes on from
    where it was: nothing of it is read twice by that member. (An eager classic rebalance gives
    every partition up, and a kept one starts again from the committed offset: here the start.)"""
    broker = consumer_protocol_broker
    topic = unique_topic("kip848-keep")
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    group = f"kip848-keep-{uuid.uuid4().hex[:8]}"
    first = Feeder(broker.bootstrap, topic, 400, per_batch=100, pause_s=0).start()
    first.join()
    a = Member("ours", broker.bootstrap, group, [topic], "a", **{"enable.auto.commit": False}).start()
    b = None
    try:
        wait_until(lambda: a.count() >= 400, lambda: f"a to read the first records ({a.count()})")
        b = Member("ours", broker.bootstrap, group, [topic], "b", **{"enable.auto.commit": False}).start()
        wait_until(lambda: group_split([a, b], topic), lambda: f"a and b to split: {a.owned()} / {b.owned()}")
        kept = a.owned()
        second = Feeder(broker.bootstrap, topic, 400, per_batch=100, pause_s=0).start()
        second.join()
        wait_until(lambda: {(t, p) for t, p, o, _v in a.records if o >= 100} >= kept,
                   lambda: f"a to read new records of the partitions it kept ({sorted(kept)})")
        seen = Counter((t, p, o) for t, p, o, _v in a.records)
        again = sorted(key for key, n in seen.items() if n > 1)
        assert not again, f"a read {len(again)} records twice, e.g. {again[:5]}"
        assert_incremental(a)
    finally:
        for m in (a, b):
            if m is not None:
                m.stop()


def test_a_member_removed_by_the_coordinator_gets_on_lost_and_rejoins_with_epoch_zero(consumer_protocol_broker):
    """An administrator's LeaveGroup removes the static member (as Kafka's coordinator does):
    its next heartbeat is fenced (UNKNOWN_MEMBER_ID), its partitions go to on_lost (not
    on_revoke: they may already be someone else's) and it rejoins, getting them back."""
    from oncestream.protocol.api_keys import LEAVE_GROUP
    from tests.support.consumer_protocol import group_connection

    broker = consumer_protocol_broker
    topic = unique_topic("kip848-fenced")
    create_topic(broker.bootstrap, topic, partitions=2)
    group = f"fenced-{uuid.uuid4().hex[:8]}"
    member = Member("ours", broker.bootstrap, group, [topic], "static", **{"group.instance.id": "s-9"}).start()
    try:
        wait_until(lambda: member.owned() == {(topic, 0), (topic, 1)}, lambda: f"the assignment: {member.owned()}")
        first_id = member.member_id
        conn = group_connection(broker.bootstrap, group)
        try:
            answer = conn.call(LEAVE_GROUP, lambda m: m.LeaveGroupRequest(group_id=group, members=(
                m.MemberIdentity(member_id="", group_instance_id="s-9", reason="removed by the test"),)))
        finally:
            conn.close()
        assert int(answer.error_code) == 0
        assert [int(m.error_code) for m in answer.members] == [0]
        everything = frozenset({(topic, 0), (topic, 1)})
        wait_until(lambda: ("lost", everything) in member.events and member.owned() == set(everything),
                   lambda: f"on_lost then the partitions back: {member.events}")
        lost_at = member.events.index(("lost", everything))
        assert ("assign", everything) in member.events[lost_at:]
        assert ("revoke", everything) not in member.events
        assert member.member_id == first_id  # the same member id, rejoined with epoch 0
        member.close()
        assert not member.errors, member.errors
    finally:
        member.stop()
