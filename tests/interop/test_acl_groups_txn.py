"""ACLs on the group and transaction paths (issue 14 point 4): JoinGroup/SyncGroup/Heartbeat
READ on the group, FindCoordinator DESCRIBE, OffsetFetch DESCRIBE (topics filtered),
AddOffsetsToTxn/TxnOffsetCommit READ on the group, EndTxn and AddPartitionsToTxn WRITE on the
transactional id and topics, and DENY overriding a PREFIXED ALLOW with a real producer."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)
from kio.schema.errors import ErrorCode

from oncestream.protocol import api_keys as k
from tests.support.acl import T, admin, allow, code_of, new_topic, produce_one, start_secured, user, wire
from tests.support.clients import CLIENT_TIMEOUT_S
from tests.support.cluster_kind import BrokerUnderTest

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def secured(module_our_broker_factory: Callable[..., BrokerUnderTest]) -> Iterator[BrokerUnderTest]:
    """The module's broker with the authorizer (``start_secured``): under the ``cluster`` kind, a
    cluster the ACL suites share."""
    process = start_secured(module_our_broker_factory)
    yield process
    assert process.is_alive()


def test_deny_overrides_a_prefixed_allow(secured: BrokerUnderTest) -> None:
    name = user()
    allowed_topic, denied_topic = new_topic(secured, f"{name}-ok"), new_topic(secured, f"{name}-no")
    allow(secured, name, ResourceType.TOPIC, f"{name}-", AclOperation.WRITE, ResourcePatternType.PREFIXED)
    deny = AclBinding(ResourceType.TOPIC, denied_topic, ResourcePatternType.LITERAL, f"User:{name}", "*",
                      AclOperation.WRITE, AclPermissionType.DENY)
    client = admin(secured, "admin")
    client.create_acls([deny])[deny].result(timeout=CLIENT_TIMEOUT_S)
    assert produce_one(secured, name, allowed_topic) is None
    error = produce_one(secured, name, denied_topic)
    assert error is not None
    assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_subscribe_needs_read_on_the_group(secured: BrokerUnderTest) -> None:
    """DESCRIBE on the group passes FindCoordinator; JoinGroup then needs READ."""
    name, topic = user(), new_topic(secured, "acl-join")
    assert produce_one(secured, "admin", topic) is None
    group = f"g-{name}"
    allow(secured, name, ResourceType.TOPIC, topic, AclOperation.READ)
    allow(secured, name, ResourceType.GROUP, group, AclOperation.DESCRIBE)
    conf = {"bootstrap.servers": secured.bootstrap, "client.id": f"principal:{name}", "group.id": group,
            "auto.offset.reset": "earliest", "enable.auto.commit": False}
    consumer = Consumer(conf)
    try:
        consumer.subscribe([topic])
        msg = consumer.poll(CLIENT_TIMEOUT_S)
        assert msg is not None
        error = msg.error()
        assert error is not None
        assert error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        consumer.close()
    allow(secured, name, ResourceType.GROUP, group, AclOperation.READ)
    consumer = Consumer(conf)
    try:
        consumer.subscribe([topic])
        msg = consumer.poll(CLIENT_TIMEOUT_S)
        assert msg is not None
        assert msg.error() is None
        assert msg.value() == b"v"
    finally:
        consumer.close()


def test_find_coordinator_needs_describe_on_the_group_or_transactional_id(secured: BrokerUnderTest) -> None:
    name = user()
    group, txn_id = f"g-{name}", f"tx-{name}"

    def find(key: str, key_type: int):
        with wire(secured, name) as conn:
            answer = conn.call(k.FIND_COORDINATOR, lambda m: m.FindCoordinatorRequest(
                key_type=key_type, coordinator_keys=(key,)))
        return answer.coordinators[0].error_code

    assert find(group, 0) == ErrorCode.group_authorization_failed
    assert find(txn_id, 1) == ErrorCode.transactional_id_authorization_failed
    allow(secured, name, ResourceType.GROUP, group, AclOperation.READ)  # implies DESCRIBE
    allow(secured, name, ResourceType.TRANSACTIONAL_ID, txn_id, AclOperation.WRITE)
    assert find(group, 0) == ErrorCode.none
    assert find(txn_id, 1) == ErrorCode.none


def test_offset_fetch_needs_describe_on_group_and_topic(secured: BrokerUnderTest) -> None:
    name = user()
    shown, hidden = new_topic(secured, "acl-of-shown"), new_topic(secured, "acl-of-hidden")
    group = f"g-{name}"
    owner = Consumer({"bootstrap.servers": secured.bootstrap, "client.id": "principal:admin", "group.id": group})
    owner.commit(offsets=[TopicPartition(shown, 0, 3), TopicPartition(hidden, 0, 4)], asynchronous=False)
    owner.close()
    client = admin(secured, name)
    request = [ConsumerGroupTopicPartitions(group)]
    [future] = client.list_consumer_group_offsets(request, request_timeout=T).values()
    with pytest.raises(KafkaException) as refused:
        future.result(timeout=CLIENT_TIMEOUT_S)
    assert code_of(refused) == KafkaError.GROUP_AUTHORIZATION_FAILED
    allow(secured, name, ResourceType.GROUP, group, AclOperation.DESCRIBE)
    allow(secured, name, ResourceType.TOPIC, shown, AclOperation.DESCRIBE)
    [future] = client.list_consumer_group_offsets(request, request_timeout=T).values()
    listed = future.result(timeout=CLIENT_TIMEOUT_S)
    # All-partitions OffsetFetch: the topic without DESCRIBE is left out, as Kafka does.
    assert {(tp.topic, tp.offset) for tp in listed.topic_partitions} == {(shown, 3)}


def test_transactional_offsets_need_read_on_the_group(secured: BrokerUnderTest) -> None:
    """AddOffsetsToTxn (sendOffsetsToTransaction) without READ on the group fails with
    GROUP_AUTHORIZATION_FAILED; with it, the offsets commit with the transaction."""
    name, topic = user(), new_topic(secured, "acl-txn-offsets")
    txn_id, group = f"tx-{name}", f"g-{name}"
    allow(secured, name, ResourceType.TOPIC, topic, AclOperation.WRITE)
    allow(secured, name, ResourceType.TRANSACTIONAL_ID, txn_id, AclOperation.WRITE)
    allow(secured, name, ResourceType.GROUP, group, AclOperation.DESCRIBE)
    producer = Producer({"bootstrap.servers": secured.bootstrap, "client.id": f"principal:{name}",
                         "transactional.id": txn_id})
    producer.init_transactions(CLIENT_TIMEOUT_S)
    consumer = Consumer({"bootstrap.servers": secured.bootstrap, "client.id": "principal:admin", "group.id": group})
    try:
        producer.begin_transaction()
        producer.produce(topic, b"x", partition=0)
        with pytest.raises(KafkaException) as refused:
            producer.send_offsets_to_transaction([TopicPartition(topic, 0, 1)], consumer.consumer_group_metadata(), T)
        assert code_of(refused) == KafkaError.GROUP_AUTHORIZATION_FAILED
        producer.abort_transaction(CLIENT_TIMEOUT_S)

        allow(secured, name, ResourceType.GROUP, group, AclOperation.READ)
        allow(secured, name, ResourceType.TOPIC, topic, AclOperation.READ)  # TxnOffsetCommit: READ on the topic
        producer.begin_transaction()
        producer.produce(topic, b"y", partition=0)
        producer.send_offsets_to_transaction([TopicPartition(topic, 0, 1)], consumer.consumer_group_metadata(),
                                             CLIENT_TIMEOUT_S)
        producer.commit_transaction(CLIENT_TIMEOUT_S)
        [committed] = consumer.committed([TopicPartition(topic, 0)], timeout=CLIENT_TIMEOUT_S)
        assert committed.offset == 1
    finally:
        consumer.close()


def test_txn_requests_need_write_on_the_transactional_id_and_topics(secured: BrokerUnderTest) -> None:
    """AddPartitionsToTxn v3: the refused topic says TOPIC_AUTHORIZATION_FAILED and the rest
    OPERATION_NOT_ATTEMPTED; every partition says TRANSACTIONAL_ID_AUTHORIZATION_FAILED without
    WRITE on the id; EndTxn and TxnOffsetCommit likewise."""
    name = user()
    ok_topic, no_topic = new_topic(secured, "acl-apt-ok"), new_topic(secured, "acl-apt-no")
    txn_id = f"tx-{name}"

    def add_partitions():
        with wire(secured, name, max_versions={k.ADD_PARTITIONS_TO_TXN: 3}, transactional_id=txn_id) as conn:
            answer = conn.call(k.ADD_PARTITIONS_TO_TXN, lambda m: m.AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=0,
                v3_and_below_producer_epoch=0, v3_and_below_topics=(
                    m.AddPartitionsToTxnTopic(name=ok_topic, partitions=(0,)),
                    m.AddPartitionsToTxnTopic(name=no_topic, partitions=(0,)))))
        return {t.name: t.results_by_partition[0].partition_error_code for t in answer.results_by_topic_v3_and_below}

    def end_txn():
        with wire(secured, name, transactional_id=txn_id) as conn:
            return conn.call(k.END_TXN, lambda m: m.EndTxnRequest(
                transactional_id=txn_id, producer_id=0, producer_epoch=0, committed=True)).error_code

    denied = ErrorCode.transactional_id_authorization_failed
    assert add_partitions() == {ok_topic: denied, no_topic: denied}
    assert end_txn() == denied
    allow(secured, name, ResourceType.TRANSACTIONAL_ID, txn_id, AclOperation.WRITE)
    allow(secured, name, ResourceType.TOPIC, ok_topic, AclOperation.WRITE)
    assert add_partitions() == {ok_topic: ErrorCode.operation_not_attempted,
                                no_topic: ErrorCode.topic_authorization_failed}
    # Authorized now: the coordinator itself answers (no such producer).
    assert end_txn() not in (denied, ErrorCode.none)

    with wire(secured, name) as conn:
        answer = conn.call(k.ADD_PARTITIONS_TO_TXN, lambda m: m.AddPartitionsToTxnRequest(transactions=()))
    assert answer.error_code == ErrorCode.cluster_authorization_failed  # v4+: brokers only (CLUSTER_ACTION)


def test_member_requests_need_read_on_the_group_and_offset_delete_needs_delete(secured: BrokerUnderTest) -> None:
    """SyncGroup, Heartbeat and LeaveGroup: READ on the group (GROUP_AUTHORIZATION_FAILED before
    the coordinator looks at the member); OffsetDelete: DELETE on the group, READ on the topic."""
    name, topic = user(), new_topic(secured, "acl-members")
    group = f"g-{name}"

    def member_calls() -> list[int]:
        with wire(secured, name, group=group) as conn:
            sync = conn.call(k.SYNC_GROUP, lambda m: m.SyncGroupRequest(
                group_id=group, generation_id=1, member_id="m", group_instance_id=None, assignments=()))
            beat = conn.call(k.HEARTBEAT, lambda m: m.HeartbeatRequest(
                group_id=group, generation_id=1, member_id="m", group_instance_id=None))
            leave = conn.call(k.LEAVE_GROUP, lambda m: m.LeaveGroupRequest(
                group_id=group, members=(m.MemberIdentity(member_id="m", group_instance_id=None),)))
        return [sync.error_code, beat.error_code, leave.error_code]

    def offset_delete():
        with wire(secured, name, group=group) as conn:
            return conn.call(k.OFFSET_DELETE, lambda m: m.OffsetDeleteRequest(group_id=group, topics=(
                m.OffsetDeleteRequestTopic(name=topic, partitions=(m.OffsetDeleteRequestPartition(partition_index=0),)),
            )))

    assert member_calls() == [ErrorCode.group_authorization_failed] * 3
    allow(secured, name, ResourceType.GROUP, group, AclOperation.READ)
    assert ErrorCode.group_authorization_failed not in member_calls()  # the coordinator answers now

    owner = Consumer({"bootstrap.servers": secured.bootstrap, "client.id": "principal:admin", "group.id": group})
    owner.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)  # the group now exists
    owner.close()
    assert offset_delete().error_code == ErrorCode.group_authorization_failed
    allow(secured, name, ResourceType.GROUP, group, AclOperation.DELETE)
    answer = offset_delete()
    assert answer.error_code == ErrorCode.none
    assert answer.topics[0].partitions[0].error_code == ErrorCode.topic_authorization_failed


def test_txn_offset_commit_refuses_unreadable_topics_one_by_one(secured: BrokerUnderTest) -> None:
    """TxnOffsetCommit: WRITE on the id and READ on the group refuse every partition; a topic
    without READ is refused alone while the others still reach the coordinator (here: no open
    transaction, so the coordinator's own error), as Kafka's handler does."""
    name = user()
    readable, unreadable = new_topic(secured, "acl-toc-r"), new_topic(secured, "acl-toc-u")
    txn_id, group = f"tx-{name}", f"g-{name}"

    def commit() -> dict[str, int]:
        with wire(secured, name, max_versions={k.TXN_OFFSET_COMMIT: 3}, group=group) as conn:
            answer = conn.call(k.TXN_OFFSET_COMMIT, lambda m: m.TxnOffsetCommitRequest(
                transactional_id=txn_id, group_id=group, producer_id=0, producer_epoch=0, group_instance_id=None,
                topics=tuple(m.TxnOffsetCommitRequestTopic(name=t, partitions=(m.TxnOffsetCommitRequestPartition(
                    partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata=None),))
                    for t in (readable, unreadable))))
        return {t.name: t.partitions[0].error_code for t in answer.topics}

    assert commit() == dict.fromkeys((readable, unreadable), ErrorCode.transactional_id_authorization_failed)
    allow(secured, name, ResourceType.TRANSACTIONAL_ID, txn_id, AclOperation.WRITE)
    assert commit() == dict.fromkeys((readable, unreadable), ErrorCode.group_authorization_failed)
    allow(secured, name, ResourceType.GROUP, group, AclOperation.READ)
    assert commit() == dict.fromkeys((readable, unreadable), ErrorCode.topic_authorization_failed)
    allow(secured, name, ResourceType.TOPIC, readable, AclOperation.READ)
    errors = commit()
    assert errors[unreadable] == ErrorCode.topic_authorization_failed
    assert errors[readable] not in (ErrorCode.topic_authorization_failed, ErrorCode.operation_not_attempted,
                                    ErrorCode.none)
