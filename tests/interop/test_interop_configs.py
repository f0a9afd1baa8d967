"""Topic configs through the admin API (DescribeConfigs, AlterConfigs, IncrementalAlterConfigs)
and the produce-side limit they drive: a batch over max.message.bytes is MESSAGE_TOO_LARGE."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from tests.support.clients import (
    CLIENT_TIMEOUT_S,
    admin_client,
    confluent_consume,
    create_topic,
    unique_topic,
)
from tests.support.narrow import present

pytestmark = pytest.mark.interop


def _describe(bootstrap: str, topic: str) -> dict[str, ConfigEntry]:
    admin = admin_client(bootstrap)
    resource = ConfigResource(ResourceType.TOPIC, topic)
    futures = admin.describe_configs([resource], request_timeout=CLIENT_TIMEOUT_S)
    return futures[resource].result(timeout=CLIENT_TIMEOUT_S)


def _incremental(bootstrap: str, topic: str, *entries: ConfigEntry) -> None:
    admin = admin_client(bootstrap)
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=list(entries))
    futures = admin.incremental_alter_configs([resource], request_timeout=CLIENT_TIMEOUT_S)
    futures[resource].result(timeout=CLIENT_TIMEOUT_S)


def _produce_one(bootstrap: str, topic: str, value: bytes) -> tuple[KafkaError | None, int | None]:
    """Send one record alone in its batch; return (delivery error, offset: None when it failed)."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": False, "linger.ms": 0}
    )
    reports: list[tuple[KafkaError | None, int | None]] = []
    producer.produce(topic, value, key=b"k", partition=0,
                     on_delivery=lambda err, msg: reports.append((err, msg.offset())))
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    [report] = reports
    return report


def test_create_topic_with_config_is_described(broker):
    """Configs given at CreateTopics show up in DescribeConfigs as topic overrides."""
    topic = unique_topic("cfg-create")
    create_topic(broker.bootstrap, topic, partitions=1, config={"retention.ms": "3600000"})
    described = _describe(broker.bootstrap, topic)
    assert described["retention.ms"].value == "3600000"
    assert not described["retention.ms"].is_default
    assert int(present(described["max.message.bytes"].value, "max.message.bytes")) > 0


def test_incremental_alter_configs_set_and_delete(broker):
    """IncrementalAlterConfigs SET changes one key; DELETE reverts it to the default."""
    topic = unique_topic("cfg-incr")
    create_topic(broker.bootstrap, topic, partitions=1, config={"retention.ms": "3600000"})
    default_max_bytes = _describe(broker.bootstrap, topic)["max.message.bytes"].value
    _incremental(
        broker.bootstrap,
        topic,
        ConfigEntry("max.message.bytes", "2048", incremental_operation=AlterConfigOpType.SET),
    )
    described = _describe(broker.bootstrap, topic)
    assert described["max.message.bytes"].value == "2048"
    assert described["retention.ms"].value == "3600000", "SET of one key must keep the others"

    _incremental(
        broker.bootstrap,
        topic,
        ConfigEntry("max.message.bytes", None, incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET),
    )
    described = _describe(broker.bootstrap, topic)
    assert described["max.message.bytes"].value == default_max_bytes
    assert described["max.message.bytes"].is_default
    assert described["retention.ms"].value == "7200000"


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_legacy_alter_configs_replaces_topic_overrides(broker):
    """AlterConfigs (non-incremental) sets exactly the given overrides."""
    topic = unique_topic("cfg-legacy")
    create_topic(broker.bootstrap, topic, partitions=1, config={"max.message.bytes": "4096"})
    admin = admin_client(broker.bootstrap)
    resource = ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.ms": "5000000"})
    admin.alter_configs([resource], request_timeout=CLIENT_TIMEOUT_S)[resource].result(
        timeout=CLIENT_TIMEOUT_S
    )
    described = _describe(broker.bootstrap, topic)
    assert described["retention.ms"].value == "5000000"
    # AlterConfigs replaces the whole override set: the old override is gone.
    assert described["max.message.bytes"].value != "4096"
    assert described["max.message.bytes"].is_default


def test_produce_over_max_message_bytes_is_message_too_large(broker):
    """After max.message.bytes is lowered, a bigger batch is rejected with MESSAGE_TOO_LARGE
    and nothing is appended; smaller records still go through."""
    topic = unique_topic("cfg-size")
    create_topic(broker.bootstrap, topic, partitions=1)
    assert _produce_one(broker.bootstrap, topic, b"x" * 4096) == (None, 0)

    _incremental(
        broker.bootstrap,
        topic,
        ConfigEntry("max.message.bytes", "1024", incremental_operation=AlterConfigOpType.SET),
    )
    err, _ = _produce_one(broker.bootstrap, topic, b"y" * 4096)
    assert err is not None, err
    assert err.code() == KafkaError.MSG_SIZE_TOO_LARGE, err
    assert _produce_one(broker.bootstrap, topic, b"small") == (None, 1)

    consumed = confluent_consume(broker.bootstrap, topic, 1)
    assert [(r.offset, r.value) for r in consumed] == [(0, b"x" * 4096), (1, b"small")]


def test_topic_created_with_small_max_message_bytes_rejects_big_batch(broker):
    """max.message.bytes given at creation applies to the very first produce."""
    topic = unique_topic("cfg-size-create")
    create_topic(broker.bootstrap, topic, partitions=1, config={"max.message.bytes": "512"})
    err, _ = _produce_one(broker.bootstrap, topic, b"z" * 2048)
    assert err is not None, err
    assert err.code() == KafkaError.MSG_SIZE_TOO_LARGE, err
