"""Share-group admin (KIP-932) on a cluster of three ``oncestream broker`` processes, with
librdkafka's ShareConsumer (confluent-kafka) reading and each broker asked on the wire.

A share group's per-group configs (``share.auto.offset.reset``, ``share.record.lock.duration.ms``)
are set through a broker that does not coordinate the group; every broker describes them, and the
share-partitions' owners (the leaders of the topic-partitions) start by the reset policy. The
group's offsets are altered through its coordinator while other brokers own share-partitions of
it (broker/cluster_shares.py ``overwrite``: the coordinator takes the owners' leases in the
transaction that writes the state); every broker describes the new start offsets and a new
ShareConsumer is handed exactly the records from there. The group is then deleted through a
client bootstrapped from the third broker (which itself answers NOT_COORDINATOR, as Kafka's
brokers do); every broker describes no state, and a new consumer starts afresh by the group's
config.

A group's own timing (``share.session.timeout.ms``, ``share.heartbeat.interval.ms``; brokers whose
share sessions and record locks last ten minutes) set through librdkafka's Admin on a broker that
does not coordinate the group: values outside the brokers' bounds are refused, every broker
describes the group's values, its coordinator answers a ShareGroupHeartbeat with the group's
interval, and a SIGKILLed member's records come back to another ShareConsumer once the group's
four-second session ends at the leader of their partition.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode

from oncestream.client.common.connection import BrokerConnection
from oncestream.log.topic_config_defs import ConfigSource
from oncestream.protocol import api_keys as k
from oncestream.protocol.config_resources import RESOURCE_GROUP
from tests.interop.test_share_groups import (
    FAST_GROUP_TIMING,
    SLOW_BROKER_TIMING,
    group_config_values,
    killed_members_records_come_back,
    set_group_configs,
)
from tests.support.clients import create_topic, unique_topic
from tests.support.cluster import Cluster, ClusterBroker, cluster_factory  # noqa: F401  (fixture)
from tests.support.coordinators import find_coordinator

pytestmark = pytest.mark.interop

PARTITIONS = 6  # so that brokers other than the coordinator lead some
PER_PARTITION = 5
RESTART_AT = 2  # the altered start offset of every partition
CAP_S = 90.0  # a bound on a hang only
SET = 0  # IncrementalAlterConfigs operation


def _call(broker: ClusterBroker, api_key: int, make: Callable[[Any], Any]) -> Any:
    with BrokerConnection(broker.host, broker.port, client_id="share-admin-test", timeout_s=30.0) as conn:
        return conn.call(api_key, make)


def _group_config(broker: ClusterBroker, group: str) -> dict[str, tuple[str, int]]:
    """DescribeConfigs of the GROUP resource on ``broker``: name -> (value, source)."""
    response = _call(broker, k.DESCRIBE_CONFIGS, lambda m: m.DescribeConfigsRequest(
        resources=(m.DescribeConfigsResource(resource_type=RESOURCE_GROUP, resource_name=group,
                                             configuration_keys=None),),
        include_synonyms=False, include_documentation=False))
    (result,) = response.results
    assert result.error_code == ErrorCode.none, result.error_message
    return {c.name: (c.value, c.config_source) for c in result.configs}


def _start_offsets(broker: ClusterBroker, group: str) -> dict[int, int]:
    """DescribeShareGroupOffsets on ``broker``: partition -> start offset, of those with state."""
    response = _call(broker, k.DESCRIBE_SHARE_GROUP_OFFSETS, lambda m: m.DescribeShareGroupOffsetsRequest(
        groups=(m.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=None),)))
    (described,) = response.groups
    assert described.error_code == ErrorCode.none, described.error_message
    return {p.partition_index: p.start_offset for t in described.topics for p in t.partitions}


def _alter(broker: ClusterBroker, group: str, topic: str, start_offset: int) -> Any:
    return _call(broker, k.ALTER_SHARE_GROUP_OFFSETS, lambda m: m.AlterShareGroupOffsetsRequest(
        group_id=group, topics=(m.AlterShareGroupOffsetsRequestTopic(topic_name=topic, partitions=tuple(
            m.AlterShareGroupOffsetsRequestPartition(partition_index=p, start_offset=start_offset)
            for p in range(PARTITIONS))),)))


def _share_read(bootstrap: str, group: str, topic: str, count: int) -> list[tuple[int | None, int | None]]:
    """(partition, offset) of the first ``count`` records a new ShareConsumer of ``group`` is
    handed (acknowledged implicitly and committed), then it closes (the group empties)."""
    consumer = confluent_kafka.ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    got: list[tuple[int | None, int | None]] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + CAP_S
        while len(got) < count:
            assert time.monotonic() < deadline, f"only {len(got)} of {count} records shared: {sorted(got)}"
            got += [(m.partition(), m.offset()) for m in consumer.poll(0.5) if m.error() is None]
        consumer.commit_sync(30)
    finally:
        consumer.close()
    return sorted(got)


def _until(predicate: Callable[[], bool], what: Callable[[], str]) -> None:
    deadline = time.monotonic() + CAP_S
    while not predicate():
        assert time.monotonic() < deadline, what()
        time.sleep(0.2)


def test_share_admin_through_one_broker_is_seen_and_applied_by_every_broker(
        cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(3)
    brokers = cluster.brokers
    topic, group = unique_topic("cluster-share-admin"), unique_topic("cluster-share-admin-group")
    create_topic(brokers[0].bootstrap, topic, partitions=PARTITIONS)
    host, port = find_coordinator(brokers[0].bootstrap, group)
    coordinator = next(b for b in brokers if (b.host, b.port) == (host, port))
    metadata = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(topic, timeout=30)
    leaders = {p: metadata.topics[topic].partitions[p].leader for p in range(PARTITIONS)}
    assert set(leaders.values()) - {coordinator.node_id}, f"the coordinator leads every partition: {leaders}"
    others = [b for b in brokers if b is not coordinator]

    # share.auto.offset.reset=earliest through a broker that does not coordinate the group.
    response = _call(others[0], k.INCREMENTAL_ALTER_CONFIGS, lambda m: m.IncrementalAlterConfigsRequest(
        resources=(m.AlterConfigsResource(resource_type=RESOURCE_GROUP, resource_name=group, configs=(
            m.AlterableConfig(name="share.auto.offset.reset", config_operation=SET, value="earliest"),
            m.AlterableConfig(name="share.record.lock.duration.ms", config_operation=SET, value="20000"))),),
        validate_only=False))
    assert [r.error_code for r in response.responses] == [ErrorCode.none]
    for broker in brokers:
        described = _group_config(broker, group)
        assert described["share.auto.offset.reset"] == ("earliest", ConfigSource.GROUP_CONFIG), broker.node_id
        assert described["share.record.lock.duration.ms"] == ("20000", ConfigSource.GROUP_CONFIG), broker.node_id

    # Records before the group's first consumer: the owners start by the config (latest: none).
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap})
    for partition in range(PARTITIONS):
        for i in range(PER_PARTITION):
            producer.produce(topic, b"r%d-%d" % (partition, i), partition=partition)
    assert producer.flush(30) == 0
    everything = [(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)]
    assert _share_read(cluster.bootstrap, group, topic, len(everything)) == everything
    _until(lambda: _start_offsets(brokers[0], group) == dict.fromkeys(range(PARTITIONS), PER_PARTITION),
           lambda: f"every record acknowledged: {_start_offsets(brokers[0], group)}")

    # AlterShareGroupOffsets: the coordinator serves it (the others answer NOT_COORDINATOR), once
    # the closed consumer has left; the share-partitions stay owned by their leaders meanwhile.
    refused = _alter(others[1], group, topic, RESTART_AT)
    assert refused.error_code == ErrorCode.not_coordinator
    _until(lambda: _alter(coordinator, group, topic, RESTART_AT).error_code != ErrorCode.non_empty_group,
           lambda: "the share group to be empty")
    altered = _alter(coordinator, group, topic, RESTART_AT)
    assert altered.error_code == ErrorCode.none
    assert [(p.partition_index, p.error_code) for t in altered.responses for p in t.partitions] == [
        (p, ErrorCode.none) for p in range(PARTITIONS)]
    for broker in brokers:
        assert _start_offsets(broker, group) == dict.fromkeys(range(PARTITIONS), RESTART_AT), broker.node_id
    # The owners (some not the coordinator) hand out exactly the records from the new start.
    again = [(p, o) for p in range(PARTITIONS) for o in range(RESTART_AT, PER_PARTITION)]
    assert _share_read(cluster.bootstrap, group, topic, len(again)) == again

    # DeleteGroups through a client of the third broker (neither the coordinator nor the one
    # refused above): it finds the coordinator as Kafka's clients do.
    third = others[0]
    delete_refused = _call(third, k.DELETE_GROUPS, lambda m: m.DeleteGroupsRequest(groups_names=(group,)))
    assert [r.error_code for r in delete_refused.results] == [ErrorCode.not_coordinator]
    admin = AdminClient({"bootstrap.servers": third.bootstrap})

    def deleted() -> bool:
        try:
            admin.delete_consumer_groups([group], request_timeout=30)[group].result(timeout=60)
        except confluent_kafka.KafkaException as exc:
            if exc.args[0].code() == confluent_kafka.KafkaError.NON_EMPTY_GROUP:
                return False  # the last consumer's leave is still on its way
            raise
        return True

    _until(deleted, lambda: "the share group to be deleted")
    for broker in brokers:
        assert _start_offsets(broker, group) == {}, broker.node_id
    # No state left: a new consumer starts every share-partition afresh, by the group's config.
    assert _share_read(cluster.bootstrap, group, topic, len(everything)) == everything


def test_share_group_timing_through_one_broker_is_used_by_coordinator_and_leaders(
        cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(3, SLOW_BROKER_TIMING)
    brokers = cluster.brokers
    group = unique_topic("cluster-share-timing")
    host, port = find_coordinator(brokers[0].bootstrap, group)
    coordinator = next(b for b in brokers if (b.host, b.port) == (host, port))
    other = next(b for b in brokers if b is not coordinator)
    with pytest.raises(confluent_kafka.KafkaException) as refused:  # the brokers' bounds
        set_group_configs(other.bootstrap, group, share_session_timeout_ms="2999")
    assert refused.value.args[0].name() == "INVALID_CONFIG"
    set_group_configs(other.bootstrap, group, share_auto_offset_reset="earliest", **FAST_GROUP_TIMING)
    described = {b.node_id: group_config_values(b.bootstrap, group, FAST_GROUP_TIMING) for b in brokers}
    assert described == dict.fromkeys(described, FAST_GROUP_TIMING)  # written to PostgreSQL before the answer

    topic = unique_topic("cluster-share-timing")
    create_topic(brokers[0].bootstrap, topic)
    member = "wire-member"
    joined = _call(coordinator, k.SHARE_GROUP_HEARTBEAT, lambda m: m.ShareGroupHeartbeatRequest(
        group_id=group, member_id=member, member_epoch=0, rack_id=None, subscribed_topic_names=(topic,)))
    assert joined.error_code == ErrorCode.none, joined.error_message
    assert joined.heartbeat_interval.total_seconds() * 1000 == 1000  # the group's, not the broker's 5000
    left = _call(coordinator, k.SHARE_GROUP_HEARTBEAT, lambda m: m.ShareGroupHeartbeatRequest(
        group_id=group, member_id=member, member_epoch=-1, rack_id=None, subscribed_topic_names=None))
    assert left.error_code == ErrorCode.none, left.error_message
    killed_members_records_come_back(cluster.bootstrap, group, topic)
