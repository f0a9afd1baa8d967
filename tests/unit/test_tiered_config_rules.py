"""Kafka's tiered-storage config rules (LogConfig.validateTopicLogConfigValues and the checks it
calls, KIP-950's disablement rule, validateBrokerLogConfigValues), sans-io; the broker's remote.*
configs and the status entry in DescribeConfigs."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from oncestream.broker import config_admin as admin
from oncestream.broker.dynamic_config import BROKER_CONFIG_DEFS, REMOTE_STORAGE_STATUS, DynamicBrokerConfigs
from oncestream.broker.tiered_config_rules import (
    COMPACTED_MESSAGE,
    SYSTEM_DISABLED_MESSAGE,
    TURNING_OFF_MESSAGE,
    check_broker_configs,
    check_topic_configs,
    effective_topic_value,
)
from oncestream.errors import OnceStreamError
from oncestream.log.topic_config_defs import ConfigSource

ON = {"remote.log.storage.system.enable": "true"}
TIERED = {"remote.storage.enable": "true"}


def _refused(overrides: dict[str, str], broker: dict[str, str] | None = None, current: dict[str, str] | None = None,
             *, internal: bool = False) -> OnceStreamError:
    with pytest.raises(OnceStreamError) as info:
        check_topic_configs(overrides, current or {}, ON if broker is None else broker, topic="t", internal=internal)
    assert info.value.code == ErrorCode.invalid_config
    return info.value


def _accepted(overrides: dict[str, str], broker: dict[str, str] | None = None,
              current: dict[str, str] | None = None) -> None:
    check_topic_configs(overrides, current or {}, ON if broker is None else broker, topic="t", internal=False)


def test_tiering_needs_the_broker_system_enabled() -> None:
    assert str(_refused(TIERED, broker={})) == SYSTEM_DISABLED_MESSAGE
    assert str(_refused(TIERED, broker={"remote.log.storage.system.enable": "false"})) == SYSTEM_DISABLED_MESSAGE
    _accepted(TIERED)
    _accepted({"remote.storage.enable": "false"}, broker={})  # nothing tiered: no rule


@pytest.mark.parametrize("policy", ["compact", "compact,delete", "delete,compact"])
def test_tiering_refuses_compaction_in_either_order(policy: str) -> None:
    assert str(_refused({**TIERED, "cleanup.policy": policy})) == COMPACTED_MESSAGE
    # A tiered topic (current overrides) altered to compaction: the new set keeps remote.storage.enable.
    assert str(_refused({**TIERED, "cleanup.policy": policy}, current=TIERED)) == COMPACTED_MESSAGE
    # The broker default makes the topic compacted too.
    assert str(_refused(TIERED, broker={**ON, "log.cleanup.policy": policy})) == COMPACTED_MESSAGE


def test_tiering_accepts_delete_or_empty_cleanup_policy() -> None:
    _accepted({**TIERED, "cleanup.policy": "delete"})
    _accepted({**TIERED, "cleanup.policy": ""})


def test_local_retention_ms_above_retention_ms_is_refused() -> None:
    message = str(_refused({**TIERED, "retention.ms": "1000", "local.retention.ms": "2000"}))
    assert message == ("Invalid value 2000 for configuration local.retention.ms: "
                       "Value must not be more than retention.ms property value: 1000")
    message = str(_refused({**TIERED, "retention.ms": "1000", "local.retention.ms": "-1"}))
    assert message == ("Invalid value -1 for configuration local.retention.ms: "
                       "Value must not be -1 as retention.ms value is set as 1000.")
    _accepted({**TIERED, "retention.ms": "1000", "local.retention.ms": "1000"})
    _accepted({**TIERED, "retention.ms": "-1", "local.retention.ms": "99999999"})  # forever: any local
    _accepted({**TIERED, "retention.ms": "1000", "local.retention.ms": "-2"})  # -2: follow retention.ms


def test_local_retention_bytes_above_retention_bytes_is_refused() -> None:
    message = str(_refused({**TIERED, "retention.bytes": "100", "local.retention.bytes": "200"}))
    assert message == ("Invalid value 200 for configuration local.retention.bytes: "
                       "Value must not be more than retention.bytes property value: 100")
    assert "Value must not be -1 as retention.bytes value is set as 100." in \
        str(_refused({**TIERED, "retention.bytes": "100", "local.retention.bytes": "-1"}))
    _accepted({**TIERED, "local.retention.bytes": "200"})  # retention.bytes -1 (the default)


def test_retention_comes_from_the_broker_synonyms() -> None:
    """log.retention.hours=1 makes retention.ms 3600000: a larger local.retention.ms is refused;
    log.local.retention.ms supplies local.retention.ms the same way."""
    broker = {**ON, "log.retention.hours": "1"}
    assert "retention.ms property value: 3600000" in str(_refused({**TIERED, "local.retention.ms": "3600001"}, broker))
    assert "retention.ms property value: 3600000" in str(_refused(TIERED, {**broker, "log.local.retention.ms": "3600001"}))
    assert effective_topic_value("retention.ms", {}, broker) == "3600000"


def test_copy_disabled_needs_local_retention_equal_to_retention() -> None:
    base = {**TIERED, "remote.log.copy.disable": "true", "retention.ms": "1000", "retention.bytes": "100"}
    assert "`local.retention.ms` and `retention.ms` must be set to the identical value" in \
        str(_refused({**base, "local.retention.ms": "500"}))
    assert "`local.retention.bytes` and `retention.bytes` must be set to the identical value" in \
        str(_refused({**base, "local.retention.bytes": "50"}))
    _accepted({**base, "local.retention.ms": "1000", "local.retention.bytes": "100"})
    _accepted(base)  # -2 follows the total retention


def test_turning_tiering_off_needs_delete_on_disable() -> None:
    """KIP-950 as Kafka 4 checks it (validateTurningOffRemoteStorageWithDelete): the new set must
    say remote.log.delete.on.disable=true; the remote data is then deleted."""
    current = {**TIERED, "retention.ms": "1000"}
    assert str(_refused({"remote.storage.enable": "false", "retention.ms": "1000"}, current=current)) == \
        TURNING_OFF_MESSAGE
    assert str(_refused({"retention.ms": "1000"}, current=current)) == TURNING_OFF_MESSAGE  # override deleted
    assert str(_refused({"remote.storage.enable": "false", "remote.log.copy.disable": "true"}, current=current)) == \
        TURNING_OFF_MESSAGE
    _accepted({"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"}, current=current)
    _accepted({"remote.storage.enable": "false", "remote.log.delete.on.disable": "true",
               "remote.log.copy.disable": "true"}, current=current)
    # Read-only tiering instead of turning it off: accepted.
    _accepted({**TIERED, "remote.log.copy.disable": "true"}, current=current)
    # Even with the broker system disabled, a topic may still be turned off (with deletion).
    _accepted({"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"}, broker={}, current=current)


def test_internal_topics_cannot_tier() -> None:
    message = str(_refused(TIERED, internal=True))
    assert "internal topic t" in message


def test_broker_local_retention_default_checked_when_tiering_is_on() -> None:
    with pytest.raises(OnceStreamError) as info:
        check_broker_configs({**ON, "log.retention.ms": "1000", "log.local.retention.ms": "2000"})
    assert info.value.code == ErrorCode.invalid_request
    assert "log.local.retention.ms" in str(info.value)
    check_broker_configs({"log.retention.ms": "1000", "log.local.retention.ms": "2000"})  # tiering off: no rule
    check_broker_configs({**ON, "log.retention.ms": "1000", "log.local.retention.ms": "1000"})


# --- DescribeConfigs --------------------------------------------------------------------------------


def test_topic_describe_shows_every_remote_config_with_synonyms() -> None:
    dynamic = DynamicBrokerConfigs(0, {"log.local.retention.ms": "5000"})
    entries = {e.name: e for e in admin.describe_topic({"local.retention.bytes": "100"}, dynamic,
                                                       include_synonyms=True, include_documentation=False)}
    for name in ("remote.storage.enable", "remote.log.copy.disable", "remote.log.delete.on.disable"):
        assert (entries[name].value, entries[name].source, entries[name].synonyms) == \
            ("false", ConfigSource.DEFAULT_CONFIG, ())
    local_ms = entries["local.retention.ms"]
    assert (local_ms.value, local_ms.source) == ("5000", ConfigSource.STATIC_BROKER_CONFIG)
    assert local_ms.synonyms == (("log.local.retention.ms", "5000", ConfigSource.STATIC_BROKER_CONFIG),
                                 ("log.local.retention.ms", "-2", ConfigSource.DEFAULT_CONFIG))
    local_bytes = entries["local.retention.bytes"]
    assert (local_bytes.value, local_bytes.source) == ("100", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert local_bytes.synonyms == (("local.retention.bytes", "100", ConfigSource.DYNAMIC_TOPIC_CONFIG),
                                    ("log.local.retention.bytes", "-2", ConfigSource.DEFAULT_CONFIG))


def test_broker_describe_shows_remote_configs_and_the_status_entry() -> None:
    dynamic = DynamicBrokerConfigs(0, {"remote.log.storage.system.enable": "true",
                                       "rsm.config.storage.uri": "file:///tmp/x"})
    entries = {e.name: e for e in admin.describe_broker(dynamic, "0", include_synonyms=True,
                                                        include_documentation=False,
                                                        remote_status="AccessDenied: wrong credentials")}
    enable = entries["remote.log.storage.system.enable"]
    assert (enable.value, enable.source, enable.read_only) == ("true", ConfigSource.STATIC_BROKER_CONFIG, True)
    assert entries["rsm.config.storage.uri"].value == "file:///tmp/x"
    for name, default in (("remote.log.manager.task.interval.ms", "30000"), ("remote.log.reader.threads", "10"),
                          ("remote.log.manager.task.retry.backoff.max.ms", "30000"),
                          ("remote.fetch.max.wait.ms", "500"),
                          ("remote.log.index.file.cache.total.size.bytes", "1073741824"),
                          ("log.local.retention.ms", "-2"), ("log.local.retention.bytes", "-2")):
        assert (entries[name].value, entries[name].source) == (default, ConfigSource.DEFAULT_CONFIG), name
    assert not entries["log.local.retention.ms"].read_only  # a topic default: dynamic, as in Kafka
    status = entries[REMOTE_STORAGE_STATUS]
    assert (status.value, status.source, status.read_only, status.sensitive) == \
        ("AccessDenied: wrong credentials", ConfigSource.STATIC_BROKER_CONFIG, True, False)
    assert status.synonyms == ((REMOTE_STORAGE_STATUS, "AccessDenied: wrong credentials",
                                ConfigSource.STATIC_BROKER_CONFIG),)
    assert not BROKER_CONFIG_DEFS[REMOTE_STORAGE_STATUS].dynamic  # altering it: "Cannot update ... dynamically"
    # The cluster-default resource has no status (it is this node's).
    assert REMOTE_STORAGE_STATUS not in {e.name for e in admin.describe_broker(
        dynamic, "", include_synonyms=False, include_documentation=False, remote_status="ok")}
