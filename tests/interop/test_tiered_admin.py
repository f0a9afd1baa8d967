"""Tiered storage's admin surface with real clients (issue 21): Kafka's config rules refusing
CreateTopics, IncrementalAlterConfigs and AlterConfigs with INVALID_CONFIG (confluent-kafka's
AdminClient), DescribeConfigs showing the remote.* topic and broker configs and the read-only
``oncestream.remote.log.storage.status``, and DescribeLogDirs (kafka-python's KafkaAdminClient and
our Admin; librdkafka has no DescribeLogDirs), authorized by DESCRIBE on the cluster."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclOperation,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import KafkaAdminClient, OffsetSpec
from kafka.errors import UnsupportedVersionError

from oncestream.client.admin.admin import Admin
from oncestream.client.common.errors import KafkaException as OurKafkaException
from tests.support.acl import SECURED, allow
from tests.support.brokers import BrokerProcess
from tests.support.clients import CLIENT_TIMEOUT_S, admin_client, confluent_produce, create_topic, unique_topic
from tests.support.records import SentRecord

pytestmark = pytest.mark.interop

STATUS = "oncestream.remote.log.storage.status"
ONCESTREAM = str(Path(sys.executable).parent / "oncestream")


def _broker(tmp_path_factory: pytest.TempPathFactory, name: str, config: dict[str, str]) -> Iterator[BrokerProcess]:
    process = BrokerProcess(data_dir=tmp_path_factory.mktemp(name) / "data", config=config)
    with process:
        yield process


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker without tiered storage (remote.log.storage.system.enable defaults to false)."""
    yield from _broker(tmp_path_factory, "tier-off", {})


