"""The rules of DescribeConfigs and the AlterConfigs family, sans-io: what a topic's configs look
like described (value, source, synonyms, type, documentation) and how an IncrementalAlterConfigs
operation list turns into a resource's new dynamic configs, with Kafka's error codes.

Kafka's behaviour followed (ConfigAdminManager, ConfigurationControlManager, ConfigHelper):

- a resource named twice in one request: INVALID_REQUEST for both; a config named twice in one
  resource: INVALID_REQUEST ("Error due to duplicate config keys"); a null value for anything but
  DELETE: INVALID_REQUEST;
- APPEND / SUBTRACT only on LIST configs, else INVALID_CONFIG ("Can't APPEND to key ... because its
  type is not LIST"); the old list is the resource's own value or, without one, the config's
  default; APPEND adds the items not yet present, SUBTRACT removes the given ones, so SUBTRACT can
  leave an empty list (accepted for ``cleanup.policy``, as Kafka 4.x accepts it);
- a topic config with an unknown name or a bad value: INVALID_CONFIG; a broker config that is not
  dynamic or has a bad value: INVALID_REQUEST (see ``dynamic_config``);
- an unknown operation code: INVALID_REQUEST.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from enum import IntEnum

from oncestream.broker.dynamic_config import BROKER_CONFIG_DEFS, REMOTE_STORAGE_STATUS, ConfigEntry, DynamicBrokerConfigs
from oncestream.errors import InvalidConfigError, InvalidRequestError
from oncestream.log.config import LogConfig
from oncestream.log.topic_config_defs import TOPIC_CONFIG_DEFS, ConfigSource, ConfigType, validate_topic_config
from oncestream.protocol.config_resources import RESOURCE_TOPIC


class AlterOp(IntEnum):
    """IncrementalAlterConfigs' config_operation codes (AlterConfigOp.OpType)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


