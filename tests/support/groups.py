"""Consumer-group members driven by real clients, for the group interop and chaos suites.

A ``GroupMember`` is one consumer (librdkafka through confluent-kafka, or kafka-python) that
subscribes to a topic and runs its poll loop on its own thread, the way an application does.
The thread records what the group protocol did to it (every assignment and revocation the
client reported through its rebalance callback) and what it consumed and committed, so a test
can wait for a state ("every member holds part of a complete, disjoint assignment") and then
assert on the history.

Flow control: a member may be given a ``budget`` of records to process. A member without budget
keeps polling (so it keeps serving heartbeats and rebalances) but puts every record it receives
back: it seeks the partition to that record and pauses it. That makes "a rebalance happens while
records are still unconsumed" a deterministic step of a test instead of a race.

Clients are configured for the eager protocol with the range assignor (librdkafka
``partition.assignment.strategy=range``, kafka-python ``RangePartitionAssignor``): a rebalance
revokes every partition before the member rejoins, which the static-membership test relies on.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pytest

from tests.support.brokers import BrokerProcess, TansuProcess, _ManagedBroker
from tests.support.narrow import consumed_record

CLIENTS = ("confluent", "kafka-python")
WAIT_TIMEOUT_S = 60.0
POLL_INTERVAL_S = 0.05
# A short heartbeat interval makes members notice a rebalance quickly (the defaults wait 3 s).
HEARTBEAT_INTERVAL_MS = 250
SESSION_TIMEOUT_MS = 10_000
JOIN_THREAD_TIMEOUT_S = 30.0

# Broker properties for group tests: no initial rebalance delay (Kafka's 3 s default only slows
# tests down), and short sessions allowed.
GROUP_BROKER_CONFIG = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
}


def start_group_broker(base: Path) -> _ManagedBroker:
    """Our broker with GROUP_BROKER_CONFIG (or Tansu when ONCESTREAM_TEST_BROKER=tansu, the
    switch tests/conftest.py reads too)."""
    process: _ManagedBroker
    if os.environ.get("ONCESTREAM_TEST_BROKER", "oncestream") == "tansu":
        process = TansuProcess(log_dir=base / "logs")
    else:
        process = BrokerProcess(data_dir=base / "data", config=GROUP_BROKER_CONFIG)
    return process.start()


@pytest.fixture(scope="module")
def group_broker(module_broker_factory):
    """One broker per test module, configured for group tests (tests use unique group ids), of the
    kind under test (tests/conftest.py: ``module_broker_factory``)."""
    return module_broker_factory(GROUP_BROKER_CONFIG, name="group-broker")


def unique_group(prefix: str = "group") -> str:
    """A group id no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def wait_until(predicate: Callable[[], bool], what: Callable[[], str] | str,
               timeout_s: float = WAIT_TIMEOUT_S) -> None:
    """Poll ``predicate`` until it holds; fail with ``what`` (a liveness bound, not a timing check)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            message = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for: {message}")
        time.sleep(POLL_INTERVAL_S)


# ---------------------------------------------------------------------------------------------
# What a member saw
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Delivery:
    """One record a member received and processed."""

    partition: int
    offset: int
    value: bytes


@dataclass(frozen=True, slots=True)
class CommitFailure:
    """A synchronous commit of ``offset + 1`` after processing record ``offset`` that failed."""

    partition: int
    offset: int
    error: str


@dataclass
class MemberLog:
    """Everything a member's thread recorded (read under ``GroupMember.lock``)."""

    assignment: frozenset[int] = frozenset()
    assignments: list[frozenset[int]] = field(default_factory=list)  # one per assign callback
    revocations: list[frozenset[int]] = field(default_factory=list)  # one per revoke callback
    delivered: list[Delivery] = field(default_factory=list)
    committed: list[Delivery] = field(default_factory=list)  # records whose commit succeeded
    commit_failures: list[CommitFailure] = field(default_factory=list)
    member_id: str | None = None


# ---------------------------------------------------------------------------------------------
# Client drivers: the same small surface over both clients
# ---------------------------------------------------------------------------------------------


class CommitError(Exception):
    """A synchronous commit failed (the client's error is the message)."""


@dataclass(frozen=True, slots=True)
class PolledRecord:
    """A record as a driver returns it."""

    partition: int
    offset: int
    value: bytes


