"""Cluster mode's leader per partition (broker/cluster_leaders.py): spread over the live brokers,
the same answer whatever order they are listed in, and only a departed broker's partitions move."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest

from oncestream.broker.cluster_leaders import leader_of

TOPICS = [uuid.UUID(int=n * 7919 + 1) for n in range(20)]
PARTITIONS = [(topic, p) for topic in TOPICS for p in range(30)]  # 600 partitions


def test_partitions_spread_over_every_live_broker() -> None:
    counts = Counter(leader_of(topic, p, [1, 2, 3]) for topic, p in PARTITIONS)
    assert set(counts) == {1, 2, 3}
    # 200 expected each; a bound far outside chance (binomial sd ~11.5) but catching a skew.
    assert all(140 <= count <= 260 for count in counts.values()), counts


def test_same_answer_whatever_the_order_of_the_brokers() -> None:
    for topic, p in PARTITIONS[:100]:
        assert leader_of(topic, p, [3, 1, 2]) == leader_of(topic, p, [1, 2, 3]) == leader_of(topic, p, [2, 3, 1])


def test_only_the_departed_brokers_partitions_move() -> None:
    before = {tp: leader_of(*tp, [1, 2, 3]) for tp in PARTITIONS}
    after = {tp: leader_of(*tp, [1, 3]) for tp in PARTITIONS}
    moved = {tp for tp in PARTITIONS if before[tp] != after[tp]}
    assert moved == {tp for tp in PARTITIONS if before[tp] == 2}


def test_no_live_broker_is_an_error() -> None:
    with pytest.raises(ValueError, match="no live broker"):
        leader_of(TOPICS[0], 0, [])
