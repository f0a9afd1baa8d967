"""``create_app``: the console's Starlette application, built from its page modules.

Every page module (``PAGES``: one module of ``oncestream.console.pages`` and its template per
page) contributes its ``routes``; ``auth.AuthGate`` stands in front of all of them, and
``/static`` serves the stylesheet and scripts. The modules are imported by name, not discovered
with importlib, so the import contracts see them; tests/unit/test_console_app.py fails when a
module of ``console/pages`` is missing from ``PAGES``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable
from types import ModuleType

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from oncestream.client import KafkaException
from oncestream.console.audit import AuditLog
from oncestream.console.auth import API_PREFIX, AuthGate, SessionStore, Users
from oncestream.console.kafka import ConsoleKafka
from oncestream.console.pages import acls, audit, groups, login, messages, overview, sql, topics, transactions
from oncestream.console.settings import ConsoleSettings
from oncestream.console.web import NAV, STATIC_DIR, ConsoleState, error_text, make_templates

# The page modules, each exporting ``routes: list[BaseRoute]``.
PAGES: tuple[ModuleType, ...] = (login, overview, topics, messages, groups, transactions, sql, acls, audit)


def page_routes() -> list[BaseRoute]:
    """The ``routes`` of every page module of ``PAGES``."""
    out: list[BaseRoute] = []
    for module in PAGES:
        routes = getattr(module, "routes", None)
        if not isinstance(routes, list) or not all(isinstance(r, BaseRoute) for r in routes):
            raise TypeError(f"{module.__name__}.routes must be a list of starlette routes")
        out.extend(routes)
    return out


async def _unexpected(request: Request, exc: Exception) -> Response:
    """A failure no page handled (e.g. the cluster unreachable during an API call): the error in
    words, JSON under /api/, text elsewhere; 502 when the cluster failed, else 500. Starlette
    still logs it as an error."""
    text = error_text(exc)
    status = 502 if isinstance(exc, KafkaException) else 500
    if request.url.path.startswith(API_PREFIX):
        return JSONResponse({"error": text}, status)
    return PlainTextResponse(f"The console failed: {text}", status)


def create_app(settings: ConsoleSettings, *, kafka: ConsoleKafka | None = None,
               clock: Callable[[], float] = time.time) -> Starlette:
    """The console for ``settings``. ``kafka`` is the cluster access (default: a ``ConsoleKafka``
    of ``settings``; closed with the app), ``clock`` the wall clock in seconds (sessions, audit
    times, lag samples)."""
    cluster = kafka if kafka is not None else ConsoleKafka(settings)
    routes = [*page_routes(), Mount("/static", app=StaticFiles(directory=str(STATIC_DIR)), name="static")]
    served = {r.path for r in routes if isinstance(r, Route)}
    sessions = SessionStore(clock, settings.session_max_age_s)
    console = ConsoleState(
        settings=settings, kafka=cluster, audit=AuditLog(lambda: int(clock() * 1000)), sessions=sessions,
        users=Users(settings.users_file), templates=make_templates(), clock_s=clock,
        nav=[(label, path) for label, path in NAV if path in served])

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await cluster.aclose()

    app = Starlette(routes=routes, middleware=[Middleware(AuthGate, sessions=sessions)], lifespan=lifespan,
                    exception_handlers={Exception: _unexpected})
    app.state.console = console
    return app
