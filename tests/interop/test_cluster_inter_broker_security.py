"""Security on a secured cluster, and brokers calling each other over their secured listener (issue 22, point 6).

One cluster for the module: three ``oncestream broker`` processes whose listeners are
``SECURE`` (SASL_SSL: PLAIN for the bootstrap admin, SCRAM-SHA-512 for everyone else) and
``TLS`` (SSL, a client certificate required), with ACLs (``User:admin`` the only super user).
The brokers reach each other on ``SECURE`` (``inter.broker.listener.name``) with SCRAM-SHA-512 as
``User:broker`` (``sasl.mechanism.inter.broker.protocol``, its password in the listener's JAAS
config). That user is created through node 1 once the cluster runs, and may act as a broker only
through the CLUSTER_ACTION ACL created through node 1 too: every forward checks both on another
broker. librdkafka is the client throughout; our client only where librdkafka cannot go (Produce
v12, transaction version 2).

- A librdkafka transactional producer whose transaction coordinator is another broker than its
  consumer group's coordinator commits and aborts with send_offsets_to_transaction: the
  transaction coordinator forwards WriteTxnMarkers of the group's offsets partition to the group
  coordinator over ``SECURE``. The group's committed offset is the committed transaction's, and a
  read_committed consumer sees exactly the committed records.
- Our producer with transaction version 2 (Produce v12: no AddPartitionsToTxn from the client)
  writes only to partitions led by brokers other than its transaction coordinator, so each of
  those brokers adds the partition with AddPartitionsToTxn to the coordinator over ``SECURE``.
  librdkafka's read_committed consumer sees exactly the committed records.
- An ACL created through node 1 (a DENY) is enforced by the brokers leading the partitions,
  TOPIC_AUTHORIZATION_FAILED for librdkafka; a SCRAM user created through node 1 authenticates
  on nodes 2 and 3; the ``TLS`` listener carries a librdkafka transaction (principal from the
  client certificate).

On the code before the inter-broker keys (every peer request on the first listener, without TLS
or SASL) the first two tests fail: the forwards never get through.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kio.schema.errors import ErrorCode

from oncestream.client import Producer as OurProducer
from oncestream.client.common.connection import BrokerConnection
from oncestream.client.common.sasl import SaslCredentials
from oncestream.client.common.tls import ssl_context_for
from oncestream.protocol.api_keys import FIND_COORDINATOR
from oncestream.protocol.codec import build
from tests.support.acl import AUTHORIZER
from tests.support.certs import Pki
from tests.support.clients import CLIENT_TIMEOUT_S
from tests.support.cluster import Cluster, ClusterBroker
from tests.support.narrow import message_value, present
from tests.support.postgres import PostgresServer, create_database
from tests.support.sasl import plain_jaas
from tests.support.seaweedfs import SeaweedServer, clean_environ
from tests.support.secured_roundtrips import librdkafka_roundtrip

pytestmark = pytest.mark.interop

SECURE, TLS = "SECURE", "TLS"
ADMIN_PASSWORD = "admin-secret"
BROKER_USER, BROKER_PASSWORD = "broker", "broker-secret"
ALICE, ALICE_PASSWORD = "alice", "alice-secret"
PREFIX = "csec-"  # topics, groups and transactional ids alice may use
MECHANISM = "SCRAM-SHA-512"
WAIT_S = 60.0  # a bound on a hang only (a change reaches the other brokers by NOTIFY, or a poll within 1 s)
GROUP_KEY, TRANSACTION_KEY = 0, 1  # FindCoordinator key types


def _cluster_config(pki: Pki) -> dict[str, str]:
    return {
        "listeners": f"{SECURE}://127.0.0.1:0,{TLS}://127.0.0.1:0",
        "listener.security.protocol.map": f"{SECURE}:SASL_SSL,{TLS}:SSL",
        "inter.broker.listener.name": SECURE,
        "sasl.mechanism.inter.broker.protocol": MECHANISM,
        "listener.name.secure.sasl.enabled.mechanisms": f"PLAIN,{MECHANISM}",
        "listener.name.secure.plain.sasl.jaas.config": plain_jaas({"admin": ADMIN_PASSWORD}),
        "listener.name.secure.scram-sha-512.sasl.jaas.config":
            f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{BROKER_USER}" '
            f'password="{BROKER_PASSWORD}";',
        "listener.name.tls.ssl.client.auth": "required",
        **pki.broker_stores(),
        **AUTHORIZER,  # super.users=User:admin: the brokers' own user is not one
        "connection.failed.authentication.delay.ms": "20",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
        "group.initial.rebalance.delay.ms": "0",
    }


def _sasl(pki: Pki, mechanism: str, user: str, password: str) -> dict[str, str]:
    return {"security.protocol": "SASL_SSL", "ssl.ca.location": str(pki.ca), "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password}


def _admin_conf(pki: Pki) -> dict[str, str]:
    return _sasl(pki, "PLAIN", "admin", ADMIN_PASSWORD)


def _alice_conf(pki: Pki) -> dict[str, str]:
    return _sasl(pki, MECHANISM, ALICE, ALICE_PASSWORD)


def _bootstrap(cluster: Cluster, listener: str = SECURE) -> str:
    return ",".join(broker.listener_bootstrap(listener) for broker in cluster.brokers)


def _allow(admin: AdminClient, binding: AclBinding) -> None:
    for future in admin.create_acls([binding], request_timeout=CLIENT_TIMEOUT_S).values():
        future.result(timeout=CLIENT_TIMEOUT_S)


def _prefixed(principal: str, rtype: ResourceType, prefix: str = PREFIX) -> AclBinding:
    return AclBinding(rtype, prefix, ResourcePatternType.PREFIXED, principal, "*", AclOperation.ALL,
                      AclPermissionType.ALLOW)


def _add_scram_user(admin: AdminClient, user: str, password: str) -> None:
    upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                          password.encode())
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(CLIENT_TIMEOUT_S)


def _authenticates(bootstrap: str, conf: Mapping[str, str]) -> bool:
    """Whether a librdkafka client of ``bootstrap`` (one broker) logs in with ``conf``: True once
    Metadata is answered, False on an authentication failure."""
    errors: list[KafkaError] = []
    client = Producer({"bootstrap.servers": bootstrap, **conf, "error_cb": errors.append})
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while not any(error.code() == KafkaError._AUTHENTICATION for error in errors):
        try:
            client.list_topics(timeout=1)
            return True
        except KafkaException:
            assert time.monotonic() < deadline, f"{bootstrap}: neither authenticated nor refused"
            client.poll(0)  # serves error_cb
    return False


def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, postgres: PostgresServer, seaweedfs: SeaweedServer,
            pki: Pki) -> Iterator[Cluster]:
    """The secured cluster of the module docstring, with ``User:broker`` and ``User:alice`` created
    and authorized through node 1, and alice able to log in on every broker."""
    log_dir: Path = tmp_path_factory.mktemp("cluster-security") / "logs"
    metadata_store = postgres.url(create_database(postgres, prefix="sec"))
    uri = seaweedfs.uri(f"sec-{uuid.uuid4().hex[:10]}")
    environ = clean_environ(**seaweedfs.env())
    config = _cluster_config(pki)
    running = Cluster([ClusterBroker(node_id, metadata_store, uri, environ, log_dir, config) for node_id in (1, 2, 3)],
                      metadata_store, uri, environ)
    try:
        for broker in running.brokers:
            broker.start()
        running.wait_converged(_admin_conf(pki))
        admin = AdminClient({"bootstrap.servers": running.brokers[0].listener_bootstrap(SECURE), **_admin_conf(pki)})
        _add_scram_user(admin, BROKER_USER, BROKER_PASSWORD)
        _add_scram_user(admin, ALICE, ALICE_PASSWORD)
        _allow(admin, AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL,
                                 f"User:{BROKER_USER}", "*", AclOperation.CLUSTER_ACTION, AclPermissionType.ALLOW))
        for rtype in (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID):
            _allow(admin, _prefixed(f"User:{ALICE}", rtype))
        for broker in running.brokers:
            _until(lambda b=broker: _authenticates(b.listener_bootstrap(SECURE), _alice_conf(pki)),  # type: ignore[misc]
                   f"alice cannot log in on node {broker.node_id}")
        yield running
    finally:
        running.kill_all()


def _create_topic(cluster: Cluster, pki: Pki, partitions: int) -> str:
    topic = f"{PREFIX}{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": _bootstrap(cluster), **_admin_conf(pki)})
    created = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)],
                                  request_timeout=CLIENT_TIMEOUT_S)
    created[topic].result(timeout=CLIENT_TIMEOUT_S)
    return topic


def _leaders(cluster: Cluster, pki: Pki, topic: str, partitions: int) -> dict[int, int]:
    """Partition -> leader node id, as librdkafka's Metadata says once every partition has one."""
    admin = AdminClient({"bootstrap.servers": _bootstrap(cluster), **_admin_conf(pki)})
    leaders: dict[int, int] = {}

    def known() -> bool:
        listed = admin.list_topics(topic, timeout=CLIENT_TIMEOUT_S).topics[topic].partitions
        leaders.update({p: meta.leader for p, meta in listed.items() if meta.leader >= 0})
        return len(leaders) == partitions

    _until(known, f"no leader for every partition of {topic}")
    return leaders