def describe_topic(overrides: Mapping[str, str], dynamic: DynamicBrokerConfigs, *, include_synonyms: bool,
                   include_documentation: bool) -> list[ConfigEntry]:
    """Every topic config Kafka 4.x describes for a topic with ``overrides`` (its own configs),
    the broker's layers supplying the rest. Configs Kafka 4.0 removed appear only when set."""
    broker_props = dynamic.effective()
    effective = LogConfig.from_topic_configs(overrides, LogConfig.from_broker_configs(broker_props)).to_topic_configs()
    layers = (
        (dynamic.broker, ConfigSource.DYNAMIC_BROKER_CONFIG),
        (dynamic.cluster, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        (dynamic.static, ConfigSource.STATIC_BROKER_CONFIG),
    )
    entries: list[ConfigEntry] = []
    for name, definition in sorted(TOPIC_CONFIG_DEFS.items()):
        if definition.legacy and name not in overrides:
            continue
        synonyms: list[tuple[str, str | None, ConfigSource]] = []
        if name in overrides:
            synonyms.append((name, overrides[name], ConfigSource.DYNAMIC_TOPIC_CONFIG))
        broker_values: list[str] = []
        for values, source in layers:
            for synonym in definition.synonyms:
                if synonym.name in values:
                    synonyms.append((synonym.name, values[synonym.name], source))
                    broker_values.append(synonym.convert(values[synonym.name]))
        primary_def = BROKER_CONFIG_DEFS.get(definition.synonyms[0].name) if definition.synonyms else None
        if primary_def is not None and primary_def.default is not None:
            synonyms.append((primary_def.name, primary_def.default, ConfigSource.DEFAULT_CONFIG))
        value: str | None
        if name in overrides:
            value = overrides[name]
        elif name in effective:
            value = effective[name]
        elif broker_values:
            value = broker_values[0]
        else:
            value = definition.default
        source = synonyms[0][2] if synonyms else ConfigSource.DEFAULT_CONFIG
        entries.append(ConfigEntry(
            name=name, value=value, source=source, read_only=False, sensitive=False, type=definition.type,
            doc=definition.doc if include_documentation else None,
            synonyms=tuple(synonyms) if include_synonyms else (),
        ))
    return entries


def describe_broker(dynamic: DynamicBrokerConfigs, resource_name: str, *, include_synonyms: bool,
                    include_documentation: bool, remote_status: str) -> list[ConfigEntry]:
    """Every config of a BROKER resource ("" = the dynamic cluster defaults only). This node's
    resource also has the read-only ``oncestream.remote.log.storage.status``, valued
    ``remote_status`` (the RemoteLogManager's: ``ok``, ``disabled`` or the last error in words),
    described as STATIC_BROKER_CONFIG: not a default (it is this broker's own state), and not
    DYNAMIC_BROKER_CONFIG, which tools read back as the set to write with legacy AlterConfigs."""
    entries = dynamic.describe(resource_name, include_synonyms=include_synonyms,
                               include_documentation=include_documentation)
    source = ConfigSource.STATIC_BROKER_CONFIG
    return [
        replace(entry, value=remote_status, source=source,
                synonyms=((entry.name, remote_status, source),) if include_synonyms else ())
        if entry.name == REMOTE_STORAGE_STATUS else entry
        for entry in entries
    ]


def _list_type(resource_type: int, name: str) -> bool:
    if resource_type == RESOURCE_TOPIC:
        definition = TOPIC_CONFIG_DEFS.get(name)
        return definition is not None and definition.type == ConfigType.LIST
    broker_def = BROKER_CONFIG_DEFS.get(name)
    return broker_def is not None and broker_def.type == ConfigType.LIST


def _default_of(resource_type: int, name: str) -> str | None:
    if resource_type == RESOURCE_TOPIC:
        return TOPIC_CONFIG_DEFS[name].default
    return BROKER_CONFIG_DEFS[name].default


def check_operations(operations: Iterable[tuple[str, int, str | None]]) -> None:
    """Request-level checks of one resource's operations (Kafka's ConfigAdminManager.preprocess):
    INVALID_REQUEST for a config named twice, a null value outside DELETE or an unknown op code."""
    names: set[str] = set()
    nulls: list[str] = []
    for name, op, value in operations:
        if name in names:
            raise InvalidRequestError("Error due to duplicate config keys")
        names.add(name)
        if op not in AlterOp.__members__.values():
            raise InvalidRequestError(f"Unknown operations type {op}")
        if op != AlterOp.DELETE and value is None:
            nulls.append(name)
    if nulls:
        raise InvalidRequestError("Null value not supported for : " + ", ".join(nulls))


def apply_incremental(resource_type: int, current: Mapping[str, str],
                      operations: Iterable[tuple[str, int, str | None]]) -> dict[str, str]:
    """The resource's dynamic configs after ``operations`` (name, AlterOp, value), as Kafka's
    ConfigurationControlManager computes them; InvalidConfigError for APPEND / SUBTRACT on a
    config that is not a LIST. Values are not validated here (``validate_topic_configs`` /
    ``DynamicBrokerConfigs.validate_layer`` do that on the whole result)."""
    operations = list(operations)
    check_operations(operations)
    out = dict(current)
    for name, op, value in operations:
        if op == AlterOp.SET:
            out[name] = value if value is not None else ""  # never None: check_operations
        elif op == AlterOp.DELETE:
            out.pop(name, None)
        else:
            verb = "APPEND" if op == AlterOp.APPEND else "SUBTRACT"
            if not _list_type(resource_type, name):
                raise InvalidConfigError(f"Can't {verb} to key {name} because its type is not LIST.")
            old = out.get(name)
            if old is None:
                old = _default_of(resource_type, name)
            items = [item for item in (old or "").split(",") if item]
            given = (value or "").split(",")
            if op == AlterOp.APPEND:
                items += [item for item in dict.fromkeys(given) if item and item not in items]
            else:
                items = [item for item in items if item not in given]
            out[name] = ",".join(items)
    return out


def validate_topic_configs(configs: Mapping[str, str]) -> dict[str, str]:
    """A topic's whole override set checked (unknown name or bad value: INVALID_CONFIG) and put
    in canonical form."""
    return {name: validate_topic_config(name, value) for name, value in configs.items()}


def check_resource_names(resources: Iterable[tuple[int, str]]) -> set[tuple[int, str]]:
    """The (type, name) pairs named more than once in one request (Kafka: INVALID_REQUEST for each
    "Each resource must appear at most once.")."""
    seen: set[tuple[int, str]] = set()
    repeated: set[tuple[int, str]] = set()
    for key in resources:
        if key in seen:
            repeated.add(key)
        seen.add(key)
    return repeated
