"""The zero-copy Fetch response reader against a real broker's answers, at every version 4-12.

The same Fetch is sent twice on one connection: once decoded by kio (``BrokerConnection.call``),
once received raw (``call_raw``) and read by ``protocol.fetch_response_view``; both readings must
agree field for field. The log holds a committed and an aborted transaction (KIP-98), so under
read_committed the aborted-transaction list is not empty on a broker that keeps one. Runs against
Tansu too (``ONCESTREAM_TEST_BROKER=tansu``): the reader is proven on a broker that is not ours.
"""

from __future__ import annotations

import datetime

import pytest

from oncestream.client.common.connection import BrokerConnection, parse_bootstrap
from oncestream.protocol.api_keys import FETCH
from oncestream.protocol.codec import build
from oncestream.protocol.fetch_response_view import parse_fetch_response
from oncestream.spark.log_client import LogClient
from tests.conftest import broker_kind
from tests.support.clients import create_topic, unique_topic
from tests.support.txn import plain_produce, run_transaction, transactional_producer

pytestmark = [pytest.mark.interop]


def _fetch_request(topic: str, read_committed: bool):
    def make(m):
        return build(
            m.FetchRequest, replica_id=-1, max_wait=datetime.timedelta(milliseconds=0), min_bytes=1,
            max_bytes=1 << 20, isolation_level=1 if read_committed else 0, session_id=0, session_epoch=-1,
            topics=(build(m.FetchTopic, topic=topic, partitions=tuple(
                build(m.FetchPartition, partition=p, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                      log_start_offset=-1, partition_max_bytes=1 << 20) for p in (0, 1))),),
            forgotten_topics_data=(), rack_id="")
    return make


def _kio_reading(response) -> list[tuple]:
    return [(t.topic, p.partition_index, int(p.error_code), p.high_watermark, p.last_stable_offset,
             getattr(p, "log_start_offset", -1),
             None if p.aborted_transactions is None
             else tuple((a.producer_id, a.first_offset) for a in p.aborted_transactions),
             bytes(p.records) if p.records is not None else None)
            for t in response.responses for p in t.partitions]


def _view_reading(view) -> list[tuple]:
    return [(t.topic, p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset, p.log_start_offset,
             p.aborted_transactions, bytes(p.records) if p.records is not None else None)
            for t in view.topics for p in t.partitions]


@pytest.fixture(scope="module")
def topic_with_transactions(broker) -> str:
    """Two partitions: plain records, a committed and an aborted transaction, then plain again."""
    topic = unique_topic("fetchview")
    create_topic(broker.bootstrap, topic, partitions=2)
    plain_produce(broker.bootstrap, topic, {0: [b"plain-0-%d" % i for i in range(5)], 1: [b"plain-1"]})
    producer = transactional_producer(broker.bootstrap, f"txn-{topic}")
    producer.init_transactions(30)
    run_transaction(producer, topic, {0: [b"committed-0"], 1: [b"committed-1"]}, commit=True)
    run_transaction(producer, topic, {0: [b"aborted-0-a", b"aborted-0-b"]}, commit=False)
    plain_produce(broker.bootstrap, topic, {0: [b"after-0"], 1: [b"after-1"]})
    return topic


@pytest.mark.parametrize("read_committed", [False, True])
def test_view_reads_the_brokers_fetch_responses_as_kio_does(broker, topic_with_transactions, read_committed) -> None:
    """For every Fetch version 4-12 the broker supports: kio's and the view's readings agree."""
    host, port = parse_bootstrap(broker.bootstrap)
    versions_tried = []
    for version in range(4, 13):
        with BrokerConnection(host, port, max_versions={FETCH: version}) as conn:
            low, high = conn.broker_versions[FETCH]
            if not low <= version <= high:
                continue
            assert conn.version_for(FETCH) == version
            make = _fetch_request(topic_with_transactions, read_committed)
            expected = _kio_reading(conn.call(FETCH, make))
            got_version, payload, body_offset = conn.call_raw(FETCH, make)
            assert got_version == version
            assert _view_reading(parse_fetch_response(version, payload, body_offset)) == expected
            assert all(records for *_, records in expected), "every partition has records"
            versions_tried.append(version)
    assert 12 in versions_tried, versions_tried  # the version the Spark log client uses
    if read_committed and broker_kind() == "oncestream":
        # Our broker reports the aborted transaction of partition 0 (KIP-98), so the list was read.
        with BrokerConnection(host, port, max_versions={FETCH: 12}) as conn:
            view = parse_fetch_response(12, *conn.call_raw(FETCH, _fetch_request(topic_with_transactions, True))[1:])
        aborted = {p.partition_index: p.aborted_transactions for t in view.topics for p in t.partitions}
        assert aborted[0]
        assert len(aborted[0]) == 1
        assert aborted[1] == ()


def test_log_client_fetch_returns_records_as_a_view(broker, topic_with_transactions) -> None:
    """``LogClient.fetch`` hands out the records as a read-only view of the received frame."""
    with LogClient(broker.bootstrap) as client:
        result = client.fetch((topic_with_transactions, 0), 0, max_bytes=1 << 20, read_committed=False)
    assert isinstance(result.records, memoryview)
    assert result.records.readonly
    assert b"plain-0-0" in bytes(result.records)
    assert b"after-0" in bytes(result.records)