def _coordinator(cluster: Cluster, pki: Pki, key_type: int, key: str) -> int:
    """The node FindCoordinator names for ``key`` (asked on node 1 over SECURE as admin)."""
    host, port = cluster.brokers[0].listener_bootstrap(SECURE).rsplit(":", 1)
    tls = ssl_context_for({"security.protocol": "sasl_ssl", "ssl.ca.location": str(pki.ca)})
    node: list[int] = []

    def found() -> bool:
        with BrokerConnection(host, int(port), ssl_context=tls, sasl=SaslCredentials("PLAIN", "admin", ADMIN_PASSWORD)) as conn:
            response = conn.call(FIND_COORDINATOR, lambda m: build(
                m.FindCoordinatorRequest, key_type=key_type, coordinator_keys=(key,)))
        [answer] = response.coordinators
        if answer.error_code == ErrorCode.none:
            node.append(int(answer.node_id))
        return bool(node)

    _until(found, f"no coordinator for {key}")
    return node[0]


def _pick_id(cluster: Cluster, pki: Pki, key_type: int, wanted: Callable[[int], bool], what: str) -> tuple[str, int]:
    """A fresh id (with alice's prefix) whose coordinator satisfies ``wanted``, and that coordinator."""
    for _ in range(50):
        candidate = f"{PREFIX}{what}-{uuid.uuid4().hex[:8]}"
        node = _coordinator(cluster, pki, key_type, candidate)
        if wanted(node):
            return candidate, node
    raise AssertionError(f"no {what} id found whose coordinator suits the test")