def _transient_confluent_errors() -> frozenset[int]:
    from confluent_kafka import KafkaError

    return frozenset({KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN})


_TRANSIENT_CONFLUENT_ERRORS = _transient_confluent_errors()


class _ConfluentDriver:
    """librdkafka through confluent-kafka, used from one thread only."""

    # librdkafka runs the group protocol on its own threads; poll only serves callbacks.
    poll_timeout_s = 0.1

    def __init__(self, bootstrap: str, group_id: str, topic: str, instance_id: str | None,
                 session_timeout_ms: int, on_assign: Callable[[Iterable[int]], None],
                 on_revoke: Callable[[Iterable[int]], None]) -> None:
        from confluent_kafka import Consumer

        conf: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "group.id": group_id,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "range",
            "session.timeout.ms": session_timeout_ms,
            "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
            "topic.metadata.refresh.interval.ms": 1000,
        }
        if instance_id is not None:
            conf["group.instance.id"] = instance_id
        self.topic = topic
        self.consumer = Consumer(conf)
        self.consumer.subscribe(
            [topic],
            on_assign=lambda _c, parts: on_assign(p.partition for p in parts),
            on_revoke=lambda _c, parts: on_revoke(p.partition for p in parts),
        )

    def poll(self, timeout_s: float) -> list[PolledRecord]:
        from confluent_kafka import KafkaException

        msg = self.consumer.poll(timeout_s)
        if msg is None:
            return []
        err = msg.error()
        if err is not None:
            if err.code() in _TRANSIENT_CONFLUENT_ERRORS:
                return []  # the broker is restarting (chaos tests): the client reconnects
            raise KafkaException(err)
        record = consumed_record(msg)
        return [PolledRecord(record.partition, record.offset, record.value)]

    def commit(self, partition: int, next_offset: int) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        try:
            result = self.consumer.commit(
                offsets=[TopicPartition(self.topic, partition, next_offset)], asynchronous=False
            )
        except KafkaException as exc:
            raise CommitError(str(exc)) from exc
        errors = [tp.error for tp in result or () if tp.error is not None]
        if errors:
            raise CommitError(str(errors[0]))

    def seek(self, partition: int, offset: int) -> None:
        from confluent_kafka import TopicPartition

        self.consumer.seek(TopicPartition(self.topic, partition, offset))

    def pause(self, partitions: Iterable[int]) -> None:
        from confluent_kafka import TopicPartition

        self.consumer.pause([TopicPartition(self.topic, p) for p in partitions])

    def resume(self, partitions: Iterable[int]) -> None:
        from confluent_kafka import TopicPartition

        self.consumer.resume([TopicPartition(self.topic, p) for p in partitions])

    def member_id(self) -> str | None:
        return self.consumer.memberid()

    def close(self) -> None:
        # A static member (group.instance.id) does not send LeaveGroup here (KIP-345).
        self.consumer.close()


