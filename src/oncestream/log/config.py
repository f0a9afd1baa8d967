"""Per-topic log configuration with Kafka's topic property names, defaults and validation.

Two name spaces map onto one ``LogConfig``: topic properties (``retention.ms``, used by CreateTopics,
AlterConfigs and DescribeConfigs) and broker properties (``log.retention.ms``, ``--config`` on the
command line) which provide the defaults every topic starts from.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from oncestream.errors import InvalidConfigError
from oncestream.log.topic_config_defs import TOPIC_CONFIG_DEFS, validate_topic_config
from oncestream.protocol.compression import (
    COMPRESSION_BY_NAME,
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_ZSTD,
    GZIP_LEVEL_DEFAULT,
    LZ4_LEVEL_DEFAULT,
    ZSTD_LEVEL_DEFAULT,
)

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

CLEANUP_DELETE = "delete"
CLEANUP_COMPACT = "compact"
TIMESTAMP_CREATE_TIME = "CreateTime"
TIMESTAMP_LOG_APPEND_TIME = "LogAppendTime"

def _parse_int(name: str, text: str, low: int, high: int) -> int:
    try:
        value = int(str(text).strip())
    except ValueError as exc:
        raise InvalidConfigError(f"{name}: {text!r} is not an integer") from exc
    if not low <= value <= high:
        raise InvalidConfigError(f"{name}: {value} is outside [{low}, {high}]")
    return value


def _parse_ratio(name: str, text: str) -> float:
    try:
        value = float(str(text).strip())
    except ValueError as exc:
        raise InvalidConfigError(f"{name}: {text!r} is not a number") from exc
    if not 0.0 <= value <= 1.0:
        raise InvalidConfigError(f"{name}: {value} is outside [0, 1]")
    return value


def _parse_cleanup_policy(name: str, text: str) -> str:
    parts = {part.strip() for part in str(text).split(",") if part.strip()}
    if not parts <= {CLEANUP_DELETE, CLEANUP_COMPACT}:
        raise InvalidConfigError(f"{name}: {text!r} must be delete, compact, compact,delete or empty")
    # One canonical spelling so equality is stable. Empty (Kafka 4.x): neither deletion nor
    # compaction, the log keeps everything.
    return ",".join(sorted(parts))


def _parse_catalog(name: str, text: str) -> str:
    return validate_topic_config(name, text)


def _parse_timestamp_type(name: str, text: str) -> str:
    value = str(text).strip()
    if value not in (TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME):
        raise InvalidConfigError(f"{name}: {text!r} must be CreateTime or LogAppendTime")
    return value


def _int_parser(low: int, high: int) -> Callable[[str, str], int]:
    return lambda name, text: _parse_int(name, text, low, high)


def _parse_bool(name: str, text: str) -> bool:
    lowered = str(text).strip().lower()
    if lowered not in ("true", "false"):
        raise InvalidConfigError(f"{name}: {text!r} must be true or false")
    return lowered == "true"


# topic property name -> (LogConfig field, parser). Ranges follow Kafka's LogConfig definitions;
# segment.bytes keeps Kafka 3.x's small minimum so tests can roll tiny segments, and is capped at
# int32 max because index entries store file positions as int32.
_TOPIC_FIELDS: dict[str, tuple[str, Callable[[str, str], object]]] = {
    "segment.bytes": ("segment_bytes", _int_parser(14, INT32_MAX)),
    "segment.ms": ("segment_ms", _int_parser(1, INT64_MAX)),
    "retention.ms": ("retention_ms", _int_parser(-1, INT64_MAX)),
    "retention.bytes": ("retention_bytes", _int_parser(-1, INT64_MAX)),
    "max.message.bytes": ("max_message_bytes", _int_parser(0, INT32_MAX)),
    "index.interval.bytes": ("index_interval_bytes", _int_parser(0, INT32_MAX)),
    "cleanup.policy": ("cleanup_policy", _parse_cleanup_policy),
    "delete.retention.ms": ("delete_retention_ms", _int_parser(0, INT64_MAX)),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", _int_parser(0, INT64_MAX)),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", _parse_ratio),
    "message.timestamp.type": ("message_timestamp_type", _parse_timestamp_type),
    "flush.messages": ("flush_messages", _int_parser(1, INT64_MAX)),
    "min.insync.replicas": ("min_insync_replicas", _int_parser(1, INT32_MAX)),
    "compression.type": ("compression_type", _parse_catalog),
    "compression.gzip.level": ("compression_gzip_level", lambda name, text: int(_parse_catalog(name, text))),
    "compression.lz4.level": ("compression_lz4_level", lambda name, text: int(_parse_catalog(name, text))),
    "compression.zstd.level": ("compression_zstd_level", lambda name, text: int(_parse_catalog(name, text))),
    # Tiered storage (KIP-405). local.retention.* = -2: as retention.*; -1: unlimited.
    "remote.storage.enable": ("remote_storage_enable", _parse_bool),
    "remote.log.copy.disable": ("remote_log_copy_disable", _parse_bool),
    "remote.log.delete.on.disable": ("remote_log_delete_on_disable", _parse_bool),
    "local.retention.ms": ("local_retention_ms", _int_parser(-2, INT64_MAX)),
    "local.retention.bytes": ("local_retention_bytes", _int_parser(-2, INT64_MAX)),
}

# Kafka topic configs accepted, validated and kept as overrides (so DescribeConfigs shows them and
# clients that set them are not refused) that the single-node log does not act on: replication,
# throttling, preallocation, max.compaction.lag.ms and the configs Kafka 4.0 removed.
PASSTHROUGH_TOPIC_CONFIGS: frozenset[str] = frozenset(set(TOPIC_CONFIG_DEFS) - set(_TOPIC_FIELDS))

# broker property name -> topic property name it supplies the default for.
_BROKER_TO_TOPIC: dict[str, str] = {
    "log.segment.bytes": "segment.bytes",
    "log.retention.bytes": "retention.bytes",
    "message.max.bytes": "max.message.bytes",
    "log.index.interval.bytes": "index.interval.bytes",
    "log.cleanup.policy": "cleanup.policy",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "log.message.timestamp.type": "message.timestamp.type",
    "log.flush.interval.messages": "flush.messages",
    "min.insync.replicas": "min.insync.replicas",
    "compression.type": "compression.type",
    "compression.gzip.level": "compression.gzip.level",
    "compression.lz4.level": "compression.lz4.level",
    "compression.zstd.level": "compression.zstd.level",
    "log.local.retention.ms": "local.retention.ms",
    "log.local.retention.bytes": "local.retention.bytes",
}

_HOUR_MS = 3_600_000
_MINUTE_MS = 60_000


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Settings of one partition log, named after Kafka's topic configs (units in the names)."""

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    retention_ms: int = 604800000  # -1 = keep forever
    retention_bytes: int = -1  # -1 = no size limit
    max_message_bytes: int = 1048588
    index_interval_bytes: int = 4096
    cleanup_policy: str = CLEANUP_DELETE
    delete_retention_ms: int = 86400000  # how long a tombstone outlives the first clean that saw it
    min_compaction_lag_ms: int = 0  # records younger than this are never compacted
    min_cleanable_dirty_ratio: float = 0.5  # dirty bytes / all cleanable bytes that triggers a clean
    message_timestamp_type: str = TIMESTAMP_CREATE_TIME
    flush_messages: int = INT64_MAX  # 1 = fsync before acknowledging
    # The codec batches are stored with: "producer" keeps the producer's, "uncompressed" or a codec
    # makes the log recompress batches that use another (PartitionLog.append).
    # One node is the whole in-sync replica set: acks=all writes need min.insync.replicas <= 1
    # (Kafka answers NOT_ENOUGH_REPLICAS otherwise; the Produce handler checks it).
    min_insync_replicas: int = 1
    compression_type: str = "producer"
    compression_gzip_level: int = GZIP_LEVEL_DEFAULT
    compression_lz4_level: int = LZ4_LEVEL_DEFAULT
    compression_zstd_level: int = ZSTD_LEVEL_DEFAULT
    producer_id_expiration_ms: int = 86400000
    # Tiered storage (KIP-405; the RemoteLogManager acts on these, the log only stops applying
    # retention.* itself and keeps what tiering needs, see PartitionLog).
    remote_storage_enable: bool = False
    remote_log_copy_disable: bool = False  # KIP-950: stop copying, keep reading and expiring
    remote_log_delete_on_disable: bool = False  # KIP-950: turning tiering off deletes remote data
    local_retention_ms: int = -2  # -2 = as retention.ms, -1 = keep forever locally
    local_retention_bytes: int = -2  # -2 = as retention.bytes, -1 = no local size limit

    def __post_init__(self) -> None:
        # Constructed directly (tests, internal topics) the same ranges apply as when parsed.
        for name, (field_name, parser) in _TOPIC_FIELDS.items():
            value = getattr(self, field_name)
            parsed = parser(name, str(value))
            if field_name == "cleanup_policy":
                object.__setattr__(self, field_name, parsed)  # one canonical spelling
            elif field_name == "min_cleanable_dirty_ratio" and type(value) in (int, float):
                object.__setattr__(self, field_name, parsed)  # 1 and 1.0 are the same ratio
            elif type(value) is not type(parsed) or value != parsed:
                raise InvalidConfigError(f"{name}: {value!r} is not a valid value")
        if type(self.producer_id_expiration_ms) is not int:
            raise InvalidConfigError("producer.id.expiration.ms must be an integer")
        _parse_int("producer.id.expiration.ms", str(self.producer_id_expiration_ms), 1, INT64_MAX)

    @property
    def effective_local_retention_ms(self) -> int:
        """How long segments stay on local disk once tiered: local.retention.ms, or retention.ms
        when it is -2 (Kafka's UnifiedLog.localRetentionMs); -1 = forever."""
        return self.retention_ms if self.local_retention_ms == -2 else self.local_retention_ms

    @property
    def effective_local_retention_bytes(self) -> int:
        """Local size limit once tiered: local.retention.bytes, or retention.bytes when it is -2;
        -1 = none."""
        return self.retention_bytes if self.local_retention_bytes == -2 else self.local_retention_bytes

    @property
    def deletes_by_retention(self) -> bool:
        """Whether retention.ms / retention.bytes apply (cleanup.policy contains ``delete``)."""
        return CLEANUP_DELETE in self.cleanup_policy.split(",")

    @property
    def compacts(self) -> bool:
        """Whether the log cleaner compacts this log (cleanup.policy contains ``compact``)."""
        return CLEANUP_COMPACT in self.cleanup_policy.split(",")

    @property
    def target_compression(self) -> tuple[int, int | None] | None:
        """(codec id, level) every stored batch must use, or None with compression.type=producer."""
        if self.compression_type == "producer":
            return None
        if self.compression_type == "uncompressed":
            return COMPRESSION_BY_NAME["none"], None
        codec = COMPRESSION_BY_NAME[self.compression_type]
        levels = {COMPRESSION_GZIP: self.compression_gzip_level, COMPRESSION_LZ4: self.compression_lz4_level,
                  COMPRESSION_ZSTD: self.compression_zstd_level}
        return codec, levels.get(codec)

    @property
    def log_append_time(self) -> bool:
        """Whether the broker stamps batches with its own time (message.timestamp.type)."""
        return self.message_timestamp_type == TIMESTAMP_LOG_APPEND_TIME

    @classmethod
    def from_topic_configs(cls, configs: Mapping[str, str], base: LogConfig | None = None) -> LogConfig:
        """Apply Kafka topic property overrides to ``base``; InvalidConfigError on a bad name or value.

        Names in PASSTHROUGH_TOPIC_CONFIGS are accepted and ignored here (the caller stores them;
        the config APIs check their values first, ``topic_config_defs.validate_topic_config``).
        """
        changes: dict[str, Any] = {}  # each value parsed for its own field's type
        for name, text in configs.items():
            if name in _TOPIC_FIELDS:
                if text is None:
                    raise InvalidConfigError(f"{name}: a value is required")
                field_name, parser = _TOPIC_FIELDS[name]
                changes[field_name] = parser(name, text)
            elif name not in PASSTHROUGH_TOPIC_CONFIGS:
                raise InvalidConfigError(f"Unknown topic config name: {name}")
        return dataclasses.replace(base if base is not None else cls(), **changes)

    def to_topic_configs(self) -> dict[str, str]:
        """Every modelled setting under its Kafka topic property name (for DescribeConfigs)."""
        return {name: _config_text(getattr(self, field_name)) for name, (field_name, _) in _TOPIC_FIELDS.items()}

    @classmethod
    def from_broker_configs(cls, props: Mapping[str, str]) -> LogConfig:
        """Topic defaults from Kafka broker property names; other broker properties are ignored.

        As in Kafka, ``log.retention.ms`` wins over ``log.retention.minutes`` over
        ``log.retention.hours``, and ``log.roll.ms`` over ``log.roll.hours``.
        """
        topic: dict[str, str] = {}
        for broker_name, topic_name in _BROKER_TO_TOPIC.items():
            if broker_name in props:
                topic[topic_name] = props[broker_name]
        retention = _first_duration(
            props, ("log.retention.ms", 1), ("log.retention.minutes", _MINUTE_MS), ("log.retention.hours", _HOUR_MS)
        )
        if retention is not None:
            topic["retention.ms"] = retention
        roll = _first_duration(props, ("log.roll.ms", 1), ("log.roll.hours", _HOUR_MS))
        if roll is not None:
            topic["segment.ms"] = roll
        config = cls.from_topic_configs(topic)
        if "producer.id.expiration.ms" in props:
            expiration_ms = _parse_int("producer.id.expiration.ms", props["producer.id.expiration.ms"], 1, INT32_MAX)
            config = dataclasses.replace(config, producer_id_expiration_ms=expiration_ms)
        return config


def _config_text(value: object) -> str:
    """A field's value as Kafka spells it (booleans in lower case)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _first_duration(props: Mapping[str, str], *candidates: tuple[str, int]) -> str | None:
    """The first present property converted to milliseconds (negative means forever: -1)."""
    for name, unit_ms in candidates:
        if name in props:
            value = _parse_int(name, props[name], -(2**62), 2**62)
            if value < 0:
                return "-1"
            return str(value * unit_ms)
    return None