def _read_committed(cluster: Cluster, pki: Pki, topic: str, partitions: list[int], count: int) -> dict[int, list[bytes]]:
    """``count`` records of ``partitions`` read by a read_committed librdkafka consumer (as alice),
    then a quiet second to show nothing more comes."""
    consumer = Consumer({"bootstrap.servers": _bootstrap(cluster), **_alice_conf(pki),
                         "group.id": f"{PREFIX}reader-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    seen: dict[int, list[bytes]] = {p: [] for p in partitions}
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    quiet_until = None
    try:
        while quiet_until is None or time.monotonic() < quiet_until:
            assert time.monotonic() < deadline, f"read {seen}, expected {count} records"
            msg = consumer.poll(0.2)
            if msg is not None:
                assert msg.error() is None, msg.error()
                seen[present(msg.partition(), "partition")].append(message_value(msg))
            if quiet_until is None and sum(map(len, seen.values())) >= count:
                quiet_until = time.monotonic() + 1.0
    finally:
        consumer.close()
    return seen


def test_markers_of_a_group_on_another_broker_are_forwarded_over_the_secured_listener(cluster: Cluster, pki: Pki) -> None:
    input_topic, output_topic = _create_topic(cluster, pki, 1), _create_topic(cluster, pki, 1)
    feeder = Producer({"bootstrap.servers": _bootstrap(cluster), **_alice_conf(pki)})
    for i in range(10):
        feeder.produce(input_topic, f"in-{i}".encode(), partition=0)
    assert feeder.flush(CLIENT_TIMEOUT_S) == 0
    transactional_id, txn_node = _pick_id(cluster, pki, TRANSACTION_KEY, lambda node: True, "txn")
    group, group_node = _pick_id(cluster, pki, GROUP_KEY, lambda node: node != txn_node, "group")

    producer = Producer({"bootstrap.servers": _bootstrap(cluster), **_alice_conf(pki),
                         "transactional.id": transactional_id})
    consumer = Consumer({"bootstrap.servers": _bootstrap(cluster), **_alice_conf(pki), "group.id": group,
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        producer.init_transactions(CLIENT_TIMEOUT_S)
        for n, (offset, commit) in enumerate(((4, True), (7, False), (10, True), (12, False))):
            producer.begin_transaction()
            for i in range(3):
                producer.produce(output_topic, f"t{n}-{i}".encode(), partition=0)
            producer.send_offsets_to_transaction([TopicPartition(input_topic, 0, offset)],
                                                 consumer.consumer_group_metadata(), CLIENT_TIMEOUT_S)
            if commit:
                producer.commit_transaction(CLIENT_TIMEOUT_S)
            else:
                producer.abort_transaction(CLIENT_TIMEOUT_S)

        def committed_offset() -> int:
            [position] = consumer.committed([TopicPartition(input_topic, 0)], timeout=CLIENT_TIMEOUT_S)
            return int(position.offset)

        _until(lambda: committed_offset() == 10,
               f"group {group} (node {group_node}) never got the offsets of the transactions of node {txn_node}: "
               f"committed {committed_offset()}")
    finally:
        consumer.close()
    committed = [f"t{n}-{i}".encode() for n in (0, 2) for i in range(3)]
    assert _read_committed(cluster, pki, output_topic, [0], len(committed)) == {0: committed}


def test_partitions_are_added_to_a_transaction_on_another_broker_over_the_secured_listener(
        cluster: Cluster, pki: Pki) -> None:
    partitions = 6
    topic = _create_topic(cluster, pki, partitions)
    leaders = _leaders(cluster, pki, topic, partitions)
    # A coordinator that leads none of the partitions written: every partition is added by the
    # leader, forwarding to the coordinator. Six partitions on three brokers leave some to choose.
    transactional_id, txn_node = _pick_id(cluster, pki, TRANSACTION_KEY,
                                          lambda node: any(leader != node for leader in leaders.values()), "tv2")
    written = sorted(p for p, leader in leaders.items() if leader != txn_node)
    producer = OurProducer({"bootstrap.servers": _bootstrap(cluster), **_alice_conf(pki),
                            "transactional.id": transactional_id, "message.timeout.ms": 30_000})
    expected: dict[int, list[bytes]] = {p: [] for p in written}
    try:
        producer.init_transactions(CLIENT_TIMEOUT_S)
        for n, commit in enumerate((True, False, True)):
            producer.begin_transaction()
            for p in written:
                producer.produce(topic, f"t{n}-p{p}".encode(), partition=p)
                if commit:
                    expected[p].append(f"t{n}-p{p}".encode())
            assert producer.flush(CLIENT_TIMEOUT_S) == 0
            if commit:
                producer.commit_transaction(CLIENT_TIMEOUT_S)
            else:
                producer.abort_transaction(CLIENT_TIMEOUT_S)
    finally:
        producer.close()
    assert _read_committed(cluster, pki, topic, written, sum(map(len, expected.values()))) == expected


def _produce_error(bootstrap: str, conf: Mapping[str, str], topic: str, partition: int) -> KafkaError | None:
    reports: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": bootstrap, **conf, "message.timeout.ms": 10_000})
    producer.produce(topic, b"v", partition=partition, on_delivery=lambda err, msg: reports.append(err))
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    return reports[0]


def test_a_deny_created_through_one_broker_is_enforced_by_the_others(cluster: Cluster, pki: Pki) -> None:
    partitions = 12
    topic = _create_topic(cluster, pki, partitions)
    leaders = _leaders(cluster, pki, topic, partitions)
    # One partition led by each broker but node 1, through which the ACL is created.
    targets = {leader: p for p, leader in sorted(leaders.items()) if leader != 1}
    assert targets, f"node 1 leads every partition of {topic}: {leaders}"
    bootstrap = _bootstrap(cluster)
    for node, partition in targets.items():
        assert _produce_error(bootstrap, _alice_conf(pki), topic, partition) is None, f"node {node} refused alice"

    admin = AdminClient({"bootstrap.servers": cluster.brokers[0].listener_bootstrap(SECURE), **_admin_conf(pki)})
    deny = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, f"User:{ALICE}", "*",
                      AclOperation.WRITE, AclPermissionType.DENY)
    _allow(admin, deny)
    for node, partition in targets.items():
        def refused(p: int = partition) -> bool:
            error = _produce_error(bootstrap, _alice_conf(pki), topic, p)
            return error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

        _until(refused, f"node {node} does not enforce the DENY created through node 1")


def test_a_scram_user_created_through_one_broker_logs_in_on_the_others(cluster: Cluster, pki: Pki) -> None:
    name, password = f"u{uuid.uuid4().hex[:8]}", "carol-pw"
    login = _sasl(pki, MECHANISM, name, password)
    assert not _authenticates(cluster.brokers[2].listener_bootstrap(SECURE), login), "logged in before creation"
    admin = AdminClient({"bootstrap.servers": cluster.brokers[0].listener_bootstrap(SECURE), **_admin_conf(pki)})
    _add_scram_user(admin, name, password)
    for broker in cluster.brokers[1:]:
        _until(lambda b=broker: _authenticates(b.listener_bootstrap(SECURE), login),  # type: ignore[misc]
               f"node {broker.node_id} does not know the SCRAM user created through node 1")
        wrong = _sasl(pki, MECHANISM, name, "wrong")
        assert not _authenticates(broker.listener_bootstrap(SECURE), wrong), f"node {broker.node_id}: wrong password"


def test_the_tls_listener_carries_a_transaction(cluster: Cluster, pki: Pki) -> None:
    """alice's certificate makes her ``User:CN=alice`` on the TLS listener; she may use the
    module's topics, and the groups and transactional ids of the round trip, once ACLs created
    over SECURE say so."""
    admin = AdminClient({"bootstrap.servers": _bootstrap(cluster), **_admin_conf(pki)})
    for rtype, prefix in ((ResourceType.TOPIC, PREFIX), (ResourceType.GROUP, "g-"),
                          (ResourceType.TRANSACTIONAL_ID, "ck-txn-")):  # secured_roundtrips' names
        _allow(admin, _prefixed("User:CN=alice", rtype, prefix))
    topic = _create_topic(cluster, pki, 1)
    conf = {"bootstrap.servers": _bootstrap(cluster, TLS), "security.protocol": "SSL",
            "ssl.ca.location": str(pki.ca), "ssl.certificate.location": str(pki.alice.cert),
            "ssl.key.location": str(pki.alice.key)}
    assert librdkafka_roundtrip(conf, topic, 3) == [f"plain-{i}".encode() for i in range(3)] + [
        f"txn-{i}".encode() for i in range(5)]
