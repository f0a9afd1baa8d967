"""Kafka's topic config definitions: every topic config Kafka 4.x describes, with its type, default,
broker synonyms (the ``log.*`` names that supply the default) and a one-line documentation.

DescribeConfigs, CreateTopics and the AlterConfigs family read this table; ``LogConfig`` (``config``)
parses the settings the log acts on. The synonym order is Kafka's (``ServerTopicConfigSynonyms``):
the first broker property present wins, and some are converted (``log.retention.hours`` to ms).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

from oncestream.errors import InvalidConfigError
from oncestream.protocol.compression import GZIP_LEVEL_RANGE, LZ4_LEVEL_RANGE, ZSTD_LEVEL_RANGE

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_HOUR_MS = 3_600_000
_MINUTE_MS = 60_000


class ConfigType(IntEnum):
    """DescribeConfigs' config_type codes (DescribeConfigsResponse.ConfigType)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(IntEnum):
    """DescribeConfigs' config_source codes, in Kafka's order of precedence for a topic config."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    CLIENT_METRICS_CONFIG = 7  # a ClientMetrics resource's own config (KIP-714)
    GROUP_CONFIG = 8  # a group resource's own config (KIP-848 / KIP-932 group configs)


@dataclass(frozen=True, slots=True)
class Synonym:
    """A broker property that supplies a topic config's default, times ``unit_ms`` (1: same unit)."""

    name: str
    unit_ms: int = 1

    def convert(self, text: str) -> str:
        """The broker value in the topic config's unit (a negative duration stays -1: forever)."""
        if self.unit_ms == 1:
            return text
        value = int(text.strip())
        return "-1" if value < 0 else str(value * self.unit_ms)


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """One Kafka config: name, type, default (None: no default) and how values are checked."""

    name: str
    type: ConfigType
    default: str | None
    doc: str
    validate: Callable[[str, str], str]  # (name, text) -> canonical text; InvalidConfigError if bad
    synonyms: tuple[Synonym, ...] = ()
    legacy: bool = False  # removed in Kafka 4.0: accepted for old clients, described only when set


def _int(low: int, high: int) -> Callable[[str, str], str]:
    def check(name: str, text: str) -> str:
        try:
            value = int(str(text).strip())
        except ValueError as exc:
            raise InvalidConfigError(f"Invalid value {text} for configuration {name}: Not a number") from exc
        if not low <= value <= high:
            raise InvalidConfigError(f"Invalid value {value} for configuration {name}: must be in [{low}, {high}]")
        return str(value)
    return check


def _level(value_range: tuple[int, int], *extra: int) -> Callable[[str, str], str]:
    low, high = value_range
    base = _int(INT32_MIN, INT32_MAX)

    def check(name: str, text: str) -> str:
        value = int(base(name, text))
        if not (low <= value <= high or value in extra):
            raise InvalidConfigError(f"Invalid value {value} for configuration {name}: must be in [{low}, {high}]")
        return str(value)
    return check


def _double(low: float, high: float) -> Callable[[str, str], str]:
    def check(name: str, text: str) -> str:
        try:
            value = float(str(text).strip())
        except ValueError as exc:
            raise InvalidConfigError(f"Invalid value {text} for configuration {name}: Not a number") from exc
        if not low <= value <= high:
            raise InvalidConfigError(f"Invalid value {value} for configuration {name}: must be in [{low}, {high}]")
        return str(text).strip()
    return check


def _bool(name: str, text: str) -> str:
    lowered = str(text).strip().lower()
    if lowered not in ("true", "false"):
        raise InvalidConfigError(f"Invalid value {text} for configuration {name}: Expected value to be either true or false")
    return lowered


def _one_of(*choices: str) -> Callable[[str, str], str]:
    def check(name: str, text: str) -> str:
        value = str(text).strip()
        if value not in choices:
            raise InvalidConfigError(f"Invalid value {text} for configuration {name}: String must be one of: "
                                     + ", ".join(choices))
        return value
    return check


def _list_of(*choices: str) -> Callable[[str, str], str]:
    """A LIST config whose items must be among ``choices``; the empty list is allowed (Kafka 4.x
    accepts an empty ``cleanup.policy``: no deletion and no compaction, data kept forever)."""
    def check(name: str, text: str) -> str:
        items = [item.strip() for item in str(text).split(",") if item.strip()]
        bad = [item for item in items if item not in choices]
        if bad:
            raise InvalidConfigError(f"Invalid value {text} for configuration {name}: "
                                     f"String must be one of: {', '.join(choices)}")
        return ",".join(dict.fromkeys(items))  # order kept, duplicates dropped
    return check


