"""Who a connection is: Kafka's pluggable principal builder (``principal.builder.class``).

The broker asks a ``KafkaPrincipalBuilder`` for a connection's principal once the connection has
authenticated: at accept time on PLAINTEXT and SSL listeners (after the TLS handshake), and when
SASL authentication (or re-authentication) completes on SASL listeners. The builder sees an
``AuthenticationContext``: the listener and its security protocol, the client's address, the
verified TLS peer certificate (if any), the SASL mechanism and authorization id (if any).

``principal.builder.class`` names the class as ``module:Class`` or ``module.Class``; it is built
with no arguments and, if it has a ``configure(props)`` method, given the broker properties (as
Kafka's ``Configurable``). Without the property (or with Kafka's own default class name) the
broker uses ``DefaultKafkaPrincipalBuilder``, Kafka's mapping: the SASL authorization id as
``User:<id>``; on SSL the client certificate's subject (``ssl.principal.mapping.rules=DEFAULT``,
broker/tls.py); ``User:ANONYMOUS`` otherwise.

A builder whose ``reads_client_id`` is true is asked again whenever an authenticated connection's
request header carries a client.id other than the one it last saw (``client_id`` in the context),
for identities that depend on it; the shipped builder does not read it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from oncestream.errors import InvalidConfigError
from oncestream.named_class import NamedClassError, load_named

ANONYMOUS_PRINCIPAL = "User:ANONYMOUS"
PRINCIPAL_BUILDER_PROPERTY = "principal.builder.class"
# Kafka's default builder's class name: means ours, so a Kafka server.properties carries over.
KAFKA_DEFAULT_PRINCIPAL_BUILDER = "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder"


# The attribute keywords RFC 2253 writes by name, keyed by the long names Python's getpeercert()
# uses. Java's X500Principal.getName() writes any other attribute as its OID with a hex-encoded
# value; for those we write the OID (when known) and the value as a string, documented here as
# the one departure.
_RFC2253_KEYWORDS = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
_KNOWN_OIDS = {
    "emailAddress": "1.2.840.113549.1.9.1",
    "serialNumber": "2.5.4.5",
    "title": "2.5.4.12",
    "surname": "2.5.4.4",
    "givenName": "2.5.4.42",
}


def _escape_rfc2253(value: str) -> str:
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;' or (ch == "#" and i == 0) or (ch == " " and (i == 0 or i == len(value) - 1)):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def rfc2253_name(subject: Sequence[Sequence[tuple[str, str]]]) -> str:
    """A distinguished name as ``getpeercert()['subject']`` gives it (RDNs in certificate order,
    each a tuple of (attribute, value)) in RFC 2253 form: most specific RDN first, ``+`` between
    the parts of a multi-valued RDN, special characters escaped."""
    rdns = []
    for rdn in reversed(list(subject)):
        parts = []
        for attribute, value in rdn:
            keyword = _RFC2253_KEYWORDS.get(attribute) or _KNOWN_OIDS.get(attribute) or attribute
            parts.append(f"{keyword}={_escape_rfc2253(value)}")
        rdns.append("+".join(parts))
    return ",".join(rdns)


def principal_from_certificate(peer_cert: Mapping[str, Any] | None) -> str:
    """Kafka's default SSL principal for a verified peer certificate (``getpeercert()``):
    ``User:<RFC 2253 subject>``; ``User:ANONYMOUS`` when the client sent none."""
    if not peer_cert or not peer_cert.get("subject"):
        return ANONYMOUS_PRINCIPAL
    return "User:" + rfc2253_name(peer_cert["subject"])


@dataclass(frozen=True)
class AuthenticationContext:
    """What the broker knows about an authenticated connection when it asks for its principal."""

    security_protocol: str               # PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL
    listener_name: str
    client_address: str                  # the peer's host (IP address)
    peer_certificate: Mapping[str, Any] | None = None  # getpeercert() of a verified client cert
    sasl_mechanism: str | None = None
    sasl_authorization_id: str | None = None           # the authenticated SASL user name
    client_id: str | None = None         # the latest request header's client.id (reads_client_id)


class KafkaPrincipalBuilder(Protocol):
    """Maps an authenticated connection to its principal (``User:NAME``)."""

    # True: build again when a request's client.id changes (the context then carries it).
    reads_client_id: bool

    def build(self, context: AuthenticationContext) -> str:
        """The principal of the connection ``context`` describes."""
        ...


class DefaultKafkaPrincipalBuilder:
    """Kafka's default mapping: SASL id, else the SSL client certificate's subject, else anonymous."""

    reads_client_id = False

    def build(self, context: AuthenticationContext) -> str:
        """``User:<SASL id>`` on SASL listeners; ``User:<RFC 2253 subject>`` on SSL with a client
        certificate; ``User:ANONYMOUS`` otherwise."""
        if context.security_protocol.startswith("SASL_"):
            if context.sasl_authorization_id is None:
                return ANONYMOUS_PRINCIPAL
            return f"User:{context.sasl_authorization_id}"
        if context.security_protocol == "SSL":
            return principal_from_certificate(context.peer_certificate)
        return ANONYMOUS_PRINCIPAL


def load_principal_builder(props: Mapping[str, str]) -> KafkaPrincipalBuilder:
    """The builder ``principal.builder.class`` names (the default one without it).
    InvalidConfigError when the class cannot be imported or lacks ``build``."""
    name = props.get(PRINCIPAL_BUILDER_PROPERTY, "").strip()
    if name in ("", KAFKA_DEFAULT_PRINCIPAL_BUILDER):
        return DefaultKafkaPrincipalBuilder()
    try:
        cls = load_named(name)
    except NamedClassError as exc:
        raise InvalidConfigError(f"{PRINCIPAL_BUILDER_PROPERTY}={name}: {exc}") from None
    builder: KafkaPrincipalBuilder = cls()
    if not callable(getattr(builder, "build", None)):
        raise InvalidConfigError(f"{PRINCIPAL_BUILDER_PROPERTY}={name}: the class has no build(context) method")
    configure = getattr(builder, "configure", None)
    if callable(configure):
        configure(dict(props))
    if not hasattr(builder, "reads_client_id"):
        builder.reads_client_id = False
    return builder
