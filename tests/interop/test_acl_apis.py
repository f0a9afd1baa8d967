"""Every API family without its ACL gets Kafka's error code, and succeeds once the ACL exists
(issue 14 point 4; the operations KafkaApis checks). Real clients (confluent-kafka) where they
surface the code, the wire (our BrokerConnection with kio requests) where they do not.

One broker for the module with ``super.users=User:admin``; every test acts as its own user
(client.id ``principal:NAME``, the test-only identity hook) on its own topics, so tests do not
see each other's ACLs. The broker keeps serving the admin throughout (checked at the end)."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AclOperation,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kio.schema.errors import ErrorCode

from oncestream.client.admin.admin import Admin as OnceStreamAdmin
from oncestream.client.common.errors import KafkaException as OnceStreamKafkaException
from oncestream.protocol import api_keys as k
from tests.support.acl import (
    T,
    admin,
    allow,
    call_coordinator,
    code_of,
    new_topic,
    produce_one,
    start_secured,
    user,
    wait_described_everywhere,
    wire,
)
from tests.support.clients import CLIENT_TIMEOUT_S, unique_topic
from tests.support.cluster_kind import BrokerUnderTest, processes_of

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def secured(module_our_broker_factory: Callable[..., BrokerUnderTest]) -> Iterator[BrokerUnderTest]:
    """The module's broker with the authorizer (``start_secured``): under the ``cluster`` kind, a
    cluster the ACL suites share."""
    process = start_secured(module_our_broker_factory)
    yield process
    # The refusals above never cost the broker anything: it still serves everyone.
    assert process.is_alive()
    assert admin(process, "admin").list_topics(timeout=CLIENT_TIMEOUT_S).topics is not None


# --- Produce: WRITE on the topic -----------------------------------------------------------------

def test_produce_needs_write_on_the_topic(secured: BrokerUnderTest) -> None:
    name, topic = user(), new_topic(secured, "acl-produce")
    allow(secured, name, ResourceType.TOPIC, topic, AclOperation.DESCRIBE)  # metadata, not produce
    error = produce_one(secured, name, topic)
    assert error is not None
    assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    allow(secured, name, ResourceType.TOPIC, topic, AclOperation.WRITE)
    assert produce_one(secured, name, topic) is None


def test_idempotent_producer_needs_write_on_some_topic_kip_679(secured: BrokerUnderTest) -> None:
    """InitProducerId without a transactional id: IDEMPOTENT_WRITE on the cluster or WRITE on any
    topic, else CLUSTER_AUTHORIZATION_FAILED."""
    name = user()

    def init_pid():
        with wire(secured, name) as conn:
            return conn.call(k.INIT_PRODUCER_ID, lambda m: m.InitProducerIdRequest(
                transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60),
                producer_id=-1, producer_epoch=-1))

    assert init_pid().error_code == ErrorCode.cluster_authorization_failed
    allow(secured, name, ResourceType.TOPIC, f"{name}-", AclOperation.WRITE, ResourcePatternType.PREFIXED)
    answer = init_pid()
    assert answer.error_code == ErrorCode.none
    assert answer.producer_id >= 0
    # librdkafka's idempotent producer: WRITE on the topic is all it needs.
    topic = new_topic(secured, f"{name}-idem")
    assert produce_one(secured, name, topic, **{"enable.idempotence": True}) is None


# --- Fetch / ListOffsets / groups: READ, DESCRIBE ----------------------------------------------

def test_list_offsets_needs_describe_and_fetch_needs_read(secured: BrokerUnderTest) -> None:
    name, topic = user(), new_topic(secured, "acl-fetch")
    assert produce_one(secured, "admin", topic) is None
    group = f"g-{name}"
    allow(secured, name, ResourceType.GROUP, group, AclOperation.READ)
    def list_offsets():
        with wire(secured, name) as conn:
            return conn.call_with_version(k.LIST_OFFSETS, lambda m, version: m.ListOffsetsRequest(
                replica_id=-1, isolation_level=0, topics=(m.ListOffsetsTopic(name=topic, partitions=(
                    m.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1),)),),
                # v10 (KIP-1075) bounds remote-storage lookups with a timeout.
                **({"timeout": datetime.timedelta(seconds=30)} if version >= 10 else {})))

    assert list_offsets().topics[0].partitions[0].error_code == ErrorCode.topic_authorization_failed
    allow(secured, name, ResourceType.TOPIC, topic, AclOperation.DESCRIBE)  # ListOffsets, not Fetch
    assert list_offsets().topics[0].partitions[0].offset == 1
    consumer = Consumer({"bootstrap.servers": secured.bootstrap, "client.id": f"principal:{name}",
                         "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=T) == (0, 1)
        consumer.assign([TopicPartition(topic, 0, 0)])
        msg = consumer.poll(T)
        assert msg is not None
        error = msg.error()
        assert error is not None
        assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        consumer.close()

    allow(secured, name, ResourceType.TOPIC, topic, AclOperation.READ)
    consumer = Consumer({"bootstrap.servers": secured.bootstrap, "client.id": f"principal:{name}",
                         "group.id": group, "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        msg = consumer.poll(CLIENT_TIMEOUT_S)
        assert msg is not None
        assert msg.error() is None
        assert msg.value() == b"v"
    finally:
        consumer.close()


def test_offset_commit_needs_read_on_group_and_topic(secured: BrokerUnderTest) -> None:
    name, topic = user(), new_topic(secured, "acl-commit")
    group = f"g-{name}"
    allow(secured, name, ResourceType.GROUP, group, AclOperation.DESCRIBE)  # FindCoordinator only
    consumer = Consumer({"bootstrap.servers": secured.bootstrap, "client.id": f"principal:{name}",
                         "group.id": group, "enable.auto.commit": False})
    try:
        with pytest.raises(KafkaException) as refused:
            consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
        assert code_of(refused) == KafkaError.GROUP_AUTHORIZATION_FAILED
        allow(secured, name, ResourceType.GROUP, group, AclOperation.READ)
        with pytest.raises(KafkaException) as refused:
            consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
        assert code_of(refused) == KafkaError.TOPIC_AUTHORIZATION_FAILED
        allow(secured, name, ResourceType.TOPIC, topic, AclOperation.READ)
        [result] = consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
        assert result.error is None
        assert result.offset == 1
    finally:
        consumer.close()


def test_group_admin_needs_describe_and_delete_on_the_group(secured: BrokerUnderTest) -> None:
    name = user()
    group = f"g-{name}"
    # The group exists once the admin commits for it.
    topic = new_topic(secured, "acl-groups")
    owner = Consumer({"bootstrap.servers": secured.bootstrap, "client.id": "principal:admin", "group.id": group})
    owner.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    owner.close()

    client = admin(secured, name)
    listed = client.list_consumer_groups(request_timeout=T).result(timeout=CLIENT_TIMEOUT_S)
    assert group not in {g.group_id for g in listed.valid}  # ListGroups is filtered by DESCRIBE
    [future] = client.describe_consumer_groups([group], request_timeout=T).values()
    with pytest.raises(KafkaException) as refused:
        future.result(timeout=CLIENT_TIMEOUT_S)
    assert code_of(refused) == KafkaError.GROUP_AUTHORIZATION_FAILED

    allow(secured, name, ResourceType.GROUP, group, AclOperation.DESCRIBE)
    listed = client.list_consumer_groups(request_timeout=T).result(timeout=CLIENT_TIMEOUT_S)
    assert group in {g.group_id for g in listed.valid}
    [future] = client.describe_consumer_groups([group], request_timeout=T, include_authorized_operations=True).values()
    described = future.result(timeout=CLIENT_TIMEOUT_S)
    assert set(described.authorized_operations) == {AclOperation.DESCRIBE}  # KIP-430

    [future] = client.delete_consumer_groups([group], request_timeout=T).values()
    with pytest.raises(KafkaException) as refused:
        future.result(timeout=CLIENT_TIMEOUT_S)
    assert code_of(refused) == KafkaError.GROUP_AUTHORIZATION_FAILED
    allow(secured, name, ResourceType.GROUP, group, AclOperation.DELETE)
    [future] = client.delete_consumer_groups([group], request_timeout=T).values()
    future.result(timeout=CLIENT_TIMEOUT_S)


# --- Transactions: WRITE (and TWO_PHASE_COMMIT) on the transactional id -----------------------

def test_transactional_producer_needs_write_on_its_transactional_id(secured: BrokerUnderTest) -> None:
    name, topic = user(), new_topic(secured, "acl-txn")
    txn_id = f"tx-{name}"
    allow(secured, name, ResourceType.TOPIC, topic, AclOperation.WRITE)
    conf = {"bootstrap.servers": secured.bootstrap, "client.id": f"principal:{name}", "transactional.id": txn_id}
    producer = Producer(conf)
    with pytest.raises(KafkaException) as refused:
        producer.init_transactions(T)
    assert code_of(refused) == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

    allow(secured, name, ResourceType.TRANSACTIONAL_ID, txn_id, AclOperation.WRITE)
    producer = Producer(conf)
    producer.init_transactions(CLIENT_TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(topic, b"in-txn", partition=0)
    producer.commit_transaction(CLIENT_TIMEOUT_S)


def test_two_phase_commit_needs_two_phase_commit_on_the_transactional_id_kip_939(secured: BrokerUnderTest) -> None:
    name = user()
    txn_id = f"tx2pc-{name}"
    allow(secured, name, ResourceType.TRANSACTIONAL_ID, txn_id, AclOperation.WRITE)

    def init_pid():
        return call_coordinator(secured, name, k.INIT_PRODUCER_ID, lambda m: m.InitProducerIdRequest(
            transactional_id=txn_id, transaction_timeout=datetime.timedelta(seconds=60),
            producer_id=-1, producer_epoch=-1, enable2_pc=True, keep_prepared_txn=False), transactional_id=txn_id)

    assert init_pid().error_code == ErrorCode.transactional_id_authorization_failed
    # confluent-kafka's AclOperation has no TWO_PHASE_COMMIT (15): create it on the wire.
    with wire(secured, "admin") as conn:
        created = conn.call(k.CREATE_ACLS, lambda m: m.CreateAclsRequest(creations=(m.AclCreation(
            resource_type=5, resource_name=txn_id, resource_pattern_type=3, principal=f"User:{name}", host="*",
            operation=15, permission_type=3),)))
    assert [r.error_code for r in created.results] == [ErrorCode.none]
    wait_described_everywhere(secured, {
        "resource_type_filter": 5, "resource_name_filter": txn_id, "pattern_type_filter": 3,
        "principal_filter": f"User:{name}", "host_filter": "*", "operation": 15, "permission_type": 3})
    answer = init_pid()
    assert answer.error_code == ErrorCode.none
    assert answer.producer_id >= 0


# --- Metadata: DESCRIBE, no existence leak, CREATE for auto-creation, KIP-430 ------------------

def test_metadata_hides_topics_without_describe_and_does_not_leak_existence(secured: BrokerUnderTest) -> None:
    name, topic = user(), new_topic(secured, "acl-meta")
    missing = unique_topic("acl-missing")
    client = admin(secured, name)
    assert topic not in client.list_topics(timeout=T).topics  # all-topics Metadata is filtered
    # Existing and missing topics get the same answer (and the missing one is not auto-created).
    for name_asked in (topic, missing):
        seen = client.list_topics(name_asked, timeout=T).topics[name_asked]
        assert seen.error is not None
        assert seen.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert missing not in admin(secured, "admin").list_topics(timeout=CLIENT_TIMEOUT_S).topics

    allow(secured, name, ResourceType.TOPIC, topic, AclOperation.READ)
    assert topic in client.list_topics(timeout=T).topics
    with wire(secured, name) as conn:
        answer = conn.call(k.METADATA, lambda m: m.MetadataRequest(
            topics=(m.MetadataRequestTopic(name=topic, topic_id=uuid.UUID(int=0)),),
            allow_auto_topic_creation=False, include_topic_authorized_operations=True))
    [described] = answer.topics
    assert described.error_code == ErrorCode.none
    assert described.topic_authorized_operations == (1 << 3) | (1 << 8)  # READ and the DESCRIBE it implies
    # librdkafka's describe_topics asks Metadata for the same field.
    [future] = client.describe_topics(TopicCollection([topic]), request_timeout=T,
                                      include_authorized_operations=True).values()
    assert set(future.result(timeout=CLIENT_TIMEOUT_S).authorized_operations) == {AclOperation.READ,
                                                                                 AclOperation.DESCRIBE}


def test_auto_creation_needs_create(secured: BrokerUnderTest) -> None:
    name = user()
    wanted = f"{name}-auto"
    allow(secured, name, ResourceType.TOPIC, f"{name}-", AclOperation.DESCRIBE, ResourcePatternType.PREFIXED)
    seen = admin(secured, name).list_topics(wanted, timeout=T).topics[wanted]
    assert seen.error is not None
    assert seen.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    allow(secured, name, ResourceType.TOPIC, f"{name}-", AclOperation.CREATE, ResourcePatternType.PREFIXED)
    with wire(secured, name) as conn:
        answer = conn.call(k.METADATA, lambda m: m.MetadataRequest(
            topics=(m.MetadataRequestTopic(name=wanted, topic_id=uuid.UUID(int=0)),),
            allow_auto_topic_creation=True, include_topic_authorized_operations=False))
    assert [t.error_code for t in answer.topics] == [ErrorCode.none]


# --- Topic admin and configs: CREATE, DELETE, ALTER, DESCRIBE_CONFIGS, ALTER_CONFIGS -----------

def test_topic_admin_needs_create_delete_alter(secured: BrokerUnderTest) -> None:
    name = user()
    client = admin(secured, name)
    topic = f"{name}-t"
    with pytest.raises(KafkaException) as refused:
        client.create_topics([NewTopic(topic, 1, 1)], request_timeout=T)[topic].result(timeout=CLIENT_TIMEOUT_S)
    assert code_of(refused) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    allow(secured, name, ResourceType.TOPIC, f"{name}-", AclOperation.CREATE, ResourcePatternType.PREFIXED)
    client.create_topics([NewTopic(topic, 1, 1)], request_timeout=T)[topic].result(timeout=CLIENT_TIMEOUT_S)

    with pytest.raises(KafkaException) as refused:
        client.create_partitions([NewPartitions(topic, 2)], request_timeout=T)[topic].result(timeout=CLIENT_TIMEOUT_S)
    assert code_of(refused) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    allow(secured, name, ResourceType.TOPIC, topic, AclOperation.ALTER)
    client.create_partitions([NewPartitions(topic, 2)], request_timeout=T)[topic].result(timeout=CLIENT_TIMEOUT_S)

    with pytest.raises(KafkaException) as refused:
        client.delete_topics([topic], request_timeout=T)[topic].result(timeout=CLIENT_TIMEOUT_S)
    assert code_of(refused) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    allow(secured, name, ResourceType.TOPIC, topic, AclOperation.DELETE)
    client.delete_topics([topic], request_timeout=T)[topic].result(timeout=CLIENT_TIMEOUT_S)

    # A missing topic: refused without DESCRIBE (no existence leak), unknown with it.
    missing = f"{name}-gone"
    with pytest.raises(KafkaException) as refused:
        client.delete_topics([missing], request_timeout=T)[missing].result(timeout=CLIENT_TIMEOUT_S)
    assert code_of(refused) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    allow(secured, name, ResourceType.TOPIC, f"{name}-", AclOperation.DESCRIBE, ResourcePatternType.PREFIXED)
    with pytest.raises(KafkaException) as refused:
        client.delete_topics([missing], request_timeout=T)[missing].result(timeout=CLIENT_TIMEOUT_S)
    assert code_of(refused) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_configs_need_describe_configs_and_alter_configs(secured: BrokerUnderTest) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry
    from confluent_kafka.admin import ResourceType as ConfigType

    name, topic = user(), new_topic(secured, "acl-cfg")
    client = admin(secured, name)
    resource = ConfigResource(ConfigType.TOPIC, topic)
    with pytest.raises(KafkaException) as refused:
        client.describe_configs([resource], request_timeout=T)[resource].result(timeout=CLIENT_TIMEOUT_S)
    assert code_of(refused) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    allow(secured, name, ResourceType.TOPIC, topic, AclOperation.ALTER_CONFIGS)  # implies DESCRIBE_CONFIGS
    described = client.describe_configs([resource], request_timeout=T)[resource].result(timeout=CLIENT_TIMEOUT_S)
    assert "retention.ms" in described

    # AlterConfigs needs ALTER_CONFIGS (which the ACL above grants); another topic is refused.
    other = new_topic(secured, "acl-cfg-other")
    allow(secured, name, ResourceType.TOPIC, other, AclOperation.DESCRIBE_CONFIGS)
    change = [ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)]
    for target, expected in ((other, KafkaError.TOPIC_AUTHORIZATION_FAILED), (topic, None)):
        res = ConfigResource(ConfigType.TOPIC, target, incremental_configs=change)
        future = client.incremental_alter_configs([res], request_timeout=T)[res]
        if expected is None:
            future.result(timeout=CLIENT_TIMEOUT_S)
        else:
            with pytest.raises(KafkaException) as refused:
                future.result(timeout=CLIENT_TIMEOUT_S)
            assert code_of(refused) == expected
    res = ConfigResource(ConfigType.TOPIC, topic)
    assert client.describe_configs([res], request_timeout=T)[res].result(timeout=CLIENT_TIMEOUT_S)[
        "retention.ms"].value == "3600000"

    node_id = next(iter(admin(secured, "admin").list_topics(timeout=CLIENT_TIMEOUT_S).brokers))
    broker_resource = ConfigResource(ConfigType.BROKER, str(node_id))
    with pytest.raises(KafkaException) as refused:
        client.describe_configs([broker_resource], request_timeout=T)[broker_resource].result(timeout=CLIENT_TIMEOUT_S)
    assert code_of(refused) == KafkaError.CLUSTER_AUTHORIZATION_FAILED


def test_delete_records_needs_delete_on_the_topic(secured: BrokerUnderTest) -> None:
    name, topic = user(), new_topic(secured, "acl-delrec")
    assert produce_one(secured, "admin", topic) is None
    client = admin(secured, name)
    allow(secured, name, ResourceType.TOPIC, topic, AclOperation.DESCRIBE)  # metadata lookup only
    target = [TopicPartition(topic, 0, 1)]
    [future] = client.delete_records(target, request_timeout=T).values()
    with pytest.raises(KafkaException) as refused:
        future.result(timeout=CLIENT_TIMEOUT_S)
    assert code_of(refused) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    allow(secured, name, ResourceType.TOPIC, topic, AclOperation.DELETE)
    [future] = client.delete_records(target, request_timeout=T).values()
    assert future.result(timeout=CLIENT_TIMEOUT_S).low_watermark == 1


def test_transaction_listing_is_filtered_and_describe_producers_needs_read(secured: BrokerUnderTest) -> None:
    name, topic = user(), new_topic(secured, "acl-txnlist")
    txn_id = f"txl-{name}"
    producer = Producer({"bootstrap.servers": secured.bootstrap, "client.id": "principal:admin",
                         "transactional.id": txn_id})
    producer.init_transactions(CLIENT_TIMEOUT_S)

    def listed() -> set[str]:
        """Every broker's answer (Kafka's Admin.listTransactions asks each: a broker lists the
        transactions it coordinates)."""
        ids: set[str] = set()
        for process in processes_of(secured):
            with wire(secured, name, process=process) as conn:
                answer = conn.call(k.LIST_TRANSACTIONS, lambda m: m.ListTransactionsRequest(
                    state_filters=(), producer_id_filters=()))
            ids |= {t.transactional_id for t in answer.transaction_states}
        return ids

    def described() -> str:
        # Our Admin (kio cannot read DescribeTransactions' -1 start time); FindCoordinator for the
        # id needs DESCRIBE on it as well, so the refusal may come from either request.
        with OnceStreamAdmin({"bootstrap.servers": secured.bootstrap, "client.id": f"principal:{name}"}) as ours:
            return ours.describe_transactions([txn_id], timeout=T)[txn_id].state

    def producers():
        with wire(secured, name) as conn:
            return conn.call(k.DESCRIBE_PRODUCERS, lambda m: m.DescribeProducersRequest(
                topics=(m.TopicRequest(name=topic, partition_indexes=(0,)),)))

    assert txn_id not in listed()
    with pytest.raises(OnceStreamKafkaException) as refused:
        described()
    assert code_of(refused) == ErrorCode.transactional_id_authorization_failed
    assert producers().topics[0].partitions[0].error_code == ErrorCode.topic_authorization_failed
    allow(secured, name, ResourceType.TRANSACTIONAL_ID, txn_id, AclOperation.DESCRIBE)
    allow(secured, name, ResourceType.TOPIC, topic, AclOperation.READ)
    assert txn_id in listed()
    assert described() == "Empty"
    assert producers().topics[0].partitions[0].error_code == ErrorCode.none
