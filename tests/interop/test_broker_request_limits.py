"""Limits one request cannot exceed, against a real broker process (Kafka's names and rules).

- ``fetch.max.bytes`` (broker, default 55 MiB) caps every Fetch response, whatever the request
  asks for; the first batch is still returned whole, so consumers make progress.
- CreateTopics / CreatePartitions asking for more than 10,000 partitions in one request get
  POLICY_VIOLATION (Kafka's controller refuses excessively large batches), and so does anything
  that would take the broker past ``oncestream.max.partitions`` (CreateTopics, CreatePartitions,
  auto-creation through Metadata). Nothing is created when refused.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import NewPartitions, NewTopic

from oncestream.protocol.codec import build
from tests.support.clients import CLIENT_TIMEOUT_S, admin_client, create_topic, unique_topic
from tests.support.txn import READ_UNCOMMITTED, read_to_end, start_txn_broker, values_of
from tests.support.wire import (
    WireConnection,
    fetch_request_body,
    parse_fetch_response,
    parse_produce_response,
    produce_request_body,
    record_batch,
)

pytestmark = pytest.mark.interop

API_PRODUCE, API_FETCH, API_METADATA = 0, 1, 3
FETCH_VERSION, PRODUCE_VERSION = 11, 7
FETCH_CAP_BYTES = 64 * 1024
RECORD_BYTES = 10_000
BATCHES = 20
POLICY_VIOLATION = 44
# The internal topics' partitions (offsets and transaction state, 10 each by default) count too.
MAX_PARTITIONS = 30


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    broker = start_txn_broker(
        tmp_path_factory.mktemp("request-limits") / "data",
        extra_config={"fetch.max.bytes": str(FETCH_CAP_BYTES), "oncestream.max.partitions": str(MAX_PARTITIONS)},
    )
    try:
        yield broker
    finally:
        broker.stop()


def _host_port(bootstrap: str) -> tuple[str, int]:
    host, port = bootstrap.rsplit(":", 1)
    return host, int(port)


def test_fetch_max_bytes_caps_a_response_that_asks_for_more(limited):
    topic = unique_topic("fetch-cap")
    create_topic(limited.bootstrap, topic)
    values = [bytes([65 + i]) * RECORD_BYTES for i in range(BATCHES)]
    with WireConnection(*_host_port(limited.bootstrap)) as conn:
        for i, value in enumerate(values):  # one batch per request: BATCHES batches of ~10 KB
            body = produce_request_body(topic, 0, record_batch([value], timestamp_ms=int(time.time() * 1000)))
            _, (result,) = parse_produce_response(conn.request(API_PRODUCE, PRODUCE_VERSION, i, body), PRODUCE_VERSION)
            assert result.error_code == 0
        body = fetch_request_body(FETCH_VERSION, topic, 0, 0, max_wait_ms=0, min_bytes=1,
                                  max_bytes=64 * 1024 * 1024, partition_max_bytes=64 * 1024 * 1024)
        response = parse_fetch_response(conn.request(API_FETCH, FETCH_VERSION, 99, body), FETCH_VERSION)
    (part,) = response.partitions
    assert part.error_code == 0 and part.high_watermark == BATCHES
    assert 0 < len(part.records) <= FETCH_CAP_BYTES  # asked for 64 MiB; ~200 KB were there
    # A real consumer still reads everything, FETCH_CAP_BYTES at a time.
    assert values_of(read_to_end(limited.bootstrap, topic, 1, isolation=READ_UNCOMMITTED)) == {0: values}


def test_a_first_batch_larger_than_fetch_max_bytes_is_still_returned(limited):
    topic = unique_topic("fetch-cap-big")
    create_topic(limited.bootstrap, topic)
    big = b"z" * (FETCH_CAP_BYTES * 2)
    with WireConnection(*_host_port(limited.bootstrap)) as conn:
        body = produce_request_body(topic, 0, record_batch([big], timestamp_ms=int(time.time() * 1000)))
        _, (result,) = parse_produce_response(conn.request(API_PRODUCE, PRODUCE_VERSION, 1, body), PRODUCE_VERSION)
        assert result.error_code == 0
        body = fetch_request_body(FETCH_VERSION, topic, 0, 0, max_wait_ms=0, min_bytes=1)
        (part,) = parse_fetch_response(conn.request(API_FETCH, FETCH_VERSION, 2, body), FETCH_VERSION).partitions
    assert len(part.records) > FETCH_CAP_BYTES


def _create_errors(bootstrap: str, topics: list[NewTopic], **options) -> dict[str, int | None]:
    """CreateTopics through librdkafka's AdminClient: the error code per topic (None: created)."""
    admin = admin_client(bootstrap)  # kept referenced: a collected client fails its futures
    futures = admin.create_topics(topics, request_timeout=CLIENT_TIMEOUT_S, **options)
    codes: dict[str, int | None] = {}
    for name, future in futures.items():
        try:
            future.result(CLIENT_TIMEOUT_S)
            codes[name] = None
        except KafkaException as exc:
            codes[name] = exc.args[0].code()
    return codes


