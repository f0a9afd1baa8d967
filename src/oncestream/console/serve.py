"""Serve the console with hypercorn, as the SQL server's REST API is served
(``sql/server/rest/serve.py``: our own bound socket, so port 0 works; HTTP/1.1 and h2c, or HTTPS
with a certificate and key)."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from typing import Any

from oncestream.console.settings import ConsoleSettings
from oncestream.http_serve import serve as serve_asgi
from oncestream.sql.server.rest.listener import TlsSettings

# Seconds open requests get to finish at shutdown (a page answers in well under that).
GRACEFUL_TIMEOUT_S = 5.0


def tls_settings(settings: ConsoleSettings) -> TlsSettings | None:
    """The HTTPS listener's files, None for plain HTTP."""
    if not settings.tls_cert_file:
        return None
    return TlsSettings(keystore_location=settings.tls_cert_file, key_location=settings.tls_key_file)


def url_of(settings: ConsoleSettings, port: int) -> str:
    """The console's base url once bound on ``port``."""
    host = settings.listen_host
    if ":" in host:
        host = f"[{host.strip('[]')}]"
    return f"{'https' if settings.tls_cert_file else 'http'}://{host}:{port}"


async def serve(app: Any, settings: ConsoleSettings, shutdown_event: asyncio.Event,
                ready: Callable[[str], None] | None = None) -> None:
    """Serve ``app`` on the settings' listener until ``shutdown_event`` is set; ``ready(url)``
    once the socket listens (port 0 in the settings: the OS's choice, in the url)."""
    tls = tls_settings(settings)
    if tls is not None:
        tls.server_context()  # fail at start, naming the file, rather than at the first connection
    await serve_asgi(app, settings.listen_host, settings.listen_port, shutdown_event,
                     None if ready is None else lambda port: ready(url_of(settings, port)),
                     graceful_timeout_s=GRACEFUL_TIMEOUT_S, tls=tls, name="console")


def run(app: Any, settings: ConsoleSettings, ready: Callable[[str], None] | None = None) -> None:
    """Serve until SIGTERM or SIGINT (blocking)."""
    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve(app, settings, stop, ready)

    asyncio.run(main())
