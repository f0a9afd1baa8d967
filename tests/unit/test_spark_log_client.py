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
from oncestream.client.common.errors import ConnectionLostError
from oncestream.protocol.api_keys import LIST_TRANSACTIONS, METADATA
from oncestream.spark.errors import BrokerRequestError
from oncestream.spark.log_client import LogClient


class FakeCluster:
    """Three brokers; each answers ListTransactions with its own transactions."""

    def __init__(self, transactions: dict[int, list[tuple[str, int, str]]], versions: dict[int, tuple[int, int]]):
        self.transactions = transactions
        self.versions = versions
        self.asked: list[int] = []
        # Per node, what its next ListTransactions meets instead of an answer (consumed in order):
        # an exception raised by ``send`` or an error code answered.
        self.faults: dict[int, list[Exception | ErrorCode]] = {}
        self.dead: set[int] = set()   # brokers left out of Metadata from the next refresh on

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        fake = self

        async def any_connection(self: Cluster) -> SimpleNamespace:
            return SimpleNamespace(broker_versions=fake.versions)

        async def refresh(self: Cluster, topics=None, *, all_topics: bool = False) -> None:
            self.nodes.clear()
            self.nodes.update({n: ("127.0.0.1", 9000 + n) for n in fake.transactions if n not in fake.dead})

        async def send(self: Cluster, node_id, api_key, make, **kwargs):
            assert api_key == LIST_TRANSACTIONS
            fake.asked.append(node_id)
            faults = fake.faults.get(node_id)
            if faults:
                fault = faults.pop(0)
                if isinstance(fault, Exception):
                    raise fault
                return SimpleNamespace(error_code=fault, transaction_states=[])
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


def test_list_transactions_waits_out_a_dead_broker_and_a_loading_coordinator(monkeypatch) -> None:
    """A cluster broker SIGKILLed stays in Metadata until its session expires (connections to it
    are refused) and the broker taking its coordinators over answers COORDINATOR_LOAD_IN_PROGRESS
    while it loads them: the listing is incomplete until both are over, so it starts again from
    fresh metadata rather than failing the sink's commit (as it did on a cluster) or answering
    without the dead broker's transactions."""
    cluster = FakeCluster({1: [("q-0-0", 10, "Ongoing")], 2: [("q-1-0", 11, "Ongoing")], 3: []},
                          {LIST_TRANSACTIONS: (0, 1), METADATA: (0, 12)})
    cluster.faults = {1: [ErrorCode.coordinator_load_in_progress],
                      3: [ConnectionLostError("cannot connect to 127.0.0.1:9003: refused")]}
    cluster.install(monkeypatch)
    fake_send = Cluster.send

    async def send(self: Cluster, node_id, api_key, make, **kwargs):
        if node_id == 3:
            cluster.dead.add(3)   # its session expires: the next Metadata leaves it out
        return await fake_send(self, node_id, api_key, make, **kwargs)

    monkeypatch.setattr(Cluster, "send", send)
    with LogClient("127.0.0.1:9001") as client:
        listed = client.list_transactions()

    assert sorted(listed or []) == [("q-0-0", 10, "Ongoing"), ("q-1-0", 11, "Ongoing")]
    # Loading coordinator, then the dead broker, then a complete round without it.
    assert cluster.asked == [1, 1, 2, 3, 1, 2]


def test_list_transactions_fails_on_an_error_that_is_not_retriable(monkeypatch) -> None:
    cluster = FakeCluster({1: [], 2: []}, {LIST_TRANSACTIONS: (0, 1), METADATA: (0, 12)})
    cluster.faults = {2: [ErrorCode.cluster_authorization_failed]}
    cluster.install(monkeypatch)
    with LogClient("127.0.0.1:9001") as client, pytest.raises(BrokerRequestError, match="CLUSTER_AUTHORIZATION"):
        client.list_transactions()
    assert sorted(cluster.asked) == [1, 2]


def test_list_transactions_fails_at_once_when_no_broker_answers_metadata(monkeypatch) -> None:
    cluster = FakeCluster({1: []}, {LIST_TRANSACTIONS: (0, 1), METADATA: (0, 12)})
    cluster.install(monkeypatch)
    refreshes = []

    async def refresh(self: Cluster, topics=None, *, all_topics: bool = False) -> None:
        refreshes.append(1)
        raise ConnectionLostError("no broker reachable: cannot connect to 127.0.0.1:9001")

    monkeypatch.setattr(Cluster, "refresh", refresh)
    with LogClient("127.0.0.1:9001") as client, pytest.raises(BrokerRequestError, match="no broker reachable"):
        client.list_transactions()
    assert refreshes == [1]
    assert cluster.asked == []
