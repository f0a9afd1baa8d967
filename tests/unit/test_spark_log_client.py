"""The Spark connector's protocol client against a multi-broker cluster, with a fake cluster seam.

KIP-664: ListTransactions answers only for the transaction coordinators hosted by the broker that
is asked, so the sink's leftover resolution must ask every broker of the cluster or it would miss
prepared transactions whose coordinator lives elsewhere. ``LogClient.list_transactions`` goes
through the client's admin (``oncestream.client.admin.admin``); the fake answers at ``Cluster``'s
network edge (``any_connection``, ``refresh``, ``send``), so everything above it is real.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from kio.schema.errors import ErrorCode

from oncestream.client.common.cluster import Cluster
from oncestream.protocol.api_keys import LIST_TRANSACTIONS, METADATA
from oncestream.spark.log_client import LogClient


class FakeCluster:
    """Three brokers; each answers ListTransactions with its own transactions."""

    def __init__(self, transactions: dict[int, list[tuple[str, int, str]]], versions: dict[int, tuple[int, int]]):
        self.transactions = transactions
        self.versions = versions
        self.asked: list[int] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        fake = self

        async def any_connection(self: Cluster) -> SimpleNamespace:
            return SimpleNamespace(broker_versions=fake.versions)

        async def refresh(self: Cluster, topics=None, *, all_topics: bool = False) -> None:
            self.nodes.update({n: ("127.0.0.1", 9000 + n) for n in fake.transactions})

        async def send(self: Cluster, node_id, api_key, make, **kwargs):
            assert api_key == LIST_TRANSACTIONS
            fake.asked.append(node_id)
            return SimpleNamespace(error_code=ErrorCode.none, transaction_states=[
                SimpleNamespace(transactional_id=t, producer_id=pid, transaction_state=state)
                for t, pid, state in fake.transactions[node_id]])

        monkeypatch.setattr(Cluster, "any_connection", any_connection)
        monkeypatch.setattr(Cluster, "refresh", refresh)
        monkeypatch.setattr(Cluster, "send", send)


def test_kip664_list_transactions_asks_every_broker_of_the_cluster(monkeypatch) -> None:
    cluster = FakeCluster({1: [("q-0-0", 10, "PrepareCommit")],
                           2: [("q-1-0", 11, "Ongoing"), ("q-2-1", 12, "CompleteAbort")],
                           3: []},
                          {LIST_TRANSACTIONS: (0, 1), METADATA: (0, 12)})
    cluster.install(monkeypatch)
    with LogClient("127.0.0.1:9002") as client:
        listed = client.list_transactions()

    assert sorted(listed or []) == [("q-0-0", 10, "PrepareCommit"), ("q-1-0", 11, "Ongoing"),
                                    ("q-2-1", 12, "CompleteAbort")]
    assert sorted(cluster.asked) == [1, 2, 3]


def test_list_transactions_is_none_when_the_broker_lacks_kip664(monkeypatch) -> None:
    cluster = FakeCluster({1: []}, {METADATA: (0, 12)})
    cluster.install(monkeypatch)
    with LogClient("127.0.0.1:9001") as client:
        assert client.list_transactions() is None
    assert cluster.asked == []
