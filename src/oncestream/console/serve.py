"""Serve the console with hypercorn (the SQL server's HTTP server, its socket and TLS helpers):
HTTP/1.1 and h2c on one port, or HTTPS with a certificate and key."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable
from typing import Any, cast

from hypercorn.asyncio import serve as hypercorn_serve
from hypercorn.typing import ASGIFramework

from oncestream.console.settings import ConsoleSettings
from oncestream.sql.server.rest.listener import TlsSettings
from oncestream.sql.server.rest.serve import bind_socket, make_config

log = logging.getLogger(__name__)

# Seconds open requests get to finish at shutdown (a page answers in well under that).
GRACEFUL_TIMEOUT_S = 5.0


def tls_settings(settings: ConsoleSettings) -> TlsSettings | None:
    """The HTTPS listener's files, None for plain HTTP."""
    if not settings.tls_cert_file:
        return None
    return TlsSettings(keystore_location=settings.tls_cert_file, key_location=settings.tls_key_file)


async def serve(app: Any, settings: ConsoleSettings, shutdown_event: asyncio.Event,
                ready: Callable[[str], None] | None = None) -> None:
    """Serve ``app`` on the settings' listener until ``shutdown_event`` is set; ``ready(url)``
    once the socket listens (port 0 in the settings: the OS's choice, in the url)."""
    tls = tls_settings(settings)
    if tls is not None:
        tls.server_context()  # fail at start, naming the file, rather than at the first connection
    sock = bind_socket(settings.listen_host, settings.listen_port)
    port = int(sock.getsockname()[1])
    host = settings.listen_host if ":" not in settings.listen_host else f"[{settings.listen_host.strip('[]')}]"
    url = f"{'https' if tls else 'http'}://{host}:{port}"
    log.info("console listening on %s", url, extra={"bootstrap": settings.bootstrap_servers})
    if ready is not None:
        try:
            ready(url)
        except BaseException:
            sock.close()
            raise
    config = make_config(sock, graceful_timeout_s=GRACEFUL_TIMEOUT_S, tls=tls)
    await hypercorn_serve(cast(ASGIFramework, app), config, shutdown_trigger=shutdown_event.wait, mode="asgi")


def run(app: Any, settings: ConsoleSettings, ready: Callable[[str], None] | None = None) -> None:
    """Serve until SIGTERM or SIGINT (blocking)."""
    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve(app, settings, stop, ready)

    asyncio.run(main())
