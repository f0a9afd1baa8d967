"""The ACL authorizer's decisions follow Kafka's StandardAuthorizer (issue 14 point 4): deny
wins, LITERAL / wildcard / PREFIXED patterns, super.users, host matching, implied operations
(DESCRIBE by READ/WRITE/DELETE/ALTER, DESCRIBE_CONFIGS by ALTER_CONFIGS),
allow.everyone.if.no.acl.found, authorizeByResourceType (KIP-679) and KIP-430 bit fields."""

from __future__ import annotations

import pytest

from oncestream.authz.authorizer import StandardAuthorizer, parse_super_users
from oncestream.authz.store import AclStore, AclStoreError
from oncestream.errors import InvalidRequestError
from oncestream.protocol.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    binding_from_wire,
)

Op, Perm, Pat, Res = AclOperation, AclPermissionType, PatternType, ResourceType
ALICE, BOB = "User:alice", "User:bob"
HOST = "10.0.0.1"


def acl(name: str, op: AclOperation = Op.READ, perm: AclPermissionType = Perm.ALLOW, *, principal: str = ALICE,
        host: str = "*", pattern: PatternType = Pat.LITERAL, rtype: ResourceType = Res.TOPIC) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def test_no_acl_means_denied_by_default_once_an_authorizer_is_configured() -> None:
    assert not StandardAuthorizer().authorize(ALICE, HOST, Op.READ, Res.TOPIC, "t")


def test_allow_everyone_if_no_acl_found_only_for_resources_without_any_acl() -> None:
    authz = StandardAuthorizer([acl("guarded", principal=BOB)], allow_everyone_if_no_acl_found=True)
    assert authz.authorize(ALICE, HOST, Op.WRITE, Res.TOPIC, "open")
    # An ACL exists on "guarded" (for someone else): the flag no longer applies there.
    assert not authz.authorize(ALICE, HOST, Op.READ, Res.TOPIC, "guarded")


def test_literal_allow_grants_only_its_operation_and_resource() -> None:
    authz = StandardAuthorizer([acl("t")])
    assert authz.authorize(ALICE, HOST, Op.READ, Res.TOPIC, "t")
    assert not authz.authorize(ALICE, HOST, Op.WRITE, Res.TOPIC, "t")
    assert not authz.authorize(ALICE, HOST, Op.READ, Res.TOPIC, "t2")
    assert not authz.authorize(BOB, HOST, Op.READ, Res.TOPIC, "t")
    assert not authz.authorize(ALICE, HOST, Op.READ, Res.GROUP, "t")


def test_deny_wins_over_allow() -> None:
    authz = StandardAuthorizer([acl("t", Op.ALL), acl("t", Op.WRITE, Perm.DENY)])
    assert authz.authorize(ALICE, HOST, Op.READ, Res.TOPIC, "t")
    assert not authz.authorize(ALICE, HOST, Op.WRITE, Res.TOPIC, "t")
    # A wildcard-principal DENY on a prefix overrides a literal ALLOW for the user.
    authz = StandardAuthorizer([acl("pay-1", Op.READ), acl("pay", Op.READ, Perm.DENY, principal="User:*",
                                                           pattern=Pat.PREFIXED)])
    assert not authz.authorize(ALICE, HOST, Op.READ, Res.TOPIC, "pay-1")


def test_prefixed_and_wildcard_patterns() -> None:
    authz = StandardAuthorizer([acl("orders-", Op.WRITE, pattern=Pat.PREFIXED), acl("*", Op.DESCRIBE, principal=BOB)])
    assert authz.authorize(ALICE, HOST, Op.WRITE, Res.TOPIC, "orders-eu")
    assert authz.authorize(ALICE, HOST, Op.WRITE, Res.TOPIC, "orders-")
    assert not authz.authorize(ALICE, HOST, Op.WRITE, Res.TOPIC, "orders")
    assert not authz.authorize(ALICE, HOST, Op.WRITE, Res.TOPIC, "xorders-eu")
    assert authz.authorize(BOB, HOST, Op.DESCRIBE, Res.TOPIC, "anything")
    # A literal ACL named like a prefix is not a prefix.
    assert not StandardAuthorizer([acl("orders-")]).authorize(ALICE, HOST, Op.READ, Res.TOPIC, "orders-eu")


