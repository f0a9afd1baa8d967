"""ACLs of the consumer group protocol (KIP-848) as Kafka checks them: ConsumerGroupHeartbeat needs
READ on the group and DESCRIBE on every subscribed topic it names; ConsumerGroupDescribe needs
DESCRIBE on the group, and DESCRIBE on the topics its members' assignments reveal."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka.admin import AclOperation, ResourceType
from kio.schema.errors import ErrorCode

from oncestream.protocol import api_keys as k
from tests.support.acl import allow, new_topic, start_secured, user, wire
from tests.support.cluster_kind import BrokerUnderTest

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def secured(module_our_broker_factory: Callable[..., BrokerUnderTest]) -> BrokerUnderTest:
    """The module's broker with the authorizer (``start_secured``): under the ``cluster`` kind, a
    cluster the ACL suites share."""
    return start_secured(module_our_broker_factory)


def join(secured: BrokerUnderTest, name: str, group: str, topic: str) -> Any:
    with wire(secured, name, group=group) as conn:
        return conn.call(k.CONSUMER_GROUP_HEARTBEAT, lambda m: m.ConsumerGroupHeartbeatRequest(
            group_id=group, member_id=uuid.uuid4().hex, member_epoch=0,
            rebalance_timeout=datetime.timedelta(seconds=30), subscribed_topic_names=(topic,),
            topic_partitions=()))


def describe(secured: BrokerUnderTest, name: str, group: str) -> Any:
    with wire(secured, name, group=group) as conn:
        answer = conn.call(k.CONSUMER_GROUP_DESCRIBE, lambda m: m.ConsumerGroupDescribeRequest(
            group_ids=(group,), include_authorized_operations=False))
    return answer.groups[0]


def test_heartbeat_needs_read_on_the_group_and_describe_on_its_topics(secured: BrokerUnderTest) -> None:
    name, topic = user(), new_topic(secured, "acl-cg-hb")
    group = f"g-{name}"
    assert join(secured, name, group, topic).error_code == ErrorCode.group_authorization_failed
    allow(secured, name, ResourceType.GROUP, group, AclOperation.READ)
    assert join(secured, name, group, topic).error_code == ErrorCode.topic_authorization_failed
    allow(secured, name, ResourceType.TOPIC, topic, AclOperation.DESCRIBE)
    joined = join(secured, name, group, topic)
    assert joined.error_code == ErrorCode.none
    assert joined.member_epoch == 1


def test_describe_needs_describe_on_the_group_and_on_the_assigned_topics(secured: BrokerUnderTest) -> None:
    name, topic = user(), new_topic(secured, "acl-cg-desc")
    group = f"g-{name}"
    assert join(secured, "admin", group, topic).error_code == ErrorCode.none
    assert describe(secured, name, group).error_code == ErrorCode.group_authorization_failed
    allow(secured, name, ResourceType.GROUP, group, AclOperation.DESCRIBE)
    refused = describe(secured, name, group)
    assert refused.error_code == ErrorCode.topic_authorization_failed
    assert refused.members == ()
    allow(secured, name, ResourceType.TOPIC, topic, AclOperation.DESCRIBE)
    shown = describe(secured, name, group)
    assert shown.error_code == ErrorCode.none
    (member,) = shown.members
    assert [tp.topic_name for tp in member.assignment.topic_partitions] == [topic]
