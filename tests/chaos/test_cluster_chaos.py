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
import time
from collections.abc import Callable

import pytest

from tests.support.clients import create_topic, unique_topic
from tests.support.cluster import Cluster, ClusterBroker, cluster_factory  # noqa: F401  (fixture)
from tests.support.cluster_clients import consume_all
from tests.support.cluster_faults import NumberedLoad, assert_exactly_once_in_order

pytestmark = pytest.mark.chaos

PARTITIONS = 6
KEYS = 12
KILL_EVERY_S = (2.0, 4.0)


def _run_chaos(cluster: Cluster, duration_s: float, seed: int) -> None:
    topic = unique_topic("cluster-chaos")
    create_topic(cluster.brokers[0].bootstrap, topic, partitions=PARTITIONS)
    rng = random.Random(seed)
    kills: list[int] = []
    load = NumberedLoad(cluster.bootstrap, topic, keys=KEYS).start()
    # Brokers are (re)started from this thread: a child started from another thread would die
    # with that thread (die_with_parent's PR_SET_PDEATHSIG follows the thread that forked it).
    try:
        end = time.monotonic() + duration_s
        while time.monotonic() < end:
            time.sleep(rng.uniform(*KILL_EVERY_S))
            victim: ClusterBroker = rng.choice(cluster.brokers)
            victim.kill()
            kills.append(victim.node_id)
            victim.start()  # same port; ready once registered again
    finally:
        load.finish()
    assert kills, "the chaos never killed a broker"
    consumed = consume_all(cluster.brokers[0].bootstrap, topic, PARTITIONS, len(load.sent))
    assert_exactly_once_in_order(load.acked, consumed)


def test_sigkilled_brokers_lose_and_duplicate_nothing(cluster_factory: Callable[..., Cluster]) -> None:
    _run_chaos(cluster_factory(3), duration_s=20.0, seed=1)


@pytest.mark.slow
def test_sigkilled_brokers_soak(cluster_factory: Callable[..., Cluster]) -> None:
    _run_chaos(cluster_factory(3), duration_s=90.0, seed=2)
