"""DescribeConfigs / IncrementalAlterConfigs rules, sans-io (Kafka's ConfigHelper,
ConfigAdminManager, ConfigurationControlManager and DynamicBrokerConfig behaviour)."""

from __future__ import annotations

from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from oncestream.broker import config_admin as admin
from oncestream.broker.config_admin import AlterOp
from oncestream.broker.dynamic_config import DynamicBrokerConfigs
from oncestream.errors import OnceStreamError, StorageError
from oncestream.log.config import LogConfig
from oncestream.log.topic_config_defs import ConfigSource, ConfigType
from oncestream.protocol.config_resources import RESOURCE_BROKER, RESOURCE_TOPIC

# The topic configs Kafka 4.x's DescribeConfigs returns for a topic (LogConfig's definitions).
KAFKA_4_TOPIC_CONFIGS = {
    "cleanup.policy", "compression.gzip.level", "compression.lz4.level", "compression.type",
    "compression.zstd.level", "delete.retention.ms", "file.delete.delay.ms", "flush.messages", "flush.ms",
    "follower.replication.throttled.replicas", "index.interval.bytes", "leader.replication.throttled.replicas",
    "local.retention.bytes", "local.retention.ms", "max.compaction.lag.ms", "max.message.bytes",
    "message.timestamp.after.max.ms", "message.timestamp.before.max.ms", "message.timestamp.type",
    "min.cleanable.dirty.ratio", "min.compaction.lag.ms", "min.insync.replicas", "preallocate",
    "remote.log.copy.disable", "remote.log.delete.on.disable", "remote.storage.enable", "retention.bytes",
    "retention.ms", "segment.bytes", "segment.index.bytes", "segment.jitter.ms", "segment.ms",
    "unclean.leader.election.enable",
}


def _code(info: pytest.ExceptionInfo) -> ErrorCode:
    assert isinstance(info.value, OnceStreamError)
    return info.value.code


def _dyn(static: dict[str, str] | None = None, cluster: dict[str, str] | None = None,
         broker: dict[str, str] | None = None) -> DynamicBrokerConfigs:
    return DynamicBrokerConfigs(0, dict(static or {}), dict(cluster or {}), dict(broker or {}))


# --- IncrementalAlterConfigs operations ------------------------------------------------------------


def test_set_and_delete() -> None:
    current = {"retention.ms": "1000", "max.message.bytes": "2048"}
    out = admin.apply_incremental(RESOURCE_TOPIC, current, [("retention.ms", AlterOp.SET, "5"),
                                                             ("max.message.bytes", AlterOp.DELETE, None)])
    assert out == {"retention.ms": "5"}
    assert current == {"retention.ms": "1000", "max.message.bytes": "2048"}  # not modified


def test_append_starts_from_the_config_default_and_skips_present_items() -> None:
    """ConfigurationControlManager.getParts: no override means the default list (delete)."""
    out = admin.apply_incremental(RESOURCE_TOPIC, {}, [("cleanup.policy", AlterOp.APPEND, "compact")])
    assert out == {"cleanup.policy": "delete,compact"}
    again = admin.apply_incremental(RESOURCE_TOPIC, out, [("cleanup.policy", AlterOp.APPEND, "compact,delete")])
    assert again == {"cleanup.policy": "delete,compact"}


def test_subtract_round_trip_and_empty_list() -> None:
    """SUBTRACT removes the given items; removing the last one leaves an empty list, which Kafka
    4.x accepts for cleanup.policy (no deletion, no compaction)."""
    both = admin.apply_incremental(RESOURCE_TOPIC, {}, [("cleanup.policy", AlterOp.APPEND, "compact")])
    compact_only = admin.apply_incremental(RESOURCE_TOPIC, both, [("cleanup.policy", AlterOp.SUBTRACT, "delete")])
    assert compact_only == {"cleanup.policy": "compact"}
    empty = admin.apply_incremental(RESOURCE_TOPIC, compact_only, [("cleanup.policy", AlterOp.SUBTRACT, "compact")])
    assert empty == {"cleanup.policy": ""}
    assert admin.validate_topic_configs(empty) == {"cleanup.policy": ""}
    config = LogConfig.from_topic_configs(empty)
    assert not config.compacts
    assert not config.deletes_by_retention
    # Subtracting what is not there changes nothing.
    assert admin.apply_incremental(RESOURCE_TOPIC, both, [("cleanup.policy", AlterOp.SUBTRACT, "nothing")]) == both


