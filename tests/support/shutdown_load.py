"""Client load for the shutdown chaos tests: librdkafka clients doing everything at once.

``ClientLoad`` runs, each on its own thread until ``stop()``:

- a transactional producer that commits some transactions and leaves others open for a while
  (flushed first, so their records sit in the log behind an open transaction);
- an idempotent producer (acks=all);
- a keyed producer overwriting a few keys of a compacted topic with small segments, so the
  broker's log cleaner keeps running;
- classic group members (``group.protocol=classic``) subscribed to the idempotent topic;
- long-poll consumers (``fetch.min.bytes`` far above what arrives, so every fetch waits out
  ``fetch.wait.max.ms``, woken again and again by appends to the topic the idempotent producer
  writes: the wake-up that used to race the shutdown's cancellation).

Every acknowledged value (delivery report without error; for the transactional producer, the
values of a transaction whose commit returned) is remembered per topic, so a test can check that
the broker serves each one exactly once after a restart. The clients survive the broker going
away and coming back; ``stop()`` ends them without waiting for a broker that is gone.
"""

from __future__ import annotations

import itertools
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from tests.support.clients import create_topic, unique_topic

# librdkafka reconnects quickly, so a restarted broker is noticed without long pauses.
_FAST_RECONNECT: dict[str, object] = {
    "log_level": 0,  # no connection-refused lines while the broker restarts
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 500,
    "retry.backoff.ms": 50,
    "retry.backoff.max.ms": 500,
}
_JOIN_TIMEOUT_S = 30.0
_OP_TIMEOUT_S = 5.0

# Broker properties that make the cleaner run often on small segments.
CLEANER_PROPS = {
    "log.cleaner.backoff.ms": "100",
    "log.cleaner.min.cleanable.ratio": "0.01",
}


@dataclass
class LoadTopics:
    """The topics one ``ClientLoad`` writes and reads (created once, reused across restarts)."""

    plain: str
    txn: str
    compacted: str
    idle: str
    partitions: int = 3

    @classmethod
    def create(cls, bootstrap: str) -> LoadTopics:
        topics = cls(unique_topic("sd-plain"), unique_topic("sd-txn"), unique_topic("sd-compact"),
                     unique_topic("sd-idle"))
        for name in (topics.plain, topics.txn, topics.idle):
            create_topic(bootstrap, name, partitions=topics.partitions)
        create_topic(bootstrap, topics.compacted, partitions=1,
                     config={"cleanup.policy": "compact", "segment.bytes": "4096",
                             "min.cleanable.dirty.ratio": "0.01"})
        return topics


@dataclass
class Acknowledged:
    """Values the broker acknowledged, per topic (thread-safe appends)."""

    by_topic: dict[str, list[bytes]] = field(default_factory=dict)
    # Compacted topics: each key's latest acknowledged (offset, value).
    latest_by_key: dict[bytes, tuple[int, bytes]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, topic: str, values: list[bytes]) -> None:
        with self.lock:
            self.by_topic.setdefault(topic, []).extend(values)

    def add_keyed(self, key: bytes, offset: int, value: bytes) -> None:
        with self.lock:
            previous = self.latest_by_key.get(key)
            if previous is None or previous[0] < offset:
                self.latest_by_key[key] = (offset, value)

    def count(self) -> int:
        """Acknowledged values so far (every topic)."""
        with self.lock:
            return sum(len(values) for values in self.by_topic.values()) + len(self.latest_by_key)


