"""The Spark connector's protocol client against a multi-broker cluster, with fake connections.

KIP-664: ListTransactions answers only for the transaction coordinators hosted by the broker that
is asked, so the sink's leftover resolution must ask every broker of the cluster or it would miss
prepared transactions whose coordinator lives elsewhere.
"""

from __future__ import annotations

from types import SimpleNamespace

from kio.schema.errors import ErrorCode

from oncestream.spark.log_client import LIST_TRANSACTIONS, METADATA, LogClient
from tests.support.narrow import present


class FakeBroker:
    """Answers Metadata with the whole cluster and ListTransactions with its own transactions."""

    def __init__(self, node_id: int, cluster: list[tuple[int, int]], transactions: list[tuple[str, int, str]]):
        self.node_id = node_id
        self.cluster = cluster
        self.transactions = transactions
        self.broker_versions = {LIST_TRANSACTIONS: (0, 1), METADATA: (0, 12)}
        self.asked: list[int] = []

    def call(self, api_key: int, make):
        self.asked.append(api_key)
        if api_key == METADATA:
            return SimpleNamespace(
                brokers=[SimpleNamespace(node_id=n, host="127.0.0.1", port=p) for n, p in self.cluster],
                topics=[])
        assert api_key == LIST_TRANSACTIONS
        return SimpleNamespace(error_code=ErrorCode.none, transaction_states=[
            SimpleNamespace(transactional_id=t, producer_id=pid, transaction_state=state)
            for t, pid, state in self.transactions])

    def close(self) -> None:
        pass


def test_kip664_list_transactions_asks_every_broker_of_the_cluster(monkeypatch) -> None:
    cluster = [(1, 9001), (2, 9002), (3, 9003)]
    brokers = {
        9001: FakeBroker(1, cluster, [("q-0-0", 10, "PrepareCommit")]),
        9002: FakeBroker(2, cluster, [("q-1-0", 11, "Ongoing"), ("q-2-1", 12, "CompleteAbort")]),
        9003: FakeBroker(3, cluster, []),
    }
    monkeypatch.setattr(LogClient, "_connect", lambda self, host, port: brokers[port])
    client = LogClient("127.0.0.1:9002")

    listed = client.list_transactions()

    assert sorted(present(listed, "listed transactions")) == [("q-0-0", 10, "PrepareCommit"), ("q-1-0", 11, "Ongoing"),
                              ("q-2-1", 12, "CompleteAbort")]
    assert all(LIST_TRANSACTIONS in b.asked for b in brokers.values())


def test_list_transactions_is_none_when_the_broker_lacks_kip664(monkeypatch) -> None:
    broker = FakeBroker(1, [(1, 9001)], [])
    broker.broker_versions = {METADATA: (0, 12)}
    monkeypatch.setattr(LogClient, "_connect", lambda self, host, port: broker)
    assert LogClient("127.0.0.1:9001").list_transactions() is None
    assert LIST_TRANSACTIONS not in broker.asked
