"""Serve the REST app with hypercorn: HTTP/1.1 and HTTP/2 cleartext on one port.

hypercorn reads the first bytes of every plaintext connection: the HTTP/2 connection preface
(``PRI * HTTP/2.0``, "prior knowledge", what ksqlDB's Java client and ``httpx`` with
``http2=True, http1=False`` send) switches the connection to HTTP/2; anything else is HTTP/1.1
(including ``Upgrade: h2c``, which hypercorn also honours). So no configuration is needed for
h2c beyond not enabling TLS. With ``tls`` (an ``https://`` listener, rest/listener.py) the
socket speaks TLS instead, offering HTTP/2 and HTTP/1.1 through ALPN (hypercorn's defaults).

We bind the listening socket ourselves and hand it to hypercorn as ``fd://``: that is how a caller
binding port 0 learns the port (``ready(port)``) before the first request.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import Any, cast

from hypercorn.asyncio import serve as hypercorn_serve
from hypercorn.config import Config
from hypercorn.typing import ASGIFramework

from oncestream.sql.server.rest.app import KsqlRestApp
from oncestream.sql.server.rest.listener import TlsSettings

log = logging.getLogger(__name__)

# Any ASGI 3 application (hypercorn's own alias is stricter than what plain ASGI apps declare).
AsgiApp = Callable[[Any, Any, Any], Awaitable[None]]

# Seconds hypercorn waits for open connections after shutdown before cancelling them; streaming
# queries are ended first (KsqlRestApp.close_streams), so this only bounds slow non-streaming calls.
GRACEFUL_TIMEOUT_S = 5.0


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
                tls: TlsSettings | None = None) -> Config:
    """hypercorn's config for serving on an already bound ``sock`` (ownership passes to hypercorn),
    over TLS with ``tls``."""
    config = Config()
    config.bind = [f"fd://{sock.detach()}"]
    if tls is not None:
        tls.apply(config)
    config.graceful_timeout = graceful_timeout_s
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    # No Server header naming hypercorn: clients only care that the API is ksqlDB's.
    config.include_server_header = False
    # Push queries are long-lived responses; hypercorn's keep-alive timeout only applies to idle
    # connections between requests, so the default stays.
    return config


async def serve(app: AsgiApp, host: str, port: int, shutdown_event: asyncio.Event,
                ready: Callable[[int], None] | None = None, *,
                graceful_timeout_s: float = GRACEFUL_TIMEOUT_S, tls: TlsSettings | None = None,
                name: str = "SQL REST API") -> None:
    """Serve ``app`` on ``host:port`` (HTTP/1.1 and h2c; HTTPS with ``tls``) until ``shutdown_event``
    is set. ``app`` may wrap a ``KsqlRestApp`` (a middleware exposing the wrapped app as ``.app``);
    any other ASGI app is served the same way (the web console's); ``name`` is what the log says
    is listening.

    ``ready(port)`` is called with the bound port once the socket listens (connections made from
    then on are served). On shutdown, a ``KsqlRestApp`` first ends its streaming queries, then
    hypercorn stops accepting, lets requests in flight finish (at most ``graceful_timeout_s``),
    and returns."""
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
    rest_app = _rest_app(app)

    async def shutdown_trigger() -> None:
        await shutdown_event.wait()
        if rest_app is not None:
            await rest_app.close_streams()

    await hypercorn_serve(cast(ASGIFramework, app), config, shutdown_trigger=shutdown_trigger, mode="asgi")


def _rest_app(app: object) -> KsqlRestApp | None:
    """The ``KsqlRestApp`` that ``app`` is or wraps (through middlewares' ``.app``), if any."""
    for _ in range(8):
        if isinstance(app, KsqlRestApp):
            return app
        app = vars(app).get("app") if hasattr(app, "__dict__") else None
        if app is None:
            return None
    return None