@pytest.fixture(scope="module")
def tiered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker with tiered storage into a local directory store."""
    store = tmp_path_factory.mktemp("tier-store")
    yield from _broker(tmp_path_factory, "tier-on", {"remote.log.storage.system.enable": "true",
                                                     "rsm.config.storage.uri": Path(store).as_uri(),
                                                     "remote.log.manager.task.interval.ms": "200"})


def _create_error(bootstrap: str, topic: str, config: dict[str, str]) -> KafkaError:
    admin = admin_client(bootstrap)  # kept alive until its futures are done
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=1, replication_factor=1, config=config)], request_timeout=CLIENT_TIMEOUT_S)
    with pytest.raises(KafkaException) as info:
        futures[topic].result(timeout=CLIENT_TIMEOUT_S)
    error: KafkaError = info.value.args[0]
    return error


def _incremental_error(bootstrap: str, topic: str, **sets: str) -> KafkaError:
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(name.replace("_", "."), value, incremental_operation=AlterConfigOpType.SET)
        for name, value in sets.items()])
    admin = admin_client(bootstrap)
    futures = admin.incremental_alter_configs([resource], request_timeout=CLIENT_TIMEOUT_S)
    with pytest.raises(KafkaException) as info:
        futures[resource].result(timeout=CLIENT_TIMEOUT_S)
    error: KafkaError = info.value.args[0]
    return error


def _describe(bootstrap: str, rtype: ResourceType, name: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(rtype, name)
    admin = admin_client(bootstrap)
    described: dict[str, ConfigEntry] = admin.describe_configs(
        [resource], request_timeout=CLIENT_TIMEOUT_S)[resource].result(timeout=CLIENT_TIMEOUT_S)
    return described


# --- the config rules ----------------------------------------------------------------------------


def test_tiering_refused_when_the_broker_has_no_tiered_storage(plain: BrokerProcess) -> None:
    error = _create_error(plain.bootstrap, unique_topic("tier-off"), {"remote.storage.enable": "true"})
    assert error.code() == KafkaError.INVALID_CONFIG
    assert "Tiered Storage functionality is disabled in the broker" in error.str()
    topic = unique_topic("tier-off-alter")
    create_topic(plain.bootstrap, topic)
    error = _incremental_error(plain.bootstrap, topic, remote_storage_enable="true")
    assert error.code() == KafkaError.INVALID_CONFIG
    assert _describe(plain.bootstrap, ResourceType.TOPIC, topic)["remote.storage.enable"].value == "false"


def test_create_refuses_compaction_and_local_retention_above_retention(tiered: BrokerProcess) -> None:
    for config, words in (
        ({"cleanup.policy": "compact"}, "only supports topics with cleanup.policy=delete"),
        ({"retention.ms": "60000", "local.retention.ms": "120000"},
         "Value must not be more than retention.ms property value: 60000"),
        ({"retention.bytes": "1000", "local.retention.bytes": "2000"},
         "Value must not be more than retention.bytes property value: 1000"),
    ):
        error = _create_error(tiered.bootstrap, unique_topic("tier-bad"), {"remote.storage.enable": "true", **config})
        assert error.code() == KafkaError.INVALID_CONFIG, config
        assert words in error.str(), error.str()


def test_tiered_topic_alters_checked_and_described(tiered: BrokerProcess) -> None:
    topic = unique_topic("tiered")
    create_topic(tiered.bootstrap, topic, config={"remote.storage.enable": "true", "retention.ms": "600000",
                                                  "local.retention.ms": "60000"})
    # Compaction on a tiered topic, a local retention above the total, and turning tiering off
    # without deleting the remote data: INVALID_CONFIG, the configs unchanged.
    assert _incremental_error(tiered.bootstrap, topic, cleanup_policy="compact").code() == KafkaError.INVALID_CONFIG
    assert _incremental_error(tiered.bootstrap, topic, local_retention_ms="700000").code() == \
        KafkaError.INVALID_CONFIG
    off = _incremental_error(tiered.bootstrap, topic, remote_storage_enable="false")
    assert off.code() == KafkaError.INVALID_CONFIG
    assert "remote.log.delete.on.disable=true" in off.str()
    # Legacy AlterConfigs replaces the whole set: leaving remote.storage.enable out turns it off.
    resource = ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.ms": "600000"})
    admin = admin_client(tiered.bootstrap)
    with pytest.raises(KafkaException) as info:
        admin.alter_configs([resource], request_timeout=CLIENT_TIMEOUT_S)[resource].result(timeout=CLIENT_TIMEOUT_S)
    assert info.value.args[0].code() == KafkaError.INVALID_CONFIG

    described = _describe(tiered.bootstrap, ResourceType.TOPIC, topic)
    assert described["remote.storage.enable"].value == "true"
    assert described["remote.storage.enable"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert described["cleanup.policy"].value == "delete"
    local = described["local.retention.ms"]
    assert (local.value, local.source) == ("60000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert local.synonyms["log.local.retention.ms"].value == "-2"
    assert described["local.retention.bytes"].is_default
    assert described["local.retention.bytes"].synonyms["log.local.retention.bytes"].value == "-2"
    for name in ("remote.log.copy.disable", "remote.log.delete.on.disable"):
        assert (described[name].value, described[name].is_default) == ("false", True)


def test_broker_describe_shows_remote_configs_and_status(plain: BrokerProcess, tiered: BrokerProcess) -> None:
    off = _describe(plain.bootstrap, ResourceType.BROKER, "0")
    assert off["remote.log.storage.system.enable"].value == "false"
    assert off["remote.log.storage.system.enable"].is_default
    assert off[STATUS].value == "disabled"
    assert off[STATUS].is_read_only
    on = _describe(tiered.bootstrap, ResourceType.BROKER, "0")
    enable = on["remote.log.storage.system.enable"]
    assert (enable.value, enable.source, enable.is_read_only) == \
        ("true", ConfigSource.STATIC_BROKER_CONFIG.value, True)
    assert (on["rsm.config.storage.uri"].value or "").startswith("file:///")
    assert on["remote.log.manager.task.interval.ms"].value == "200"
    assert on["remote.log.manager.task.interval.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert on["remote.log.reader.threads"].value == "10"
    assert on["log.local.retention.ms"].value == "-2"
    assert not on["log.local.retention.ms"].is_read_only
    assert on[STATUS].is_read_only
    assert on[STATUS].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert not on[STATUS].is_default
    # Altering the status is refused as any read-only broker config is (Kafka: INVALID_REQUEST).
    resource = ConfigResource(ResourceType.BROKER, "0", incremental_configs=[
        ConfigEntry(STATUS, "ok", incremental_operation=AlterConfigOpType.SET)])
    admin = admin_client(tiered.bootstrap)
    with pytest.raises(KafkaException) as info:
        admin.incremental_alter_configs([resource], request_timeout=CLIENT_TIMEOUT_S)[resource].result(
            timeout=CLIENT_TIMEOUT_S)
    assert info.value.args[0].code() == KafkaError.INVALID_REQUEST
    # With tiered storage on, the broker default log.local.retention.ms may not exceed
    # log.retention.ms (168 hours by default): INVALID_REQUEST, as a bad broker config.
    resource = ConfigResource(ResourceType.BROKER, "0", incremental_configs=[
        ConfigEntry("log.local.retention.ms", str(169 * 3_600_000), incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as info:
        admin.incremental_alter_configs([resource], request_timeout=CLIENT_TIMEOUT_S)[resource].result(
            timeout=CLIENT_TIMEOUT_S)
    assert info.value.args[0].code() == KafkaError.INVALID_REQUEST
    assert "log.local.retention.ms" in info.value.args[0].str()


# --- DescribeLogDirs -------------------------------------------------------------------------------


def test_describe_log_dirs_with_kafka_python_and_our_admin(plain: BrokerProcess) -> None:
    topic = unique_topic("logdirs")
    create_topic(plain.bootstrap, topic, partitions=2)
    positions = confluent_produce(plain.bootstrap, topic, [SentRecord(key=b"k", value=b"v" * 100)] * 5)
    used = positions[0][0]  # one key: one partition
    local_dir = str((plain.data_dir / "logs").resolve())

    kp = KafkaAdminClient(bootstrap_servers=plain.bootstrap, request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000))
    try:
        [answer] = kp.describe_log_dirs(topic_partitions={topic: [0, 1, 7]})
    finally:
        kp.close()
    [log_dir] = answer["log_dirs"]
    assert log_dir["log_dir"] == local_dir
    assert log_dir["error_code"] == 0
    assert log_dir["total_bytes"] > 0
    assert 0 <= log_dir["usable_bytes"] <= log_dir["total_bytes"]
    [described] = log_dir["topics"]
    assert described["name"] == topic
    sizes = {p["partition_index"]: p["partition_size"] for p in described["partitions"]}
    assert set(sizes) == {0, 1}  # partition 7 does not exist: left out, as Kafka does
    assert sizes[used] > 500
    assert sizes[1 - used] == 0
    assert all(p["offset_lag"] == 0 and p["is_future_key"] is False for p in described["partitions"])

    with Admin({"bootstrap.servers": plain.bootstrap}) as ours:
        dirs = ours.describe_log_dirs()
    [(node, by_path)] = dirs.items()
    assert node == 0
    assert list(by_path) == [local_dir]  # no tiered storage: no remote entry
    ours_dir = by_path[local_dir]
    assert ours_dir.error is None
    assert not ours_dir.is_remote
    assert ours_dir.replica_infos[(topic, used)].size == sizes[used]
    assert ours_dir.total_bytes is not None
    assert ours_dir.total_bytes > 0
    assert ("__consumer_offsets", 0) in ours_dir.replica_infos  # null topic list: every partition


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from _broker(tmp_path_factory, "tier-acl", SECURED)


def test_describe_log_dirs_needs_describe_on_the_cluster(secured: BrokerProcess) -> None:
    with Admin({"bootstrap.servers": secured.bootstrap, "client.id": "principal:dirs"}) as ours:
        with pytest.raises(OurKafkaException) as info:
            ours.describe_log_dirs()
        assert info.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
        allow(secured, "dirs", ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE)
        [(_, by_path)] = ours.describe_log_dirs().items()
    assert [d.error for d in by_path.values()] == [None]


# --- oncestream topics describe ----------------------------------------------------------------------


def _kafka_python_offset(kp: KafkaAdminClient, topic: str, partition: int, spec: OffsetSpec) -> str:
    """kafka-python's ListOffsets answer for ``spec``, or ``-`` when the broker serves no version
    that carries it (the CLI prints ``-`` then)."""
    tp = KpTopicPartition(topic, partition)
    try:
        return str(kp.list_partition_offsets({tp: spec})[tp].offset)
    except UnsupportedVersionError:
        return "-"


def _described_partitions(bootstrap: str, topic: str) -> dict[int, dict[str, str]]:
    out = subprocess.run([ONCESTREAM, "topics", "describe", topic, "-b", bootstrap], capture_output=True,
                         timeout=CLIENT_TIMEOUT_S, check=True).stdout.decode()
    rows: dict[int, dict[str, str]] = {}
    for line in out.splitlines():
        words = line.split()
        if words[:1] == ["partition"]:
            offsets = line.split("offsets [", 1)[1].split(")", 1)
            low, high = offsets[0].split(", ")
            fields = dict(zip(offsets[1].split()[::2], offsets[1].split()[1::2], strict=True))
            rows[int(words[1])] = {"log-start": low, "high-watermark": high, **fields}
    return rows


def test_cli_topics_describe_shows_offsets_and_sizes(plain: BrokerProcess) -> None:
    """Per partition: log start, local log start (ListOffsets -4), latest tiered (-5), high
    watermark, local bytes (DescribeLogDirs), remote bytes (``-``: this broker has no remote
    store); cross-checked with kafka-python's ListOffsets and DescribeLogDirs."""
    topic = unique_topic("cli-tiered")
    create_topic(plain.bootstrap, topic, partitions=2)
    positions = confluent_produce(plain.bootstrap, topic, [SentRecord(key=b"k", value=b"v" * 50)] * 3)
    used = positions[0][0]
    rows = _described_partitions(plain.bootstrap, topic)
    kp = KafkaAdminClient(bootstrap_servers=plain.bootstrap, request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000))
    try:
        [answer] = kp.describe_log_dirs(topic_partitions={topic: [0, 1]})
        sizes = {p["partition_index"]: p["partition_size"]
                 for d in answer["log_dirs"] for t in d["topics"] for p in t["partitions"]}
        for partition in (0, 1):
            row = rows[partition]
            assert row["local-log-start"] == _kafka_python_offset(kp, topic, partition, OffsetSpec.EARLIEST_LOCAL)
            assert row["latest-tiered"] == _kafka_python_offset(kp, topic, partition, OffsetSpec.LATEST_TIERED)
            assert row["local-bytes"] == str(sizes[partition])
            assert row["remote-bytes"] == "-"
    finally:
        kp.close()
    assert (rows[used]["log-start"], rows[used]["high-watermark"]) == ("0", "3")
    assert (rows[1 - used]["log-start"], rows[1 - used]["high-watermark"]) == ("0", "0")
    assert int(rows[used]["local-bytes"]) > 150