@pytest.mark.parametrize("op", [AlterOp.APPEND, AlterOp.SUBTRACT])
@pytest.mark.parametrize("name", ["retention.ms", "compression.type", "no.such.config"])
def test_append_or_subtract_on_a_non_list_is_invalid_config(op: AlterOp, name: str) -> None:
    with pytest.raises(OnceStreamError) as info:
        admin.apply_incremental(RESOURCE_TOPIC, {}, [(name, op, "1")])
    assert _code(info) == ErrorCode.invalid_config
    assert "because its type is not LIST" in str(info.value)


def test_list_ops_on_broker_list_configs() -> None:
    out = admin.apply_incremental(RESOURCE_BROKER, {}, [("log.cleanup.policy", AlterOp.APPEND, "compact")])
    assert out == {"log.cleanup.policy": "delete,compact"}
    with pytest.raises(OnceStreamError) as info:
        admin.apply_incremental(RESOURCE_BROKER, {}, [("message.max.bytes", AlterOp.APPEND, "1")])
    assert _code(info) == ErrorCode.invalid_config


@pytest.mark.parametrize("ops", [
    [("retention.ms", AlterOp.SET, "1"), ("retention.ms", AlterOp.DELETE, None)],  # duplicate keys
    [("retention.ms", AlterOp.SET, None)],  # null value outside DELETE
    [("cleanup.policy", AlterOp.APPEND, None)],
    [("retention.ms", 7, "1")],  # unknown operation
])
def test_malformed_operations_are_invalid_request(ops: list) -> None:
    with pytest.raises(OnceStreamError) as info:
        admin.apply_incremental(RESOURCE_TOPIC, {}, ops)
    assert _code(info) == ErrorCode.invalid_request


@pytest.mark.parametrize("configs", [
    {"no.such.config": "1"}, {"min.insync.replicas": "0"}, {"compression.type": "brotli"},
    {"cleanup.policy": "delete,forever"}, {"preallocate": "maybe"}, {"retention.ms": "-2"},
    {"leader.replication.throttled.replicas": "0:x"}, {"segment.index.bytes": "1"},
])
def test_bad_topic_configs_are_invalid_config(configs: dict[str, str]) -> None:
    with pytest.raises(OnceStreamError) as info:
        admin.validate_topic_configs(configs)
    assert _code(info) == ErrorCode.invalid_config


def test_repeated_resources_are_found() -> None:
    assert admin.check_resource_names([(2, "a"), (4, ""), (2, "a"), (2, "b")]) == {(2, "a")}


# --- DescribeConfigs of a topic -------------------------------------------------------------------


def test_topic_describe_lists_every_kafka_4_topic_config() -> None:
    entries = admin.describe_topic({}, _dyn(), include_synonyms=False, include_documentation=False)
    assert {e.name for e in entries} == KAFKA_4_TOPIC_CONFIGS
    by_name = {e.name: e for e in entries}
    assert by_name["compression.type"].value == "producer"
    assert by_name["min.insync.replicas"].value == "1"
    assert by_name["min.insync.replicas"].type == ConfigType.INT
    assert by_name["cleanup.policy"].type == ConfigType.LIST
    assert all(e.source == ConfigSource.DEFAULT_CONFIG and e.is_default for e in entries)
    assert all(not e.read_only and not e.sensitive and e.doc is None and e.synonyms == () for e in entries)


