"""Fault-test helpers of the cluster chaos tests (tests/chaos/test_cluster_*.py).

- ``start_cluster``: ``n`` cluster brokers on stores the test owns (a PostgreSQL from
  ``postgres_factory``, a SeaweedFS from ``seaweedfs_factory``), so the test can stop them.
- ``NumberedLoad``: one idempotent acks=all librdkafka producer writing numbered records
  (``b"k3:0000017"``) from a thread, recording the position of every acknowledged record.
- ``probe_produce``: one record through a producer that neither retries nor is idempotent, so the
  delivery report carries the broker's own answer (retriable or not) during an outage.
- ``assert_acknowledged_exactly_once``: every acknowledged record read exactly once at the
  position it was acknowledged with, in order per key, nothing read that was never sent.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from pathlib import Path

from confluent_kafka import KafkaError, Message, Producer

from tests.support.cluster import Cluster, ClusterBroker
from tests.support.records import ConsumedRecord
from tests.support.seaweedfs import SeaweedServer, clean_environ

# The Produce errors Kafka's clients retry (RetriableException subclasses in Kafka's Errors.java).
# confluent-kafka's KafkaError.retriable() is only set on errors librdkafka raises itself, never on
# a delivery report's broker error, so the probe's answer is judged by its code.
RETRIABLE_PRODUCE_ERRORS = frozenset({
    KafkaError.REQUEST_TIMED_OUT, KafkaError.KAFKA_STORAGE_ERROR, KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    KafkaError.NETWORK_EXCEPTION, KafkaError.UNKNOWN_TOPIC_OR_PART,
})
FLUSH_S = 180.0  # a bound on a hang only
PROBE_S = 60.0  # a bound on a hang only: a broker must answer a probe well within it


def start_cluster(log_dir: Path, metadata_store: str, seaweed: SeaweedServer, n: int = 3,
                  config: dict[str, str] | None = None) -> Cluster:
    """Start ``n`` brokers (node ids 1..n) on ``metadata_store`` and a fresh prefix of ``seaweed``.

    The caller kills them (``Cluster.kill_all``) when done."""
    uri = seaweed.uri(f"c-{uuid.uuid4().hex[:10]}")
    environ = clean_environ(**seaweed.env())
    brokers = [ClusterBroker(node_id, metadata_store, uri, environ, log_dir, config) for node_id in range(1, n + 1)]
    cluster = Cluster(brokers, metadata_store, uri, environ)
    try:
        for broker in brokers:
            broker.start()
    except BaseException:
        cluster.kill_all()
        raise
    return cluster


class NumberedLoad:
    """An idempotent acks=all producer thread writing ``<key>:<seq>`` records over ``keys`` keys."""

    def __init__(self, bootstrap: str, topic: str, keys: int = 12, extra_conf: dict[str, object] | None = None) -> None:
        self.topic = topic
        self.keys = keys
        self.acked: dict[bytes, tuple[int, int]] = {}
        self.failures: list[str] = []
        self.sent: list[bytes] = []
        self._errors: list[BaseException] = []
        self._stop = threading.Event()
        self._producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                   "linger.ms": 5, "message.timeout.ms": int(FLUSH_S * 1000),
                                   "topic.metadata.refresh.interval.ms": 1000, "reconnect.backoff.max.ms": 500,
                                   **(extra_conf or {})})
        self._thread = threading.Thread(target=self._run, name=f"numbered-load-{topic}", daemon=True)

    def start(self) -> NumberedLoad:
        self._thread.start()
        return self

    def _delivered(self, err: KafkaError | None, msg: Message) -> None:
        value, partition, offset = msg.value(), msg.partition(), msg.offset()
        if err is not None or value is None or partition is None or offset is None:
            self.failures.append(f"{value!r}: {err}")
        else:
            self.acked[value] = (partition, offset)

    def _run(self) -> None:
        next_seq = [0] * self.keys
        try:
            while not self._stop.is_set():
                key_index = len(self.sent) % self.keys
                key = f"k{key_index}".encode()
                value = key + b":" + f"{next_seq[key_index]:07d}".encode()
                try:
                    self._producer.produce(self.topic, value, key=key, on_delivery=self._delivered)
                except BufferError:
                    self._producer.poll(0.05)
                    continue
                next_seq[key_index] += 1
                self.sent.append(value)
                self._producer.poll(0.002)
        except BaseException as exc:  # noqa: BLE001  (reported by finish())
            self._errors.append(exc)

    def acked_count(self) -> int:
        return len(self.acked)

    def wait_for_acks(self, more_than: int, timeout_s: float) -> None:
        """Wait until more than ``more_than`` records are acknowledged (the load makes progress)."""
        deadline = time.monotonic() + timeout_s
        while len(self.acked) <= more_than:
            assert time.monotonic() < deadline, (
                f"no progress: {len(self.acked)} acknowledged after {timeout_s} s (failures: {self.failures[:3]})")
            time.sleep(0.1)

    def finish(self) -> None:
        """Stop producing, flush, and require every sent record acknowledged without a failure."""
        self._stop.set()
        self._thread.join(timeout=60)
        assert not self._thread.is_alive(), "the producing thread did not stop"
        assert not self._errors, f"producing failed: {self._errors[0]!r}"
        left = self._producer.flush(FLUSH_S)
        assert left == 0, f"{left} records not acknowledged within {FLUSH_S} s"
        assert not self.failures, f"delivery failures: {self.failures[:5]}"
        assert len(self.acked) == len(self.sent), f"{len(self.sent)} sent, {len(self.acked)} acknowledged"


def probe_producer(bootstrap: str) -> Producer:
    """A producer whose delivery report is the broker's first answer: no retries, no idempotence."""
    return Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": False,
                     "retries": 0, "linger.ms": 0, "message.timeout.ms": int(PROBE_S * 1000),
                     "request.timeout.ms": int(PROBE_S * 1000)})