def test_wildcard_principal_and_host_matching() -> None:
    authz = StandardAuthorizer([acl("t", principal="User:*", host=HOST)])
    assert authz.authorize(BOB, HOST, Op.READ, Res.TOPIC, "t")
    assert not authz.authorize(BOB, "10.0.0.2", Op.READ, Res.TOPIC, "t")
    denied_host = StandardAuthorizer([acl("t"), acl("t", perm=Perm.DENY, host="10.0.0.2")])
    assert denied_host.authorize(ALICE, HOST, Op.READ, Res.TOPIC, "t")
    assert not denied_host.authorize(ALICE, "10.0.0.2", Op.READ, Res.TOPIC, "t")


@pytest.mark.parametrize("granting", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER])
def test_describe_is_implied_by_read_write_delete_alter(granting: AclOperation) -> None:
    authz = StandardAuthorizer([acl("t", granting)])
    assert authz.authorize(ALICE, HOST, Op.DESCRIBE, Res.TOPIC, "t")


def test_describe_configs_is_implied_by_alter_configs_and_deny_is_not_widened() -> None:
    authz = StandardAuthorizer([acl("t", Op.ALTER_CONFIGS)])
    assert authz.authorize(ALICE, HOST, Op.DESCRIBE_CONFIGS, Res.TOPIC, "t")
    assert not authz.authorize(ALICE, HOST, Op.ALTER, Res.TOPIC, "t")
    # Kafka: a DENY READ does not deny DESCRIBE (implication only widens ALLOWs).
    authz = StandardAuthorizer([acl("t", Op.DESCRIBE), acl("t", Op.READ, Perm.DENY)])
    assert authz.authorize(ALICE, HOST, Op.DESCRIBE, Res.TOPIC, "t")
    assert not authz.authorize(ALICE, HOST, Op.READ, Res.TOPIC, "t")


def test_super_users_bypass_every_acl_even_deny() -> None:
    authz = StandardAuthorizer([acl("t", Op.ALL, Perm.DENY, principal="User:*")],
                               super_users=parse_super_users("User:admin; User:bob"))
    assert authz.authorize("User:admin", HOST, Op.WRITE, Res.TOPIC, "t")
    assert authz.authorize(BOB, HOST, Op.ALTER, Res.CLUSTER, "kafka-cluster")
    assert not authz.authorize(ALICE, HOST, Op.READ, Res.TOPIC, "t")


def test_authorize_any_topic_write_for_idempotent_producers() -> None:
    """KIP-679: WRITE on some topic is enough for an idempotent producer's InitProducerId."""
    assert StandardAuthorizer([acl("t", Op.WRITE)]).authorize_any(ALICE, HOST, Op.WRITE, Res.TOPIC)
    assert not StandardAuthorizer([acl("t", Op.READ)]).authorize_any(ALICE, HOST, Op.WRITE, Res.TOPIC)
    denied = StandardAuthorizer([acl("t", Op.WRITE), acl("*", Op.WRITE, Perm.DENY)])
    assert not denied.authorize_any(ALICE, HOST, Op.WRITE, Res.TOPIC)
    covered = StandardAuthorizer([acl("ab", Op.WRITE), acl("a", Op.WRITE, Perm.DENY, pattern=Pat.PREFIXED)])
    assert not covered.authorize_any(ALICE, HOST, Op.WRITE, Res.TOPIC)
    partly = StandardAuthorizer([acl("ab", Op.WRITE), acl("b", Op.WRITE, Perm.DENY, pattern=Pat.PREFIXED)])
    assert partly.authorize_any(ALICE, HOST, Op.WRITE, Res.TOPIC)


def test_authorized_operations_bit_field_kip_430() -> None:
    authz = StandardAuthorizer([acl("t", Op.READ), acl("t", Op.ALTER_CONFIGS)])
    bits = authz.authorized_operations(ALICE, HOST, Res.TOPIC, "t")
    expected = {Op.READ, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS}
    assert bits == sum(1 << int(op) for op in expected)


