"""Broker configs: the definitions DescribeConfigs reports for a BROKER resource, and the dynamic
broker configs (Kafka's ``kafka-configs --entity-type brokers``) with their durable store.

Kafka's layers, highest first: dynamic per-broker (resource name = node id), dynamic cluster
default (resource name ""), static (``--config`` / server.properties), the definition's default.
Dynamic here are the ``log.*``-style properties that supply topic defaults (every topic without its
own override follows a change at once), ``compression.*``, ``min.insync.replicas``,
``unclean.leader.election.enable`` and ``producer.id.expiration.ms``; everything else is read-only
and altering it is INVALID_REQUEST ("Cannot update these configs dynamically"), as in Kafka. Kafka
also reloads listeners, SSL stores, thread pools and connection quotas at run time; this broker
does not (they are read-only here, see docs/admin-configs.md).

The store is ``DATA_DIR/dynamic-broker-configs.json``, replaced atomically (``durable_files``).
Everything but ``save`` is sans-io.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from oncestream.durable_files import write_file_atomically
from oncestream.errors import InvalidRequestError, OnceStreamError, StorageError
from oncestream.log.config import LogConfig
from oncestream.log.topic_config_defs import TOPIC_CONFIG_DEFS, ConfigSource, ConfigType
from oncestream.log.topic_config_defs import ConfigDef as TopicConfigDef

log = logging.getLogger(__name__)

# The broker switch of tiered storage, and our read-only entry that reports the remote store's health
# (DescribeConfigs on the broker: ``config_admin.describe_broker`` fills in its live value).
REMOTE_LOG_STORAGE_SYSTEM_ENABLE = "remote.log.storage.system.enable"
REMOTE_STORAGE_STATUS = "oncestream.remote.log.storage.status"

DYNAMIC_CONFIGS_FILE = "dynamic-broker-configs.json"
# Unknown names are stored as Kafka stores them, so a layer is bounded (Kafka bounds one request's
# config records at 10,000; far more than the few hundred broker configs that exist).
MAX_DYNAMIC_CONFIGS_PER_LAYER = 1000
_FILE_VERSION = 1


@dataclass(frozen=True, slots=True)
class BrokerConfigDef:
    """One broker property: type, default (None: no default), whether it is dynamic, and a doc."""

    name: str
    type: ConfigType
    default: str | None
    doc: str
    dynamic: bool = False
    validate_as: TopicConfigDef | None = None  # a topic-default property is checked as its topic config

    @property
    def sensitive(self) -> bool:
        """Kafka hides PASSWORD values (``KafkaConfig.maybeSensitive``)."""
        return self.type == ConfigType.PASSWORD


# Kafka's broker-side defaults where they are not the topic default in the first synonym's unit:
# the hour-based synonyms carry the default, their millisecond siblings have none.
_SYNONYM_DEFAULTS: dict[str, str | None] = {
    "log.retention.ms": None, "log.retention.minutes": None, "log.retention.hours": "168",
    "log.roll.ms": None, "log.roll.hours": "168",
    "log.roll.jitter.ms": None, "log.roll.jitter.hours": "0",
    "log.flush.interval.ms": None, "log.flush.scheduler.interval.ms": str(2**63 - 1),
}


def _topic_synonym_defs() -> list[BrokerConfigDef]:
    """The broker properties that supply topic defaults (dynamic, cluster-wide in Kafka)."""
    out: list[BrokerConfigDef] = []
    for topic_def in TOPIC_CONFIG_DEFS.values():
        if topic_def.legacy:
            continue
        for synonym in topic_def.synonyms:
            default = _SYNONYM_DEFAULTS.get(synonym.name, topic_def.default)
            value_type = ConfigType.INT if synonym.unit_ms != 1 else topic_def.type
            out.append(BrokerConfigDef(synonym.name, value_type, default,
                                       f"Default of topic config {topic_def.name}: {topic_def.doc}", dynamic=True,
                                       validate_as=topic_def))
    return out


_S, _I, _L, _B, _LIST, _P = ConfigType.STRING, ConfigType.INT, ConfigType.LONG, ConfigType.BOOLEAN, ConfigType.LIST, \
    ConfigType.PASSWORD

_STATIC_DEFS = [
    BrokerConfigDef("node.id", _I, "0", "This broker's id."),
    BrokerConfigDef("broker.id", _I, "0", "This broker's id (older name of node.id)."),
    BrokerConfigDef("process.roles", _LIST, "", "KRaft roles; one node plays broker and controller."),
    BrokerConfigDef("listeners", _LIST, "PLAINTEXT://:9092", "Endpoints the broker binds."),
    BrokerConfigDef("advertised.listeners", _S, None, "Endpoints clients are told to use."),
    BrokerConfigDef("listener.security.protocol.map", _S,
                    "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
                    "Security protocol of each listener name."),
    BrokerConfigDef("num.partitions", _I, "1", "Partitions of an auto-created topic."),
    BrokerConfigDef("auto.create.topics.enable", _B, "true", "Whether Metadata creates missing topics."),
    BrokerConfigDef("socket.request.max.bytes", _I, "104857600", "Largest request frame accepted."),
    BrokerConfigDef("queued.max.request.bytes", _L, "268435456",
                    "Bytes of requests being read or handled at once (broker-wide pool)."),
    BrokerConfigDef("connections.max.idle.ms", _L, "600000", "Idle time after which a connection is closed."),
    BrokerConfigDef("max.connections", _I, "2147483647", "Connections the broker accepts."),
    BrokerConfigDef("max.connections.per.ip", _I, "2147483647", "Connections accepted from one address."),
    BrokerConfigDef("max.connections.per.ip.overrides", _S, "", "Per-address connection limits (ip:count,...)."),
    BrokerConfigDef("fetch.max.bytes", _I, "57671680", "Cap of every Fetch response."),
    BrokerConfigDef("log.retention.check.interval.ms", _L, "300000", "How often retention runs."),
    BrokerConfigDef("log.dirs", _S, None, "Data directory (--data-dir)."),
    BrokerConfigDef("offsets.topic.num.partitions", _I, "50", "Partitions of __consumer_offsets."),
    BrokerConfigDef("transaction.state.log.num.partitions", _I, "50", "Partitions of __transaction_state."),
    BrokerConfigDef("transaction.max.timeout.ms", _I, "900000", "Longest transaction timeout a producer may ask."),
    BrokerConfigDef("transaction.two.phase.commit.enable", _B, "false", "Two-phase commit (KIP-939)."),
    BrokerConfigDef("group.initial.rebalance.delay.ms", _I, "3000", "Delay of a new group's first rebalance."),
    BrokerConfigDef("authorizer.class.name", _S, "", "The ACL authorizer; empty: everything allowed."),
    BrokerConfigDef("super.users", _S, None, "Principals allowed everything."),
    BrokerConfigDef("allow.everyone.if.no.acl.found", _B, "false", "Allow a resource that has no ACL."),
    BrokerConfigDef("principal.builder.class", _S,
                    "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder",
                    "Maps an authenticated connection to its principal (module:Class)."),
    BrokerConfigDef("sasl.enabled.mechanisms", _LIST, "GSSAPI", "SASL mechanisms offered."),
    BrokerConfigDef("sasl.jaas.config", _P, None, "JAAS login configuration."),
    BrokerConfigDef("ssl.keystore.location", _S, None, "Key store file."),
    BrokerConfigDef("ssl.keystore.password", _P, None, "Key store password."),
    BrokerConfigDef("ssl.key.password", _P, None, "Private key password."),
    BrokerConfigDef("ssl.truststore.location", _S, None, "Trust store file."),
    BrokerConfigDef("ssl.truststore.password", _P, None, "Trust store password."),
    BrokerConfigDef("ssl.client.auth", _S, "none", "Whether TLS clients must present a certificate."),
    # Tiered storage (docs/tiered-storage.md): Kafka 4's RemoteLogManagerConfig names and defaults.
    # Kafka reloads some of them at run time; here the RemoteLogManager reads them once (read-only).
    BrokerConfigDef(REMOTE_LOG_STORAGE_SYSTEM_ENABLE, _B, "false", "Whether the broker has tiered storage."),
    BrokerConfigDef("rsm.config.storage.uri", _S, None,
                    "Where tiered segments go: s3://BUCKET/PREFIX or file:///PATH (credentials never in it)."),
    BrokerConfigDef("remote.log.manager.task.interval.ms", _L, "30000",
                    "Interval of the copy, local deletion and remote retention tasks."),
    BrokerConfigDef("remote.log.manager.thread.pool.size", _I, "2", "Threads copying and deleting remote segments."),
    BrokerConfigDef("remote.log.manager.copier.thread.pool.size", _I, "10",
                    "Kafka 4's copier pool; with the expiration pool it raises the one pool's size."),
    BrokerConfigDef("remote.log.manager.expiration.thread.pool.size", _I, "10",
                    "Kafka 4's expiration pool; with the copier pool it raises the one pool's size."),
    BrokerConfigDef("remote.log.manager.task.retry.backoff.ms", _L, "500", "First wait before a failed task is retried."),
    BrokerConfigDef("remote.log.manager.task.retry.backoff.max.ms", _L, "30000",
                    "Longest wait between retries of a failed task (exponential backoff cap)."),
    BrokerConfigDef("remote.log.manager.task.retry.jitter", ConfigType.DOUBLE, "0.2",
                    "Random share of a retry backoff added or removed."),
    BrokerConfigDef("remote.log.reader.threads", _I, "10", "Threads reading tiered segments for fetches."),
    BrokerConfigDef("remote.fetch.max.wait.ms", _I, "500", "Longest a fetch waits for a remote read."),
    BrokerConfigDef("remote.log.index.file.cache.total.size.bytes", _L, "1073741824",
                    "Bytes of remote segment indexes cached locally."),
    BrokerConfigDef(REMOTE_STORAGE_STATUS, _S, None,
                    "Read-only: ok, or the last error of the remote store in words (this broker's own entry)."),
]

BROKER_CONFIG_DEFS: dict[str, BrokerConfigDef] = {
    d.name: d
    for d in [
        *_topic_synonym_defs(),
        BrokerConfigDef("producer.id.expiration.ms", _I, "86400000",
                        "Time a producer id is remembered after its last write.", dynamic=True),
        *_STATIC_DEFS,
    ]
}

# Broker names that are one setting in different units (DynamicBrokerConfig.brokerConfigSynonyms):
# describing any of them lists all as synonyms, in this order.
_BROKER_SYNONYM_GROUPS = (
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
)


def broker_synonym_names(name: str) -> tuple[str, ...]:
    """``name`` and the broker properties that are the same setting, in Kafka's precedence order."""
    for group in _BROKER_SYNONYM_GROUPS:
        if name in group:
            return group
    return (name,)


