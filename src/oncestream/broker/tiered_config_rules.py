"""Kafka's tiered-storage config rules (KIP-405, KIP-950), sans-io: which topic config sets
CreateTopics, AlterConfigs and IncrementalAlterConfigs refuse, with INVALID_CONFIG and Kafka's
messages (``LogConfig.validateTopicLogConfigValues`` and the checks it calls), and the broker-level
rule DynamicBrokerConfig applies to ``log.local.retention.*`` (``validateBrokerLogConfigValues``).

For a topic whose new config set has ``remote.storage.enable=true``, in Kafka's order:

1. the broker has tiered storage (``remote.log.storage.system.enable``);
2. ``cleanup.policy`` is ``delete`` or empty (no compaction on a tiered topic, in either order of
   setting the two);
3. ``local.retention.bytes`` is -2, or neither -1 nor above ``retention.bytes`` (unless that is -1);
4. the same for ``local.retention.ms`` against ``retention.ms``;
5. with ``remote.log.copy.disable=true``, a local retention other than -2 equals the total one.

A topic whose set has ``remote.storage.enable=false`` while its current overrides say true (turning
tiering off, KIP-950) needs ``remote.log.delete.on.disable=true``: Kafka 4 refuses the change
otherwise (its message names the read-only alternative, ``remote.log.copy.disable=true``), and the
change deletes the topic's remote data.

Departure: Kafka accepts ``remote.storage.enable=true`` on an internal topic and silently never
tiers it (``UnifiedLog.remoteLogEnabled`` is false for internal topics); here the setting is
refused, so that a topic's described config never claims tiering that does not happen.

The values checked are the effective ones: the topic's override, else the broker property that
supplies its default (``log.retention.hours`` ...), else Kafka's default.
"""

from __future__ import annotations

from collections.abc import Mapping

from oncestream.broker.dynamic_config import REMOTE_LOG_STORAGE_SYSTEM_ENABLE
from oncestream.errors import InvalidConfigError, InvalidRequestError
from oncestream.log.topic_config_defs import TOPIC_CONFIG_DEFS, topic_default_from_broker

REMOTE_STORAGE_ENABLE = "remote.storage.enable"
REMOTE_LOG_COPY_DISABLE = "remote.log.copy.disable"
REMOTE_LOG_DELETE_ON_DISABLE = "remote.log.delete.on.disable"
LOCAL_RETENTION_MS = "local.retention.ms"
LOCAL_RETENTION_BYTES = "local.retention.bytes"
RETENTION_MS = "retention.ms"
RETENTION_BYTES = "retention.bytes"
CLEANUP_POLICY = "cleanup.policy"

# -2: "the total retention" (Kafka's LogConfig.DEFAULT_LOCAL_RETENTION_MS / _BYTES).
LOCAL_RETENTION_FOLLOWS_TOTAL = -2

SYSTEM_DISABLED_MESSAGE = ("Tiered Storage functionality is disabled in the broker. "
                           "Topic cannot be configured with remote log storage.")
COMPACTED_MESSAGE = ("Remote log storage only supports topics with cleanup.policy=delete "
                     "or cleanup.policy being an empty list.")
TURNING_OFF_MESSAGE = (
    "It is invalid to disable remote storage without deleting remote data. "
    "If you want to keep the remote data and turn to read only, please set "
    "`remote.storage.enable=true,remote.log.copy.disable=true`. "
    "If you want to disable remote storage and delete all remote data, please set "
    "`remote.storage.enable=false,remote.log.delete.on.disable=true`.")


def remote_storage_system_enabled(broker_props: Mapping[str, str]) -> bool:
    """``remote.log.storage.system.enable`` of the broker (false unless given as true)."""
    return broker_props.get(REMOTE_LOG_STORAGE_SYSTEM_ENABLE, "false").strip().lower() == "true"


def effective_topic_value(name: str, overrides: Mapping[str, str], broker_props: Mapping[str, str]) -> str:
    """The value topic config ``name`` has for a topic with ``overrides``: its own, else the
    broker's synonym (converted to the topic unit), else Kafka's default."""
    if name in overrides:
        return overrides[name]
    from_broker = topic_default_from_broker(name, dict(broker_props))
    if from_broker is not None:
        return from_broker[1]
    default = TOPIC_CONFIG_DEFS[name].default
    return default if default is not None else ""


def _flag(name: str, overrides: Mapping[str, str], broker_props: Mapping[str, str]) -> bool:
    return effective_topic_value(name, overrides, broker_props).strip().lower() == "true"


