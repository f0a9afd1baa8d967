"""How a cluster broker connects to its peers: Kafka's inter-broker listener, SASL and TLS keys.

A broker of a cluster sends some requests to another broker (broker/peer_requests.py). It does
so as Kafka's brokers do, to the peer's endpoint of the **inter-broker listener**:

- ``inter.broker.listener.name``: a listener name of ``listeners``; or
  ``security.inter.broker.protocol``: the listener named after that protocol (Kafka's
  ``ListenerName.forSecurityProtocol``). Setting both is refused, as in Kafka. Neither: Kafka's
  default, the listener named ``PLAINTEXT``, and where there is none the first listener (Kafka
  refuses to start then; a cluster whose single listener has another name keeps working).
- **SASL** when that listener is SASL_PLAINTEXT or SASL_SSL: the mechanism is
  ``sasl.mechanism.inter.broker.protocol`` (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; Kafka's
  default GSSAPI is not supported, so it must be set) and must be enabled on the listener; the
  broker's own user name and password are the ``username`` and ``password`` options of the
  listener's JAAS config for that mechanism, looked up as Kafka does:
  ``listener.name.<listener>.<mechanism>.sasl.jaas.config``, then ``sasl.jaas.config``.
- **TLS** when that listener is SSL or SASL_SSL, with the listener's own stores
  (``listener.name.<listener>.`` prefix first, broker/tls.py's lookup): the peer's certificate is
  verified against ``ssl.truststore.location`` (PEM; the system's CAs without one), its host
  name checked unless ``ssl.endpoint.identification.algorithm`` is empty (Kafka's default
  ``https``), and the broker's ``ssl.keystore.location`` is its client certificate when the peer
  asks for one (``ssl.client.auth``).

The peer authorizes the connection as any other: WriteTxnMarkers and AddPartitionsToTxn v4+
need CLUSTER_ACTION on the cluster, so the broker's principal must be in ``super.users`` or have
that ACL. A bad or incomplete configuration is an ``InvalidConfigError`` at start, before any
store is touched.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass

from oncestream.broker.listeners import Listener
from oncestream.broker.sasl.exchange import SUPPORTED_MECHANISMS
from oncestream.broker.sasl.jaas import parse_jaas_options
from oncestream.broker.tls import enabled_versions, listener_property
from oncestream.errors import InvalidConfigError
from oncestream.protocol.sasl_client import MECHANISMS, SaslCredentials

LISTENER_NAME_KEY = "inter.broker.listener.name"
PROTOCOL_KEY = "security.inter.broker.protocol"
MECHANISM_KEY = "sasl.mechanism.inter.broker.protocol"
DEFAULT_LISTENER = "PLAINTEXT"  # Kafka's default security.inter.broker.protocol names it


@dataclass(frozen=True)
class InterBrokerSecurity:
    """The inter-broker listener and how to connect to a peer's endpoint of it."""

    listener_name: str
    security_protocol: str
    sasl: SaslCredentials | None = None
    ssl_context: ssl.SSLContext | None = None

    def describe(self) -> str:
        """One line for the start-up log (no secret)."""
        how = self.security_protocol
        if self.sasl is not None:
            how += f" {self.sasl.mechanism} as {self.sasl.username}"
        return f"listener {self.listener_name} ({how})"


def inter_broker_listener(props: Mapping[str, str], listeners: tuple[Listener, ...]) -> Listener:
    """The listener a peer is reached on (see the module docstring); InvalidConfigError when the
    keys name none of ``listeners`` or both keys are set."""
    by_name = {listener.name: listener for listener in listeners}
    name = (props.get(LISTENER_NAME_KEY) or "").strip().upper()
    protocol = (props.get(PROTOCOL_KEY) or "").strip().upper()
    if name and protocol:
        raise InvalidConfigError(f"only one of {LISTENER_NAME_KEY} and {PROTOCOL_KEY} may be set")
    if name or protocol:
        key = LISTENER_NAME_KEY if name else PROTOCOL_KEY
        listener = by_name.get(name or protocol)
        if listener is None:
            raise InvalidConfigError(f"{key}={name or protocol}: no listener of that name in listeners "
                                     f"({', '.join(by_name)})")
        return listener
    return by_name.get(DEFAULT_LISTENER, listeners[0])