def _replica_list(name: str, text: str) -> str:
    """leader/follower.replication.throttled.replicas: ``*`` or ``partition:broker`` pairs."""
    value = str(text).strip()
    if value in ("", "*"):
        return value
    for item in value.split(","):
        partition, sep, broker = item.strip().partition(":")
        if not sep or not partition.isdigit() or not broker.isdigit():
            raise InvalidConfigError(f"Invalid value {text} for configuration {name}: "
                                     "must be '*' or a list of partitionId:brokerId")
    return value


def _string(name: str, text: str) -> str:
    return str(text)


_LONG = _int(INT64_MIN, INT64_MAX)
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")


def _log(name: str) -> tuple[Synonym, ...]:
    return (Synonym("log." + name),)


TOPIC_CONFIG_DEFS: dict[str, ConfigDef] = {
    d.name: d
    for d in (
        ConfigDef("cleanup.policy", ConfigType.LIST, "delete",
                  "Retention policy of old segments: delete, compact, both, or empty (keep everything).",
                  _list_of("compact", "delete"), _log("cleanup.policy")),
        ConfigDef("compression.gzip.level", ConfigType.INT, "-1", "Level used when compression.type is gzip.",
                  _level(GZIP_LEVEL_RANGE, -1), (Synonym("compression.gzip.level"),)),
        ConfigDef("compression.lz4.level", ConfigType.INT, "9", "Level used when compression.type is lz4.",
                  _level(LZ4_LEVEL_RANGE), (Synonym("compression.lz4.level"),)),
        ConfigDef("compression.type", ConfigType.STRING, "producer",
                  "Final codec of the topic's batches; 'producer' keeps the producer's, 'uncompressed' stores "
                  "them uncompressed, any other codec makes the broker recompress batches written with another.",
                  _one_of(*COMPRESSION_TYPES), (Synonym("compression.type"),)),
        ConfigDef("compression.zstd.level", ConfigType.INT, "3", "Level used when compression.type is zstd.",
                  _level(ZSTD_LEVEL_RANGE), (Synonym("compression.zstd.level"),)),
        ConfigDef("delete.retention.ms", ConfigType.LONG, "86400000",
                  "How long a tombstone of a compacted topic stays readable after the cleaner first saw it.",
                  _int(0, INT64_MAX), (Synonym("log.cleaner.delete.retention.ms"),)),
        ConfigDef("file.delete.delay.ms", ConfigType.LONG, "60000", "Delay before a deleted segment file is removed.",
                  _int(0, INT64_MAX), (Synonym("log.segment.delete.delay.ms"),)),
        ConfigDef("flush.messages", ConfigType.LONG, str(INT64_MAX),
                  "Messages written before the log is fsynced (1: fsync before acknowledging acks=all).",
                  _int(1, INT64_MAX), (Synonym("log.flush.interval.messages"),)),
        ConfigDef("flush.ms", ConfigType.LONG, str(INT64_MAX), "Time between forced fsyncs of the log.",
                  _int(0, INT64_MAX), (Synonym("log.flush.interval.ms"), Synonym("log.flush.scheduler.interval.ms"))),
        ConfigDef("follower.replication.throttled.replicas", ConfigType.LIST, "",
                  "Replicas whose follower-side replication is throttled.", _replica_list),
        ConfigDef("index.interval.bytes", ConfigType.INT, "4096", "Bytes between two offset index entries.",
                  _int(0, INT32_MAX), _log("index.interval.bytes")),
        ConfigDef("leader.replication.throttled.replicas", ConfigType.LIST, "",
                  "Replicas whose leader-side replication is throttled.", _replica_list),
        ConfigDef("local.retention.bytes", ConfigType.LONG, "-2",
                  "Local size limit when tiered storage is on (-2: use retention.bytes).",
                  _int(-2, INT64_MAX), _log("local.retention.bytes")),
        ConfigDef("local.retention.ms", ConfigType.LONG, "-2",
                  "Local time limit when tiered storage is on (-2: use retention.ms).",
                  _int(-2, INT64_MAX), _log("local.retention.ms")),
        ConfigDef("max.compaction.lag.ms", ConfigType.LONG, str(INT64_MAX),
                  "Longest time a record may stay uncompacted.", _int(1, INT64_MAX),
                  (Synonym("log.cleaner.max.compaction.lag.ms"),)),
        ConfigDef("max.message.bytes", ConfigType.INT, "1048588",
                  "Largest record batch the topic accepts (after the broker's recompression).",
                  _int(0, INT32_MAX), (Synonym("message.max.bytes"),)),
        ConfigDef("message.timestamp.after.max.ms", ConfigType.LONG, str(INT64_MAX),
                  "How far in the future a CreateTime timestamp may be.", _int(0, INT64_MAX),
                  _log("message.timestamp.after.max.ms")),
        ConfigDef("message.timestamp.before.max.ms", ConfigType.LONG, str(INT64_MAX),
                  "How far in the past a CreateTime timestamp may be.", _int(0, INT64_MAX),
                  _log("message.timestamp.before.max.ms")),
        ConfigDef("message.timestamp.type", ConfigType.STRING, "CreateTime",
                  "CreateTime keeps the producer's timestamps, LogAppendTime stamps batches with the broker's time.",
                  _one_of("CreateTime", "LogAppendTime"), _log("message.timestamp.type")),
        ConfigDef("min.cleanable.dirty.ratio", ConfigType.DOUBLE, "0.5",
                  "Share of uncleaned bytes that makes a compacted log due for cleaning.", _double(0.0, 1.0),
                  (Synonym("log.cleaner.min.cleanable.ratio"),)),
        ConfigDef("min.compaction.lag.ms", ConfigType.LONG, "0", "Records younger than this are never compacted.",
                  _int(0, INT64_MAX), (Synonym("log.cleaner.min.compaction.lag.ms"),)),
        ConfigDef("min.insync.replicas", ConfigType.INT, "1",
                  "Replicas that must acknowledge an acks=all write (one node: 1 is always met).",
                  _int(1, INT32_MAX), (Synonym("min.insync.replicas"),)),
        ConfigDef("preallocate", ConfigType.BOOLEAN, "false", "Whether new segment files are preallocated.",
                  _bool, _log("preallocate")),
        ConfigDef("remote.log.copy.disable", ConfigType.BOOLEAN, "false",
                  "Stop copying segments to tiered storage.", _bool),
        ConfigDef("remote.log.delete.on.disable", ConfigType.BOOLEAN, "false",
                  "Delete tiered data when tiered storage is turned off.", _bool),
        ConfigDef("remote.storage.enable", ConfigType.BOOLEAN, "false", "Tiered storage for the topic.", _bool),
        ConfigDef("retention.bytes", ConfigType.LONG, "-1", "Size limit of a partition (-1: none).",
                  _LONG, _log("retention.bytes")),
        ConfigDef("retention.ms", ConfigType.LONG, "604800000", "Age limit of a segment (-1: none).",
                  _int(-1, INT64_MAX),
                  (Synonym("log.retention.ms"), Synonym("log.retention.minutes", _MINUTE_MS),
                   Synonym("log.retention.hours", _HOUR_MS))),
        ConfigDef("segment.bytes", ConfigType.INT, "1073741824", "Size at which a segment is rolled.",
                  _int(14, INT32_MAX), _log("segment.bytes")),
        ConfigDef("segment.index.bytes", ConfigType.INT, "10485760", "Size of a segment's offset index.",
                  _int(4, INT32_MAX), (Synonym("log.index.size.max.bytes"),)),
        ConfigDef("segment.jitter.ms", ConfigType.LONG, "0", "Random jitter subtracted from segment.ms.",
                  _int(0, INT64_MAX), (Synonym("log.roll.jitter.ms"), Synonym("log.roll.jitter.hours", _HOUR_MS))),
        ConfigDef("segment.ms", ConfigType.LONG, "604800000", "Age at which a segment is rolled.",
                  _int(1, INT64_MAX), (Synonym("log.roll.ms"), Synonym("log.roll.hours", _HOUR_MS))),
        ConfigDef("unclean.leader.election.enable", ConfigType.BOOLEAN, "false",
                  "Whether an out-of-sync replica may become leader.", _bool,
                  (Synonym("unclean.leader.election.enable"),)),
        # Removed in Kafka 4.0; old tools still send them.
        ConfigDef("message.downconversion.enable", ConfigType.BOOLEAN, "true", "Removed in Kafka 4.0.", _bool,
                  _log("message.downconversion.enable"), legacy=True),
        ConfigDef("message.format.version", ConfigType.STRING, "3.0-IV1", "Removed in Kafka 4.0.", _string,
                  _log("message.format.version"), legacy=True),
        ConfigDef("message.timestamp.difference.max.ms", ConfigType.LONG, str(INT64_MAX), "Removed in Kafka 4.0.",
                  _int(0, INT64_MAX), _log("message.timestamp.difference.max.ms"), legacy=True),
    )
}


def validate_topic_config(name: str, text: str | None) -> str:
    """The canonical text of one topic config value; InvalidConfigError for an unknown name, a
    missing value or a value outside the config's type and range (Kafka's LogConfig.validate)."""
    definition = TOPIC_CONFIG_DEFS.get(name)
    if definition is None:
        raise InvalidConfigError(f"Unknown topic config name: {name}")
    if text is None:
        raise InvalidConfigError(f"Null value not supported for topic configs: {name}")
    return definition.validate(name, text)


def topic_default_from_broker(name: str, broker_props: dict[str, str]) -> tuple[Synonym, str] | None:
    """The first broker synonym of topic config ``name`` present in ``broker_props`` and its value
    converted to the topic config's unit, or None."""
    for synonym in TOPIC_CONFIG_DEFS[name].synonyms:
        if synonym.name in broker_props:
            return synonym, synonym.convert(broker_props[synonym.name])
    return None
