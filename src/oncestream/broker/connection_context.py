"""Per-connection facts handlers may need, carried in a context variable.

Each connection is served by its own asyncio task, and a task runs in its own copy of the
context, so setting the variable once per connection is enough. ``ConnectionSession`` is the one
place a connection's identity lives: the peer address, the listener it came in on, that
listener's security protocol, and the principal it authenticated as (``User:ANONYMOUS`` until
SASL or a TLS client certificate says otherwise, as in Kafka). Authorization reads the principal
and host from here; the principal comes from the broker's principal builder
(``principal.builder.class``, broker/principal.py) and nothing else decides who a client is.
"""

from __future__ import annotations

import contextvars
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from oncestream.broker.principal import (
    ANONYMOUS_PRINCIPAL,
    AuthenticationContext,
    DefaultKafkaPrincipalBuilder,
    KafkaPrincipalBuilder,
)


@dataclass
class ConnectionSession:
    """Who is on the other end of one connection, and how it reached us."""

    peer_host: str = ""
    listener_name: str = "PLAINTEXT"
    security_protocol: str = "PLAINTEXT"  # PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL
    principal: str = ANONYMOUS_PRINCIPAL
    authenticated: bool = False  # True once SASL completed (or not needed on this listener)
    # What the principal builder sees (broker/principal.py): the verified TLS client certificate,
    # the SASL identity once authenticated, the client.id (only for builders that read it).
    peer_certificate: Mapping[str, Any] | None = None
    sasl_mechanism: str | None = None
    sasl_authorization_id: str | None = None
    client_id: str | None = None
    # KIP-714 matching: the peer port, the software name and version of ApiVersions v3+.
    peer_port: int | None = None
    client_software_name: str | None = None
    client_software_version: str | None = None
    principal_builder: KafkaPrincipalBuilder | None = field(default=None, repr=False)
    # Whether the last Produce handled on this connection waited for an fsync round
    # (flush.messages): the server then pipelines the next ones (broker/produce_pipelining.py).
    produce_waited_for_disk: bool = False

    def authentication_context(self) -> AuthenticationContext:
        """The facts about this connection a principal builder is given."""
        return AuthenticationContext(
            security_protocol=self.security_protocol, listener_name=self.listener_name,
            client_address=self.peer_host, peer_certificate=self.peer_certificate,
            sasl_mechanism=self.sasl_mechanism, sasl_authorization_id=self.sasl_authorization_id,
            client_id=self.client_id)

    def principal_for(self, **changes: Any) -> str:
        """The principal the builder gives this connection with ``changes`` to its facts (the
        default builder without one); the session itself is not changed."""
        builder = self.principal_builder or DefaultKafkaPrincipalBuilder()
        context = self.authentication_context()
        if changes:
            context = dataclasses.replace(context, **changes)
        return builder.build(context)


_session: contextvars.ContextVar[ConnectionSession | None] = contextvars.ContextVar("session", default=None)


def start_session(peer: object, *, listener_name: str = "PLAINTEXT", security_protocol: str = "PLAINTEXT",
                  principal_builder: KafkaPrincipalBuilder | None = None,
                  peer_certificate: Mapping[str, Any] | None = None) -> ConnectionSession:
    """Create and install the session of the current connection task. A connection on a
    PLAINTEXT or SSL listener is authenticated now: its principal comes from the builder; on a
    SASL listener it stays anonymous until SASL completes."""
    host = peer[0] if isinstance(peer, tuple) and peer else str(peer or "")
    sasl = security_protocol.startswith("SASL_")
    session = ConnectionSession(peer_host=str(host), listener_name=listener_name,
                                security_protocol=security_protocol, authenticated=not sasl,
                                peer_certificate=peer_certificate, principal_builder=principal_builder)
    if isinstance(peer, tuple) and len(peer) > 1 and isinstance(peer[1], int):
        session.peer_port = peer[1]
    if not sasl:
        session.principal = session.principal_for()
    _session.set(session)
    return session


def set_peer(peer: object) -> None:
    """Record the peer address of the current connection task (a PLAINTEXT session)."""
    start_session(peer)


def current_session() -> ConnectionSession:
    """The session of the current connection task (an anonymous one outside any connection)."""
    session = _session.get()
    return session if session is not None else ConnectionSession()


def log_fields() -> dict[str, object]:
    """The current connection's fields for every log line it causes (logging_setup.ContextFilter):
    the client address, the listener and the principal; none outside a connection."""
    session = _session.get()
    if session is None:
        return {}
    client = f"{session.peer_host}:{session.peer_port}" if session.peer_port is not None else session.peer_host
    return {"client": client, "listener": session.listener_name, "principal": session.principal}


def client_host() -> str:
    """The peer host as Kafka shows it in DescribeGroups (``/1.2.3.4``)."""
    host = current_session().peer_host
    return f"/{host}" if host else ""
