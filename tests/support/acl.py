"""Helpers for the ACL interop tests: a broker with an authorizer, users acting through the
test tree's principal builder (client.id ``principal:NAME``, tests/support/principals.py), ACLs
created by the super user."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from oncestream.client.common.connection import BrokerConnection
from tests.support.brokers import BrokerProcess
from tests.support.clients import CLIENT_TIMEOUT_S, unique_topic
from tests.support.principals import CLIENT_ID_PRINCIPAL_BUILDER

# Kafka's StandardAuthorizer with the tests' super user, ``User:admin``.
AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:admin",
}
SECURED = {
    **AUTHORIZER,
    "principal.builder.class": CLIENT_ID_PRINCIPAL_BUILDER,
    "transaction.two.phase.commit.enable": "true",
}
T = 10.0  # seconds a client may spend on one refused call


def user() -> str:
    return f"u{uuid.uuid4().hex[:8]}"


def admin(broker: BrokerProcess, name: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap, "client.id": f"principal:{name}"})


def allow(broker: BrokerProcess, name: str, rtype: ResourceType, resource: str, op: AclOperation,
          pattern: ResourcePatternType = ResourcePatternType.LITERAL) -> None:
    binding = AclBinding(rtype, resource, pattern, f"User:{name}", "*", op, AclPermissionType.ALLOW)
    client = admin(broker, "admin")  # kept alive until its futures are done
    for future in client.create_acls([binding], request_timeout=CLIENT_TIMEOUT_S).values():
        future.result(timeout=CLIENT_TIMEOUT_S)


def new_topic(broker: BrokerProcess, prefix: str, partitions: int = 1) -> str:
    topic = unique_topic(prefix)
    client = admin(broker, "admin")
    futures = client.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    futures[topic].result(timeout=CLIENT_TIMEOUT_S)
    return topic


def wire(broker: BrokerProcess, name: str, max_versions: dict[int, int] | None = None) -> BrokerConnection:
    """A raw connection acting as ``User:NAME`` (``max_versions`` caps negotiated versions)."""
    host, port = broker.bootstrap.rsplit(":", 1)
    return BrokerConnection(host, int(port), client_id=f"principal:{name}", max_versions=max_versions)


def code_of(exc: pytest.ExceptionInfo) -> int:
    return exc.value.args[0].code()


def produce_one(broker: BrokerProcess, name: str, topic: str, **conf: object) -> KafkaError | None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "client.id": f"principal:{name}",
                         "message.timeout.ms": int(T * 1000), **conf})
    reports: list[KafkaError | None] = []
    producer.produce(topic, b"v", partition=0, on_delivery=lambda err, msg: reports.append(err))
    producer.flush(CLIENT_TIMEOUT_S)
    [report] = reports
    return report