def is_sensitive_name(name: str) -> bool:
    """A property whose value DescribeConfigs must not return: PASSWORD-typed ones, listener-prefixed
    copies of them, and (as Kafka treats every property of unknown type) names we do not define,
    except our own ``oncestream.*`` settings."""
    definition = BROKER_CONFIG_DEFS.get(name)
    if definition is not None:
        return definition.sensitive
    if name.startswith("oncestream."):
        return False
    return True


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One described config (topic or broker), in the shape of a DescribeConfigsResourceResult:
    value (None when sensitive or unset), source, synonyms."""

    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    sensitive: bool
    type: ConfigType
    doc: str | None
    synonyms: tuple[tuple[str, str | None, ConfigSource], ...]

    @property
    def is_default(self) -> bool:
        """Kafka's ConfigEntry.isDefault: the value comes from the config's own default."""
        return self.source == ConfigSource.DEFAULT_CONFIG


@dataclass
class DynamicBrokerConfigs:
    """The dynamic broker configs of this node: ``cluster`` (resource "") and ``broker`` (resource
    = node id) layers over the static properties."""

    node_id: int
    static: dict[str, str]
    cluster: dict[str, str] = field(default_factory=dict)
    broker: dict[str, str] = field(default_factory=dict)

    # --- the effective properties ------------------------------------------------------------------

    def effective(self) -> dict[str, str]:
        """Static properties overlaid by the dynamic cluster defaults, then the per-broker ones."""
        return {**self.static, **self.cluster, **self.broker}

    def layer(self, resource_name: str) -> dict[str, str]:
        """The dynamic configs stored under a BROKER resource name ("" or this node's id)."""
        return self.cluster if resource_name == "" else self.broker

    def check_resource_name(self, resource_name: str) -> None:
        """Kafka: a BROKER resource is "" (cluster default) or this node's id; INVALID_REQUEST else."""
        if resource_name == "":
            return
        try:
            node = int(resource_name)
        except ValueError:
            raise InvalidRequestError(f"Broker id must be an integer, but it is: {resource_name}") from None
        if node != self.node_id:
            raise InvalidRequestError(f"Unexpected broker id, expected {self.node_id}, but received {resource_name}")

    # --- describing ---------------------------------------------------------------------------------

    def _synonyms(self, name: str, sensitive: bool) -> list[tuple[str, str | None, ConfigSource]]:
        """Kafka's ConfigHelper.configSynonyms: each layer in turn, every synonym name within it,
        then leading entries for other names dropped."""
        names = broker_synonym_names(name)
        layers: list[tuple[Mapping[str, str], ConfigSource]] = [
            (self.broker, ConfigSource.DYNAMIC_BROKER_CONFIG),
            (self.cluster, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
            (self.static, ConfigSource.STATIC_BROKER_CONFIG),
            (_DEFAULTS, ConfigSource.DEFAULT_CONFIG),
        ]
        found = [(n, None if sensitive else values[n], source) for values, source in layers for n in names if n in values]
        while found and found[0][0] != name:
            found.pop(0)
        return found

    def describe(self, resource_name: str, *, include_synonyms: bool, include_documentation: bool) -> list[ConfigEntry]:
        """DescribeConfigs of a BROKER resource: for this node's id every property (defined ones and
        those given statically or dynamically); for "" only the dynamic cluster defaults."""
        self.check_resource_name(resource_name)
        per_broker = resource_name != ""
        names = set(BROKER_CONFIG_DEFS) | set(self.static) | set(self.cluster) | set(self.broker) if per_broker \
            else set(self.cluster)
        entries: list[ConfigEntry] = []
        for name in sorted(names):
            definition = BROKER_CONFIG_DEFS.get(name)
            sensitive = is_sensitive_name(name)
            synonyms = self._synonyms(name, sensitive)
            if not per_broker:
                synonyms = [s for s in synonyms if s[2] == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG]
            source = synonyms[0][2] if synonyms else ConfigSource.DEFAULT_CONFIG
            value = None if sensitive or not synonyms else synonyms[0][1]
            entries.append(ConfigEntry(
                name=name, value=value, source=source,
                read_only=definition is None or not definition.dynamic,
                sensitive=sensitive,
                type=definition.type if definition is not None else ConfigType.UNKNOWN,
                doc=(definition.doc if definition is not None else None) if include_documentation else None,
                synonyms=tuple(synonyms) if include_synonyms else (),
            ))
        return entries

    # --- altering ----------------------------------------------------------------------------------

    def validate_layer(self, resource_name: str, new_layer: Mapping[str, str]) -> dict[str, str]:
        """Check a whole new dynamic layer for ``resource_name`` (Kafka's DynamicBrokerConfig
        validation); returns it with canonical values. INVALID_REQUEST, as Kafka answers (its
        ConfigException is turned into InvalidRequestException, KAFKA-13609), for a read-only
        property or a bad value; unknown names are kept, as Kafka keeps them."""
        self.check_resource_name(resource_name)
        if len(new_layer) > MAX_DYNAMIC_CONFIGS_PER_LAYER:
            raise InvalidRequestError(f"at most {MAX_DYNAMIC_CONFIGS_PER_LAYER} dynamic configs per broker resource")
        old_layer = self.layer(resource_name)
        non_dynamic = sorted(name for name, value in new_layer.items()
                             if name in BROKER_CONFIG_DEFS and not BROKER_CONFIG_DEFS[name].dynamic
                             and old_layer.get(name) != value)
        if non_dynamic:
            raise InvalidRequestError(f"Cannot update these configs dynamically: {non_dynamic}")
        out: dict[str, str] = {}
        for name, value in new_layer.items():
            definition = BROKER_CONFIG_DEFS.get(name)
            try:
                if definition is not None and definition.validate_as is not None:
                    topic_def = definition.validate_as
                    synonym = next(s for s in topic_def.synonyms if s.name == name)
                    topic_def.validate(topic_def.name, synonym.convert(value))
                    out[name] = value.strip()
                elif definition is not None and definition.type in (ConfigType.INT, ConfigType.LONG):
                    out[name] = str(int(value.strip()))
                else:
                    out[name] = value
            except (OnceStreamError, ValueError) as exc:
                raise InvalidRequestError(f"Invalid value {value} for configuration {name}: {exc}") from None
        return out

    def with_layer(self, resource_name: str, layer: Mapping[str, str]) -> DynamicBrokerConfigs:
        """A copy with the layer of ``resource_name`` replaced (applied once it is durable)."""
        cluster = dict(layer) if resource_name == "" else dict(self.cluster)
        broker = dict(self.broker) if resource_name == "" else dict(layer)
        return DynamicBrokerConfigs(self.node_id, dict(self.static), cluster, broker)

    # --- the store ---------------------------------------------------------------------------------

    def encode(self) -> bytes:
        """The store file's content."""
        return json.dumps({"version": _FILE_VERSION, "cluster": self.cluster,
                           "brokers": {str(self.node_id): self.broker}}, sort_keys=True, indent=1).encode()

    def save(self, data_dir: Path, fsync: Callable[[int], None] | None = None) -> None:
        """Write the store durably (tmp, fsync, rename, directory fsync): on the disk threads."""
        write_file_atomically(data_dir / DYNAMIC_CONFIGS_FILE, self.encode(), fsync=fsync)

    @classmethod
    def load(cls, data_dir: Path, node_id: int, static: Mapping[str, str]) -> DynamicBrokerConfigs:
        """The stored dynamic configs (none if there is no file yet). An unreadable file is
        StorageError: it was written atomically, so that is damage, not a torn write."""
        path = data_dir / DYNAMIC_CONFIGS_FILE
        configs = cls(node_id, dict(static))
        if not path.exists():
            return configs
        try:
            data = json.loads(path.read_text())
            if data.get("version") != _FILE_VERSION:
                raise ValueError(f"unsupported version {data.get('version')!r}")
            configs.cluster = {str(k): str(v) for k, v in data["cluster"].items()}
            configs.broker = {str(k): str(v) for k, v in data["brokers"].get(str(node_id), {}).items()}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StorageError(f"dynamic broker configs {path} are unreadable: {exc}") from exc
        return configs._usable()

    def _usable(self) -> DynamicBrokerConfigs:
        """Kafka's DynamicBrokerConfig.removeInvalidConfigs: a stored value that no longer passes
        (e.g. written by another version) is ignored with a log line, not fatal at start-up."""
        kept: list[dict[str, str]] = []
        for resource_name, layer in (("", self.cluster), (str(self.node_id), self.broker)):
            usable: dict[str, str] = {}
            for name, value in layer.items():
                try:
                    checked = self.validate_layer(resource_name, {name: value})
                    LogConfig.from_broker_configs(checked)
                except OnceStreamError as exc:
                    log.error("dynamic broker config %s=%r is invalid and ignored: %s", name, value, exc)
                    continue
                usable.update(checked)
            kept.append(usable)
        return DynamicBrokerConfigs(self.node_id, self.static, kept[0], kept[1])


_DEFAULTS: dict[str, str] = {name: d.default for name, d in BROKER_CONFIG_DEFS.items() if d.default is not None}
