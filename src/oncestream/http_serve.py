"""Serving an ASGI application with hypercorn on a socket we bind ourselves.

We bind the listening socket ourselves and hand it to hypercorn as ``fd://``: that is how a caller
binding port 0 learns the port (``ready(port)``) before the first request. Plaintext connections
speak HTTP/1.1 or HTTP/2 cleartext (hypercorn reads the connection preface); with ``tls`` the socket
speaks TLS, offering HTTP/2 and HTTP/1.1 through ALPN (hypercorn's defaults).

The SQL server's REST API, the schema registry and the web console are served through this one
module; it imports no server of its own, so each of them installs only what it needs.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, cast

from hypercorn.asyncio import serve as hypercorn_serve
from hypercorn.config import Config
from hypercorn.typing import ASGIFramework

log = logging.getLogger(__name__)

# Any ASGI 3 application (hypercorn's own alias is stricter than what plain ASGI apps declare).
AsgiApp = Callable[[Any, Any, Any], Awaitable[None]]

# Seconds hypercorn waits for open connections after shutdown before cancelling them.
GRACEFUL_TIMEOUT_S = 5.0


class TlsConfig(Protocol):
    """What turns a hypercorn config into an HTTPS one (sql/server/rest/listener.TlsSettings)."""

    def apply(self, config: Config) -> None:
        """Set the certificate, key and client-authentication options on ``config``."""
        ...


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: any free port), IPv6 when ``host`` is one."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def make_config(sock: socket.socket, *, graceful_timeout_s: float = GRACEFUL_TIMEOUT_S,
                tls: TlsConfig | None = None) -> Config:
    """hypercorn's config for serving on an already bound ``sock`` (ownership passes to hypercorn),
    over TLS with ``tls``."""
    config = Config()
    config.bind = [f"fd://{sock.detach()}"]
    if tls is not None:
        tls.apply(config)
    config.graceful_timeout = graceful_timeout_s
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    # No Server header naming hypercorn: clients need not know what serves them.
    config.include_server_header = False
    # Push queries are long-lived responses; hypercorn's keep-alive timeout only applies to idle
    # connections between requests, so the default stays.
    return config


async def serve(app: AsgiApp, host: str, port: int, shutdown_event: asyncio.Event,
                ready: Callable[[int], None] | None = None, *,
                graceful_timeout_s: float = GRACEFUL_TIMEOUT_S, tls: TlsConfig | None = None,
                name: str = "HTTP API", before_shutdown: Callable[[], Awaitable[None]] | None = None) -> None:
    """Serve ``app`` on ``host:port`` (HTTP/1.1 and h2c; HTTPS with ``tls``) until ``shutdown_event``
    is set; ``name`` is what the log says is listening.

    ``ready(port)`` is called with the bound port once the socket listens (connections made from
    then on are served). On shutdown ``before_shutdown`` runs first (e.g. ending streaming
    responses), then hypercorn stops accepting, lets requests in flight finish (at most
    ``graceful_timeout_s``), and returns."""
    sock = bind_socket(host, port)
    bound_port = int(sock.getsockname()[1])
    log.info("%s listening on %s:%d (%s)", name, host, bound_port,
             "HTTPS: HTTP/1.1 and h2" if tls is not None else "HTTP/1.1 and h2c")
    if ready is not None:
        try:
            ready(bound_port)
        except BaseException:
            sock.close()
            raise
    config = make_config(sock, graceful_timeout_s=graceful_timeout_s, tls=tls)

    async def shutdown_trigger() -> None:
        await shutdown_event.wait()
        if before_shutdown is not None:
            await before_shutdown()

    await hypercorn_serve(cast(ASGIFramework, app), config, shutdown_trigger=shutdown_trigger, mode="asgi")