def inter_broker_security(props: Mapping[str, str], listeners: tuple[Listener, ...]) -> InterBrokerSecurity:
    """Everything a peer connection needs, read and checked once at start (files loaded)."""
    listener = inter_broker_listener(props, listeners)
    protocol = listener.security_protocol
    sasl = _sasl_credentials(props, listener.name) if protocol.startswith("SASL_") else None
    context = _client_ssl_context(props, listener.name) if listener.uses_tls else None
    return InterBrokerSecurity(listener.name, protocol, sasl, context)


def _sasl_credentials(props: Mapping[str, str], listener_name: str) -> SaslCredentials:
    mechanism = (props.get(MECHANISM_KEY) or "").strip().upper()
    if not mechanism:
        raise InvalidConfigError(
            f"the inter-broker listener {listener_name} uses SASL: set {MECHANISM_KEY} (PLAIN, SCRAM-SHA-256 or "
            f"SCRAM-SHA-512; Kafka's default GSSAPI is not supported) and the broker's username and password in "
            f"listener.name.{listener_name.lower()}.<mechanism>.sasl.jaas.config")
    if mechanism not in MECHANISMS:
        raise InvalidConfigError(f"{MECHANISM_KEY}={mechanism}: supported are {', '.join(MECHANISMS)}")
    enabled_text = (listener_property(props, listener_name, "sasl.enabled.mechanisms")
                    or ",".join(SUPPORTED_MECHANISMS))  # the listener's default (broker/sasl/exchange.py)
    enabled = {item.strip().upper() for item in enabled_text.split(",") if item.strip()}
    if mechanism not in enabled:
        raise InvalidConfigError(f"{MECHANISM_KEY}={mechanism} must be one of the sasl.enabled.mechanisms of "
                                 f"listener {listener_name} ({', '.join(sorted(enabled))})")
    jaas = (listener_property(props, listener_name, f"{mechanism.lower()}.sasl.jaas.config")
            or listener_property(props, listener_name, "sasl.jaas.config"))
    options = parse_jaas_options(jaas) if jaas else {}
    username, password = options.get("username"), options.get("password")
    if not username or password is None:
        raise InvalidConfigError(
            f"the inter-broker listener {listener_name} uses {mechanism}: the broker's own credentials go in "
            f'listener.name.{listener_name.lower()}.{mechanism.lower()}.sasl.jaas.config as username="..." '
            'password="..."')
    return SaslCredentials(mechanism, username, password)


def _client_ssl_context(props: Mapping[str, str], listener_name: str) -> ssl.SSLContext:
    """The context of a TLS connection to a peer's endpoint of ``listener_name``."""

    def get(key: str) -> str | None:
        return listener_property(props, listener_name, key)

    for store in ("keystore", "truststore"):
        store_type = (get(f"ssl.{store}.type") or "PEM").strip().upper()
        if store_type != "PEM":
            raise InvalidConfigError(f"ssl.{store}.type={store_type}: only PEM stores are supported")
    lowest, highest = enabled_versions(get("ssl.enabled.protocols") or "TLSv1.2,TLSv1.3")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version, context.maximum_version = lowest, highest
    truststore = get("ssl.truststore.location")
    try:
        if truststore:
            context.load_verify_locations(cafile=truststore)
        else:
            context.load_default_certs()
    except (OSError, ssl.SSLError) as exc:
        raise InvalidConfigError(f"ssl.truststore.location={truststore}: cannot load CAs: {exc}") from exc
    keystore = get("ssl.keystore.location")
    if keystore:  # offered when the peer's listener asks for a client certificate
        try:
            context.load_cert_chain(keystore, password=get("ssl.key.password"))
        except (OSError, ssl.SSLError) as exc:
            raise InvalidConfigError(f"ssl.keystore.location={keystore}: cannot load key and certificate chain: "
                                     f"{exc}") from exc
    given = get("ssl.endpoint.identification.algorithm")
    algorithm = "https" if given is None else given.strip().lower()
    if algorithm not in ("https", ""):
        raise InvalidConfigError(f"ssl.endpoint.identification.algorithm={algorithm}: expected https or empty")
    # Kafka's default "https" checks the peer's certificate names the advertised host; an empty
    # value (set explicitly) checks only that a trusted CA signed it.
    context.check_hostname = algorithm == "https"
    return context
