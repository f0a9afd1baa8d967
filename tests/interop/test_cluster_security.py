"""Security state of a cluster lives in PostgreSQL, so every broker answers the same (issue 22, point 1).

Three ``oncestream broker`` processes of one cluster, librdkafka clients:

- An ACL created through one broker is enforced by all three: a user refused WRITE on a topic by
  every broker may produce through every broker once the ACL exists, and is refused again
  everywhere once it is deleted (through another broker).
- A SCRAM user created with AlterUserScramCredentials through one broker authenticates on all
  three; a wrong password does not; deleted, it no longer authenticates anywhere.
- A dynamic cluster-wide broker config set with IncrementalAlterConfigs through one broker (on
  the wire: librdkafka refuses the empty resource name) is described by librdkafka on every
  broker (DYNAMIC_DEFAULT_BROKER_CONFIG), also by one restarted afterwards (its scratch
  directory is new: the value comes from PostgreSQL).

A client may send an admin request to any broker it learned from Metadata, so each check asks
every broker: at least two of them did not handle the change.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kio.schema.errors import ErrorCode

from oncestream.client.common.connection import BrokerConnection, parse_bootstrap
from oncestream.protocol.api_keys import INCREMENTAL_ALTER_CONFIGS
from oncestream.protocol.codec import build
from tests.support.acl import SECURED, user
from tests.support.clients import CLIENT_TIMEOUT_S, unique_topic
from tests.support.cluster import Cluster, ClusterBroker, cluster_factory  # noqa: F401  (fixture)
from tests.support.sasl import librdkafka_conf, sasl_broker_config

pytestmark = pytest.mark.interop

RESOURCE_BROKER = 4  # Kafka's ConfigResource.Type.BROKER on the wire
WAIT_S = 30.0  # a bound on a hang only (a change reaches the other brokers by NOTIFY, or a poll within 1 s)


def _until_produce(bootstrap: str, topic: str, conf: Mapping[str, str], *, refused: bool, what: str) -> None:
    """Wait until producing through ``bootstrap`` only is refused (``refused``) or goes through."""
    _until(lambda: (_produce_error(bootstrap, topic, conf) is not None) == refused, what)


def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def _produce_error(bootstrap: str, topic: str, conf: Mapping[str, str]) -> KafkaError | None:
    """One record produced through ``bootstrap`` only: None if delivered, else the error (an
    authentication failure, reported by the error callback, counts as one too)."""
    errors: list[KafkaError] = []
    reports: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10_000, "error_cb": errors.append,
                         "topic.metadata.refresh.interval.ms": 500, **conf})
    producer.produce(topic, b"v", partition=0, on_delivery=lambda err, msg: reports.append(err))
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while not reports and not any(e.code() == KafkaError._AUTHENTICATION for e in errors):
        assert time.monotonic() < deadline, f"neither delivered nor refused: {errors}"
        producer.poll(0.2)
    producer.purge()
    producer.flush(1)
    if reports:
        return reports[0]
    return next(e for e in errors if e.code() == KafkaError._AUTHENTICATION)


def _create_topic(bootstrap: str, topic: str, conf: Mapping[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **conf})
    created = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)], request_timeout=30)
    created[topic].result(timeout=CLIENT_TIMEOUT_S)


def _filter(topic: str, principal: str | None) -> AclBindingFilter:
    # the stub types principal/host as str: None means any
    return AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, None,  # type: ignore[arg-type]
                            AclOperation.ANY, AclPermissionType.ANY)


def _as(name: str) -> dict[str, str]:
    return {"client.id": f"principal:{name}"}  # the tests' principal builder (tests/support/principals.py)


def test_an_acl_created_through_one_broker_is_enforced_by_every_broker(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(3, SECURED)
    first, second = cluster.brokers[0], cluster.brokers[1]
    topic = unique_topic("cluster-acl")
    _create_topic(first.bootstrap, topic, _as("admin"))
    name = user()
    for broker in cluster.brokers:
        refused = _produce_error(broker.bootstrap, topic, _as(name))
        assert refused is not None, f"node {broker.node_id} let {name} write without an ACL"
        assert refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, refused

    binding = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, f"User:{name}", "*",
                         AclOperation.WRITE, AclPermissionType.ALLOW)
    creator = AdminClient({"bootstrap.servers": first.bootstrap, **_as("admin")})
    for future in creator.create_acls([binding], request_timeout=CLIENT_TIMEOUT_S).values():
        future.result(timeout=CLIENT_TIMEOUT_S)
    for broker in cluster.brokers:
        _until_produce(broker.bootstrap, topic, _as(name), refused=False,
                       what=f"node {broker.node_id} does not enforce the ACL created through node 1")
        describer = AdminClient({"bootstrap.servers": broker.bootstrap, **_as("admin")})  # alive until answered
        listed = describer.describe_acls(_filter(topic, None), request_timeout=CLIENT_TIMEOUT_S)
        assert listed.result(timeout=CLIENT_TIMEOUT_S) == [binding]

    deleter = AdminClient({"bootstrap.servers": second.bootstrap, **_as("admin")})
    for future in deleter.delete_acls([_filter(topic, f"User:{name}")], request_timeout=CLIENT_TIMEOUT_S).values():
        assert future.result(timeout=CLIENT_TIMEOUT_S) == [binding]
    for broker in cluster.brokers:
        _until_produce(broker.bootstrap, topic, _as(name), refused=True,
                       what=f"node {broker.node_id} still lets {name} write after the ACL was deleted through node 2")


def test_a_scram_user_created_through_one_broker_authenticates_on_every_broker(
        cluster_factory: Callable[..., Cluster]) -> None:
    admin_login = librdkafka_conf("PLAIN", "admin", "admin-secret")
    cluster = cluster_factory(3, sasl_broker_config(), client_conf=admin_login)
    topic = unique_topic("cluster-scram")
    _create_topic(cluster.brokers[0].bootstrap, topic, admin_login)
    login = librdkafka_conf("SCRAM-SHA-512", "erin", "erin-pw")
    assert _produce_error(cluster.brokers[2].bootstrap, topic, login) is not None, "erin authenticated before she exists"

    admin = AdminClient({"bootstrap.servers": cluster.brokers[0].bootstrap, **admin_login})
    for future in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "erin", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"erin-pw")]).values():
        future.result(CLIENT_TIMEOUT_S)
    for broker in cluster.brokers:
        _until_produce(broker.bootstrap, topic, login, refused=False,
                       what=f"node {broker.node_id} does not authenticate the SCRAM user created through node 1")
        wrong = _produce_error(broker.bootstrap, topic, librdkafka_conf("SCRAM-SHA-512", "erin", "wrong"))
        assert wrong is not None, f"node {broker.node_id} accepted a wrong password"

    other = AdminClient({"bootstrap.servers": cluster.brokers[1].bootstrap, **admin_login})
    for future in other.alter_user_scram_credentials(
            [UserScramCredentialDeletion("erin", ScramMechanism.SCRAM_SHA_512)]).values():
        future.result(CLIENT_TIMEOUT_S)
    for broker in cluster.brokers:
        _until_produce(broker.bootstrap, topic, login, refused=True,
                       what=f"node {broker.node_id} still authenticates the deleted SCRAM user")


def _retention_of(broker: ClusterBroker) -> tuple[str | None, ConfigSource]:
    """log.retention.ms as ``broker`` describes itself (librdkafka sends a broker resource to that broker)."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource(ResourceType.BROKER, str(broker.node_id))
    described = admin.describe_configs([resource], request_timeout=CLIENT_TIMEOUT_S)[resource].result(CLIENT_TIMEOUT_S)
    entry = described["log.retention.ms"]
    return entry.value, ConfigSource(entry.source)


