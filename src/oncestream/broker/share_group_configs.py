"""Share-group configs as GROUP config resources (KIP-932's ``share.auto.offset.reset`` and
``share.isolation.level``): IncrementalAlterConfigs / AlterConfigs change them, DescribeConfigs
lists them, and they are kept durably in ``DATA_DIR/share_group_configs.json`` (Kafka keeps them
in its metadata log). A change is written before it applies, like a dynamic broker config.

A group's config takes effect when its share-partitions are first read (the reset policy picks
the start offset of a share-partition that has no state yet) and on every fetch (the isolation
level), as in Kafka.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from oncestream.broker.dynamic_config import ConfigEntry
from oncestream.durable_files import write_file_atomically
from oncestream.errors import InvalidConfigError, InvalidRequestError, StorageError
from oncestream.log.topic_config_defs import ConfigSource, ConfigType

FILE_NAME = "share_group_configs.json"
AUTO_OFFSET_RESET = "share.auto.offset.reset"
ISOLATION_LEVEL = "share.isolation.level"
DEFAULTS = {AUTO_OFFSET_RESET: "latest", ISOLATION_LEVEL: "read_uncommitted"}
_ALLOWED = {AUTO_OFFSET_RESET: ("latest", "earliest"), ISOLATION_LEVEL: ("read_uncommitted", "read_committed")}
_DOCS = {
    AUTO_OFFSET_RESET: "Where a share group starts reading a partition it has no state for: latest or earliest.",
    ISOLATION_LEVEL: "read_committed: the share group only sees committed transactional records.",
}
SET, DELETE = 0, 1


def load(data_dir: Path) -> dict[str, dict[str, str]]:
    """Every group's share configs as last written (empty without the file)."""
    path = data_dir / FILE_NAME
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise StorageError(f"cannot read {path}: {exc}") from exc
    return {str(g): {str(k): str(v) for k, v in c.items()} for g, c in data.items()}


def save(data_dir: Path, configs: Mapping[str, Mapping[str, str]]) -> None:
    """Write every group's configs durably (for the disk threads)."""
    body = json.dumps({g: dict(c) for g, c in sorted(configs.items()) if c}, sort_keys=True, indent=1)
    write_file_atomically(data_dir / FILE_NAME, body.encode())


def apply_operations(current: Mapping[str, str], operations: Iterable[tuple[str, int, str | None]]) -> dict[str, str]:
    """A group's configs after SET / DELETE operations, validated: an unknown name or value is
    INVALID_CONFIG, APPEND / SUBTRACT (no LIST config here) INVALID_CONFIG, a SET without a value
    INVALID_REQUEST."""
    out = dict(current)
    for name, op, value in operations:
        if name not in _ALLOWED:
            raise InvalidConfigError(f"Unknown group config name: {name}")
        if op == SET:
            if value is None:
                raise InvalidRequestError(f"Null value not supported for: {name}")
            if value not in _ALLOWED[name]:
                raise InvalidConfigError(f"Invalid value {value} for configuration {name}: "
                                         f"must be one of {', '.join(_ALLOWED[name])}")
            out[name] = value
        elif op == DELETE:
            out.pop(name, None)
        else:
            raise InvalidConfigError(f"Can't APPEND or SUBTRACT to key {name} because its type is not LIST.")
    return out


def describe(configs: Mapping[str, str]) -> list[ConfigEntry]:
    """DescribeConfigs entries of one group's share configs (set ones as GROUP_CONFIG)."""
    entries = []
    for name, default in DEFAULTS.items():
        value = configs.get(name)
        source = ConfigSource.DEFAULT_CONFIG if value is None else ConfigSource.GROUP_CONFIG
        entries.append(ConfigEntry(name=name, value=value if value is not None else default, source=source,
                                   read_only=False, sensitive=False, type=ConfigType.STRING, doc=_DOCS[name],
                                   synonyms=()))
    return entries