class ClientLoad:
    """The load described in the module docstring, against ``bootstrap``; ``tag`` makes values
    (and transactional ids, group ids) unique per load."""

    def __init__(self, bootstrap: str, topics: LoadTopics, acked: Acknowledged, tag: str, *,
                 group_members: int = 2, long_polls: int = 3) -> None:
        self.bootstrap = bootstrap
        self.topics = topics
        self.acked = acked
        self.tag = tag
        self.group_id = f"sd-group-{tag}"
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._workers: list[Callable[[], None]] = [
            self._transactional, self._idempotent, self._compacted,
            *[self._long_poll] * long_polls, *[self._group_member] * group_members,
        ]

    def start(self) -> ClientLoad:
        for number, work in enumerate(self._workers):
            thread = threading.Thread(target=self._guard, args=(work,), name=f"load-{self.tag}-{number}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        """End every client (without waiting for a broker that is gone) and join the threads."""
        self._stop.set()
        for thread in self._threads:
            thread.join(_JOIN_TIMEOUT_S)
        stuck = [thread.name for thread in self._threads if thread.is_alive()]
        if stuck:
            raise AssertionError(f"load threads did not end within {_JOIN_TIMEOUT_S:.0f} s: {stuck}")

    def _guard(self, work: Callable[[], None]) -> None:
        try:
            work()
        except Exception as exc:  # noqa: BLE001  # reported to the test, never lost in a thread
            self.acked.errors.append(f"{work.__name__}: {type(exc).__name__}: {exc}")

    def _producer(self, **conf: object) -> Producer:
        return Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5, **_FAST_RECONNECT, **conf})

    # -- producers ---------------------------------------------------------------------------
    def _transactional(self) -> None:
        topic = self.topics.txn
        producer = self._producer(**{"transactional.id": f"sd-txn-{self.tag}", "transaction.timeout.ms": 10_000})
        try:
            while not self._stop.is_set():
                try:
                    producer.init_transactions(_OP_TIMEOUT_S)
                    break
                except KafkaException:
                    continue  # the broker is restarting: try again
            for number in itertools.count():
                if self._stop.is_set():
                    return
                values = [f"{self.tag}-txn-{number}-{i}".encode() for i in range(20)]
                try:
                    producer.begin_transaction()
                    for i, value in enumerate(values):
                        producer.produce(topic, value, partition=i % self.topics.partitions)
                    if producer.flush(_OP_TIMEOUT_S) != 0:
                        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "flush timed out"))
                    if number % 3 == 2:  # an open transaction while the broker may be told to stop
                        self._stop.wait(0.5)
                    producer.commit_transaction(_OP_TIMEOUT_S)
                except KafkaException as exc:
                    error = exc.args[0]
                    if error.fatal():
                        return  # fenced or the like: the broker ended it; nothing more to check
                    if error.txn_requires_abort():
                        try:
                            producer.abort_transaction(_OP_TIMEOUT_S)
                        except KafkaException:
                            pass  # still unreachable: the coordinator aborts it on its timeout
                    continue
                self.acked.add(topic, values)
        finally:
            producer.purge()
            producer.flush(0)

    def _delivery(self, topic: str) -> Callable[[KafkaError | None, object], None]:
        def on_delivery(err: KafkaError | None, msg) -> None:
            if err is None:
                self.acked.add(topic, [msg.value()])

        return on_delivery

    def _idempotent(self) -> None:
        producer = self._producer(**{"enable.idempotence": True, "acks": "all", "message.timeout.ms": 60_000})
        self._produce_until_stopped(producer, self.topics.plain, lambda n: (None, f"{self.tag}-plain-{n}".encode()),
                                    self._delivery(self.topics.plain))

    def _compacted(self) -> None:
        producer = self._producer(**{"enable.idempotence": True, "acks": "all", "batch.num.messages": 20})

        def on_delivery(err: KafkaError | None, msg) -> None:
            if err is None:
                self.acked.add_keyed(msg.key(), msg.offset(), msg.value())

        def record(number: int) -> tuple[bytes | None, bytes]:
            return f"{self.tag}-key-{number % 16}".encode(), f"{self.tag}-compact-{number}".encode() * 8

        self._produce_until_stopped(producer, self.topics.compacted, record, on_delivery)

    def _produce_until_stopped(self, producer: Producer, topic: str,
                               record: Callable[[int], tuple[bytes | None, bytes]],
                               on_delivery: Callable[[KafkaError | None, object], None]) -> None:
        """Produce ``record(n)`` (key, value) for n = 0, 1, ... until ``stop()``."""
        try:
            for number in itertools.count():
                if self._stop.is_set():
                    return
                key, value = record(number)
                try:
                    producer.produce(topic, value, key=key, on_delivery=on_delivery)
                except BufferError:
                    producer.poll(0.05)
                producer.poll(0.002)
        finally:
            producer.purge()
            producer.flush(0)

    # -- consumers ---------------------------------------------------------------------------
    def _consumer(self, group_id: str, **conf: object) -> Consumer:
        return Consumer({"bootstrap.servers": self.bootstrap, "group.id": group_id, "group.protocol": "classic",
                         "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                         "heartbeat.interval.ms": 500, **_FAST_RECONNECT, **conf})

    def _group_member(self) -> None:
        consumer = self._consumer(self.group_id, **{"enable.auto.commit": True, "auto.commit.interval.ms": 200,
                                                    "isolation.level": "read_committed"})
        consumer.subscribe([self.topics.plain, self.topics.txn])
        self._poll_until_stopped(consumer, 0.2)

    def _long_poll(self) -> None:
        consumer = self._consumer(f"sd-idle-{self.tag}", **{"fetch.wait.max.ms": 5000,
                                                             "fetch.min.bytes": 1_000_000})
        consumer.subscribe([self.topics.idle, self.topics.plain])
        self._poll_until_stopped(consumer, 1.0)

    def _poll_until_stopped(self, consumer: Consumer, timeout_s: float) -> None:
        try:
            while not self._stop.is_set():
                consumer.poll(timeout_s)  # errors (broker gone) come back as messages: ignored
        finally:
            # close() leaves the group: bounded by librdkafka's own timeouts when the broker is gone
            consumer.close()


def wait_for_exit(process: subprocess.Popen[bytes], timeout_s: float, what: str,
                  output_tail: Callable[[], str], kill: Callable[[], object]) -> int:
    """``process``'s exit status once it exits; if it still runs after ``timeout_s``, ``kill()``
    it and fail with ``output_tail()`` (read before the kill)."""
    try:
        return process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        tail = output_tail()
        kill()
        raise AssertionError(f"{what} still runs {timeout_s:.0f} s after SIGTERM:\n{tail}") from None


def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll ``predicate`` until true; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.05)