def test_filters_any_match_literal_prefixed() -> None:
    literal, prefixed, wildcard = acl("orders-eu"), acl("orders-", pattern=Pat.PREFIXED), acl("*")
    other = acl("orders-eu", Op.WRITE, principal=BOB)
    authz = StandardAuthorizer([literal, prefixed, wildcard, other])

    def names(f: AclBindingFilter) -> set[AclBinding]:
        return set(authz.matching(f))

    assert names(AclBindingFilter()) == {literal, prefixed, wildcard, other}
    assert names(AclBindingFilter(resource_name="orders-eu", pattern_type=Pat.MATCH)) == {literal, prefixed, wildcard, other}
    assert names(AclBindingFilter(resource_name="orders-eu", pattern_type=Pat.ANY)) == {literal, other}
    assert names(AclBindingFilter(pattern_type=Pat.PREFIXED)) == {prefixed}
    assert names(AclBindingFilter(resource_name="orders-eu", pattern_type=Pat.LITERAL, principal=BOB)) == {other}
    assert names(AclBindingFilter(operation=Op.WRITE)) == {other}
    assert names(AclBindingFilter(resource_type=Res.GROUP)) == set()


@pytest.mark.parametrize(
    "fields",
    [
        (Res.ANY, "t", Pat.LITERAL, ALICE, "*", Op.READ, Perm.ALLOW),
        (Res.TOPIC, "t", Pat.MATCH, ALICE, "*", Op.READ, Perm.ALLOW),
        (Res.TOPIC, "t", Pat.LITERAL, ALICE, "*", Op.ANY, Perm.ALLOW),
        (Res.TOPIC, "t", Pat.LITERAL, ALICE, "*", Op.READ, Perm.ANY),
        (Res.TOPIC, "t", Pat.LITERAL, "alice", "*", Op.READ, Perm.ALLOW),
        (Res.TOPIC, "", Pat.LITERAL, ALICE, "*", Op.READ, Perm.ALLOW),
        (Res.CLUSTER, "other", Pat.LITERAL, ALICE, "*", Op.ALTER, Perm.ALLOW),
        (Res.TOPIC, "t", 99, ALICE, "*", Op.READ, Perm.ALLOW),
    ],
)
def test_creating_a_filter_shaped_binding_is_invalid_request(fields) -> None:
    with pytest.raises(InvalidRequestError):
        binding_from_wire(*fields)


def test_store_round_trip_and_unreadable_file_refuses(tmp_path) -> None:
    store = AclStore(tmp_path)
    assert store.load() == []
    acls = [acl("t"), acl("p-", Op.WRITE, Perm.DENY, pattern=Pat.PREFIXED, host=HOST)]
    store.save(acls)
    assert AclStore(tmp_path).load() == acls
    store.path.write_text("{not json")
    with pytest.raises(AclStoreError):
        store.load()


def test_authorizer_config_kafka_names_and_unknown_class_refused() -> None:
    from oncestream.broker.config import BrokerConfig
    from oncestream.errors import InvalidConfigError

    config = BrokerConfig.from_properties("127.0.0.1", 0, {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin;User:ops", "allow.everyone.if.no.acl.found": "true"})
    assert config.authorizer_class_name.endswith("StandardAuthorizer")
    assert parse_super_users(config.super_users) == {"User:admin", "User:ops"}
    assert config.allow_everyone_if_no_acl_found
    assert not BrokerConfig.from_properties("127.0.0.1", 0, {}).allow_everyone_if_no_acl_found
    with pytest.raises(InvalidConfigError):  # a typo must not start a broker without ACLs
        BrokerConfig.from_properties("127.0.0.1", 0, {"authorizer.class.name": "com.example.Typo"})


def test_broker_state_loads_stored_acls_only_with_an_authorizer(tmp_path) -> None:
    """The authorizer is built from the ACL file at start; without authorizer.class.name there is
    none (everything allowed, as in Kafka)."""
    from oncestream.broker.config import BrokerConfig
    from oncestream.broker.state import BrokerState

    AclStore(tmp_path).save([acl("t")])
    plain = BrokerState(tmp_path, BrokerConfig.from_properties("127.0.0.1", 0, {}))
    try:
        assert plain.authorizer is None
    finally:
        plain.close()
    secured = BrokerState(tmp_path, BrokerConfig.from_properties("127.0.0.1", 0, {
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}))
    try:
        assert secured.authorizer is not None
        assert secured.authorizer.acls() == [acl("t")]
    finally:
        secured.close()