class _KafkaPythonDriver:
    """kafka-python's KafkaConsumer, used from one thread only."""

    # kafka-python 3.0.12 runs JoinGroup/SyncGroup inside poll(). When poll()'s timer expires
    # while the group leader's join is in flight, the client can lose the join's result: its
    # join_group_async loop is guarded by need_rejoin(), which is already False once the leader
    # has recomputed its assignment snapshot, so the finished SyncGroup is never applied, the
    # heartbeat stays disabled and the broker (correctly) expires the member after
    # session.timeout.ms. Seen with 0.1 s polls about once in 30 rebalances; a long poll makes
    # a join straddling the timer's expiry rare. Client bug, not a broker one. The cost: an
    # idle member notices close() or a new budget up to this late.
    poll_timeout_s = 2.0

    def __init__(self, bootstrap: str, group_id: str, topic: str, instance_id: str | None,
                 session_timeout_ms: int, on_assign: Callable[[Iterable[int]], None],
                 on_revoke: Callable[[Iterable[int]], None]) -> None:
        from kafka import ConsumerRebalanceListener, KafkaConsumer
        from kafka.coordinator.assignors.range import RangePartitionAssignor

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):  # kafka-python's interface
                on_revoke(tp.partition for tp in revoked)

            def on_partitions_assigned(self, assigned):
                on_assign(tp.partition for tp in assigned)

        self.topic = topic
        self.consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group_id,
            group_instance_id=instance_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            partition_assignment_strategy=(RangePartitionAssignor,),
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
            metadata_max_age_ms=1000,
        )
        # Load the topic's metadata before joining: kafka-python joins before it has metadata
        # for a new subscription, so the first leader would assign nothing and rejoin when the
        # metadata arrives (an extra rebalance, and one more chance of the poll-timer bug
        # described at poll_timeout_s).
        assert self.consumer.partitions_for_topic(topic), f"no metadata for {topic}"
        self.consumer.subscribe([topic], listener=Listener())

    def _tp(self, partition: int):
        from kafka import TopicPartition

        return TopicPartition(self.topic, partition)

    def poll(self, timeout_s: float) -> list[PolledRecord]:
        batches = self.consumer.poll(timeout_ms=int(timeout_s * 1000))
        return [
            PolledRecord(tp.partition, record.offset, record.value)
            for tp, records in batches.items()
            for record in records
        ]

    def commit(self, partition: int, next_offset: int) -> None:
        from kafka.errors import KafkaError
        from kafka.structs import OffsetAndMetadata

        try:
            self.consumer.commit({self._tp(partition): OffsetAndMetadata(next_offset, "", -1)})
        except KafkaError as exc:
            raise CommitError(repr(exc)) from exc

    def seek(self, partition: int, offset: int) -> None:
        self.consumer.seek(self._tp(partition), offset)

    def pause(self, partitions: Iterable[int]) -> None:
        self.consumer.pause(*[self._tp(p) for p in partitions])

    def resume(self, partitions: Iterable[int]) -> None:
        self.consumer.resume(*[self._tp(p) for p in partitions])

    def member_id(self) -> str | None:
        return self.consumer.group_metadata().member_id

    def close(self) -> None:
        # A static member does not send LeaveGroup on close (kafka-python >= broker 2.3 rules).
        self.consumer.close(autocommit=False)


class _Driver(Protocol):
    """What a member needs of a client: the surface both drivers above provide."""

    poll_timeout_s: float

    def poll(self, timeout_s: float) -> list[PolledRecord]: ...
    def commit(self, partition: int, next_offset: int) -> None: ...
    def seek(self, partition: int, offset: int) -> None: ...
    def pause(self, partitions: Iterable[int]) -> None: ...
    def resume(self, partitions: Iterable[int]) -> None: ...
    def member_id(self) -> str | None: ...
    def close(self) -> None: ...


_DRIVERS: dict[str, Callable[..., _Driver]] = {"confluent": _ConfluentDriver, "kafka-python": _KafkaPythonDriver}


# ---------------------------------------------------------------------------------------------
# The member
# ---------------------------------------------------------------------------------------------