def test_a_dynamic_broker_config_set_through_one_broker_is_described_by_every_broker(
        cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(3)
    # The cluster-default resource ("") on the wire to node 1: librdkafka refuses an empty name.
    host, port = parse_bootstrap(cluster.brokers[0].bootstrap)
    with BrokerConnection(host, port) as conn:
        response = conn.call(INCREMENTAL_ALTER_CONFIGS, lambda m: build(
            m.IncrementalAlterConfigsRequest, validate_only=False,
            resources=(build(m.AlterConfigsResource, resource_type=RESOURCE_BROKER, resource_name="",
                             configs=(build(m.AlterableConfig, name="log.retention.ms",
                                            config_operation=AlterConfigOpType.SET.value, value="7654321"),)),)))
    [result] = response.responses
    assert result.error_code == ErrorCode.none, result.error_message
    for broker in cluster.brokers:
        assert _retention_of(broker) == ("7654321", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG), broker.node_id
    restarted = cluster.brokers[1]
    restarted.restart()
    assert _retention_of(restarted) == ("7654321", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    # An internal topic's configs cannot change on a cluster (its records are PostgreSQL rows):
    # refused with INVALID_CONFIG, and described unchanged.
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    offsets_topic = ConfigResource(ResourceType.TOPIC, "__consumer_offsets")
    alter = ConfigResource(ResourceType.TOPIC, "__consumer_offsets",
                           incremental_configs=[ConfigEntry("segment.bytes", "1048576",
                                                            incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as refused:
        admin.incremental_alter_configs([alter], request_timeout=CLIENT_TIMEOUT_S)[alter].result(CLIENT_TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
    described = admin.describe_configs([offsets_topic], request_timeout=CLIENT_TIMEOUT_S)[offsets_topic]
    assert described.result(CLIENT_TIMEOUT_S)["segment.bytes"].value == "104857600"