def test_topic_describe_sources_follow_kafkas_precedence() -> None:
    """topic override > dynamic per-broker > dynamic cluster default > static > default."""
    dynamic = _dyn(static={"log.retention.ms": "1000", "message.max.bytes": "5000", "compression.type": "gzip"},
                   cluster={"message.max.bytes": "6000", "min.insync.replicas": "2"},
                   broker={"message.max.bytes": "7000"})
    entries = {e.name: e for e in admin.describe_topic({"compression.type": "zstd"}, dynamic,
                                                       include_synonyms=True, include_documentation=True)}
    assert (entries["retention.ms"].value, entries["retention.ms"].source) == ("1000", ConfigSource.STATIC_BROKER_CONFIG)
    assert (entries["max.message.bytes"].value, entries["max.message.bytes"].source) == \
        ("7000", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert entries["max.message.bytes"].synonyms == (
        ("message.max.bytes", "7000", ConfigSource.DYNAMIC_BROKER_CONFIG),
        ("message.max.bytes", "6000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("message.max.bytes", "5000", ConfigSource.STATIC_BROKER_CONFIG),
        ("message.max.bytes", "1048588", ConfigSource.DEFAULT_CONFIG),
    )
    assert (entries["min.insync.replicas"].value, entries["min.insync.replicas"].source) == \
        ("2", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert entries["compression.type"].value == "zstd"
    assert entries["compression.type"].synonyms[:2] == (
        ("compression.type", "zstd", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ("compression.type", "gzip", ConfigSource.STATIC_BROKER_CONFIG),
    )
    assert entries["segment.bytes"].synonyms == (("log.segment.bytes", "1073741824", ConfigSource.DEFAULT_CONFIG),)
    assert all(e.doc for e in entries.values())


def test_topic_describe_converts_hour_synonyms() -> None:
    entries = {e.name: e for e in admin.describe_topic({}, _dyn(static={"log.retention.hours": "2"}),
                                                       include_synonyms=True, include_documentation=False)}
    assert entries["retention.ms"].value == "7200000"
    assert entries["retention.ms"].synonyms[0] == ("log.retention.hours", "2", ConfigSource.STATIC_BROKER_CONFIG)


def test_legacy_topic_configs_are_described_only_when_set() -> None:
    entries = admin.describe_topic({"message.format.version": "3.0-IV1"}, _dyn(),
                                   include_synonyms=False, include_documentation=False)
    assert {e.name for e in entries} == KAFKA_4_TOPIC_CONFIGS | {"message.format.version"}


# --- BROKER resources ------------------------------------------------------------------------------


def test_broker_describe_marks_read_only_and_hides_passwords() -> None:
    dynamic = _dyn(static={"ssl.keystore.password": "secret", "num.partitions": "3", "oncestream.x": "1",
                           "custom.plugin.secret": "s"}, cluster={"log.retention.ms": "1000"})
    entries = {e.name: e for e in admin.describe_broker(dynamic, "0", include_synonyms=True,
                                                        include_documentation=True, remote_status="disabled")}
    assert entries["ssl.keystore.password"].value is None
    assert entries["ssl.keystore.password"].sensitive
    assert entries["ssl.keystore.password"].synonyms == (
        ("ssl.keystore.password", None, ConfigSource.STATIC_BROKER_CONFIG),)
    assert entries["custom.plugin.secret"].value is None  # unknown type: Kafka treats it as sensitive
    assert entries["oncestream.x"].value == "1"
    assert (entries["num.partitions"].value, entries["num.partitions"].read_only) == ("3", True)
    assert entries["num.partitions"].source == ConfigSource.STATIC_BROKER_CONFIG
    retention = entries["log.retention.ms"]
    assert (retention.value, retention.source, retention.read_only) == \
        ("1000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, False)
    hours = entries["log.retention.hours"]
    assert hours.value == "168"
    assert hours.source == ConfigSource.DEFAULT_CONFIG
    assert entries["message.max.bytes"].is_default
    assert entries["message.max.bytes"].value == "1048588"
    # The cluster-default resource lists only the dynamic cluster defaults.
    assert [(e.name, e.value, e.source) for e in admin.describe_broker(dynamic, "", include_synonyms=False,
                                                                         include_documentation=False,
                                                                         remote_status="disabled")] == \
        [("log.retention.ms", "1000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)]


@pytest.mark.parametrize("name", ["1", "x", "-1"])
def test_broker_resource_must_be_this_node_or_empty(name: str) -> None:
    with pytest.raises(OnceStreamError) as info:
        _dyn().describe(name, include_synonyms=False, include_documentation=False)
    assert _code(info) == ErrorCode.invalid_request


@pytest.mark.parametrize("layer", [{"num.partitions": "4"}, {"listeners": "PLAINTEXT://:1"},
                                   {"message.max.bytes": "big"}, {"log.cleanup.policy": "forever"},
                                   {"log.retention.hours": "x"}])
def test_read_only_or_bad_broker_configs_are_invalid_request(layer: dict[str, str]) -> None:
    """DynamicBrokerConfig.validateConfigs: ConfigException, turned into INVALID_REQUEST (KAFKA-13609)."""
    with pytest.raises(OnceStreamError) as info:
        _dyn().validate_layer("", layer)
    assert _code(info) == ErrorCode.invalid_request


def test_dynamic_layers_apply_in_order_and_persist(tmp_path: Path) -> None:
    dynamic = _dyn(static={"message.max.bytes": "5000"})
    dynamic = dynamic.with_layer("", dynamic.validate_layer("", {"message.max.bytes": "6000",
                                                                 "log.cleanup.policy": "compact"}))
    dynamic = dynamic.with_layer("0", dynamic.validate_layer("0", {"message.max.bytes": "7000"}))
    assert dynamic.effective()["message.max.bytes"] == "7000"
    assert LogConfig.from_broker_configs(dynamic.effective()).max_message_bytes == 7000
    assert LogConfig.from_broker_configs(dynamic.effective()).cleanup_policy == "compact"
    dynamic.save(tmp_path)
    loaded = DynamicBrokerConfigs.load(tmp_path, 0, {"message.max.bytes": "5000"})
    assert (loaded.cluster, loaded.broker) == (dynamic.cluster, dynamic.broker)
    assert DynamicBrokerConfigs.load(tmp_path, 1, {}).broker == {}  # another node's layer is not ours


def test_damaged_dynamic_config_file_is_a_storage_error(tmp_path: Path) -> None:
    (tmp_path / "dynamic-broker-configs.json").write_text("{not json")
    with pytest.raises(StorageError):
        DynamicBrokerConfigs.load(tmp_path, 0, {})


def test_new_broker_defaults_reach_every_topic_without_its_own_value(tmp_path: Path) -> None:
    """A dynamic broker config change (LogManager.rebase_configs) applies at once to the logs of
    topics that have no override; an override still wins; nothing is rewritten on disk."""
    from oncestream.log.manager import TOPICS_DIR, LogManager

    manager = LogManager.open(tmp_path, LogConfig(), 0)
    try:
        manager.create_topic("plain", 2, {})
        manager.create_topic("own", 1, {"max.message.bytes": "3000"})
        metadata = {p.name: p.read_bytes() for p in (tmp_path / TOPICS_DIR).glob("*.json")}
        assert len(metadata) == 2
        manager.rebase_configs(LogConfig.from_broker_configs({"message.max.bytes": "2000", "compression.type": "lz4"}))
        assert [manager.get("plain", p).config.max_message_bytes for p in (0, 1)] == [2000, 2000]
        assert manager.get("plain", 0).config.compression_type == "lz4"
        assert manager.get("own", 0).config.max_message_bytes == 3000
        assert manager.get("own", 0).config.compression_type == "lz4"
        assert manager.topics()["plain"].config.max_message_bytes == 2000
        # A topic created afterwards starts from the new defaults.
        manager.create_topic("later", 1, {})
        assert manager.get("later", 0).config.max_message_bytes == 2000
        after = {p.name: p.read_bytes() for p in (tmp_path / TOPICS_DIR).glob("*.json")}
        assert {name: after[name] for name in metadata} == metadata
    finally:
        manager.close()


def test_a_stored_override_this_version_refuses_does_not_keep_the_broker_down(tmp_path: Path) -> None:
    """An override an older version stored unchecked is ignored (with a warning) when the topic
    is opened; the topic's other overrides still apply."""
    import json

    from oncestream.log.manager import TOPICS_DIR, LogManager

    manager = LogManager.open(tmp_path, LogConfig(), 0)
    manager.create_topic("old", 1, {"retention.ms": "1000"})
    manager.close()
    [path] = (tmp_path / TOPICS_DIR).glob("*.json")
    data = json.loads(path.read_text())
    data["configs"]["compression.type"] = "brotli"
    path.write_text(json.dumps(data))
    manager = LogManager.open(tmp_path, LogConfig(), 0)
    try:
        config = manager.get("old", 0).config
        assert (config.retention_ms, config.compression_type) == (1000, "producer")
    finally:
        manager.close()


def test_stored_dynamic_values_that_no_longer_validate_are_ignored(tmp_path: Path) -> None:
    """Kafka's removeInvalidConfigs: an invalid stored dynamic value is logged and ignored."""
    import json

    (tmp_path / "dynamic-broker-configs.json").write_text(json.dumps(
        {"version": 1, "cluster": {"message.max.bytes": "huge", "log.retention.ms": "5000"},
         "brokers": {"0": {"compression.type": "brotli", "log.cleanup.policy": "compact"}}}))
    loaded = DynamicBrokerConfigs.load(tmp_path, 0, {})
    assert (loaded.cluster, loaded.broker) == ({"log.retention.ms": "5000"}, {"log.cleanup.policy": "compact"})


def test_a_dynamic_layer_is_bounded() -> None:
    from oncestream.broker.dynamic_config import MAX_DYNAMIC_CONFIGS_PER_LAYER

    many = {f"custom.{i}": "x" for i in range(MAX_DYNAMIC_CONFIGS_PER_LAYER + 1)}
    with pytest.raises(OnceStreamError) as info:
        _dyn().validate_layer("", many)
    assert _code(info) == ErrorCode.invalid_request
    assert len(_dyn().validate_layer("", dict(list(many.items())[:10]))) == 10  # unknown names are kept
