"""Client quota configs of a cluster live in PostgreSQL, so every broker answers and enforces the
same (issue 22; Kafka stores quota configs cluster-wide and meters each broker's own traffic).

Three ``oncestream broker`` processes of one cluster. A ``producer_byte_rate`` quota set with
AlterClientQuotas through node 1 is described identically by nodes 2 and 3, and a producer
connected to node 3 only is throttled by it (the Produce response's throttle_time, as librdkafka
reads it; any broker serves any partition in cluster mode, so node 3 meters this producer).
A KIP-714 ClientMetrics subscription created with IncrementalAlterConfigs through node 1 is
described by node 2. librdkafka and kafka-python have no client-quota calls and no CLIENT_METRICS
resource type, so these admin requests go on the wire (Kafka's schemas).
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable

import pytest
from kio.schema.errors import ErrorCode

from oncestream.client.common.connection import BrokerConnection, parse_bootstrap
from oncestream.log.topic_config_defs import ConfigSource
from oncestream.protocol.api_keys import (
    ALTER_CLIENT_QUOTAS,
    DESCRIBE_CLIENT_QUOTAS,
    DESCRIBE_CONFIGS,
    INCREMENTAL_ALTER_CONFIGS,
    PRODUCE,
)
from oncestream.protocol.codec import build
from oncestream.protocol.records import NewRecord, encode_batch
from tests.support.clients import CLIENT_TIMEOUT_S, create_topic, unique_topic
from tests.support.cluster import Cluster, ClusterBroker, cluster_factory  # noqa: F401  (fixture)

pytestmark = pytest.mark.interop

WAIT_S = 30.0  # a bound on a hang only (a change reaches the other brokers by NOTIFY, or a poll)
MATCH_EXACT = 0  # DescribeClientQuotas match_type: the entity name given
RESOURCE_CLIENT_METRICS = 16  # Kafka's ConfigResource.Type.CLIENT_METRICS on the wire
OP_SET = 0


def _connect(broker: ClusterBroker, client_id: str = "quota-admin") -> BrokerConnection:
    host, port = parse_bootstrap(broker.bootstrap)
    return BrokerConnection(host, port, client_id=client_id)


def _alter_quota(broker: ClusterBroker, client_id: str, key: str, value: float) -> None:
    with _connect(broker) as conn:
        response = conn.call(ALTER_CLIENT_QUOTAS, lambda m: build(
            m.AlterClientQuotasRequest, validate_only=False, entries=(build(
                m.EntryData, entity=(build(m.EntityData, entity_type="client-id", entity_name=client_id),),
                ops=(build(m.OpData, key=key, value=value, remove=False),)),)))
    [entry] = response.entries
    assert entry.error_code == ErrorCode.none, entry.error_message


def _described(broker: ClusterBroker, client_id: str) -> list[tuple[tuple[tuple[str, str | None], ...], dict[str, float]]]:
    """What ``broker`` answers DescribeClientQuotas for the client id: (entity, values) per entry."""
    with _connect(broker) as conn:
        response = conn.call(DESCRIBE_CLIENT_QUOTAS, lambda m: build(
            m.DescribeClientQuotasRequest, strict=True, components=(build(
                m.ComponentData, entity_type="client-id", match_type=MATCH_EXACT, match=client_id),)))
    assert response.error_code == ErrorCode.none, response.error_message
    return [(tuple((e.entity_type, e.entity_name) for e in entry.entity), {v.key: v.value for v in entry.values})
            for entry in response.entries]


def _throttle_of_produces(broker: ClusterBroker, topic: str, client_id: str, count: int) -> datetime.timedelta:
    """Produce ``count`` batches of 200 kB to ``broker`` only; the largest throttle_time answered."""
    batch = encode_batch([NewRecord(value=b"t" * 200_000)], now_ms=int(time.time() * 1000))
    largest = datetime.timedelta(0)
    with _connect(broker, client_id) as conn:
        for _ in range(count):
            response = conn.call(PRODUCE, lambda m: m.ProduceRequest(
                transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=CLIENT_TIMEOUT_S),
                topic_data=(m.TopicProduceData(name=topic, partition_data=(
                    m.PartitionProduceData(index=0, records=batch),)),)))
            assert response.responses[0].partition_responses[0].error_code == ErrorCode.none
            largest = max(largest, response.throttle_time)
            if largest > datetime.timedelta(0):
                break
    return largest


def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_a_quota_set_through_one_broker_is_described_and_enforced_by_every_broker(
        cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(3)
    first, second, third = cluster.brokers
    topic = unique_topic("cluster-quota")
    create_topic(first.bootstrap, topic)
    client_id = unique_topic("slow-tenant")
    # Before the quota, node 3 does not throttle this client (1 MB in five requests).
    assert _throttle_of_produces(third, topic, client_id, 5) == datetime.timedelta(0)

    _alter_quota(first, client_id, "producer_byte_rate", 10_000.0)
    expected = [((("client-id", client_id),), {"producer_byte_rate": 10_000.0})]
    assert _described(first, client_id) == expected
    for broker in (second, third):
        _until(lambda: _described(broker, client_id) == expected,  # noqa: B023  (called at once)
               f"node {broker.node_id} does not describe the quota set through node 1")
    # 200 kB against 10 kB/s: node 3 answers a throttle time (bounded attempts, no timing).
    assert _throttle_of_produces(third, topic, client_id, 5) > datetime.timedelta(0)


def _client_metrics_of(broker: ClusterBroker, name: str) -> dict[str, tuple[str | None, int]]:
    """The configs ``broker`` describes for ClientMetrics resource ``name``: name -> (value, source)."""
    with _connect(broker) as conn:
        response = conn.call(DESCRIBE_CONFIGS, lambda m: build(
            m.DescribeConfigsRequest, include_synonyms=False, include_documentation=False,
            resources=(build(m.DescribeConfigsResource, resource_type=RESOURCE_CLIENT_METRICS, resource_name=name,
                             configuration_keys=None),)))
    [result] = response.results
    assert result.error_code == ErrorCode.none, result.error_message
    return {c.name: (c.value, int(c.config_source)) for c in result.configs}


def test_a_client_metrics_subscription_set_through_one_broker_is_described_by_another(
        cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(3)
    first, second = cluster.brokers[0], cluster.brokers[1]
    name = unique_topic("subscription")
    wanted = {"metrics": "org.apache.kafka.producer.", "interval.ms": "2000", "match": "client_id=cluster-.*"}
    with _connect(first) as conn:
        response = conn.call(INCREMENTAL_ALTER_CONFIGS, lambda m: build(
            m.IncrementalAlterConfigsRequest, validate_only=False,
            resources=(build(m.AlterConfigsResource, resource_type=RESOURCE_CLIENT_METRICS, resource_name=name,
                             configs=tuple(build(m.AlterableConfig, name=key, config_operation=OP_SET, value=value)
                                           for key, value in wanted.items())),)))
    [result] = response.responses
    assert result.error_code == ErrorCode.none, result.error_message

    def described_by_second() -> bool:
        return _client_metrics_of(second, name) == {k: (v, int(ConfigSource.CLIENT_METRICS_CONFIG)) for k, v in wanted.items()}

    _until(described_by_second, "node 2 does not describe the subscription created through node 1")
