"""Helpers for the ACL interop tests: a broker with an authorizer, users acting through the
test tree's principal builder (client.id ``principal:NAME``, tests/support/principals.py), ACLs
created by the super user.

The broker is the suites' module-wide one of the kind under test: our single broker, or a
cluster (tests/support/cluster_kind.py). A cluster's brokers learn a new ACL from PostgreSQL (a
NOTIFY, or a poll within a second), so ``allow`` returns once every broker describes it, as
Kafka's own tests wait for an ACL on every broker (``TestUtils.waitAndVerifyAcls``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

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
from kio.schema.errors import ErrorCode

from oncestream.broker_process import OnceStreamBroker
from oncestream.client.common.connection import BrokerConnection, parse_bootstrap
from oncestream.client.common.sasl import SaslCredentials
from oncestream.client.common.tls import ssl_context_for
from oncestream.protocol.api_keys import DESCRIBE_ACLS
from tests.support.clients import CLIENT_TIMEOUT_S, unique_topic
from tests.support.cluster import ClusterBroker
from tests.support.cluster_kind import BrokerUnderTest, ClusterUnderTest, processes_of
from tests.support.coordinators import GROUP_KEY, TRANSACTION_KEY, find_coordinator
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
# A cluster's brokers call each other (WriteTxnMarkers to a group coordinator, AddPartitionsToTxn
# to a transaction coordinator) on the PLAINTEXT listener, so as User:ANONYMOUS; those requests
# need CLUSTER_ACTION on the cluster (broker/inter_broker.py), as in Kafka.
PEER_PRINCIPAL = "User:ANONYMOUS"


def start_secured(factory: Callable[..., BrokerUnderTest]) -> BrokerUnderTest:
    """The module's broker with ``SECURED`` from conftest's ``module_our_broker_factory``: our
    single broker, or a cluster shared by the suites of this config whose brokers may act as
    brokers towards each other (CLUSTER_ACTION for ``PEER_PRINCIPAL``; without it a transaction's
    offsets never become stable on a group coordinator of another broker)."""
    broker = factory(SECURED)
    if isinstance(broker, ClusterUnderTest):
        binding = AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, PEER_PRINCIPAL, "*",
                             AclOperation.CLUSTER_ACTION, AclPermissionType.ALLOW)
        client = admin(broker, "admin")
        for future in client.create_acls([binding], request_timeout=CLIENT_TIMEOUT_S).values():
            future.result(timeout=CLIENT_TIMEOUT_S)
        wait_described_everywhere(broker, binding)
    return broker


def user() -> str:
    return f"u{uuid.uuid4().hex[:8]}"


def admin(broker: BrokerUnderTest, name: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap, "client.id": f"principal:{name}"})


def allow(broker: BrokerUnderTest, name: str, rtype: ResourceType, resource: str, op: AclOperation,
          pattern: ResourcePatternType = ResourcePatternType.LITERAL) -> None:
    binding = AclBinding(rtype, resource, pattern, f"User:{name}", "*", op, AclPermissionType.ALLOW)
    client = admin(broker, "admin")  # kept alive until its futures are done
    for future in client.create_acls([binding], request_timeout=CLIENT_TIMEOUT_S).values():
        future.result(timeout=CLIENT_TIMEOUT_S)
    wait_described_everywhere(broker, binding)


def wait_described_everywhere(broker: BrokerUnderTest, acl: AclBinding | Mapping[str, object], *,
                              described: bool = True, listener: str | None = None,
                              client_conf: Mapping[str, str] | None = None) -> None:
    """Until every broker process behind ``broker`` describes ``acl`` (or, with ``described``
    False, no longer does), asked on the wire one process at a time: an admin client may send
    DescribeAcls to any broker it knows. ``acl``: a binding, or the DescribeAclsRequest filter
    fields of one (an operation confluent-kafka has no name for, such as TWO_PHASE_COMMIT).
    Asked on ``bootstrap`` as ``User:admin`` of the tests' principal builder, or on the
    ``listener`` named with ``client_conf``'s security settings (a super user's)."""
    fields = describe_filter(acl) if isinstance(acl, AclBinding) else dict(acl)
    for process in processes_of(broker):
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while _describes(process, fields, listener, client_conf or {}) != described:
            assert time.monotonic() < deadline, (f"{process.bootstrap} still "
                                                 f"{'does not describe' if described else 'describes'} {acl}")
            time.sleep(0.1)


def describe_filter(binding: AclBinding) -> dict[str, object]:
    """The DescribeAclsRequest fields that match exactly ``binding``."""
    return {"resource_type_filter": _code(binding.restype), "resource_name_filter": binding.name,
            "pattern_type_filter": _code(binding.resource_pattern_type), "principal_filter": binding.principal,
            "host_filter": binding.host, "operation": _code(binding.operation),
            "permission_type": _code(binding.permission_type)}


def _code(field: object) -> int:
    """The wire code of a binding's enum field (the stubs also allow the name or the code that
    confluent-kafka turns into the enum when the binding is built)."""
    return int(getattr(field, "value", field))  # type: ignore[call-overload]


def _describes(process: OnceStreamBroker | ClusterBroker, fields: Mapping[str, object], listener: str | None,
               client_conf: Mapping[str, str]) -> bool:
    host, port = process.host, process.port
    if listener is not None:
        host, port = parse_bootstrap(process.listener_bootstrap(listener))
    with BrokerConnection(host, port, client_id="principal:admin", ssl_context=ssl_context_for(dict(client_conf)),
                          sasl=SaslCredentials.from_config(client_conf)) as conn:
        answer = conn.call(DESCRIBE_ACLS, lambda m: m.DescribeAclsRequest(**fields))
    return bool(answer.resources)


def new_topic(broker: BrokerUnderTest, prefix: str, partitions: int = 1) -> str:
    topic = unique_topic(prefix)
    client = admin(broker, "admin")
    futures = client.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    futures[topic].result(timeout=CLIENT_TIMEOUT_S)
    return topic


def wire(broker: BrokerUnderTest, name: str, max_versions: dict[int, int] | None = None, *,
         group: str | None = None, transactional_id: str | None = None,
         process: OnceStreamBroker | ClusterBroker | None = None) -> BrokerConnection:
    """A raw connection acting as ``User:NAME`` (``max_versions`` caps negotiated versions): to
    the coordinator of ``group`` or of ``transactional_id`` when one is named (on a cluster the
    other brokers answer NOT_COORDINATOR; found as the super user, whom no ACL stops), else to
    ``process`` (one of ``processes_of(broker)``), else to the broker (a cluster's first)."""
    host, port = (process or broker).host, (process or broker).port
    if group is not None or transactional_id is not None:
        key, key_type = (group, GROUP_KEY) if group is not None else (transactional_id, TRANSACTION_KEY)
        host, port = find_coordinator(f"{host}:{port}", str(key), key_type, client_id="principal:admin")
    return BrokerConnection(host, port, client_id=f"principal:{name}", max_versions=max_versions)


def call_coordinator(broker: BrokerUnderTest, name: str, api_key: int, make: Callable[[Any], Any], *,
                     group: str | None = None, transactional_id: str | None = None) -> Any:
    """``make``'s request sent as ``User:NAME`` to the coordinator of ``group`` or
    ``transactional_id`` (``wire``), asked again while the answer is NOT_COORDINATOR, as Kafka's
    clients do: a cluster broker's FindCoordinator answer may be one lease round stale."""
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while True:
        with wire(broker, name, group=group, transactional_id=transactional_id) as conn:
            answer = conn.call(api_key, make)
        if answer.error_code != ErrorCode.not_coordinator or time.monotonic() > deadline:
            return answer
        time.sleep(0.1)


def code_of(exc: pytest.ExceptionInfo) -> int:
    return exc.value.args[0].code()


def produce_one(broker: BrokerUnderTest, name: str, topic: str, **conf: object) -> KafkaError | None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "client.id": f"principal:{name}",
                         "message.timeout.ms": int(T * 1000), **conf})
    reports: list[KafkaError | None] = []
    producer.produce(topic, b"v", partition=0, on_delivery=lambda err, msg: reports.append(err))
    producer.flush(CLIENT_TIMEOUT_S)
    [report] = reports
    return report