class GroupMember:
    """One subscribed consumer running its poll loop on a thread.

    ``budget``: how many records it may process (None: unlimited). ``commit_each``: commit
    ``offset + 1`` synchronously after processing every record; a failed commit is recorded and
    the partition is sought back to the record, so the record is processed again by whoever owns
    the partition next (at-least-once, never a silent gap).
    """

    def __init__(self, client: str, bootstrap: str, group_id: str, topic: str, *,
                 name: str, instance_id: str | None = None, budget: int | None = None,
                 commit_each: bool = False, session_timeout_ms: int = SESSION_TIMEOUT_MS) -> None:
        assert client in _DRIVERS, f"unknown client {client!r}"
        self.client = client
        self.name = name
        self.group_id = group_id
        self.topic = topic
        self.instance_id = instance_id
        self.lock = threading.Lock()
        self.log = MemberLog()
        self._budget = budget
        self._commit_each = commit_each
        self._paused: set[int] = set()
        # Records taken from the budget whose processing (delivery and commit) is not finished:
        # holding() waits for them so a test never reads progress mid-commit.
        self._unsettled = 0
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._ready = threading.Event()
        self._args = (bootstrap, group_id, topic, instance_id, session_timeout_ms)
        self._thread = threading.Thread(target=self._run, name=f"member-{name}", daemon=True)

    # -- control (main thread) ------------------------------------------------------------------
    def start(self) -> GroupMember:
        """Create the consumer on the member's thread and start polling."""
        self._thread.start()
        wait_until(lambda: self._ready.is_set() or self._error is not None,
                   f"{self.name} to create its consumer")
        self.check()
        return self

    def grant(self, records: int | None) -> None:
        """Allow ``records`` more records (None: unlimited)."""
        with self.lock:
            if records is None or self._budget is None:
                self._budget = None
            else:
                self._budget += records

    def request_stop(self) -> None:
        """Ask the poll loop to stop and close the consumer, without waiting (see close_all)."""
        self._stop.set()

    def close(self) -> None:
        """Stop polling and close the consumer (a dynamic member sends LeaveGroup)."""
        self._stop.set()
        self._thread.join(JOIN_THREAD_TIMEOUT_S)
        assert not self._thread.is_alive(), f"{self.name} did not close in time"
        self.check()

    def check(self) -> None:
        """Re-raise an exception the member's thread died of."""
        if self._error is not None:
            raise AssertionError(f"member {self.name} failed: {self._error!r}") from self._error

    @property
    def alive(self) -> bool:
        """True while the poll loop runs."""
        return self._thread.is_alive()

    # -- views (main thread) ----------------------------------------------------------------------
    @property
    def assignment(self) -> frozenset[int]:
        """Partitions the client currently owns, as its rebalance callbacks reported them."""
        with self.lock:
            return self.log.assignment

    @property
    def assign_count(self) -> int:
        """How many times the assign callback ran."""
        with self.lock:
            return len(self.log.assignments)

    @property
    def revoke_count(self) -> int:
        """How many times the revoke callback ran."""
        with self.lock:
            return len(self.log.revocations)

    @property
    def member_id(self) -> str | None:
        """The member id the client had at its latest assignment."""
        with self.lock:
            return self.log.member_id

    def delivered(self) -> list[Delivery]:
        """Copy of every record processed so far."""
        with self.lock:
            return list(self.log.delivered)

    def committed(self) -> list[Delivery]:
        """Copy of every record whose commit succeeded."""
        with self.lock:
            return list(self.log.committed)

    def commit_failures(self) -> list[CommitFailure]:
        """Copy of every failed commit."""
        with self.lock:
            return list(self.log.commit_failures)

    def holding(self) -> bool:
        """True when the budget is used up (the member is putting records back)."""
        with self.lock:
            return self._budget == 0 and self._unsettled == 0

    def __repr__(self) -> str:
        with self.lock:
            return (f"{self.name}({self.client}, assignment={sorted(self.log.assignment)}, "
                    f"assigns={len(self.log.assignments)}, revokes={len(self.log.revocations)}, "
                    f"delivered={len(self.log.delivered)}, committed={len(self.log.committed)}, "
                    f"commit_failures={len(self.log.commit_failures)}, budget={self._budget})")

    # -- the member's thread ----------------------------------------------------------------------
    def _on_assign(self, partitions: Iterable[int]) -> None:
        assigned = frozenset(partitions)
        with self.lock:
            # Eager protocol: the callback carries the whole new assignment.
            self.log.assignment = self.log.assignment | assigned
            self.log.assignments.append(assigned)

    def _on_revoke(self, partitions: Iterable[int]) -> None:
        revoked = frozenset(partitions)
        with self.lock:
            self.log.assignment = self.log.assignment - revoked
            self.log.revocations.append(revoked)

    def _run(self) -> None:
        driver: _Driver | None = None
        try:
            driver = _DRIVERS[self.client](*self._args, self._on_assign, self._on_revoke)
            self._ready.set()
            while not self._stop.is_set():
                self._poll_once(driver)
        except BaseException as exc:  # noqa: BLE001 - reported to the main thread by check()
            self._error = exc
        finally:
            if driver is not None:
                try:
                    driver.close()
                except BaseException as exc:  # noqa: BLE001 - a close failure is a failure too
                    if self._error is None:
                        self._error = exc

    def _poll_once(self, driver: _Driver) -> None:
        with self.lock:
            can_process = self._budget is None or self._budget > 0
            # librdkafka keeps a partition paused across a revoke and a new assignment of it:
            # resume whatever we paused once it is ours again.
            to_resume = self._paused & self.log.assignment if can_process else set()
            self._paused -= to_resume
        if to_resume:
            driver.resume(to_resume)
        records = driver.poll(driver.poll_timeout_s)
        member_id = driver.member_id()
        with self.lock:
            if self.log.assignment:
                self.log.member_id = member_id
        put_back: set[int] = set()
        for record in records:
            if record.partition in put_back:
                continue  # the partition was sought back to an earlier record of this batch
            with self.lock:
                owned = record.partition in self.log.assignment
                allowed = self._budget is None or self._budget > 0
                counted = owned and allowed and self._budget is not None
                if counted and self._budget is not None:
                    self._budget -= 1
                    self._unsettled += 1
            try:
                self._process(driver, record, owned, allowed, put_back)
            finally:
                if counted:
                    with self.lock:
                        self._unsettled -= 1

    def _process(self, driver: _Driver, record: PolledRecord, owned: bool, allowed: bool,
                 put_back: set[int]) -> None:
        """Deliver (and with commit_each, commit) one polled record, or put it back."""
        if not owned:
            return  # left over from a revoked assignment: not ours to process
        if not allowed:
            driver.seek(record.partition, record.offset)
            driver.pause([record.partition])
            with self.lock:
                self._paused.add(record.partition)
            put_back.add(record.partition)
            return
        delivery = Delivery(record.partition, record.offset, record.value)
        with self.lock:
            self.log.delivered.append(delivery)
        if not self._commit_each:
            return
        try:
            driver.commit(record.partition, record.offset + 1)
        except CommitError as exc:
            with self.lock:
                self.log.commit_failures.append(
                    CommitFailure(record.partition, record.offset, str(exc)))
            # Process it again later (here or at the next owner): at-least-once.
            driver.seek(record.partition, record.offset)
            put_back.add(record.partition)
        else:
            with self.lock:
                self.log.committed.append(delivery)


