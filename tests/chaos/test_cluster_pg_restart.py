"""Two cluster brokers while their PostgreSQL is stopped and started again under load.

librdkafka idempotent acks=all producers keep writing while PostgreSQL is down for a few
seconds: the brokers answer retriable errors (nothing can be committed), their heartbeats fail and
they register again once PostgreSQL is back; the producers' retries then go through. Every
acknowledged record is read exactly once, at the offset it was acknowledged with, in order per
key; nothing unacknowledged appears.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError, Message, Producer

from tests.chaos.test_cluster_chaos import KEYS, PARTITIONS, _assert_exactly_once_in_order
from tests.support.clients import create_topic, unique_topic
from tests.support.cluster import Cluster, cluster_factory  # noqa: F401  (fixture)
from tests.support.cluster_clients import consume_all
from tests.support.postgres import PostgresServer, create_database

pytestmark = pytest.mark.chaos

DOWN_S = 4.0
FLUSH_S = 180.0  # a bound on a hang only


def test_postgresql_restarted_under_load_loses_and_duplicates_nothing(
        cluster_factory: Callable[..., Cluster], postgres_factory: Callable[[], PostgresServer]) -> None:
    server = postgres_factory()
    cluster = cluster_factory(2, metadata_store=server.url(create_database(server)))
    topic = unique_topic("cluster-pg-restart")
    create_topic(cluster.brokers[0].bootstrap, topic, partitions=PARTITIONS)
    acked: dict[bytes, tuple[int, int]] = {}
    failures: list[str] = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "message.timeout.ms": int(FLUSH_S * 1000)})

    def delivered(err: KafkaError | None, msg: Message) -> None:
        value, partition, offset = msg.value(), msg.partition(), msg.offset()
        if err is not None or value is None or partition is None or offset is None:
            failures.append(str(err))
        else:
            acked[value] = (partition, offset)

    stop = threading.Event()
    sent_values: list[bytes] = []

    def produce() -> None:
        next_seq = [0] * KEYS
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
            producer.poll(0.005)

    writer = threading.Thread(target=produce, name="pg-restart-producer", daemon=True)
    writer.start()
    try:
        time.sleep(2.0)
        server.stop()
        time.sleep(DOWN_S)
        server.start()
        time.sleep(3.0)
    finally:
        stop.set()
        writer.join(timeout=60)
    left = producer.flush(FLUSH_S)
    assert left == 0, f"{left} records not acknowledged within {FLUSH_S} s"
    assert not failures, f"delivery failures: {failures[:5]}"
    assert len(acked) == len(sent_values)
    for broker in cluster.brokers:
        assert broker.is_alive(), f"node {broker.node_id} exited: {broker.output_tail()}"
    _assert_exactly_once_in_order(acked, consume_all(cluster.brokers[1].bootstrap, topic, PARTITIONS, len(acked)))
