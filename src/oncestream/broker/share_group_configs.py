"""Share-group configs as GROUP config resources (KIP-932's ``share.auto.offset.reset``,
``share.isolation.level``, ``share.record.lock.duration.ms``, ``share.session.timeout.ms`` and
``share.heartbeat.interval.ms``; KIP-1240's ``share.delivery.count.limit``): IncrementalAlterConfigs
/ AlterConfigs change them, DescribeConfigs lists them, and they are kept durably in
``DATA_DIR/share_group_configs.json`` (Kafka keeps them in its metadata log; a cluster broker in
PostgreSQL's ``group_configs``, cluster/pg/client_metrics.py ``PgGroupConfigStore``, installed in
place of ``FileGroupConfigStore``). A change is written before it applies, like a dynamic broker
config.

A group's config takes effect when its share-partitions are first read (the reset policy picks
the start offset of a share-partition that has no state yet), on every fetch (the isolation
level), on every acquisition (the lock duration) and every delivery that ends (the delivery count
limit), and at each heartbeat of its members (the session timeout and the heartbeat interval the
answer gives the member), as in Kafka. The integer configs must lie within the broker's bounds
(``GroupConfigLimits``: ``group.share.min.*`` / ``group.share.max.*``), and a group's session
timeout must exceed its heartbeat interval (the broker's value standing in for one the group has
not set), as Kafka's GroupConfig validates; a group without its own value uses the broker's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
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
SESSION_TIMEOUT_MS = "share.session.timeout.ms"
HEARTBEAT_INTERVAL_MS = "share.heartbeat.interval.ms"
DELIVERY_COUNT_LIMIT = "share.delivery.count.limit"
DEFAULTS = {AUTO_OFFSET_RESET: "latest", ISOLATION_LEVEL: "read_uncommitted"}  # the integers': the broker's
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
    SESSION_TIMEOUT_MS: "The timeout to detect client failures when using the share group protocol (milliseconds).",
    HEARTBEAT_INTERVAL_MS: "The heartbeat interval given to the members of the share group (milliseconds).",
    DELIVERY_COUNT_LIMIT: "The maximum number of delivery attempts for a record delivered to the share group.",
}


@dataclass(frozen=True)
class IntLimit:
    """A broker's value of an integer group config (what a group without its own uses) and the
    bounds a group's own value must lie within, with the broker properties that set them."""

    default: int
    low: int
    high: int
    low_property: str
    high_property: str


def _limit(props: Mapping[str, str], prefix: str, default: int, low: int, high: int) -> IntLimit:
    """``group.share.<prefix>`` and its ``group.share.min.<prefix>`` / ``group.share.max.<prefix>``."""
    low_property, high_property = f"group.share.min.{prefix}", f"group.share.max.{prefix}"

    def num(name: str, fallback: int) -> int:
        try:
            return int(props.get(name, fallback))
        except ValueError as exc:
            raise InvalidConfigError(f"{name}: {exc}") from exc

    return IntLimit(num(f"group.share.{prefix}", default), num(low_property, low), num(high_property, high),
                    low_property, high_property)


@dataclass(frozen=True)
class GroupConfigLimits:
    """The broker's values and bounds of the integer share-group configs (Kafka's defaults)."""

    ints: Mapping[str, IntLimit] = field(default_factory=lambda: GroupConfigLimits.from_properties({}).ints)

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> GroupConfigLimits:
        """From broker properties: ``group.share.record.lock.duration.ms`` (30 s, within 15-60 s),
        ``group.share.session.timeout.ms`` (45 s, within 45-60 s),
        ``group.share.heartbeat.interval.ms`` (5 s, within 5-15 s) and
        ``group.share.delivery.count.limit`` (5, within 2-10), each bounded by its
        ``group.share.min.*`` and ``group.share.max.*``."""
        return cls({
            RECORD_LOCK_DURATION_MS: _limit(props, "record.lock.duration.ms", 30000, 15000, 60000),
            SESSION_TIMEOUT_MS: _limit(props, "session.timeout.ms", 45000, 45000, 60000),
            HEARTBEAT_INTERVAL_MS: _limit(props, "heartbeat.interval.ms", 5000, 5000, 15000),
            DELIVERY_COUNT_LIMIT: _limit(props, "delivery.count.limit", 5, 2, 10),
        })

    def value(self, configs: Mapping[str, str], name: str) -> int:
        """A group's integer config ``name``: its own (``configs``), else the broker's."""
        own = configs.get(name)
        return self.ints[name].default if own is None else int(own)
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
                     limits: GroupConfigLimits | None = None) -> dict[str, str]:
    """A group's configs after SET / DELETE operations, validated as Kafka's GroupConfig does: an
    unknown name or value is INVALID_CONFIG (an integer outside its ``limits``, the broker's
    min and max, too; a session timeout not above the heartbeat interval), APPEND / SUBTRACT (no
    LIST config here) INVALID_CONFIG, a SET without a value INVALID_REQUEST."""
    bounds = limits or GroupConfigLimits()
    out = dict(current)
    for name, op, value in operations:
        if name not in _ALLOWED and name not in bounds.ints:
            raise InvalidConfigError(f"Unknown group config name: {name}")
        if op == SET:
            if value is None:
                raise InvalidRequestError(f"Null value not supported for: {name}")
            if name in bounds.ints:
                out[name] = str(_bounded_int(name, value, bounds.ints[name]))
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
    own_timing = SESSION_TIMEOUT_MS in out or HEARTBEAT_INTERVAL_MS in out  # the broker's own pair is its business
    if own_timing and bounds.value(out, SESSION_TIMEOUT_MS) <= bounds.value(out, HEARTBEAT_INTERVAL_MS):
        raise InvalidConfigError(f"{SESSION_TIMEOUT_MS} must be greater than {HEARTBEAT_INTERVAL_MS}")
    return out


def _bounded_int(name: str, value: str, limit: IntLimit) -> int:
    try:
        number = int(value.strip())
    except ValueError:
        raise InvalidConfigError(f"Invalid value {value} for configuration {name}: Not a number of type INT") from None
    if number < limit.low:
        raise InvalidConfigError(f"{name} must be greater than or equal to {limit.low_property} ({limit.low})")
    if number > limit.high:
        raise InvalidConfigError(f"{name} must be less than or equal to {limit.high_property} ({limit.high})")
    return number


def describe(configs: Mapping[str, str], limits: GroupConfigLimits) -> list[ConfigEntry]:
    """DescribeConfigs entries of one group's share configs (set ones as GROUP_CONFIG; the
    integers' defaults are the broker's, ``limits``)."""
    defaults = {**DEFAULTS, **{name: str(limit.default) for name, limit in limits.ints.items()}}
    entries = []
    for name, default in defaults.items():
        value = configs.get(name)
        source = ConfigSource.DEFAULT_CONFIG if value is None else ConfigSource.GROUP_CONFIG
        kind = ConfigType.INT if name in limits.ints else ConfigType.STRING
        entries.append(ConfigEntry(name=name, value=value if value is not None else default, source=source,
                                   read_only=False, sensitive=False, type=kind, doc=_DOCS[name], synonyms=()))
    return entries
