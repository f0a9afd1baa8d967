"""tests/support/cluster_kind.py's ``SharedClusters``: the cluster kind's suites share one running
cluster per effective broker config, keep a bounded number of idle ones, never end a cluster the
running module still uses, and replace one a test left with a dead broker. Driven with stand-in
clusters (the real ones run in ``make test-cluster``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tests.support.cluster_kind import CLUSTER_KIND_CONFIG, ClusterUnderTest, SharedClusters


class _StandIn(ClusterUnderTest):
    """A cluster with no brokers that records its config and whether it was killed."""

    def __init__(self, config: Mapping[str, str] | None) -> None:
        super().__init__([])
        self.config = dict(config or {})
        self.alive = True

    def is_alive(self) -> bool:
        return self.alive

    def kill(self) -> None:
        self.alive = False


def _clusters(tmp_path: Path, capacity: int) -> tuple[SharedClusters, list[_StandIn]]:
    started: list[_StandIn] = []

    def start(config: Mapping[str, str] | None, log_dir: Path) -> ClusterUnderTest:
        started.append(_StandIn(config))
        return started[-1]

    return SharedClusters(start, tmp_path, capacity=capacity), started


def test_suites_of_one_effective_config_share_a_cluster(tmp_path) -> None:
    clusters, started = _clusters(tmp_path, capacity=2)
    first = clusters.acquire(None)
    clusters.release(first)
    assert clusters.acquire({}) is first
    clusters.release(first)
    assert clusters.acquire(dict(CLUSTER_KIND_CONFIG)) is first, "the kind's own defaults change nothing"
    clusters.release(first)
    other = clusters.acquire({"group.initial.rebalance.delay.ms": "0"})
    assert other is not first
    assert (len(started), clusters.started, clusters.reused) == (2, 2, 2)


def test_the_least_recently_used_idle_cluster_is_killed_past_the_capacity(tmp_path) -> None:
    clusters, started = _clusters(tmp_path, capacity=2)
    for n in (0, 1, 0):  # the second "0" is served by the running cluster: now "1" is the least recently used
        clusters.release(clusters.acquire({"k": str(n)}))
    clusters.release(clusters.acquire({"k": "2"}))
    assert [(c.config["k"], c.alive) for c in started] == [("0", True), ("1", False), ("2", True)]
    clusters.close()
    assert not any(c.alive for c in started)


def test_a_cluster_in_use_is_not_killed_to_make_room(tmp_path) -> None:
    clusters, started = _clusters(tmp_path, capacity=1)
    held = clusters.acquire({"k": "a"})
    second = clusters.acquire({"k": "b"})  # the same module asks for another config
    assert held.is_alive()
    assert second.is_alive()
    clusters.release(held)
    clusters.release(second)
    assert [c.alive for c in started] == [False, True], "back within the capacity once released"


def test_a_cluster_left_with_a_dead_broker_is_replaced(tmp_path) -> None:
    clusters, started = _clusters(tmp_path, capacity=2)
    first = clusters.acquire(None)
    clusters.release(first)
    started[0].alive = False  # a test stopped the brokers and did not start them again
    again = clusters.acquire(None)
    assert again is not first
    assert again.is_alive()
    assert clusters.reused == 0
