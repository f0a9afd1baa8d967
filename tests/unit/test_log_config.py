"""LogConfig: Kafka topic and broker property names, defaults and validation."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from oncestream.errors import InvalidConfigError
from oncestream.log.config import INT64_MAX, LogConfig


def test_defaults_match_kafka() -> None:
    config = LogConfig()
    assert config.segment_bytes == 1073741824
    assert config.segment_ms == config.retention_ms == 604800000
    assert config.retention_bytes == -1
    assert config.max_message_bytes == 1048588
    assert config.index_interval_bytes == 4096
    assert config.cleanup_policy == "delete"
    assert config.delete_retention_ms == 86400000
    assert config.message_timestamp_type == "CreateTime"
    assert config.flush_messages == INT64_MAX
    assert config.producer_id_expiration_ms == 86400000


def test_topic_configs_override_the_base() -> None:
    base = LogConfig(retention_ms=5)
    config = LogConfig.from_topic_configs(
        {
            "segment.bytes": "1000",
            "cleanup.policy": "delete, compact",
            "message.timestamp.type": "LogAppendTime",
            "flush.messages": "1",
            "segment.index.bytes": "4096",  # accepted, not modelled
            "min.insync.replicas": "2",
        },
        base,
    )
    assert (config.segment_bytes, config.retention_ms) == (1000, 5)
    assert config.cleanup_policy == "compact,delete"
    assert config.log_append_time
    assert config.deletes_by_retention
    assert config.flush_messages == 1


def test_to_topic_configs_round_trips() -> None:
    config = LogConfig(retention_ms=-1, retention_bytes=123, cleanup_policy="compact")
    described = config.to_topic_configs()
    assert described["retention.ms"] == "-1"
    assert described["cleanup.policy"] == "compact"
    assert set(described) >= {"retention.bytes", "segment.bytes", "segment.ms", "max.message.bytes",
                              "delete.retention.ms", "message.timestamp.type", "flush.messages"}
    assert LogConfig.from_topic_configs(described) == config


@pytest.mark.parametrize(
    "configs",
    [
        {"retention.ms": "soon"},
        {"retention.ms": "-2"},
        {"segment.bytes": "10"},
        {"segment.bytes": str(2**31)},
        {"segment.ms": "0"},
        {"cleanup.policy": "forever"},
        {"message.timestamp.type": "WallClock"},
        {"flush.messages": "0"},
        {"no.such.config": "1"},
    ],
)
def test_bad_topic_configs_are_invalid_config(configs: dict[str, str]) -> None:
    with pytest.raises(InvalidConfigError) as info:
        LogConfig.from_topic_configs(configs)
    assert info.value.code == ErrorCode.invalid_config


def test_broker_configs_give_the_topic_defaults() -> None:
    config = LogConfig.from_broker_configs(
        {
            "log.retention.hours": "2",
            "log.segment.bytes": "2048",
            "log.roll.ms": "60000",
            "message.max.bytes": "500",
            "log.cleanup.policy": "compact",
            "log.flush.interval.messages": "1",
            "producer.id.expiration.ms": "1000",
            "log.index.interval.bytes": "100",
            "node.id": "1",  # not a log setting: ignored
        }
    )
    assert config.retention_ms == 2 * 3_600_000
    assert (config.segment_bytes, config.segment_ms, config.max_message_bytes) == (2048, 60000, 500)
    assert (config.cleanup_policy, config.flush_messages) == ("compact", 1)
    assert (config.producer_id_expiration_ms, config.index_interval_bytes) == (1000, 100)


def test_broker_retention_ms_wins_over_hours_and_negative_means_forever() -> None:
    assert LogConfig.from_broker_configs({"log.retention.ms": "5", "log.retention.hours": "1"}).retention_ms == 5
    assert LogConfig.from_broker_configs({"log.retention.hours": "-1"}).retention_ms == -1
    assert LogConfig.from_broker_configs({"log.roll.hours": "1"}).segment_ms == 3_600_000
    with pytest.raises(InvalidConfigError):
        LogConfig.from_broker_configs({"log.retention.hours": "two"})


def test_direct_construction_is_validated_and_normalised() -> None:
    assert LogConfig(cleanup_policy="delete,compact").cleanup_policy == "compact,delete"
    with pytest.raises(InvalidConfigError):
        LogConfig(retention_ms=-5)
    with pytest.raises(InvalidConfigError):
        LogConfig(segment_bytes="1000")  # type: ignore[arg-type]
    with pytest.raises(InvalidConfigError):
        LogConfig(producer_id_expiration_ms=0)
