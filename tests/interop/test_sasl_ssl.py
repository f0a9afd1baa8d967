"""SASL over TLS (issue 14: TLS listeners and SASL together) and ACLs on SASL principals.

One broker for the module with three listeners: SASL_SSL (TLS handshake, then SASL PLAIN /
SCRAM-SHA-256 / SCRAM-SHA-512), MTLS (SASL_SSL whose clients must also present a certificate:
the principal is still the SASL one, as in Kafka) and SASLP (SASL_PLAINTEXT). ACLs are on:
``User:admin`` is a super user. librdkafka, kafka-python and our client produce, consume and
commit a transaction over SASL_SSL with each mechanism; an ACL for ``User:alice`` allows and
denies what it says over SASL_PLAINTEXT.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError as CkKafkaError
from confluent_kafka import Producer as CkProducer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from oncestream.client.common.connection import BrokerConnection, parse_bootstrap
from oncestream.client.common.sasl import SaslClientError, SaslCredentials
from oncestream.client.common.tls import ssl_context_for
from tests.support.acl import AUTHORIZER, wait_described_everywhere
from tests.support.certs import Pki
from tests.support.cluster_kind import BrokerUnderTest
from tests.support.sasl import (
    ALL_MECHANISMS,
    MECHANISM_USERS,
    PLAIN_USERS,
    plain_jaas,
    sasl_broker_of_kind,
)
from tests.support.secured_roundtrips import (
    kafka_python_roundtrip,
    librdkafka_read_committed,
    librdkafka_roundtrip,
    oncestream_roundtrip,
)

pytestmark = pytest.mark.interop

TIMEOUT_S = 60.0
ADMIN = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
         "sasl.username": "admin", "sasl.password": PLAIN_USERS["admin"]}


@pytest.fixture(scope="module")
def broker(module_our_broker_factory: Callable[..., BrokerUnderTest], pki: Pki) -> BrokerUnderTest:
    """Our single broker, or a cluster whose brokers log in to each other on the first listener
    (SASL_SSL: TLS with the module's CA, then PLAIN as admin, a super user)."""
    jaas = plain_jaas(PLAIN_USERS)
    extra = {
        "listeners": "SASL_SSL://127.0.0.1:0,MTLS://127.0.0.1:0,SASLP://127.0.0.1:0",
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,MTLS:SASL_SSL,SASLP:SASL_PLAINTEXT",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": plain_jaas(PLAIN_USERS, login="admin"),
        "listener.name.mtls.plain.sasl.jaas.config": jaas,
        "listener.name.saslp.plain.sasl.jaas.config": jaas,
        "listener.name.mtls.ssl.client.auth": "required",
        **pki.broker_stores(),
        **AUTHORIZER,
        # The SASL users below may do everything they are not denied: this module tests
        # transport and identity; the ACL test denies explicitly.
        "allow.everyone.if.no.acl.found": "true",
    }
    admin_conf = {**ADMIN, "security.protocol": "SASL_SSL", "ssl.ca.location": str(pki.ca)}
    return sasl_broker_of_kind(module_our_broker_factory, extra, admin_conf)


def _sasl_ssl_conf(broker: BrokerUnderTest, pki: Pki, mechanism: str, listener: str = "SASL_SSL") -> dict[str, str]:
    user, password = MECHANISM_USERS[mechanism]
    return {"bootstrap.servers": broker.listener_bootstrap(listener), "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(pki.ca), "sasl.mechanism": mechanism, "sasl.username": user,
            "sasl.password": password}




# -- librdkafka, kafka-python and our client over SASL_SSL ----------------------------------------
@pytest.mark.parametrize("mechanism", ALL_MECHANISMS)
def test_librdkafka_produces_consumes_and_commits_a_transaction_over_sasl_ssl(
        broker: BrokerUnderTest, pki: Pki, mechanism: str) -> None:
    topic = f"saslssl-ck-{uuid.uuid4().hex[:8]}"
    assert librdkafka_roundtrip(_sasl_ssl_conf(broker, pki, mechanism), topic, 10) == [
        f"plain-{i}".encode() for i in range(10)] + [f"txn-{i}".encode() for i in range(5)]


@pytest.mark.parametrize("mechanism", ALL_MECHANISMS)
def test_kafka_python_produces_consumes_and_commits_a_transaction_over_sasl_ssl(
        broker: BrokerUnderTest, pki: Pki, mechanism: str) -> None:
    user, password = MECHANISM_USERS[mechanism]
    args = {"security_protocol": "SASL_SSL", "ssl_cafile": str(pki.ca), "ssl_check_hostname": True,
            "sasl_mechanism": mechanism, "sasl_plain_username": user, "sasl_plain_password": password}
    topic = f"saslssl-kp-{uuid.uuid4().hex[:8]}"
    assert kafka_python_roundtrip(broker.listener_bootstrap("SASL_SSL"), args, topic) == [
        f"kp-{i}".encode() for i in range(5)]


@pytest.mark.parametrize("mechanism", ALL_MECHANISMS)
def test_our_client_produces_consumes_and_commits_a_transaction_over_sasl_ssl(
        broker: BrokerUnderTest, pki: Pki, mechanism: str) -> None:
    # The MTLS listener wants a client certificate as well: TLS with alice's certificate, then SASL.
    conf = {**_sasl_ssl_conf(broker, pki, mechanism, "MTLS"), "ssl.certificate.location": str(pki.alice.cert),
            "ssl.key.location": str(pki.alice.key)}
    topic = f"saslssl-os-{uuid.uuid4().hex[:8]}"
    values = oncestream_roundtrip(conf, topic)
    assert values == [f"os-{i}".encode() for i in range(5)]
    # ... and librdkafka reads the same over the other SASL_SSL listener.
    assert librdkafka_read_committed(_sasl_ssl_conf(broker, pki, mechanism), topic, 5) == values


def test_blocking_connection_does_tls_then_sasl_and_refuses_a_wrong_password(broker: BrokerUnderTest, pki: Pki) -> None:
    host, port = parse_bootstrap(broker.listener_bootstrap("SASL_SSL"))  # a cluster's first broker
    tls = ssl_context_for({"security.protocol": "sasl_ssl", "ssl.ca.location": str(pki.ca)})
    with BrokerConnection(host, port, ssl_context=tls,
                          sasl=SaslCredentials("SCRAM-SHA-512", "scram-alice", MECHANISM_USERS["SCRAM-SHA-512"][1])):
        pass
    with pytest.raises(SaslClientError):
        BrokerConnection(host, port, ssl_context=tls, sasl=SaslCredentials("SCRAM-SHA-512", "scram-alice", "no"))


# -- an ACL on a SASL principal (SASL_PLAINTEXT) --------------------------------------------------
def test_acl_on_a_sasl_principal_allows_and_denies_over_sasl_plaintext(broker: BrokerUnderTest, pki: Pki) -> None:
    """alice (PLAIN) may write the topic an ALLOW names and is refused the one a DENY names; the
    decision follows the SASL principal ``User:alice``, not the connection."""
    bootstrap = broker.listener_bootstrap("SASLP")
    allowed, denied = f"alice-ok-{uuid.uuid4().hex[:8]}", f"alice-no-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap, **ADMIN})
    for future in admin.create_topics([NewTopic(allowed, 1, 1), NewTopic(denied, 1, 1)]).values():
        future.result(TIMEOUT_S)
    bindings = [AclBinding(ResourceType.TOPIC, allowed, ResourcePatternType.LITERAL, "User:alice", "*",
                           AclOperation.WRITE, AclPermissionType.ALLOW),
                AclBinding(ResourceType.TOPIC, denied, ResourcePatternType.LITERAL, "User:alice", "*",
                           AclOperation.ALL, AclPermissionType.DENY)]
    for future in admin.create_acls(bindings, request_timeout=TIMEOUT_S).values():
        future.result(timeout=TIMEOUT_S)
    for binding in bindings:  # on every broker the producer may reach (a cluster's learn them from PostgreSQL)
        wait_described_everywhere(broker, binding, listener="SASLP", client_conf=ADMIN)

    alice = {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
             "sasl.username": "alice", "sasl.password": PLAIN_USERS["alice"]}
    outcomes: dict[str, object] = {}

    def record(err: CkKafkaError | None, msg: object) -> None:
        outcomes[msg.topic()] = None if err is None else err.code()  # type: ignore[attr-defined]

    producer = CkProducer({**alice, "message.timeout.ms": 10000, "enable.idempotence": False})
    producer.produce(allowed, b"yes", on_delivery=record)
    producer.produce(denied, b"no", on_delivery=record)
    assert producer.flush(TIMEOUT_S) == 0
    assert outcomes == {allowed: None, denied: CkKafkaError.TOPIC_AUTHORIZATION_FAILED}
    # The same ACLs do not bind admin (a super user) on the same listener.
    admin_conf = {**alice, "sasl.username": "admin", "sasl.password": PLAIN_USERS["admin"]}
    outcomes.clear()
    producer = CkProducer({**admin_conf, "message.timeout.ms": 10000})
    producer.produce(denied, b"admin", on_delivery=record)
    assert producer.flush(TIMEOUT_S) == 0
    assert outcomes == {denied: None}
    assert librdkafka_read_committed(admin_conf, allowed, 1) == [b"yes"]
    # On SASL_SSL with a client certificate the principal is still the SASL one (as Kafka): the
    # certificate's User:CN=alice has no ALLOW on the topic, SASL's User:admin is a super user.
    outcomes.clear()
    mtls_admin = {**_sasl_ssl_conf(broker, pki, "PLAIN", "MTLS"), "sasl.username": "admin",
                  "sasl.password": PLAIN_USERS["admin"], "ssl.certificate.location": str(pki.alice.cert),
                  "ssl.key.location": str(pki.alice.key)}
    producer = CkProducer({**mtls_admin, "message.timeout.ms": 10000})
    producer.produce(denied, b"admin-over-mtls", on_delivery=record)
    assert producer.flush(TIMEOUT_S) == 0
    assert outcomes == {denied: None}
