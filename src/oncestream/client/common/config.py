"""Client configuration: Kafka property names (the keys confluent-kafka accepts, plus the Java
client's names where the brief asks for them), defaults, aliases, type coercion.

Values may be given as Python values or as strings (``"true"``, ``"5"``), as in a properties file.
Keys this client does not implement are reported with a warning, never silently accepted as if
they worked; a key with an invalid value raises ``KafkaException(_INVALID_ARG)``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from oncestream.client.common.errors import _INVALID_ARG, KafkaError, KafkaException
from oncestream.client.common.sasl import SaslCredentials
from oncestream.client.common.tls import check_endpoint_algorithm, ssl_context_for

log = logging.getLogger("oncestream.client")


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value != 0
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"not a boolean: {value!r}")


def _int(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError("boolean where an integer is expected")
    return int(value)


def _str(value: Any) -> str:
    return str(value)


def _acks(value: Any) -> int:
    text = str(value).strip().lower()
    if text in ("all", "-1"):
        return -1
    number = int(text)
    if number not in (0, 1, -1):
        raise ValueError("acks must be 0, 1, -1 or all")
    return number


def _compression(value: Any) -> str:
    text = str(value).strip().lower()
    if text not in ("none", "gzip", "snappy", "lz4", "zstd"):
        raise ValueError(f"unknown compression type {value!r}")
    return text


def _isolation(value: Any) -> str:
    text = str(value).strip().lower()
    if text not in ("read_committed", "read_uncommitted"):
        raise ValueError("isolation.level must be read_committed or read_uncommitted")
    return text


def _group_protocol(value: Any) -> str:
    text = str(value).strip().lower()
    if text not in ("classic", "consumer"):
        raise ValueError("group.protocol must be classic or consumer")
    return text


def _reset(value: Any) -> str:
    text = str(value).strip().lower()
    mapping = {
        "earliest": "earliest", "smallest": "earliest", "beginning": "earliest",
        "latest": "latest", "largest": "latest", "end": "latest", "error": "error",
    }
    if text not in mapping:
        raise ValueError("auto.offset.reset must be earliest, latest or error")
    return mapping[text]


def _callable(value: Any) -> Any:
    if value is not None and not callable(value):
        raise ValueError("expected a callable")
    return value


@dataclass(frozen=True)
class _Key:
    parse: Callable[[Any], Any]
    default: Any


_COMMON: dict[str, _Key] = {
    "bootstrap.servers": _Key(_str, None),
    "client.id": _Key(_str, "oncestream"),
    "request.timeout.ms": _Key(_int, 30000),
    "socket.connection.setup.timeout.ms": _Key(_int, 10000),
    "reconnect.backoff.ms": _Key(_int, 100),
    "reconnect.backoff.max.ms": _Key(_int, 10000),
    "retry.backoff.ms": _Key(_int, 100),
    "retry.backoff.max.ms": _Key(_int, 1000),
    "metadata.max.age.ms": _Key(_int, 300000),
    "security.protocol": _Key(_str, "plaintext"),
    "sasl.mechanism": _Key(_str, "GSSAPI"),
    "sasl.username": _Key(_str, None),
    "sasl.password": _Key(_str, None),
    # TLS (client/common/tls.py), librdkafka's names and defaults.
    "ssl.ca.location": _Key(_str, None),
    "ssl.certificate.location": _Key(_str, None),
    "ssl.key.location": _Key(_str, None),
    "ssl.key.password": _Key(_str, None),
    "ssl.endpoint.identification.algorithm": _Key(check_endpoint_algorithm, "https"),
    "enable.ssl.certificate.verification": _Key(_bool, True),
    "error_cb": _Key(_callable, None),
    "logger": _Key(lambda v: v, None),
}

_PRODUCER: dict[str, _Key] = {
    "acks": _Key(_acks, -1),
    "enable.idempotence": _Key(_bool, True),
    "transactional.id": _Key(lambda v: None if v is None else str(v), None),
    "transaction.timeout.ms": _Key(_int, 60000),
    "transaction.two.phase.commit.enable": _Key(_bool, False),
    "linger.ms": _Key(_int, 5),
    "batch.size": _Key(_int, 1000000),
    "batch.num.messages": _Key(_int, 10000),
    "buffer.memory": _Key(_int, 64 * 1024 * 1024),
    "max.block.ms": _Key(_int, 60000),
    "compression.type": _Key(_compression, "none"),
    "max.in.flight.requests.per.connection": _Key(_int, 5),
    "retries": _Key(_int, 2147483647),
    "delivery.timeout.ms": _Key(_int, 120000),
    "partitioner": _Key(_str, "murmur2_random"),
    "max.request.size": _Key(_int, 1048576),
    "on_delivery": _Key(_callable, None),
    "allow.auto.create.topics": _Key(_bool, True),
}

_CONSUMER: dict[str, _Key] = {
    "group.id": _Key(lambda v: None if v is None else str(v), None),
    "group.instance.id": _Key(lambda v: None if v is None else str(v), None),
    # KIP-848: "consumer" is the new protocol (coordinator-side assignment), "classic" the old one.
    "group.protocol": _Key(_group_protocol, "classic"),
    "group.remote.assignor": _Key(lambda v: None if v is None else str(v), None),
    "session.timeout.ms": _Key(_int, 45000),
    "heartbeat.interval.ms": _Key(_int, 3000),
    "max.poll.interval.ms": _Key(_int, 300000),
    "auto.offset.reset": _Key(_reset, "latest"),
    "enable.auto.commit": _Key(_bool, True),
    "auto.commit.interval.ms": _Key(_int, 5000),
    "enable.auto.offset.store": _Key(_bool, True),
    "isolation.level": _Key(_isolation, "read_committed"),
    "fetch.min.bytes": _Key(_int, 1),
    "fetch.wait.max.ms": _Key(_int, 500),
    "fetch.max.bytes": _Key(_int, 52428800),
    "max.partition.fetch.bytes": _Key(_int, 1048576),
    "queued.max.messages.kbytes": _Key(_int, 65536),
    "partition.assignment.strategy": _Key(_str, "range,roundrobin"),
    "enable.partition.eof": _Key(_bool, False),
    "check.crcs": _Key(_bool, False),
    "on_commit": _Key(_callable, None),
    "allow.auto.create.topics": _Key(_bool, False),
    "client.rack": _Key(_str, ""),
}

# KIP-932 share consumers: the Java KafkaShareConsumer's and librdkafka's names.
_SHARE_CONSUMER: dict[str, _Key] = {
    "group.id": _Key(lambda v: None if v is None else str(v), None),
    "share.acknowledgement.mode": _Key(lambda v: _one_of(v, ("implicit", "explicit")), "implicit"),
    "share.acquire.mode": _Key(lambda v: _one_of(v, ("batch_optimized", "record_limit")), "batch_optimized"),
    "max.poll.records": _Key(_int, 500),
    "fetch.min.bytes": _Key(_int, 1),
    "fetch.wait.max.ms": _Key(_int, 500),
    "fetch.max.bytes": _Key(_int, 52428800),
    "max.partition.fetch.bytes": _Key(_int, 1048576),
    "check.crcs": _Key(_bool, False),
    "client.rack": _Key(_str, ""),
    "allow.auto.create.topics": _Key(_bool, False),
}


def _one_of(value: Any, choices: tuple[str, ...]) -> str:
    text = str(value).strip().lower()
    if text not in choices:
        raise ValueError(f"must be one of {', '.join(choices)}")
    return text


_ALIASES = {
    "metadata.broker.list": "bootstrap.servers",
    "request.required.acks": "acks",
    "queue.buffering.max.ms": "linger.ms",
    "compression.codec": "compression.type",
    "max.in.flight": "max.in.flight.requests.per.connection",
    "message.timeout.ms": "delivery.timeout.ms",
    "message.send.max.retries": "retries",
    "message.max.bytes": "max.request.size",
    "delivery.report.cb": "on_delivery",
    "dr_msg_cb": "on_delivery",
    "fetch.max.wait.ms": "fetch.wait.max.ms",
    "socket.timeout.ms": "request.timeout.ms",
    "sasl.mechanisms": "sasl.mechanism",
    "default.topic.config": None,  # a nested dict, merged below
}

# Accepted for compatibility; they only tune librdkafka internals this client does not have.
_IGNORED = {
    "api.version.request", "broker.version.fallback", "statistics.interval.ms", "debug",
    "log_level", "socket.keepalive.enable", "socket.nagle.disable", "log.connection.close",
    "topic.metadata.refresh.interval.ms", "queue.buffering.max.messages", "compression.level",
    "enable.gapless.guarantee", "sticky.partitioning.linger.ms", "queued.min.messages",
    "fetch.error.backoff.ms", "coordinator.query.interval.ms",
}


class Config(dict[str, Any]):
    """A resolved configuration: every known key present, typed."""


def resolve(conf: Mapping[str, Any], role: str) -> Config:
    """Apply aliases and defaults for ``role`` ('producer', 'consumer', 'share_consumer', 'admin')
    and validate."""
    known = dict(_COMMON)
    if role == "producer":
        known.update(_PRODUCER)
    elif role == "consumer":
        known.update(_CONSUMER)
    elif role == "share_consumer":
        known.update(_SHARE_CONSUMER)
    flat: dict[str, Any] = {}
    for key, value in conf.items():
        if key == "default.topic.config" and isinstance(value, Mapping):
            flat.update(value)
        else:
            flat[key] = value
    out = Config({k: spec.default for k, spec in known.items()})
    for key, value in flat.items():
        target = _ALIASES.get(key, key)
        if target is None:
            continue
        if role == "consumer" and key == "auto.offset.reset":
            target = key
        if target not in known:
            if target in _IGNORED or target in _PRODUCER or target in _CONSUMER or target in _SHARE_CONSUMER:
                continue  # another role's key (shared dicts are common) or a librdkafka knob
            log.warning("oncestream client: configuration property %r is not supported; ignored", key)
            continue
        try:
            out[target] = known[target].parse(value)
        except (TypeError, ValueError) as exc:
            raise KafkaException(KafkaError(_INVALID_ARG, f"invalid value for {key}: {exc}")) from None
    if not out["bootstrap.servers"]:
        raise KafkaException(KafkaError(_INVALID_ARG, "bootstrap.servers is required"))
    _check_security(out)
    return out


# The protocols this client speaks: TLS (client/common/tls.py) and SASL (client/common/sasl.py), alone or
# together (SASL over TLS).
_SECURITY_PROTOCOLS = ("plaintext", "ssl", "sasl_plaintext", "sasl_ssl")


def _check_security(out: Config) -> None:
    """A supported security.protocol with usable ssl.* (TLS ones) and sasl.* (SASL ones)
    settings: unreadable CA, certificate or key files and missing SASL credentials fail here,
    not at connect."""
    protocol = str(out["security.protocol"]).strip().lower()
    if protocol not in _SECURITY_PROTOCOLS:
        raise KafkaException(KafkaError(
            _INVALID_ARG, f"security.protocol={out['security.protocol']} is not supported "
                          f"({', '.join(_SECURITY_PROTOCOLS)})"))
    out["security.protocol"] = protocol
    try:
        ssl_context_for(out)
        SaslCredentials.from_config(out)
    except ValueError as exc:
        raise KafkaException(KafkaError(_INVALID_ARG, str(exc))) from None
