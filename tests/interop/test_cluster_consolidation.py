"""Consolidation as a background loop of every cluster broker (docs/cluster-consolidation.md).

Three ``oncestream broker`` processes; librdkafka producers write many small batches (one flush
per round, so every round is its own produce object) while consolidation cannot run yet (its
interval an hour). ``oncestream cluster status`` shows the lag (every batch unconsolidated) and
the produce objects; a consumer reads every record exactly once. Then the brokers are restarted
with a short consolidation interval: the lag that ``cluster status`` shows falls to zero, the
live objects become fewer (and are consolidated segments), the swapped-out produce objects are
deleted from the object store, and a consumer again reads every record exactly once.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable

import pytest

from oncestream.broker_process import oncestream_command
from tests.support.clients import CLIENT_TIMEOUT_S, create_topic, unique_topic
from tests.support.cluster import Cluster, cluster_factory  # noqa: F401  (fixture)
from tests.support.cluster_clients import consume_all, produce_all
from tests.support.records import SentRecord, assert_exactly_once_in_key_order, keyed_records

# With the slow runs: tests/cluster/test_consolidation*.py show consolidation's rules in the default
# run against the real PostgreSQL and SeaweedFS; this one adds three broker processes restarted.
pytestmark = [pytest.mark.interop, pytest.mark.slow]

WAIT_S = 120.0  # a bound on a hang only
PARTITIONS = 3
ROUNDS = 8  # produce rounds per broker, each flushed: at least one produce object each

_LAG = re.compile(r"^consolidation lag: (\d+) batches in (\d+) partitions$")
_LIVE = re.compile(r"^objects live: (\d+) \((\d+) bytes, (\d+) consolidated\)$")


def _status(cluster: Cluster) -> tuple[int, int, int]:
    """(unconsolidated batches, live objects, of them consolidated) as ``cluster status`` prints them."""
    done = subprocess.run([*oncestream_command(), "cluster", "status", "--metadata-store", cluster.metadata_store],
                          capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    lag = live = None
    for line in done.stdout.splitlines():
        if (found := _LAG.match(line)) is not None:
            lag = int(found.group(1))
        if (found := _LIVE.match(line)) is not None:
            live = (int(found.group(1)), int(found.group(3)))
    assert lag is not None, done.stdout
    assert live is not None, done.stdout
    return lag, live[0], live[1]


def test_consolidation_merges_small_objects_and_readers_see_every_record_once(
        cluster_factory: Callable[..., Cluster]) -> None:
    no_rounds_yet = {"diskless.consolidation.interval.ms": "3600000",
                     "diskless.consolidation.min.batches": "2",
                     "diskless.object.delete.grace.ms": "0", "diskless.gc.interval.ms": "200",
                     "diskless.append.commit.interval.ms": "20"}
    cluster = cluster_factory(3, no_rounds_yet)
    topic = unique_topic("cluster-consolidation")
    create_topic(cluster.brokers[0].bootstrap, topic, partitions=PARTITIONS)
    sent: list[SentRecord] = []
    for round_no in range(ROUNDS):
        for i, broker in enumerate(cluster.brokers):
            records = keyed_records(12, 4, tag=f"r{round_no}b{i}-", seed=round_no * 10 + i)
            produce_all(broker.bootstrap, topic, records)
            sent += records
    assert_exactly_once_in_key_order(sent, consume_all(cluster.brokers[1].bootstrap, topic, PARTITIONS, len(sent)))
    lag_before, live_before, consolidated_before = _status(cluster)
    assert consolidated_before == 0
    assert live_before >= ROUNDS * len(cluster.brokers), f"{live_before} produce objects for {ROUNDS} rounds of 3"
    assert lag_before >= live_before, f"every batch is unconsolidated: lag {lag_before}, objects {live_before}"
    store = cluster.object_store()
    keys_before = len(store.list(""))

    for broker in cluster.brokers:  # consolidation rounds every 300 ms from now on
        broker.config["diskless.consolidation.interval.ms"] = "300"
        broker.restart()
    lags = [lag_before]
    deadline = time.monotonic() + WAIT_S
    while True:
        lag, live, consolidated = _status(cluster)
        lags.append(lag)
        if lag == 0 and live == consolidated:
            break
        assert time.monotonic() < deadline, f"consolidation lag {lags[-5:]}, live {live} ({consolidated} consolidated)"
        time.sleep(0.3)
    assert max(lags[1:]) <= lag_before, lags  # nothing produced meanwhile: the lag only falls
    assert 0 < live <= PARTITIONS < live_before, f"one consolidated object per partition, not {live}"
    deadline = time.monotonic() + WAIT_S
    while (keys := len(store.list(""))) > live:  # the swapped-out produce objects are collected
        assert time.monotonic() < deadline, f"{keys} objects in the store ({keys_before} before), {live} live"
        time.sleep(0.2)
    for broker in (cluster.brokers[0], cluster.brokers[2]):
        assert_exactly_once_in_key_order(sent, consume_all(broker.bootstrap, topic, PARTITIONS, len(sent)))
