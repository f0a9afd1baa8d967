"""Share-group configs as GROUP config resources (KIP-932's ``share.auto.offset.reset``,
``share.isolation.level`` and ``share.record.lock.duration.ms``): IncrementalAlterConfigs /
AlterConfigs change them, DescribeConfigs
lists them, and they are kept durably in ``DATA_DIR/share_group_configs.json`` (Kafka keeps them
in its metadata log; a cluster broker in PostgreSQL's ``group_configs``, cluster/pg/client_metrics.py
``PgGroupConfigStore``, installed in place of ``FileGroupConfigStore``). A change is written before
it applies, like a dynamic broker config.

A group's config takes effect when its share-partitions are first read (the reset policy picks
the start offset of a share-partition that has no state yet), on every fetch (the isolation
level) and on every acquisition (the lock duration, which must lie within the broker's
``group.share.min.record.lock.duration.ms`` and ``group.share.max.record.lock.duration.ms``; its
default is the broker's ``group.share.record.lock.duration.ms``), as in Kafka.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Protocol

from oncestream.broker.dynamic_config import ConfigEntry
from oncestream.broker.named_configs_file import load_named_configs, save_named_configs
from oncestream.errors import InvalidConfigError, InvalidRequestError
from oncestream.log.topic_config_defs import ConfigSource, ConfigType

FILE_NAME = "share_group_configs.json"
AUTO_OFFSET_RESET = "share.auto.offset.reset"
ISOLATION_LEVEL = "share.isolation.level"
RECORD_LOCK_DURATION_MS = "share.record.lock.duration.ms"
DEFAULTS = {AUTO_OFFSET_RESET: "latest", ISOLATION_LEVEL: "read_uncommitted"}  # the lock duration's: the broker's
_ALLOWED = {AUTO_OFFSET_RESET: ("latest", "earliest", "by_duration:<ISO-8601 duration>"),
            ISOLATION_LEVEL: ("read_uncommitted", "read_committed")}
BY_DURATION = "by_duration:"
# java.time.Duration.parse's form: PnDTnHnMn.nS (days, hours, minutes, seconds; a leading sign).
_DURATION = re.compile(r"([-+]?)P(?:([-+]?\d+)D)?(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+(?:[.,]\d{1,9})?)S)?)?",
                       re.IGNORECASE)


def duration_ms(text: str) -> int | None:
    """Milliseconds of an ISO-8601 duration as Java's Duration.parse reads it (``P1D``,
    ``PT2H30M``, ``PT0.5S``), or None if ``text`` is not one."""
    match = _DURATION.fullmatch(text.strip())
    if match is None or text.strip().upper().endswith("T") or not any(match.groups()[1:]):
        return None
    sign, days, hours, minutes, seconds = match.groups()
    total = (int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes or 0) * 60) * 1000
    total += round(float((seconds or "0").replace(",", ".")) * 1000)
    return -total if sign == "-" else total


def reset_by_duration_ms(value: str) -> int | None:
    """The look-back of a ``by_duration:<duration>`` reset policy, None for latest/earliest."""
    if not value.startswith(BY_DURATION):
        return None
    return duration_ms(value[len(BY_DURATION):])
_DOCS = {
    AUTO_OFFSET_RESET: "Where a share group starts reading a partition it has no state for: latest, earliest, or "
                       "by_duration:<ISO-8601 duration> (the first record at most that old).",
    ISOLATION_LEVEL: "read_committed: the share group only sees committed transactional records.",
    RECORD_LOCK_DURATION_MS: "How long a record stays acquired by a consumer of the share group before it is "
                             "given back (milliseconds).",
}
SET, DELETE = 0, 1


def load(data_dir: Path) -> dict[str, dict[str, str]]:
    """Every group's share configs as last written (empty without the file)."""
    return load_named_configs(data_dir / FILE_NAME)


def save(data_dir: Path, configs: Mapping[str, Mapping[str, str]]) -> None:
    """Write every group's configs durably (for the disk threads)."""
    save_named_configs(data_dir / FILE_NAME, configs)


