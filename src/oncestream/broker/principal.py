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

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from oncestream.broker.connection_context import ANONYMOUS_PRINCIPAL
from oncestream.broker.tls import principal_from_certificate
from oncestream.errors import InvalidConfigError

PRINCIPAL_BUILDER_PROPERTY = "principal.builder.class"
# Kafka's default builder's class name: means ours, so a Kafka server.properties carries over.
KAFKA_DEFAULT_PRINCIPAL_BUILDER = "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder"


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
    module_name, sep, class_name = name.partition(":")
    if not sep:
        module_name, _, class_name = name.rpartition(".")
    if not module_name or not class_name:
        raise InvalidConfigError(f"{PRINCIPAL_BUILDER_PROPERTY}={name}: expected module:Class or module.Class")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise InvalidConfigError(f"{PRINCIPAL_BUILDER_PROPERTY}={name}: cannot load it: {exc}") from None
    builder: KafkaPrincipalBuilder = cls()
    if not callable(getattr(builder, "build", None)):
        raise InvalidConfigError(f"{PRINCIPAL_BUILDER_PROPERTY}={name}: the class has no build(context) method")
    configure = getattr(builder, "configure", None)
    if callable(configure):
        configure(dict(props))
    if not hasattr(builder, "reads_client_id"):
        builder.reads_client_id = False
    return builder
