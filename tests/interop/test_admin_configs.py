"""The admin surface with real clients (issue 14 point 6): DescribeConfigs with synonyms,
documentation and every field Kafka fills (confluent-kafka's AdminClient and kafka-python's
KafkaAdminClient), IncrementalAlterConfigs' list operations and error codes, and BROKER resources:
described, dynamic ones altered (taking effect on produce, surviving a restart), read-only ones
refused with Kafka's INVALID_REQUEST."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, ResourceType
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient
from kio.schema.errors import ErrorCode

from oncestream.client.common.connection import BrokerConnection, parse_bootstrap
from oncestream.protocol.api_keys import CREATE_TOPICS, DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS
from oncestream.protocol.codec import build
from oncestream.protocol.compression import COMPRESSION_GZIP, COMPRESSION_NONE
from oncestream.protocol.record_batch import iter_batches
from tests.support.brokers import BrokerProcess
from tests.support.clients import CLIENT_TIMEOUT_S, admin_client, confluent_consume, create_topic, unique_topic

pytestmark = pytest.mark.interop

STATIC = {"log.retention.hours": "5", "num.partitions": "1"}


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """Our broker (dynamic broker configs live in its data directory), with static configs."""
    process = BrokerProcess(data_dir=tmp_path_factory.mktemp("admincfg") / "data", config=STATIC)
    process.start()
    try:
        yield process
    finally:
        process.stop()


def _describe(bootstrap: str, rtype: ResourceType, name: str) -> dict[str, ConfigEntry]:
    admin = admin_client(bootstrap)
    resource = ConfigResource(rtype, name)
    return admin.describe_configs([resource], request_timeout=CLIENT_TIMEOUT_S)[resource].result(
        timeout=CLIENT_TIMEOUT_S)


def _incremental(bootstrap: str, rtype: ResourceType, name: str, *entries: ConfigEntry) -> None:
    admin = admin_client(bootstrap)
    resource = ConfigResource(rtype, name, incremental_configs=list(entries))
    admin.incremental_alter_configs([resource], request_timeout=CLIENT_TIMEOUT_S)[resource].result(
        timeout=CLIENT_TIMEOUT_S)


def _op(name: str, op: AlterConfigOpType, value: str | None = None) -> ConfigEntry:
    return ConfigEntry(name, value, incremental_operation=op)


def _error_code(bootstrap: str, rtype: ResourceType, name: str, *entries: ConfigEntry) -> int:
    with pytest.raises(KafkaException) as info:
        _incremental(bootstrap, rtype, name, *entries)
    return info.value.args[0].code()


def _kafka_python_admin(bootstrap: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000))


def _produce_one(bootstrap: str, topic: str, value: bytes) -> KafkaError | None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                         "enable.idempotence": False, "message.max.bytes": 100000})
    errors: list[KafkaError | None] = []
    producer.produce(topic, value, partition=0, on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    return errors[0]


# --- DescribeConfigs ------------------------------------------------------------------------------


def test_topic_describe_with_confluent_admin_sources_and_synonyms(ours: BrokerProcess) -> None:
    """Every Kafka topic config, with Kafka's source, is_default, read_only, is_sensitive and the
    broker synonyms librdkafka asks for (DescribeConfigs v1+ with include_synonyms)."""
    topic = unique_topic("cfg-describe")
    create_topic(ours.bootstrap, topic, config={"compression.type": "zstd", "min.insync.replicas": "1"})
    described = _describe(ours.bootstrap, ResourceType.TOPIC, topic)
    assert {"compression.type", "min.insync.replicas", "cleanup.policy", "retention.ms", "segment.jitter.ms",
            "local.retention.ms", "remote.storage.enable", "message.timestamp.after.max.ms"} <= set(described)
    compression = described["compression.type"]
    assert compression.value == "zstd"
    assert compression.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert not compression.is_default
    assert not compression.is_read_only
    assert not compression.is_sensitive
    retention = described["retention.ms"]  # from the static log.retention.hours=5
    assert retention.value == str(5 * 3_600_000)
    assert retention.source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert not retention.is_default
    assert retention.synonyms["log.retention.hours"].value == "5"
    segment = described["segment.bytes"]
    assert segment.is_default
    assert segment.source == ConfigSource.DEFAULT_CONFIG.value
    assert segment.synonyms["log.segment.bytes"].value == "1073741824"


def test_topic_describe_with_kafka_python_includes_types_and_documentation(ours: BrokerProcess) -> None:
    topic = unique_topic("cfg-describe-kp")
    create_topic(ours.bootstrap, topic, config={"cleanup.policy": "compact"})
    admin = _kafka_python_admin(ours.bootstrap)
    try:
        result = admin.describe_configs([KpConfigResource(ConfigResourceType.TOPIC, topic)],
                                        include_synonyms=True, config_filter="all")
    finally:
        admin.close()
    configs = result["topic"][topic]
    policy = configs["cleanup.policy"]
    assert policy["value"] == "compact"
    assert policy["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert policy["config_type"] == "LIST"
    assert policy["read_only"] is False
    assert policy["is_sensitive"] is False
    assert policy["synonyms"] == [
        {"name": "cleanup.policy", "value": "compact", "source": "DYNAMIC_TOPIC_CONFIG"},
        {"name": "log.cleanup.policy", "value": "delete", "source": "DEFAULT_CONFIG"},
    ]
    assert configs["min.insync.replicas"]["config_type"] == "INT"
    assert configs["compression.type"]["value"] == "producer"


def _describe_wire(broker: BrokerProcess, resource_type: int, name: str, *, include_documentation: bool,
                   keys: tuple[str, ...] | None = None):
    host, port = parse_bootstrap(broker.bootstrap)
    with BrokerConnection(host, port) as conn:
        return conn.call(DESCRIBE_CONFIGS, lambda m: build(
            m.DescribeConfigsRequest, include_synonyms=False, include_documentation=include_documentation,
            resources=(build(m.DescribeConfigsResource, resource_type=resource_type, resource_name=name,
                             configuration_keys=keys),)))


def _incremental_wire(broker: BrokerProcess, resource_type: int, name: str,
                      *ops: tuple[str, AlterConfigOpType, str | None]) -> ErrorCode:
    """IncrementalAlterConfigs on the wire: the cluster-default BROKER resource ("") is refused
    by both clients' argument checks, not by Kafka."""
    host, port = parse_bootstrap(broker.bootstrap)
    with BrokerConnection(host, port) as conn:
        response = conn.call(INCREMENTAL_ALTER_CONFIGS, lambda m: build(
            m.IncrementalAlterConfigsRequest, validate_only=False,
            resources=(build(m.AlterConfigsResource, resource_type=resource_type, resource_name=name,
                             configs=tuple(build(m.AlterableConfig, name=n, config_operation=op.value, value=v)
                                           for n, op, v in ops)),)))
    [result] = response.responses
    return result.error_code


