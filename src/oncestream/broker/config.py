"""Broker configuration from Kafka broker property names (``--config key=value``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from oncestream.broker.connection_limits import UNLIMITED, parse_per_ip_overrides
from oncestream.broker.memory_pool import DEFAULT_QUEUED_MAX_REQUEST_BYTES
from oncestream.errors import InvalidConfigError
from oncestream.protocol.api_keys import FEATURES


def _parse_bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise InvalidConfigError(f"not a boolean: {value!r}")


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def _listener_protocol(props: dict[str, str]) -> tuple[str, str]:
    """(listener name, security protocol) of the single listener served."""
    listeners = props.get("listeners", "")
    name = listeners.split(",")[0].split("://", 1)[0].strip().upper() if "://" in listeners else "PLAINTEXT"
    mapping = {}
    for entry in props.get("listener.security.protocol.map", "").split(","):
        if ":" in entry:
            key, _, value = entry.partition(":")
            mapping[key.strip().upper()] = value.strip().upper()
    protocol = mapping.get(name, name)
    if protocol not in SECURITY_PROTOCOLS:
        raise InvalidConfigError(f"listener {name}: unknown security protocol {protocol!r}")
    return name, protocol


@dataclass(frozen=True)
class BrokerConfig:
    """Broker-wide settings. Topic-level defaults (log.*) are parsed by LogConfig separately."""

    node_id: int = 0
    host: str = "127.0.0.1"
    port: int = 9092
    advertised_host: str | None = None
    advertised_port: int | None = None
    auto_create_topics_enable: bool = True
    num_partitions: int = 1
    socket_request_max_bytes: int = 104857600
    retention_check_interval_ms: int = 300000
    # Kafka's broker fetch.max.bytes (55 MiB): caps every Fetch response whatever it asks for.
    fetch_max_bytes: int = 57671680
    # All partitions this broker may hold (CreateTopics, CreatePartitions, auto-creation).
    max_partitions: int = 100000
    # Connection limits (Kafka's names and defaults; see broker/connection_limits.py).
    connections_max_idle_ms: int = 600000
    max_connections: int = UNLIMITED
    max_connections_per_ip: int = UNLIMITED
    max_connections_per_ip_overrides: dict[str, int] = field(default_factory=dict)
    # One pool for the bytes of requests being read or handled (broker/memory_pool.py). Kafka's
    # default is -1 (unbounded); here it is bounded by default.
    queued_max_request_bytes: int = DEFAULT_QUEUED_MAX_REQUEST_BYTES
    # The one listener's name and security protocol: the name is the scheme of the first
    # `listeners` entry (default PLAINTEXT), the protocol its `listener.security.protocol.map`
    # entry (or the name itself), e.g. listener.security.protocol.map=PLAINTEXT:SASL_PLAINTEXT.
    listener_name: str = "PLAINTEXT"
    security_protocol: str = "PLAINTEXT"
    raw: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_properties(cls, host: str, port: int, props: dict[str, str]) -> BrokerConfig:
        """Parse Kafka broker property names; unknown names are kept in ``raw`` for later layers."""
        try:
            node_id = int(props.get("node.id", props.get("broker.id", "0")))
            adv_host: str | None = None
            adv_port: int | None = None
            advertised = props.get("advertised.listeners")
            if advertised:
                # PLAINTEXT://host:port (first listener only: one listener is all we serve).
                first = advertised.split(",")[0]
                hostport = first.split("://", 1)[-1]
                adv_host, _, port_text = hostport.rpartition(":")
                adv_port = int(port_text)
            listener_name, security_protocol = _listener_protocol(props)
            config = cls(
                node_id=node_id,
                host=host,
                port=port,
                advertised_host=adv_host,
                advertised_port=adv_port,
                auto_create_topics_enable=_parse_bool(
                    props.get("auto.create.topics.enable", "true")
                ),
                num_partitions=int(props.get("num.partitions", "1")),
                socket_request_max_bytes=int(props.get("socket.request.max.bytes", "104857600")),
                retention_check_interval_ms=int(
                    props.get("log.retention.check.interval.ms", "300000")
                ),
                fetch_max_bytes=int(props.get("fetch.max.bytes", "57671680")),
                max_partitions=int(props.get("oncestream.max.partitions", "100000")),
                connections_max_idle_ms=int(props.get("connections.max.idle.ms", "600000")),
                max_connections=int(props.get("max.connections", str(UNLIMITED))),
                max_connections_per_ip=int(props.get("max.connections.per.ip", str(UNLIMITED))),
                max_connections_per_ip_overrides=parse_per_ip_overrides(
                    props.get("max.connections.per.ip.overrides", "")
                ),
                queued_max_request_bytes=int(
                    props.get("queued.max.request.bytes", str(DEFAULT_QUEUED_MAX_REQUEST_BYTES))
                ),
                listener_name=listener_name,
                security_protocol=security_protocol,
                raw=dict(props),
            )
        except ValueError as exc:
            raise InvalidConfigError(str(exc)) from exc
        if config.num_partitions < 1 or config.socket_request_max_bytes < 1024:
            raise InvalidConfigError("num.partitions must be >= 1, socket.request.max.bytes >= 1024")
        if config.fetch_max_bytes < 1024 or config.max_partitions < 1:
            raise InvalidConfigError("fetch.max.bytes must be >= 1024, oncestream.max.partitions >= 1")
        if config.connections_max_idle_ms < 1:
            raise InvalidConfigError("connections.max.idle.ms must be positive")
        if config.max_connections < 1 or config.max_connections_per_ip < 0:
            raise InvalidConfigError("max.connections must be >= 1, max.connections.per.ip >= 0")
        queued = config.queued_max_request_bytes
        # As Kafka requires: a pool smaller than the largest request would refuse it forever.
        if queued != -1 and queued < config.socket_request_max_bytes:
            raise InvalidConfigError(
                "queued.max.request.bytes must be -1 or at least socket.request.max.bytes "
                f"({queued} < {config.socket_request_max_bytes})"
            )
        for feature, (lo, hi) in FEATURES.items():  # finalized feature levels (api_versions.py)
            level = props.get(feature)
            if level is not None and not (level.strip().lstrip("-").isdigit() and lo <= int(level) <= hi):
                raise InvalidConfigError(f"{feature}={level}: supported levels are {lo}..{hi}")
        return config

    @property
    def advertised(self) -> tuple[str, int]:
        """Host and port clients are told to connect to."""
        return (self.advertised_host or self.host, self.advertised_port or self.port)
