"""Three cluster brokers; a random one SIGKILLed and restarted every few seconds while librdkafka
idempotent acks=all producers write: every acknowledged record is read exactly once and in order.

The producers' bootstrap lists every broker, so they follow the leaders Metadata names as
brokers die and come back (a restarted broker registers again once its previous life's lease has
expired). The check reads each partition from offset 0 with ``assign()`` and requires every
acknowledged value exactly once, each key's values in send order (a key stays in one partition),
and nothing that was never sent. The default run kills for ~20 s; the soak (``slow``) for 90 s.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError, Message, Producer

from tests.support.clients import create_topic, unique_topic
from tests.support.cluster import Cluster, ClusterBroker, cluster_factory  # noqa: F401  (fixture)
from tests.support.cluster_clients import consume_all
from tests.support.records import ConsumedRecord

pytestmark = pytest.mark.chaos

PARTITIONS = 6
KEYS = 12
KILL_EVERY_S = (2.0, 4.0)
FLUSH_S = 180.0  # a bound on a hang only


def _run_chaos(cluster: Cluster, duration_s: float, seed: int) -> None:
    topic = unique_topic("cluster-chaos")
    create_topic(cluster.brokers[0].bootstrap, topic, partitions=PARTITIONS)
    rng = random.Random(seed)
    acked: dict[bytes, tuple[int, int]] = {}
    failures: list[str] = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "message.timeout.ms": int(FLUSH_S * 1000),
                         "topic.metadata.refresh.interval.ms": 1000, "reconnect.backoff.max.ms": 500})

    def delivered(err: KafkaError | None, msg: Message) -> None:
        value, partition, offset = msg.value(), msg.partition(), msg.offset()
        if err is not None or value is None or partition is None or offset is None:
            failures.append(str(err))
        else:
            acked[value] = (partition, offset)

    # Brokers are (re)started from this thread: a child started from another thread would die
    # with that thread (die_with_parent's PR_SET_PDEATHSIG follows the thread that forked it).
    stop = threading.Event()
    kills: list[int] = []
    producing_errors: list[BaseException] = []
    sent_values: list[bytes] = []

    def produce() -> None:
        next_seq = [0] * KEYS
        try:
            while not stop.is_set():
                key_index = len(sent_values) % KEYS
                key = f"k{key_index}".encode()
                value = key + b":" + f"{next_seq[key_index]:07d}".encode()
                try:
                    producer.produce(topic, value, key=key, on_delivery=delivered)
                except BufferError:
                    producer.poll(0.05)
                    continue
                next_seq[key_index] += 1
                sent_values.append(value)
                producer.poll(0.002)
        except BaseException as exc:  # noqa: BLE001  (reported by the test thread)
            producing_errors.append(exc)

    writer = threading.Thread(target=produce, name="cluster-chaos-producer", daemon=True)
    writer.start()
    try:
        end = time.monotonic() + duration_s
        while time.monotonic() < end:
            time.sleep(rng.uniform(*KILL_EVERY_S))
            victim: ClusterBroker = rng.choice(cluster.brokers)
            victim.kill()
            kills.append(victim.node_id)
            victim.start()  # same port; ready once registered again
    finally:
        stop.set()
        writer.join(timeout=120)
    sent = len(sent_values)
    assert not producing_errors, f"producing failed: {producing_errors[0]}"
    left = producer.flush(FLUSH_S)
    assert left == 0, f"{left} records not acknowledged within {FLUSH_S} s"
    assert not failures, f"delivery failures: {failures[:5]}"
    assert kills, "the chaos never killed a broker"
    assert len(acked) == sent
    consumed = consume_all(cluster.brokers[0].bootstrap, topic, PARTITIONS, sent)
    _assert_exactly_once_in_order(acked, consumed)


def _assert_exactly_once_in_order(acked: dict[bytes, tuple[int, int]], consumed: list[ConsumedRecord]) -> None:
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


def test_sigkilled_brokers_lose_and_duplicate_nothing(cluster_factory: Callable[..., Cluster]) -> None:
    _run_chaos(cluster_factory(3), duration_s=20.0, seed=1)


@pytest.mark.slow
def test_sigkilled_brokers_soak(cluster_factory: Callable[..., Cluster]) -> None:
    _run_chaos(cluster_factory(3), duration_s=90.0, seed=2)
