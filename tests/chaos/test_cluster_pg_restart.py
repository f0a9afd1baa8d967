"""Two cluster brokers while their PostgreSQL is stopped and started again under load.

librdkafka idempotent acks=all producers keep writing while PostgreSQL is down for a few
seconds: the brokers answer retriable errors (nothing can be committed), their heartbeats fail and
they register again once PostgreSQL is back; the producers' retries then go through. Every
acknowledged record is read exactly once, at the offset it was acknowledged with, in order per
key; nothing unacknowledged appears.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.chaos.test_cluster_chaos import KEYS, PARTITIONS
from tests.support.clients import create_topic, unique_topic
from tests.support.cluster import Cluster, cluster_factory  # noqa: F401  (fixture)
from tests.support.cluster_clients import consume_all
from tests.support.cluster_faults import NumberedLoad, assert_exactly_once_in_order
from tests.support.postgres import PostgresServer, create_database

pytestmark = pytest.mark.chaos

DOWN_S = 4.0


def test_postgresql_restarted_under_load_loses_and_duplicates_nothing(
        cluster_factory: Callable[..., Cluster], postgres_factory: Callable[[], PostgresServer]) -> None:
    server = postgres_factory()
    cluster = cluster_factory(2, metadata_store=server.url(create_database(server)))
    topic = unique_topic("cluster-pg-restart")
    create_topic(cluster.brokers[0].bootstrap, topic, partitions=PARTITIONS)
    load = NumberedLoad(cluster.bootstrap, topic, keys=KEYS).start()
    try:
        time.sleep(2.0)
        server.stop()
        time.sleep(DOWN_S)
        server.start()
        time.sleep(3.0)
    finally:
        load.finish()
    for broker in cluster.brokers:
        assert broker.is_alive(), f"node {broker.node_id} exited: {broker.output_tail()}"
    assert_exactly_once_in_order(load.acked, consume_all(cluster.brokers[1].bootstrap, topic, PARTITIONS, len(load.acked)))
