"""Per-connection facts handlers may need (the peer address), carried in a context variable.

Each connection is served by its own asyncio task, and a task runs in its own copy of the
context, so setting the variable once per connection is enough.
"""

from __future__ import annotations

import contextvars

_peer_host: contextvars.ContextVar[str] = contextvars.ContextVar("peer_host", default="")


def set_peer(peer: object) -> None:
    """Record the peer address of the current connection task."""
    host = peer[0] if isinstance(peer, tuple) and peer else str(peer or "")
    _peer_host.set(str(host))


def client_host() -> str:
    """The peer host as Kafka shows it in DescribeGroups (``/1.2.3.4``)."""
    host = _peer_host.get()
    return f"/{host}" if host else ""
