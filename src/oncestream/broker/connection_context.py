"""Per-connection facts handlers may need, carried in a context variable.

Each connection is served by its own asyncio task, and a task runs in its own copy of the
context, so setting the variable once per connection is enough. ``ConnectionSession`` is the one
place a connection's identity lives: the peer address, the listener it came in on, that
listener's security protocol, and the principal it authenticated as (``User:ANONYMOUS`` until
SASL or a TLS client certificate says otherwise, as in Kafka). Authorization reads the principal
and host from here; nothing else decides who a client is.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass

ANONYMOUS_PRINCIPAL = "User:ANONYMOUS"


@dataclass
class ConnectionSession:
    """Who is on the other end of one connection, and how it reached us."""

    peer_host: str = ""
    listener_name: str = "PLAINTEXT"
    security_protocol: str = "PLAINTEXT"  # PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL
    principal: str = ANONYMOUS_PRINCIPAL
    authenticated: bool = False  # True once SASL completed (or not needed on this listener)


_session: contextvars.ContextVar[ConnectionSession | None] = contextvars.ContextVar("session", default=None)


def start_session(peer: object, *, listener_name: str = "PLAINTEXT",
                  security_protocol: str = "PLAINTEXT") -> ConnectionSession:
    """Create and install the session of the current connection task."""
    host = peer[0] if isinstance(peer, tuple) and peer else str(peer or "")
    session = ConnectionSession(peer_host=str(host), listener_name=listener_name,
                                security_protocol=security_protocol,
                                authenticated=not security_protocol.startswith("SASL_"))
    _session.set(session)
    return session


def set_peer(peer: object) -> None:
    """Record the peer address of the current connection task (a PLAINTEXT session)."""
    start_session(peer)


def current_session() -> ConnectionSession:
    """The session of the current connection task (an anonymous one outside any connection)."""
    session = _session.get()
    return session if session is not None else ConnectionSession()


def client_host() -> str:
    """The peer host as Kafka shows it in DescribeGroups (``/1.2.3.4``)."""
    host = current_session().peer_host
    return f"/{host}" if host else ""