def _grow_error(bootstrap: str, topic: str, total_partitions: int) -> int | None:
    """CreatePartitions through librdkafka's AdminClient: the error code (None: grown)."""
    admin = admin_client(bootstrap)
    (future,) = admin.create_partitions([NewPartitions(topic, total_partitions)], request_timeout=CLIENT_TIMEOUT_S).values()
    try:
        future.result(CLIENT_TIMEOUT_S)
    except KafkaException as exc:
        return exc.args[0].code()
    return None


def _topic_names(bootstrap: str) -> set[str]:
    return set(admin_client(bootstrap).list_topics(timeout=CLIENT_TIMEOUT_S).topics)


def test_more_than_ten_thousand_partitions_in_one_request_is_a_policy_violation(limited):
    names = [unique_topic("huge-a"), unique_topic("huge-b")]
    codes = _create_errors(limited.bootstrap, [NewTopic(n, num_partitions=6000, replication_factor=1) for n in names])
    assert codes == {n: POLICY_VIOLATION for n in names}
    assert not set(names) & _topic_names(limited.bootstrap)
    # Also in validate-only mode: the limit is on the request, not on what it would create.
    assert _create_errors(limited.bootstrap, [NewTopic(names[0], num_partitions=10_001, replication_factor=1)],
                          validate_only=True) == {names[0]: POLICY_VIOLATION}


def test_create_partitions_beyond_ten_thousand_in_one_request_is_a_policy_violation(limited):
    topic = unique_topic("grow-huge")
    create_topic(limited.bootstrap, topic)
    assert _grow_error(limited.bootstrap, topic, 10_002) == POLICY_VIOLATION


def test_the_broker_wide_partition_budget_refuses_creations_that_exceed_it(limited):
    """oncestream.max.partitions=30 with 20 internal partitions: each test above created 1-partition
    topics, so fill up to the limit exactly, then every way of adding one more is refused."""
    held = sum(len(t.partitions) for t in admin_client(limited.bootstrap).list_topics(timeout=CLIENT_TIMEOUT_S).topics.values())
    room = MAX_PARTITIONS - held
    assert room >= 3, f"the broker already holds {held} partitions"
    grown = unique_topic("budget-grown")
    create_topic(limited.bootstrap, grown, partitions=room - 1)
    refused = unique_topic("budget-refused")
    assert _create_errors(limited.bootstrap, [NewTopic(refused, num_partitions=2, replication_factor=1)]) == {
        refused: POLICY_VIOLATION}
    assert _grow_error(limited.bootstrap, grown, room + 1) == POLICY_VIOLATION
    last = unique_topic("budget-last")
    assert _create_errors(limited.bootstrap, [NewTopic(last, num_partitions=1, replication_factor=1)]) == {last: None}
    # Now full: auto-creation through Metadata is refused as well.
    from tests.support.txn import _connection

    with _connection(limited.bootstrap) as conn:
        resp = conn.call(API_METADATA, lambda m: build(m.MetadataRequest,
            topics=(build(m.MetadataRequestTopic, name=unique_topic("budget-auto"), topic_id=None),), allow_auto_topic_creation=True, include_topic_authorized_operations=False))
    assert [int(t.error_code) for t in resp.topics] == [POLICY_VIOLATION]
    assert refused not in _topic_names(limited.bootstrap)