def _long(name: str, overrides: Mapping[str, str], broker_props: Mapping[str, str]) -> int:
    text = effective_topic_value(name, overrides, broker_props)
    try:
        return int(text.strip())
    except ValueError:
        raise InvalidConfigError(f"Invalid value {text} for configuration {name}: Not a number") from None


def _invalid(name: str, value: int, message: str) -> InvalidConfigError:
    """Kafka's ConfigException(name, value, message) text."""
    return InvalidConfigError(f"Invalid value {value} for configuration {name}: {message}")


def check_local_retention(local_name: str, local: int, total_name: str, total: int) -> None:
    """Kafka's validateRemoteStorageRetentionSize / Time: a local retention (not -2) may be neither
    -1 (forever) nor above a total retention that is not -1."""
    if total == -1 or local == LOCAL_RETENTION_FOLLOWS_TOTAL:
        return
    if local == -1:
        raise _invalid(local_name, local, f"Value must not be -1 as {total_name} value is set as {total}.")
    if local > total:
        raise _invalid(local_name, local, f"Value must not be more than {total_name} property value: {total}")


def check_topic_configs(overrides: Mapping[str, str], current: Mapping[str, str], broker_props: Mapping[str, str],
                        *, topic: str, internal: bool) -> None:
    """Refuse (InvalidConfigError) a topic's new override set ``overrides`` (already checked one
    by one, canonical) that breaks a tiered-storage rule; ``current`` is the topic's overrides
    before the change ({} for a new topic), ``broker_props`` the broker's effective properties."""
    enabled = _flag(REMOTE_STORAGE_ENABLE, overrides, broker_props)
    if not enabled:
        was_enabled = current.get(REMOTE_STORAGE_ENABLE, "false").strip().lower() == "true"
        if was_enabled and not _flag(REMOTE_LOG_DELETE_ON_DISABLE, overrides, broker_props):
            raise InvalidConfigError(TURNING_OFF_MESSAGE)
        return
    if not remote_storage_system_enabled(broker_props):
        raise InvalidConfigError(SYSTEM_DISABLED_MESSAGE)
    if internal:
        raise InvalidConfigError(f"Tiered storage is not supported for internal topic {topic}: "
                                 f"{REMOTE_STORAGE_ENABLE} must stay false.")
    policy = [item for item in effective_topic_value(CLEANUP_POLICY, overrides, broker_props).split(",") if item]
    if policy not in ([], ["delete"]):
        raise InvalidConfigError(COMPACTED_MESSAGE)
    retention_bytes = _long(RETENTION_BYTES, overrides, broker_props)
    local_bytes = _long(LOCAL_RETENTION_BYTES, overrides, broker_props)
    retention_ms = _long(RETENTION_MS, overrides, broker_props)
    local_ms = _long(LOCAL_RETENTION_MS, overrides, broker_props)
    check_local_retention(LOCAL_RETENTION_BYTES, local_bytes, RETENTION_BYTES, retention_bytes)
    check_local_retention(LOCAL_RETENTION_MS, local_ms, RETENTION_MS, retention_ms)
    if _flag(REMOTE_LOG_COPY_DISABLE, overrides, broker_props):
        # Kafka's validateRetentionConfigsWhenRemoteCopyDisabled: nothing more is copied, so the
        # local retention is the only one that still acts on new data.
        for local, total, local_name, total_name in ((local_bytes, retention_bytes, LOCAL_RETENTION_BYTES, RETENTION_BYTES),
                                                     (local_ms, retention_ms, LOCAL_RETENTION_MS, RETENTION_MS)):
            if local != LOCAL_RETENTION_FOLLOWS_TOTAL and local != total:
                raise InvalidConfigError(
                    f"When `remote.log.copy.disable` is set to true, the `{local_name}` and `{total_name}` must be "
                    "set to the identical value because there will be no more logs copied to the remote storage.")


def check_broker_configs(broker_props: Mapping[str, str]) -> None:
    """Kafka's validateBrokerLogConfigValues with tiered storage on: the broker defaults
    ``log.local.retention.*`` against ``log.retention.*`` (converted to the topic units).
    InvalidRequestError, as a bad broker config is answered (DynamicBrokerConfig)."""
    if not remote_storage_system_enabled(broker_props):
        return
    try:
        for local_name, total_name in ((LOCAL_RETENTION_BYTES, RETENTION_BYTES), (LOCAL_RETENTION_MS, RETENTION_MS)):
            check_local_retention("log." + local_name, _long(local_name, {}, broker_props),
                                  "log." + total_name, _long(total_name, {}, broker_props))
    except InvalidConfigError as exc:
        raise InvalidRequestError(str(exc)) from None