def _remote_sizes(kp: KafkaAdminClient, topic: str) -> tuple[str, dict[int, int]]:
    """kafka-python's DescribeLogDirs: the remote entry's path and the topic's remote sizes."""
    [answer] = kp.describe_log_dirs(topic_partitions={topic: [0]})
    [remote] = [d for d in answer["log_dirs"] if d["log_dir"].startswith("remote:")]
    return remote["log_dir"], {p["partition_index"]: p["partition_size"]
                               for t in remote["topics"] if t["name"] == topic for p in t["partitions"]}


def test_remote_bytes_of_a_tiered_partition(tiered: BrokerProcess) -> None:
    """Once the RemoteLogManager copied segments: DescribeLogDirs' remote entry (kafka-python
    parses it) carries the partition's remote bytes, the CLI prints the same and the latest tiered
    offset kafka-python reads, and the status entry says ok."""
    topic = unique_topic("tiered-size")
    create_topic(tiered.bootstrap, topic, config={"remote.storage.enable": "true", "segment.bytes": "4096"})
    # One record per batch: the 4 KiB segments roll, and the closed ones are copied.
    confluent_produce(tiered.bootstrap, topic, [SentRecord(key=b"k", value=b"r" * 500)] * 40,
                      extra_conf={"batch.num.messages": 1})
    kp = KafkaAdminClient(bootstrap_servers=tiered.bootstrap, request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000))
    try:
        path, sizes = _remote_sizes(kp, topic)
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while sizes.get(0, 0) == 0 and time.monotonic() < deadline:  # copies run every 200 ms
            time.sleep(0.2)
            path, sizes = _remote_sizes(kp, topic)
        assert sizes[0] > 0, "no segment was copied within the wait"
        broker = _describe(tiered.bootstrap, ResourceType.BROKER, "0")
        assert path == "remote:" + (broker["rsm.config.storage.uri"].value or "")
        assert broker[STATUS].value == "ok"
        rows = _described_partitions(tiered.bootstrap, topic)
        # Copies may go on between the calls: each later answer is at least the earlier one.
        assert int(rows[0]["remote-bytes"]) >= sizes[0]
        assert int(_kafka_python_offset(kp, topic, 0, OffsetSpec.LATEST_TIERED)) >= int(rows[0]["latest-tiered"])
        assert int(rows[0]["local-bytes"]) > 0
    finally:
        kp.close()
