"""The schemas topic: reading it into the state (every instance) and writing it (the primary).

``TopicReader`` is a thread that reads the single partition of the topic from the beginning with
``isolation.level=read_committed`` and applies each record to the ``RegistryState``; its
``position`` is the next offset it will apply, and ``wait_for(offset)`` returns once the record at
``offset`` (and all before it) is applied.

``TopicWriter`` is the primary's transactional producer. Its ``transactional.id`` is the same
for every instance of a registry group, so a new primary's ``init_transactions`` fences the one
before it (a primary that lost its membership but does not know it yet cannot write any more) and
aborts whatever it left open. Every append is one transaction; it is acknowledged only after the
reader has applied it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from oncestream.client import OFFSET_BEGINNING, Admin, Consumer, KafkaError, KafkaException, NewTopic, Producer, TopicPartition
from oncestream.schema_registry import errors, records
from oncestream.schema_registry.state import RegistryState

log = logging.getLogger(__name__)

_POLL_S = 0.2
# Kafka's codes for "already exists" and fencing, as our client reports them.
_TOPIC_ALREADY_EXISTS = 36


def ensure_topic(client_conf: Mapping[str, Any], topic: str, replication_factor: int | None,
                 timeout_s: float) -> None:
    """Create ``topic`` (one partition, ``cleanup.policy=compact``) unless it exists, and check
    that an existing one is compacted; the replication factor defaults to min(3, brokers)."""
    admin = Admin(dict(client_conf))
    try:
        if replication_factor is None:
            replication_factor = max(1, min(3, len(admin.describe_cluster(timeout=timeout_s).nodes)))
        result = admin.create_topics([NewTopic(topic, 1, replication_factor, {"cleanup.policy": "compact"})],
                                     timeout=timeout_s)
        error = result.get(topic)
        if error is not None and error.code() != _TOPIC_ALREADY_EXISTS:
            raise errors.store_error(f"creating the topic {topic}: {error}")
        # An existing topic must be compacted: under delete retention the schemas would expire.
        policy = admin.describe_configs([topic], timeout=timeout_s).get(topic, {}).get("cleanup.policy") or ""
        if "compact" not in policy.split(","):
            raise errors.store_error(f"the topic {topic} has cleanup.policy={policy or 'delete'}; the schemas topic "
                                     "must be compacted (cleanup.policy=compact)")
    finally:
        admin.close()


class TopicReader:
    """Applies the topic's records to ``state`` on a thread of its own."""

    def __init__(self, client_conf: Mapping[str, Any], topic: str, state: RegistryState) -> None:
        conf = dict(client_conf)
        conf.update({"enable.auto.commit": False, "isolation.level": "read_committed",
                     "auto.offset.reset": "earliest"})
        conf.pop("group.id", None)
        self.topic = topic
        self.state = state
        self._consumer = Consumer(conf)
        self._position = 0
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="schema-registry-reader", daemon=True)
        self.bad_records = 0

    @property
    def position(self) -> int:
        with self._changed:
            return self._position

    def start(self) -> None:
        self._consumer.assign([TopicPartition(self.topic, 0, OFFSET_BEGINNING)])
        self._thread.start()

    def end_offset(self, timeout_s: float) -> int:
        """The topic's current end (high watermark)."""
        return self._consumer.get_watermark_offsets(TopicPartition(self.topic, 0), timeout=timeout_s)[1]

    def wait_for(self, offset: int, timeout_s: float) -> bool:
        """True once every record up to and including ``offset`` is applied (False on timeout)."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while self._position <= offset:
                left = deadline - time.monotonic()
                if left <= 0 or self._stop.is_set():
                    return False
                self._changed.wait(min(left, _POLL_S))
            return True

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                batch = self._consumer.consume(500, timeout=_POLL_S)
            except KafkaException as exc:
                log.warning("schema registry: reading %s: %s", self.topic, exc)
                self._stop.wait(1.0)
                continue
            for message in batch:
                if message.error() is not None:
                    log.warning("schema registry: reading %s: %s", self.topic, message.error())
                    continue
                try:
                    self.state.apply(records.decode(message.key(), message.value()))
                except (records.RecordFormatError, KeyError, ValueError, TypeError) as exc:
                    self.bad_records += 1
                    log.warning("schema registry: skipping an unreadable record at offset %d: %s",
                                message.offset(), exc)
            try:
                position = self._consumer.position([TopicPartition(self.topic, 0)])[0].offset
            except KafkaException:
                position = -1
            with self._changed:
                if batch:
                    self._position = max(self._position, batch[-1].offset() + 1)
                if position > self._position:  # past transaction markers too
                    self._position = position
                self._changed.notify_all()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5.0)
        self._consumer.close()


class TopicWriter:
    """The primary's transactional producer (one transaction per append)."""

    def __init__(self, client_conf: Mapping[str, Any], topic: str, transactional_id: str,
                 reader: TopicReader, *, timeout_s: float) -> None:
        conf = dict(client_conf)
        conf.update({"transactional.id": transactional_id, "enable.idempotence": True, "acks": "all",
                     "transaction.timeout.ms": max(int(timeout_s * 1000), 10_000)})
        for consumer_only in ("group.id", "auto.offset.reset", "isolation.level", "enable.auto.commit"):
            conf.pop(consumer_only, None)
        self.topic = topic
        self.reader = reader
        self.timeout_s = timeout_s
        self._producer = Producer(conf)
        self._lock = threading.Lock()
        self.fenced = False

    def start(self) -> None:
        """Fence earlier primaries, then write a NOOP and read it back: from then on the state
        holds everything written before this primary."""
        self._producer.init_transactions(self.timeout_s)
        self.append([records.Record(records.noop_key(), None)])

    def append(self, batch: list[records.Record]) -> None:
        """Write ``batch`` in one transaction and return once the reader applied it."""
        with self._lock:
            if self.fenced:
                raise errors.store_error("this instance is no longer the primary (fenced)")
            offsets: list[int] = []
            failures: list[str] = []

            def delivered(err: Any, msg: Any) -> None:
                if err is not None:
                    failures.append(str(err))
                else:
                    offsets.append(msg.offset())

            try:
                self._producer.begin_transaction()
                for record in batch:
                    key, value = record.encode()
                    self._producer.produce(self.topic, value=value, key=key, partition=0, on_delivery=delivered)
                self._producer.commit_transaction(self.timeout_s)
            except KafkaException as exc:
                self._after_failure(exc)
                raise errors.store_error(f"writing to {self.topic}: {exc}") from exc
            if failures or not offsets:
                raise errors.store_error(f"writing to {self.topic}: {'; '.join(failures) or 'no acknowledgement'}")
        if not self.reader.wait_for(max(offsets), self.timeout_s):
            raise errors.operation_timeout(f"the write at offset {max(offsets)} was not read back within "
                                           f"{self.timeout_s:.0f} s")

    def _after_failure(self, exc: KafkaException) -> None:
        error = exc.args[0] if exc.args else None
        if isinstance(error, KafkaError) and error.fatal():
            self.fenced = True
            return
        try:
            self._producer.abort_transaction(self.timeout_s)
        except KafkaException:
            self.fenced = True

    def close(self) -> None:
        self._producer.close(2.0)
