"""Share groups (KIP-932) on a cluster of three ``oncestream broker`` processes, librdkafka's
ShareConsumer (confluent-kafka) as the client.

Each share-partition is owned by the broker Metadata names leader of its topic-partition, its
state in PostgreSQL under a lease (broker/cluster_shares.py). Two share consumers, bootstrapped
from different brokers, read a topic of six partitions (so every broker owns some); the leader of
partition 0 is SIGKILLed a third of the way, and as many records again are produced after it, so
its share-partitions must be taken over. Every record arrives, every record is acknowledged
(ACCEPT confirmed by the broker) exactly once in total, none comes back after its ACCEPT was
confirmed, and a record that comes again was in flight (acquired, not acknowledged) when it came
first.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient

from tests.support.clients import create_topic, unique_topic
from tests.support.cluster import Cluster, cluster_factory  # noqa: F401  (fixture)

pytestmark = pytest.mark.interop

PARTITIONS = 6
CAP_S = 120.0  # a bound on a hang only (takeover waits for the dead broker's session to end)
WARMUP = b"warmup"

Where = tuple[int, int]  # partition, offset


def _consumer(bootstrap: str, group: str) -> Any:
    return confluent_kafka.ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                                          "share.acknowledgement.mode": "explicit"})


def _accept_all(consumer: Any, topic: str) -> tuple[list[Any], set[int], set[int]]:
    """One poll: every record acknowledged (ACCEPT) and committed; the records, and the
    partitions whose acknowledgements the broker confirmed and those it refused."""
    messages = []
    for m in consumer.poll(0.5):
        if m.error() is None:
            consumer.acknowledge(m)
            messages.append(m)
    if not messages:
        return [], set(), set()
    result = consumer.commit_sync(30)
    confirmed = {tp.partition for tp, error in result.items() if tp.topic == topic and error is None}
    refused = {tp.partition for tp, error in result.items() if tp.topic == topic and error is not None}
    return messages, confirmed, refused


def test_share_consumers_on_different_brokers_ride_out_a_broker_sigkill(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(3)
    topic, group = unique_topic("cluster-share"), unique_topic("cluster-share-group")
    create_topic(cluster.broker(1).bootstrap, topic, partitions=PARTITIONS)
    consumers = [_consumer(cluster.broker(1).bootstrap, group), _consumer(cluster.broker(2).bootstrap, group)]
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.broker(1).bootstrap, "linger.ms": 5})
    try:
        for consumer in consumers:
            consumer.subscribe([topic])
        # share.auto.offset.reset is latest: warm-ups until the group reads every partition.
        waiting = set(range(PARTITIONS))
        deadline = time.monotonic() + CAP_S
        while waiting:
            assert time.monotonic() < deadline, f"partitions {sorted(waiting)} never read by the group"
            for partition in waiting:
                producer.produce(topic, WARMUP, partition=partition)
            assert producer.flush(30) == 0
            for consumer in consumers:
                messages, _confirmed, _refused = _accept_all(consumer, topic)
                waiting -= {m.partition() for m in messages}

        values = {b"v%04d" % i: i % PARTITIONS for i in range(600)}
        before, after = list(values)[:300], list(values)[300:]  # the second half after the SIGKILL
        for value in before:
            producer.produce(topic, value, partition=values[value])
        assert producer.flush(30) == 0

        accepted: Counter[bytes] = Counter()  # value -> ACCEPTs the broker confirmed
        delivered: Counter[bytes] = Counter()
        unconfirmed: set[bytes] = set()  # delivered, ACCEPT refused (its owner died): may come again
        confirmed_at: set[Where] = set()
        killed = False
        deadline = time.monotonic() + CAP_S
        while set(values) - set(accepted):
            missing = set(values) - set(accepted)
            assert time.monotonic() < deadline, f"{len(missing)} records never acknowledged, e.g. {sorted(missing)[:5]}"
            for consumer in consumers:
                messages, confirmed, refused = _accept_all(consumer, topic)
                for m in messages:
                    if m.value() == WARMUP:
                        continue
                    where = (m.partition(), m.offset())
                    assert where not in confirmed_at, f"{where} delivered again after its ACCEPT was confirmed"
                    if delivered[m.value()]:
                        assert m.value() in unconfirmed, f"{m.value()!r} delivered twice, never in flight"
                    delivered[m.value()] += 1
                    if m.partition() in confirmed:
                        accepted[m.value()] += 1
                        confirmed_at.add(where)
                        unconfirmed.discard(m.value())
                    elif m.partition() in refused:
                        unconfirmed.add(m.value())
            if not killed and len(accepted) >= len(before) // 3:
                # SIGKILL the leader of partition 0 (it owns that share-partition at least): its
                # share-partitions move once its session ends.
                metadata = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(topic, timeout=30)
                cluster.broker(metadata.topics[topic].partitions[0].leader).kill()
                killed = True
                # Records of every partition after the kill: the dead broker's share-partitions
                # must be taken over for them to be delivered.
                for value in after:
                    producer.produce(topic, value, partition=values[value])
                assert producer.flush(30) == 0
        assert killed
        assert set(accepted) == set(values)
        assert all(count == 1 for count in accepted.values()), [v for v, c in accepted.items() if c != 1]
    finally:
        for consumer in consumers:
            consumer.close()
