"""Serve the REST app with hypercorn: HTTP/1.1 and HTTP/2 cleartext on one port.

hypercorn reads the first bytes of every plaintext connection: the HTTP/2 connection preface
(``PRI * HTTP/2.0``, "prior knowledge", what ksqlDB's Java client and ``httpx`` with
``http2=True, http1=False`` send) switches the connection to HTTP/2; anything else is HTTP/1.1
(including ``Upgrade: h2c``, which hypercorn also honours). So no configuration is needed for
h2c beyond not enabling TLS. With ``tls`` (an ``https://`` listener, rest/listener.py) the
socket speaks TLS instead, offering HTTP/2 and HTTP/1.1 through ALPN (hypercorn's defaults).

The socket binding and hypercorn's config are oncestream/http_serve.py's (shared with the schema
registry and the web console).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from oncestream.http_serve import GRACEFUL_TIMEOUT_S, AsgiApp
from oncestream.http_serve import serve as serve_http
from oncestream.sql.server.rest.app import KsqlRestApp
from oncestream.sql.server.rest.listener import TlsSettings


async def serve(app: AsgiApp, host: str, port: int, shutdown_event: asyncio.Event,
                ready: Callable[[int], None] | None = None, *,
                graceful_timeout_s: float = GRACEFUL_TIMEOUT_S, tls: TlsSettings | None = None) -> None:
    """Serve ``app`` (a ``KsqlRestApp``, or a middleware wrapping one as ``.app``) with
    ``oncestream.http_serve.serve``; at shutdown its streaming queries end first, so the graceful
    timeout only bounds slow non-streaming calls. ``ready(port)`` as there."""
    rest_app = _rest_app(app)
    await serve_http(app, host, port, shutdown_event, ready, graceful_timeout_s=graceful_timeout_s, tls=tls,
                     name="SQL REST API", before_shutdown=rest_app.close_streams if rest_app is not None else None)


def _rest_app(app: object) -> KsqlRestApp | None:
    """The ``KsqlRestApp`` that ``app`` is or wraps (through middlewares' ``.app``), if any."""
    for _ in range(8):
        if isinstance(app, KsqlRestApp):
            return app
        app = vars(app).get("app") if hasattr(app, "__dict__") else None
        if app is None:
            return None
    return None