def close_all(members: Iterable[GroupMember | None]) -> None:
    """Close every running member, all at once (test teardown; order does not matter here)."""
    running = [m for m in members if m is not None and m.alive]
    for member in running:
        member.request_stop()
    for member in running:
        member.close()


# ---------------------------------------------------------------------------------------------
# Group-level checks
# ---------------------------------------------------------------------------------------------


def split_is_complete(members: Iterable[GroupMember], partitions: int) -> bool:
    """Every member owns at least one partition, no partition twice, every partition once."""
    owned = [m.assignment for m in members]
    if not owned or any(not a for a in owned):
        return False
    union: set[int] = set()
    for assignment in owned:
        if union & assignment:
            return False
        union |= assignment
    return union == set(range(partitions))


def describe_split(members: Iterable[GroupMember]) -> str:
    """The members' state, for failure messages."""
    return "; ".join(repr(m) for m in members)


def wait_for_split(members: list[GroupMember], partitions: int,
                   assigns_at_least: dict[str, int] | None = None) -> dict[str, frozenset[int]]:
    """Wait until ``members`` hold a complete disjoint assignment, each member having seen at
    least ``assigns_at_least[name]`` assign callbacks (to skip a stale split from an older
    generation); returns name -> partitions."""
    floor = assigns_at_least or {}

    def ready() -> bool:
        for member in members:
            member.check()
        return (all(m.assign_count >= floor.get(m.name, 1) and m.member_id is not None
                    for m in members)
                and split_is_complete(members, partitions))

    wait_until(ready, lambda: f"complete split over {partitions} partitions: "
               f"{describe_split(members)}")
    return {m.name: m.assignment for m in members}


# ---------------------------------------------------------------------------------------------
# The broker's view (DescribeGroups through confluent-kafka's AdminClient)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BrokerGroupView:
    """A group as DescribeGroups reports it."""

    state: str
    members: dict[str, frozenset[int]]  # member id -> partitions of the topic asked about
    instance_ids: dict[str, str | None]  # member id -> group.instance.id


def group_admin(bootstrap: str):
    """A confluent-kafka AdminClient (create one per check loop, not one per call)."""
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def describe_group(admin: Any, group_id: str, topic: str) -> BrokerGroupView:
    """DescribeGroups for ``group_id`` through confluent-kafka's AdminClient ``admin``."""
    description = admin.describe_consumer_groups([group_id], request_timeout=30)[group_id].result(
        timeout=WAIT_TIMEOUT_S)
    members = {}
    instances = {}
    for member in description.members:
        parts = member.assignment.topic_partitions if member.assignment is not None else []
        members[member.member_id] = frozenset(tp.partition for tp in parts if tp.topic == topic)
        instances[member.member_id] = member.group_instance_id
    return BrokerGroupView(description.state.name, members, instances)