def probe_produce(producer: Producer, topic: str, values: dict[int, bytes]) -> dict[int, KafkaError | None]:
    """Produce one record per partition (``{partition: value}``) at once and wait for their
    delivery reports: per partition its error, or ``None`` once acknowledged."""
    reports: dict[int, KafkaError | None] = {}

    def delivered(err: KafkaError | None, msg: Message) -> None:
        partition = msg.partition()
        reports[-1 if partition is None else partition] = err

    for partition, value in values.items():
        producer.produce(topic, value, partition=partition, on_delivery=delivered)
    left = producer.flush(PROBE_S + 10)
    assert left == 0, f"no delivery report for the probes {values} within {PROBE_S} s"
    assert set(reports) == set(values), f"delivery reports for partitions {sorted(reports)} of {sorted(values)}"
    return reports


def assert_acknowledged_exactly_once(acked: dict[bytes, tuple[int, int]], consumed: list[ConsumedRecord],
                                     may_appear_once: frozenset[bytes] = frozenset()) -> None:
    """Every acknowledged value read exactly once at its acknowledged position, each key's values in
    order within one partition (``assert_exactly_once_in_order``); besides those only ``may_appear_once``
    values (sent but never acknowledged), each at most once."""
    unacked = [r.value for r in consumed if r.value not in acked]
    twice = [v for v, n in Counter(unacked).items() if n > 1]
    assert not twice, f"unacknowledged records read more than once: {twice[:3]}"
    unknown = [v for v in unacked if v not in may_appear_once]
    assert not unknown, f"records read that were never sent: {unknown[:3]}"
    assert_exactly_once_in_order(acked, [r for r in consumed if r.value in acked])


def assert_exactly_once_in_order(acked: dict[bytes, tuple[int, int]], consumed: list[ConsumedRecord]) -> None:
    """Every acknowledged value read exactly once, at the position it was acknowledged with, each
    key's values in send order within one partition, and nothing read that was never acknowledged."""
    seen: dict[bytes, tuple[int, int]] = {}
    for record in consumed:
        assert record.value not in seen, f"{record.value!r} read twice: at {seen[record.value]} and " \
                                         f"{(record.partition, record.offset)}"
        seen[record.value] = (record.partition, record.offset)
    missing = [v for v in acked if v not in seen]
    assert not missing, f"{len(missing)} acknowledged records never read, e.g. {missing[:3]}"
    unsent = [v for v in seen if v not in acked]
    assert not unsent, f"records read that were never acknowledged: {unsent[:3]}"
    for value, position in acked.items():
        assert seen[value] == position, f"{value!r} acknowledged at {position}, read at {seen[value]}"
    by_key: dict[bytes, list[tuple[int, int, int]]] = {}
    for value, (partition, offset) in seen.items():
        key, _, seq = value.partition(b":")
        by_key.setdefault(key, []).append((partition, offset, int(seq)))
    for key, positions in by_key.items():
        assert len({p for p, _, _ in positions}) == 1, f"key {key!r} in more than one partition"
        seqs = [seq for _, _, seq in sorted(positions)]
        assert seqs == sorted(seqs), f"key {key!r} out of order in its partition"
