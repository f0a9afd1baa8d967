"""ACLs through confluent-kafka's AdminClient (issue 14 point 4): CreateAcls, DescribeAcls with
ANY/MATCH/LITERAL/PREFIXED filters and DeleteAcls round-trip; only a principal with ALTER on
the cluster may change them; they survive a broker SIGKILL and are enforced after it.

Identities come from the test tree's principal builder plugged in with ``principal.builder.class``
(tests/support/principals.py: client.id ``principal:NAME`` -> ``User:NAME``);
tests/interop/test_sasl_ssl.py checks ACLs on real SASL principals."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kio.schema.errors import ErrorCode

from oncestream.client.common.connection import BrokerConnection
from oncestream.protocol.api_keys import CREATE_ACLS, DELETE_ACLS, DESCRIBE_ACLS
from tests.support.acl import start_secured, wait_described_everywhere
from tests.support.clients import CLIENT_TIMEOUT_S, unique_topic
from tests.support.cluster_kind import BrokerUnderTest

pytestmark = pytest.mark.interop

def admin_as(bootstrap: str, user: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "client.id": f"principal:{user}"})


@pytest.fixture(scope="module")
def secured(module_our_broker_factory: Callable[..., BrokerUnderTest]) -> BrokerUnderTest:
    """The module's broker with the authorizer (``start_secured``): under the ``cluster`` kind, a
    cluster the ACL suites share."""
    return start_secured(module_our_broker_factory)


def create(admin: AdminClient, *bindings: AclBinding) -> None:
    for future in admin.create_acls(list(bindings), request_timeout=CLIENT_TIMEOUT_S).values():
        future.result(timeout=CLIENT_TIMEOUT_S)


def describe(admin: AdminClient, acl_filter: AclBindingFilter) -> set[AclBinding]:
    return set(admin.describe_acls(acl_filter, request_timeout=CLIENT_TIMEOUT_S).result(timeout=CLIENT_TIMEOUT_S))


def everything_on(name: str | None, pattern: ResourcePatternType = ResourcePatternType.ANY) -> AclBindingFilter:
    return AclBindingFilter(ResourceType.ANY, name, pattern, None, None, AclOperation.ANY, AclPermissionType.ANY)  # type: ignore[arg-type]  # the stub types name/principal/host as str: None means any


def test_create_describe_delete_round_trip(secured: BrokerUnderTest) -> None:
    admin = admin_as(secured.bootstrap, "admin")
    topic = unique_topic("acl-rt")
    read = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*",
                      AclOperation.READ, AclPermissionType.ALLOW)
    deny = AclBinding(ResourceType.TOPIC, topic[:8], ResourcePatternType.PREFIXED, "User:bob", "10.1.2.3",
                      AclOperation.WRITE, AclPermissionType.DENY)
    group = AclBinding(ResourceType.GROUP, f"g-{topic}", ResourcePatternType.LITERAL, "User:alice", "*",
                       AclOperation.READ, AclPermissionType.ALLOW)
    create(admin, read, deny, group)
    for binding in (read, deny, group):
        wait_described_everywhere(secured, binding)  # the admin client may ask any broker

    assert describe(admin, everything_on(topic, ResourcePatternType.LITERAL)) == {read}
    # MATCH: every ACL that applies to the name, the PREFIXED one included.
    assert describe(admin, everything_on(topic, ResourcePatternType.MATCH)) == {read, deny}
    by_principal = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:alice", None,  # type: ignore[arg-type]  # the stub types name/principal/host as str: None means any
                                    AclOperation.ANY, AclPermissionType.ANY)
    assert {read, group} <= describe(admin, by_principal)

    filt = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.MATCH, None, None,  # type: ignore[arg-type]  # the stub types name/principal/host as str: None means any
                            AclOperation.ANY, AclPermissionType.DENY)
    [(_, future)] = admin.delete_acls([filt], request_timeout=CLIENT_TIMEOUT_S).items()
    assert set(future.result(timeout=CLIENT_TIMEOUT_S)) == {deny}
    wait_described_everywhere(secured, deny, described=False)
    assert describe(admin, everything_on(topic, ResourcePatternType.MATCH)) == {read}


def test_only_alter_on_the_cluster_may_change_acls(secured: BrokerUnderTest) -> None:
    alice = admin_as(secured.bootstrap, "alice")
    binding = AclBinding(ResourceType.TOPIC, unique_topic("acl-self"), ResourcePatternType.LITERAL, "User:alice",
                         "*", AclOperation.ALL, AclPermissionType.ALLOW)
    with pytest.raises(KafkaException) as refused:
        create(alice, binding)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # librdkafka drops DescribeAcls' top-level error (it yields an empty list): read the wire.
    with BrokerConnection(secured.host, secured.port, client_id="principal:alice") as conn:
        answer = conn.call(DESCRIBE_ACLS, lambda m: m.DescribeAclsRequest(
            resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter=None,
            host_filter=None, operation=1, permission_type=1))
    assert answer.error_code == ErrorCode.cluster_authorization_failed
    assert answer.resources == ()

    carol_alters = AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:carol", "*",
                              AclOperation.ALTER, AclPermissionType.ALLOW)
    create(admin_as(secured.bootstrap, "admin"), carol_alters)
    wait_described_everywhere(secured, carol_alters)  # carol's admin client may ask any broker
    create(admin_as(secured.bootstrap, "carol"), binding)  # ALTER on the cluster is enough
    assert binding in describe(admin_as(secured.bootstrap, "admin"), everything_on(binding.name))


def test_invalid_binding_gets_invalid_request(secured: BrokerUnderTest) -> None:
    """A cluster ACL (librdkafka calls the type BROKER) must name the literal "kafka-cluster"."""
    bad = AclBinding(ResourceType.BROKER, "not-the-cluster", ResourcePatternType.LITERAL, "User:alice", "*",
                     AclOperation.ALTER, AclPermissionType.ALLOW)
    with pytest.raises(KafkaException) as refused:
        create(admin_as(secured.bootstrap, "admin"), bad)
    assert refused.value.args[0].code() == KafkaError.INVALID_REQUEST


def test_acls_survive_sigkill_and_are_enforced_after_it(module_our_broker_factory: Callable[..., BrokerUnderTest]
                                                         ) -> None:
    """SIGKILL of the broker (every broker of a cluster: its ACLs are PostgreSQL's), then a start
    on the same ports: the ACL is described and enforced."""
    broker = start_secured(module_our_broker_factory)
    admin = admin_as(broker.bootstrap, "admin")
    topic = unique_topic("acl-kill")
    binding = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*",
                         AclOperation.DESCRIBE, AclPermissionType.ALLOW)
    create(admin, binding)
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(
        timeout=CLIENT_TIMEOUT_S)
    broker.restart(crash=True)  # SIGKILL, then start on the same port and data dir (a cluster: metadata store)
    assert describe(admin_as(broker.bootstrap, "admin"), everything_on(topic)) == {binding}
    seen = admin_as(broker.bootstrap, "alice").list_topics(topic, timeout=CLIENT_TIMEOUT_S).topics[topic]
    assert seen.error is None
    assert len(seen.partitions) == 2
    hidden = admin_as(broker.bootstrap, "bob").list_topics(topic, timeout=CLIENT_TIMEOUT_S).topics[topic]
    assert hidden.error is not None
    assert hidden.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_acl_apis_without_an_authorizer_answer_security_disabled(
        module_our_broker_factory: Callable[..., BrokerUnderTest]) -> None:
    broker = module_our_broker_factory()
    binding = AclBinding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:alice", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    with pytest.raises(KafkaException) as refused:
        create(admin_as(broker.bootstrap, "admin"), binding)
    assert refused.value.args[0].code() == KafkaError.SECURITY_DISABLED


def test_oncestream_admin_acl_methods_round_trip(secured: BrokerUnderTest) -> None:
    """Our own Admin client: create_acls / describe_acls / delete_acls, shaped like confluent's."""
    from oncestream.client.admin import admin_acls as ours
    from oncestream.client.admin.admin import Admin
    from oncestream.client.common.errors import KafkaException as OursKafkaException

    group = unique_topic("acl-ours")
    binding = ours.AclBinding(ours.ResourceType.GROUP, group, ours.ResourcePatternType.PREFIXED, "User:dave", "*",
                              ours.AclOperation.READ, ours.AclPermissionType.ALLOW)
    on_group = ours.AclBindingFilter(ours.ResourceType.GROUP, group, ours.ResourcePatternType.ANY)
    with Admin({"bootstrap.servers": secured.bootstrap, "client.id": "principal:admin"}) as admin:
        assert admin.create_acls([binding]) == {binding: None}
        assert admin.describe_acls(on_group) == [binding]
        assert admin.delete_acls([on_group]) == {on_group: [binding]}
        assert admin.describe_acls(on_group) == []
    with Admin({"bootstrap.servers": secured.bootstrap, "client.id": "principal:dave"}) as admin:
        [error] = admin.create_acls([binding]).values()
        assert error is not None
        assert error.code() == ErrorCode.cluster_authorization_failed
        with pytest.raises(OursKafkaException) as refused:
            admin.describe_acls(on_group)
        assert refused.value.args[0].code() == ErrorCode.cluster_authorization_failed


def test_malformed_acl_requests_get_error_codes_and_the_broker_keeps_serving(secured: BrokerUnderTest) -> None:
    """Out-of-range enum values in filters and bindings are INVALID_REQUEST, never a crash."""
    with BrokerConnection(secured.host, secured.port, client_id="principal:admin") as conn:
        described = conn.call(DESCRIBE_ACLS, lambda m: m.DescribeAclsRequest(
            resource_type_filter=99, resource_name_filter=None, pattern_type_filter=-7, principal_filter=None,
            host_filter=None, operation=120, permission_type=1))
        assert described.error_code == ErrorCode.invalid_request
        created = conn.call(CREATE_ACLS, lambda m: m.CreateAclsRequest(creations=(
            m.AclCreation(resource_type=2, resource_name="t", resource_pattern_type=4, principal="User:x",
                          host="*", operation=-1, permission_type=3),
            m.AclCreation(resource_type=2, resource_name="t" * 1000, resource_pattern_type=2, principal="x",
                          host="", operation=3, permission_type=3))))
        assert [r.error_code for r in created.results] == [ErrorCode.invalid_request] * 2
        deleted = conn.call(DELETE_ACLS, lambda m: m.DeleteAclsRequest(filters=(
            m.DeleteAclsFilter(resource_type_filter=0, resource_name_filter=None, pattern_type_filter=1,
                               principal_filter=None, host_filter=None, operation=1, permission_type=1),)))
        assert [r.error_code for r in deleted.filter_results] == [ErrorCode.invalid_request]
    assert secured.is_alive()
    assert admin_as(secured.bootstrap, "admin").list_topics(timeout=CLIENT_TIMEOUT_S).topics is not None


def test_kafka_python_acl_round_trip_and_refusal(secured: BrokerUnderTest) -> None:
    """kafka-python's admin client (which, unlike librdkafka, surfaces DescribeAcls' error)."""
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePattern,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KpResourceType
    from kafka.errors import ClusterAuthorizationFailedError

    topic = unique_topic("acl-kp")
    acl = ACL("User:erin", "*", ACLOperation.WRITE, ACLPermissionType.DENY,
              ResourcePattern(KpResourceType.TOPIC, topic, ACLResourcePatternType.LITERAL))
    on_topic = ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                         ResourcePatternFilter(KpResourceType.TOPIC, topic, ACLResourcePatternType.ANY))
    admin = KafkaAdminClient(bootstrap_servers=secured.bootstrap, client_id="principal:admin")
    try:
        created = admin.create_acls([acl])
        assert created["failed"] == []
        assert len(created["succeeded"]) == 1
        described, error = admin.describe_acls(on_topic)
        assert error.errno == 0
        assert [(a.principal, a.operation, a.permission_type) for a in described] == [
            ("User:erin", ACLOperation.WRITE, ACLPermissionType.DENY)]
        [(_, deleted, delete_error)] = admin.delete_acls([on_topic])
        assert delete_error.errno == 0
        assert len(deleted) == 1
    finally:
        admin.close()
    erin = KafkaAdminClient(bootstrap_servers=secured.bootstrap, client_id="principal:erin")
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            erin.describe_acls(on_topic)
    finally:
        erin.close()
