"""Broker configuration from Kafka broker property names (``--config key=value``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from oncestream.broker.connection_limits import UNLIMITED, parse_per_ip_overrides
from oncestream.broker.listeners import Listener, parse_listeners
from oncestream.broker.memory_pool import DEFAULT_QUEUED_MAX_REQUEST_BYTES
from oncestream.errors import InvalidConfigError
from oncestream.process_shutdown import DEFAULT_SHUTDOWN_TIMEOUT_MS, shutdown_timeout_ms
from oncestream.protocol.api_keys import FEATURES
from oncestream.remote.manager_config import RemoteLogManagerConfig

# Kafka's ACL authorizers (KRaft's and ZooKeeper's): both mean our StandardAuthorizer.
AUTHORIZER_CLASS_NAMES = (
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
)


def _parse_bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise InvalidConfigError(f"not a boolean: {value!r}")


@dataclass(frozen=True)
class BrokerConfig:
    """Broker-wide settings. Topic-level defaults (log.*) are parsed by LogConfig separately."""

    node_id: int = 0
    host: str = "127.0.0.1"
    port: int = 9092
    # Every endpoint the broker binds (broker/listeners.py); empty: one PLAINTEXT listener on
    # host:port. The first one is the default (requests outside any connection, e.g. tests).
    listeners: tuple[Listener, ...] = ()
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
    # Authorization (issue 14): an ACL authorizer when authorizer.class.name names one.
    authorizer_class_name: str = ""
    super_users: str = ""
    allow_everyone_if_no_acl_found: bool = False
    # How long a SIGTERM'd broker may take to stop before it exits at once (process_shutdown).
    shutdown_timeout_ms: int = DEFAULT_SHUTDOWN_TIMEOUT_MS
    # Tiered storage (issue 21): the remote.* broker keys (remote/manager_config.py).
    remote_log: RemoteLogManagerConfig = field(default_factory=RemoteLogManagerConfig)
    raw: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_properties(cls, host: str, port: int, props: dict[str, str]) -> BrokerConfig:
        """Parse Kafka broker property names; unknown names are kept in ``raw`` for later layers."""
        try:
            node_id = int(props.get("node.id", props.get("broker.id", "0")))
            listeners = parse_listeners(props, host, port)
            config = cls(
                node_id=node_id,
                host=listeners[0].host,
                port=listeners[0].port,
                listeners=listeners,
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
                authorizer_class_name=props.get("authorizer.class.name", "").strip(),
                super_users=props.get("super.users", ""),
                allow_everyone_if_no_acl_found=_parse_bool(props.get("allow.everyone.if.no.acl.found", "false")),
                shutdown_timeout_ms=shutdown_timeout_ms(props),
                remote_log=RemoteLogManagerConfig.from_properties(props),
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
        if config.authorizer_class_name not in ("", *AUTHORIZER_CLASS_NAMES):
            # Refused rather than ignored: a broker started open when its operator asked for ACLs.
            raise InvalidConfigError(
                f"authorizer.class.name={config.authorizer_class_name}: supported are {AUTHORIZER_CLASS_NAMES}")
        for feature, (lo, hi) in FEATURES.items():  # finalized feature levels (api_versions.py)
            level = props.get(feature)
            if level is not None and not (level.strip().lstrip("-").isdigit() and lo <= int(level) <= hi):
                raise InvalidConfigError(f"{feature}={level}: supported levels are {lo}..{hi}")
        return config

    @property
    def all_listeners(self) -> tuple[Listener, ...]:
        """The listeners to bind (one PLAINTEXT listener on host:port when none were parsed)."""
        if self.listeners:
            return self.listeners
        return (Listener("PLAINTEXT", self.host, self.port, "PLAINTEXT", self.host, 0),)

    @property
    def advertised(self) -> tuple[str, int]:
        """Host and port of the default (first) listener that clients are told to connect to."""
        return self.all_listeners[0].advertised

    def advertised_for(self, listener_name: str) -> tuple[str, int]:
        """The advertised endpoint of ``listener_name`` (Kafka answers Metadata and
        FindCoordinator with the endpoint of the listener the request came in on); the default
        listener's for a name the broker does not have."""
        for listener in self.all_listeners:
            if listener.name == listener_name:
                return listener.advertised
        return self.advertised