def test_include_documentation_on_the_wire(ours: BrokerProcess) -> None:
    """DescribeConfigs v3+: documentation only when asked (neither client exposes the flag)."""
    topic = unique_topic("cfg-doc")
    create_topic(ours.bootstrap, topic)
    [with_doc] = _describe_wire(ours, 2, topic, include_documentation=True, keys=("compression.type",)).results[0].configs
    [without] = _describe_wire(ours, 2, topic, include_documentation=False, keys=("compression.type",)).results[0].configs
    assert with_doc.name == "compression.type"
    assert "recompress" in (with_doc.documentation or "")
    assert without.documentation is None
    assert with_doc.synonyms == ()
    assert with_doc.config_type == 2


def test_broker_describe_read_only_and_sensitive(ours: BrokerProcess) -> None:
    described = _describe(ours.bootstrap, ResourceType.BROKER, "0")
    assert described["num.partitions"].is_read_only
    assert described["num.partitions"].value == "1"
    assert described["num.partitions"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert not described["message.max.bytes"].is_read_only
    assert described["message.max.bytes"].is_default
    assert described["log.retention.hours"].value == "5"
    admin = _kafka_python_admin(ours.bootstrap)
    try:
        result = admin.describe_configs([KpConfigResource(ConfigResourceType.BROKER, "0")], config_filter="all")
    finally:
        admin.close()
    assert result["broker"]["0"]["log.cleanup.policy"]["read_only"] is False
    assert result["broker"]["0"]["node.id"]["read_only"] is True


def test_unknown_broker_id_is_invalid_request(ours: BrokerProcess) -> None:
    """Kafka's ConfigHelper: a BROKER resource is "" or this node's id (on the wire: the clients
    route a broker resource to that broker, which does not exist)."""
    result = _describe_wire(ours, 4, "7", include_documentation=False).results[0]
    assert result.error_code == ErrorCode.invalid_request
    assert result.configs == ()
    result = _describe_wire(ours, 4, "x", include_documentation=False).results[0]
    assert result.error_code == ErrorCode.invalid_request


# --- IncrementalAlterConfigs on topics ----------------------------------------------------------


def test_cleanup_policy_append_subtract_round_trip(ours: BrokerProcess) -> None:
    """APPEND from the default list, SUBTRACT back, and SUBTRACT to an empty list (Kafka 4.x)."""
    topic = unique_topic("cfg-list")
    create_topic(ours.bootstrap, topic)
    _incremental(ours.bootstrap, ResourceType.TOPIC, topic, _op("cleanup.policy", AlterConfigOpType.APPEND, "compact"))
    assert _describe(ours.bootstrap, ResourceType.TOPIC, topic)["cleanup.policy"].value == "delete,compact"
    _incremental(ours.bootstrap, ResourceType.TOPIC, topic,
                 _op("cleanup.policy", AlterConfigOpType.SUBTRACT, "delete"))
    assert _describe(ours.bootstrap, ResourceType.TOPIC, topic)["cleanup.policy"].value == "compact"
    # kafka-python's incremental ops on the same topic.
    admin = _kafka_python_admin(ours.bootstrap)
    try:
        result = admin.alter_configs([KpConfigResource(ConfigResourceType.TOPIC, topic,
                                                       configs={"cleanup.policy": ("APPEND", "delete")})])
        assert result == {"topic": {topic: "OK"}}
    finally:
        admin.close()
    assert _describe(ours.bootstrap, ResourceType.TOPIC, topic)["cleanup.policy"].value == "compact,delete"
    _incremental(ours.bootstrap, ResourceType.TOPIC, topic,
                 _op("cleanup.policy", AlterConfigOpType.SUBTRACT, "compact,delete"))
    described = _describe(ours.bootstrap, ResourceType.TOPIC, topic)["cleanup.policy"]
    assert described.value == ""
    assert described.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    # An empty policy neither compacts (keyless records are accepted) nor deletes.
    assert _produce_one(ours.bootstrap, topic, b"no key") is None


@pytest.mark.parametrize(("entry", "code"), [
    (_op("retention.ms", AlterConfigOpType.SUBTRACT, "1"), KafkaError.INVALID_CONFIG),
    (_op("compression.type", AlterConfigOpType.APPEND, "gzip"), KafkaError.INVALID_CONFIG),
    (_op("no.such.config", AlterConfigOpType.SET, "1"), KafkaError.INVALID_CONFIG),
    (_op("min.insync.replicas", AlterConfigOpType.SET, "0"), KafkaError.INVALID_CONFIG),
    (_op("compression.type", AlterConfigOpType.SET, "brotli"), KafkaError.INVALID_CONFIG),
    (_op("cleanup.policy", AlterConfigOpType.APPEND, "forever"), KafkaError.INVALID_CONFIG),
])
def test_incremental_alter_errors_are_kafkas(ours: BrokerProcess, entry: ConfigEntry, code: int) -> None:
    topic = unique_topic("cfg-err")
    create_topic(ours.bootstrap, topic, config={"retention.ms": "3600000"})
    assert _error_code(ours.bootstrap, ResourceType.TOPIC, topic, entry) == code
    described = _describe(ours.bootstrap, ResourceType.TOPIC, topic)
    assert described["retention.ms"].value == "3600000"  # nothing changed
    assert described["compression.type"].value == "producer"


def test_incremental_alter_of_unknown_topic(ours: BrokerProcess) -> None:
    code = _error_code(ours.bootstrap, ResourceType.TOPIC, unique_topic("cfg-missing"),
                       _op("retention.ms", AlterConfigOpType.SET, "1"))
    assert code == KafkaError.UNKNOWN_TOPIC_OR_PART


# --- BROKER resources -----------------------------------------------------------------------------


def test_read_only_broker_config_is_refused_with_invalid_request(ours: BrokerProcess) -> None:
    """Kafka: "Cannot update these configs dynamically" (a ConfigException answered INVALID_REQUEST)."""
    code = _error_code(ours.bootstrap, ResourceType.BROKER, "0", _op("num.partitions", AlterConfigOpType.SET, "3"))
    assert code == KafkaError.INVALID_REQUEST
    assert _incremental_wire(ours, 4, "", ("num.partitions", AlterConfigOpType.SET, "3")) == ErrorCode.invalid_request
    assert _incremental_wire(ours, 4, "7", ("message.max.bytes", AlterConfigOpType.SET, "3000")) == \
        ErrorCode.invalid_request
    # APPEND on a broker config that is not a list: INVALID_CONFIG, as for topics.
    assert _incremental_wire(ours, 4, "", ("message.max.bytes", AlterConfigOpType.APPEND, "1")) == \
        ErrorCode.invalid_config
    # The same resource twice in one request: INVALID_REQUEST (ConfigAdminManager.preprocess).
    host, port = parse_bootstrap(ours.bootstrap)
    with BrokerConnection(host, port) as conn:
        response = conn.call(INCREMENTAL_ALTER_CONFIGS, lambda m: build(
            m.IncrementalAlterConfigsRequest, validate_only=False,
            resources=tuple(build(m.AlterConfigsResource, resource_type=4, resource_name="0",
                                  configs=(build(m.AlterableConfig, name="message.max.bytes", config_operation=0,
                                                 value=v),)) for v in ("3000", "4000"))))
    assert [r.error_code for r in response.responses] == [ErrorCode.invalid_request] * 2
    code = _error_code(ours.bootstrap, ResourceType.BROKER, "0",
                       _op("message.max.bytes", AlterConfigOpType.SET, "lots"))
    assert code == KafkaError.INVALID_REQUEST
    assert _describe(ours.bootstrap, ResourceType.BROKER, "0")["num.partitions"].value == "1"


def test_dynamic_broker_config_takes_effect_and_survives_restart(tmp_path: Path) -> None:
    """message.max.bytes set as a dynamic cluster default lowers max.message.bytes of every topic
    without its own override (a produce over it is MESSAGE_TOO_LARGE), survives a restart, and a
    DELETE restores the static value; a topic override still wins."""
    broker = BrokerProcess(data_dir=tmp_path / "data", config={"message.max.bytes": "500000"})
    broker.start()
    try:
        plain, overridden = unique_topic("cfg-dyn"), unique_topic("cfg-dyn-own")
        create_topic(broker.bootstrap, plain)
        create_topic(broker.bootstrap, overridden, config={"max.message.bytes": "400000"})
        assert _produce_one(broker.bootstrap, plain, b"x" * 4000) is None

        assert _incremental_wire(broker, 4, "", ("message.max.bytes", AlterConfigOpType.SET, "2000")) == \
            ErrorCode.none
        entry = _describe(broker.bootstrap, ResourceType.TOPIC, plain)["max.message.bytes"]
        assert (entry.value, entry.source) == ("2000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
        error = _produce_one(broker.bootstrap, plain, b"y" * 4000)
        assert error is not None
        assert error.code() == KafkaError.MSG_SIZE_TOO_LARGE
        assert _produce_one(broker.bootstrap, overridden, b"z" * 4000) is None  # its own override wins

        broker.restart()
        cluster = _describe_wire(broker, 4, "", include_documentation=False).results[0]
        assert [(c.name, c.value, c.config_source) for c in cluster.configs] == \
            [("message.max.bytes", "2000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)]
        error = _produce_one(broker.bootstrap, plain, b"y" * 4000)
        assert error is not None
        assert error.code() == KafkaError.MSG_SIZE_TOO_LARGE

        # A per-broker value wins over the cluster default; DELETE of both restores the static one.
        _incremental(broker.bootstrap, ResourceType.BROKER, "0",
                     _op("message.max.bytes", AlterConfigOpType.SET, "100000"))
        entry = _describe(broker.bootstrap, ResourceType.TOPIC, plain)["max.message.bytes"]
        assert (entry.value, entry.source) == ("100000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
        assert _produce_one(broker.bootstrap, plain, b"w" * 4000) is None
        _incremental(broker.bootstrap, ResourceType.BROKER, "0", _op("message.max.bytes", AlterConfigOpType.DELETE))
        assert _incremental_wire(broker, 4, "", ("message.max.bytes", AlterConfigOpType.DELETE, None)) == \
            ErrorCode.none
        entry = _describe(broker.bootstrap, ResourceType.TOPIC, plain)["max.message.bytes"]
        assert (entry.value, entry.source) == ("500000", ConfigSource.STATIC_BROKER_CONFIG.value)
        assert _produce_one(broker.bootstrap, plain, b"v" * 4000) is None
        assert [r.value[:1] for r in confluent_consume(broker.bootstrap, plain, 1)] == [b"x", b"w", b"v"]
    finally:
        broker.stop()


def test_dynamic_compression_type_for_the_cluster(tmp_path: Path) -> None:
    """compression.type as a dynamic broker config: topics without their own value recompress."""
    broker = BrokerProcess(data_dir=tmp_path / "data")
    broker.start()
    try:
        topic = unique_topic("cfg-dyn-codec")
        create_topic(broker.bootstrap, topic)
        assert _produce_one(broker.bootstrap, topic, b"a" * 100) is None
        assert _incremental_wire(broker, 4, "", ("compression.type", AlterConfigOpType.SET, "gzip")) == ErrorCode.none
        assert _produce_one(broker.bootstrap, topic, b"b" * 100) is None
        segments = sorted((Path(broker.data_dir) / "logs" / f"{topic}-0").glob("*.log"))
        codecs = [h.compression for segment in segments for h, _ in iter_batches(segment.read_bytes())]
        assert codecs == [COMPRESSION_NONE, COMPRESSION_GZIP]
        assert [r.value for r in confluent_consume(broker.bootstrap, topic, 1)] == [b"a" * 100, b"b" * 100]
    finally:
        broker.stop()


def test_create_topics_answers_with_the_described_configs(ours: BrokerProcess) -> None:
    """CreateTopics v5+: the new topic's configs come back as DescribeConfigs would show them."""
    topic = unique_topic("cfg-create")
    host, port = parse_bootstrap(ours.bootstrap)
    with BrokerConnection(host, port) as conn:
        response = conn.call(CREATE_TOPICS, lambda m: build(
            m.CreateTopicsRequest, timeout=datetime.timedelta(seconds=30), validate_only=False,
            topics=(build(m.CreatableTopic, name=topic, num_partitions=1, replication_factor=1, assignments=(),
                          configs=(build(m.CreatableTopicConfig, name="cleanup.policy", value="delete, compact"),)),)))
    [created] = response.topics
    assert created.error_code == ErrorCode.none
    assert created.topic_config_error_code == ErrorCode.none
    configs = {c.name: (c.value, c.config_source) for c in created.configs}
    assert configs["cleanup.policy"] == ("delete,compact", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert configs["retention.ms"] == (str(5 * 3_600_000), ConfigSource.STATIC_BROKER_CONFIG.value)
    assert configs["compression.type"] == ("producer", ConfigSource.DEFAULT_CONFIG.value)


def test_min_insync_replicas_above_the_single_replica_refuses_acks_all(ours: BrokerProcess) -> None:
    """Kafka: with fewer in-sync replicas than min.insync.replicas an acks=all produce gets
    NOT_ENOUGH_REPLICAS and nothing is written; acks=1 still writes. Lowering it lets acks=all in."""
    topic = unique_topic("cfg-isr")
    create_topic(ours.bootstrap, topic, config={"min.insync.replicas": "2"})
    entry = _describe(ours.bootstrap, ResourceType.TOPIC, topic)["min.insync.replicas"]
    assert (entry.value, entry.source) == ("2", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)

    def produce(acks: str, value: bytes) -> KafkaError | None:
        producer = Producer({"bootstrap.servers": ours.bootstrap, "acks": acks, "enable.idempotence": False,
                             "retries": 0, "linger.ms": 0})
        errors: list[KafkaError | None] = []
        producer.produce(topic, value, partition=0, on_delivery=lambda err, _msg: errors.append(err))
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
        return errors[0]

    error = produce("all", b"refused")
    assert error is not None
    assert error.code() == KafkaError.NOT_ENOUGH_REPLICAS
    assert produce("1", b"leader-only") is None
    _incremental(ours.bootstrap, ResourceType.TOPIC, topic, _op("min.insync.replicas", AlterConfigOpType.DELETE))
    assert produce("all", b"all") is None
    assert [r.value for r in confluent_consume(ours.bootstrap, topic, 1)] == [b"leader-only", b"all"]


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_legacy_alter_configs_replaces_the_per_broker_layer(tmp_path: Path) -> None:
    """AlterConfigs (non-incremental) on BROKER "0": the given configs become the whole dynamic
    per-broker set, as Kafka's legacyAlterConfigs (omitted keys are deleted); validate_only
    changes nothing."""
    broker = BrokerProcess(data_dir=tmp_path / "data")
    broker.start()
    try:
        admin = admin_client(broker.bootstrap)

        def legacy(configs: dict[str, str], validate_only: bool = False) -> None:
            resource = ConfigResource(ResourceType.BROKER, "0", set_config=configs)
            admin.alter_configs([resource], validate_only=validate_only,
                                request_timeout=CLIENT_TIMEOUT_S)[resource].result(timeout=CLIENT_TIMEOUT_S)

        def dynamic_per_broker() -> dict[str, str | None]:
            described = _describe(broker.bootstrap, ResourceType.BROKER, "0")
            return {n: e.value for n, e in described.items() if e.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value}

        legacy({"log.retention.ms": "60000", "log.cleanup.policy": "compact"})
        assert dynamic_per_broker() == {"log.retention.ms": "60000", "log.cleanup.policy": "compact"}
        legacy({"log.retention.ms": "120000"}, validate_only=True)
        assert dynamic_per_broker() == {"log.retention.ms": "60000", "log.cleanup.policy": "compact"}
        legacy({"log.retention.ms": "120000"})
        assert dynamic_per_broker() == {"log.retention.ms": "120000"}
        topic = unique_topic("cfg-legacy-broker")
        create_topic(broker.bootstrap, topic)
        entry = _describe(broker.bootstrap, ResourceType.TOPIC, topic)["retention.ms"]
        assert (entry.value, entry.source) == ("120000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    finally:
        broker.stop()


def test_validate_only_checks_and_changes_nothing(ours: BrokerProcess) -> None:
    topic = unique_topic("cfg-validate")
    create_topic(ours.bootstrap, topic)
    admin = admin_client(ours.bootstrap)

    def validate(*entries: ConfigEntry) -> None:
        resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=list(entries))
        admin.incremental_alter_configs([resource], validate_only=True,
                                        request_timeout=CLIENT_TIMEOUT_S)[resource].result(timeout=CLIENT_TIMEOUT_S)

    validate(_op("compression.type", AlterConfigOpType.SET, "lz4"))
    with pytest.raises(KafkaException) as info:
        validate(_op("compression.type", AlterConfigOpType.SET, "bzip2"))
    assert info.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert _describe(ours.bootstrap, ResourceType.TOPIC, topic)["compression.type"].value == "producer"