class GroupConfigStore(Protocol):
    """Where IncrementalAlterConfigs persists every group's share configs before installing them."""

    def save(self, configs: Mapping[str, Mapping[str, str]]) -> None: ...


class FileGroupConfigStore:
    """The single broker's store (``share_group_configs.json`` in the data directory)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir

    def save(self, configs: Mapping[str, Mapping[str, str]]) -> None:
        """Write every group's configs durably (on the disk threads)."""
        save(self.data_dir, configs)


def apply_operations(current: Mapping[str, str], operations: Iterable[tuple[str, int, str | None]],
                     lock_duration_bounds_ms: tuple[int, int] = (15000, 60000)) -> dict[str, str]:
    """A group's configs after SET / DELETE operations, validated: an unknown name or value is
    INVALID_CONFIG (a lock duration outside ``lock_duration_bounds_ms``, the broker's min and max,
    too), APPEND / SUBTRACT (no LIST config here) INVALID_CONFIG, a SET without a value
    INVALID_REQUEST."""
    out = dict(current)
    for name, op, value in operations:
        if name not in _ALLOWED and name != RECORD_LOCK_DURATION_MS:
            raise InvalidConfigError(f"Unknown group config name: {name}")
        if op == SET:
            if value is None:
                raise InvalidRequestError(f"Null value not supported for: {name}")
            if name == RECORD_LOCK_DURATION_MS:
                out[name] = str(_lock_duration_ms(value, lock_duration_bounds_ms))
                continue
            by_duration = name == AUTO_OFFSET_RESET and value.startswith(BY_DURATION)
            look_back_ms = reset_by_duration_ms(value) if by_duration else None
            if by_duration and (look_back_ms is None or look_back_ms < 0):
                raise InvalidConfigError(f"Invalid value {value} for configuration {name}: "
                                         "by_duration needs a non-negative ISO-8601 duration, e.g. by_duration:PT1H")
            if not by_duration and value not in _ALLOWED[name]:
                raise InvalidConfigError(f"Invalid value {value} for configuration {name}: "
                                         f"must be one of {', '.join(_ALLOWED[name])}")
            out[name] = value
        elif op == DELETE:
            out.pop(name, None)
        else:
            raise InvalidConfigError(f"Can't APPEND or SUBTRACT to key {name} because its type is not LIST.")
    return out


def _lock_duration_ms(value: str, bounds_ms: tuple[int, int]) -> int:
    try:
        duration_ms = int(value.strip())
    except ValueError:
        raise InvalidConfigError(f"Invalid value {value} for configuration {RECORD_LOCK_DURATION_MS}: "
                                 "Not a number of type INT") from None
    low_ms, high_ms = bounds_ms
    if duration_ms < low_ms:
        raise InvalidConfigError(f"{RECORD_LOCK_DURATION_MS} must be greater than or equal to "
                                 f"group.share.min.record.lock.duration.ms ({low_ms})")
    if duration_ms > high_ms:
        raise InvalidConfigError(f"{RECORD_LOCK_DURATION_MS} must be less than or equal to "
                                 f"group.share.max.record.lock.duration.ms ({high_ms})")
    return duration_ms


def describe(configs: Mapping[str, str], default_lock_duration_ms: int) -> list[ConfigEntry]:
    """DescribeConfigs entries of one group's share configs (set ones as GROUP_CONFIG; the lock
    duration's default is the broker's ``group.share.record.lock.duration.ms``)."""
    defaults = {**DEFAULTS, RECORD_LOCK_DURATION_MS: str(default_lock_duration_ms)}
    entries = []
    for name, default in defaults.items():
        value = configs.get(name)
        source = ConfigSource.DEFAULT_CONFIG if value is None else ConfigSource.GROUP_CONFIG
        kind = ConfigType.INT if name == RECORD_LOCK_DURATION_MS else ConfigType.STRING
        entries.append(ConfigEntry(name=name, value=value if value is not None else default, source=source,
                                   read_only=False, sensitive=False, type=kind, doc=_DOCS[name], synonyms=()))
    return entries
