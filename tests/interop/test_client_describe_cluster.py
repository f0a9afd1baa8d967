"""``Admin.describe_cluster()``: the cluster id is Metadata v2+'s ``cluster_id`` (KIP-78), the one
librdkafka reports as ``AdminClient.list_topics().cluster_id`` for the same broker, checked on our
broker (whose id survives a restart: it lives in the data directory's meta.properties) and on
Tansu, the peer broker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient as ConfluentAdmin

from oncestream.client import Admin
from tests.support.brokers import BrokerProcess, ManagedBroker, TansuProcess

pytestmark = pytest.mark.interop


@pytest.fixture(params=["oncestream", "tansu"], scope="module")
def any_broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedBroker]:
    base = tmp_path_factory.mktemp(f"describe-cluster-{request.param}")
    process: ManagedBroker = TansuProcess(log_dir=base / "logs") if request.param == "tansu" \
        else BrokerProcess(data_dir=base / "data")
    process.start()
    try:
        yield process
    finally:
        process.kill()


def _librdkafka_cluster_id(bootstrap: str) -> str | None:
    return ConfluentAdmin({"bootstrap.servers": bootstrap}).list_topics(timeout=30).cluster_id


def test_cluster_id_is_the_one_librdkafka_reports(any_broker: ManagedBroker) -> None:
    with Admin({"bootstrap.servers": any_broker.bootstrap}) as admin:
        described = admin.describe_cluster(timeout=30)
    expected = _librdkafka_cluster_id(any_broker.bootstrap)
    assert expected, "the broker reports a cluster id to librdkafka"
    assert described.cluster_id == expected
    host, port = any_broker.bootstrap.rsplit(":", 1)
    assert [(h, p) for _id, h, p in described.nodes] == [(host, int(port))]


def test_our_cluster_id_survives_a_broker_restart(tmp_path: Path) -> None:
    broker = BrokerProcess(data_dir=tmp_path / "data")
    broker.start()
    try:
        with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
            first = admin.describe_cluster(timeout=30).cluster_id
        broker.kill()
        broker.start()
        with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
            again = admin.describe_cluster(timeout=30).cluster_id
    finally:
        broker.kill()
    assert first
    assert again == first


def test_librdkafka_describe_cluster_names_the_single_broker(tmp_path: Path) -> None:
    """DescribeCluster (KIP-700), as librdkafka's AdminClient.describe_cluster sends it: the
    broker itself, as controller too, with the cluster id Metadata reports."""
    broker = BrokerProcess(data_dir=tmp_path / "data")
    broker.start()
    try:
        admin = ConfluentAdmin({"bootstrap.servers": broker.bootstrap})
        described = admin.describe_cluster(request_timeout=30).result(timeout=60)
        expected = _librdkafka_cluster_id(broker.bootstrap)
    finally:
        broker.kill()
    host, port = broker.bootstrap.rsplit(":", 1)
    assert described.cluster_id == expected
    assert described.controller.id == 0
    assert [(n.id, n.host, n.port) for n in described.nodes] == [(0, host, int(port))]
