"""ClientMetrics config resources (resource type 16, KIP-714), sans-io: their configs (``metrics``,
``interval.ms``, ``match``), validation with Kafka's errors, matching a client against them and the
subscription id Kafka computes; durable in ``client-metrics-configs.json``.

Kafka's behaviour followed (ClientMetricsConfigs, ClientMetricsManager):

- ``metrics``: a list of metric-name prefixes; ``*`` (or an empty string) subscribes every metric;
  an empty list none. ``interval.ms``: 100..3600000 (default 300000). ``match``: a list of
  ``key=regex`` with keys client_instance_id, client_id, client_software_name,
  client_software_version, client_source_address, client_source_port; a client matches when every
  given regex matches the whole value; no ``match`` matches every client.
- an unknown config name, a bad interval, an unknown match key or a regex that does not compile:
  INVALID_CONFIG; an empty resource name: INVALID_REQUEST.
- the subscription id: CRC32C of the set of metrics (as Java prints a set, here sorted) followed by
  the push interval, XORed with the client instance id's hash (``Uuid.hashCode``), as a signed int32.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import crc32c

from oncestream.broker.dynamic_config import ConfigEntry
from oncestream.broker.named_configs_file import load_named_configs, save_named_configs
from oncestream.errors import InvalidConfigError, InvalidRequestError
from oncestream.log.topic_config_defs import ConfigSource, ConfigType

FILE_NAME = "client-metrics-configs.json"

METRICS = "metrics"
INTERVAL_MS = "interval.ms"
MATCH = "match"
DEFAULT_INTERVAL_MS = 300_000
MIN_INTERVAL_MS = 100
MAX_INTERVAL_MS = 3_600_000
ALL_METRICS = "*"

MATCH_KEYS = ("client_instance_id", "client_id", "client_software_name", "client_software_version",
              "client_source_address", "client_source_port")

# Kafka's ConfigDef of a ClientMetrics resource: (type, default, documentation).
CONFIG_DEFS: dict[str, tuple[ConfigType, str, str]] = {
    METRICS: (ConfigType.LIST, "", "The telemetry metric name prefixes to subscribe, '*' for all."),
    INTERVAL_MS: (ConfigType.INT, str(DEFAULT_INTERVAL_MS), "The client metrics push interval in milliseconds."),
    MATCH: (ConfigType.LIST, "", "Client matching patterns: key=regex, comma separated."),
}

# SET / DELETE / APPEND / SUBTRACT (IncrementalAlterConfigs' op codes).
_SET, _DELETE, _APPEND, _SUBTRACT = 0, 1, 2, 3


def _items(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


@dataclass(frozen=True)
class ClientMetadata:
    """What a client instance is matched on (Kafka's ClientMetricsInstanceMetadata)."""

    client_instance_id: str
    client_id: str
    client_software_name: str
    client_software_version: str
    client_source_address: str
    client_source_port: str

    def value(self, key: str) -> str:
        return str(getattr(self, key))


@dataclass(frozen=True)
class Subscription:
    """One ClientMetrics resource, parsed."""

    name: str
    metrics: tuple[str, ...]
    interval_ms: int
    match: tuple[tuple[str, re.Pattern[str]], ...]

    def matches(self, client: ClientMetadata) -> bool:
        """Every pattern matches the whole of its value (Java's Matcher.matches)."""
        return all(pattern.fullmatch(client.value(key)) is not None for key, pattern in self.match)


def parse_match(items: Iterable[str]) -> tuple[tuple[str, re.Pattern[str]], ...]:
    """``key=regex`` items checked (INVALID_CONFIG for an unknown key, a missing '=' or a bad regex)."""
    out = []
    for item in items:
        key, sep, regex = item.partition("=")
        key = key.strip()
        if not sep or key not in MATCH_KEYS:
            raise InvalidConfigError(f"Illegal client matching pattern: {item}")
        try:
            out.append((key, re.compile(regex.strip())))
        except re.error as exc:
            raise InvalidConfigError(f"Illegal regex pattern {regex!r} for {key}: {exc}") from None
    return tuple(out)


def validate(name: str, configs: Mapping[str, str]) -> Subscription:
    """A resource's whole config set checked, as the subscription it makes."""
    if not name:
        raise InvalidRequestError("Subscription name can't be empty")
    for key in configs:
        if key not in CONFIG_DEFS:
            raise InvalidConfigError(f"Unknown client metrics configuration: {key}")
    try:
        interval_ms = int(configs.get(INTERVAL_MS, DEFAULT_INTERVAL_MS))
    except ValueError:
        raise InvalidConfigError(f"Invalid value {configs[INTERVAL_MS]} for {INTERVAL_MS}: not an integer") from None
    if not MIN_INTERVAL_MS <= interval_ms <= MAX_INTERVAL_MS:
        raise InvalidConfigError(f"Invalid value {interval_ms} for {INTERVAL_MS}: must be between "
                                 f"{MIN_INTERVAL_MS} and {MAX_INTERVAL_MS}")
    metrics = tuple(item.strip() for item in configs.get(METRICS, "").split(",") if configs.get(METRICS, ""))
    return Subscription(name, metrics, interval_ms, parse_match(_items(configs.get(MATCH, ""))))


def apply_operations(current: Mapping[str, str], operations: Iterable[tuple[str, int, str | None]]) -> dict[str, str]:
    """A resource's configs after IncrementalAlterConfigs operations (APPEND / SUBTRACT on the two
    LIST configs, INVALID_CONFIG on ``interval.ms``); validated by ``validate`` afterwards."""
    out = dict(current)
    for name, op, value in operations:
        if name not in CONFIG_DEFS:
            raise InvalidConfigError(f"Unknown client metrics configuration: {name}")
        if op == _SET:
            out[name] = value or ""
        elif op == _DELETE:
            out.pop(name, None)
        elif op in (_APPEND, _SUBTRACT):
            if CONFIG_DEFS[name][0] != ConfigType.LIST:
                verb = "APPEND" if op == _APPEND else "SUBTRACT"
                raise InvalidConfigError(f"Can't {verb} to key {name} because its type is not LIST.")
            items = _items(out.get(name, ""))
            given = _items(value or "")
            items = items + [i for i in given if i not in items] if op == _APPEND else [i for i in items if i not in given]
            out[name] = ",".join(items)
        else:
            raise InvalidRequestError(f"Unknown operations type {op}")
    return out


def describe(configs: Mapping[str, str]) -> list[ConfigEntry]:
    """Every ClientMetrics config: the resource's own values (CLIENT_METRICS_CONFIG) or defaults."""
    return [
        ConfigEntry(name=name, value=configs.get(name, default),
                    source=ConfigSource.CLIENT_METRICS_CONFIG if name in configs else ConfigSource.DEFAULT_CONFIG,
                    read_only=False, sensitive=False, type=kind, doc=None, synonyms=())
        for name, (kind, default, _doc) in sorted(CONFIG_DEFS.items())
    ]


@dataclass(frozen=True)
class ResolvedSubscription:
    """What a client instance is subscribed to: the union of the matching subscriptions."""

    metrics: tuple[str, ...]  # sorted; ("*",) for every metric; () for none
    interval_ms: int
    subscription_id: int


def java_uuid_hash(value: uuid.UUID) -> int:
    """Kafka's ``Uuid.hashCode``: the two 64-bit halves XORed, folded to a signed int32."""
    most, least = value.int >> 64, value.int & ((1 << 64) - 1)
    h = most ^ least
    return _int32((h >> 32) ^ h)


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def subscription_id(metrics: Iterable[str], interval_ms: int, client_instance_id: uuid.UUID) -> int:
    """Kafka's computeSubscriptionId: CRC32C of ``"[m1, m2]" + interval`` XOR the uuid's hash."""
    text = "[" + ", ".join(sorted(metrics)) + "]" + str(interval_ms)
    crc = crc32c.crc32c(text.encode())
    return _int32(crc ^ java_uuid_hash(client_instance_id))


def resolve(subscriptions: Iterable[Subscription], client: ClientMetadata,
            client_instance_id: uuid.UUID) -> ResolvedSubscription:
    """The subscription set of one client (Kafka's createClientInstance): the union of the matching
    subscriptions' metrics (``*`` alone if any asks for every metric), the lowest interval."""
    metrics: set[str] = set()
    interval_ms = DEFAULT_INTERVAL_MS
    everything = False
    for sub in subscriptions:
        if sub.matches(client):
            everything = everything or ALL_METRICS in sub.metrics or "" in sub.metrics
            metrics.update(sub.metrics)
            interval_ms = min(interval_ms, sub.interval_ms)
    if everything:
        metrics = {ALL_METRICS}
    chosen = tuple(sorted(metrics))
    return ResolvedSubscription(chosen, interval_ms, subscription_id(chosen, interval_ms, client_instance_id))


def load(data_dir: Path) -> dict[str, dict[str, str]]:
    """Every ClientMetrics resource's configs as last written (empty without the file)."""
    return load_named_configs(data_dir / FILE_NAME)


def save(data_dir: Path, configs: Mapping[str, Mapping[str, str]]) -> None:
    """Write every resource's configs durably (for the disk threads); an emptied resource is gone."""
    save_named_configs(data_dir / FILE_NAME, configs)


class FileClientMetricsStore:
    """The single broker's ClientMetrics store (``client-metrics-configs.json``); cluster mode
    installs cluster/pg/client_metrics.py ``PgClientMetricsStore`` in its place, with the same ``save``."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir

    def save(self, configs: Mapping[str, Mapping[str, str]]) -> None:
        """Write every resource's configs durably (on the disk threads)."""
        save(self.data_dir, configs)


class ClientMetricsStore(Protocol):
    """Where IncrementalAlterConfigs persists every ClientMetrics resource before installing them."""

    def save(self, configs: Mapping[str, Mapping[str, str]]) -> None: ...
