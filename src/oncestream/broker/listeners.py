"""Listeners from Kafka's broker properties (sans-io: parsing only, no sockets).

``listeners=PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093`` names every endpoint the broker
binds; ``listener.security.protocol.map`` says which security protocol each listener name speaks
(Kafka's default map when absent: each of PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL maps to
itself; a given map replaces it whole, as in Kafka); ``advertised.listeners`` names what clients
are told per listener (a listener missing from it advertises its own host and port). Metadata
and FindCoordinator answer with the advertised endpoint of the listener the request came in on,
so a client that bootstrapped over SSL is never sent to the PLAINTEXT port.

Without ``listeners`` the broker has one PLAINTEXT listener on ``--listen HOST:PORT``.
Port 0 binds a port the OS picks; an advertised port of 0 stands for the bound port.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass

from oncestream.errors import InvalidConfigError

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = {name: name for name in SECURITY_PROTOCOLS}


@dataclass(frozen=True)
class Listener:
    """One endpoint the broker binds, and what it tells clients who came in through it."""

    name: str  # upper case, as Kafka normalises listener names
    host: str  # "" binds every interface (Kafka's meaning of an empty host)
    port: int  # 0 until bound, then the bound port
    security_protocol: str
    advertised_host: str
    advertised_port: int  # 0: the bound port

    @property
    def uses_tls(self) -> bool:
        """True for SSL and SASL_SSL listeners."""
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def advertised(self) -> tuple[str, int]:
        """Host and port a client that came in on this listener is told to use."""
        return self.advertised_host, self.advertised_port or self.port


def _split_endpoint(text: str, what: str) -> tuple[str, str, int]:
    """``NAME://host:port`` -> (NAME, host, port); IPv6 hosts in brackets."""
    name, sep, rest = text.strip().partition("://")
    if not sep or not name:
        raise InvalidConfigError(f"{what}: {text!r} is not NAME://HOST:PORT")
    host, colon, port_text = rest.rpartition(":")
    if not colon:
        raise InvalidConfigError(f"{what}: {text!r} has no port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port = int(port_text)
    except ValueError:
        raise InvalidConfigError(f"{what}: {text!r} has no numeric port") from None
    if not 0 <= port <= 65535:
        raise InvalidConfigError(f"{what}: port {port} out of range")
    return name.strip().upper(), host, port


def _parse_list(value: str, what: str) -> dict[str, tuple[str, int]]:
    out: dict[str, tuple[str, int]] = {}
    for item in value.split(","):
        if not item.strip():
            continue
        name, host, port = _split_endpoint(item, what)
        if name in out:
            raise InvalidConfigError(f"{what}: listener name {name} appears twice")
        out[name] = (host, port)
    return out


def parse_protocol_map(value: str | None) -> dict[str, str]:
    """``listener.security.protocol.map`` (``NAME:PROTOCOL,...``), Kafka's default when absent."""
    if not value:
        return dict(DEFAULT_PROTOCOL_MAP)
    out: dict[str, str] = {}
    for item in value.split(","):
        if not item.strip():
            continue
        name, sep, protocol = item.partition(":")
        protocol = protocol.strip().upper()
        if not sep or not name.strip():
            raise InvalidConfigError(f"listener.security.protocol.map: {item!r} is not NAME:PROTOCOL")
        if protocol not in SECURITY_PROTOCOLS:
            raise InvalidConfigError(
                f"listener.security.protocol.map: unknown security protocol {protocol!r} "
                f"(one of {', '.join(SECURITY_PROTOCOLS)})"
            )
        out[name.strip().upper()] = protocol
    return out


def _advertised_default_host(host: str) -> str:
    # Kafka advertises the canonical host name for a listener bound to every interface.
    return host if host not in ("", "0.0.0.0", "::") else socket.getfqdn()


def parse_listeners(props: Mapping[str, str], default_host: str, default_port: int) -> tuple[Listener, ...]:
    """The broker's listeners from its properties; ``--listen`` (``default_host:default_port``)
    makes the single PLAINTEXT listener when ``listeners`` is absent."""
    protocol_map = parse_protocol_map(props.get("listener.security.protocol.map"))
    given = props.get("listeners")
    bound = _parse_list(given, "listeners") if given else {"PLAINTEXT": (default_host, default_port)}
    if not bound:
        raise InvalidConfigError("listeners: no listener given")
    advertised_text = props.get("advertised.listeners")
    advertised: dict[str, tuple[str, int]] = {}
    if advertised_text:
        if not given:
            # The simple case (--listen, one PLAINTEXT listener): the first advertised endpoint
            # is what clients are told, whatever its name says, as before listeners existed.
            first = next(iter(_parse_list(advertised_text, "advertised.listeners").values()))
            advertised = {"PLAINTEXT": first}
        else:
            advertised = _parse_list(advertised_text, "advertised.listeners")
            unknown = sorted(set(advertised) - set(bound))
            if unknown:
                raise InvalidConfigError(f"advertised.listeners names listeners not in listeners: {unknown}")
    ports = [port for _, port in bound.values() if port]
    if len(ports) != len(set(ports)):
        raise InvalidConfigError("listeners: two listeners on the same port")
    out = []
    for name, (host, port) in bound.items():
        protocol = protocol_map.get(name)
        if protocol is None:
            raise InvalidConfigError(
                f"listener {name} has no security protocol in listener.security.protocol.map"
            )
        adv_host, adv_port = advertised.get(name, (_advertised_default_host(host), 0))
        if adv_host in ("0.0.0.0", "::"):
            raise InvalidConfigError(f"advertised.listeners: {name} cannot advertise the meta-address {adv_host}")
        out.append(Listener(name=name, host=host, port=port, security_protocol=protocol,
                            advertised_host=adv_host or _advertised_default_host(""), advertised_port=adv_port))
    return tuple(out)