def wait_for_broker_view(bootstrap: str, group_id: str, topic: str,
                         members: list[GroupMember]) -> BrokerGroupView:
    """Wait until DescribeGroups shows the group Stable with exactly ``members`` (by member id)
    owning exactly the partitions their clients report; returns that view."""
    admin = group_admin(bootstrap)
    seen: list[object] = []

    def agrees() -> bool:
        # Member ids are read on the members' poll threads: compare with their latest values.
        expected = {m.member_id: m.assignment for m in members}
        view = describe_group(admin, group_id, topic)
        seen[:] = [expected, view]
        return view.state == "STABLE" and view.members == expected

    wait_until(agrees, lambda: f"DescribeGroups to agree with the clients: {seen}")
    return seen[1]  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------------
# Records and committed offsets
# ---------------------------------------------------------------------------------------------


def produce_spread(bootstrap: str, topic: str, partitions: int, count: int,
                   tag: str = "") -> dict[bytes, tuple[int, int]]:
    """Produce ``count`` keyed records, record i to partition ``i % partitions`` (so every
    partition holds the same share and a member's budget cannot outrun its partitions).
    Returns value -> (partition, offset) from the delivery reports; values are unique."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 5})
    positions: dict[bytes, tuple[int, int]] = {}
    errors: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            positions[msg.value()] = (msg.partition(), msg.offset())

    for i in range(count):
        partition = i % partitions
        value = f"{tag}p{partition}-{i:06d}".encode()
        producer.produce(topic, value, key=f"key{i % 16}".encode(), partition=partition,
                         on_delivery=on_delivery)
        producer.poll(0)
    remaining = producer.flush(WAIT_TIMEOUT_S)
    assert remaining == 0, f"produce failed: {remaining} unsent, {errors[:3]}"
    assert not errors, f"produce failed: {remaining} unsent, {errors[:3]}"
    assert len(positions) == count
    return positions


def committed_offsets(client: str, bootstrap: str, group_id: str, topic: str,
                      partitions: int) -> dict[int, int | None]:
    """The group's committed offset per partition, asked with ``client``'s ``committed()`` (an
    OffsetFetch from a consumer that does not join the group); None where nothing is committed."""
    if client == "confluent":
        from confluent_kafka import OFFSET_INVALID, Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group_id,
                             "enable.auto.commit": False})
        try:
            result = consumer.committed([TopicPartition(topic, p) for p in range(partitions)],
                                        timeout=WAIT_TIMEOUT_S)
        finally:
            consumer.close()
        assert all(tp.error is None for tp in result), [tp.error for tp in result]
        return {tp.partition: None if tp.offset == OFFSET_INVALID else tp.offset for tp in result}
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KpTopicPartition

    kp_consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group_id,
                                enable_auto_commit=False)
    try:
        return {p: kp_consumer.committed(KpTopicPartition(topic, p), timeout_ms=30_000)
                for p in range(partitions)}
    finally:
        kp_consumer.close(autocommit=False)


def assert_committed_exactly_once(members: list[GroupMember],
                                  positions: dict[bytes, tuple[int, int]]) -> list[CommitFailure]:
    """The group-wide at-least-once contract with per-record synchronous commits:

    * every produced record (``positions``: value -> (partition, offset)) has exactly one
      successful commit across ``members``, at the position it was produced at;
    * every extra delivery of a record is explained by a failed commit of that record.

    Returns the commit failures (for the test's report).
    """
    delivered: Counter[bytes] = Counter()
    committed: Counter[bytes] = Counter()
    failed: Counter[tuple[int, int]] = Counter()
    failures = [f for m in members for f in m.commit_failures()]
    for member in members:
        for d in member.delivered():
            assert positions.get(d.value) == (d.partition, d.offset), f"unexpected record {d}"
            delivered[d.value] += 1
        for d in member.committed():
            committed[d.value] += 1
    for f in failures:
        failed[(f.partition, f.offset)] += 1
    missing = sorted(set(positions) - set(committed))
    assert not missing, f"{len(missing)} records never committed, e.g. {missing[:10]}"
    doubles = sorted(v for v, n in committed.items() if n > 1)
    assert not doubles, f"{len(doubles)} records committed more than once, e.g. {doubles[:10]}"
    unexplained = sorted(
        (v, n) for v, n in delivered.items() if n != 1 + failed[positions[v]]
    )
    assert not unexplained, (
        f"deliveries not explained by failed commits (value, deliveries): {unexplained[:10]}; "
        f"commit failures: {failures[:10]}"
    )
    return failures
